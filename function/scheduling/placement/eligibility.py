"""Which clusters may take a new replica, and in which order they are tried.

:func:`spread_order` is the order :func:`~function.scheduling.placement.place` walks
clusters in for new replicas (hydration tier, then name); :func:`eligible` applies every
rule but free nodes; :func:`next_clusters` answers "where would the next replicas go"
for a caller that reads capacity ahead of a scale-up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from function.api.modelcachehydration import FAILED, READY
from function.scheduling.placement.fit import StaticFits
from function.scheduling.placement.model import Cluster, MemberKey, Placement, Request
from function.scheduling.tolerations import SCHEDULE_EFFECTS, untolerated

StaticFit = Callable[[Cluster], tuple[dict[MemberKey, str] | None, str]]
"""Device fit of a cluster, capacity aside (memoized per distinct pool set)."""


def spread_order(clusters: Mapping[str, Cluster], fp: Mapping[str, str] | None) -> Iterator[str]:
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


def eligible(
    req: Request,
    c: Cluster,
    checked: dict[str, str],
    static_fit: StaticFit,
) -> bool:
    """Whether a new replica may go to ``c`` (capacity is checked later); records why not
    in ``checked`` (a cluster outside the selector or the footprint is not recorded)."""
    why = _barred(req, c, static_fit)
    if why:
        checked[c.name] = why
    return why == ""


def _barred(req: Request, c: Cluster, static_fit: StaticFit) -> str | None:
    """Why ``c`` takes no new replica: '' when it may, None when it is outside the
    selector or the footprint (not "checked": the shortfall message reports those)."""
    if not req.selector.matches(c.labels):
        return None
    why = _footprint_bar(req, c.name)
    if why != "":
        return why
    if not c.ready:
        return "not Ready"
    bad = untolerated(c.taints, req.tolerations, SCHEDULE_EFFECTS) if c.taints else None
    if bad:
        return f"taint {bad[0]} not tolerated"
    pools, why = static_fit(c)
    return why if pools is None else ""


def _footprint_bar(req: Request, name: str) -> str | None:
    """:func:`_barred` for the cache footprint alone."""
    fp = req.footprint
    if fp is None:
        return ""
    ph = fp.get(name)
    if ph is None:
        return None
    if ph == FAILED:
        return f"hydration of ModelCache {req.cache} Failed"
    if name in req.retained:
        return (
            f"retained by ModelCache {req.cache} only while its replicas move "
            "(it left the cache's clusterSelector)"
        )
    return ""


def next_clusters(req: Request, placement: Placement, k: int) -> list[str]:
    """The first ``k`` clusters a further new replica would be tried on, capacity aside.

    In the order :func:`~function.scheduling.placement.place` tries clusters for a new
    replica (spread order: hydration tier, then name), those eligible for it by every
    rule but free nodes (selector, footprint, not retained, Ready, taints, device fit)
    that hold no replica of this deployment after ``placement``; then, when fewer than
    ``k``, eligible clusters that hold one (where packing would go). Reads no usage
    (``Request.used``): a caller uses it to ask for these clusters' capacity before a
    scale-up needs it.

    Raises:
        SelectorEvaluationError: as :func:`~function.scheduling.placement.place` does,
            for a CEL selector that fails.
    """
    clusters: Mapping[str, Cluster] = (
        req.fleet if req.fleet is not None else {c.name: c for c in req.clusters}
    )
    held = {p.cluster for p in placement.replicas}
    static_fit = StaticFits(req.engines).fit

    spread: list[str] = []
    packed: list[str] = []
    for name in spread_order(clusters, req.footprint):
        if len(spread) >= k:
            break
        if name in held:
            # Needed only while fewer than k: past that, a held cluster is not checked.
            if len(packed) < k and eligible(req, clusters[name], {}, static_fit):
                packed.append(name)
        elif eligible(req, clusters[name], {}, static_fit):
            spread.append(name)
    return (spread + packed)[:k]
