"""Schema validation helpers shared by every test.

Each ``validate_*`` function raises :class:`SchemaError` (an ``AssertionError``)
that lists every problem found, each prefixed with the JSON path of the field,
and returns the object as the API server would store it (CRD defaults applied).

- :func:`validate_k8s`: Kubernetes built-in kinds (Secret, Job, CronJob,
  Deployment, Service, PVC, ...) against the OpenAPI schemas bundled with the
  ``kubernetes-validate`` package, in strict mode (unknown fields are errors, as
  with ``kubectl apply --validate=strict``), at :data:`K8S_VERSION`; plus the
  name, label and pod-template rules the API server enforces in code rather
  than in its OpenAPI schema.
- :func:`validate_crd`: any custom resource against a CRD's
  ``openAPIV3Schema`` (structural-schema semantics, see
  :func:`openapi_to_jsonschema`), its defaults and its CEL
  ``x-kubernetes-validations`` rules.
- :func:`validate_object`: a provider-kubernetes ``Object``, and recursively
  the manifest it embeds (``spec.forProvider.manifest``).
- :func:`validate_xr`: a ``modelplane.ai`` XR against our own XRDs in
  ``compositions/*/definition.yaml``, with the fields Crossplane adds to every
  XR's CRD (``spec.crossplane``, ``status.conditions``, ``status.crossplane``).
- :func:`cel_errors` / :func:`xr_cel_errors`: only the CEL rules, to prove that a
  rule (not merely a ``required`` list) rejects an object.
- :func:`validate_manifest`: dispatch any document to the right validator.

CEL rules run with cel-python (``celpy``) the way the API server runs them
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules):
``self`` is the value at the schema node that carries the rule, a rule runs
only where its value is present, property names that are CEL keywords are
escaped (``namespace`` -> ``__namespace__``), transition rules (those that use
``oldSelf``) run only when an old object is given, and a rule that cannot be
evaluated counts as a failure.
"""

from __future__ import annotations

import copy
import datetime
import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import yaml
from celpy import celtypes

from tests.support import crossplane as crossplane_tools

ROOT = Path(__file__).resolve().parents[2]
COMPOSITIONS = ROOT / "compositions"


@dataclass(frozen=True)
class Schema:
    """A CRD file in the pinned schemas (:mod:`tests.support.crossplane`), by relative path.

    Resolved only when a test validates against it, so a machine without Go and without
    the cached schemas skips those tests (with one line saying how to get them) instead
    of failing at import.
    """

    rel: str

    def path(self) -> Path:
        """The file's path; skips the calling test when the schemas cannot be had."""
        return crossplane_tools.require().schemas / self.rel


def schemas_dir() -> Path:
    """The pinned schemas' directory (``crossplane/``, ``provider-kubernetes/``, ``lws/``)."""
    return crossplane_tools.require().schemas

# The Kubernetes minor release manifests are validated against. Kinds that only
# exist in later releases name their first release in K8S_MIN_VERSION (DRA's
# resource.k8s.io/v1 went GA in 1.34).
K8S_VERSION = "1.30"
K8S_MIN_VERSION: dict[str, str] = {"resource.k8s.io/v1": "1.34"}

OBJECT_CRD = Schema("provider-kubernetes/kubernetes.m.crossplane.io_objects.yaml")
LWS_CRD = Schema("lws/leaderworkerset.x-k8s.io_leaderworkersets.yaml")
MODELPLANE_GROUP = "modelplane.ai"

# https://kubernetes.io/docs/concepts/overview/working-with-objects/names/
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Environment variable names accepted by the API server (any printable ASCII but
# '=' since 1.32; the stricter C-identifier-like rule before). Use the strict one.
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

# Names of the kinds whose metadata.name must be a DNS-1035 label (Service) or a
# DNS-1123 label (Namespace), rather than a DNS-1123 subdomain.
_NAME_RULES = {"Service": DNS1035_LABEL, "Namespace": DNS1123_LABEL}
# A Job's name becomes the value of the job-name label of its pods, so at most 63.
_NAME_MAX = {"Service": 63, "Namespace": 63, "Job": 63, "CronJob": 52}


# libyaml's loader parses the large shared CRDs (LWS, DeploymentRuntimeConfig) ~10x faster.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SchemaError(AssertionError):
    """A document failed validation; ``errors`` lists each problem with its path."""

    def __init__(self, what: str, errors: list[str]):
        self.errors = errors
        super().__init__(f"{what} is invalid:\n  - " + "\n  - ".join(errors))


# ---- YAML ---------------------------------------------------------------------


def load_documents(path: str | Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of ``path``, in order."""
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=_YAML_LOADER) if d is not None]


@functools.lru_cache(maxsize=64)
def _load_cached(path: str) -> tuple[dict[str, Any], ...]:
    return tuple(load_documents(path))


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"{obj.get('apiVersion')}/{obj.get('kind')} {ns + '/' if ns else ''}{name}"


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out or p else str(p))
    return out.lstrip(".") or "<root>"


# ---- OpenAPI v3 structural schema -> JSON Schema ------------------------------

_DROP = {"description", "default", "example", "externalDocs", "nullable", "format", "title"}


def openapi_to_jsonschema(node: Mapping[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """Translate a CRD's structural OpenAPI v3 schema into a JSON Schema.

    Follows the API server's semantics
    (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema):

    - ``x-kubernetes-*`` keys and descriptions are dropped; ``nullable: true``
      admits ``null``; ``x-kubernetes-int-or-string`` admits an integer or a
      string.
    - With ``strict`` (the default), an object schema that neither sets
      ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields:
      true`` rejects fields it does not declare: the API server would prune
      them and ``kubectl --validate=strict`` rejects them. Such an object with
      no ``properties`` at all therefore only admits ``{}``.
    - ``x-kubernetes-preserve-unknown-fields: true`` keeps unknown fields (and
      still validates the declared ones); without a ``type`` it admits any value.
    - ``x-kubernetes-embedded-resource: true`` admits ``apiVersion``, ``kind``
      and ``metadata`` besides the declared properties.
    - Of the formats only ``date-time`` (RFC 3339) is checked, with
      :data:`FORMAT_CHECKER`; ``int32``/``int64`` and the rest are dropped.
    """
    out: dict[str, Any] = {}
    preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
    for key, value in node.items():
        if key == "format" and value == "date-time":
            out[key] = value  # checked by FORMAT_CHECKER, as the API server does
            continue
        if key in _DROP or key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {k: openapi_to_jsonschema(v, strict=strict) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = openapi_to_jsonschema(value, strict=strict)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [openapi_to_jsonschema(v, strict=strict) for v in value]
        else:
            out[key] = copy.deepcopy(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    is_object = out.get("type") == "object" or (
        isinstance(out.get("type"), list) and "object" in out["type"]
    )
    if strict and is_object and not preserve and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
FORMAT_CHECKER = jsonschema.FormatChecker(formats=())


@FORMAT_CHECKER.checks("date-time")
def _is_date_time(value: object) -> bool:
    """RFC 3339 date-time, the format of Kubernetes timestamps (metav1.Time)."""
    if not isinstance(value, str):
        return True
    if not _RFC3339.match(value):
        return False
    try:
        datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def list_errors(schema: Mapping[str, Any], value: Any, path: tuple[Any, ...] = ()) -> list[str]:
    """Duplicates the API server rejects in ``x-kubernetes-list-type`` lists.

    A ``map`` list must not hold two items with the same values of its
    ``x-kubernetes-list-map-keys``; a ``set`` list must not hold an item twice
    (https://kubernetes.io/docs/reference/using-api/server-side-apply/#merge-strategy).
    """
    errors: list[str] = []
    if isinstance(value, list):
        kind = schema.get("x-kubernetes-list-type")
        if kind == "map":
            keys = list(schema.get("x-kubernetes-list-map-keys") or ())
            seen: set[str] = set()
            for i, item in enumerate(value):
                if not isinstance(item, Mapping):
                    continue
                ident = repr([item.get(k) for k in keys])
                if ident in seen:
                    errors.append(f"{_path([*path, i])}: duplicate entry for keys {keys} = {ident}")
                seen.add(ident)
        elif kind == "set":
            reprs = [repr(v) for v in value]
            if len(set(reprs)) != len(reprs):
                errors.append(f"{_path(path)}: duplicate items in a set list")
        if isinstance(schema.get("items"), Mapping):
            for i, item in enumerate(value):
                errors += list_errors(schema["items"], item, (*path, i))
    elif isinstance(value, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            sub = props.get(k) if k in props else (extra if isinstance(extra, Mapping) else None)
            if sub is not None:
                errors += list_errors(sub, v, (*path, k))
    return errors


def apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """Return a copy of ``value`` with the schema's ``default``s applied.

    As the API server does: a default fills a missing property of an object
    that is present; nested defaults apply inside present values and inside
    defaulted ones.
    """
    value = copy.deepcopy(value)
    _default_into(value, schema)
    return value


def _default_into(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _default_into(value[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name, item in value.items():
                if name not in props:
                    _default_into(item, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _default_into(item, schema["items"])


# ---- CEL (x-kubernetes-validations) -------------------------------------------

# https://kubernetes.io/docs/reference/using-api/cel/#escaping
_CEL_RESERVED = {
    "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
    "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
    "void", "while",
}  # fmt: skip


def _escape(name: str) -> str:
    if name in _CEL_RESERVED:
        return f"__{name}__"
    return (
        name.replace("__", "__underscores__")
        .replace(".", "__dot__")
        .replace("-", "__dash__")
        .replace("/", "__slash__")
    )


def _to_cel(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """JSON value -> CEL value; object properties declared by the schema are escaped."""
    if isinstance(value, dict):
        props = (schema or {}).get("properties")
        extra = (schema or {}).get("additionalProperties")
        out = {}
        for k, v in value.items():
            if props is not None and k in props:
                out[celtypes.StringType(_escape(k))] = _to_cel(v, props[k])
            else:
                sub = extra if isinstance(extra, Mapping) else None
                out[celtypes.StringType(k)] = _to_cel(v, sub)
        return celtypes.MapType(out)
    if isinstance(value, list):
        items = (schema or {}).get("items")
        return celtypes.ListType([_to_cel(v, items) for v in value])
    return celpy.json_to_cel(value)


def _lower_ascii(s: Any) -> Any:
    return celtypes.StringType(str(s).lower())


def _upper_ascii(s: Any) -> Any:
    return celtypes.StringType(str(s).upper())


# Functions of Kubernetes' CEL libraries that the bundled CRDs use and cel-python lacks.
_CEL_FUNCTIONS = {"lowerAscii": _lower_ascii, "upperAscii": _upper_ascii}


@functools.lru_cache(maxsize=1024)
def _cel_program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule), functions=_CEL_FUNCTIONS)


def cel_errors(
    schema: Mapping[str, Any], value: Any, *, old: Any = None, path: tuple[Any, ...] = ()
) -> list[str]:
    """Evaluate every ``x-kubernetes-validations`` rule of ``schema`` against ``value``.

    Args:
        schema: An OpenAPI v3 schema node (for example an XRD's ``spec`` schema).
        value: The value at that node.
        old: The previous value, for transition rules (``oldSelf``); without it
            those rules are skipped, as on create.
        path: Path of ``value`` in the whole object, for messages.

    Returns:
        One message per failed rule: ``<path>: <rule message>``. A rule that
        does not compile or fails to evaluate is reported too.
    """
    errors: list[str] = []
    _cel_walk(schema, value, old, list(path), errors)
    return errors


def _cel_walk(schema: Mapping[str, Any], value: Any, old: Any, path: list[Any], errors: list[str]):
    if value is None:
        return
    for rule in schema.get("x-kubernetes-validations") or ():
        expr = rule["rule"]
        uses_old = "oldSelf" in expr
        if uses_old and old is None:
            continue
        where = _path(path)
        try:
            program = _cel_program(expr)
        except Exception as e:  # celpy raises its own parse errors
            errors.append(f"{where}: rule {expr!r} does not compile: {e}")
            continue
        activation = {"self": _to_cel(value, schema)}
        if uses_old:
            activation["oldSelf"] = _to_cel(old, schema)
        try:
            result = program.evaluate(activation)
        except Exception as e:
            errors.append(f"{where}: rule {expr!r} could not be evaluated: {e}")
            continue
        if result is not True and result != celtypes.BoolType(True):
            errors.append(f"{where}: {rule.get('message') or f'failed rule {expr}'}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for k, v in value.items():
            sub = props.get(k) if k in props else (extra if isinstance(extra, Mapping) else None)
            if sub is not None:
                _cel_walk(sub, v, old_map.get(k), [*path, k], errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        # Old list items are matched by position (atomic lists); map lists by key
        # would need x-kubernetes-list-map-keys, which no rule here relies on.
        old_list = old if isinstance(old, list) else []
        for i, v in enumerate(value):
            o = old_list[i] if i < len(old_list) else None
            _cel_walk(schema["items"], v, o, [*path, i], errors)


# ---- metadata and pod templates (API server checks not in the OpenAPI schema) --


def metadata_errors(obj: Mapping[str, Any], *, name_required: bool = False) -> list[str]:
    """Check ``metadata`` the way the API server does: name, namespace, labels, annotations."""
    errors: list[str] = []
    meta = obj.get("metadata")
    if meta is None:
        return ["metadata: missing"] if name_required else []
    if not isinstance(meta, Mapping):
        return ["metadata: must be an object"]
    kind = str(obj.get("kind", ""))
    name = meta.get("name")
    if name is None:
        if name_required and not meta.get("generateName"):
            errors.append("metadata.name: missing")
    else:
        rule = _NAME_RULES.get(kind, DNS1123_SUBDOMAIN)
        limit = _NAME_MAX.get(kind, 253)
        if not isinstance(name, str) or not rule.match(name) or len(name) > limit:
            errors.append(
                f"metadata.name: {name!r} is not a valid {kind or 'object'} name "
                f"(pattern {rule.pattern}, at most {limit} characters)"
            )
    ns = meta.get("namespace")
    if ns is not None and (not isinstance(ns, str) or not DNS1123_LABEL.match(ns) or len(ns) > 63):
        errors.append(f"metadata.namespace: {ns!r} is not a DNS-1123 label")
    errors += label_errors(meta.get("labels"), "metadata.labels")
    ann = meta.get("annotations")
    if ann is not None:
        if not isinstance(ann, Mapping):
            errors.append("metadata.annotations: must be a map of strings")
        else:
            for k, v in ann.items():
                errors += _qualified_name_errors(k, f"metadata.annotations[{k}]")
                if not isinstance(v, str):
                    errors.append(f"metadata.annotations[{k}]: value must be a string")
    return errors


def _qualified_name_errors(key: Any, where: str) -> list[str]:
    if not isinstance(key, str):
        return [f"{where}: key must be a string"]
    prefix, _, name = key.rpartition("/")
    bad = not name or len(name) > 63 or not LABEL_NAME.match(name)
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        bad = True
    return [f"{where}: {key!r} is not a valid qualified name"] if bad else []


def label_errors(labels: Any, where: str) -> list[str]:
    """Label keys must be qualified names and values valid label values (at most 63)."""
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [f"{where}: must be a map of strings"]
    errors: list[str] = []
    for k, v in labels.items():
        errors += _qualified_name_errors(k, f"{where}[{k}]")
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            errors.append(f"{where}[{k}]: {v!r} is not a valid label value")
    return errors


def _pod_templates(manifest: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    kind = manifest.get("kind")
    spec = manifest.get("spec") or {}
    if kind == "Pod":
        yield "spec", spec
    elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        yield "spec.template.spec", (spec.get("template") or {}).get("spec") or {}
    elif kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        yield "spec.jobTemplate.spec.template.spec", (job.get("template") or {}).get("spec") or {}
    elif kind == "LeaderWorkerSet":
        lw = spec.get("leaderWorkerTemplate") or {}
        for key in ("leaderTemplate", "workerTemplate"):
            if key in lw:
                yield f"spec.leaderWorkerTemplate.{key}.spec", (lw[key] or {}).get("spec") or {}


def pod_spec_errors(pod: Mapping[str, Any], where: str) -> list[str]:
    """Checks the API server makes on a pod spec beyond its OpenAPI schema.

    Container and volume names are unique DNS-1123 labels, every volume mount
    names a declared volume, env names are valid and not repeated within a
    container, and a Job-like pod's ``restartPolicy`` is not ``Always``
    (https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-template).
    """
    errors: list[str] = []
    volumes = [v.get("name") for v in pod.get("volumes") or ()]
    for i, n in enumerate(volumes):
        if not isinstance(n, str) or not DNS1123_LABEL.match(n) or len(n) > 63:
            errors.append(f"{where}.volumes[{i}].name: {n!r} is not a DNS-1123 label")
    if len(set(volumes)) != len(volumes):
        errors.append(f"{where}.volumes: duplicate names {sorted(map(str, volumes))}")
    seen: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, c in enumerate(pod.get(group) or ()):
            here = f"{where}.{group}[{i}]"
            n = c.get("name")
            if not isinstance(n, str) or not DNS1123_LABEL.match(n) or len(n) > 63:
                errors.append(f"{here}.name: {n!r} is not a DNS-1123 label")
            elif n in seen:
                errors.append(f"{here}.name: duplicate container name {n!r}")
            else:
                seen.add(n)
            env_names: set[str] = set()
            for j, e in enumerate(c.get("env") or ()):
                en = e.get("name")
                if not isinstance(en, str) or not ENV_NAME.match(en):
                    errors.append(f"{here}.env[{j}].name: {en!r} is not a valid variable name")
                elif en in env_names:
                    errors.append(f"{here}.env[{j}].name: duplicate variable {en!r}")
                env_names.add(str(en))
            for j, m in enumerate(c.get("volumeMounts") or ()):
                if m.get("name") not in volumes:
                    errors.append(
                        f"{here}.volumeMounts[{j}].name: no volume named {m.get('name')!r}"
                    )
    return errors


# ---- Kubernetes built-in kinds ------------------------------------------------

# Pod restart policies the API server admits per kind (Jobs: Never or OnFailure;
# controllers that keep pods running: Always).
_RESTART_POLICIES: dict[str, list[str]] = {
    "Pod": ["Always", "OnFailure", "Never"],
    "Job": ["Never", "OnFailure"],
    "CronJob": ["Never", "OnFailure"],
    "Deployment": ["Always"],
    "StatefulSet": ["Always"],
    "DaemonSet": ["Always"],
    "ReplicaSet": ["Always"],
}


def k8s_version_for(api_version: str) -> str:
    """The Kubernetes minor release a manifest of ``api_version`` is validated at."""
    return K8S_MIN_VERSION.get(api_version, K8S_VERSION)


def validate_k8s(manifest: Mapping[str, Any], *, version: str | None = None) -> dict[str, Any]:
    """Validate a Kubernetes built-in manifest (strict: unknown fields are errors).

    Args:
        manifest: For example a Secret, PVC, Job, CronJob, Deployment or Service.
        version: Kubernetes minor release; default :func:`k8s_version_for`.

    Raises:
        SchemaError: the kind is unknown at that release, the manifest does not
            match its schema, or metadata / pod templates break API server rules.
    """
    what = _describe(manifest)
    if not isinstance(manifest, Mapping) or "apiVersion" not in manifest or "kind" not in manifest:
        raise SchemaError(what, ["apiVersion and kind are required"])
    ver = version or k8s_version_for(str(manifest["apiVersion"]))
    if version is None and any(pod.get("resourceClaims") for _, pod in _pod_templates(manifest)):
        # Pod-level DRA claims (resourceClaims[].resourceClaimTemplateName) have the
        # shape of resource.k8s.io/v1, GA in the same release.
        ver = max(
            ver, K8S_MIN_VERSION["resource.k8s.io/v1"], key=lambda v: tuple(map(int, v.split(".")))
        )
    errors: list[str] = []
    try:
        kubernetes_validate.validate(dict(manifest), ver, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        raise SchemaError(what, [f"no Kubernetes {ver} schema for this apiVersion/kind"]) from None
    except kubernetes_validate.ValidationError as e:
        # kubernetes-validate reports jsonschema's best match; keep its path.
        errors.append(f"{_path(e.absolute_path)}: {e.message}")
    errors += metadata_errors(manifest)
    for where, pod in _pod_templates(manifest):
        errors += pod_spec_errors(pod, where)
    allowed = _RESTART_POLICIES.get(str(manifest.get("kind")))
    if allowed:
        for where, pod in _pod_templates(manifest):
            policy = pod.get("restartPolicy", "Always")
            if policy not in allowed:
                errors.append(f"{where}.restartPolicy: {policy!r} is not one of {allowed}")
    if errors:
        raise SchemaError(what, errors)
    return dict(manifest)


# ---- Custom resources ---------------------------------------------------------

# The root ``metadata`` of a custom resource is validated by the API server in
# code (metadata_errors here), not by the CRD's schema.
_METADATA_SCHEMA = {"type": "object"}


def crd_version_schema(crd: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``version`` of a CRD (or XRD) document."""
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            if schema is None and "validation" in crd["spec"]:
                schema = crd["spec"]["validation"]["openAPIV3Schema"]
            return dict(schema or {})
    raise KeyError(version)


@functools.lru_cache(maxsize=256)
def _compiled(key: tuple[str, str, str]) -> tuple[dict[str, Any], Any]:
    kind_of_doc, path, version = key
    if kind_of_doc == "crd":
        crd = _crd_document(path)
        schema = crd_version_schema(crd, version)
    else:
        schema = xr_openapi_schema(_xrd_by_path(path), version)
    js = openapi_to_jsonschema(schema)
    js.setdefault("properties", {})["metadata"] = _METADATA_SCHEMA
    validator_cls = jsonschema.validators.validator_for(js, default=jsonschema.Draft7Validator)
    return schema, validator_cls(js, format_checker=FORMAT_CHECKER)


def _crd_document(path: str) -> dict[str, Any]:
    docs = [d for d in _load_cached(path) if d.get("kind") == "CustomResourceDefinition"]
    if len(docs) != 1:
        raise ValueError(f"{path}: expected one CustomResourceDefinition, found {len(docs)}")
    return docs[0]


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _validate_against(
    obj: Mapping[str, Any],
    key: tuple[str, str, str],
    what: str,
    *,
    old: Mapping[str, Any] | None,
    namespaced: bool,
) -> dict[str, Any]:
    schema, validator = _compiled(key)
    value = apply_defaults(dict(obj), schema)
    errors = [
        f"{_path(e.absolute_path)}: {e.message}"
        for e in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.path)))
    ]
    errors += list_errors(schema, value)
    errors += cel_errors(schema, value, old=apply_defaults(dict(old), schema) if old else None)
    errors += metadata_errors(value)
    for where, pod in _pod_templates(value):  # LeaderWorkerSet templates
        errors += pod_spec_errors(pod, where)
    if not namespaced and (value.get("metadata") or {}).get("namespace"):
        errors.append("metadata.namespace: a cluster-scoped resource has no namespace")
    if errors:
        raise SchemaError(what, errors)
    return value


def validate_crd(
    obj: Mapping[str, Any], crd_path: str | Path | Schema, *, old: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Validate a custom resource against the CRD in ``crd_path`` (a file or a :class:`Schema`).

    Checks the CRD's group, kind and served version, the version's schema
    (strict, see :func:`openapi_to_jsonschema`) after applying its defaults,
    its CEL rules (transition rules only with ``old``), and metadata.

    Returns:
        The object with the CRD's defaults applied.

    Raises:
        SchemaError: listing every problem.
    """
    what = _describe(obj)
    if isinstance(crd_path, Schema):
        crd_path = crd_path.path()
    crd = _crd_document(str(crd_path))
    group, version = _group_version(str(obj.get("apiVersion", "")))
    spec = crd["spec"]
    if group != spec["group"] or obj.get("kind") != spec["names"]["kind"]:
        raise SchemaError(
            what, [f"apiVersion/kind do not match CRD {spec['names']['kind']}.{spec['group']}"]
        )
    served = [v["name"] for v in spec["versions"] if v.get("served", True)]
    if version not in served:
        raise SchemaError(what, [f"apiVersion: version {version!r} is not served ({served})"])
    return _validate_against(
        obj,
        ("crd", str(crd_path), version),
        what,
        old=old,
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
    )


@functools.lru_cache(maxsize=1)
def crd_index() -> dict[tuple[str, str], str]:
    """``(group, kind) -> CRD path`` for every CRD under the shared schemas."""
    index: dict[tuple[str, str], str] = {}
    for path in sorted(schemas_dir().rglob("*.yaml")):
        for doc in _load_cached(str(path)):
            if doc.get("kind") == "CustomResourceDefinition":
                index[(doc["spec"]["group"], doc["spec"]["names"]["kind"])] = str(path)
    return index


def validate_object(obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None) -> dict:
    """Validate a provider-kubernetes ``Object`` and the manifest it carries.

    The Object is checked against the ``kubernetes.m.crossplane.io`` Object CRD;
    its ``spec.forProvider.manifest`` against the LeaderWorkerSet CRD for
    ``leaderworkerset.x-k8s.io`` kinds, another shared CRD when one defines it,
    and otherwise against Kubernetes' own schemas (:func:`validate_k8s`).

    Raises:
        SchemaError: naming the Object and, for the manifest, the embedded path.
    """
    value = validate_crd(obj, OBJECT_CRD, old=old)
    manifest = ((value.get("spec") or {}).get("forProvider") or {}).get("manifest")
    if not isinstance(manifest, Mapping):
        raise SchemaError(_describe(obj), ["spec.forProvider.manifest: missing"])
    if (value.get("spec") or {}).get("managementPolicies") == ["Observe"]:
        _validate_observed_identity(obj, manifest)
        return value
    try:
        validate_manifest(manifest)
    except SchemaError as e:
        raise SchemaError(
            _describe(obj), [f"spec.forProvider.manifest: {m}" for m in e.errors]
        ) from None
    return value


def _validate_observed_identity(obj: Mapping[str, Any], manifest: Mapping[str, Any]) -> None:
    """The manifest of an Observe-only Object names the remote object it watches; it is
    never created or updated from it, so it need not be a valid object of its kind.

    provider-kubernetes v1.3.1's Observe gets the remote object by the manifest's
    apiVersion, kind, name and namespace (``internal/controller/namespaced/object/
    object.go``); with server-side apply it dry-runs the manifest as an apply onto the
    existing object, which the API server validates merged (a name-only apply of a valid
    Job is valid). Checked: apiVersion and kind present, a DNS-1123 name and namespace."""
    meta = manifest.get("metadata") if isinstance(manifest.get("metadata"), Mapping) else {}
    errors = [
        f"spec.forProvider.manifest.{k}: required"
        for k in ("apiVersion", "kind")
        if not isinstance(manifest.get(k), str) or not manifest.get(k)
    ]
    for k in ("name", "namespace"):
        v = meta.get(k)
        if not isinstance(v, str) or not _DNS1123_LABEL.fullmatch(v):
            errors.append(f"spec.forProvider.manifest.metadata.{k}: not a DNS-1123 label: {v!r}")
    if errors:
        raise SchemaError(_describe(obj), errors)


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


# ---- Our XRDs -------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def xrd_index() -> dict[tuple[str, str], str]:
    """``(group, kind) -> path`` of every XRD in ``compositions/*/definition.yaml``."""
    index: dict[tuple[str, str], str] = {}
    for path in sorted(COMPOSITIONS.glob("*/definition.yaml")):
        for doc in _load_cached(str(path)):
            if doc.get("kind") == "CompositeResourceDefinition":
                index[(doc["spec"]["group"], doc["spec"]["names"]["kind"])] = str(path)
    return index


def _xrd_by_path(path: str) -> dict[str, Any]:
    docs = [d for d in _load_cached(path) if d.get("kind") == "CompositeResourceDefinition"]
    if len(docs) != 1:
        raise ValueError(f"{path}: expected one CompositeResourceDefinition, found {len(docs)}")
    return docs[0]


def find_xrd(api_version: str, kind: str) -> dict[str, Any]:
    """The XRD document that defines ``kind`` of ``api_version``'s group.

    Raises:
        KeyError: no XRD in ``compositions/`` defines it.
    """
    group, _ = _group_version(api_version)
    return _xrd_by_path(xrd_index()[(group, kind)])


def _selector_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["matchLabels"],
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
        },
    }


def _ref_schema() -> dict[str, Any]:
    return {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}


def xr_openapi_schema(xrd: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The schema of the CRD Crossplane generates from an ``apiextensions.crossplane.io/v2`` XRD.

    Crossplane (internal/xcrd) adds ``apiVersion``, ``kind`` and ``metadata``,
    requires ``spec``, nests its machinery under ``spec.crossplane``
    (composition selection, ``resourceRefs``) and adds ``status.conditions``
    and ``status.crossplane``. Those fields are merged over the XRD's schema
    here, exactly as Crossplane overrides them.
    """
    schema = copy.deepcopy(crd_version_schema(xrd, version))
    schema["type"] = "object"
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"type": "object"}
    schema["required"] = sorted(set(schema.get("required") or []) | {"spec"})
    spec = props.setdefault("spec", {"type": "object"})
    spec.setdefault("type", "object")
    ref_item: dict[str, Any] = {
        "type": "object",
        "required": ["apiVersion", "kind"],
        "properties": {k: {"type": "string"} for k in ("apiVersion", "kind", "name")},
    }
    if xrd["spec"].get("scope", "Namespaced") == "Cluster":
        ref_item["properties"]["namespace"] = {"type": "string"}
    spec.setdefault("properties", {})["crossplane"] = {
        "type": "object",
        "properties": {
            "compositionRef": _ref_schema(),
            "compositionSelector": _selector_schema(),
            "compositionRevisionRef": _ref_schema(),
            "compositionRevisionSelector": _selector_schema(),
            "compositionUpdatePolicy": {"type": "string", "enum": ["Automatic", "Manual"]},
            "resourceRefs": {"type": "array", "items": ref_item},
        },
    }
    status = props.setdefault("status", {"type": "object"})
    status.setdefault("type", "object")
    sprops = status.setdefault("properties", {})
    sprops["conditions"] = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["lastTransitionTime", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "message": {"type": "string"},
                "reason": {"type": "string"},
                "status": {"type": "string"},
                "type": {"type": "string"},
                "observedGeneration": {"type": "integer"},
            },
        },
    }
    sprops["crossplane"] = {
        "type": "object",
        "properties": {
            "connectionDetails": {
                "type": "object",
                "properties": {"lastPublishedTime": {"type": "string", "format": "date-time"}},
            }
        },
    }
    return schema


def validate_xr(obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None) -> dict:
    """Validate a ``modelplane.ai`` XR against the XRD in ``compositions/`` that defines it.

    Use it on authored examples and on XRs a composer emits (ModelCacheHydration,
    ModelReplica, ...). ``metadata.namespace`` may be omitted (Crossplane sets a
    composed resource's namespace to its XR's).

    Returns:
        The XR with the XRD's defaults applied.

    Raises:
        SchemaError: unknown kind, unserved version, schema, CEL or metadata errors.
    """
    what = _describe(obj)
    api_version = str(obj.get("apiVersion", ""))
    group, version = _group_version(api_version)
    try:
        path = xrd_index()[(group, str(obj.get("kind")))]
    except KeyError:
        raise SchemaError(what, [f"no XRD in compositions/ defines {obj.get('kind')}"]) from None
    xrd = _xrd_by_path(path)
    served = [v["name"] for v in xrd["spec"]["versions"] if v.get("served", True)]
    if version not in served:
        raise SchemaError(what, [f"apiVersion: version {version!r} is not served ({served})"])
    return _validate_against(
        obj,
        ("xrd", path, version),
        what,
        old=old,
        namespaced=xrd["spec"].get("scope", "Namespaced") == "Namespaced",
    )


def xr_cel_errors(
    kind: str, spec: Mapping[str, Any], *, old_spec: Mapping[str, Any] | None = None
) -> list[str]:
    """Only the CEL rules of our XRD for ``kind`` (``modelplane.ai/v1alpha1``) on ``spec``.

    Defaults are applied first, as the API server does before it runs rules.
    Proves that a CEL rule itself rejects an object, independent of the
    schema's ``required`` lists. Returns the failure messages (empty: admitted).
    """
    xrd = find_xrd(f"{MODELPLANE_GROUP}/v1alpha1", kind)
    schema = xr_openapi_schema(xrd, "v1alpha1")
    obj = apply_defaults({"spec": dict(spec)}, schema)
    old = apply_defaults({"spec": dict(old_spec)}, schema) if old_spec is not None else None
    return cel_errors(schema, obj, old=old)


# ---- Dispatch -------------------------------------------------------------------


def validate_manifest(doc: Mapping[str, Any], *, old: Mapping[str, Any] | None = None) -> dict:
    """Validate any document with the validator its apiVersion and kind call for.

    ``modelplane.ai`` kinds go to :func:`validate_xr`; provider-kubernetes
    Objects to :func:`validate_object`; kinds defined by a CRD under the shared
    schemas (Crossplane, LWS, provider-kubernetes) to :func:`validate_crd`;
    everything else to :func:`validate_k8s`.
    """
    if not isinstance(doc, Mapping):
        raise SchemaError(repr(doc)[:60], ["a manifest must be a mapping"])
    group, _ = _group_version(str(doc.get("apiVersion", "")))
    kind = str(doc.get("kind", ""))
    if group == MODELPLANE_GROUP:
        return validate_xr(doc, old=old)
    if group == "kubernetes.m.crossplane.io" and kind == "Object":
        return validate_object(doc, old=old)
    crd = crd_index().get((group, kind))
    if crd is not None:
        return validate_crd(doc, crd, old=old)
    return validate_k8s(doc)
