"""Reading the fleet from required and observed resources: InferenceClusters as
placement Clusters, the cache footprint, and what ModelReplicas use (hot path: read
through the Struct field maps, memoized where fleets repeat)."""

from __future__ import annotations

import math
from collections.abc import Container, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import ListValue, Struct

from function.api import inferencecluster
from function.api.modelcache import spec_source_identity
from function.api.modelcachehydration import (
    FAILED,
    PENDING,
    READY,
    source_identity_of,
    stored_identities,
)
from function.api.modeldeployment import leaving_cache
from function.api.modelreplica import (
    identities_in_use,
    pods_answer,
    reads_pvc_root,
    status_identity,
)
from function.composers.deployment.status import _replica_state
from function.core import structs, versioned
from function.core.memo import memo
from function.core.numbers import finite_int
from function.naming import (
    hydration_name,
)
from function.scheduling.devices import (
    Device,
)
from function.scheduling.placement import (
    Cluster,
    Pool,
)
from function.scheduling.selectors import LabelSelector
from function.scheduling.tolerations import parse_taints

# ---- reading the fleet ----------------------------------------------------------


def _pools(cluster: Struct) -> tuple[Pool, ...]:
    """``status.gpuPools`` as Pools, memoized by the serialized subtree.

    Fleets repeat pool shapes, and clusters that report the same pools get the same
    tuple: placement computes device fit once per distinct tuple
    (:class:`function.scheduling.placement.fit.StaticFits`).
    """
    v = inferencecluster.gpu_pools_value(cluster)
    if v is None or v.WhichOneof("kind") != "list_value":
        return ()
    return _pools_from(v.list_value.SerializeToString(deterministic=True))


def _pools_known(cluster: Struct) -> bool:
    """Whether ``status.gpuPools`` is a list (``[]`` included: known to have none) whose
    every device claim is known (:func:`function.api.inferencecluster.unknown_claim`: a
    claim that is neither DRA nor Synthetic is not read as either)."""
    v = inferencecluster.gpu_pools_value(cluster)
    if v is None or v.WhichOneof("kind") != "list_value":
        return False
    return inferencecluster.unknown_claim(v.list_value) is None


@memo(4096, weight=2)
def _pools_from(raw: bytes) -> tuple[Pool, ...]:
    """:func:`_pools` of a serialized ``status.gpuPools`` list (parsed back on a miss)."""
    pools = []
    for p in structs.to_py(ListValue.FromString(raw)):
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
    return tuple(sorted(pools, key=lambda x: x.name))


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
        pools_known=_pools_known(item),
    )


def _cached_cluster(item: Struct) -> Cluster:
    """:func:`_cluster`, memoized by the object's serialized bytes (an object without a
    uid and resourceVersion: :func:`_versioned_cluster` keeps the others).

    An InferenceCluster changes rarely and is read on every reconcile of every
    deployment; serializing it (one C call) costs less than half of reading it field by
    field. The memo is bounded in entries and bytes (:mod:`function.core.memo`).
    """
    return _cluster_from(item.SerializeToString(deterministic=True))


@memo(16384, weight=4)
def _cluster_from(raw: bytes) -> Cluster:
    """:func:`_cluster` of a serialized InferenceCluster (parsed back on a miss)."""
    return _cluster(Struct.FromString(raw))


@versioned.reading(16384, weight=4)
def _versioned_cluster(item: Struct) -> Cluster:
    """:func:`_cached_cluster`, kept by the object's uid and resourceVersion
    (:mod:`function.core.versioned`): a hit costs no serialization. Call it as
    ``_versioned_cluster(item, version)`` when the version is known."""
    return _cached_cluster(item)


class _Index(NamedTuple):
    """Where each named object of a list is (a name seen twice: its last position, as a
    dict would keep it; an object without a name, or with an empty or non-string one,
    is left out), and the names sorted."""

    position: dict[str, int]
    ordered: tuple[str, ...]


@versioned.over_versions(1024, weight=4)
def _index(
    items: Sequence[Struct], versions: tuple[versioned.Version | None, ...] | None, key: Hashable
) -> _Index:
    """:class:`_Index` of ``items``, kept by their versions (``key`` names the list: one
    entry per requirement). Shared between calls: never mutated."""
    position: dict[str, int] = {}
    for i, it in enumerate(items):
        v = it.fields.get("metadata")
        x = v.struct_value.fields.get("name") if v is not None else None
        if x is not None and x.string_value:
            position[x.string_value] = i
    return _Index(position, tuple(sorted(position)))


def _version(versions: tuple[versioned.Version | None, ...] | None, i: int) -> Any:
    """The version of item ``i`` as a reading takes it (``...``: not read yet)."""
    return versions[i] if versions is not None else ...


class _Fleet(Mapping[str, Cluster]):
    """The resolved InferenceClusters by name; each becomes a :class:`Cluster` only when
    placement first reads it (``Request.fleet``). Building one costs far more than
    finding its name, and a steady-state reconcile reads only the clusters its
    replicas run on. A name seen twice keeps the last object (as a dict would).

    With the items' versions (``Resolved.versions``), the index by name is kept by the
    list's versions and each Cluster by its object's (:mod:`function.core.versioned`);
    ``key`` names the list (the requirement's labels)."""

    __slots__ = ("_built", "_index", "_items", "_versions")

    def __init__(
        self,
        items: Sequence[Struct],
        versions: tuple[versioned.Version | None, ...] | None = None,
        key: Hashable = (),
    ) -> None:
        self._items, self._versions = items, versions
        self._index = _index(items, versions, ("clusters", key))
        self._built: dict[str, Cluster] = {}

    def __getitem__(self, name: str) -> Cluster:
        c = self._built.get(name)
        if c is None:
            i = self._index.position[name]
            c = self._built[name] = _versioned_cluster(self._items[i], _version(self._versions, i))
        return c

    def get(self, name: str, default: Any = None) -> Any:
        c = self._built.get(name)
        if c is not None:
            return c
        return self[name] if name in self._index.position else default

    def __contains__(self, name: object) -> bool:
        return name in self._index.position

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.ordered)

    def __len__(self) -> int:
        return len(self._index.position)


class _Retained(Container[str]):
    """The clusters of the cache's footprint that take no new replica
    (``Request.retained``): those the cache's ``status.retained`` names, and those it
    does not name yet whose labels its ``spec.clusterSelector`` no longer matches.

    The cache writes ``status.retained`` from its shards' reports, one reconcile of a
    shard after its selector changed (review 17l, F3); the deployment has the cache's
    spec and the clusters, so a cluster that left reads as retained at once. Only the
    deployment's own fleet is looked at (a cluster outside it takes no replica
    anyway), and only clusters of the footprint (``Request.retained``'s contract).

    Args:
        status: ``function.api.modelcache.retained_clusters`` of the cache.
        selector: The cache's ``spec.clusterSelector``
            (``function.api.modelcache.cluster_selector``; the caller passes none when
            it is invalid: then only ``status`` counts).
        fleet: The deployment's clusters by name (:class:`_Fleet`).
        footprint: The cache's footprint (:class:`_Footprint`).
    """

    __slots__ = ("_fleet", "_footprint", "_selector", "_status")

    def __init__(
        self,
        status: frozenset[str],
        selector: LabelSelector,
        fleet: Mapping[str, Cluster],
        footprint: Mapping[str, str],
    ) -> None:
        self._status, self._selector = status, selector
        self._fleet, self._footprint = fleet, footprint

    def __contains__(self, name: object) -> bool:
        if name in self._status:
            return True
        if not isinstance(name, str):
            return False
        c = self._fleet.get(name)
        if c is None or self._selector.matches(c.labels):
            return False
        return name in self._footprint


class _Hydration(NamedTuple):
    """What the deployment reads of one ModelCacheHydration (:func:`_hydration`)."""

    name: str
    """``metadata.name`` ("" unless a string)."""
    cluster: str
    """``spec.clusterName`` ("" unless a string)."""
    phase: str
    """``status.phase``; ``Pending`` when absent or empty (the footprint's phase)."""
    identity: str
    """The source identity it reports (``status.source.identity``; its spec's before it
    reported a source)."""
    ready: bool
    """``status.phase`` is ``Ready``."""
    stored: frozenset[str]
    """``status.stored`` (``function.api.modelcachehydration.stored_identities``)."""
    failure: tuple[str, str]
    """When Failed: the identity of ``status.source`` ("" when not reported) and
    ``status.message``; ``("", "")`` otherwise."""


def _str_field(fields: Any, key: str) -> str:
    x = fields.get(key)
    return x.string_value if x is not None else ""  # "" unless a string


@versioned.reading(65536, weight=8)
def _hydration(h: Struct) -> _Hydration:
    """:class:`_Hydration` of ``h``, read once per uid and resourceVersion (call it as
    ``_hydration(h, version)`` when the version is known)."""
    status = structs.sub(h, "status")
    source = structs.sub(status, "source")
    phase = structs.sval(status, "phase")
    failure = ("", "")
    if phase == FAILED:
        failure = (source_identity_of(source), structs.sval(status, "message"))
    return _Hydration(
        name=_str_field(structs.fields_of(h, "metadata"), "name"),
        cluster=_str_field(structs.fields_of(h, "spec"), "clusterName"),
        phase=phase or PENDING,
        identity=source_identity_of(source) if source is not None else spec_source_identity(h),
        ready=phase == READY,
        stored=stored_identities(status),
        failure=failure,
    )


def _entry(h: _Hydration, ns: str, cache: str) -> str | None:
    """The footprint phase ``h`` gives its cluster: None without a cluster, or when it
    is another cache's (a shortened label shared by two caches)."""
    if not h.cluster or h.name != hydration_name(ns, cache, h.cluster):
        return None
    return h.phase


@versioned.over_versions(1024, weight=4)
def _footprint(
    hydrations: Sequence[Struct],
    versions: tuple[versioned.Version | None, ...] | None,
    ns: str,
    cache: str,
) -> dict[str, str]:
    """Cluster name to hydration phase (``Pending`` when none yet) of ``cache``'s
    ModelCacheHydrations; a cluster named twice keeps the last. Kept by the list's
    versions (shared between calls: never mutated)."""
    out: dict[str, str] = {}
    for h, version in zip(hydrations, versions or (...,) * len(hydrations), strict=True):
        f = _hydration(h, version)
        phase = _entry(f, ns, cache)
        if phase is not None:
            out[f.cluster] = phase
    return out


class _Footprint(Mapping[str, str]):
    """:func:`_footprint` read lazily (``Request.footprint``).

    A steady-state reconcile looks up only the clusters its replicas run on; finding a
    hydration by its name (:func:`function.naming.hydration_name`) needs one field per
    hydration to index (kept by the list's versions when it has them), against a whole
    reading of each to read the whole footprint. Iterating (new replicas, a shortfall
    message) reads it all once. Each hydration is read once per version
    (:func:`_hydration`).
    """

    __slots__ = (
        "_all",
        "_by_name",
        "_cache",
        "_items",
        "_named",
        "_nonempty",
        "_ns",
        "_versions",
    )

    def __init__(
        self,
        hydrations: Sequence[Struct],
        ns: str,
        cache: str,
        versions: tuple[versioned.Version | None, ...] | None = None,
    ) -> None:
        self._items, self._ns, self._cache = hydrations, ns, cache
        self._versions = versions
        self._by_name = _index(hydrations, versions, ("hydrations", ns, cache)).position
        self._all: dict[str, str] | None = None
        self._nonempty: bool | None = None
        # Per cluster looked up so far: the reading of the hydration named for it (None
        # without one) and the phase it gives the cluster (None: not in the footprint).
        self._named: dict[str, tuple[_Hydration | None, str | None]] = {}

    def _full(self) -> dict[str, str]:
        if self._all is None:
            self._all = _footprint(self._items, self._versions, self._ns, self._cache)
        return self._all

    def _lookup(self, cluster: str) -> tuple[_Hydration | None, str | None]:
        """The reading of the hydration named for ``cluster`` (it may be another
        cluster's) and the phase it gives ``cluster`` (None when absent or when the
        hydration is another cluster's)."""
        got = self._named.get(cluster)
        if got is None:
            i = self._by_name.get(hydration_name(self._ns, self._cache, cluster))
            h = _hydration(self._items[i], _version(self._versions, i)) if i is not None else None
            mine = h is not None and h.cluster == cluster
            ph = _entry(h, self._ns, self._cache) if h is not None and mine else None
            got = self._named[cluster] = (h, ph)
        return got

    def __getitem__(self, cluster: str) -> str:
        if self._all is not None:
            return self._all[cluster]
        ph = self._lookup(cluster)[1]
        if ph is None:
            raise KeyError(cluster)
        return ph

    def get(self, cluster: str, default: Any = None) -> Any:
        if self._all is not None:
            return self._all.get(cluster, default)
        got = self._named.get(cluster) or self._lookup(cluster)  # hot: placement's walk
        return default if got[1] is None else got[1]

    def __contains__(self, cluster: object) -> bool:
        if not isinstance(cluster, str):
            return False
        if self._all is not None:
            return cluster in self._all
        return self._lookup(cluster)[1] is not None

    def _of(self, cluster: str) -> _Hydration | None:
        """The reading of the cache's hydration on ``cluster`` (None without one)."""
        h, ph = self._named.get(cluster) or self._lookup(cluster)
        if h is None:
            return None
        mine = cluster in self._all if self._all is not None else ph is not None
        return h if mine else None

    def identity(self, cluster: str) -> tuple[str, bool]:
        """``(identity, ready)`` of the cache's hydration on ``cluster``: the source
        identity it reports (``status.source.identity``; its spec's before it reported
        one) and whether it is Ready for it. ``("", False)`` without a hydration."""
        h = self._of(cluster)
        return (h.identity, h.ready) if h is not None else ("", False)

    def stored(self, cluster: str) -> frozenset[str]:
        """The identities complete on ``cluster``'s cache PVC: its hydration's
        ``status.stored`` (``function.api.modelcachehydration.stored_identities``)."""
        h = self._of(cluster)
        return h.stored if h is not None else frozenset()

    def failure(self, cluster: str) -> tuple[str, str]:
        """``(identity, message)`` of ``cluster``'s hydration when it is Failed (the
        identity of ``status.source``, "" when not reported); ``("", "")`` otherwise."""
        h = self._of(cluster)
        return h.failure if h is not None else ("", "")

    def __iter__(self) -> Iterator[str]:
        return iter(self._full())

    def __len__(self) -> int:
        return len(self._full())

    def __bool__(self) -> bool:
        if self._all is not None:
            return bool(self._all)
        if self._nonempty is None:
            # Reads hydrations until one is the cache's (the first, but for a foreign one).
            ns, cache, versions = self._ns, self._cache, self._versions
            self._nonempty = any(
                _entry(_hydration(h, _version(versions, i)), ns, cache) is not None
                for i, h in enumerate(self._items)
            )
        return self._nonempty


def _num(v: Any, default: int) -> int:
    """An integer from a Struct Value (numbers are doubles), or ``default`` when it is
    absent or not a finite number."""
    n = finite_int(v) if v is not None else None
    return default if n is None else n


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


class _Replica(NamedTuple):
    """What the deployment reads of one of its observed ModelReplicas
    (:func:`_replica`); the fields of :class:`_Observed` but the object, in its order."""

    replica_index: int | None
    cluster: str
    pools: Mapping[tuple[str, int], str]
    state: tuple[bool, str, str]
    identity: str
    reads_root: bool
    serves: str
    answers: bool
    cache: str
    leaving: str


@versioned.reading(16384, weight=4)
def _replica(obj: Struct) -> _Replica:
    """:class:`_Replica` of an observed ModelReplica, read once per uid and
    resourceVersion (shared between calls: never mutated)."""
    spec = structs.fields_of(obj, "spec")
    cluster, pools, _ = _usage_of(spec)
    iv = spec.get("index")
    index = _num(iv, -1) if iv is not None and iv.WhichOneof("kind") == "number_value" else None
    ref = spec.get("modelCacheRef")
    identity = cache = ""
    if ref is not None and ref.WhichOneof("kind") == "struct_value":
        identity = source_identity_of(ref.struct_value)
        cache = structs.sval(ref.struct_value, "name")
    reads_root = not identity and ref is not None and reads_pvc_root(obj)
    serves = status_identity(obj) if not identity and ref is not None else ""
    state = _replica_state(obj)
    answers = pods_answer(obj)
    leaving = _still_leaving(obj, cache, cluster, identity, state[0])
    return _Replica(
        index, cluster, pools, state, identity, reads_root, serves, answers, cache, leaving
    )


def _still_leaving(obj: Struct, cache: str, cluster: str, identity: str, ready: bool) -> str:
    """The ModelCache the replica's pods may still read while they roll off it
    (``api.modeldeployment.LABEL_LEAVING_CACHE``), or "" once the roll is done: the
    replica reports ``ModelReady=True`` for its current generation (``ready``: a stale
    condition is not ready) and not for another cache (a ``status.hydration.name``
    other than its spec's cache's hydration on its cluster was written before the
    switch, which matters when both caches share the identity), and its pods may read
    no identity but its spec's (``api.modelreplica.identities_in_use``). A label naming
    its own spec's cache means nothing."""
    leaving = leaving_cache(obj)
    if not leaving or leaving == cache:
        return ""
    if not ready or not identities_in_use(obj) <= {identity}:
        return leaving
    hyd = structs.get_str(obj, "status", "hydration", "name")
    ns = structs.get_str(obj, "metadata", "namespace")
    if hyd and hyd != hydration_name(ns, cache, cluster):
        return leaving
    return ""


@dataclass(slots=True)
class _Observed:
    """What the deployment reads of one of its observed ModelReplicas, read once."""

    obj: Struct
    index: int | None
    cluster: str
    pools: Mapping[tuple[str, int], str]
    state: tuple[bool, str, str]
    identity: str = ""  # spec.modelCacheRef.identity: the source identity it serves
    reads_root: bool = False  # its workload reads the PVC root (api.modelreplica.reads_pvc_root)
    serves: str = ""  # spec names none: the identity its workload serves (status_identity)
    answers: bool = False  # every engine's pods answer, any template (api.modelreplica.pods_answer)
    cache: str = ""  # spec.modelCacheRef.name: the ModelCache it serves from
    leaving: str = ""  # the ModelCache its pods may still read, rolling off it (_still_leaving)

    @classmethod
    def of(cls, obj: Struct) -> _Observed:
        return cls(obj, *_replica(obj))


def _is_own(item: Struct, ns: str, name: str) -> bool:
    return (
        structs.sval(structs.sub(item, "metadata"), "namespace") == ns
        and structs.sval(structs.sub(item, "spec"), "deploymentName") == name
    )
