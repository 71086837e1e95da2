"""Placement of a ModelDeployment's replicas across the fleet: a pure function.

:func:`place` takes what the deployment asks for (replica count, engines with
their device requests, cluster selector, tolerations), the fleet (clusters with
their GPU pools, what every other replica already uses), the deployment's own
existing replicas, and the cache footprint, and returns where every replica
runs and why any could not be placed. No I/O, no clock, no protobuf: it is
tested as a table.

Rules (issue 3; Kubernetes semantics where a rule comes from Kubernetes):

Eligibility of a cluster for a new replica
    Ready; matches the deployment's ``clusterSelector`` (full label-selector
    semantics); every ``NoSchedule``/``NoExecute`` taint tolerated; with a cache,
    inside its footprint (a ModelCacheHydration that has not Failed: the
    deployment's selector and the footprint are intersected, never merged); and
    every engine fits on the cluster's pools (below).

Fit of an engine on a cluster
    A member's cost is its pods times the engine's ``copies`` (Standalone and
    Leader: 1 pod; Worker: ``worker.nodes`` pods; one pod per node). A pool
    satisfies a member when every device request of the member is met by one of
    the pool's devices (count and CEL selectors). The whole engine goes on one
    pool when one satisfies every member and has the free nodes (pools tried by
    name); otherwise members are split across pools, each on the first pool by
    name that satisfies it and has room. A member without device requests (a
    coordinator-only Leader) rides on its engine's pool. Some request of the
    engine must be met by a claimable (``claim: DRA``) device. Free nodes of a
    pool are ``status.gpuPools[].nodes`` minus the cost of every replica of the
    fleet on that pool.

Stability
    An existing replica stays on its cluster while the cluster is still
    eligible for it; its pools are kept while they still satisfy its members (and
    while the cluster's pools are not known: ``status.gpuPools`` absent). It is
    removed at once when its cluster carries an untolerated ``NoExecute`` taint
    (Kubernetes evicts its pods). When its cluster is gone from the list, no longer
    matches the selector, is outside the cache footprint, or can no longer fit the
    engines, a replica that does not serve is removed, and one that serves is moved
    like the next ones (its pods still serve). A replica whose cluster is not Ready or
    whose hydration Failed is *moved*, make-before-break: a replacement is placed
    elsewhere when one fits; a replica that serves (``Existing.serving``) stays
    beside it until as many replicas serve elsewhere as are wanted
    (``Placement.moving``), one that does not goes once its replacement is placed;
    with no room for a replacement it stays (failed), so that a failure stays
    visible and never turns into no replica at all. The same holds while the cache
    has no hydration at all (a footprint being rebuilt): nothing can replace the
    replicas, so they stay.

Retained clusters (issue 13, "Reclaim finishes")
    A cluster that left the cache's ``clusterSelector`` keeps its hydration while a
    live replica uses it (``Request.retained``, from the ModelCache's status, and,
    before its shard reports it there, from the cache's spec: the ModelDeployment
    composer's ``_Retained``). It
    takes no new replica. A replica on it is *retiring*: it does not count toward
    ``replicas``, so a replacement is placed inside the footprint, and it is kept
    (make-before-break) until as many replicas serve elsewhere as are wanted
    (``Existing.serving``); then it is removed, and the cache reclaims the hydration
    once no live replica uses it. With no room for a replacement it stays.

Surge (``Request.surge``, the response size limit)
    At most ``surge`` replicas are kept beside their replacements at once (serving
    replicas due to move, retiring ones). The moves past it are *deferred*
    (``Placement.deferred``): the replica stays where it is, counted as placed, with no
    replacement, until a move in flight ends and a later call has room. Started moves
    (``Request.displaced``) go first, then those off a cluster that is gone, not Ready or
    whose hydration Failed, then those off a cluster merely no longer eligible; by index
    within each. A replica due to move that does not serve is never deferred (it goes
    once its replacement is placed, so it takes no room). A scale-down drops deferred
    replicas before healthy ones. So at most ``replicas + surge`` replicas are placed.

Choice for new replicas
    Spread, then pack: clusters without a replica of this deployment first;
    among them a cluster whose hydration is Ready before one still Hydrating;
    once every eligible cluster has one, pack onto the cluster left with the
    fewest free nodes. Ties break by cluster name, so the result is
    deterministic. New replicas take the lowest index no existing replica holds
    (a replica's cluster is pinned; an index is never reused for another
    cluster in the same reconcile).

Scale-down
    Removes replicas due to move that do not serve first, then replicas not serving
    yet, then from the most loaded cluster (the highest fraction of its nodes in use
    across the fleet), then those on a Hydrating cluster before a Ready one, then the
    highest index.

Cost (the function runs on every reconcile of every deployment)
    Linear: existing replicas cost O(R); new replicas read clusters in spread order
    and stop when enough are placed, reading every cluster only when packing or when
    short (then O(C + R log C) with a heap); scale-down is O(R log R). With
    ``Request.fleet`` a caller builds only the clusters placement reads. Device fit is
    computed once per distinct pool set (clusters sharing ``pools`` share it).

Modules: ``model`` (the records), ``fit`` (engines on pools, the free-node ledger),
``eligibility`` (which clusters may take a new replica, spread order,
:func:`next_clusters`), ``place`` (:func:`place` in named steps, the shortfall reason),
``report`` (where replicas run, in words).
"""

from function.scheduling.placement.eligibility import next_clusters
from function.scheduling.placement.model import (
    Cluster,
    Engine,
    Existing,
    Member,
    MemberKey,
    Moving,
    Placed,
    Placement,
    Pool,
    Removed,
    Request,
)
from function.scheduling.placement.place import place

__all__ = [
    "Cluster",
    "Engine",
    "Existing",
    "Member",
    "MemberKey",
    "Moving",
    "Placed",
    "Placement",
    "Pool",
    "Removed",
    "Request",
    "next_clusters",
    "place",
]
