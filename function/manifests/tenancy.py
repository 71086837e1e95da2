"""What a pod spec a tenant writes may hold, where every tenant's pods share a namespace.

The pods the function builds from tenants' templates (a ModelDeployment's and a
ModelExperiment candidate's member templates, a ModelBackfill's and a gauntlet's
CronJob) all run in ``naming.REMOTE_NAMESPACE`` of a workload cluster, beside the token
Secret, cache PVC, result ConfigMap and ServiceAccount of every control-plane
namespace's ModelCache. Kubernetes lets a pod name any Secret, ConfigMap, PVC,
ServiceAccount or ResourceClaim of its own namespace, and no admission policy on the
workload cluster can tell one tenant's reference from another's. So
:func:`check_pod_access` refuses, where the tenant wrote it:

- a reference by name to an object the function owns there (names starting
  ``naming.REMOTE_OWN_PREFIX``): Secret and ConfigMap volumes and projections, the
  Secrets of volume plugins (CSI ``nodePublishSecretRef``, ``azureFile``, ``cephfs``,
  ``cinder``, ``flexVolume``, ``iscsi``, ``rbd``, ``scaleIO``, ``storageos``), env
  ``valueFrom`` and ``envFrom``, PVC volumes and the PVC an ephemeral volume is cloned
  from, ``serviceAccountName`` (and the deprecated ``serviceAccount``),
  ``imagePullSecrets``;
- ``resourceClaims[].resourceClaimName`` and ``resourceClaimTemplateName`` (and the
  1.26-1.30 ``source.`` forms): a tenant can create neither a ResourceClaim nor a
  ResourceClaimTemplate in that namespace, so an existing claim is another pod's and a
  claim template is the function's, another replica's (its name is public: a pod of
  another tenant's would allocate devices with that replica's selectors, devices no
  placement accounts for); a member template asks for devices through
  ``nodeSelector.devices``, the function writes the claim templates;
- pod labels under the domains whose labels select pods on the workload cluster:
  ``modelplane.ai`` (the function's Services select serving pods by
  ``naming.LABEL_SERVING``, its Deployments by ``naming.LABEL_WORKLOAD``; the names are
  public) and ``leaderworkerset.sigs.k8s.io`` (a LeaderWorkerSet's headless Service and
  its groups): a pod carrying another replica's value would take that replica's traffic;
- ``priorityClassName`` and ``priority``: a higher priority preempts (evicts) lower
  ones, another tenant's serving pods among them (since Kubernetes 1.17 the system
  classes are usable outside ``kube-system``);
- what the Pod Security Standards' Baseline policy forbids
  (https://kubernetes.io/docs/concepts/security/pod-security-standards/#baseline; the
  same controls as ``k8s.io/pod-security-admission/policy``): host namespaces,
  privileged and Windows host-process containers, capabilities beyond Baseline's list,
  ``hostPath`` volumes, host ports, a ``host`` in probes and lifecycle hooks, AppArmor
  ``Unconfined``, SELinux types other than the container ones and any SELinux user or
  role, ``procMount`` other than ``Default`` outside a user namespace, seccomp
  ``Unconfined``, sysctls outside the safe set (as of Kubernetes 1.37). Any of them gives a
  pod the node, and the node holds every tenant's Secrets and volumes.

The function's own additions (the cache mount, ``/dev/shm``, the flash loader) are not
checked: only what the tenant wrote. Parts of the wrong type are left to the shape
checks (this module skips them).
"""

from __future__ import annotations

from typing import Any

from function import API_GROUP
from function.core.errors import SpecError, excerpt, quoted
from function.naming import REMOTE_NAMESPACE, REMOTE_OWN_PREFIX

# Label prefixes whose pod labels select pods on the workload cluster: the function's
# own, and LeaderWorkerSet's (``experiment.modelplane.ai/`` labels, the candidate's, select
# nothing).
SELECTING_LABEL_DOMAINS = (API_GROUP, "leaderworkerset.sigs.k8s.io")

# Baseline: "Adding additional capabilities beyond those listed below must be disallowed."
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip
# Baseline: the "safe" sysctls a pod may set.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_slow_start_after_idle",
        "net.ipv4.tcp_notsent_lowat",
    }
)  # fmt: skip
# Baseline: SELinux types a pod may ask for ("" is unset).
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
# A pod's references to a ResourceClaim or a ResourceClaimTemplate of its namespace.
_CLAIM_REFS = ("resourceClaimName", "resourceClaimTemplateName")
_CLAIM_REFUSED = (
    "a tenant has no ResourceClaim or ResourceClaimTemplate in the workload cluster's "
    f"namespace {REMOTE_NAMESPACE}: the ones there are other pods' claims and the "
    "function's claim templates of every namespace's replicas (their names are public), "
    "whose devices are placed for those replicas only; remove the claim (a "
    "ModelDeployment's member asks for devices with nodeSelector.devices, and the "
    "function writes its claim templates)"
)
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_BASELINE = (
    "pods built from it share the workload cluster's namespace "
    f"{REMOTE_NAMESPACE} with every namespace's, and must meet the Pod Security Standards' "
    "Baseline policy (https://kubernetes.io/docs/concepts/security/pod-security-standards/)"
)


def check_pod_access(pod_spec: Any, field: str, pod_metadata: Any = None) -> None:
    """Refuse what a tenant's pod template may not hold (see the module's docstring).

    Args:
        pod_spec: A pod template's ``spec`` as the tenant wrote it (a dict; not changed).
        field: Its path, as the error names it (``spec.jobTemplate.spec.template.spec``).
        pod_metadata: The pod template's ``metadata``: its ``labels`` (the selecting
            domains) and ``annotations`` (AppArmor's annotation form); errors name
            ``<field without .spec>.metadata...``. Parts of the wrong type are skipped.

    Raises:
        SpecError: naming the first field that is refused, and what to write instead.
    """
    if not isinstance(pod_spec, dict):
        return
    meta = pod_metadata if isinstance(pod_metadata, dict) else {}
    _check_labels(meta.get("labels"), field.removesuffix(".spec"))
    for path, name, kind in _references(pod_spec, field):
        if isinstance(name, str) and name.startswith(REMOTE_OWN_PREFIX):
            raise SpecError(
                path,
                f"{quoted(name)} names a {kind} of the function's: names starting "
                f"{REMOTE_OWN_PREFIX} in the workload cluster's namespace {REMOTE_NAMESPACE} "
                "belong to the ModelCaches of every namespace (a ModelCache's volume is "
                "mounted by the function: spec.modelCacheRef); name one of your own",
            )
    for i, claim in _items(pod_spec.get("resourceClaims")):
        legacy = claim.get("source")  # Kubernetes 1.26-1.30: source.<key>
        for key in _CLAIM_REFS:
            named = (
                (key, claim.get(key)),
                (f"source.{key}", legacy.get(key) if isinstance(legacy, dict) else None),
            )
            for where, value in named:
                if value is not None:
                    raise SpecError(f"{field}.resourceClaims[{i}].{where}", _CLAIM_REFUSED)
    for key in ("priorityClassName", "priority"):
        if pod_spec.get(key) is not None:
            raise SpecError(
                f"{field}.{key}",
                "a pod's scheduling priority is the platform's: a higher one preempts "
                f"(evicts) other pods, the serving pods of every namespace in "
                f"{REMOTE_NAMESPACE} among them; remove it",
            )
    _check_host_access(pod_spec, field)
    _check_apparmor_annotations(meta.get("annotations"), field.removesuffix(".spec"))


def _check_labels(labels: Any, template: str) -> None:
    """No pod label whose prefix is one of :data:`SELECTING_LABEL_DOMAINS` (keys in
    sorted order: the smallest refused key is named, whatever order the map arrived in)."""
    if not isinstance(labels, dict):
        return
    for key in sorted(labels):
        prefix = key.partition("/")[0] if isinstance(key, str) and "/" in key else ""
        for domain in SELECTING_LABEL_DOMAINS:
            if prefix == domain:
                _refuse(
                    f"{template}.metadata.labels[{excerpt(key)}]",
                    f"labels under {domain}/ select pods on the workload cluster (the "
                    "function's Services and workloads, LeaderWorkerSet's headless Service), "
                    f"where every namespace's pods share {REMOTE_NAMESPACE}: remove it (the "
                    "function sets the labels its selectors need)",
                )


def _check_host_access(pod_spec: dict[str, Any], field: str) -> None:
    """Baseline's controls on the pod and each of its containers."""
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(key) is True:
            _refuse(f"{field}.{key}", "true shares the node's namespace: remove it or set false")
    for i, v in _items(pod_spec.get("volumes")):
        if v.get("hostPath") is not None:
            _refuse(f"{field}.volumes[{i}].hostPath", "mounts a node path: use emptyDir or a PVC")
    _check_security_context(pod_spec.get("securityContext"), f"{field}.securityContext")
    user_namespace = pod_spec.get("hostUsers") is False
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in _items(pod_spec.get(group)):
            _check_container(c, f"{field}.{group}[{i}]", user_namespace)


def _references(pod_spec: dict[str, Any], field: str) -> list[tuple[str, Any, str]]:
    """``(path, name, kind)`` of every reference by name the pod spec makes to a Secret,
    ConfigMap, PersistentVolumeClaim or ServiceAccount of its namespace."""
    out = [(f"{field}.{k}", pod_spec.get(k), "ServiceAccount") for k in _SERVICE_ACCOUNT]
    out += [
        (f"{field}.imagePullSecrets[{i}].name", ref.get("name"), "Secret")
        for i, ref in _items(pod_spec.get("imagePullSecrets"))
    ]
    for i, v in _items(pod_spec.get("volumes")):
        out += _named(v, f"{field}.volumes[{i}]", _VOLUME_REFS)
        for kind, ref_key in _VOLUME_SECRET_REFS:
            source = v.get(kind)
            if isinstance(source, dict):
                out += _named(
                    source, f"{field}.volumes[{i}].{kind}", ((ref_key, "name", "Secret"),)
                )
        out += _claim_sources(v.get("ephemeral"), f"{field}.volumes[{i}].ephemeral")
        projected = v.get("projected")
        sources = projected.get("sources") if isinstance(projected, dict) else None
        for j, source in _items(sources):
            out += _named(source, f"{field}.volumes[{i}].projected.sources[{j}]", _PROJECTED)
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in _items(pod_spec.get(group)):
            for j, e in _items(c.get("env")):
                source = e.get("valueFrom")
                if isinstance(source, dict):
                    path = f"{field}.{group}[{i}].env[{j}].valueFrom"
                    out += _named(source, path, _ENV_REFS)
            for j, e in _items(c.get("envFrom")):
                out += _named(e, f"{field}.{group}[{i}].envFrom[{j}]", _ENV_FROM_REFS)
    return out


# (object key, key of the name in it, kind): where a volume, a projection, an env entry's
# valueFrom and an envFrom entry name an object.
_VOLUME_REFS = (
    ("secret", "secretName", "Secret"),
    ("configMap", "name", "ConfigMap"),
    ("persistentVolumeClaim", "claimName", "PersistentVolumeClaim"),
    ("azureFile", "secretName", "Secret"),
)
# Volume sources that name a Secret through a ``LocalObjectReference`` (``{name}``):
# (source, its key), from the core/v1 Volume reference.
_VOLUME_SECRET_REFS = (
    ("csi", "nodePublishSecretRef"), ("cephfs", "secretRef"), ("cinder", "secretRef"),
    ("flexVolume", "secretRef"), ("iscsi", "secretRef"), ("rbd", "secretRef"),
    ("scaleIO", "secretRef"), ("storageos", "secretRef"),
)  # fmt: skip
_PROJECTED = (("secret", "name", "Secret"), ("configMap", "name", "ConfigMap"))
_ENV_REFS = (("secretKeyRef", "name", "Secret"), ("configMapKeyRef", "name", "ConfigMap"))
_ENV_FROM_REFS = (("secretRef", "name", "Secret"), ("configMapRef", "name", "ConfigMap"))
_SERVICE_ACCOUNT = ("serviceAccountName", "serviceAccount")  # the second: deprecated alias


def _claim_sources(ephemeral: Any, path: str) -> list[tuple[str, Any, str]]:
    """The PVC an ephemeral volume's claim is cloned from (``dataSource``,
    ``dataSourceRef`` of kind PersistentVolumeClaim, core API group): a copy of a cache."""
    template = ephemeral.get("volumeClaimTemplate") if isinstance(ephemeral, dict) else None
    spec = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(spec, dict):
        return []
    out = []
    for key in ("dataSource", "dataSourceRef"):
        ref = spec.get(key)
        if (
            isinstance(ref, dict)
            and ref.get("kind") == "PersistentVolumeClaim"
            and ref.get("apiGroup") in (None, "")
        ):
            where = f"{path}.volumeClaimTemplate.spec.{key}.name"
            out.append((where, ref.get("name"), "PersistentVolumeClaim"))
    return out


def _named(
    obj: dict[str, Any], path: str, refs: tuple[tuple[str, str, str], ...]
) -> list[tuple[str, Any, str]]:
    return [
        (f"{path}.{key}.{name_key}", obj[key].get(name_key), kind)
        for key, name_key, kind in refs
        if isinstance(obj.get(key), dict)
    ]


def _check_container(c: dict[str, Any], path: str, user_namespace: bool) -> None:
    """Baseline's controls on one container (``user_namespace``: the pod's ``hostUsers``
    is false, where any ``procMount`` is allowed)."""
    for j, port in _items(c.get("ports")):
        if port.get("hostPort") not in (None, 0):
            _refuse(f"{path}.ports[{j}].hostPort", "binds a node port: remove it (or write 0)")
    _check_handler_hosts(c, path)
    sc = c.get("securityContext")
    _check_security_context(sc, f"{path}.securityContext")
    if not isinstance(sc, dict):
        return
    if sc.get("privileged") is True:
        _refuse(f"{path}.securityContext.privileged", "true is refused: remove it or set false")
    if sc.get("procMount") not in (None, "Default") and not user_namespace:
        _refuse(
            f"{path}.securityContext.procMount",
            "must be Default (or absent), unless the pod sets hostUsers: false",
        )
    caps = sc.get("capabilities")
    for j, cap in _items(caps.get("add") if isinstance(caps, dict) else None, dict_only=False):
        if isinstance(cap, str) and cap not in BASELINE_CAPABILITIES:
            allowed = ", ".join(sorted(BASELINE_CAPABILITIES))
            _refuse(
                f"{path}.securityContext.capabilities.add[{j}]",
                f"{quoted(cap)} is beyond Baseline's capabilities ({allowed})",
            )


def _check_handler_hosts(c: dict[str, Any], path: str) -> None:
    """Baseline (1.34 on): probes and lifecycle hooks name no ``host`` (the kubelet would
    call it from the node's network)."""
    handlers = [(f"{path}.{k}", c.get(k)) for k in _PROBES]
    lifecycle = c.get("lifecycle")
    if isinstance(lifecycle, dict):
        handlers += [(f"{path}.lifecycle.{k}", lifecycle.get(k)) for k in _HOOKS]
    for where, handler in handlers:
        if not isinstance(handler, dict):
            continue
        for action in ("httpGet", "tcpSocket"):
            got = handler.get(action)
            if isinstance(got, dict) and got.get("host") not in (None, ""):
                _refuse(f"{where}.{action}.host", "is refused: remove it (the pod's IP is used)")


_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_HOOKS = ("postStart", "preStop")


def _check_security_context(sc: Any, path: str) -> None:
    """The controls a pod's and a container's securityContext share."""
    if not isinstance(sc, dict):
        return
    windows = sc.get("windowsOptions")
    if isinstance(windows, dict) and windows.get("hostProcess") is True:
        _refuse(f"{path}.windowsOptions.hostProcess", "true is refused: remove it or set false")
    for key in ("seccompProfile", "appArmorProfile"):
        profile = sc.get(key)
        if isinstance(profile, dict) and profile.get("type") == "Unconfined":
            _refuse(f"{path}.{key}.type", "Unconfined is refused: write RuntimeDefault")
    _check_selinux(sc.get("seLinuxOptions"), f"{path}.seLinuxOptions")
    for j, sysctl in _items(sc.get("sysctls")):
        name = sysctl.get("name")
        if isinstance(name, str) and name not in SAFE_SYSCTLS:
            _refuse(f"{path}.sysctls[{j}].name", f"{name} is not one of Baseline's safe sysctls")


def _check_selinux(se: Any, path: str) -> None:
    if not isinstance(se, dict):
        return
    if se.get("type") not in (None, *SELINUX_TYPES):
        types = ", ".join(sorted(SELINUX_TYPES - {""}))
        _refuse(f"{path}.type", f"{se.get('type')} is refused: write one of {types}")
    for key in ("user", "role"):
        if se.get(key) not in (None, ""):
            _refuse(f"{path}.{key}", "may not be set: remove it")


def _check_apparmor_annotations(annotations: Any, template: str) -> None:
    """AppArmor's annotation form: ``runtime/default`` or ``localhost/<profile>`` only.

    Keys are checked in sorted order: the refused key named is the smallest, whatever
    order the map arrived in (review 19b F2).
    """
    if not isinstance(annotations, dict):
        return
    for key in sorted(annotations):
        value = annotations[key]
        if (
            isinstance(key, str)
            and key.startswith(_APPARMOR_ANNOTATION)
            and isinstance(value, str)
            and value not in ("", "runtime/default")
            and not value.startswith("localhost/")
        ):
            _refuse(
                f"{template}.metadata.annotations[{key}]",
                f"{value} is refused: write runtime/default",
            )


def _refuse(path: str, what: str) -> None:
    raise SpecError(path, f"{what} ({_BASELINE})")


def _items(value: Any, *, dict_only: bool = True) -> list[tuple[int, Any]]:
    """``(index, item)`` of a list (its dict items only, unless ``dict_only`` is False);
    nothing for anything else."""
    if not isinstance(value, list):
        return []
    return [(i, x) for i, x in enumerate(value) if not dict_only or isinstance(x, dict)]
