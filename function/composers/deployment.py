"""ModelDeployment: place replicas across the fleet and compose one ModelReplica each.

Input (Modelplane v0.3 shape)::

    spec:
      replicas: 2
      template:
        metadata: {labels: {...}}
        spec:
          clusterSelector: {matchLabels, matchExpressions}   # full LabelSelector
          modelCacheRef: {name: qwen-cache}                  # optional
          tolerations: [...]
          serving: {mode: Unified}
          engines: [{name, copies, phase, members: [...]}]

Requirements (Crossplane v2 required resources):

- ``clusters``: InferenceClusters with the selector's ``matchLabels`` (the
  rest of the selector is applied locally).
- ``replicas``: every ModelReplica of the fleet, in every namespace: capacity is
  fleet-wide by design.
- with ``modelCacheRef``: ``cache`` (the ModelCache by name in this namespace)
  and ``hydrations`` (its ModelCacheHydrations, label ``modelplane.ai/cache``).

Until every requirement is resolved, existing children are kept as they are
and nothing new is placed ("not known" is never "empty").

Composed resources: ``replica-<index>`` ModelReplicas (spec as
``function.api.modelreplica``), and with a cache a ``cache-usage`` Crossplane
Usage (``protection.crossplane.io/v1beta1``) so the ModelCache cannot be deleted
while this deployment uses it. The Usage names the cache (``spec.of``) and a
``reason``, not a ``spec.by``: it lives exactly as long as this deployment
references the cache (Crossplane deletes it with the deployment, or when
``modelCacheRef`` goes away), and it cannot deadlock a foreground deletion of
the deployment the way a Usage ``by`` the deployment itself would (the Usage
would wait for the deployment, which waits for its composed Usage).
``replayDeletion`` re-issues a deletion of the cache attempted while it was in use.

Placement is :func:`function.scheduling.placement.place` (rules in its docstring).

Status: ``replicas.total`` (observed ModelReplicas that are still wanted),
``replicas.ready`` (those whose ``ModelReady`` is True), ``placement[]`` (index,
cluster, ready, reason), ``displaced[]`` (index, fromCluster, at, replacement,
toCluster: replicas displaced from a cluster that stopped being eligible whose
replacement does not serve yet; see :func:`_track_displaced`, which observes
``modelplane_replica_replacement_duration_seconds``) and conditions. Every call sets
the gauge ``modelplane_model_deployment_replicas{state}`` (requested, placed, ready).
Conditions:

- ``ReplicasScheduled``: True only when every wanted replica is placed; False
  with ``CacheNotFound``, ``WaitingForCache``, ``NoClusterInCacheFootprint``,
  ``NoMatchingClusters``, ``InsufficientCapacity`` ("M of N replicas placed: ..."
  with what was checked) or ``InvalidDeviceSelector``.
- ``ReplicasReady``: True when every wanted replica reports ``ModelReady=True``;
  otherwise ``HydrationFailed`` (naming the replica and its cluster) when a
  replica's cache hydration failed, ``WaitingForCache`` when every replica not
  ready waits on a hydration still in progress, else ``ReplicasNotReady``.

Policy for a replica whose cluster's hydration Failed: it is moved to a cluster
where the cache is not Failed (Ready preferred) when one has room; when none
has, it is kept, failed, and the deployment reports ``HydrationFailed`` with
the cluster's name. An event records every removal: Normal for a scale-down,
Warning for a replica moved or dropped because its cluster no longer qualifies.
"""

from __future__ import annotations

import copy
import datetime
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

from google.protobuf.struct_pb2 import ListValue, Struct
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from function import API_GROUP, API_VERSION
from function.api import inferencecluster
from function.api.modelcachehydration import FAILED, PENDING, READY
from function.api.modeldeployment import (
    CACHE_NOT_FOUND,
    HYDRATION_FAILED,
    INVALID_DEVICE_SELECTOR,
    SCHEDULED,
    WAITING_FOR_CACHE,
)
from function.api.modeldeployment import REPLICAS_READY as READY_COND
from function.api.modelreplica import MODEL_READY, REASON_HYDRATING, FlashLoader, Ref
from function.api.modelreplica import Engine as EngineSpec
from function.composers.modelcache import retained_clusters
from function.core import structs
from function.core.errors import SpecError, pydantic_errors
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.memo import memo
from function.core.numbers import is_whole
from function.core.outcome import Outcome
from function.core.timeutil import elapsed, format_time, parse_time
from function.naming import (
    LABEL_CACHE,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    LABEL_REPLICA_INDEX,
    MANAGED_BY,
    child_name,
    hydration_name,
    label_value,
    labels_with_full,
    replica_name,
)
from function.scheduling.devices import (
    Device,
    DeviceRequest,
    InvalidSelector,
    SelectorEvaluationError,
    compile_selector,
)
from function.scheduling.placement import (
    Cluster,
    Engine,
    Existing,
    Member,
    MemberKey,
    Placement,
    Pool,
    Request,
    place,
)
from function.scheduling.selectors import LabelSelector
from function.scheduling.tolerations import parse_taints, parse_tolerations
from function.serving.env import check_reserved

REQ_CLUSTERS = "clusters"
REQ_REPLICAS = "replicas"
REQ_CACHE = "cache"
REQ_HYDRATIONS = "hydrations"

REPLICA_KIND = "ModelReplica"
USAGE_API_VERSION = "protection.crossplane.io/v1beta1"
USAGE_KEY = "cache-usage"
REPLICA_PREFIX = "replica-"


DISPLACED = "displaced"  # status.displaced[]
MAX_DISPLACED = 100  # records kept; the oldest are dropped (without a sample) past this
REPLACEMENT_METRIC = "replica_replacement_duration_seconds"


# ---- the spec ---------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"] | None = None


class Serving(_Model):
    mode: Literal["Unified", "PrefillDecode"] = "Unified"


class TemplateSpec(_Model):
    clusterSelector: dict[str, Any] | None = None
    modelCacheRef: Ref | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    serving: Serving | None = None
    shmSizeLimit: str | None = None
    flashLoader: FlashLoader | None = None
    engines: list[EngineSpec] = Field(min_length=1)


class CelSelector(_Model):
    cel: str = Field(min_length=1, max_length=8192)


class DeviceRequestSpec(_Model):
    name: str = Field(min_length=1, max_length=63)
    count: int = Field(default=1, ge=1, le=64)
    selectors: list[CelSelector] = Field(min_length=1, max_length=8)


class NodeSelector(_Model):
    devices: list[DeviceRequestSpec] = Field(min_length=1, max_length=16)


class TemplateMeta(_Model):
    labels: dict[str, str] = Field(default_factory=dict)


class Template(_Model):
    metadata: TemplateMeta | None = None
    spec: TemplateSpec


class DeploymentSpec(_Model):
    replicas: int = Field(ge=0)
    template: Template

    @field_validator("replicas", mode="before")
    @classmethod
    def _a_number(cls, v: Any) -> Any:
        # Lax int would take "3" (and true); the XRD says integer, so the API server
        # rejects those: name the field instead of guessing.
        if isinstance(v, (str, bool)):
            raise ValueError(f"expected a whole number such as 3, got {type(v).__name__}")
        return v


def _parse(inputs: Inputs) -> tuple[DeploymentSpec, LabelSelector]:
    """Validate the spec; raises SpecError naming the field."""
    try:
        spec = DeploymentSpec.model_validate(inputs.spec)
    except ValidationError as err:
        raise pydantic_errors("spec", err) from None
    ts = spec.template.spec
    selector = LabelSelector.parse(ts.clusterSelector or {}, "spec.template.spec.clusterSelector")
    for ei, e in enumerate(ts.engines):
        f = f"spec.template.spec.engines[{ei}]"
        roles = [m.role for m in e.members]
        gang = "Leader" in roles or "Worker" in roles
        if gang:
            if roles.count("Leader") != 1 or "Worker" not in roles or "Standalone" in roles:
                raise SpecError(f"{f}.members", "a gang needs exactly one Leader and Workers")
            if ts.modelCacheRef is None:
                raise SpecError(
                    "spec.template.spec.modelCacheRef",
                    f"engine {e.name} spans several nodes (Leader and Workers): every pod of "
                    f"the gang mounts the cache, so a modelCacheRef is required",
                )
        elif roles != ["Standalone"]:
            raise SpecError(f"{f}.members", "an engine is one Standalone member or a gang")
        for mi, m in enumerate(e.members):
            if m.worker is not None and m.role != "Worker":
                raise SpecError(f"{f}.members[{mi}].worker", "only a Worker member has worker")
            # The replicas would reject these: say so here, where the user wrote them.
            pod = m.template.get("spec") if isinstance(m.template, dict) else None
            for group in ("initContainers", "containers"):
                cs = pod.get(group) if isinstance(pod, dict) else None
                for ci, c in enumerate(cs if isinstance(cs, list) else []):
                    if isinstance(c, dict):
                        check_reserved(
                            c.get("env"), f"{f}.members[{mi}].template.spec.{group}[{ci}].env"
                        )
            if m.nodeSelector is not None:
                try:
                    NodeSelector.model_validate(m.nodeSelector)
                except ValidationError as err:
                    raise pydantic_errors(f"{f}.members[{mi}].nodeSelector", err) from None
    for k in spec.template.metadata.labels if spec.template.metadata else {}:
        if k.startswith(f"{API_GROUP}/"):
            raise SpecError("spec.template.metadata.labels", f"key {k} uses the reserved prefix")
    names = [e.name for e in ts.engines]
    if len(set(names)) != len(names):
        raise SpecError("spec.template.spec.engines", "engine names must be unique")
    return spec, selector


def _engines(raw_engines: list[dict[str, Any]]) -> tuple[tuple[Engine, ...], list[str]]:
    """Placement engines from the template, compiling every CEL selector.

    Returns:
        The engines and, for selectors that do not compile, messages naming them.
    """
    out: list[Engine] = []
    bad: list[str] = []
    for ei, e in enumerate(raw_engines):
        members: list[Member] = []
        for mi, m in enumerate(e.get("members") or []):
            role = m.get("role") or "Standalone"
            pods = int((m.get("worker") or {}).get("nodes") or 1) if role == "Worker" else 1
            reqs: list[DeviceRequest] = []
            for di, d in enumerate(((m.get("nodeSelector") or {}).get("devices")) or []):
                sels: list[str] = []
                for si, s in enumerate(d.get("selectors") or []):
                    expr = s.get("cel") if isinstance(s, Mapping) else None
                    if not isinstance(expr, str):
                        continue
                    where = (
                        f"spec.template.spec.engines[{ei}].members[{mi}].nodeSelector."
                        f"devices[{di}].selectors[{si}].cel"
                    )
                    try:
                        compile_selector(expr, where)
                    except InvalidSelector as err:
                        bad.append(f"{where}: {err}")
                        continue
                    sels.append(expr)
                reqs.append(
                    DeviceRequest(str(d.get("name", "")), int(d.get("count") or 1), tuple(sels))
                )
            members.append(Member(role, pods, tuple(reqs)))
        out.append(Engine(str(e.get("name")), int(e.get("copies") or 1), tuple(members)))
    return tuple(out), bad


# ---- reading the fleet ----------------------------------------------------------


_POOL_CACHE: dict[bytes, tuple[Pool, ...]] = {}


def _pools(cluster: Struct) -> tuple[Pool, ...]:
    """``status.gpuPools`` as Pools; cached by the serialized subtree (fleets repeat)."""
    v = inferencecluster.gpu_pools_value(cluster)
    if v is None or v.WhichOneof("kind") != "list_value":
        return ()
    raw = v.list_value
    key = raw.SerializeToString(deterministic=True)
    hit = _POOL_CACHE.get(key)
    if hit is not None:
        return hit
    pools = []
    for p in structs.to_py(raw):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            continue
        nodes = p.get("nodes")
        raw_devs = p.get("devices")
        devs = tuple(
            Device.from_status(d)
            for d in (raw_devs if isinstance(raw_devs, list) else ())
            if isinstance(d, dict)
        )
        count = int(nodes) if isinstance(nodes, (int, float)) and math.isfinite(nodes) else 0
        pools.append(Pool(p["name"], count, devs))
    out = tuple(sorted(pools, key=lambda x: x.name))
    if len(_POOL_CACHE) > 4096:
        _POOL_CACHE.clear()
    _POOL_CACHE[key] = out
    return out


def _cluster(item: Struct) -> Cluster:
    """An InferenceCluster as placement sees it (hot path: read through the field maps)."""
    meta = structs.fields_of(item, "metadata")
    labels_v = meta.get("labels")
    labels = (
        {k: v.string_value for k, v in labels_v.struct_value.fields.items()}
        if labels_v is not None
        else {}
    )
    ready = inferencecluster.is_ready(item)
    taints_v = structs.fields_of(item, "spec").get("taints")
    taints = (
        parse_taints(structs.to_py(taints_v.list_value))
        if taints_v is not None and taints_v.list_value.values
        else ()
    )
    return Cluster(
        name=meta["name"].string_value if "name" in meta else "",
        labels=labels,
        ready=ready,
        taints=taints,
        pools=_pools(item),
    )


_CLUSTER_CACHE: dict[bytes, Cluster] = {}
_CLUSTER_CACHE_MAX = 16384


def _cached_cluster(item: Struct) -> Cluster:
    """:func:`_cluster`, memoized by the object's serialized bytes.

    An InferenceCluster changes rarely and is read on every reconcile of every
    deployment; serializing it (one C call) costs less than half of reading it field by
    field. The cache is cleared when it holds more than ``_CLUSTER_CACHE_MAX`` entries
    (about 1 KiB each), which bounds memory whatever the fleet does.
    """
    key = item.SerializeToString(deterministic=True)
    hit = _CLUSTER_CACHE.get(key)
    if hit is None:
        if len(_CLUSTER_CACHE) >= _CLUSTER_CACHE_MAX:
            _CLUSTER_CACHE.clear()
        hit = _CLUSTER_CACHE[key] = _cluster(item)
    return hit


class _Fleet(Mapping[str, Cluster]):
    """The resolved InferenceClusters by name; each becomes a :class:`Cluster` only when
    placement first reads it (``Request.fleet``). Building one costs far more than
    finding its name, and a steady-state reconcile reads only the clusters its
    replicas run on. A name seen twice keeps the last object (as a dict would)."""

    __slots__ = ("_built", "_names", "_raw")

    def __init__(self, items: Sequence[Struct]) -> None:
        raw: dict[str, Struct] = {}
        for it in items:
            v = structs.fields_of(it, "metadata").get("name")
            if v is not None and v.string_value:
                raw[v.string_value] = it
        self._raw = raw
        self._built: dict[str, Cluster] = {}
        self._names: list[str] | None = None

    def __getitem__(self, name: str) -> Cluster:
        c = self._built.get(name)
        if c is None:
            c = self._built[name] = _cached_cluster(self._raw[name])
        return c

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __iter__(self) -> Iterator[str]:
        if self._names is None:
            self._names = sorted(self._raw)
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._raw)


def _footprint(hydrations: Sequence[Struct], ns: str, cache: str) -> dict[str, str]:
    """Cluster name to hydration phase (``Pending`` when none yet) of ``cache``'s
    ModelCacheHydrations. Hot path (one per cluster): three field-map reads each."""
    out: dict[str, str] = {}
    for h in hydrations:
        f = h.fields
        v = f.get("spec")
        x = v.struct_value.fields.get("clusterName") if v is not None else None
        cl = x.string_value if x is not None else ""  # "" unless a string
        if not cl:
            continue
        v = f.get("metadata")
        x = v.struct_value.fields.get("name") if v is not None else None
        if x is None or x.string_value != hydration_name(ns, cache, cl):
            continue  # another cache whose shortened label collides
        v = f.get("status")
        x = v.struct_value.fields.get("phase") if v is not None else None
        out[cl] = (x.string_value if x is not None else "") or PENDING
    return out


class _Footprint(Mapping[str, str]):
    """:func:`_footprint` read lazily (``Request.footprint``).

    A steady-state reconcile looks up only the clusters its replicas run on; finding a
    hydration by its name (:func:`function.naming.hydration_name`) needs one field per
    hydration to index, against three to read the whole footprint. Iterating (new
    replicas, a shortfall message) reads it all once.
    """

    __slots__ = ("_all", "_by_name", "_cache", "_items", "_nonempty", "_ns", "_seen")

    def __init__(self, hydrations: Sequence[Struct], ns: str, cache: str) -> None:
        self._items, self._ns, self._cache = hydrations, ns, cache
        by_name: dict[str, Struct] = {}
        for h in hydrations:
            v = h.fields.get("metadata")
            x = v.struct_value.fields.get("name") if v is not None else None
            if x is not None and x.string_value:
                by_name[x.string_value] = h
        self._by_name = by_name
        self._all: dict[str, str] | None = None
        self._nonempty: bool | None = None
        self._seen: dict[str, str | None] = {}  # clusters looked up so far

    def _full(self) -> dict[str, str]:
        if self._all is None:
            self._all = _footprint(self._items, self._ns, self._cache)
        return self._all

    def __getitem__(self, cluster: str) -> str:
        if self._all is not None:
            return self._all[cluster]
        if cluster in self._seen:
            ph = self._seen[cluster]
        else:
            h = self._by_name.get(hydration_name(self._ns, self._cache, cluster))
            # None when absent or when the hydration is another cluster's.
            ph = _footprint((h,), self._ns, self._cache).get(cluster) if h is not None else None
            self._seen[cluster] = ph
        if ph is None:
            raise KeyError(cluster)
        return ph

    def __contains__(self, cluster: object) -> bool:
        if not isinstance(cluster, str):
            return False
        try:
            self[cluster]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._full())

    def __len__(self) -> int:
        return len(self._full())

    def __bool__(self) -> bool:
        if self._all is not None:
            return bool(self._all)
        if self._nonempty is None:
            self._nonempty = any(_footprint((h,), self._ns, self._cache) for h in self._items)
        return self._nonempty


def _num(v: Any, default: int) -> int:
    """An integer from a Struct Value (numbers are doubles), or ``default``."""
    if v is not None and v.WhichOneof("kind") == "number_value":
        return int(v.number_value)
    return default


def _usage_of(spec: Any) -> tuple[str, dict[tuple[str, int], str], list[tuple[str, int]]]:
    """(cluster, pools by member, [(pool, nodes)]) from a ModelReplica's spec field map.

    Hot path (every replica of the fleet, every reconcile): reads field maps directly.
    """
    cv = spec.get("clusterName")
    cluster = cv.string_value if cv is not None else ""
    pools: dict[tuple[str, int], str] = {}
    cost: list[tuple[str, int]] = []
    engines = spec.get("engines")
    if engines is None:
        return cluster, pools, cost
    for ev in engines.list_value.values:
        e = ev.struct_value.fields
        name = e["name"].string_value if "name" in e else ""
        copies = _num(e.get("copies"), 1)
        members = e.get("members")
        if members is None:
            continue
        for mi, mv in enumerate(members.list_value.values):
            m = mv.struct_value.fields
            pool = m["pool"].string_value if "pool" in m else ""
            if not pool:
                continue
            pools[(name, mi)] = pool
            pods = 1
            if "role" in m and m["role"].string_value == "Worker" and "worker" in m:
                pods = _num(m["worker"].struct_value.fields.get("nodes"), 1)
            cost.append((pool, pods * copies))
    return cluster, pools, cost


def _replica_usage(item: Struct) -> tuple[str, dict[tuple[str, int], str], list[tuple[str, int]]]:
    """:func:`_usage_of` of a ModelReplica object."""
    return _usage_of(structs.fields_of(item, "spec"))


@dataclass(slots=True)
class _Observed:
    """What the deployment reads of one of its observed ModelReplicas, read once."""

    obj: Struct
    index: int | None
    cluster: str
    pools: dict[tuple[str, int], str]
    state: tuple[bool, str, str]

    @classmethod
    def of(cls, obj: Struct) -> _Observed:
        spec = structs.fields_of(obj, "spec")
        cluster, pools, _ = _usage_of(spec)
        iv = spec.get("index")
        index = _num(iv, -1) if iv is not None and iv.WhichOneof("kind") == "number_value" else None
        return cls(obj, index, cluster, pools, _replica_state(obj))


def _is_own(item: Struct, ns: str, name: str) -> bool:
    return (
        structs.sval(structs.sub(item, "metadata"), "namespace") == ns
        and structs.sval(structs.sub(item, "spec"), "deploymentName") == name
    )


# ---- composing ----------------------------------------------------------------


def _template_key(inputs: Inputs) -> bytes:
    """``spec.template`` of the XR, serialized deterministically: the memo key of the
    replica bodies (one C-level call per reconcile)."""
    tv = structs.fields_of(inputs.xr, "spec").get("template")
    return tv.struct_value.SerializeToString(deterministic=True) if tv is not None else b""


@memo(256, weight=4)
def _template(template: bytes) -> dict[str, Any]:
    """``spec.template`` as plain Python, from :func:`_template_key`'s bytes."""
    out = structs.to_py(Struct.FromString(template))
    return out if isinstance(out, dict) else {}


@memo(256, weight=4)
def _replica_meta(namespace: str, name: str, template: bytes) -> Struct:
    """The metadata every ModelReplica of the deployment shares (memoized, read-only)."""
    user = (_template(template).get("metadata") or {}).get("labels") or {}
    labels, ann = labels_with_full({**user, LABEL_DEPLOYMENT: name, LABEL_MANAGED_BY: MANAGED_BY})
    meta: dict[str, Any] = {"namespace": namespace, "labels": labels}
    if ann:
        meta["annotations"] = ann
    st = Struct()
    st.update(meta)
    return st


@memo(1024, weight=4)
def _replica_spec(name: str, template: bytes, pools: tuple[tuple[MemberKey, str], ...]) -> Struct:
    """The ModelReplica spec (``function.api.modelreplica``) with members on ``pools``,
    without index and cluster (memoized, read-only: callers copy it)."""
    raw_ts = _template(template).get("spec") or {}
    chosen = dict(pools)
    engines = []
    for e in raw_ts.get("engines") or []:
        e2 = copy.deepcopy(e)
        for mi, m in enumerate(e2.get("members") or []):
            pool = chosen.get((e2.get("name"), mi))
            if pool is not None:
                m["pool"] = pool
        engines.append(e2)
    rspec: dict[str, Any] = {"deploymentName": name, "engines": engines}
    for k in ("modelCacheRef", "tolerations", "serving", "shmSizeLimit", "flashLoader"):
        if raw_ts.get(k) is not None:
            rspec[k] = raw_ts[k]
    st = Struct()
    st.update(rspec)
    return st


@memo(4096, weight=4)
def _replica_body(
    namespace: str,
    name: str,
    template: bytes,
    index: int,
    cluster: str,
    pools: tuple[tuple[MemberKey, str], ...],
) -> Struct:
    """The desired ModelReplica ``index`` of deployment ``namespace/name`` on ``cluster``.

    A pure function of its arguments (``template`` is :func:`_template_key`), memoized
    because a steady deployment desires the same bodies on every reconcile. The
    returned Struct is shared: callers only read it (the runner copies it into the
    response).
    """
    out = Struct()
    f = out.fields
    f["apiVersion"].string_value = API_VERSION
    f["kind"].string_value = REPLICA_KIND
    meta = f["metadata"].struct_value
    meta.CopyFrom(_replica_meta(namespace, name, template))
    meta.fields["name"].string_value = replica_name(namespace, name, index)
    labels, ann = labels_with_full({LABEL_CLUSTER: cluster, LABEL_REPLICA_INDEX: str(index)})
    lf = meta.fields["labels"].struct_value.fields
    for k, v in labels.items():
        lf[k].string_value = v
    for k, v in ann.items():
        meta.fields["annotations"].struct_value.fields[k].string_value = v
    spec = f["spec"].struct_value
    spec.CopyFrom(_replica_spec(name, template, pools))
    spec.fields["index"].number_value = index
    spec.fields["clusterName"].string_value = cluster
    return out


def _usage_body(inputs: Inputs, cache: str) -> dict[str, Any]:
    labels, ann = labels_with_full(
        {LABEL_DEPLOYMENT: inputs.name, LABEL_CACHE: cache, LABEL_MANAGED_BY: MANAGED_BY}
    )
    meta: dict[str, Any] = {
        "name": child_name("modeldeployment", inputs.namespace, inputs.name, "cache-usage"),
        "namespace": inputs.namespace,
        "labels": labels,
    }
    if ann:
        meta["annotations"] = ann
    return {
        "apiVersion": USAGE_API_VERSION,
        "kind": "Usage",
        "metadata": meta,
        "spec": {
            "of": {"apiVersion": API_VERSION, "kind": "ModelCache", "resourceRef": {"name": cache}},
            "reason": f"ModelDeployment {inputs.name} serves from this ModelCache",
            "replayDeletion": True,
        },
    }


def _observed_replicas(inputs: Inputs) -> dict[str, Struct]:
    """Observed ModelReplica children by composition-resource name."""
    return {
        k: c.resource
        for k, c in sorted(inputs.observed.items())
        if structs.sval(c.resource, "kind") == REPLICA_KIND
    }


def _selector_fields(raw_engines: list[dict[str, Any]]) -> dict[str, list[str]]:
    """CEL expression -> the field paths that hold it (error path only)."""
    out: dict[str, list[str]] = {}
    for ei, e in enumerate(raw_engines):
        for mi, m in enumerate(e.get("members") or []):
            for di, d in enumerate(((m.get("nodeSelector") or {}).get("devices")) or []):
                for si, s in enumerate(d.get("selectors") or []):
                    expr = s.get("cel") if isinstance(s, Mapping) else None
                    if isinstance(expr, str):
                        out.setdefault(expr, []).append(
                            f"spec.template.spec.engines[{ei}].members[{mi}].nodeSelector."
                            f"devices[{di}].selectors[{si}].cel"
                        )
    return out


def _invalid_selector(
    inputs: Inputs,
    out: Outcome,
    msg: str,
    replicas: int,
    obs_rows: list[Any],
    cache: str | None,
) -> Outcome:
    """A device selector that does not compile or fails while evaluating: every
    existing child is kept exactly, ``ReplicasScheduled=False``,
    ``InvalidDeviceSelector`` with ``msg`` (the field and the error), and a warning."""
    _keep_all(inputs, out)
    out.condition(SCHEDULED, "False", INVALID_DEVICE_SELECTOR, msg)
    out.warning(msg, INVALID_DEVICE_SELECTOR)
    _status_from(inputs, out, replicas, obs_rows, cache)
    _carry_displaced(inputs, out)
    return out


def _keep_all(inputs: Inputs, out: Outcome) -> None:
    out.keep_observed(inputs, _kept_ready)


def _kept_ready(body: Struct) -> bool:
    """A kept replica is ready as its ModelReady says; the Usage once it exists."""
    return _replica_state(body)[0] if structs.get_str(body, "kind") == REPLICA_KIND else True


_CREATING = (False, "Creating", "not created yet")


def _replica_state(obj: Struct | None) -> tuple[bool, str, str]:
    """(ready, reason, message) of an observed ModelReplica from its ModelReady condition.

    Hot path: scans ``status.conditions`` through the field maps, once per replica.
    """
    if obj is None:
        return _CREATING
    conds = structs.fields_of(obj, "status").get("conditions")
    if conds is not None:
        for cv in conds.list_value.values:
            c = cv.struct_value.fields
            if "type" in c and c["type"].string_value == MODEL_READY:
                return (
                    "status" in c and c["status"].string_value == "True",
                    c["reason"].string_value if "reason" in c else "",
                    c["message"].string_value if "message" in c else "",
                )
    return False, "Pending", "reports no ModelReady condition yet"


def _status_from(
    inputs: Inputs,
    out: Outcome,
    wanted: int,
    rows: Sequence[tuple[int, str, Struct | None, str | None]],
    cache: str | None,
) -> bool:
    """Status and ReplicasReady from (index, cluster, observed replica, hydration phase).

    Returns:
        True only when the work is done: every one of the ``wanted`` replicas is placed
        and serving (``ReplicasReady=True``). A partial placement, a replica waiting on
        its cache or any replica not serving is False.
    """
    total = ready = 0
    placement = ListValue()  # built in place: 100s of rows, no dict-to-Struct round trip
    failed: list[str] = []
    waiting: list[str] = []
    other: list[str] = []
    for index, cluster, obj, phase in sorted(rows, key=lambda r: r[0]):
        ok, reason, message = _replica_state(obj)
        if obj is not None:
            total += 1
        if ok:
            ready += 1
        elif reason == HYDRATION_FAILED or phase == FAILED:
            failed.append(
                f"replica {index} on {cluster}: "
                + (message or f"hydration of ModelCache {cache} on {cluster} Failed")
            )
            reason = HYDRATION_FAILED
        elif reason == REASON_HYDRATING or (phase is not None and phase != READY):
            waiting.append(f"replica {index} on {cluster} ({phase or 'Hydrating'})")
            reason = reason or WAITING_FOR_CACHE
        else:
            other.append(f"replica {index} on {cluster}: {reason or 'not ready'}")
        row = placement.values.add().struct_value.fields
        row["index"].number_value = index
        row["cluster"].string_value = cluster
        row["ready"].bool_value = ok
        if reason:
            row["reason"].string_value = reason
    out.status["replicas"] = {"total": total, "ready": ready}
    out.status["placement"] = placement
    # Levels, set on every call (a gauge: idempotent, no transition record needed).
    labels = {"namespace": inputs.namespace, "model": inputs.name}
    for state, n in (("requested", wanted), ("placed", len(rows)), ("ready", ready)):
        out.observe("model_deployment_replicas", {**labels, "state": state}, n)
    summary = f"{ready}/{wanted} replicas ready"
    done = False
    if failed:
        out.condition(READY_COND, "False", HYDRATION_FAILED, f"{summary}; " + "; ".join(failed[:5]))
    elif wanted > 0 and ready >= wanted and not other and not waiting:
        out.condition(READY_COND, "True", "Ready", summary)
        done = True
    elif wanted == 0 and not rows:
        out.condition(READY_COND, "True", "ScaledToZero", "0 replicas wanted")
        done = True
    elif waiting and not other:
        out.condition(
            READY_COND,
            "False",
            WAITING_FOR_CACHE,
            f"{summary}; waiting for ModelCache {cache}: " + ", ".join(waiting[:5]),
        )
    else:
        detail = "; ".join((other + waiting)[:5]) or "replicas not placed"
        out.condition(READY_COND, "False", "ReplicasNotReady", f"{summary}; {detail}")
    # Crossplane derives the XR's readiness from its composed resources unless the
    # function states it; "every placed replica ready" is not "the work is done".
    out.ready = done
    return done


# ---- displaced replicas: the replacement-duration metric ---------------------------


@dataclass(slots=True)
class _Displaced:
    """One ``status.displaced[]`` record: a replica displaced from its cluster at ``at``.

    ``replacement`` is the index of the replica placed in its stead (None until one is
    placed) and ``to_cluster`` that replica's cluster.
    """

    index: int
    from_cluster: str
    at: str
    since: datetime.datetime
    replacement: int | None = None
    to_cluster: str = ""

    def to_status(self) -> dict[str, Any]:
        row: dict[str, Any] = {"index": self.index, "fromCluster": self.from_cluster, "at": self.at}
        if self.replacement is not None:
            row["replacement"] = self.replacement
            row["toCluster"] = self.to_cluster
        return row


def _displaced_status(inputs: Inputs) -> ListValue | None:
    """The observed XR's ``status.displaced`` (one field lookup), or None."""
    v = structs.fields_of(inputs.xr, "status").get(DISPLACED)
    return v.list_value if v is not None and v.WhichOneof("kind") == "list_value" else None


def _carry_displaced(inputs: Inputs, out: Outcome) -> None:
    """Keep ``status.displaced`` as it is in a call that does not place replicas.

    Crossplane applies the XR status a function returns, so a record left out would be
    lost, and with it the start of the replacement it measures.
    """
    prev = _displaced_status(inputs)
    if prev is not None and prev.values:
        out.status[DISPLACED] = prev


def _whole(v: object) -> TypeGuard[float]:
    """Whether ``v`` (a Struct number, a double) is a whole number >= 0."""
    return is_whole(v) and v >= 0


def _read_displaced(prev: ListValue | None) -> list[_Displaced]:
    """The well-formed records of ``status.displaced``; a malformed one is skipped."""
    out: list[_Displaced] = []
    for item in structs.to_py(prev) if prev is not None else ():
        if not isinstance(item, dict):
            continue
        index, cluster, at = item.get("index"), item.get("fromCluster"), item.get("at")
        since = parse_time(at)
        if not _whole(index) or not isinstance(cluster, str) or since is None:
            continue
        rec = _Displaced(int(index), cluster, str(at), since)
        repl, to = item.get("replacement"), item.get("toCluster")
        if _whole(repl) and isinstance(to, str):
            rec.replacement, rec.to_cluster = int(repl), to
        out.append(rec)
    return out


def _track_displaced(
    inputs: Inputs,
    out: Outcome,
    placement: Placement,
    by_index: Mapping[int, _Observed],
    prev: ListValue | None,
) -> None:
    """Record displaced replicas in ``status.displaced`` and observe each replacement once.

    Issue 7's ``modelplane_replica_replacement_duration_seconds{namespace,model}``: from a
    replica being displaced (removed by placement because its cluster stopped being
    eligible, or moved off a cluster that is not Ready or whose hydration Failed; never a
    scale-down) to its replacement serving (its ``ModelReady`` condition True, what
    ``status.replicas.ready`` counts). The function is stateless, so the start is written
    in status (``at``, ``inputs.now``) in the call that displaces the replica, and the
    sample is observed in the call that removes the record (see ``function.ops.metrics``).

    Per record, oldest first:

    - a replica placed new in this call (lowest index first) becomes its replacement
      when it has none; a replacement that is no longer placed on the cluster recorded
      is forgotten, and the next new replica takes its place;
    - when its replacement is observed serving: observe ``now - at``, drop the record;
    - without a replacement while every wanted replica is placed (scaled down since,
      or the displaced replica was one too many), the fleet is not short: drop it
      without a sample.

    At most :data:`MAX_DISPLACED` records are kept (the newest). Cost: O(records) plus,
    only while a record exists, one pass over the placed replicas.
    """
    records = _read_displaced(prev)
    now = format_time(inputs.now)
    since = parse_time(now) or inputs.now  # what later calls read back from ``at``
    for r in placement.removed:
        if not r.scaled_down:
            records.append(_Displaced(r.index, r.cluster, now, since))
    records.sort(key=lambda d: (d.since, d.index, d.from_cluster))
    placed = {p.index: p for p in placement.replicas}
    taken: set[int] = set()
    for rec in records:
        if rec.replacement is None:
            continue
        p = placed.get(rec.replacement)
        if p is None or p.cluster != rec.to_cluster or rec.replacement in taken:
            rec.replacement, rec.to_cluster = None, ""
        else:
            taken.add(rec.replacement)
    fresh = iter([p for p in placement.replicas if not p.existing and p.index not in taken])
    keep: list[_Displaced] = []
    for rec in records:
        if rec.replacement is None:
            nxt = next(fresh, None)
            if nxt is not None:
                rec.replacement, rec.to_cluster = nxt.index, nxt.cluster
            elif placement.reason is None:
                continue  # nothing is short: no replacement to wait for
        elif placed[rec.replacement].existing:
            view = by_index.get(rec.replacement)
            if view is not None and view.cluster == rec.to_cluster and view.state[0]:
                out.observe(
                    REPLACEMENT_METRIC,
                    {"namespace": inputs.namespace, "model": inputs.name},
                    elapsed(rec.since, inputs.now),
                )
                continue
        keep.append(rec)
    if keep:
        out.status[DISPLACED] = [rec.to_status() for rec in keep[-MAX_DISPLACED:]]


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelDeployment (see the module docstring).

    Raises:
        SpecError: for an invalid spec (the runner returns a fatal result naming the field).
    """
    out = Outcome()
    spec, selector = _parse(inputs)
    raw_ts = inputs.spec.get("template", {}).get("spec", {})
    ns, name = inputs.namespace, inputs.name
    ts = spec.template.spec
    cache = ts.modelCacheRef.name if ts.modelCacheRef else None

    out.require(
        REQ_CLUSTERS, API_VERSION, "InferenceCluster", match_labels=selector.requirement_labels()
    )
    out.require(REQ_REPLICAS, API_VERSION, REPLICA_KIND, match_labels={})
    if cache:
        out.require(REQ_CACHE, API_VERSION, "ModelCache", match_name=cache, namespace=ns)
        out.require(
            REQ_HYDRATIONS,
            API_VERSION,
            "ModelCacheHydration",
            match_labels={LABEL_CACHE: label_value(cache)},
            namespace=ns,
        )

    observed = [_Observed.of(o) for o in _observed_replicas(inputs).values()]
    obs_rows = [(v.index or 0, v.cluster, v.obj, None) for v in observed]

    engines, bad = _engines(raw_ts.get("engines") or [])
    if bad:
        return _invalid_selector(inputs, out, "; ".join(bad[:3]), spec.replicas, obs_rows, cache)

    # Requirements: all must be resolved before anything is placed or removed.
    names = [REQ_CLUSTERS, REQ_REPLICAS] + ([REQ_CACHE, REQ_HYDRATIONS] if cache else [])
    got = {n: inputs.required(n) for n in names}
    pending = [n for n, v in got.items() if v is UNRESOLVED]
    if pending:
        _keep_all(inputs, out)
        out.condition(
            SCHEDULED,
            "Unknown",
            "ResolvingRequirements",
            "waiting for Crossplane to resolve required resources: " + ", ".join(pending),
        )
        _status_from(inputs, out, spec.replicas, obs_rows, cache)
        _carry_displaced(inputs, out)
        return out
    clusters_r = got[REQ_CLUSTERS]
    replicas_r = got[REQ_REPLICAS]
    assert isinstance(clusters_r, Resolved) and isinstance(replicas_r, Resolved)

    footprint: Mapping[str, str] | None = None
    retained: frozenset[str] = frozenset()
    if cache:
        cache_r = got[REQ_CACHE]
        assert isinstance(cache_r, Resolved)
        if not cache_r.items:
            _keep_all(inputs, out)
            out.resources.pop(USAGE_KEY, None)
            msg = (
                f"ModelCache {ns}/{cache} (spec.template.spec.modelCacheRef) does not exist; "
                f"no replica is placed until it does"
            )
            out.condition(SCHEDULED, "False", CACHE_NOT_FOUND, msg)
            out.warning(msg, CACHE_NOT_FOUND)
            out.requeue_after(inputs.settings.poll_seconds)
            _status_from(inputs, out, spec.replicas, obs_rows, cache)
            _carry_displaced(inputs, out)
            return out
        hyd_r = got[REQ_HYDRATIONS]
        assert isinstance(hyd_r, Resolved)
        footprint = _Footprint(hyd_r.items, ns, cache)
        retained = retained_clusters(cache_r.items[0])

    fleet = _Fleet(clusters_r.items)
    used: dict[tuple[str, str], int] = {}
    for r in replicas_r.items:
        if _is_own(r, ns, name):
            continue
        cl, _, cost = _replica_usage(r)
        for pool, n in cost:
            used[(cl, pool)] = used.get((cl, pool), 0) + n
    existing = []
    by_index: dict[int, _Observed] = {}
    for v in observed:
        if v.cluster and v.index is not None:
            existing.append(Existing(v.index, v.cluster, v.pools, v.state[0]))
            by_index[v.index] = v

    try:
        placement: Placement = place(
            Request(
                replicas=spec.replicas,
                engines=engines,
                selector=selector,
                tolerations=parse_tolerations(
                    [t.model_dump(exclude_none=True) for t in ts.tolerations]
                ),
                fleet=fleet,
                used=used,
                existing=tuple(existing),
                footprint=footprint,
                retained=retained,
                cache=cache,
            )
        )
    except SelectorEvaluationError as err:
        # Like a selector that does not compile: nothing placed, nothing removed.
        fields = _selector_fields(raw_ts.get("engines") or []).get(err.expression)
        msg = f"{fields[0] if fields else 'spec.template.spec.engines'}: {err}"
        return _invalid_selector(inputs, out, msg, spec.replicas, obs_rows, cache)

    template = _template_key(inputs)
    rows = []
    for p in placement.replicas:
        view = by_index.get(p.index) if p.existing else None
        body = _replica_body(ns, name, template, p.index, p.cluster, tuple(sorted(p.pools.items())))
        out.add(f"{REPLICA_PREFIX}{p.index}", body, ready=view is not None and view.state[0])
        rows.append((p.index, p.cluster, view.obj if view is not None else None, p.hydration))
    for r in placement.removed:
        msg = f"removed replica {r.index} from {r.cluster}: {r.why}"
        if r.why == "scaled down":
            out.normal(msg, "ReplicaRemoved")
        else:
            out.warning(msg, "ReplicaRemoved")
    if cache:
        # A Usage's work is done once it exists; unspecified readiness would keep the
        # XR unready forever (Crossplane counts only READY_TRUE).
        out.add(USAGE_KEY, _usage_body(inputs, cache), ready=USAGE_KEY in inputs.observed)

    if placement.reason is None:
        out.condition(SCHEDULED, "True", "Scheduled", placement.message)
    else:
        out.condition(SCHEDULED, "False", placement.reason, placement.message)
        out.requeue_after(inputs.settings.poll_seconds)
    if not _status_from(inputs, out, spec.replicas, rows, cache):
        out.requeue_after(inputs.settings.poll_seconds)
    prev = _displaced_status(inputs)
    if prev is not None or any(not r.scaled_down for r in placement.removed):
        _track_displaced(inputs, out, placement, by_index, prev)
    return out
