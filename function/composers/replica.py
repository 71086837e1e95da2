"""ModelReplica: compose the serving workload of one model copy on one cluster.

Inputs: the replica's spec (``function.api.modelreplica``, written by the
ModelDeployment composer) and three requirements, asked on every call:

- ``cluster``: the InferenceCluster ``spec.clusterName`` (its provider config and
  ``status.gpuPools[]``);
- with ``spec.modelCacheRef``: ``cache``, the ModelCache (its ``spec.flashLoader``),
  and ``hydration``, the ModelCacheHydration of (cache, cluster) named
  ``naming.hydration_name`` in the replica's namespace (its ``status.phase``).

Outputs, as provider-kubernetes Objects with the cluster's provider config: per
engine a Deployment (Standalone) or a LeaderWorkerSet (Leader + Worker), a
ResourceClaimTemplate per member that claims devices, and one Service; status
``phase``, ``message``, ``engines[]``, ``hydration`` and, once every engine serves,
``endpoint`` (the Service's in-cluster URL); condition ``ModelReady``.

Cold start (``modelplane_model_cold_start_duration_seconds``, see ``function.ops.metrics``
for why a stateless function counts through status): status ``createdAt`` (the XR's
``metadata.creationTimestamp``), ``hydrationReadyAt`` (when the hydration gate lifted
for a replica that waited for its cache: the hydration's ``status.readyAt``) and
``servingSince`` (the call in which every engine first served). That call, and only
it, observes ``servingSince`` minus ``hydrationReadyAt`` (or ``createdAt``); later
calls carry the timestamps and observe nothing. The timestamps come from the observed
XR on every call and never enter the memoized plan (below).

Hydration gates the workload (pods must not start on a half-filled volume):

==========================  ================================  ===================================
hydration                   nothing composed yet              a workload was composed before
==========================  ================================  ===================================
not resolved yet            keep what exists, decide nothing  keep what exists, decide nothing
Pending / Hydrating         compose nothing, ``Hydrating``    keep it exactly (no roll onto a
                                                              volume being rewritten), ``Hydrating``
Failed                      compose nothing,                  keep it exactly, ``HydrationFailed``
                            ``HydrationFailed``
not found                   compose nothing,                  keep it exactly,
                            ``HydrationNotFound``             ``HydrationNotFound``
Ready                       compose                           compose
==========================  ================================  ===================================

A replica whose hydration failed after it served keeps its running pods (the
weights are already loaded; tearing them down would turn a cache problem into
an outage) but reports ``ModelReady=False``/``HydrationFailed`` and is not ready,
so the ModelDeployment sees the failure and decides (keep or re-place). Every
gated state sets the XR explicitly not ready and asks to be called again after
``MODELPLANE_POLL_SECONDS``. Without a cache nothing is gated: the engine loads
from its source itself.

``ModelReady`` reasons: ``Resolving`` (Unknown: a requirement is not resolved
yet; everything observed is kept and the last status echoed), ``ClusterNotFound``,
``ClusterNotReady`` (no provider config yet), ``CacheNotFound``,
``HydrationNotFound``, ``Hydrating``, ``HydrationFailed``, ``PoolNotFound`` (the
placed pool is gone from ``status.gpuPools``), ``DeviceNotFound`` (no device of the
pool meets a request any more), ``Starting`` and ``Serving`` (True). All but the
last two compose nothing new and keep every observed child exactly. Invalid
input (a wrong type, a reserved env name, a flash-loader or ``/dev/shm`` value
at any level, a device selector that does not compile) is a fatal result naming
the field, so Crossplane applies nothing.

Hot path: Crossplane calls this for every replica about once a minute, and what a
replica desires changes rarely. The desired children are a pure function of the spec,
the cluster's provider config and ``status.gpuPools``, the effective flash-loader and
``/dev/shm`` settings, and the XR's name and namespace, so they are built once per
distinct input (``_plan``, an LRU of :data:`CACHE_SIZE` entries keyed by the
deterministic serialization of those values, about 10 KiB each: bodies are kept
serialized) and reused; the validated spec is memoized the same way. Each call still
reads the requirements, the hydration phase and the observed workloads. Invalid input
is never memoized: it is rejected on every call.

Known limit: under ``serving.mode: PrefillDecode`` the Service fronts the serving
pods of both engines; prefill/decode-aware routing is not composed here.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from google.protobuf.struct_pb2 import ListValue, Struct, Value
from pydantic import ValidationError

from function import API_VERSION, naming
from function.api.modelreplica import ModelReplicaSpec
from function.api.modelreplica import ReplicaEngine as Engine
from function.api.modelreplica import ReplicaMember as Member
from function.api.modelreplica_checks import check_spec
from function.core import structs
from function.core.errors import SpecError, pydantic_errors
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.memo import memo
from function.core.outcome import Outcome, Result
from function.core.structfill import struct_from
from function.core.timeutil import elapsed, format_time, parse_time
from function.manifests import workloads as wl
from function.manifests.objects import (
    provider_config_ref,
    remote_object,
    sync_error,
)
from function.ops.settings import Settings
from function.scheduling.devices import (
    Device,
    DeviceRequest,
    InvalidSelector,
    SelectorEvaluationError,
    compile_selector,
    parse_quantity,
)
from function.serving.env import unresolved
from function.serving.flashloader import (
    SETTINGS_ATTRS,
    FlashLoader,
    resolve_flash_loader,
    resolve_shm,
)

CONDITION = "ModelReady"
REQ_CLUSTER = "cluster"
REQ_CACHE = "cache"
REQ_HYDRATION = "hydration"
SERVICE_KEY = "service"
_WORKLOAD_PREFIX = "workload-"


def workload_key(engine: str) -> str:
    """Composition-resource name of an engine's workload Object."""
    return f"{_WORKLOAD_PREFIX}{engine}"


def claim_key(engine: str, role: str) -> str:
    """Composition-resource name of a member's ResourceClaimTemplate Object."""
    return f"claim-{engine}-{role.lower()}"


def parse_spec(spec: dict[str, Any]) -> ModelReplicaSpec:
    """Validate the replica's spec and the shape of each engine.

    Raises:
        SpecError: naming the first invalid field.
    """
    check_spec(spec)
    try:
        parsed = ModelReplicaSpec.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors("spec", e) from None
    seen: set[str] = set()
    for ei, engine in enumerate(parsed.engines):
        if engine.name in seen:
            raise SpecError(f"spec.engines[{ei}].name", f"duplicate engine name {engine.name!r}")
        seen.add(engine.name)
        if not naming.DNS1123_LABEL.match(engine.name):
            raise SpecError(f"spec.engines[{ei}].name", "must be a DNS-1123 label")
        roles = [m.role for m in engine.members]
        if roles != ["Standalone"] and sorted(roles) != ["Leader", "Worker"]:
            raise SpecError(
                f"spec.engines[{ei}].members",
                f"an engine is one Standalone member, or one Leader and one Worker; got {roles}",
            )
        for mi, m in enumerate(engine.members):
            base = f"spec.engines[{ei}].members[{mi}]"
            if m.role != "Worker" and m.worker is not None:
                raise SpecError(f"{base}.worker", "may only be set on a Worker member")
            if not isinstance(m.template.get("spec"), dict):
                raise SpecError(f"{base}.template.spec", "is required")
            wl.engine_index(m.template, f"{base}.template")
            if not m.pool and not any(o.pool for o in engine.members):
                raise SpecError(f"{base}.pool", "is required: placement chose no pool")
    return parsed


def _member(engine: Engine, role: str) -> tuple[int, Member]:
    for i, m in enumerate(engine.members):
        if m.role == role:
            return i, m
    raise KeyError(role)  # parse_spec guarantees the roles


def _pool_of(engine: Engine, member: Member) -> str:
    return member.pool or next(m.pool for m in engine.members if m.pool)  # type: ignore[return-value]


def compose(inputs: Inputs) -> Outcome:
    """Compose one ModelReplica (see the module docstring, "Hot path" for the memoization).

    Raises:
        SpecError: for an invalid spec, a user env entry that sets a reserved name,
            or an invalid flash-loader or ``/dev/shm`` setting (named with its level).
    """
    out = Outcome()
    spec_key = _key(inputs.xr, "spec")
    head = _head(spec_key)
    ns = inputs.namespace
    cache = head.cache
    out.require(REQ_CLUSTER, API_VERSION, "InferenceCluster", match_name=head.clusterName)
    hyd_name = ""
    if cache is not None:
        hyd_name = naming.hydration_name(ns, cache, head.clusterName)
        out.require(REQ_CACHE, API_VERSION, "ModelCache", match_name=cache, namespace=ns)
        out.require(
            REQ_HYDRATION, API_VERSION, "ModelCacheHydration", match_name=hyd_name, namespace=ns
        )
    defaults = _Defaults.of(inputs.settings)
    shm = _shm(defaults, head.shm)
    times = _Times.carried(inputs)

    cluster_req = inputs.required(REQ_CLUSTER)
    cache_req = inputs.required(REQ_CACHE) if cache is not None else None
    hyd_req = inputs.required(REQ_HYDRATION) if cache is not None else None
    if UNRESOLVED in (cluster_req, cache_req, hyd_req):
        return _unresolved(inputs, out, times)
    assert isinstance(cluster_req, Resolved)
    if not cluster_req.items:
        return _gate(
            inputs,
            out,
            times,
            "ClusterNotFound",
            f"InferenceCluster {head.clusterName} not found",
            warn=True,
        )
    cluster = cluster_req.items[0]
    pc = provider_config_ref(cluster)
    if pc is None:
        return _gate(
            inputs,
            out,
            times,
            "ClusterNotReady",
            f"InferenceCluster {head.clusterName} reports no status.providerConfigRef yet",
        )

    flash: FlashLoader | None = None
    hydration: dict[str, Any] | None = None
    if cache is not None:
        assert isinstance(cache_req, Resolved) and isinstance(hyd_req, Resolved)
        if not cache_req.items:
            return _gate(
                inputs,
                out,
                times,
                "CacheNotFound",
                f"ModelCache {ns}/{cache} not found",
                warn=True,
                cache_gate=True,
            )
        fl = _flash(
            defaults,
            _key(structs.sub(cache_req.items[0], "spec"), "flashLoader"),
            _key(structs.sub(inputs.xr, "spec"), "flashLoader"),
            f"ModelCache {ns}/{cache} spec.flashLoader",
        )
        flash = fl if fl.enabled else None
        if flash is not None:
            _check_flash_fits(out, flash, cache_req.items[0], f"{ns}/{cache}")
        if not hyd_req.items:
            return _gate(
                inputs,
                out,
                times,
                "HydrationNotFound",
                f"cache {cache} has no ModelCacheHydration {hyd_name} for cluster "
                f"{head.clusterName}; the cluster is outside the cache's footprint "
                "or not staged yet",
                hydration={"name": hyd_name, "phase": "NotFound", "message": "not found"},
                cache_gate=True,
            )
        hyd_status = structs.sub(hyd_req.items[0], "status")
        phase = structs.sval(hyd_status, "phase") or "Pending"
        msg = structs.sval(hyd_status, "message")
        hydration = {"name": hyd_name, "phase": phase, "message": msg or f"hydration is {phase}"}
        if phase == "Failed":
            return _gate(
                inputs,
                out,
                times,
                "HydrationFailed",
                f"hydration of cache {cache} failed on cluster {head.clusterName}: "
                f"{msg or 'no message'}",
                hydration=hydration,
                phase="Failed",
                warn=True,
                cache_gate=True,
            )
        if phase != "Ready":
            return _gate(
                inputs,
                out,
                times,
                "Hydrating",
                f"waiting for cache {cache} on cluster {head.clusterName}: hydration is {phase}"
                + (f" ({msg})" if msg else ""),
                hydration=hydration,
                phase="Hydrating",
                cache_gate=True,
            )
        if times.serving_since is None and times.hydration_ready is None and _was_gated(inputs):
            times.hydration_ready = _gate_lifted_at(hyd_status, times.created, inputs.now)

    plan = _plan(
        inputs.name,
        ns,
        spec_key,
        pc["kind"],
        pc["name"],
        _key(structs.sub(cluster, "status"), "gpuPools"),
        shm,
        flash,
    )
    return _compose(inputs, out, plan, head.clusterName, hydration, times, cache)


# How many distinct parsed specs and plans are kept per process (least recently used
# dropped first): one per ModelReplica this process serves, each a few KiB.
CACHE_SIZE = 4096


def _key(node: Struct | None, name: str) -> bytes:
    """A canonical form of ``node[name]``: its deterministic serialization (b"" when absent).

    Deterministic serialization orders map keys, so equal values give equal bytes,
    and the bytes parse back into the value (``Value.FromString``).
    """
    if node is None:
        return b""
    v = node.fields.get(name)
    return v.SerializeToString(deterministic=True) if v is not None else b""


def _from_key(key: bytes) -> Any:
    """The value whose canonical form is ``key``, as :func:`function.core.structs.get` reads it:
    a str, float, bool, Struct or ListValue; None when absent or null."""
    holder = Struct()
    holder.fields["v"].MergeFromString(key)
    return structs.get(holder, "v")


def _plain(key: bytes) -> Any:
    """``structs.to_py(_from_key(key))``, about 1.5x faster (one dispatch per value)."""
    return structs.value_to_py(Value.FromString(key))


@memo(32, weight=4)
def _parse(spec_key: bytes) -> ModelReplicaSpec:
    """The validated spec from its canonical form (memoized: only the last few, since
    a parsed spec is tens of KiB; :func:`_head` and :func:`_plan` keep what they need).

    The returned model is shared between calls: read it, never change it.

    Raises:
        SpecError: naming the first invalid field (not memoized).
    """
    raw = _plain(spec_key)
    return parse_spec(raw if isinstance(raw, dict) else {})


@dataclass(frozen=True, slots=True)
class _Head:
    """What every call reads of a valid spec before the plan."""

    clusterName: str
    cache: str | None
    shm: str | None


@memo(CACHE_SIZE, weight=4)
def _head(spec_key: bytes) -> _Head:
    """Validate the spec (:func:`parse_spec`) and keep its cluster, cache and shm override.

    Raises:
        SpecError: naming the first invalid field (not memoized).
    """
    spec = _parse(spec_key)
    cache = spec.modelCacheRef.name if spec.modelCacheRef is not None else None
    return _Head(spec.clusterName, cache, spec.shmSizeLimit)


@dataclass(frozen=True, slots=True)
class _Defaults:
    """The settings a replica's flash loader and ``/dev/shm`` depend on, as a cache key.

    Equal and hashed by those values only (``key``); ``settings`` rides along for the
    resolvers, so settings fields of any type, or added later, never break hashing.
    """

    key: tuple[Any, ...]
    settings: Settings = field(compare=False, hash=False)

    @classmethod
    def of(cls, settings: Settings) -> _Defaults:
        return cls(
            tuple(getattr(settings, attr, None) for attr in SETTINGS_ATTRS),
            settings,
        )


@memo(256, weight=4)
def _shm(defaults: _Defaults, value: str | None) -> str:
    """``resolve_shm`` memoized (a pure function of the defaults and the override)."""
    return resolve_shm(defaults.settings, value)


@memo(1024, weight=4)
def _flash(defaults: _Defaults, cache_key: bytes, own_key: bytes, cache_level: str) -> FlashLoader:
    """The effective flash loader (memoized): defaults, the ModelCache's, the replica's.

    ``cache_key`` and ``own_key`` are the canonical forms (:func:`_key`) of the
    ModelCache's and the replica's ``spec.flashLoader``.

    Raises:
        SpecError: the ModelCache's ``spec.flashLoader`` is not an object, or a level
            holds an invalid value (``function.serving.flashloader.resolve_flash_loader``).
    """
    cache_fl = _plain(cache_key)
    if cache_fl is not None and not isinstance(cache_fl, dict):
        raise SpecError(cache_level, "must be an object (level: ModelCache)")
    return resolve_flash_loader(
        defaults.settings, cache_fl, _plain(own_key), cache_level=cache_level
    )


def _check_flash_fits(out: Outcome, flash: FlashLoader, cache: Any, ref: str) -> None:
    """Warn when the flash loader's memory volume cannot hold the cache's weights.

    The copy would hit the ``emptyDir`` size limit and the kubelet evicts the pod
    (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir), so every
    start would fail; the cache's ``spec.huggingFace.sizeGiB`` says how large
    the weights are.
    """
    size_gib = structs.get(cache, "spec", "huggingFace", "sizeGiB")
    if not isinstance(size_gib, (int, float)) or isinstance(size_gib, bool) or size_gib <= 0:
        return
    try:
        limit = parse_quantity(flash.tmpfs_size_limit)
    except ValueError:
        return
    if limit < Decimal(str(size_gib)) * 2**30:
        out.warning(
            f"flash loader tmpfsSizeLimit {flash.tmpfs_size_limit} is smaller than ModelCache "
            f"{ref} ({size_gib:g} GiB): the copy cannot fit and the engine pods will be evicted",
            "FlashLoaderTooSmall",
        )


def _pools(gpu_pools: Any) -> dict[str, Any]:
    """``status.gpuPools[]`` entries by name (entries without a name are ignored)."""
    out: dict[str, Any] = {}
    for p in _list(gpu_pools):
        n = structs.get_str(p, "name")
        if n:
            out[n] = p
    return out


def _list(v: Any) -> list[Any]:
    """``v`` as a list when it is one (a ListValue or list), else empty."""
    return list(v) if isinstance(v, (ListValue, list)) else []


def _node_selector(pool_name: str, pool: Any) -> dict[str, str]:
    """The node selector of a pool's nodes.

    The ``gpuPools[]`` entry's own ``nodeSelector`` when it has one (a
    bring-your-own cluster whose nodes carry other labels), else Modelplane's
    convention: its provisioned node groups label every node
    ``modelplane.ai/pool: <pool name>``.
    """
    sel = structs.get_map(pool, "nodeSelector")
    return sel or {naming.LABEL_POOL: pool_name}


def _device_requests(
    member: Member, pool_name: str, pool: Any, field_path: str
) -> tuple[list[dict[str, Any]], str | None]:
    """DRA DeviceRequests of a member from its ``nodeSelector.devices`` and the pool's devices.

    Each request is matched again against the pool the placement chose
    (``function.scheduling.devices``, DRA CEL semantics): the first claimable (``claim:
    DRA``) device that has ``count`` units and satisfies every selector gives the
    request's ``deviceClassName``; its selectors travel verbatim into the claim so
    the node's DRA driver enforces them. A request met only by a ``Synthetic``
    device is placement-only and claims nothing. A ``deviceClassName`` already on
    the request (stamped by the placement) is used as it is.

    Returns:
        ``(requests, problem)``; ``problem`` says which request no device meets.

    Raises:
        SpecError: a malformed request or a selector that does not compile.
    """
    wanted = (member.nodeSelector or {}).get("devices") or []
    if not isinstance(wanted, list):
        raise SpecError(f"{field_path}.nodeSelector.devices", "must be a list")
    raw_devs = [
        structs.to_py(d)
        for d in _list(structs.get(pool, "devices"))
        if isinstance(structs.get(d, "name"), str)
    ]
    devs = [(raw, Device.from_status(raw)) for raw in raw_devs]
    out: list[dict[str, Any]] = []
    for i, req in enumerate(wanted):
        f = f"{field_path}.nodeSelector.devices[{i}]"
        if not isinstance(req, dict) or not isinstance(req.get("name"), str) or not req["name"]:
            raise SpecError(f"{f}.name", "is required")
        count = req.get("count", 1)
        if not isinstance(count, (int, float)) or count != int(count) or count < 1:
            raise SpecError(f"{f}.count", "must be a whole number of at least 1")
        selectors: list[str] = []
        for si, s in enumerate(req.get("selectors") or []):
            cel = s.get("cel") if isinstance(s, dict) else None
            if not isinstance(cel, str) or not cel:
                raise SpecError(f"{f}.selectors[{si}].cel", "is required")
            try:
                compile_selector(cel, f"{field_path}.nodeSelector.devices[{i}].selectors[{si}].cel")
            except InvalidSelector as e:
                raise SpecError(f"{f}.selectors[{si}].cel", str(e)) from None
            selectors.append(cel)
        dev_class = req.get("deviceClassName")
        if not dev_class:
            want = DeviceRequest(req["name"], int(count), tuple(selectors))
            try:
                matches = [(raw, d) for raw, d in devs if want.satisfied_by(d)]
            except SelectorEvaluationError as e:
                si = selectors.index(e.expression)
                raise SpecError(f"{f}.selectors[{si}].cel", str(e)) from None
            dra = [(raw, d) for raw, d in matches if d.claim == "DRA"]
            if not dra:
                if matches:
                    continue  # Synthetic: matched for placement, never claimed
                return [], (
                    f"device request {req['name']} (count {int(count)}) is met by no device "
                    f"of pool {pool_name}"
                )
            raw = dra[0][0]
            dev_class = raw.get("deviceClassName")
            if not dev_class:
                return [], f"device {raw['name']} of pool {pool_name} has no deviceClassName"
        out.append(wl.device_request(req["name"], str(dev_class), int(count), selectors))
    return out, None


def _labels(name: str, spec: ModelReplicaSpec) -> tuple[dict[str, str], dict[str, str]]:
    return naming.labels_with_full(
        {
            naming.LABEL_REPLICA: name,
            naming.LABEL_DEPLOYMENT: spec.deploymentName,
            naming.LABEL_CLUSTER: spec.clusterName,
        }
    )


@dataclass(frozen=True, slots=True)
class _EnginePlan:
    """One composed engine: its name, workload kind and name, and composition-resource name."""

    name: str
    kind: str
    workload: str
    key: str


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a replica desires for one distinct input (see :func:`_plan`).

    Attributes:
        gate: ``(reason, message)`` when nothing new may be composed
            (``PoolNotFound``, ``DeviceNotFound``); the children are then empty.
        results: Warning results, in the order they arise.
        children: ``(composition-resource name, serialized Struct body)``.
        engines: The composed engines, in spec order.
        url: The Service's in-cluster URL.
    """

    gate: tuple[str, str] | None
    results: tuple[Result, ...] = ()
    children: tuple[tuple[str, bytes], ...] = ()
    engines: tuple[_EnginePlan, ...] = ()
    url: str = ""


@memo(CACHE_SIZE, weight=4)
def _plan(
    name: str,
    ns: str,
    spec_key: bytes,
    pc_kind: str,
    pc_name: str,
    pools_key: bytes,
    shm: str,
    flash: FlashLoader | None,
) -> _Plan:
    """The desired children of replica ``ns/name`` (memoized; a pure function of its args).

    Args:
        name: The XR's name.
        ns: The XR's namespace.
        spec_key: The canonical form of the XR's spec (:func:`_key`).
        pc_kind: The cluster's provider config kind.
        pc_name: The cluster's provider config name.
        pools_key: The canonical form of the cluster's ``status.gpuPools``.
        shm: The ``/dev/shm`` size limit.
        flash: The effective flash loader when enabled, else None.

    Raises:
        SpecError: a pod template the function cannot extend (not memoized).
    """
    spec = _parse(spec_key)
    pools = _pools(_from_key(pools_key))
    missing = sorted(
        {_pool_of(e, m) for e in spec.engines for m in e.members if _pool_of(e, m) not in pools}
    )
    if missing:
        return _Plan(
            (
                "PoolNotFound",
                f"InferenceCluster {spec.clusterName} has no gpuPools {', '.join(missing)} "
                "in its status",
            )
        )
    pc = {"kind": pc_kind, "name": pc_name}
    out = Outcome()  # scratch: children and warnings
    remote_ns = naming.REMOTE_NAMESPACE
    labels, annotations = _labels(name, spec)
    cache_pvc = naming.cache_pvc_name(ns, spec.modelCacheRef.name) if spec.modelCacheRef else None
    svc_name = naming.replica_service_name(ns, name, spec.deploymentName, spec.index)
    pod_labels = {k: v for k, v in labels.items() if k != naming.LABEL_CLUSTER}
    if flash is not None and cache_pvc is None:
        flash = None
    if spec.flashLoader and spec.flashLoader.enabled and cache_pvc is None:
        out.warning(
            "spec.flashLoader.enabled is ignored: the flash loader copies from the cache "
            "and this replica references no modelCacheRef"
        )

    engines: list[_EnginePlan] = []
    problems: list[str] = []
    port: int | None = None
    for ei, engine in enumerate(spec.engines):
        ebase = f"spec.engines[{ei}]"
        wname = naming.workload_name(ns, name, spec.deploymentName, spec.index, engine.name)
        gang = engine.members[0].role != "Standalone"
        templates: dict[str, dict[str, Any]] = {}
        for role in ("Leader", "Worker") if gang else ("Standalone",):
            mi, member = _member(engine, role)
            mbase = f"{ebase}.members[{mi}]"
            pool_name = _pool_of(engine, member)
            pool = pools[pool_name]
            requests, problem = _device_requests(member, pool_name, pool, mbase)
            if problem is not None:
                problems.append(f"engine {engine.name} {role}: {problem}")
                continue
            claim = None
            if requests:
                claim = f"{wname}-{role.lower()}"
                out.add(
                    claim_key(engine.name, role),
                    remote_object(
                        naming.child_name(name, claim_key(engine.name, role)),
                        ns,
                        pc,
                        wl.resource_claim_template(claim, remote_ns, requests, labels),
                        labels=labels,
                        annotations=annotations,
                    ),
                )
            plan = wl.PodPlan(
                labels=pod_labels,
                serving=svc_name if role != "Worker" else None,
                node_selector=_node_selector(pool_name, pool),
                tolerations=list(spec.tolerations),
                claim_template=claim,
                cache_pvc=cache_pvc,
                shm_size_limit=shm,
                flash=flash,
                gang=gang,
            )
            templates[role] = wl.pod_template(member.template, plan, f"{mbase}.template")
            _warn_unresolved(out, templates[role], engine.name, role, cache_pvc, gang)
            if role != "Worker" and port is None:
                port = wl.engine_port(templates[role], f"{mbase}.template")
        if len(templates) != (2 if gang else 1):
            continue
        if gang:
            _, worker = _member(engine, "Worker")
            nodes = worker.worker.nodes if worker.worker else 1
            manifest = wl.leader_worker_set(
                wname,
                remote_ns,
                engine.copies,
                1 + nodes,
                templates["Leader"],
                templates["Worker"],
                labels,
            )
            cel, kind = wl.LWS_READY_CEL, "LeaderWorkerSet"
        else:
            manifest = wl.deployment(
                wname, remote_ns, engine.copies, templates["Standalone"], labels
            )
            cel, kind = wl.DEPLOYMENT_READY_CEL, "Deployment"
        key = workload_key(engine.name)
        out.add(
            key,
            remote_object(
                naming.child_name(name, key),
                ns,
                pc,
                manifest,
                labels=labels,
                annotations=annotations,
                readiness_cel=cel,
            ),
        )
        engines.append(_EnginePlan(engine.name, kind, wname, key))

    results = tuple(out.results)
    if problems:
        # Devices the placement chose cannot be claimed on this pool: decide nothing.
        return _Plan(("DeviceNotFound", "; ".join(problems)), results)

    port = port or wl.DEFAULT_ENGINE_PORT
    out.add(
        SERVICE_KEY,
        remote_object(
            naming.child_name(name, SERVICE_KEY),
            ns,
            pc,
            wl.service(svc_name, remote_ns, svc_name, port, labels),
            labels=labels,
            annotations=annotations,
        ),
    )
    children = []
    for key, d in out.resources.items():
        body = struct_from(d.body)  # type: ignore[arg-type]  # dicts built above
        # Kept serialized: a few KiB each, where a Struct holds its own arena of
        # tens of KiB; parsing it back is a C-level call of microseconds.
        children.append((key, body.SerializeToString(deterministic=True)))
    return _Plan(
        None,
        results,
        tuple(children),
        tuple(engines),
        wl.service_url(svc_name, remote_ns, port),
    )


def _compose(
    inputs: Inputs,
    out: Outcome,
    plan: _Plan,
    cluster: str,
    hydration: dict[str, Any] | None,
    times: _Times,
    cache: str | None,
) -> Outcome:
    """Apply ``plan`` to this call: desire its children; status from the observed workloads.

    In the call where every engine first serves, records ``status.servingSince`` and
    observes the cold start (:func:`_record_serving`).
    """
    out.results.extend(plan.results)
    if plan.gate is not None:
        reason, message = plan.gate
        return _gate(inputs, out, times, reason, message, hydration=hydration, warn=True)
    for key, body in plan.children:
        out.add(key, Struct.FromString(body))
    engines_status: list[dict[str, Any]] = []
    serving_all = True
    for e in plan.engines:
        serves, why = _serving(inputs, e.key, e.kind)
        serving_all = serving_all and serves
        entry: dict[str, Any] = {"name": e.name, "kind": e.kind, "workload": e.workload}
        entry["ready"] = serves
        if why:
            entry["message"] = why
        engines_status.append(entry)

    status: dict[str, Any] = {"cluster": cluster, "engines": engines_status}
    if hydration is not None:
        status["hydration"] = hydration
    n = len(engines_status)
    if serving_all:
        url = plan.url
        status.update(phase="Serving", message=f"{n}/{n} engines serving at {url}", endpoint=url)
        out.condition(CONDITION, "True", "Serving", status["message"])
        out.ready = True
        if times.serving_since is None:
            _record_serving(inputs, out, plan, times, cache)
    else:
        ready = sum(1 for e in engines_status if e["ready"])
        waiting = ", ".join(
            f"{e['name']} ({e['message']})" if e.get("message") else e["name"]
            for e in engines_status
            if not e["ready"]
        )
        msg = f"{ready}/{n} engines serving; waiting for {waiting}"
        status.update(phase="Starting", message=msg)
        out.condition(CONDITION, "False", "Starting", msg)
        out.ready = False
        out.requeue_after(inputs.settings.poll_seconds)
    times.write(status)
    out.status.update(status)
    return out


def _serving(inputs: Inputs, key: str, kind: str) -> tuple[bool, str]:
    """Whether the observed workload Object serves, and why not."""
    obj = inputs.observed_body(key)
    if obj is None:
        return False, "not created yet"
    status = structs.sub(obj, "status")
    # observed_manifest(obj), reading each level once
    manifest = structs.get(structs.sub(status, "atProvider"), "manifest")
    remote_status = structs.sub(manifest, "status") if isinstance(manifest, Struct) else None
    if not _conditions_ok(status) or not _conditions_ok(remote_status):
        return False, "reports malformed status.conditions"
    err = sync_error(obj)
    if err:
        return False, f"not applied: {err}"
    if manifest is None:
        return False, "not observed yet"
    if kind == "LeaderWorkerSet":
        if wl.lws_serving(manifest):
            return True, ""
        have = _count(manifest, "status", "readyReplicas")
        return False, f"{have}/{_count(manifest, 'spec', 'replicas')} groups ready"
    if wl.deployment_serving(manifest):
        return True, ""
    have = _count(manifest, "status", "availableReplicas")
    return False, f"{have}/{_count(manifest, 'spec', 'replicas')} pods available"


def _conditions_ok(status: Struct | None) -> bool:
    """Whether ``status.conditions`` is absent, null or a list (``status`` may be None)."""
    if status is None:
        return True
    c = status.fields.get("conditions")
    return c is None or c.WhichOneof("kind") in (None, "null_value", "list_value")


def _count(node: Any, *path: str) -> int:
    v = structs.get(node, *path)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _warn_unresolved(
    out: Outcome,
    template: dict[str, Any],
    engine: str,
    role: str,
    cache_pvc: str | None,
    gang: bool,
) -> None:
    defined = set()
    if cache_pvc is not None:
        defined.add("MODELPLANE_MODEL")
    if gang:
        defined.update({"MODELPLANE_LEADER_ADDRESS", "MODELPLANE_RANK"})
    for c in template["spec"]["containers"]:
        if c.get("name") != wl.ENGINE_CONTAINER:
            continue
        for var in unresolved(c, defined):
            why = "no modelCacheRef" if var == "MODELPLANE_MODEL" else "a single-node engine"
            out.warning(
                f"engine {engine} ({role}) references $({var}), which is not set for {why}; "
                f"Kubernetes leaves the reference as literal text"
            )


def _hold_observed(inputs: Inputs, out: Outcome) -> bool:
    """Keep every observed child exactly; True when a workload is among them."""
    has_workload = False
    for key in sorted(inputs.observed):
        out.keep(key, inputs.observed[key].resource)
        has_workload = has_workload or key.startswith(_WORKLOAD_PREFIX)
    return has_workload


# Status fields this composer owns, with the type it writes (echoed while undecided).
_STATUS_FIELDS: dict[str, type | tuple[type, ...]] = {
    "phase": str,
    "message": str,
    "endpoint": str,
    "cluster": str,
    "engines": (ListValue, list),
    "hydration": (Struct, dict),
}


def _unresolved(inputs: Inputs, out: Outcome, times: _Times) -> Outcome:
    """A requirement is not resolved yet: keep everything, echo the last status."""
    _hold_observed(inputs, out)
    for key, kind in _STATUS_FIELDS.items():
        v = inputs.status(key)
        if isinstance(v, kind):
            out.status[key] = v
    times.write(out.status)
    out.condition(CONDITION, "Unknown", "Resolving", "waiting for required resources")
    return out


def _gate(
    inputs: Inputs,
    out: Outcome,
    times: _Times,
    reason: str,
    message: str,
    *,
    hydration: dict[str, Any] | None = None,
    phase: str = "Pending",
    warn: bool = False,
    cache_gate: bool = False,
) -> Outcome:
    """Compose nothing new; keep what exists exactly; report ``reason``; not ready.

    ``cache_gate``: the replica waits for its cache (``CacheNotFound``,
    ``HydrationNotFound``, ``Hydrating``, ``HydrationFailed``). Before it first served,
    that drops ``status.hydrationReadyAt``: its cold start counts from the next time
    the gate lifts.
    """
    if cache_gate and times.serving_since is None:
        times.hydration_ready = None
    kept = _hold_observed(inputs, out)
    if kept:
        message = f"{message}; the existing workload is kept as it is"
    status: dict[str, Any] = {"phase": phase, "message": message}
    cluster = structs.get_str(inputs.xr, "spec", "clusterName")
    if cluster:
        status["cluster"] = cluster
    if hydration is not None:
        status["hydration"] = hydration
    times.write(status)
    out.status.update(status)
    out.condition(CONDITION, "False", reason, message)
    if warn:
        out.warning(message, reason)
    out.ready = False
    out.requeue_after(inputs.settings.poll_seconds)
    return out


# ---- lifecycle timestamps and the cold-start sample -------------------------------------

CREATED_AT = "createdAt"
HYDRATION_READY_AT = "hydrationReadyAt"
SERVING_SINCE = "servingSince"
COLD_START = "model_cold_start_duration_seconds"
NO_CACHE = "none"
# ModelReady reasons of a replica waiting for its cache (the hydration gate).
_CACHE_GATES = frozenset({"CacheNotFound", "HydrationNotFound", "Hydrating", "HydrationFailed"})


# What format_time writes: checked first, since nearly every carried timestamp is one.
_CANONICAL_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def _time(value: str) -> str | None:
    """``value`` normalized by ``core.timeutil`` (UTC, whole seconds), None when invalid."""
    if not value:
        return None
    if _CANONICAL_TIME.fullmatch(value):
        try:
            datetime.datetime.fromisoformat(value)  # a real date and time (not 02-30)
        except ValueError:
            return None
        return value
    t = parse_time(value)
    return format_time(t) if t is not None else None


@dataclass(slots=True)
class _Times:
    """The replica's lifecycle timestamps (RFC 3339), carried in its status.

    The function is stateless (``function.ops.metrics``): the cold start is computed from
    these, and observed only in the call that first writes ``servingSince``.

    Attributes:
        created: ``status.createdAt``, the replica's creation: the XR's
            ``metadata.creationTimestamp`` (the API server sets it), else the last
            status's, else the first call's ``now``.
        hydration_ready: ``status.hydrationReadyAt``, when the hydration gate lifted
            for a replica that had waited for its cache (None if it never waited).
        serving_since: ``status.servingSince``, when every engine first served.
    """

    created: str
    hydration_ready: str | None
    serving_since: str | None

    @classmethod
    def carried(cls, inputs: Inputs) -> _Times:
        """The timestamps of the observed XR (its metadata and last written status)."""
        prev = structs.sub(inputs.xr, "status")
        created = (
            _time(structs.sval(structs.sub(inputs.xr, "metadata"), "creationTimestamp"))
            or _time(structs.sval(prev, CREATED_AT))
            or format_time(inputs.now)
        )
        return cls(
            created,
            _time(structs.sval(prev, HYDRATION_READY_AT)),
            _time(structs.sval(prev, SERVING_SINCE)),
        )

    def write(self, status: dict[str, Any]) -> None:
        """Set the timestamps in ``status`` (every call: Crossplane drops omitted fields)."""
        status[CREATED_AT] = self.created
        if self.hydration_ready is not None:
            status[HYDRATION_READY_AT] = self.hydration_ready
        if self.serving_since is not None:
            status[SERVING_SINCE] = self.serving_since


def _was_gated(inputs: Inputs) -> bool:
    """Whether the last status shows the replica waiting for its cache.

    True when ``status.hydration.phase`` is anything but Ready (``NotFound``,
    ``Pending``, ``Hydrating``, ``Failed``) or the ``ModelReady`` condition's reason
    is a cache gate (``CacheNotFound`` writes no ``status.hydration``).
    """
    prev = structs.sub(inputs.xr, "status")
    phase = structs.sval(structs.sub(prev, "hydration"), "phase")
    if phase and phase != "Ready":
        return True
    for c in structs.items(prev, "conditions"):
        if structs.get(c, "type") == CONDITION:
            return structs.get(c, "reason") in _CACHE_GATES
    return False


def _gate_lifted_at(hyd_status: Struct | None, created: str, now: datetime.datetime) -> str:
    """When a waiting replica's hydration became Ready.

    The hydration's ``status.readyAt`` (written by the ModelCacheHydration composer)
    when it lies between the replica's creation and ``now``; otherwise (absent,
    invalid, in the future, or from before the replica existed, so it is not what
    held the replica back) ``now``, the call that sees the gate lifted.
    """
    ready = parse_time(structs.sval(hyd_status, "readyAt"))
    born = parse_time(created)
    if ready is None or ready > now or (born is not None and ready < born):
        return format_time(now)
    return format_time(ready)


def _record_serving(
    inputs: Inputs, out: Outcome, plan: _Plan, times: _Times, cache: str | None
) -> None:
    """Every engine serves and no ``servingSince`` is recorded: record it, observe once.

    The sample is ``now`` minus ``hydrationReadyAt`` (the replica waited for its
    cache) or ``createdAt``, with labels ``namespace``, ``model`` (the
    ModelDeployment, ``spec.deploymentName``), ``engine_kind`` (the workload kinds,
    sorted and joined with ``+``: ``Deployment``, ``LeaderWorkerSet`` or
    ``Deployment+LeaderWorkerSet``) and ``cache`` (the ModelCache, ``none``).

    A replica whose last status already said Serving was serving before this record
    existed (composed by an earlier version of the function): ``servingSince`` is
    taken from the ``ModelReady`` condition's ``lastTransitionTime`` (else ``now``)
    and nothing is observed, so an upgrade counts no sample of its replicas' age.
    """
    now = inputs.now
    prev = structs.sub(inputs.xr, "status")
    if structs.sval(prev, "phase") == "Serving":
        since = None
        for c in structs.items(prev, "conditions"):
            if structs.get(c, "type") == CONDITION and structs.get(c, "status") == "True":
                since = _time(structs.get_str(c, "lastTransitionTime"))
        times.serving_since = since or format_time(now)
        return
    times.serving_since = format_time(now)
    start = parse_time(times.hydration_ready or times.created)
    out.observe(
        COLD_START,
        {
            "namespace": inputs.namespace,
            "model": structs.get_str(inputs.xr, "spec", "deploymentName"),
            "engine_kind": "+".join(sorted({e.kind for e in plan.engines})),
            "cache": cache or NO_CACHE,
        },
        elapsed(start, now),
    )


__all__ = ["claim_key", "compose", "parse_spec", "workload_key"]
