"""Fit of engines on a cluster's GPU pools, and the free-node ledger.

A member's cost is its pods times its engine's ``copies``. An engine goes whole on the
first pool by name that satisfies every member and has room; else on the pools it kept
(an existing replica); else its members are split, each on the first pool by name that
satisfies it and has room, requestless members riding on the first claimer's pool. Some
request of the engine must be met by a claimable (``claim: DRA``) device. Rules in full:
:mod:`function.scheduling.placement`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from function.scheduling.devices import claims_dra, pool_satisfies
from function.scheduling.placement.model import Cluster, Engine, MemberKey, Pool

Fit = tuple[dict[MemberKey, str] | None, str]
"""``(pools per member, "")`` or ``(None, why)``."""
_Chosen = dict[int, Pool]
"""Pool per member index of one engine."""


class Ledger:
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


def charges(engines: Sequence[Engine], pools: Mapping[MemberKey, str]) -> dict[str, int]:
    """Nodes per pool that ``engines`` take when their members sit on ``pools``."""
    out: dict[str, int] = {}
    for e in engines:
        for i in range(len(e.members)):
            p = pools.get((e.name, i))
            if p is not None:
                out[p] = out.get(p, 0) + e.cost(i)
    return out


class StaticFits:
    """Device fit (capacity aside) per distinct pool set, and its charges.

    Device fit ignores capacity and the cluster's name, so clusters reporting the same
    pools (the same status subtree, shared by the caller) share one computation: one
    evaluation per distinct (pools, engines) pair, not one per cluster. Lives for one
    placement call.
    """

    def __init__(self, engines: Sequence[Engine]):
        self.engines = engines
        self._fits: dict[tuple[int, tuple[tuple[MemberKey, str], ...]], Fit] = {}
        self._charges: dict[int, dict[str, int]] = {}

    def fit(self, c: Cluster, prefer: Mapping[MemberKey, str] | None = None) -> Fit:
        """:func:`fit` of ``c`` without capacity, keeping ``prefer`` where it still fits."""
        key = (id(c.pools), tuple(sorted(prefer.items())) if prefer else ())
        hit = self._fits.get(key)
        if hit is None:
            hit = self._fits[key] = fit(c, self.engines, None, prefer)
        return hit

    def charges(self, c: Cluster, pools: Mapping[MemberKey, str]) -> dict[str, int]:
        """Nodes per pool of the device-only fit of ``c`` (``pools``), memoized like it."""
        hit = self._charges.get(id(c.pools))
        if hit is None:
            hit = self._charges[id(c.pools)] = charges(self.engines, pools)
        return hit


def fit(
    cluster: Cluster,
    engines: Sequence[Engine],
    free: Mapping[str, int] | None,
    prefer: Mapping[MemberKey, str] | None = None,
) -> Fit:
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
    for e in engines:
        chosen, why = _fit_engine(cluster, pools, e, left, prefer)
        if chosen is None:
            return None, why
        for i, p in chosen.items():
            out[(e.name, i)] = p.name
            if left is not None:
                left[p.name] = left.get(p.name, 0) - e.cost(i)
    return out, ""


def _fit_engine(
    cluster: Cluster,
    pools: Sequence[Pool],
    e: Engine,
    left: Mapping[str, int] | None,
    prefer: Mapping[MemberKey, str] | None,
) -> tuple[_Chosen | None, str]:
    """The pools of ``e``'s members: kept, whole on one pool, or split; or why none."""
    claimers = [i for i, m in enumerate(e.members) if m.requests]
    chosen = _kept(cluster, e, claimers, left, prefer) if prefer else None
    if not chosen:
        chosen = _whole(pools, e, claimers, left)
    if not chosen:
        return _split(cluster, pools, e, claimers, left)
    return chosen, ""


def _kept(
    cluster: Cluster,
    e: Engine,
    claimers: Sequence[int],
    left: Mapping[str, int] | None,
    prefer: Mapping[MemberKey, str],
) -> _Chosen | None:
    """The existing pools, when every member still fits where it is."""
    kept: _Chosen = {}
    for i in range(len(e.members)):
        p = cluster.pool(prefer.get((e.name, i), ""))
        if p is None:
            return None
        kept[i] = p
    need: dict[str, int] = {}
    for i, p in kept.items():
        need[p.name] = need.get(p.name, 0) + e.cost(i)
    ok = all(pool_satisfies(e.members[i].requests, p.devices) for i, p in kept.items()) and all(
        left is None or left.get(n, 0) >= c for n, c in need.items()
    )
    return kept if ok and _claims(e, claimers, kept) else None


def _whole(
    pools: Sequence[Pool], e: Engine, claimers: Sequence[int], left: Mapping[str, int] | None
) -> _Chosen | None:
    """The whole engine on the first pool by name that satisfies it and has room."""
    total = sum(e.cost(i) for i in range(len(e.members)))
    for p in pools:
        if (
            all(pool_satisfies(e.members[i].requests, p.devices) for i in claimers)
            and (
                not claimers or any(claims_dra(e.members[i].requests, p.devices) for i in claimers)
            )
            and (left is None or left.get(p.name, 0) >= total)
        ):
            return dict.fromkeys(range(len(e.members)), p)
    return None


def _split(
    cluster: Cluster,
    pools: Sequence[Pool],
    e: Engine,
    claimers: Sequence[int],
    left: Mapping[str, int] | None,
) -> tuple[_Chosen | None, str]:
    """Members across pools; requestless members ride on the first claimer's pool."""
    if not claimers:
        if not pools:
            return None, "has no GPU pools"
        return dict.fromkeys(range(len(e.members)), pools[0]), ""
    trial = dict(left) if left is not None else None
    split, why = _split_claimers(cluster, pools, e, claimers, left, trial=trial)
    if split is None:
        return None, why
    anchor = split[claimers[0]]
    for i in range(len(e.members)):
        if i not in split:
            if trial is not None and trial.get(anchor.name, 0) < e.cost(i):
                return None, _no_room(cluster, e, i, left)
            split[i] = anchor
            if trial is not None:
                trial[anchor.name] = trial.get(anchor.name, 0) - e.cost(i)
    if not _claims(e, claimers, split):
        return None, f"engine {e.name}: no pool offers a claimable (claim: DRA) device"
    return split, ""


def _split_claimers(
    cluster: Cluster,
    pools: Sequence[Pool],
    e: Engine,
    claimers: Sequence[int],
    left: Mapping[str, int] | None,
    *,
    trial: dict[str, int] | None,
) -> tuple[_Chosen | None, str]:
    """Each member with device requests on the first pool by name that satisfies it and
    has room (charging ``trial``), or why one cannot go anywhere."""
    split: _Chosen = {}
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
    return split, ""


def _claims(e: Engine, claimers: Sequence[int], chosen: Mapping[int, Pool]) -> bool:
    """Some request of ``e`` is met by a claimable device where its member sits."""
    return not claimers or any(
        claims_dra(e.members[i].requests, chosen[i].devices) for i in claimers
    )


def _no_devices(e: Engine, i: int) -> str:
    names = ",".join(r.name for r in e.members[i].requests)
    role = e.members[i].role
    return f"no pool's devices satisfy engine {e.name} member {i} ({role}) request {names}"


def _no_room(cluster: Cluster, e: Engine, i: int, free: Mapping[str, int] | None) -> str:
    pools = ", ".join(
        f"{p.name} {max(0, (free or {}).get(p.name, 0))}/{p.nodes} free" for p in cluster.pools
    )
    return f"engine {e.name} member {i} needs {e.cost(i)} node(s): {pools or 'no pools'}"
