"""Reading the fleet from required and observed resources: InferenceClusters as
placement Clusters, the cache footprint, and what ModelReplicas use (hot path: read
through the Struct field maps, memoized where fleets repeat)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from function.api.modelreplica import reads_pvc_root, status_identity
from function.composers.deployment.status import _replica_state
from function.core import structs
from function.core.memo import memo
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
    )


def _cached_cluster(item: Struct) -> Cluster:
    """:func:`_cluster`, memoized by the object's serialized bytes.

    An InferenceCluster changes rarely and is read on every reconcile of every
    deployment; serializing it (one C call) costs less than half of reading it field by
    field. The memo is bounded in entries and bytes (:mod:`function.core.memo`).
    """
    return _cluster_from(item.SerializeToString(deterministic=True))


@memo(16384, weight=4)
def _cluster_from(raw: bytes) -> Cluster:
    """:func:`_cluster` of a serialized InferenceCluster (parsed back on a miss)."""
    return _cluster(Struct.FromString(raw))


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

    def identity(self, cluster: str) -> tuple[str, bool]:
        """``(identity, ready)`` of the cache's hydration on ``cluster``: the source
        identity it reports (``status.source.identity``; its spec's before it reported
        one) and whether it is Ready for it. ``("", False)`` without a hydration."""
        h = self._by_name.get(hydration_name(self._ns, self._cache, cluster))
        if h is None or cluster not in self:
            return "", False
        status = structs.sub(h, "status")
        source = structs.sub(status, "source")
        ident = source_identity_of(source)
        if source is None:
            ident = spec_source_identity(h)
        return ident, structs.sval(status, "phase") == READY

    def _status(self, cluster: str) -> Struct | None:
        """The status of the cache's hydration on ``cluster`` (None without one)."""
        h = self._by_name.get(hydration_name(self._ns, self._cache, cluster))
        if h is None or cluster not in self:
            return None
        return structs.sub(h, "status")

    def stored(self, cluster: str) -> frozenset[str]:
        """The identities complete on ``cluster``'s cache PVC: its hydration's
        ``status.stored`` (``function.api.modelcachehydration.stored_identities``)."""
        return stored_identities(self._status(cluster))

    def failure(self, cluster: str) -> tuple[str, str]:
        """``(identity, message)`` of ``cluster``'s hydration when it is Failed (the
        identity of ``status.source``, "" when not reported); ``("", "")`` otherwise."""
        status = self._status(cluster)
        if structs.sval(status, "phase") != FAILED:
            return "", ""
        return source_identity_of(structs.sub(status, "source")), structs.sval(status, "message")

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
    identity: str = ""  # spec.modelCacheRef.identity: the source identity it serves
    reads_root: bool = False  # its workload reads the PVC root (api.modelreplica.reads_pvc_root)
    serves: str = ""  # spec names none: the identity its workload serves (status_identity)

    @classmethod
    def of(cls, obj: Struct) -> _Observed:
        spec = structs.fields_of(obj, "spec")
        cluster, pools, _ = _usage_of(spec)
        iv = spec.get("index")
        index = _num(iv, -1) if iv is not None and iv.WhichOneof("kind") == "number_value" else None
        ref = spec.get("modelCacheRef")
        identity = ""
        if ref is not None and ref.WhichOneof("kind") == "struct_value":
            identity = source_identity_of(ref.struct_value)
        reads_root = not identity and ref is not None and reads_pvc_root(obj)
        serves = status_identity(obj) if not identity and ref is not None else ""
        state = _replica_state(obj)
        return cls(obj, index, cluster, pools, state, identity, reads_root, serves)


def _is_own(item: Struct, ns: str, name: str) -> bool:
    return (
        structs.sval(structs.sub(item, "metadata"), "namespace") == ns
        and structs.sval(structs.sub(item, "spec"), "deploymentName") == name
    )
