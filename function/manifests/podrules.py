"""What a workload cluster's API server refuses in a pod template a tenant wrote.

A member's pod template reaches the workload cluster inside a provider-kubernetes
Object (a Deployment, or a LeaderWorkerSet whose StatefulSets carry it). Where the API
server refuses it, every replica composed from it sits in ``Starting`` until
provider-kubernetes reports the remote apply error, which names no field the tenant
wrote. So the kinds that write member templates (ModelDeployment, a ModelExperiment's
candidate) and the ModelReplica refuse, where the tenant wrote it, what
``k8s.io/kubernetes/pkg/apis/core/validation`` (Kubernetes 1.34: ``ValidatePodTemplateSpec``
and what it calls) refuses in the parts of a pod template the function copies:

- ``metadata.labels``: qualified-name keys, label values (``ValidateLabels``);
  ``metadata.annotations``: qualified-name keys once lowercased (Go's
  ``strings.ToLower``: :func:`function.core.k8svalidation.go_lower`), 256 KiB in all
  (``ValidateAnnotations``);
- ``spec.volumes[]``: a DNS-1123 label ``name``, unique, and a volume source
  (``ValidateVolumes``; only a volume with no source at all is refused here, so a
  source type newer than this code is never refused);
- ``spec.containers[]`` and ``spec.initContainers[]``: a DNS-1123 label ``name``, unique
  across both lists (``validateContainers``, ``validateInitContainers``); an ``image``
  (``validateContainerCommon``) without leading or trailing whitespace as Go's
  ``strings.TrimSpace`` has it (:func:`function.core.k8svalidation.go_trim_space`;
  refused in the pods the workload creates: ``validateContainerOnlyForPod``);
  ``ports[].name`` an IANA service name, unique in the container
  (``validateContainerPorts``); ``env[].name`` and
  ``envFrom[].prefix`` environment variable names (``ValidateEnv``, ``ValidateEnvFrom``
  with the relaxed rule of 1.34, :func:`function.core.k8svalidation.env_name_problem`);
  ``volumeMounts[]``: a ``name`` that is a volume of the pod, a ``mountPath`` unique in
  the container (``ValidateVolumeMounts``);
- ``spec.serviceAccountName``: a DNS-1123 subdomain (``ValidateServiceAccountName``);
  ``spec.hostname`` and ``spec.subdomain``: DNS-1123 labels;
- ``spec.nodeSelector``: qualified-name keys, label values;
- ``spec.tolerations`` (and the deployment-level tolerations the function adds to every
  pod, :func:`check_tolerations`): ``ValidateTolerations``.

``imagePullSecrets[].name`` is not checked: the API server does not validate it (only
that ``name`` is the one field set), so a name no Secret can have is the kubelet's
"secret not found", as Kubernetes has it.

The rules themselves are :mod:`function.core.k8svalidation`. Parts of the wrong type
are left to the shape checks (this module skips them); the function's own additions
are not checked (only what the tenant wrote). Messages quote a bounded excerpt of the
value (:func:`function.core.errors.quoted`) and say what to write.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from function.core import k8svalidation as k8s
from function.core.errors import SpecError, excerpt, quoted, written_as

_REFUSED = "the workload cluster's API server refuses it"
_OPERATORS = ("Equal", "Exists")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
_GROUPS = ("containers", "initContainers")


def check_pod_rules(template: Any, field: str, own_volumes: Iterable[str] = ()) -> None:
    """Refuse what the workload cluster's API server refuses in a member's pod template
    (see the module's docstring), in the order it is listed there.

    Args:
        template: The pod template (``metadata``, ``spec``) as the tenant wrote it (a
            dict; not changed).
        field: Its path, as the error names it
            (``spec.template.spec.engines[0].members[0].template``).
        own_volumes: Volume names the function adds to the pod: a mount may name them.

    Raises:
        SpecError: naming the first field that is refused (for example
            ``<field>.spec.volumes[0].name``), quoting a bounded excerpt of its value,
            and saying what to write.
    """
    if not isinstance(template, dict):
        return
    meta = template.get("metadata")
    if isinstance(meta, dict):
        _check_labels(meta.get("labels"), f"{field}.metadata.labels")
        _check_annotations(meta.get("annotations"), f"{field}.metadata.annotations")
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return
    volumes = _check_volumes(spec.get("volumes"), f"{field}.spec.volumes")
    _check_containers(spec, f"{field}.spec", volumes | set(own_volumes))
    _check_pod_fields(spec, f"{field}.spec")


def check_tolerations(tolerations: Any, field: str) -> None:
    """``ValidateTolerations`` over a list of tolerations (a pod's, or a deployment's that
    the function adds to every pod): a non-empty ``key`` a qualified name; an empty key
    only with operator ``Exists``; ``tolerationSeconds`` only with effect ``NoExecute``;
    with ``Exists`` no ``value``, with ``Equal`` (or no operator) a label value; the
    operator ``Equal`` or ``Exists`` (``Lt`` and ``Gt`` are 1.35's, behind a feature gate
    off by default), the effect ``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute`` (or
    none: every effect).

    Raises:
        SpecError: naming the first refused field (``<field>[0].key``).
    """
    for i, t in _items(tolerations):
        path = f"{field}[{i}]"
        key = t.get("key") or ""
        op = t.get("operator") or "Equal"
        value = t.get("value") or ""
        effect = t.get("effect") or ""
        if isinstance(key, str) and key:
            _require(key, k8s.qualified_name_problem(key), f"{path}.key", "a toleration key")
        elif op != "Exists":
            _refuse(
                f"{path}.operator",
                "an empty key matches every taint only with operator Exists: set a key, "
                "or operator: Exists",
            )
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            _refuse(
                f"{path}.effect",
                "tolerationSeconds applies to effect NoExecute only: set effect: NoExecute, "
                "or remove tolerationSeconds",
            )
        if op not in _OPERATORS:
            what = f"{_shown(op)} is not a toleration operator: write Equal or Exists"
            _refuse(f"{path}.operator", what)
        if effect not in _EFFECTS:
            _refuse(
                f"{path}.effect",
                f"{_shown(effect)} is not a taint effect: write NoSchedule, PreferNoSchedule "
                "or NoExecute, or leave it out (every effect)",
            )
        if not isinstance(value, str):
            continue
        if op == "Exists" and value:
            _refuse(
                f"{path}.value",
                f"{quoted(value)}: operator Exists takes no value: remove it, or use "
                "operator: Equal",
            )
        elif op == "Equal":
            _require(value, k8s.label_value_problem(value), f"{path}.value", "a toleration value")


def _check_labels(labels: Any, field: str) -> None:
    """Qualified-name keys and label values (``ValidateLabels``): the template's labels
    and its ``nodeSelector``."""
    if not isinstance(labels, dict):
        return
    for key, value in labels.items():
        path = f"{field}[{_key(key)}]"
        _require(key, k8s.qualified_name_problem(key), path, "a key")
        if isinstance(value, str):
            _require(value, k8s.label_value_problem(value), path, "the value")


def _check_annotations(annotations: Any, field: str) -> None:
    if not isinstance(annotations, dict):
        return
    for key in annotations:
        problem = k8s.qualified_name_problem(k8s.go_lower(key))
        _require(key, problem, f"{field}[{_key(key)}]", "a key")
    strings = {k: v for k, v in annotations.items() if isinstance(v, str)}
    size = k8s.annotations_bytes(strings)
    if size > k8s.ANNOTATIONS_MAX_BYTES:
        _refuse(
            field,
            f"{size} bytes of keys and values, past the {k8s.ANNOTATIONS_MAX_BYTES} "
            "(256 KiB) a pod template may carry: shorten or remove some",
        )


def _check_volumes(volumes: Any, field: str) -> set[str]:
    """Names (DNS-1123 labels, unique) and a source for each volume; the names."""
    seen: dict[str, int] = {}
    for i, v in _items(volumes):
        name = v.get("name")
        if not isinstance(name, str):
            continue
        path = f"{field}[{i}].name"
        _require_label(name, path, "a volume name")
        if name in seen:
            _refuse(
                path,
                f"{quoted(name)} is also the name of volumes[{seen[name]}]: volume names are "
                "unique in a pod; rename one",
            )
        seen[name] = i
        if not any(value is not None for key, value in v.items() if key != "name"):
            _refuse(
                f"{field}[{i}]",
                f"volume {quoted(name)} has no source: add one (emptyDir: {{}}, configMap, "
                "secret, persistentVolumeClaim, ...)",
            )
    return set(seen)


def _check_containers(spec: dict[str, Any], field: str, volumes: set[str]) -> None:
    names: dict[str, str] = {}  # name -> the first container's path
    for group in _GROUPS:
        for i, c in _items(spec.get(group)):
            path = f"{field}.{group}[{i}]"
            name = c.get("name")
            if isinstance(name, str):
                _require_label(name, f"{path}.name", "a container name")
                if name in names:
                    _refuse(
                        f"{path}.name",
                        f"{quoted(name)} is also the name of {names[name]}: container names "
                        "are unique across containers and initContainers; rename one",
                    )
                names[name] = f"{group}[{i}]"
            _check_image(c.get("image"), f"{path}.image")
            _check_ports(c.get("ports"), f"{path}.ports")
            for j, e in _items(c.get("env")):
                env = e.get("name")
                if isinstance(env, str):
                    _require(env, k8s.env_name_problem(env), f"{path}.env[{j}].name", "an env name")
            for j, e in _items(c.get("envFrom")):
                prefix = e.get("prefix")
                if isinstance(prefix, str) and prefix:
                    where = f"{path}.envFrom[{j}].prefix"
                    _require(prefix, k8s.env_name_problem(prefix), where, "an env prefix")
            _check_mounts(c.get("volumeMounts"), f"{path}.volumeMounts", volumes)


def _check_image(image: Any, path: str) -> None:
    if image is None or image == "":
        _refuse(path, "is required: the container's image (for example vllm/vllm-openai:latest)")
    if isinstance(image, str) and image != k8s.go_trim_space(image):
        _refuse(
            path,
            f"{quoted(image)} has leading or trailing whitespace, which the API server "
            "refuses in the pods the workload creates: remove it",
        )


def _check_ports(ports: Any, field: str) -> None:
    seen: dict[str, int] = {}
    for j, p in _items(ports):
        name = p.get("name")
        if not isinstance(name, str) or not name:
            continue
        path = f"{field}[{j}].name"
        _require(name, k8s.port_name_problem(name), path, "a port name")
        if name in seen:
            _refuse(
                path,
                f"{quoted(name)} is also the name of ports[{seen[name]}]: port names are "
                "unique in a container; rename one",
            )
        seen[name] = j


def _check_mounts(mounts: Any, field: str, volumes: set[str]) -> None:
    paths: dict[str, int] = {}
    for j, m in _items(mounts):
        name, mount_path = m.get("name"), m.get("mountPath")
        if isinstance(name, str) and name not in volumes:
            _refuse(
                f"{field}[{j}].name",
                f"{quoted(name)} is not the name of a volume of the pod: add a volume of "
                "that name to spec.volumes, or mount one of those there",
            )
        if not isinstance(mount_path, str):
            continue
        if mount_path in paths:
            _refuse(
                f"{field}[{j}].mountPath",
                f"{quoted(mount_path)} is also the mountPath of "
                f"volumeMounts[{paths[mount_path]}]: a container mounts one volume at a "
                "path; mount this one elsewhere",
            )
        paths[mount_path] = j


def _check_pod_fields(spec: dict[str, Any], field: str) -> None:
    account = spec.get("serviceAccountName")
    if isinstance(account, str) and account:
        problem = k8s.dns1123_subdomain_problem(account)
        _require(account, problem, f"{field}.serviceAccountName", "a ServiceAccount name")
    for key in ("hostname", "subdomain"):
        value = spec.get(key)
        if isinstance(value, str) and value:
            _require_label(value, f"{field}.{key}", f"a pod {key}")
    _check_labels(spec.get("nodeSelector"), f"{field}.nodeSelector")
    check_tolerations(spec.get("tolerations"), f"{field}.tolerations")


def _require(value: str, problem: str | None, path: str, what: str) -> None:
    """Refuse ``value`` at ``path`` when ``problem`` (a rule's verdict) is not None."""
    if problem is not None:
        _refuse(path, f"{quoted(value)} is not valid as {what}: it {problem}")


def _require_label(value: str, path: str, what: str) -> None:
    if k8s.dns1123_label_problem(value) is not None:
        _refuse(
            path,
            f"{quoted(value)} is not valid as {what}: it must be {k8s.DNS1123_LABEL_RULE}; "
            f"write, for example, {k8s.suggest_label(value)!r}",
        )


def _refuse(path: str, what: str) -> None:
    raise SpecError(path, f"{what} ({_REFUSED})")


def _shown(value: Any) -> str:
    """A value of any type as a message quotes it (strings bounded:
    :func:`~function.core.errors.quoted`)."""
    return quoted(value) if isinstance(value, str) else written_as(value)


def _key(key: str) -> str:
    """A map key as a path shows it: bounded, without quotes
    (:func:`~function.core.errors.excerpt`)."""
    return excerpt(key)


def _items(value: Any) -> list[tuple[int, dict[str, Any]]]:
    """``(index, item)`` of a list's dict items; nothing for anything else."""
    if not isinstance(value, list):
        return []
    return [(i, x) for i, x in enumerate(value) if isinstance(x, dict)]
