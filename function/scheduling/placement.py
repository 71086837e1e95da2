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
    eligible for it; its pools are kept while they still satisfy its members.
    It is removed when its cluster is gone, no longer matches the selector,
    carries an untolerated ``NoExecute`` taint, is outside the cache footprint,
    or can no longer fit the engines. A replica whose cluster is not Ready or
    whose hydration Failed is *moved*: it is replaced only when a replacement
    could be placed elsewhere, and kept (failed) otherwise, so that a failure
    stays visible and never turns into no replica at all. The same holds while
    the cache has no hydration at all (a footprint being rebuilt): nothing can
    replace the replicas, so they stay.

Retained clusters (issue 13, "Reclaim finishes")
    A cluster that left the cache's ``clusterSelector`` keeps its hydration while a
    live replica uses it (``Request.retained``, from the ModelCache's status). It
    takes no new replica. A replica on it is *retiring*: it does not count toward
    ``replicas``, so a replacement is placed inside the footprint, and it is kept
    (make-before-break) until as many replicas serve elsewhere as are wanted
    (``Existing.serving``); then it is removed, and the cache reclaims the hydration
    once no live replica uses it. With no room for a replacement it stays.

Choice for new replicas
    Spread, then pack: clusters without a replica of this deployment first;
    among them a cluster whose hydration is Ready before one still Hydrating;
    once every eligible cluster has one, pack onto the cluster left with the
    fewest free nodes. Ties break by cluster name, so the result is
    deterministic. New replicas take the lowest index no existing replica holds
    (a replica's cluster is pinned; an index is never reused for another
    cluster in the same reconcile).

Scale-down
    Removes replicas due to move first, then from the most loaded cluster (the
    highest fraction of its nodes in use across the fleet), then those on a
    Hydrating cluster before a Ready one, then the highest index.

Cost (the function runs on every reconcile of every deployment)
    Linear: existing replicas cost O(R); new replicas read clusters in spread order
    and stop when enough are placed, reading every cluster only when packing or when
    short (then O(C + R log C) with a heap); scale-down is O(R log R). With
    ``Request.fleet`` a caller builds only the clusters placement reads. Device fit is
    computed once per distinct pool set (clusters sharing ``pools`` share it).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from function.api.modelcachehydration import FAILED, READY
from function.api.modeldeployment import (
    INSUFFICIENT_CAPACITY,
    NO_CLUSTER_IN_FOOTPRINT,
    NO_MATCHING_CLUSTERS,
    WAITING_FOR_CACHE,
)
from function.scheduling.devices import Device, DeviceRequest, claims_dra, pool_satisfies
from function.scheduling.selectors import LabelSelector
from function.scheduling.tolerations import (
    EXECUTE_EFFECTS,
    SCHEDULE_EFFECTS,
    Taint,
    Toleration,
    untolerated,
)

_MAX_NAMED = 5  # clusters named per reason in a message (fleets have thousands)


@dataclass(frozen=True, slots=True)
class Pool:
    """A GPU pool of a cluster: ``status.gpuPools[]``."""

    name: str
    nodes: int
    devices: tuple[Device, ...] = ()


@dataclass(frozen=True, slots=True)
class Cluster:
    """An InferenceCluster as placement sees it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    taints: tuple[Taint, ...] = ()
    pools: tuple[Pool, ...] = ()

    def pool(self, name: str) -> Pool | None:
        """The pool called ``name``, or None."""
        for p in self.pools:
            if p.name == name:
                return p
        return None


@dataclass(frozen=True, slots=True)
class Member:
    """One member of an engine: its pods per copy and its device requests."""

    role: str
    pods: int = 1
    requests: tuple[DeviceRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine: ``copies`` of its members."""

    name: str
    copies: int
    members: tuple[Member, ...]

    def cost(self, i: int) -> int:
        """Nodes member ``i`` takes: pods times copies."""
        return self.members[i].pods * self.copies


MemberKey = tuple[str, int]
"""(engine name, member index)."""


@dataclass(frozen=True, slots=True)
class Existing:
    """A replica of this deployment that exists (observed)."""

    index: int
    cluster: str
    pools: Mapping[MemberKey, str] = field(default_factory=dict)
    serving: bool = False
    """The replica serves (its ``ModelReady`` is True): a retiring replica goes only
    once enough replicas serve elsewhere."""


@dataclass(frozen=True, slots=True)
class Placed:
    """Where one replica runs."""

    index: int
    cluster: str
    pools: Mapping[MemberKey, str]
    existing: bool
    hydration: str | None = None
    """The cluster's hydration phase (None without a cache)."""


@dataclass(frozen=True, slots=True)
class Removed:
    """An existing replica that placement drops, and why.

    ``scaled_down`` is True when it goes because fewer replicas are wanted; False when
    it is *displaced*: its cluster stopped being eligible (gone, no longer selected,
    an untolerated ``NoExecute`` taint, outside the cache footprint, no longer fits)
    or it is moved off a cluster that is not Ready or whose hydration Failed.
    """

    index: int
    cluster: str
    why: str
    scaled_down: bool = False


@dataclass
class Placement:
    """The outcome of :func:`place`.

    Attributes:
        replicas: Every replica that should exist, sorted by index.
        removed: Existing replicas dropped, sorted by index.
        reason: Why fewer replicas than wanted are placed (None when all are).
        message: A sentence for the condition, naming what was checked.
    """

    replicas: list[Placed]
    removed: list[Removed]
    reason: str | None
    message: str


@dataclass(frozen=True)
class Request:
    """What placement needs.

    Attributes:
        replicas: How many replicas the deployment wants.
        engines: The engines of every replica.
        selector: The deployment's own cluster selector.
        tolerations: The deployment's tolerations.
        clusters: Every InferenceCluster matching the selector's equality part
            (placement applies the whole selector again).
        used: Nodes used per ``(cluster, pool)`` by replicas of *other*
            deployments. Read only with ``.get((cluster, pool), 0)``, and only for the
            clusters placement looks at (an existing replica's cluster for scale-down,
            the clusters the new replicas' walk reaches), so it may be a mapping that
            reads each cluster's usage when first asked and records what was asked.
        existing: This deployment's replicas that exist.
        footprint: With a cache: cluster name to its hydration phase (every
            hydration, Failed too); None without a cache.
        cache: The cache's name (for messages), or None.
        retained: Clusters of the footprint that the cache keeps only while a live
            replica uses them (they left its ``clusterSelector``): no new replica goes
            there, and replicas there retire make-before-break.
        fleet: Instead of ``clusters``, a mapping of cluster name to Cluster that may
            build each Cluster when it is first read (iteration yields the names):
            placement reads only the clusters it needs (the existing replicas'
            clusters; every cluster only when new replicas are placed or some are
            missing), so a caller with thousands of clusters pays for those alone.
    """

    replicas: int
    engines: tuple[Engine, ...]
    selector: LabelSelector
    tolerations: tuple[Toleration, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    used: Mapping[tuple[str, str], int] = field(default_factory=dict)
    existing: tuple[Existing, ...] = ()
    footprint: Mapping[str, str] | None = None
    cache: str | None = None
    fleet: Mapping[str, Cluster] | None = None
    retained: frozenset[str] = frozenset()


class _Ledger:
    """Free nodes per (cluster, pool), updated as replicas are kept, placed, removed.

    ``used`` (``Request.used``) is read with ``.get`` only, one (cluster, pool) at a
    time and only for the clusters placement looks at, so a caller may pass a mapping
    that learns which clusters' capacity was read (and reads them lazily); the charges
    of this placement are kept apart in ``delta``.
    """

    def __init__(self, clusters: Mapping[str, Cluster], used: Mapping[tuple[str, str], int]):
        self.base = used
        self.delta: dict[tuple[str, str], int] = {}
        self.clusters = clusters

    def used(self, cluster: str, pool: str) -> int:
        key = (cluster, pool)
        return int(self.base.get(key, 0) or 0) + self.delta.get(key, 0)

    def free(self, cluster: str, pool: str) -> int:
        c = self.clusters.get(cluster)
        p = c.pool(pool) if c else None
        return (p.nodes if p else 0) - self.used(cluster, pool)

    def charge(self, cluster: str, charges: Mapping[str, int], sign: int = 1) -> None:
        for pool, n in charges.items():
            key = (cluster, pool)
            self.delta[key] = self.delta.get(key, 0) + sign * n

    def load(self, cluster: str) -> float:
        c = self.clusters.get(cluster)
        total = sum(p.nodes for p in c.pools) if c else 0
        used = sum(self.used(cluster, p.name) for p in c.pools) if c else 0
        return used / total if total > 0 else 1.0


def _charges(engines: Sequence[Engine], pools: Mapping[MemberKey, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in engines:
        for i in range(len(e.members)):
            p = pools.get((e.name, i))
            if p is not None:
                out[p] = out.get(p, 0) + e.cost(i)
    return out


def _fit(
    cluster: Cluster,
    engines: Sequence[Engine],
    free: Mapping[str, int] | None,
    prefer: Mapping[MemberKey, str] | None = None,
) -> tuple[dict[MemberKey, str] | None, str]:
    """Assign a pool to every member of every engine on ``cluster``.

    Args:
        free: Free nodes per pool; None ignores capacity (device fit only).
        prefer: Pools to keep when they still satisfy the member (existing replica).

    Returns:
        ``(pools, "")`` or ``(None, why)``.
    """
    pools = sorted(cluster.pools, key=lambda p: p.name)
    left = dict(free) if free is not None else None
    out: dict[MemberKey, str] = {}

    def room(pool: Pool, n: int) -> bool:
        return left is None or left.get(pool.name, 0) >= n

    def take(pool: Pool, n: int) -> None:
        if left is not None:
            left[pool.name] = left.get(pool.name, 0) - n

    for e in engines:
        claimers = [i for i, m in enumerate(e.members) if m.requests]
        total = sum(e.cost(i) for i in range(len(e.members)))
        chosen: dict[int, Pool] = {}
        # Existing pools first, when every member still fits where it is.
        if prefer:
            kept = {i: cluster.pool(prefer.get((e.name, i), "")) for i in range(len(e.members))}
            if all(p is not None for p in kept.values()):
                need: dict[str, int] = {}
                for i, p in kept.items():
                    need[p.name] = need.get(p.name, 0) + e.cost(i)  # type: ignore[union-attr]
                ok = all(
                    pool_satisfies(e.members[i].requests, p.devices)  # type: ignore[union-attr]
                    for i, p in kept.items()
                ) and all(left is None or left.get(n, 0) >= c for n, c in need.items())
                if ok and (
                    not claimers
                    or any(
                        claims_dra(e.members[i].requests, kept[i].devices)  # type: ignore[union-attr]
                        for i in claimers
                    )
                ):
                    chosen = kept  # type: ignore[assignment]
        if not chosen:
            for p in pools:
                if (
                    all(pool_satisfies(e.members[i].requests, p.devices) for i in claimers)
                    and (
                        not claimers
                        or any(claims_dra(e.members[i].requests, p.devices) for i in claimers)
                    )
                    and room(p, total)
                ):
                    chosen = dict.fromkeys(range(len(e.members)), p)
                    break
        if not chosen:
            # Split members across pools; requestless members ride on the first claimer's pool.
            trial = dict(left) if left is not None else None
            split: dict[int, Pool] = {}
            for i in claimers:
                for p in pools:
                    fits = trial is None or trial.get(p.name, 0) >= e.cost(i)
                    if fits and pool_satisfies(e.members[i].requests, p.devices):
                        split[i] = p
                        if trial is not None:
                            trial[p.name] = trial.get(p.name, 0) - e.cost(i)
                        break
                else:
                    if not any(pool_satisfies(e.members[i].requests, p.devices) for p in pools):
                        return None, _no_devices(e, i)
                    return None, _no_room(cluster, e, i, left)
            if not claimers:
                if not pools:
                    return None, "has no GPU pools"
                split = dict.fromkeys(range(len(e.members)), pools[0])
            anchor = split[claimers[0]] if claimers else pools[0]
            for i in range(len(e.members)):
                if i not in split:
                    if trial is not None and trial.get(anchor.name, 0) < e.cost(i):
                        return None, _no_room(cluster, e, i, left)
                    split[i] = anchor
                    if trial is not None:
                        trial[anchor.name] = trial.get(anchor.name, 0) - e.cost(i)
            if claimers and not any(
                claims_dra(e.members[i].requests, split[i].devices) for i in claimers
            ):
                return None, f"engine {e.name}: no pool offers a claimable (claim: DRA) device"
            chosen = split
        for i, p in chosen.items():
            out[(e.name, i)] = p.name
            take(p, e.cost(i))
    return out, ""


def _no_devices(e: Engine, i: int) -> str:
    names = ",".join(r.name for r in e.members[i].requests)
    role = e.members[i].role
    return f"no pool's devices satisfy engine {e.name} member {i} ({role}) request {names}"


def _no_room(cluster: Cluster, e: Engine, i: int, free: Mapping[str, int] | None) -> str:
    pools = ", ".join(
        f"{p.name} {max(0, (free or {}).get(p.name, 0))}/{p.nodes} free" for p in cluster.pools
    )
    return f"engine {e.name} member {i} needs {e.cost(i)} node(s): {pools or 'no pools'}"


def place(req: Request) -> Placement:
    """Decide where every replica of a deployment runs (see the module docstring).

    Raises:
        function.scheduling.devices.InvalidSelector: when a device selector does not compile.
    """
    clusters: Mapping[str, Cluster] = (
        req.fleet if req.fleet is not None else {c.name: c for c in req.clusters}
    )
    ledger = _Ledger(clusters, req.used)
    fp = req.footprint
    # Device fit ignores capacity and the cluster's name, so clusters reporting the same
    # pools (the same status subtree, shared by the caller) share one computation: one
    # evaluation per distinct (pools, engines) pair, not one per cluster.
    memo: dict[
        tuple[int, tuple[tuple[MemberKey, str], ...]], tuple[dict[MemberKey, str] | None, str]
    ] = {}
    charges_memo: dict[int, dict[str, int]] = {}

    def static_fit(
        c: Cluster, prefer: Mapping[MemberKey, str] | None = None
    ) -> tuple[dict[MemberKey, str] | None, str]:
        key = (id(c.pools), tuple(sorted(prefer.items())) if prefer else ())
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = _fit(c, req.engines, None, prefer)
        return hit

    def static_charges(c: Cluster, pools: Mapping[MemberKey, str]) -> dict[str, int]:
        """Nodes per pool of the device-only fit of ``c`` (``pools``), memoized like it."""
        hit = charges_memo.get(id(c.pools))
        if hit is None:
            hit = charges_memo[id(c.pools)] = _charges(req.engines, pools)
        return hit

    def phase(name: str) -> str | None:
        return None if fp is None else fp.get(name)

    def tier(name: str) -> int:
        return 0 if fp is None or fp.get(name) == READY else 1

    # ---- existing replicas: keep, move (soft), or drop --------------------
    solid: list[Placed] = []
    soft: list[tuple[Placed, str]] = []
    retiring: list[Placed] = []
    serving: set[int] = set()
    removed: list[Removed] = []
    for ex in sorted(req.existing, key=lambda x: x.index):
        c = clusters.get(ex.cluster)
        why = ""
        if c is None:
            why = "cluster is gone or no longer matches clusterSelector"
        elif not req.selector.matches(c.labels):
            why = "cluster no longer matches clusterSelector"
        elif c.taints and (taints := untolerated(c.taints, req.tolerations, EXECUTE_EFFECTS)):
            why = f"taint {taints[0]} not tolerated"
        elif fp and ex.cluster not in fp:
            why = f"cluster is outside the footprint of ModelCache {req.cache}"
        pools: dict[MemberKey, str] | None = None
        if not why and c is not None:
            # Device fit only: an existing replica keeps its pools (it already holds their
            # nodes); a member whose pool no longer satisfies it moves within the cluster.
            pools, fit_why = static_fit(c, ex.pools)
            if pools is None:
                why = f"no longer fits: {fit_why}"
        if why:
            removed.append(Removed(ex.index, ex.cluster, why))
            continue
        assert c is not None and pools is not None
        p = Placed(ex.index, c.name, pools, True, phase(c.name))
        ledger.charge(c.name, _charges(req.engines, pools))
        if ex.serving:
            serving.add(ex.index)
        if c.name in req.retained:
            retiring.append(p)
        elif not c.ready:
            soft.append((p, "cluster is not Ready"))
        elif fp is not None and not fp:
            soft.append((p, f"ModelCache {req.cache} has no hydration"))
        elif fp is not None and fp.get(c.name) == FAILED:
            soft.append((p, f"hydration of ModelCache {req.cache} Failed"))
        else:
            solid.append(p)

    def drop(p: Placed, why: str, scaled_down: bool) -> None:
        ledger.charge(p.cluster, _charges(req.engines, p.pools), -1)
        removed.append(Removed(p.index, p.cluster, why, scaled_down))

    # ---- scale-down --------------------------------------------------------
    excess = len(solid) + len(soft) - req.replicas
    while excess > 0 and soft:
        p, why = soft.pop()
        drop(p, f"scaled down ({why})", True)
        excess -= 1
    if excess > 0:
        # The victim is the replica with the highest (load, count, tier, index). Removing
        # one lowers only its own cluster's load and count, so keys only decrease: a heap
        # of negated keys re-checked on pop finds each victim in O(log n).
        counts = _counts(solid)

        def down_key(p: Placed) -> tuple[float, int, int, int]:
            return (-ledger.load(p.cluster), -counts[p.cluster], -tier(p.cluster), -p.index)

        victims = [(down_key(p), p) for p in solid]
        heapq.heapify(victims)
        gone: set[int] = set()
        while excess > 0:
            k, victim = heapq.heappop(victims)
            now = down_key(victim)
            if now != k:
                heapq.heappush(victims, (now, victim))
                continue
            gone.add(victim.index)
            counts[victim.cluster] -= 1
            drop(victim, "scaled down", True)
            excess -= 1
        solid = [p for p in solid if p.index not in gone]

    # ---- scale-up: place new replicas -------------------------------------
    need = req.replicas - len(solid)
    indexes = _free_indexes({ex.index for ex in req.existing})
    checked: dict[str, str] = {}
    new: list[Placed] = []
    counts = _counts(solid + [p for p, _ in soft])

    def entry(c: Cluster) -> tuple[tuple[Any, ...], dict[MemberKey, str]] | None:
        """The choice key of ``c`` for the next replica, or None when it is full."""
        free = {p.name: ledger.free(c.name, p.name) for p in c.pools}
        # The device-only fit is the capacity-aware one whenever its pools have room
        # (_fit takes the first satisfying pool by name; room only skips pools).
        pools = static_fit(c)[0]
        charges = static_charges(c, pools) if pools is not None else None
        if pools is None or charges is None or any(free.get(k, 0) < n for k, n in charges.items()):
            pools, why = _fit(c, req.engines, free)
            if pools is None:
                checked[c.name] = why
                return None
            charges = _charges(req.engines, pools)
        n = counts.get(c.name, 0)
        left = sum(free.values()) - sum(charges.values())
        return (n > 0, tier(c.name), left if n > 0 else 0, c.name), pools

    def put(c: Cluster, pools: dict[MemberKey, str]) -> None:
        checked.pop(c.name, None)
        ledger.charge(c.name, _charges(req.engines, pools))
        new.append(Placed(next(indexes), c.name, pools, False, phase(c.name)))
        counts[c.name] = counts.get(c.name, 0) + 1

    if need > 0:
        # Spread: the choice key puts every cluster without a replica of this deployment
        # first, in (tier, name) order, and placing one there moves it behind them all.
        # So walk the clusters in that order, one replica each, and stop when enough are
        # placed: a cluster is read and checked only when reached (a first call on a
        # fleet of thousands looks at about as many clusters as it places replicas).
        eligible: list[Cluster] = []
        for name in _spread_order(clusters, fp):
            if len(new) >= need:
                break
            c = clusters[name]
            if not _eligible(req, c, checked, static_fit):
                continue
            eligible.append(c)
            if counts.get(name, 0):
                continue
            e = entry(c)
            if e is not None:
                put(c, e[1])
        else:
            # Every cluster was looked at and replicas are still wanted: pack onto the
            # clusters that hold one, by their choice keys. Placing a replica changes
            # only the chosen cluster's key, so a heap re-evaluates only that cluster.
            heap: list[tuple[tuple[Any, ...], dict[MemberKey, str], Cluster]] = []
            if len(new) < need:
                for c in eligible:
                    if counts.get(c.name, 0):
                        e = entry(c)
                        if e is not None:
                            heap.append((e[0], e[1], c))
                heapq.heapify(heap)
            while len(new) < need and heap:
                _, pools, c = heapq.heappop(heap)
                put(c, pools)
                e = entry(c)
                if e is not None:
                    heapq.heappush(heap, (e[0], e[1], c))

    # ---- replicas due to move: replaced when a replacement was placed -----
    keep_soft = max(0, req.replicas - len(solid) - len(new))
    soft.sort(key=lambda s: s[0].index)
    for p, why in soft[keep_soft:]:
        drop(p, f"moved ({why})", False)
    kept_soft = [p for p, _ in soft[:keep_soft]]

    # ---- retiring replicas: kept until enough replicas serve elsewhere ------
    serving_elsewhere = sum(1 for p in solid if p.index in serving)
    keep_retiring = max(0, req.replicas - serving_elsewhere)
    for i, p in enumerate(retiring[keep_retiring:], start=keep_retiring):
        if i >= req.replicas:
            drop(p, f"scaled down (on {p.cluster}, retained by ModelCache {req.cache})", True)
            continue
        drop(
            p,
            f"moved off {p.cluster}, retained by ModelCache {req.cache} after it left the "
            f"cache's clusterSelector ({serving_elsewhere} replicas serve in the footprint)",
            False,
        )
    kept_retiring = retiring[:keep_retiring]

    wanted = solid + kept_soft + new
    replicas = sorted(wanted + kept_retiring, key=lambda p: p.index)
    removed.sort(key=lambda r: r.index)
    placed = len(wanted)
    retire_note = ""
    if kept_retiring:
        retire_note = (
            f"; {len(kept_retiring)} more kept on retained cluster(s) "
            f"{_names(sorted({p.cluster for p in kept_retiring}))} until replacements "
            "serve (make-before-break)"
        )
    if placed >= req.replicas:
        where = _where(wanted)
        return Placement(
            replicas,
            removed,
            None,
            f"{placed} of {req.replicas} replicas placed{where}{retire_note}",
        )
    reason, detail = _shortfall(req, clusters, checked)
    msg = f"{placed} of {req.replicas} replicas placed: {detail}{retire_note}"
    return Placement(replicas, removed, reason, msg)


def next_clusters(req: Request, placement: Placement, k: int) -> list[str]:
    """The first ``k`` clusters a further new replica would be tried on, capacity aside.

    In the order :func:`place` tries clusters for a new replica (spread order: hydration
    tier, then name), those eligible for it by every rule but free nodes (selector,
    footprint, not retained, Ready, taints, device fit) that hold no replica of this
    deployment after ``placement``; then, when fewer than ``k``, eligible clusters that
    hold one (where packing would go). Reads no usage (``Request.used``): a caller uses
    it to ask for these clusters' capacity before a scale-up needs it.

    Raises:
        SelectorEvaluationError: as :func:`place` does, for a CEL selector that fails.
    """
    clusters: Mapping[str, Cluster] = (
        req.fleet if req.fleet is not None else {c.name: c for c in req.clusters}
    )
    held = {p.cluster for p in placement.replicas}
    memo: dict[int, tuple[dict[MemberKey, str] | None, str]] = {}

    def static_fit(c: Cluster) -> tuple[dict[MemberKey, str] | None, str]:
        hit = memo.get(id(c.pools))
        if hit is None:
            hit = memo[id(c.pools)] = _fit(c, req.engines, None)
        return hit

    spread: list[str] = []
    packed: list[str] = []
    for name in _spread_order(clusters, req.footprint):
        if len(spread) >= k:
            break
        if name in held:
            # Needed only while fewer than k: past that, a held cluster is not checked.
            if len(packed) < k and _eligible(req, clusters[name], {}, static_fit):
                packed.append(name)
        elif _eligible(req, clusters[name], {}, static_fit):
            spread.append(name)
    return (spread + packed)[:k]


def _counts(placed: Sequence[Placed]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in placed:
        out[p.cluster] = out.get(p.cluster, 0) + 1
    return out


def _free_indexes(taken: set[int]) -> Iterator[int]:
    """The indexes not in ``taken``, lowest first (one pass: O(replicas) in all)."""
    i = 0
    while True:
        if i not in taken:
            yield i
        i += 1


def _where(replicas: Sequence[Placed]) -> str:
    counts = _counts(replicas)
    if not counts:
        return ""
    parts = [f"{k}" if v == 1 else f"{k} x{v}" for k, v in sorted(counts.items())]
    more = f" and {len(parts) - _MAX_NAMED} more" if len(parts) > _MAX_NAMED else ""
    return " on " + ", ".join(parts[:_MAX_NAMED]) + more


def _spread_order(clusters: Mapping[str, Cluster], fp: Mapping[str, str] | None) -> Iterator[str]:
    """Cluster names in (tier, name) order, inside the footprint when there is one.

    A generator, so a caller that stops early has looked up the footprint phase of the
    clusters it reached only (the footprint may be read lazily).
    """
    names = sorted(clusters)
    if fp is None:
        yield from names
        return
    later = []
    for name in names:
        ph = fp.get(name)
        if ph is None:
            continue
        if ph == READY:
            yield name
        else:
            later.append(name)
    yield from later


def _eligible(
    req: Request,
    c: Cluster,
    checked: dict[str, str],
    static_fit: Callable[[Cluster], tuple[dict[MemberKey, str] | None, str]],
) -> bool:
    """Whether a new replica may go to ``c`` (capacity is checked later); records why not
    in ``checked`` (a cluster outside the selector or the footprint is not recorded)."""
    name = c.name
    if not req.selector.matches(c.labels):
        return False  # outside the selector: not "checked"
    fp = req.footprint
    if fp is not None:
        ph = fp.get(name)
        if ph is None:
            return False  # outside the footprint: reported by _shortfall
        if ph == FAILED:
            checked[name] = f"hydration of ModelCache {req.cache} Failed"
            return False
        if name in req.retained:
            checked[name] = (
                f"retained by ModelCache {req.cache} only while its replicas move "
                "(it left the cache's clusterSelector)"
            )
            return False
    if not c.ready:
        checked[name] = "not Ready"
        return False
    bad = untolerated(c.taints, req.tolerations, SCHEDULE_EFFECTS) if c.taints else None
    if bad:
        checked[name] = f"taint {bad[0]} not tolerated"
        return False
    pools, why = static_fit(c)
    if pools is None:
        checked[name] = why
        return False
    return True


def _shortfall(
    req: Request, clusters: Mapping[str, Cluster], checked: Mapping[str, str]
) -> tuple[str, str]:
    """The specific reason fewer replicas than wanted are placed, and what was checked."""
    selected = sorted(n for n, c in clusters.items() if req.selector.matches(c.labels))
    fp = req.footprint
    if fp is not None:
        live = sorted(n for n, ph in fp.items() if ph != FAILED and n not in req.retained)
        if not fp:
            return WAITING_FOR_CACHE, (
                f"ModelCache {req.cache} has no hydration on any cluster yet; "
                f"replicas are placed only where it is pre-warmed"
            )
        inside = [n for n in selected if n in fp]
        if not [n for n in inside if fp[n] != FAILED and n not in req.retained]:
            failed = sorted(n for n in inside if fp[n] == FAILED)
            detail = (
                f"clusterSelector matches {_names(selected) or 'no cluster'}; the footprint of "
                f"ModelCache {req.cache} is {_names(live) or 'empty'}"
            )
            if failed:
                detail += f"; hydration Failed on {_names(failed)}"
            return NO_CLUSTER_IN_FOOTPRINT, detail
    elif not selected:
        return NO_MATCHING_CLUSTERS, "no InferenceCluster matches clusterSelector"
    if not checked:
        return INSUFFICIENT_CAPACITY, "every eligible cluster is full"
    by_why: dict[str, list[str]] = {}
    for name, why in sorted(checked.items()):
        by_why.setdefault(why, []).append(name)
    parts = [
        f"{_names(names)}: {why}" for why, names in sorted(by_why.items(), key=lambda x: x[1][0])
    ]
    more = f"; and {len(parts) - _MAX_NAMED} more" if len(parts) > _MAX_NAMED else ""
    return INSUFFICIENT_CAPACITY, (
        f"checked {len(checked)} cluster(s): " + "; ".join(parts[:_MAX_NAMED]) + more
    )


def _names(names: Sequence[str]) -> str:
    if len(names) <= _MAX_NAMED:
        return ", ".join(names)
    return ", ".join(names[:_MAX_NAMED]) + f" and {len(names) - _MAX_NAMED} more"
