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
  ``identitySecretRef`` as its identity when set (``{source: Secret, type, secretRef}``;
  a type provider-kubernetes does not read from a Secret, ``AWSWebIdentityCredentials``,
  is invalid input: :data:`function.api.inferencecluster.IDENTITY_TYPES`).
- ``status.cache.storageClassName``: ``spec.cluster.existing.cache.storageClassName``.
- ``status.gateway.hostname``: ``spec.gateway.hostname`` when set.

Requirements: each referenced InferenceClass by name (cluster-scoped). Until
all are resolved, the last status and the ProviderConfig are kept. A class that
does not exist leaves its pool out of ``gpuPools`` (no capacity is invented),
and ``PoolsResolved=False`` (reason ``ClassNotFound``) names it.

The XR is ready when the ProviderConfig exists and every class resolved;
Crossplane then sets its ``Ready`` condition, which placement requires.
Other sources are provisioned by Modelplane's own compositions: the composer
reports ``PoolsResolved=False`` (reason ``SourceNotServed``), composes nothing new
(a ProviderConfig it composed while the source was ``Existing`` is kept) and states
the XR not ready (left unstated, Crossplane would derive Ready from the composed
resources).

Bad input never removes what exists. The spec of an Existing cluster is checked as the
XRD declares the fields read here (:func:`function.api.inferencecluster.parse_existing`:
``spec.cluster.existing`` with its Secret references and cache, ``spec.nodePools[]``
with unique names, a ``className`` and whole-number counts, ``spec.gateway``), and each
InferenceClass as its CRD declares the devices copied
(:func:`function.api.inferenceclass.check`). A missing or unknown
``spec.cluster.source``, a spec that is not so (reason ``InvalidSpec``) or such a class
(reason ``ClassInvalid``) keeps every observed child (the ClusterProviderConfig that
replicas and hydrations use), the last status and the XR's readiness as it was, with
``PoolsResolved=False`` and a warning naming the field and what to write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from function import API_VERSION
from function.api import inferenceclass
from function.api.inferencecluster import (
    CLAIM_DRA,
    DEFAULT_IDENTITY_KEY,
    DEFAULT_KUBECONFIG_KEY,
    DEFAULT_PROVIDER_CONFIG_KIND,
    IDENTITY_TYPES,
    SECRET_NAMESPACE,
    SOURCE_EXISTING,
    STATUS_CACHE,
    STATUS_GATEWAY,
    STATUS_GPU_POOLS,
    STATUS_PROVIDER_CONFIG_REF,
    STATUS_STORAGE_CLASS,
    is_ready,
    parse_existing,
)
from function.core import events, structs
from function.core.errors import SpecError, written_as
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.outcome import Outcome
from function.naming import LABEL_MANAGED_BY, MANAGED_BY, child_name

CONDITION = "PoolsResolved"
# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (CONDITION,)
PROVIDER_CONFIG_KEY = "provider-config"
PROVIDER_CONFIG_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
_ECHO = (STATUS_GPU_POOLS, STATUS_PROVIDER_CONFIG_REF, STATUS_CACHE, STATUS_GATEWAY)
# spec.cluster.source values of the InferenceCluster XRD (compositions/inferencecluster).
SOURCES = (SOURCE_EXISTING, "GKE", "EKS", "AKS", "Nebius", "Vultr")
INVALID_SPEC = "InvalidSpec"
# An InferenceClass that a pool names is not what its CRD declares.
CLASS_INVALID = "ClassInvalid"


def class_requirement(name: str) -> str:
    """The requirement name under which InferenceClass ``name`` is asked for."""
    return f"class-{name}"


def _devices(cls: Any) -> list[dict[str, Any]]:
    out = []
    for d in structs.to_py(structs.get(cls, "spec", "devices")) or []:
        if not isinstance(d, dict):
            continue
        dev = {"claim": CLAIM_DRA, "count": 1, **d}
        if isinstance(dev.get("count"), float):
            dev["count"] = int(dev["count"])
        out.append(dev)
    return out


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


def _source(cluster: Any) -> tuple[str, str]:
    """``spec.cluster.source``, and ``""``; or ``""`` and a message naming the field
    (``spec.cluster`` itself when it is not an object) and what to write."""
    if cluster is not None and not isinstance(cluster, dict):
        return "", (
            "spec.cluster: expected an object {source: Existing, existing: {secretRef: "
            f"{{name: <Secret>}}}}}}, got {written_as(cluster)}"
        )
    source = cluster.get("source") if isinstance(cluster, dict) else None
    if source not in SOURCES:
        got = "nothing" if source is None else repr(source)
        return "", (
            f"spec.cluster.source: expected one of {', '.join(SOURCES)} (Existing for a "
            f"bring-your-own cluster), got {got}"
        )
    return str(source), ""


def _existing_spec(spec: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``spec.cluster.existing`` and ``spec.nodePools`` of an Existing cluster, as
    written, once they are what the XRD declares (:func:`parse_existing`).

    Raises:
        SpecError: naming the field; a missing kubeconfig Secret says what to write.
    """
    existing = (spec.get("cluster") or {}).get("existing")
    if existing is None or isinstance(existing, dict):
        ref = (existing or {}).get("secretRef")
        # Missing: say what to write; of the wrong type: parse_existing names it.
        if ref is None or (isinstance(ref, dict) and ref.get("name") in (None, "")):
            raise SpecError(
                "spec.cluster.existing.secretRef.name",
                f"required for source Existing: the kubeconfig Secret in {SECRET_NAMESPACE}, "
                "written as {secretRef: {name: <Secret>, key: kubeconfig}}",
            )
    parse_existing(spec)
    return spec["cluster"]["existing"], spec.get("nodePools") or []


def _provider_config(inputs: Inputs, existing: Mapping[str, Any]) -> dict[str, Any]:
    ref = existing.get("secretRef") or {}
    spec: dict[str, Any] = {
        "credentials": {
            "source": "Secret",
            "secretRef": {
                "namespace": SECRET_NAMESPACE,
                "name": ref.get("name"),
                "key": ref.get("key") or DEFAULT_KUBECONFIG_KEY,
            },
        }
    }
    ident = existing.get("identitySecretRef")
    if isinstance(ident, Mapping) and ident.get("name"):
        spec["identity"] = {
            "source": "Secret",
            "type": ident.get("type") or IDENTITY_TYPES[0],
            "secretRef": {
                "namespace": SECRET_NAMESPACE,
                "name": ident["name"],
                "key": ident.get("key") or DEFAULT_IDENTITY_KEY,
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


def _invalid(inputs: Inputs, out: Outcome, message: str, reason: str = INVALID_SPEC) -> Outcome:
    """Keep every observed child and the last status; say what is wrong and how to fix it.

    Readiness stays as it was: the XR is ready when it was (its observed ``Ready``
    condition, which Crossplane set from the last good reconcile) and its ProviderConfig
    still exists. A typo neither moves every replica off a working cluster nor makes a
    cluster that placement left out eligible; the error is in ``PoolsResolved``.
    """
    out.keep_observed(inputs, True)
    was_ready = is_ready(inputs.xr)
    out.ready = was_ready and inputs.observed_body(PROVIDER_CONFIG_KEY) is not None
    _echo(inputs, out)
    out.condition(CONDITION, "False", reason, message)
    _warn_once(inputs, out, reason, message)
    return out


def _warn_once(
    inputs: Inputs, out: Outcome, reason: str, message: str, event: str | None = None
) -> None:
    """A Warning event (``event``, else ``message``) when ``PoolsResolved`` changes to
    False (``reason``, ``message``): not on every call that finds it unchanged
    (``function.core.events``: Crossplane turns every result into an event, on every
    call)."""
    events.condition_warning(out, inputs.xr, CONDITION, reason, message, event=event)


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
    source, bad = _source(spec.get("cluster"))
    if bad:
        return _invalid(inputs, out, f"{bad}; what this XR composed is kept")
    if source != SOURCE_EXISTING:
        return _not_served(inputs, out, source)
    try:
        existing, node_pools = _existing_spec(spec)
    except SpecError as e:
        return _invalid(inputs, out, f"{e}; what this XR composed is kept")
    class_names = sorted({p["className"] for p in node_pools})  # checked by parse_existing
    for c in class_names:
        out.require(class_requirement(c), API_VERSION, "InferenceClass", match_name=c)

    pc = _provider_config(inputs, existing)
    pc_observed = inputs.observed_body(PROVIDER_CONFIG_KEY) is not None
    out.add(PROVIDER_CONFIG_KEY, pc, ready=pc_observed)

    resolved = {c: inputs.required(class_requirement(c)) for c in class_names}
    pending = [c for c, r in resolved.items() if r is UNRESOLVED]
    if pending:
        # Not known yet: keep every observed child as it was (a requirement Crossplane
        # has not resolved is not "no class").
        out.keep_observed(inputs, True)
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
    try:
        for c, cls in classes.items():
            inferenceclass.check(c, structs.to_py(structs.get(cls, "spec")))
    except SpecError as e:
        message = f"{e}; the last status is kept"
        return _invalid(inputs, out, message, reason=CLASS_INVALID)
    pools, missing = gpu_pools(node_pools, classes)
    _write_status(out, spec, existing, pools, pc["metadata"]["name"])
    _pools_resolved(inputs, out, pools, missing, len(node_pools))
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
    inputs: Inputs, out: Outcome, pools: list[dict[str, Any]], missing: list[str], wanted: int
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
        _warn_once(
            inputs,
            out,
            "ClassNotFound",
            f"InferenceClass {', '.join(missing)} not found; {len(pools)} of "
            f"{wanted} node pools resolved ({nodes} nodes)",
            f"InferenceClass {', '.join(missing)} not found",
        )
    else:
        out.condition(
            CONDITION, "True", "Resolved", f"{len(pools)} node pools resolved ({nodes} nodes)"
        )
