"""InferenceCluster (bring your own): compose the status placement reads.

The status contract (field names, and the one reader other kinds use) is
:mod:`function.api.inferencecluster`.

So the project runs without Modelplane, an InferenceCluster with
``spec.cluster.source: Existing`` gets the status Modelplane would give it:

- ``status.gpuPools[]``: one entry per ``spec.nodePools[]``, in spec order:
  ``{name, nodes, devices}`` where ``nodes`` is ``maxNodeCount`` when the pool
  autoscales, else ``nodeCount`` (default 1), and ``devices`` are the pool's
  InferenceClass ``spec.devices`` with their defaults (``claim: DRA``,
  ``count: 1``) applied (Modelplane's InferenceCluster XRD, ``gpuPools``).
- ``status.providerConfigRef``: a provider-kubernetes ``ClusterProviderConfig``
  composed from the kubeconfig Secret ``spec.cluster.existing.secretRef`` (in
  ``modelplane-system``, key ``kubeconfig`` by default), with
  ``identitySecretRef`` as its identity when set.
- ``status.cache.storageClassName``: ``spec.cluster.existing.cache.storageClassName``.
- ``status.gateway.hostname``: ``spec.gateway.hostname`` when set.

Requirements: each referenced InferenceClass by name (cluster-scoped). Until
all are resolved, the last status and the ProviderConfig are kept. A class that
does not exist leaves its pool out of ``gpuPools`` (no capacity is invented),
and ``PoolsResolved=False`` (reason ``ClassNotFound``) names it.

The XR is ready when the ProviderConfig exists and every class resolved;
Crossplane then sets its ``Ready`` condition, which placement requires.
Other sources are provisioned by Modelplane's own compositions: the composer
reports ``PoolsResolved=False`` (reason ``SourceNotServed``), composes nothing and
states the XR not ready (left unstated, Crossplane would derive Ready from zero
composed resources).

Bad input never removes what exists: a missing or unknown ``spec.cluster.source``,
an Existing cluster without ``spec.cluster.existing.secretRef.name``, a
``spec.nodePools`` entry that is not as the XRD declares it (an object with a unique
``name`` and a ``className``; ``nodeCount`` a whole number from 0, ``maxNodeCount``
from 1), an optional field the composer reads of the wrong type (``secretRef.key``,
``identitySecretRef``, ``cache``, ``gateway`` and their fields), or an InferenceClass
whose ``spec.devices[].count`` is not a whole number from 1 to 64, keeps every
observed child (the ClusterProviderConfig that replicas and hydrations use) and the
last status, with ``PoolsResolved=False``, reason ``InvalidSpec``, and a warning
naming the field and what to write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from function import API_VERSION
from function.api.inferencecluster import (
    DEFAULT_PROVIDER_CONFIG_KIND,
    STATUS_CACHE,
    STATUS_GATEWAY,
    STATUS_GPU_POOLS,
    STATUS_PROVIDER_CONFIG_REF,
    STATUS_STORAGE_CLASS,
)
from function.core import structs
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.outcome import Outcome
from function.naming import LABEL_MANAGED_BY, MANAGED_BY, child_name

CONDITION = "PoolsResolved"
PROVIDER_CONFIG_KEY = "provider-config"
PROVIDER_CONFIG_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
SECRET_NAMESPACE = "modelplane-system"
_ECHO = (STATUS_GPU_POOLS, STATUS_PROVIDER_CONFIG_REF, STATUS_CACHE, STATUS_GATEWAY)
# spec.cluster.source values of the InferenceCluster XRD (compositions/inferencecluster).
SOURCES = ("Existing", "GKE", "EKS", "AKS", "Nebius", "Vultr")
INVALID_SPEC = "InvalidSpec"


# The XRDs' integer fields have no format: int64 (Kubernetes' structural schemas).
_COUNT_MAXIMUM = 2**63 - 1
# The InferenceClass XRD's bounds of spec.devices[].count.
_DEVICE_COUNT = (1, 64)


def _count_ok(n: Any, least: int, most: int = _COUNT_MAXIMUM) -> bool:
    """Whether ``n`` is a whole number from ``least`` to ``most`` (a JSON number arrives
    as a float; a bool is not a number here)."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return False
    return float(n).is_integer() and least <= n <= most


def _optional(obj: Mapping[str, Any], key: str, kind: type, where: str) -> str:
    """``""`` when ``obj[key]`` is absent, null or a ``kind``; else a message naming
    ``where`` (the field's path) and what it should be."""
    v = obj.get(key)
    if v is None or isinstance(v, kind):
        return ""
    what = "an object" if kind is dict else "a string"
    return f"{where}: expected {what}, got {v!r:.60}"


def class_requirement(name: str) -> str:
    """The requirement name under which InferenceClass ``name`` is asked for."""
    return f"class-{name}"


def _devices(cls: Any) -> list[dict[str, Any]]:
    out = []
    for d in structs.to_py(structs.get(cls, "spec", "devices")) or []:
        if not isinstance(d, dict):
            continue
        dev = {"claim": "DRA", "count": 1, **d}
        if isinstance(dev.get("count"), float):
            dev["count"] = int(dev["count"])
        out.append(dev)
    return out


def _class_problem(name: str, cls: Any) -> str:
    """What makes InferenceClass ``name`` unusable for ``status.gpuPools``, or ``""``.

    The class's CRD declares ``spec`` an object and ``spec.devices`` a list of objects,
    each with a ``name`` and a ``driver``, whose ``count`` is a whole number from 1 to 64
    (default 1); the API server enforces it, but the function does not rely on it: a
    class that is not so is named with the field, never passed on.
    """
    spec = structs.to_py(structs.get(cls, "spec"))
    if spec is None:
        return ""  # no devices: its pools add no capacity
    if not isinstance(spec, dict):
        return f"InferenceClass {name}: spec: expected an object, got {spec!r:.60}"
    devices = spec.get("devices")
    if devices is None:
        return ""
    if not isinstance(devices, list):
        return (
            f"InferenceClass {name}: spec.devices: expected a list of devices, got {devices!r:.60}"
        )
    for i, d in enumerate(devices):
        bad = _device_problem(f"InferenceClass {name}: spec.devices[{i}]", d)
        if bad:
            return bad
    return ""


def _device_problem(at: str, d: Any) -> str:
    """What is wrong with the InferenceClass device ``d`` at ``at`` (``""``: nothing)."""
    if not isinstance(d, dict):
        return f"{at}: expected an object {{name, driver, count}}, got {d!r:.60}"
    for key in ("name", "driver"):
        if not isinstance(d.get(key), str) or not d[key]:
            return f"{at}.{key}: required, a string, got {d.get(key)!r:.60}"
    n = d.get("count")
    if n is not None and not _count_ok(n, *_DEVICE_COUNT):
        return (
            f"{at}.count: expected a whole number of devices from {_DEVICE_COUNT[0]} to "
            f"{_DEVICE_COUNT[1]}, got {n!r:.60}"
        )
    return ""


def gpu_pools(
    node_pools: Sequence[Mapping[str, Any]], classes: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[str]]:
    """``status.gpuPools`` from ``spec.nodePools`` and the InferenceClasses by name.

    Args:
        node_pools: ``spec.nodePools`` (dicts with name, className, nodeCount, maxNodeCount).
        classes: InferenceClass objects (dict or Struct) by name.

    Returns:
        The pools, in spec order, and the (sorted) names of the missing classes.
    """
    pools: list[dict[str, Any]] = []
    missing: set[str] = set()
    for p in node_pools:
        cname = p.get("className")
        cls = classes.get(cname) if isinstance(cname, str) else None
        if cls is None:
            missing.add(str(cname))
            continue
        nodes = p.get("maxNodeCount")
        if nodes is None:
            nodes = p.get("nodeCount")
        if nodes is None:
            nodes = 1
        pools.append({"name": p.get("name"), "nodes": int(nodes), "devices": _devices(cls)})
    return pools, sorted(missing)


# Least values of spec.nodePools[] counts (the InferenceCluster XRD's minimums).
_COUNT_MINIMUM = {"nodeCount": 0, "maxNodeCount": 1}


def _existing_spec(spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """``spec.cluster.existing`` and ``spec.nodePools`` of an Existing cluster, and ``""``;
    or a message naming the first field that is not as the XRD declares it (the fields
    this composer reads: the Secret references, the cache, the gateway, the node pools)."""
    existing = (spec.get("cluster") or {}).get("existing") or {}
    ref = existing.get("secretRef") if isinstance(existing, dict) else None
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not ref["name"]:
        return (
            {},
            [],
            "spec.cluster.existing.secretRef.name: required for source Existing: the "
            f"kubeconfig Secret in {SECRET_NAMESPACE}, written as "
            "{secretRef: {name: <Secret>, key: kubeconfig}}",
        )
    at = "spec.cluster.existing"
    ident = existing.get("identitySecretRef")
    gateway = spec.get("gateway")
    cache = existing.get("cache")
    problem = (
        _optional(ref, "key", str, f"{at}.secretRef.key")
        or _optional(existing, "identitySecretRef", dict, f"{at}.identitySecretRef")
        or _optional(existing, "cache", dict, f"{at}.cache")
        or _optional(spec, "gateway", dict, "spec.gateway")
    )
    if not problem and isinstance(ident, dict):
        problem = next(
            filter(
                None,
                (
                    _optional(ident, k, str, f"{at}.identitySecretRef.{k}")
                    for k in ("name", "key", "type")
                ),
            ),
            "",
        )
    if not problem and isinstance(cache, dict):
        problem = _optional(cache, STATUS_STORAGE_CLASS, str, f"{at}.cache.{STATUS_STORAGE_CLASS}")
    if not problem and isinstance(gateway, dict):
        problem = _optional(gateway, "hostname", str, "spec.gateway.hostname")
    if problem:
        return {}, [], problem
    node_pools, bad = _node_pools(spec.get("nodePools"))
    return existing, node_pools, bad


def _node_pools(value: Any) -> tuple[list[dict[str, Any]], str]:
    """``spec.nodePools`` checked as the XRD declares it.

    Args:
        value: ``spec.nodePools`` as given (absent is no pools).

    Returns:
        The pools, and ``""``; or ``[]`` and a message naming the first field that is
        not what the XRD declares (``spec.nodePools[i].nodeCount``, say) and what to
        write. Counts arrive as JSON numbers (floats): a whole number is accepted.
    """
    if value is None:
        return [], ""
    if not isinstance(value, list):
        return [], (
            f"spec.nodePools: expected a list of node pools, each "
            f"{{name, className, nodeCount}}, got {type(value).__name__}"
        )
    names: set[str] = set()
    for i, p in enumerate(value):
        bad = _pool_problem(f"spec.nodePools[{i}]", p, names)
        if bad:
            return [], bad
        names.add(p["name"])
    return value, ""


def _pool_problem(where: str, p: Any, earlier: set[str]) -> str:
    """What is wrong with node pool ``p`` at ``where`` (``""``: nothing); ``earlier``
    are the names of the pools before it (names are the list's key, so unique)."""
    if not isinstance(p, dict):
        return f"{where}: expected an object {{name, className, nodeCount}}, got {p!r:.60}"
    name = p.get("name")
    if not isinstance(name, str):
        return f"{where}.name: required, the pool's name (a string), got {name!r:.60}"
    if name in earlier:
        return f"{where}.name: {name!r:.60} names an earlier pool too; names are unique"
    cname = p.get("className")
    if not isinstance(cname, str) or not cname:
        return f"{where}.className: required, the name of an InferenceClass, got {cname!r:.60}"
    for key, least in _COUNT_MINIMUM.items():
        n = p.get(key)
        if n is not None and not _count_ok(n, least):
            return (
                f"{where}.{key}: expected a whole number of nodes from {least} to "
                f"{_COUNT_MAXIMUM} (an int64), got {n!r:.60}"
            )
    return ""


def _provider_config(inputs: Inputs, existing: Mapping[str, Any]) -> dict[str, Any]:
    ref = existing.get("secretRef") or {}
    spec: dict[str, Any] = {
        "credentials": {
            "source": "Secret",
            "secretRef": {
                "namespace": SECRET_NAMESPACE,
                "name": ref.get("name"),
                "key": ref.get("key") or "kubeconfig",
            },
        }
    }
    ident = existing.get("identitySecretRef")
    if isinstance(ident, Mapping) and ident.get("name"):
        spec["identity"] = {
            "source": "Secret",
            "type": ident.get("type") or "GoogleApplicationCredentials",
            "secretRef": {
                "namespace": SECRET_NAMESPACE,
                "name": ident["name"],
                "key": ident.get("key") or "private_key",
            },
        }
    return {
        "apiVersion": PROVIDER_CONFIG_API_VERSION,
        "kind": "ClusterProviderConfig",
        "metadata": {
            "name": child_name("inferencecluster", inputs.name),
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
        },
        "spec": spec,
    }


def _invalid(inputs: Inputs, out: Outcome, message: str) -> Outcome:
    """Keep every observed child and the last status; say what is wrong and how to fix it.

    Readiness says what is true: the kept ProviderConfig exists (ready, as observed),
    and the cluster stays usable, so the XR is ready exactly when that ProviderConfig
    is observed; the spec error is in ``PoolsResolved``, not in a fleet-wide move of
    every replica off a working cluster.
    """
    out.keep_observed(inputs, True)
    out.ready = inputs.observed_body(PROVIDER_CONFIG_KEY) is not None
    _echo(inputs, out)
    out.condition(CONDITION, "False", INVALID_SPEC, message)
    out.warning(message, INVALID_SPEC)
    return out


def _echo(inputs: Inputs, out: Outcome) -> None:
    """Keep the status fields this composer writes as observed (a call that resolves
    nothing new; Crossplane applies the status a function returns, whole)."""
    for k in _ECHO:
        v = inputs.status(k)
        if v is not None:
            out.status[k] = v


def compose(inputs: Inputs) -> Outcome:
    """Compose a bring-your-own InferenceCluster's status (see the module docstring)."""
    out = Outcome()
    spec = inputs.spec
    cluster = spec.get("cluster")
    source = cluster.get("source") if isinstance(cluster, dict) else None
    if source not in SOURCES:
        got = "nothing" if source is None else repr(source)
        return _invalid(
            inputs,
            out,
            f"spec.cluster.source: expected one of {', '.join(SOURCES)} (Existing for a "
            f"bring-your-own cluster), got {got}; what this XR composed is kept",
        )
    if source != "Existing":
        return _not_served(inputs, out, source)
    existing, node_pools, bad = _existing_spec(spec)
    if bad:
        return _invalid(inputs, out, bad + "; what this XR composed is kept")
    class_names = sorted(
        {p["className"] for p in node_pools if isinstance(p.get("className"), str)}
    )
    for c in class_names:
        out.require(class_requirement(c), API_VERSION, "InferenceClass", match_name=c)

    pc = _provider_config(inputs, existing)
    pc_observed = inputs.observed_body(PROVIDER_CONFIG_KEY) is not None
    out.add(PROVIDER_CONFIG_KEY, pc, ready=pc_observed)

    resolved = {c: inputs.required(class_requirement(c)) for c in class_names}
    pending = [c for c, r in resolved.items() if r is UNRESOLVED]
    if pending:
        _echo(inputs, out)
        out.condition(
            CONDITION,
            "Unknown",
            "ResolvingClasses",
            "waiting for Crossplane to resolve InferenceClasses " + ", ".join(pending),
        )
        out.ready = False
        return out

    classes = {c: r.items[0] for c, r in resolved.items() if isinstance(r, Resolved) and r.items}
    bad = next(filter(None, (_class_problem(c, cls) for c, cls in classes.items())), "")
    if bad:
        return _invalid(inputs, out, bad + "; what this XR composed and its last status are kept")
    pools, missing = gpu_pools(node_pools, classes)
    _write_status(out, spec, existing, pools, pc["metadata"]["name"])
    _pools_resolved(out, pools, missing, len(node_pools))
    out.ready = pc_observed and not missing
    return out


def _not_served(inputs: Inputs, out: Outcome, source: str) -> Outcome:
    """A source Modelplane's compositions provision: nothing new composed here, not ready.

    What this composer composed before (the ProviderConfig of a cluster whose source was
    ``Existing``) is kept as observed: replicas and hydrations use it, and switching
    sources on this composition must not delete it by surprise.
    """
    out.keep_observed(inputs, True)
    _echo(inputs, out)
    out.condition(
        CONDITION,
        "False",
        "SourceNotServed",
        f"spec.cluster.source {source} is provisioned by Modelplane's compositions; "
        f"function-modelplane composes only Existing clusters",
    )
    # Explicitly not ready: with nothing composed, Crossplane would otherwise derive
    # Ready=True (every one of zero composed resources is ready), and placement would
    # send workloads to a cluster nothing serves.
    out.ready = False
    return out


def _write_status(
    out: Outcome,
    spec: dict[str, Any],
    existing: dict[str, Any],
    pools: list[dict[str, Any]],
    provider_config: str,
) -> None:
    """``status.gpuPools``, the ProviderConfig reference, the cache's storage class and
    the gateway hostname."""
    out.status[STATUS_GPU_POOLS] = pools
    out.status[STATUS_PROVIDER_CONFIG_REF] = {
        "name": provider_config,
        "kind": DEFAULT_PROVIDER_CONFIG_KIND,
    }
    sc = (existing.get("cache") or {}).get(STATUS_STORAGE_CLASS)
    if sc:
        out.status[STATUS_CACHE] = {STATUS_STORAGE_CLASS: sc}
    host = (spec.get("gateway") or {}).get("hostname")
    if host:
        out.status[STATUS_GATEWAY] = {"hostname": host}


def _pools_resolved(
    out: Outcome, pools: list[dict[str, Any]], missing: list[str], wanted: int
) -> None:
    """``PoolsResolved``: True when every node pool's InferenceClass was found."""
    nodes = sum(p["nodes"] for p in pools)
    if missing:
        out.condition(
            CONDITION,
            "False",
            "ClassNotFound",
            f"InferenceClass {', '.join(missing)} not found; {len(pools)} of "
            f"{wanted} node pools resolved ({nodes} nodes)",
        )
        out.warning(f"InferenceClass {', '.join(missing)} not found", "ClassNotFound")
    else:
        out.condition(
            CONDITION, "True", "Resolved", f"{len(pools)} node pools resolved ({nodes} nodes)"
        )
