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
  source type newer than this code is never refused); an ``emptyDir.sizeLimit`` that
  decodes as a quantity and is not negative (``validateVolumeSource``);
- ``spec.containers[]`` and ``spec.initContainers[]``: a DNS-1123 label ``name``, unique
  across both lists (``validateContainers``, ``validateInitContainers``); an ``image``
  (``validateContainerCommon``) without leading or trailing whitespace as Go's
  ``strings.TrimSpace`` has it (:func:`function.core.k8svalidation.go_trim_space`;
  refused in the pods the workload creates: ``validateContainerOnlyForPod``);
  ``ports[].name`` an IANA service name, unique in the container
  (``validateContainerPorts``); ``env[].name`` and
  ``envFrom[].prefix`` environment variable names (``ValidateEnv``, ``ValidateEnvFrom``
  with the relaxed rule of 1.34, :func:`function.core.k8svalidation.env_name_problem`);
  ``volumeMounts[]``: a ``name`` that is a volume of the pod, a ``mountPath`` (required)
  unique in the container, a ``subPath`` or ``subPathExpr`` (not both) relative and
  without a ``..`` element (``ValidateVolumeMounts``, ``validateLocalDescendingPath``);
  ``resources.limits`` and ``resources.requests`` (``ValidateResourceRequirements``, as
  ``ValidateContainerResourceRequirements`` applies it): container resource names
  (``validateContainerResourceName``), quantities the API server decodes
  (``resource.ParseQuantity``, :func:`function.core.k8svalidation.decode_quantity`:
  ``16gb`` is none, ``Gi`` alone is 0) and not negative, whole numbers for an
  extended resource (``nvidia.com/gpu``; ``ValidateResourceQuantityValue``), a request at
  most its limit, equal to it for a resource that cannot be overcommitted (extended
  resources, hugepages: ``IsOvercommitAllowed``), which needs a limit once requested,
  and hugepages only with cpu or memory (not checked: hugepages a multiple of their
  page size, ``resources.claims``, which the function writes);
  ``livenessProbe``, ``readinessProbe``, ``startupProbe`` (on an init container only
  with ``restartPolicy: Always``: ``validateInitContainers``): exactly one handler of
  exec (with a command), httpGet, tcpSocket, grpc (``validateHandler``), its port a
  number 1..65535 or (not grpc) an IANA service name (``ValidatePortNumOrName``), an
  httpGet scheme HTTP or HTTPS and header names, counts not negative,
  ``successThreshold`` 1 for liveness and startup, ``terminationGracePeriodSeconds``
  greater than 0 and not on a readiness probe (``validateProbe``,
  ``validateLivenessProbe``, ``validateReadinessProbe``, ``validateStartupProbe``);
- ``spec.serviceAccountName``: a DNS-1123 subdomain (``ValidateServiceAccountName``);
  ``spec.hostname`` and ``spec.subdomain``: DNS-1123 labels;
- ``spec.nodeSelector``: qualified-name keys, label values;
- ``spec.tolerations`` (and the deployment-level tolerations the function adds to every
  pod, :func:`check_tolerations`): ``ValidateTolerations``.

``imagePullSecrets[].name`` is not checked: the API server does not validate it (only
that ``name`` is the one field set), so a name no Secret can have is the kubelet's
"secret not found", as Kubernetes has it.

The rules themselves are :mod:`function.core.k8svalidation`. Parts of the wrong type
are left to the shape checks (this module skips them), but for a quantity and a probe
port, whose every value of another type the API server's decoder refuses (``true``, an
object): refused here; the function's own additions are not checked (only what the
tenant wrote). Messages quote a bounded excerpt of the
value (:func:`function.core.errors.quoted`) and say what to write.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, NoReturn, TypeGuard

from function.core import k8svalidation as k8s
from function.core.errors import SpecError, excerpt, quoted, written_as
from function.core.memo import memo

_REFUSED = "the workload cluster's API server refuses it"
_OPERATORS = ("Equal", "Exists")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
_GROUPS = ("containers", "initContainers")
# A container's standard resources (IsStandardContainerResourceName), and the prefix of
# hugepages of one size (hugepages-2Mi); a name with a "/" is an extended resource
# (nvidia.com/gpu) unless it is native (a "kubernetes.io/" one).
_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_HUGEPAGES = "hugepages-"
_NATIVE = "kubernetes.io/"
_QUANTITY_RULE = (
    "a Kubernetes quantity: a number and an optional suffix, binary Ki, Mi, Gi, Ti, Pi, "
    "Ei or decimal m, k, M, G, T, P, E (16Gi, 500m, 1e3, 0.5)"
)
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_PROBE_COUNTS = (
    "initialDelaySeconds",
    "timeoutSeconds",
    "periodSeconds",
    "successThreshold",
    "failureThreshold",
)
_SCHEMES = ("", "HTTP", "HTTPS")  # "" is defaulted to HTTP
_HEADER_NAME = re.compile(r"^[-A-Za-z0-9]+\Z")  # IsHTTPHeaderName


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
    and its ``nodeSelector``, in sorted key order: the wrong key named is the smallest,
    whatever order the map arrived in (review 19b F2)."""
    if not isinstance(labels, dict):
        return
    for key in sorted(labels):
        value = labels[key]
        path = f"{field}[{_key(key)}]"
        _require(key, k8s.qualified_name_problem(key), path, "a key")
        if isinstance(value, str):
            _require(value, k8s.label_value_problem(value), path, "the value")


def _check_annotations(annotations: Any, field: str) -> None:
    """Qualified-name keys (in sorted order, as :func:`_check_labels`) and the size of
    the keys and values (``ValidateAnnotations``)."""
    if not isinstance(annotations, dict):
        return
    for key in sorted(annotations):
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
        empty = v.get("emptyDir")
        if isinstance(empty, dict) and empty.get("sizeLimit") is not None:
            _quantity(empty["sizeLimit"], f"{field}[{i}].emptyDir.sizeLimit", "10Gi")
    return set(seen)


def _check_containers(spec: dict[str, Any], field: str, volumes: set[str]) -> None:
    """Each container and init container: ``validateContainers``,
    ``validateInitContainers`` and what they call (``validateContainerCommon``)."""
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
            _check_container(c, path, volumes, sidecar=group == "containers")


def _check_container(c: dict[str, Any], path: str, volumes: set[str], sidecar: bool) -> None:
    """``validateContainerCommon`` past the name, and the probes (``validateContainers``;
    ``validateInitContainers``: on an init container only if it is a sidecar,
    ``restartPolicy: Always``)."""
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
    resources = c.get("resources")
    if isinstance(resources, dict):
        _check_resources(resources, f"{path}.resources")
    sidecar = sidecar or c.get("restartPolicy") == "Always"
    for key in _PROBES:
        probe = c.get(key)
        if probe is None:
            continue
        if not sidecar:
            _refuse(
                f"{path}.{key}",
                "an init container takes no probes unless it is a sidecar: remove it, or "
                "set restartPolicy: Always on the init container",
            )
        if isinstance(probe, dict):
            _check_probe(probe, f"{path}.{key}", key)


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
    """``ValidateVolumeMounts``: a ``name`` that is a volume of the pod, a ``mountPath``
    (required, unique in the container), a ``subPath`` or ``subPathExpr`` (not both)
    inside the volume (``validateLocalDescendingPath``)."""
    paths: dict[str, int] = {}
    for j, m in _items(mounts):
        name, mount_path = m.get("name"), m.get("mountPath")
        if isinstance(name, str) and name not in volumes:
            _refuse(
                f"{field}[{j}].name",
                f"{quoted(name)} is not the name of a volume of the pod: add a volume of "
                "that name to spec.volumes, or mount one of those there",
            )
        sub, expr = m.get("subPath"), m.get("subPathExpr")
        if isinstance(sub, str) and sub:
            _check_descending(sub, f"{field}[{j}].subPath")
        if isinstance(expr, str) and expr:
            if isinstance(sub, str) and sub:
                _refuse(
                    f"{field}[{j}].subPathExpr",
                    "subPath and subPathExpr are mutually exclusive: keep one",
                )
            _check_descending(expr, f"{field}[{j}].subPathExpr")
        if mount_path is None or mount_path == "":
            _refuse(
                f"{field}[{j}].mountPath",
                "is required: the path in the container to mount the volume at (for example /data)",
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


def _check_descending(path: str, field: str) -> None:
    """``validateLocalDescendingPath``: a relative path with no ``..`` element."""
    if path.startswith("/"):
        _refuse(
            field,
            f"{quoted(path)} is absolute: a subPath is a path inside the volume; write it "
            f"relative ({quoted(path.lstrip('/') or 'dir')})",
        )
    if ".." in path.split("/"):
        _refuse(
            field,
            f"{quoted(path)} contains '..': a subPath stays inside the volume; write a path "
            "below its root",
        )


def _quantity(value: Any, field: str, example: str) -> Decimal | None:
    """A quantity as the workload cluster decodes and validates it
    (``resource.Quantity.UnmarshalJSON``: a string or a JSON number, both read by
    :func:`function.core.k8svalidation.decode_quantity`, which is Go's
    ``resource.ParseQuantity``: ``Gi`` alone is 0, ``16gb`` none;
    ``ValidateNonnegativeQuantity``).

    Returns:
        Its value (None: null, which the API server decodes as no value).

    Raises:
        SpecError: at ``field``, for anything the decoder refuses (``'16gb'``, ``true``)
            or a negative quantity, saying what to write (``example``).
    """
    if value is None:
        return None
    # A JSON number reaches the decoder as Go writes it (0.5, 1e+21): the same number
    # as Python's repr.
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = _decoded(repr(value))
    elif isinstance(value, str):
        number = _decoded(value)
    if number is None:
        _refuse(field, f"{_shown(value)} is not {_QUANTITY_RULE}: write, for example, {example}")
    if number < 0:
        _refuse(
            field, f"{_shown(value)} is negative: a quantity is 0 or more (for example {example})"
        )
    return number


@memo(4096)
def _decoded(text: str) -> Decimal | None:
    """The value of a quantity as the workload cluster decodes ``text``
    (:func:`function.core.k8svalidation.decode_quantity`), None where it refuses it
    (memoized: a template's few quantities recur on every call)."""
    try:
        return k8s.decode_quantity(text)
    except ValueError:
        return None


def _check_resources(resources: dict[str, Any], field: str) -> None:
    """``ValidateContainerResourceRequirements`` (``validateResourceRequirements``) over
    ``limits`` and ``requests``: resource names (``validateContainerResourceName``),
    quantities (``ValidateResourceQuantityValue``: decoded, not negative, whole for an
    extended resource), a request at most its limit, equal to it for a resource that
    cannot be overcommitted (extended resources such as ``nvidia.com/gpu``, hugepages),
    which also needs a limit (a missing request defaults to the limit), and hugepages
    only with cpu or memory. Not checked: that hugepages are a multiple of their page
    size, and ``claims`` (the function adds its own).
    """
    limits: dict[str, Decimal | None] = {}
    requests: dict[str, Decimal | None] = {}
    for key, out in (("limits", limits), ("requests", requests)):
        values = resources.get(key)
        if not isinstance(values, dict):
            continue
        for name in sorted(values):  # the smallest refused name, whatever the map order
            value = values[name]
            path = f"{field}.{key}[{_key(name)}]"
            _check_resource_name(name, path)
            q = out[name] = _quantity(value, path, "16Gi" if name == "memory" else "2")
            if q is not None and _overcommit(name) is None:
                _check_whole(q, value, name, path)
    for name, q in requests.items():  # sorted, as built above
        _check_request(resources, field, name, q, limits)
    names = {*limits, *requests}
    if any(n.startswith(_HUGEPAGES) for n in names) and not names & {"cpu", "memory"}:
        _refuse(
            field,
            "requests hugepages without cpu or memory: set a cpu or memory request or limit too",
        )


# The largest count of an extended resource: Kubernetes reads it in milli-units into an
# int64 (``Quantity.MilliValue``), so past this the API server's whole-number test reads
# an overflowed value, and no node's allocatable (an int64 of milli-units too) holds it.
_MAX_EXTENDED = Decimal(2**63 - 1) / 1000


def _check_whole(q: Decimal, value: Any, name: str, path: str) -> None:
    """``ValidateResourceQuantityValue`` for an extended resource: a whole number
    (``MilliValue() % 1000 == 0``), and (the function's bound, where Go's int64
    overflows) at most :data:`_MAX_EXTENDED`. Exact for any
    exponent the decoder admits (``1e999999``: no multiplication, no modulo, so no
    ``decimal.Overflow``; review 20b F3).

    Raises:
        SpecError: at ``path``.
    """
    if q > _MAX_EXTENDED:
        # Not the API server's refusal (its MilliValue overflows, to 0 on its int64
        # path, and passes): the pod would stay Pending on every cluster.
        raise SpecError(
            path,
            f"{_shown(value)} is more than any node holds: Kubernetes counts an extended "
            f"resource ({_key(name)}) as an int64 of milli-units, at most "
            f"{_MAX_EXTENDED:f} (whole: 9223372036854775); lower it",
        )
    if q != q.to_integral_value():
        _refuse(
            path,
            f"{_shown(value)} is not a whole number: an extended resource "
            f"({_key(name)}) is counted in whole units",
        )


def _check_request(
    resources: dict[str, Any],
    field: str,
    name: str,
    request: Decimal | None,
    limits: dict[str, Decimal | None],
) -> None:
    """A request against its limit (``validateResourceRequirements``): at most the
    limit; equal to it, and the limit set, where the resource cannot be overcommitted."""
    overcommit = _overcommit(name)
    if name not in limits:
        if not overcommit:
            _refuse(
                f"{field}.limits",
                f"has no {_key(name)}: a request for a resource that cannot be "
                "overcommitted needs a limit equal to it; set the limit (the request "
                "defaults to it)",
            )
        return
    path = f"{field}.requests[{_key(name)}]"
    written, limit_written = resources["requests"][name], resources["limits"][name]
    limit = limits[name] or Decimal(0)  # null decodes as no quantity: 0
    request = request or Decimal(0)
    if not overcommit and request != limit:
        _refuse(
            path,
            f"{_shown(written)} differs from the {_key(name)} limit {_shown(limit_written)}: "
            f"{_key(name)} cannot be overcommitted, so its request equals its limit; write "
            "the limit only (the request defaults to it)",
        )
    if request > limit:
        _refuse(
            path,
            f"{_shown(written)} is more than the {_key(name)} limit {_shown(limit_written)}: "
            "a container requests at most its limit; lower the request or raise the limit",
        )


def _overcommit(name: str) -> bool | None:
    """``IsOvercommitAllowed``: True for a native resource (cpu, memory, a
    ``kubernetes.io/`` one), False for hugepages, None for an extended resource (which
    also cannot be overcommitted, and is an integer: ``IsExtendedResourceName``)."""
    if name.startswith(_HUGEPAGES):
        return False
    if "/" not in name or _NATIVE in name:
        return True
    return None


def _check_resource_name(name: str, path: str) -> None:
    """Refuse, at ``path``, a name :func:`_resource_name_problem` refuses."""
    problem = _resource_name_problem(name)
    if problem is not None:
        _refuse(
            path,
            f"{quoted(name)} is not a container resource ({problem}): write cpu, memory, "
            "ephemeral-storage, hugepages-<size>, or an extended resource with its domain "
            "(nvidia.com/gpu)",
        )


@memo(1024)
def _resource_name_problem(name: str) -> str | None:
    """``validateContainerResourceName``: a qualified name; without a domain a standard
    container resource, with one native or extended (memoized like :func:`_decoded`)."""
    if name in _CONTAINER_RESOURCES:
        return None
    problem = k8s.qualified_name_problem(name)
    if problem is None and "/" not in name:
        if name.startswith(_HUGEPAGES):
            return None
        return "is not a resource a container requests"
    if problem is None and _NATIVE not in name:
        return k8s.qualified_name_problem(f"requests.{name}")  # IsExtendedResourceName
    return problem


def _check_probe(probe: dict[str, Any], field: str, kind: str) -> None:
    """``validateProbe`` (its handler: :func:`_check_handler`; counts not negative) and,
    for a liveness or startup probe, ``successThreshold`` 1; for a readiness probe no
    ``terminationGracePeriodSeconds``, elsewhere one greater than 0. Values the API
    server defaults (a count of 0) are accepted."""
    _check_handler(probe, field)
    for key in _PROBE_COUNTS:
        value = probe.get(key)
        if _number(value) and value < 0:
            _refuse(f"{field}.{key}", f"{written_as(value)} is negative: write 0 or more")
    threshold = probe.get("successThreshold")
    if kind != "readinessProbe" and _number(threshold) and threshold not in (0, 1):
        _refuse(
            f"{field}.successThreshold",
            f"{written_as(threshold)}: a {kind} succeeds after one success; write 1 or "
            "leave it out",
        )
    grace = probe.get("terminationGracePeriodSeconds")
    if grace is not None and kind == "readinessProbe":
        _refuse(
            f"{field}.terminationGracePeriodSeconds",
            "is not taken by a readinessProbe: remove it",
        )
    if _number(grace) and grace <= 0:
        _refuse(
            f"{field}.terminationGracePeriodSeconds",
            f"{written_as(grace)}: write a number of seconds greater than 0",
        )


def _check_handler(probe: dict[str, Any], field: str) -> None:
    """``validateHandler``: exactly one of exec, httpGet, tcpSocket, grpc, each as
    ``validateExecAction``, ``validateHTTPGetAction``, ``validateTCPSocketAction``,
    ``validateGRPCAction`` (``ValidatePortNumOrName``) have it. An empty ``path`` or
    ``scheme`` of httpGet is defaulted by the API server (``/``, HTTP): accepted."""
    handlers = [h for h in _HANDLERS if probe.get(h) is not None]
    if not handlers:
        _refuse(
            field,
            "has no handler: set one of exec, httpGet, tcpSocket or grpc (for example "
            "httpGet: {path: /health, port: 8000})",
        )
    if len(handlers) > 1:
        _refuse(
            f"{field}.{handlers[1]}",
            f"is a second handler after {handlers[0]}: a probe has exactly one; keep one",
        )
    kind, handler = handlers[0], probe[handlers[0]]
    where = f"{field}.{kind}"
    if not isinstance(handler, dict):
        return
    if kind == "exec":
        if handler.get("command") in (None, []):
            _refuse(
                f"{where}.command",
                "is required: the command to run (for example [cat, /tmp/ready])",
            )
        return
    _probe_port(handler.get("port"), f"{where}.port", named=kind != "grpc")
    if kind == "httpGet":
        _check_http_get(handler, where)


def _check_http_get(handler: dict[str, Any], field: str) -> None:
    scheme = handler.get("scheme")
    if isinstance(scheme, str) and scheme not in _SCHEMES:
        _refuse(f"{field}.scheme", f"{quoted(scheme)} is not a scheme: write HTTP or HTTPS")
    for i, header in _items(handler.get("httpHeaders")):
        name = header.get("name")
        if isinstance(name, str) and not _HEADER_NAME.match(name):
            _refuse(
                f"{field}.httpHeaders[{i}].name",
                f"{quoted(name)} is not an HTTP header name: letters, digits and '-' (X-Probe)",
            )


def _probe_port(port: Any, field: str, named: bool) -> None:
    """``ValidatePortNumOrName``: a number 1..65535 or (not for grpc) a port name."""
    if isinstance(port, str) and named:
        _require(port, k8s.port_name_problem(port), field, "a port name")
        return
    if _number(port) and port == int(port) and 1 <= port <= 65535:
        return
    what = "a number from 1 to 65535" + (" or the name of a container port (http)" if named else "")
    if port is None:
        _refuse(field, f"is required: the port to probe, {what}")
    _refuse(field, f"{_shown(port)} is not a port: write {what}")


def _number(value: Any) -> TypeGuard[float]:
    """A JSON number (an int, or a float as a protobuf Struct carries every number)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def _refuse(path: str, what: str) -> NoReturn:
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
