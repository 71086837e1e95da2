""":func:`place`: where every replica of a deployment runs, in named steps.

The steps, in order (rules in :mod:`function.scheduling.placement`): sort the existing
replicas into kept, due to move, retiring or displaced; defer the moves past
``Request.surge``; scale down; place new replicas
(spread, then pack); replace replicas due to move where a replacement was placed; retire
replicas on retained clusters once enough serve elsewhere; report.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from function.api.modelcachehydration import FAILED, READY
from function.api.modeldeployment import (
    HYDRATION_FAILED,
    INSUFFICIENT_CAPACITY,
    NO_CLUSTER_IN_FOOTPRINT,
    NO_MATCHING_CLUSTERS,
    WAITING_FOR_CACHE,
)
from function.scheduling.placement.eligibility import eligible, spread_order
from function.scheduling.placement.fit import Ledger, StaticFits, charges, fit
from function.scheduling.placement.model import (
    Cluster,
    Existing,
    MemberKey,
    Moving,
    Placed,
    Placement,
    Removed,
    Request,
)
from function.scheduling.placement.report import MAX_NAMED, counts, names, where
from function.scheduling.tolerations import EXECUTE_EFFECTS, untolerated

_Entry = tuple[tuple[Any, ...], dict[MemberKey, str]]
"""A cluster's choice key for the next new replica, and the pools it would take."""


def place(req: Request) -> Placement:
    """Decide where every replica of a deployment runs (see the package docstring).

    Raises:
        function.scheduling.devices.InvalidSelector: when a device selector does not compile.
    """
    clusters: Mapping[str, Cluster] = (
        req.fleet if req.fleet is not None else {c.name: c for c in req.clusters}
    )
    run = _Run(req, clusters, Ledger(clusters, req.used), StaticFits(req.engines))
    standing = _sort_existing(run)
    _defer(run, standing)
    _scale_down(run, standing)
    chooser = _Chooser(run, standing)
    chooser.place(req.replicas - len(standing.solid))
    stuck, moving = _replace_moved(run, standing, chooser.new)
    kept_retiring = _retire(run, standing)
    placement = _report(
        run,
        standing.solid + [p for p, _ in stuck] + chooser.new,
        kept_retiring,
        moving,
        chooser.checked,
        stuck=stuck,
    )
    placement.deferred = [
        Moving(p.index, p.cluster, standing.deferred[p.index], False)
        for p in standing.solid
        if p.index in standing.deferred
    ]
    return placement


@dataclass
class _Run:
    """One placement call: its request, the fleet, free nodes and what it removed."""

    req: Request
    clusters: Mapping[str, Cluster]
    ledger: Ledger
    fits: StaticFits
    removed: list[Removed] = field(default_factory=list)
    held: list[Placed] = field(default_factory=list)
    """Replicas kept on a cluster whose hydration Failed for the cache's new identity
    while the identity they serve is still stored there (they take part in no move)."""

    def phase(self, name: str) -> str | None:
        fp = self.req.footprint
        return None if fp is None else fp.get(name)

    def tier(self, name: str) -> int:
        fp = self.req.footprint
        return 0 if fp is None or fp.get(name) == READY else 1

    def drop(self, p: Placed, why: str, scaled_down: bool) -> None:
        self.ledger.charge(p.cluster, charges(self.req.engines, p.pools), -1)
        self.removed.append(Removed(p.index, p.cluster, why, scaled_down))


@dataclass
class _Standing:
    """The existing replicas that stay for now, by how firmly."""

    solid: list[Placed] = field(default_factory=list)
    soft: list[tuple[Placed, str]] = field(default_factory=list)
    """Due to move (cluster not Ready, hydration Failed or absent), with why."""
    retiring: list[Placed] = field(default_factory=list)
    """On a retained cluster: kept until enough replicas serve elsewhere."""
    serving: set[int] = field(default_factory=set)
    urgent: set[int] = field(default_factory=set)
    """Due to move off a cluster that is gone, not Ready, or whose hydration Failed (or
    is absent): these move before those off a cluster merely no longer eligible."""
    deferred: dict[int, str] = field(default_factory=dict)
    """Index to why it should move, of the replicas whose move :func:`_defer` deferred
    (they are in ``solid``)."""


# ---- existing replicas: keep, move (soft), retire or drop ----------------------


def _sort_existing(run: _Run) -> _Standing:
    standing = _Standing()
    for ex in sorted(run.req.existing, key=lambda x: x.index):
        c = run.clusters.get(ex.cluster)
        why, pools, hard = _still_fits(run, ex, c)
        if why and (hard or not ex.serving):
            run.removed.append(Removed(ex.index, ex.cluster, why))
            continue
        kept = pools if pools is not None else dict(ex.pools)
        p = Placed(ex.index, ex.cluster, kept, True, run.phase(ex.cluster))
        # Its pods hold these nodes until it goes (a drop gives them back).
        run.ledger.charge(ex.cluster, charges(run.req.engines, kept))
        if ex.serving:
            standing.serving.add(ex.index)
        if why:  # serves: moves make-before-break (it stays until a replacement serves)
            standing.soft.append((p, why))
            if c is None:
                standing.urgent.add(ex.index)
            continue
        assert c is not None
        _file(run, standing, p, c, ex)
    return standing


def _still_fits(
    run: _Run, ex: Existing, c: Cluster | None
) -> tuple[str, dict[MemberKey, str] | None, bool]:
    """``("", pools, False)`` for a replica that may stay on its cluster, else ``(why,
    pools or None, hard)``: ``hard`` when it must go at once (an untolerated
    ``NoExecute`` taint: Kubernetes evicts its pods anyway), else it moves
    make-before-break while it serves (its cluster gone from the list or no longer
    selected, outside the footprint, its pools no longer fitting).

    A cluster whose ``status.gpuPools`` is absent or not a list (not written yet, or
    lost in a restore) is not known to have changed: the replica keeps its pools."""
    why, hard = _displaced(run.req, ex, c)
    if why or c is None:
        return why, None, hard
    if not c.pools_known:
        return "", dict(ex.pools), False
    # Device fit only: an existing replica keeps its pools (it already holds their
    # nodes); a member whose pool no longer satisfies it moves within the cluster.
    pools, fit_why = run.fits.fit(c, ex.pools)
    if pools is None:
        return f"no longer fits: {fit_why}", None, False
    return "", pools, False


def _displaced(req: Request, ex: Existing, c: Cluster | None) -> tuple[str, bool]:
    """Why ``ex``'s cluster stopped being eligible for it ('' while it is), and whether
    that is an untolerated ``NoExecute`` taint."""
    if c is None:
        return "cluster is gone or no longer matches clusterSelector", False
    if not req.selector.matches(c.labels):
        return "cluster no longer matches clusterSelector", False
    if c.taints and (taints := untolerated(c.taints, req.tolerations, EXECUTE_EFFECTS)):
        return f"taint {taints[0]} not tolerated", True
    if req.footprint and ex.cluster not in req.footprint:
        return f"cluster is outside the footprint of ModelCache {req.cache}", False
    return "", False


def _file(run: _Run, standing: _Standing, p: Placed, c: Cluster, ex: Existing) -> None:
    """Put a replica that stays into retiring, due to move, or solid.

    A replica on a cluster whose hydration Failed moves, unless what it serves is still
    complete there: its identity is stored (``status.stored``) and is not the one that
    failed, or it reads the PVC root (a replica of the release before side-by-side
    revisions: the download into the identity's directory failed beside it). It keeps
    serving (held).
    """
    req = run.req
    fp = req.footprint
    if c.name in req.retained:
        standing.retiring.append(p)
        return
    if not c.ready:
        why = "cluster is not Ready"
    elif fp is not None and not fp:
        why = f"ModelCache {req.cache} has no hydration"
    elif fp is not None and fp.get(c.name) == FAILED and not _still_stored(req, ex):
        why = f"hydration of ModelCache {req.cache} Failed"
    else:
        standing.solid.append(p)
        if fp is not None and fp.get(c.name) == FAILED:
            run.held.append(p)
        return
    standing.soft.append((p, why))
    standing.urgent.add(p.index)


def _still_stored(req: Request, ex: Existing) -> bool:
    """Whether what ``ex`` serves is complete on its cluster's PVC: its identity (its
    spec's, else the one its workload serves, ``Existing.serves``) is stored and is not
    the identity its Failed hydration failed for, or it reads the PVC root (never
    written or pruned by the side-by-side layout)."""
    serves = ex.identity or ex.serves
    if ex.reads_root and not serves:
        return True
    ids = req.identities
    if not serves or ids is None:
        return False
    failed, _ = ids.failure(ex.cluster)
    return serves != failed and serves in ids.stored(ex.cluster)


# ---- moves past the surge -------------------------------------------------------


def _defer(run: _Run, standing: _Standing) -> None:
    """Keep the moves past ``Request.surge`` for later: each such replica stays where it
    is, in ``solid`` (counted as placed, so no replacement is placed for it), and is
    recorded in ``standing.deferred``.

    The moves that may keep a replica beside its replacement are those of replicas due
    to move that serve and of retiring ones; in the order of ``Request.surge`` (started
    ones first, so a replacement already composed is never left without its move), the
    first ``surge`` go on and the rest wait. Runs before the scale-down, which drops
    deferred replicas before healthy ones (:func:`_shed`), as it drops replicas due to
    move first without a bound. Bound: ``solid`` is at most ``replicas`` after the
    scale-down and at most ``surge`` replicas remain to be kept beside a replacement.
    """
    surge = run.req.surge
    if surge is None:
        return
    displaced, urgent = run.req.displaced, standing.urgent
    cluster_of = f"cluster is retained by ModelCache {run.req.cache}"
    moves = [(p, why) for p, why in standing.soft if p.index in standing.serving]
    moves += [(p, cluster_of) for p in standing.retiring]
    if len(moves) <= surge:
        return
    moves.sort(key=lambda m: (m[0].index not in displaced, m[0].index not in urgent, m[0].index))
    for p, why in moves[surge:]:
        standing.deferred[p.index] = why
        standing.solid.append(p)
    standing.soft = [s for s in standing.soft if s[0].index not in standing.deferred]
    standing.retiring = [p for p in standing.retiring if p.index not in standing.deferred]
    standing.solid.sort(key=lambda p: p.index)


# ---- scale-down ---------------------------------------------------------------


def _scale_down(run: _Run, standing: _Standing) -> None:
    """Fewer replicas wanted: replicas due to move go first (highest index first), then
    solid ones beyond ``replicas``. One due to move that serves, or that is recorded as
    displaced (its replacement counts instead), is left to :func:`_replace_moved`."""
    displaced = run.req.displaced
    soft = [(p, why) for p, why in standing.soft if p.index not in displaced]
    excess = len(standing.solid) + len(soft) - run.req.replicas
    for p, why in reversed(soft):
        if excess <= 0:
            break
        if p.index not in standing.serving:
            standing.soft.remove((p, why))
            run.drop(p, f"scaled down ({why})", True)
            excess -= 1
    excess = len(standing.solid) - run.req.replicas
    if excess > 0:
        standing.solid = _shed(run, standing, excess)
        kept = {p.index for p in standing.solid}
        standing.deferred = {i: why for i, why in standing.deferred.items() if i in kept}


def _shed(run: _Run, standing: _Standing, excess: int) -> list[Placed]:
    """``standing.solid`` without ``excess`` replicas: those not serving yet first, then
    those whose move is deferred, then on the most loaded clusters.

    The victim is a replica that does not serve before one that does (a replica whose
    cluster came back while its replacement was starting must not cost a serving
    replica elsewhere: the replacement goes), then one due to move whose move is
    deferred (:func:`_defer`; without a surge bound such a replica is dropped first too,
    by :func:`_replace_moved`), then the highest (load, count, tier, index). Removing one
    lowers only its own cluster's load and count, so keys only decrease: a heap of
    negated keys re-checked on pop finds each victim in O(log n).
    """
    solid, serving, deferred = standing.solid, standing.serving, standing.deferred
    per = counts(solid)

    def down_key(p: Placed) -> tuple[bool, bool, float, int, int, int]:
        return (
            p.index in serving,
            p.index not in deferred,
            -run.ledger.load(p.cluster),
            -per[p.cluster],
            -run.tier(p.cluster),
            -p.index,
        )

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
        per[victim.cluster] -= 1
        why = deferred.get(victim.index)
        run.drop(victim, f"scaled down ({why})" if why else "scaled down", True)
        excess -= 1
    return [p for p in solid if p.index not in gone]


# ---- scale-up: place new replicas ----------------------------------------------


class _Chooser:
    """New replicas: spread over clusters without one, then pack.

    ``checked`` records why each cluster looked at could not take one.
    """

    def __init__(self, run: _Run, standing: _Standing):
        self.run = run
        self.checked: dict[str, str] = {}
        self.new: list[Placed] = []
        self.counts = counts(standing.solid + [p for p, _ in standing.soft])
        self.indexes = _free_indexes({ex.index for ex in run.req.existing})

    def place(self, need: int) -> None:
        if need <= 0:
            return
        eligible = self._spread(need)
        if eligible is not None and len(self.new) < need:
            self._pack(eligible, need)

    def _spread(self, need: int) -> list[Cluster] | None:
        """Spread: the choice key puts every cluster without a replica of this deployment
        first, in (tier, name) order, and placing one there moves it behind them all. So
        walk the clusters in that order, one replica each, and stop when enough are
        placed: a cluster is read and checked only when reached (a first call on a fleet
        of thousands looks at about as many clusters as it places replicas).

        Returns the eligible clusters when every cluster was looked at, None when it
        stopped early.
        """
        run = self.run
        found: list[Cluster] = []
        for name in spread_order(run.clusters, run.req.footprint):
            if len(self.new) >= need:
                return None
            c = run.clusters[name]
            if not eligible(run.req, c, self.checked, run.fits.fit):
                continue
            found.append(c)
            if self.counts.get(name, 0):
                continue
            e = self._entry(c)
            if e is not None:
                self._put(c, e[1])
        return found

    def _pack(self, eligible: list[Cluster], need: int) -> None:
        """Pack onto the clusters that hold one, by their choice keys. Placing a replica
        changes only the chosen cluster's key, so a heap re-evaluates only that cluster."""
        heap: list[tuple[tuple[Any, ...], dict[MemberKey, str], Cluster]] = []
        for c in eligible:
            if self.counts.get(c.name, 0):
                e = self._entry(c)
                if e is not None:
                    heap.append((e[0], e[1], c))
        heapq.heapify(heap)
        while len(self.new) < need and heap:
            _, pools, c = heapq.heappop(heap)
            self._put(c, pools)
            e = self._entry(c)
            if e is not None:
                heapq.heappush(heap, (e[0], e[1], c))

    def _entry(self, c: Cluster) -> _Entry | None:
        """The choice key of ``c`` for the next replica, or None when it is full."""
        run = self.run
        free = {p.name: run.ledger.free(c.name, p.name) for p in c.pools}
        # The device-only fit is the capacity-aware one whenever its pools have room
        # (fit takes the first satisfying pool by name; room only skips pools).
        pools = run.fits.fit(c)[0]
        charged = run.fits.charges(c, pools) if pools is not None else None
        if pools is None or charged is None or any(free.get(k, 0) < n for k, n in charged.items()):
            pools, why = fit(c, run.req.engines, free)
            if pools is None:
                self.checked[c.name] = why
                return None
            charged = charges(run.req.engines, pools)
        n = self.counts.get(c.name, 0)
        left = sum(free.values()) - sum(charged.values())
        return (n > 0, run.tier(c.name), left if n > 0 else 0, c.name), pools

    def _put(self, c: Cluster, pools: dict[MemberKey, str]) -> None:
        self.checked.pop(c.name, None)
        self.run.ledger.charge(c.name, charges(self.run.req.engines, pools))
        self.new.append(Placed(next(self.indexes), c.name, pools, False, self.run.phase(c.name)))
        self.counts[c.name] = self.counts.get(c.name, 0) + 1


def _free_indexes(taken: set[int]) -> Iterator[int]:
    """The indexes not in ``taken``, lowest first (one pass: O(replicas) in all)."""
    i = 0
    while True:
        if i not in taken:
            yield i
        i += 1


# ---- replicas due to move, retiring replicas, the outcome -----------------------


def _replace_moved(
    run: _Run, standing: _Standing, new: list[Placed]
) -> tuple[list[tuple[Placed, str]], list[tuple[Placed, str]]]:
    """Replicas due to move stay while they are needed (make-before-break).

    Those that fill a shortfall (no replacement placed for them) stay as placed. Of the
    rest, a replica that serves stays until enough replicas serve elsewhere, as a
    retiring one does: its cluster not being Ready, or its hydration having Failed,
    says nothing of the pods already serving there. One that does not serve goes once
    its replacement is placed.

    Returns:
        The replicas kept as placed, no replacement fitting (with why they should
        move), and those kept only until replacements serve (with why they move).
    """
    fill = max(0, run.req.replicas - len(standing.solid) - len(new))
    soft = sorted(standing.soft, key=lambda s: s[0].index)
    serving = standing.serving
    short = run.req.replicas - sum(1 for p in standing.solid if p.index in serving)
    short -= sum(1 for p, _ in soft[:fill] if p.index in serving)
    ready = {e.index for e in run.req.existing if e.ready}
    moving: list[tuple[Placed, str]] = []
    # Serving ones first, and of those the ready before the mid-roll (pods answering,
    # not ready): the ones kept are the ones that leave the most serving.
    rest = sorted(soft[fill:], key=lambda s: (s[0].index not in serving, s[0].index not in ready))
    for p, why in rest:
        if p.index in serving and len(moving) < short:
            moving.append((p, why))
        elif p.index not in serving or p.index in run.req.displaced:
            run.drop(p, f"moved ({why})", False)
        else:  # serves, never displaced, enough serve elsewhere: one too many
            run.drop(p, f"scaled down ({why})", True)
    return soft[:fill], sorted(moving, key=lambda m: m[0].index)


def _retire(run: _Run, standing: _Standing) -> list[Placed]:
    """Retiring replicas are kept until enough replicas serve elsewhere."""
    req = run.req
    serving_elsewhere = sum(1 for p in standing.solid if p.index in standing.serving)
    keep = max(0, req.replicas - serving_elsewhere)
    for i, p in enumerate(standing.retiring[keep:], start=keep):
        if i >= req.replicas:
            run.drop(p, f"scaled down (on {p.cluster}, retained by ModelCache {req.cache})", True)
            continue
        run.drop(
            p,
            f"moved off {p.cluster}, retained by ModelCache {req.cache} after it left the "
            f"cache's clusterSelector ({serving_elsewhere} replicas serve in the footprint)",
            False,
        )
    return standing.retiring[:keep]


def _report(
    run: _Run,
    wanted: list[Placed],
    kept_retiring: list[Placed],
    moving: list[tuple[Placed, str]],
    checked: Mapping[str, str],
    *,
    stuck: list[tuple[Placed, str]],
) -> Placement:
    req = run.req
    kept = [p for p, _ in moving]
    replicas = sorted(wanted + kept_retiring + kept, key=lambda p: p.index)
    removed = sorted(run.removed, key=lambda r: r.index)
    indexes = {p.index for p in replicas}
    held = sorted(p.index for p in run.held if p.index in indexes)
    placed = len(wanted)
    note = ""
    if kept_retiring:
        note = (
            f"; {len(kept_retiring)} more kept on retained cluster(s) "
            f"{names(sorted({p.cluster for p in kept_retiring}))} until replacements "
            "serve (make-before-break)"
        )
    if kept:
        whys = sorted({why for _, why in moving})
        note += (
            f"; {len(kept)} more kept serving on {names(sorted({p.cluster for p in kept}))} "
            f"({'; '.join(whys)}) until replacements serve (make-before-break)"
        )
    if stuck:
        parts = [f"replica {p.index} on {p.cluster} ({why})" for p, why in stuck[:MAX_NAMED]]
        more = f" and {len(stuck) - MAX_NAMED} more" if len(stuck) > MAX_NAMED else ""
        note += f"; should move but no replacement fits: {', '.join(parts)}{more}"
    rows = [
        Moving(p.index, p.cluster, why, p.index not in req.displaced)
        for p, why in sorted(moving, key=lambda m: m[0].index)
    ]
    stays = [Moving(p.index, p.cluster, why, False) for p, why in stuck]
    if placed >= req.replicas:
        return Placement(
            replicas,
            removed,
            None,
            f"{placed} of {req.replicas} replicas placed{where(wanted)}{note}",
            held,
            rows,
            stays,
        )
    reason, detail = _shortfall(req, run.clusters, checked)
    msg = f"{placed} of {req.replicas} replicas placed: {detail}{note}"
    return Placement(replicas, removed, reason, msg, held, rows, stays)


def _shortfall(
    req: Request, clusters: Mapping[str, Cluster], checked: Mapping[str, str]
) -> tuple[str, str]:
    """The specific reason fewer replicas than wanted are placed, and what was checked.

    A selector that matches no InferenceCluster is ``NoMatchingClusters`` with or without
    a cache: clusters being re-created or relabelled come back, so it is a wait (review
    16a: with a cache it read ``NoClusterInCacheFootprint``, which a ModelExperiment
    takes as final). ``NoClusterInCacheFootprint`` only when the selector matches
    clusters and none of them is in the cache's footprint."""
    selected = sorted(n for n, c in clusters.items() if req.selector.matches(c.labels))
    fp = req.footprint
    if not selected:
        detail = "no InferenceCluster matches clusterSelector"
        if fp:
            live = sorted(n for n, ph in fp.items() if ph != FAILED and n not in req.retained)
            detail += f" (the footprint of ModelCache {req.cache} is {names(live) or 'empty'})"
        return NO_MATCHING_CLUSTERS, detail
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
            if failed and len(failed) == len([n for n in inside if n not in req.retained]):
                return HYDRATION_FAILED, _failed_everywhere(req, failed)
            detail = (
                f"clusterSelector matches {names(selected)}; the footprint of "
                f"ModelCache {req.cache} is {names(live) or 'empty'}"
            )
            if failed:
                detail += f"; hydration Failed on {names(failed)}"
            return NO_CLUSTER_IN_FOOTPRINT, detail
    if not checked:
        return INSUFFICIENT_CAPACITY, "every eligible cluster is full"
    by_why: dict[str, list[str]] = {}
    for name, why in sorted(checked.items()):
        by_why.setdefault(why, []).append(name)
    parts = [
        f"{names(members)}: {why}" for why, members in sorted(by_why.items(), key=lambda x: x[1][0])
    ]
    more = f"; and {len(parts) - MAX_NAMED} more" if len(parts) > MAX_NAMED else ""
    return INSUFFICIENT_CAPACITY, (
        f"checked {len(checked)} cluster(s): " + "; ".join(parts[:MAX_NAMED]) + more
    )


def _failed_everywhere(req: Request, failed: list[str]) -> str:
    """The shortfall when the hydration Failed on every selected footprint cluster:
    where, for which identity and why (the first message of each identity)."""
    by_identity: dict[str, list[str]] = {}
    why: dict[str, str] = {}
    for n in failed:
        ident, msg = req.identities.failure(n) if req.identities is not None else ("", "")
        by_identity.setdefault(ident, []).append(n)
        why.setdefault(ident, msg)
    parts = []
    for ident, where_ in sorted(by_identity.items()):
        of = f" for identity {ident}" if ident else ""
        msg = f" ({why[ident]})" if why[ident] else ""
        parts.append(f"on {names(where_)}{of}{msg}")
    return (
        f"the hydration of ModelCache {req.cache} Failed " + "; ".join(parts) + "; a new replica "
        "is placed only where the cache is Ready or hydrating (fix the cache's source, or "
        "select clusters where it hydrates)"
    )
