"""The sentences placement reports: where replicas run and why fewer than wanted do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from function.api.modelcachehydration import FAILED
from function.api.modeldeployment import (
    INSUFFICIENT_CAPACITY,
    NO_CLUSTER_IN_FOOTPRINT,
    NO_MATCHING_CLUSTERS,
    WAITING_FOR_CACHE,
)
from function.scheduling.placement.model import Cluster, Placed, Request

_MAX_NAMED = 5  # clusters named per reason in a message (fleets have thousands)


def counts(placed: Sequence[Placed]) -> dict[str, int]:
    """Replicas per cluster."""
    out: dict[str, int] = {}
    for p in placed:
        out[p.cluster] = out.get(p.cluster, 0) + 1
    return out


def where(replicas: Sequence[Placed]) -> str:
    """' on a, b x2, ...' naming where ``replicas`` run ('' for none)."""
    per = counts(replicas)
    if not per:
        return ""
    parts = [f"{k}" if v == 1 else f"{k} x{v}" for k, v in sorted(per.items())]
    more = f" and {len(parts) - _MAX_NAMED} more" if len(parts) > _MAX_NAMED else ""
    return " on " + ", ".join(parts[:_MAX_NAMED]) + more


def shortfall(
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
                f"clusterSelector matches {names(selected) or 'no cluster'}; the footprint of "
                f"ModelCache {req.cache} is {names(live) or 'empty'}"
            )
            if failed:
                detail += f"; hydration Failed on {names(failed)}"
            return NO_CLUSTER_IN_FOOTPRINT, detail
    elif not selected:
        return NO_MATCHING_CLUSTERS, "no InferenceCluster matches clusterSelector"
    if not checked:
        return INSUFFICIENT_CAPACITY, "every eligible cluster is full"
    by_why: dict[str, list[str]] = {}
    for name, why in sorted(checked.items()):
        by_why.setdefault(why, []).append(name)
    parts = [
        f"{names(members)}: {why}" for why, members in sorted(by_why.items(), key=lambda x: x[1][0])
    ]
    more = f"; and {len(parts) - _MAX_NAMED} more" if len(parts) > _MAX_NAMED else ""
    return INSUFFICIENT_CAPACITY, (
        f"checked {len(checked)} cluster(s): " + "; ".join(parts[:_MAX_NAMED]) + more
    )


def names(names: Sequence[str]) -> str:
    """``names`` joined, at most five then how many more (fleets have thousands)."""
    if len(names) <= _MAX_NAMED:
        return ", ".join(names)
    return ", ".join(names[:_MAX_NAMED]) + f" and {len(names) - _MAX_NAMED} more"
