"""Capacity accounting that reads what placement needs, not the fleet.

Placement charges a cluster's pools with the nodes every *other* deployment's
ModelReplicas use there. Instead of every ModelReplica of the fleet, the deployment asks
Crossplane, per cluster, for the ModelReplicas labelled ``modelplane.ai/cluster=<that
cluster>`` (every namespace: capacity is fleet-wide), and only for the clusters whose
free nodes a decision reads:

- the clusters a scale-up's walk reaches (placement reads a cluster's usage only when
  it tries a new replica there, or packs onto it);
- this deployment's own clusters when it has more replicas than wanted (scale-down
  picks the most loaded cluster);
- up front, the clusters ``status.nextClusters`` names: the next clusters a scale-up
  would try, written by the previous reconcile, so a scale-up within that many
  replicas resolves in the same round as the fleet lists.

How a reconcile converges (Crossplane's loop calls again until the requirements
repeat): placement runs with the usage resolved so far (:class:`Usage`), reading a
cluster not yet resolved as empty and recording it. If it read such a cluster, the
call places and removes nothing (every child kept, ``ResolvingRequirements``) and asks
for it; the next call has it. A walk only goes further when it learns more (a cluster
it took for empty may be full), so the set it reads only grows within a reconcile,
and when nothing new is read the requirements repeat and the loop ends. To stay within
Crossplane's loop (6 calls), a second expansion, or more than
:data:`MAX_CLUSTER_REQUIREMENTS` clusters, asks instead for every ModelReplica of the
fleet (one list, what every reconcile read before), and keeps asking for it while the
exact walk reads beyond the up-front clusters. Calls per reconcile through
``crossplane render`` (nothing seeded): 2 when the walk stays within the up-front
clusters (steady state, scale-down, a scale-up within ``status.nextClusters``), 3
when it needs one expansion, 4 with the fleet-wide fallback.

Why this cannot double-book a cluster between reconciles. A reconcile places a
replica on a cluster only in a call that had that cluster's ModelReplicas resolved
(an unresolved cluster is never read as free: the call keeps everything and asks for
it). The deployment composes every ModelReplica with ``modelplane.ai/cluster`` set in
the same body as ``spec.clusterName`` (:func:`function.composers.deployment.children.
_replica_body`), so a replica that a previous reconcile (of any deployment) applied is
in the label-selected list exactly when it is in the unfiltered list that this
replaced: both are lists of the same kind through the same Crossplane client. Items
whose ``spec.clusterName`` is another cluster (a hashed label value shared by two long
names) are not counted for this one. Two deployments reconciling at the same time can
both read a cluster before either writes, as they could with the fleet-wide list:
Crossplane applies composed resources without a compare-and-swap across XRs, so no
design inside a function closes that window; this one neither widens nor narrows it.
Usage published on the InferenceCluster's status would widen it: that status is
written by the InferenceCluster's own reconcile (for clusters Modelplane provisions,
by Modelplane's compositions), so a deployment would read usage as of the cluster's
last reconcile and could double-book a cluster with a replica applied since.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.modeldeployment import INSUFFICIENT_CAPACITY
from function.composers.deployment.fleet import _is_own, _replica_usage
from function.composers.deployment.terms import (
    MAX_CLUSTER_REQUIREMENTS,
    MAX_NEXT_CLUSTERS,
    NEXT_CLUSTERS,
    REPLICA_KIND,
    REQ_ON_CLUSTER,
    REQ_REPLICAS,
    SCHEDULED,
)
from function.core import structs
from function.core.inputs import Inputs, Resolved
from function.core.outcome import Outcome
from function.naming import LABEL_CLUSTER, label_value


def requirement_name(cluster: str) -> str:
    """The requirement under which the ModelReplicas on ``cluster`` are asked for."""
    return f"{REQ_ON_CLUSTER}{cluster}"


class Usage(Mapping[tuple[str, str], int]):
    """Nodes used per ``(cluster, pool)`` by other deployments' replicas (``Request.used``).

    Built from per-cluster lists (``lookup(cluster)``: its resolved ModelReplicas, or
    None when not resolved) or from every ModelReplica of the fleet (``fleet``). A
    cluster's list is read and summed only when placement first reads its usage.
    ``read`` records every cluster read; ``unknown`` those read whose ModelReplicas are
    not resolved (read as 0).
    """

    __slots__ = ("_by_cluster", "_fleet", "_lookup", "_name", "_ns", "read", "unknown")

    def __init__(
        self,
        ns: str,
        name: str,
        lookup: Callable[[str], Sequence[Struct] | None] | None = None,
        fleet: Sequence[Struct] | None = None,
    ) -> None:
        self._ns, self._name = ns, name
        self._lookup = lookup
        self._fleet = fleet
        self._by_cluster: dict[str, dict[str, int]] = {}
        self.read: set[str] = set()
        self.unknown: set[str] = set()
        if fleet is not None:
            for r in fleet:
                self._add(r, None)

    def _add(self, item: Struct, only: str | None) -> None:
        if _is_own(item, self._ns, self._name):
            return
        cl, _, cost = _replica_usage(item)
        if only is not None and cl != only:
            return  # another cluster whose shortened label value collides
        pools = self._by_cluster.setdefault(cl, {})
        for pool, n in cost:
            pools[pool] = pools.get(pool, 0) + n

    def _cluster(self, cluster: str) -> dict[str, int] | None:
        hit = self._by_cluster.get(cluster)
        if hit is not None:
            return hit
        if self._fleet is not None:
            return {}
        items = self._lookup(cluster) if self._lookup is not None else None
        if items is None:
            return None
        self._by_cluster[cluster] = {}
        for r in items:
            self._add(r, cluster)
        return self._by_cluster[cluster]

    def get(self, key: tuple[str, str], default: int = 0) -> int:  # type: ignore[override]
        cluster, pool = key
        self.read.add(cluster)
        pools = self._by_cluster.get(cluster)  # hot path: a cluster read before
        if pools is None:
            pools = self._cluster(cluster)
        if pools is None:
            self.unknown.add(cluster)
            return default
        return pools.get(pool, default)

    def __getitem__(self, key: tuple[str, str]) -> int:
        return self.get(key)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for cl, pools in sorted(self._by_cluster.items()):
            for pool in sorted(pools):
                yield (cl, pool)

    def __len__(self) -> int:
        return sum(len(p) for p in self._by_cluster.values())


def per_cluster(inputs: Inputs) -> Callable[[str], Sequence[Struct] | None]:
    """Look up the ModelReplicas resolved for one cluster in this request (None when its
    requirement is not resolved); reads a requirement's items only when asked."""

    def lookup(cluster: str) -> Sequence[Struct] | None:
        r = inputs.required(requirement_name(cluster))
        return r.items if isinstance(r, Resolved) else None

    return lookup


def fleet_wide(inputs: Inputs) -> Sequence[Struct] | None:
    """Every ModelReplica of the fleet when the fallback is resolved, else None."""
    f = inputs.required(REQ_REPLICAS)
    return f.items if isinstance(f, Resolved) else None


def next_clusters_status(inputs: Inputs) -> list[str]:
    """``status.nextClusters`` of the observed XR: strings only, at most
    :data:`MAX_NEXT_CLUSTERS` (the status is read back, so it is bounded here too)."""
    v = structs.fields_of(inputs.xr, "status").get(NEXT_CLUSTERS)
    if v is None or v.WhichOneof("kind") != "list_value":
        return []
    out = []
    for x in v.list_value.values[:MAX_NEXT_CLUSTERS]:
        if x.WhichOneof("kind") == "string_value" and x.string_value:
            out.append(x.string_value)
    return out


def short_last_time(inputs: Inputs) -> bool:
    """Whether the observed XR says the last reconcile could not place every replica for
    want of room (``ReplicasScheduled=False``, ``InsufficientCapacity``): then a walk
    reads every candidate cluster, and the fleet-wide list is asked for up front."""
    conds = structs.fields_of(inputs.xr, "status").get("conditions")
    if conds is None or conds.WhichOneof("kind") != "list_value":
        return False
    for cv in conds.list_value.values:
        c = cv.struct_value.fields
        if "type" in c and c["type"].string_value == SCHEDULED:
            return "reason" in c and c["reason"].string_value == INSUFFICIENT_CAPACITY
    return False


def upfront(
    inputs: Inputs, own_clusters: Iterable[str], placed: int, wanted: int
) -> tuple[frozenset[str], bool]:
    """What capacity is asked for before the fleet lists resolve, from the spec and the
    observed state alone (so every call of a reconcile computes the same): with more
    replicas wanted than observed, the clusters ``status.nextClusters`` names; with fewer,
    this deployment's own clusters (a scale-down reads their load); and the fleet-wide
    list instead when the last reconcile was short of room (:func:`short_last_time`).

    Returns:
        The clusters, and whether the fleet-wide list is asked for.
    """
    out: set[str] = set()
    if placed < wanted:
        out.update(next_clusters_status(inputs))
    elif placed > wanted:
        out.update(c for c in own_clusters if c)
    clusters = frozenset(out)
    return clusters, short_last_time(inputs) or too_many(clusters)


def too_many(clusters: frozenset[str] | set[str]) -> bool:
    """Whether asking per cluster would cost more lists than one fleet-wide list."""
    return len(clusters) > MAX_CLUSTER_REQUIREMENTS


def require(out: Outcome, clusters: Iterable[str], fleet: bool) -> None:
    """Ask for the ModelReplicas on each of ``clusters`` or, with ``fleet``, for every
    ModelReplica of the fleet instead."""
    if fleet:
        out.require(REQ_REPLICAS, API_VERSION, REPLICA_KIND, match_labels={})
        return
    for c in sorted(set(clusters)):
        out.require(
            requirement_name(c),
            API_VERSION,
            REPLICA_KIND,
            match_labels={LABEL_CLUSTER: label_value(c)},
        )
