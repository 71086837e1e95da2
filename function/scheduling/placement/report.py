"""The sentences placement reports: where replicas run, clusters named (at most five)."""

from __future__ import annotations

from collections.abc import Sequence

from function.scheduling.placement.model import Placed

MAX_NAMED = 5  # clusters named per reason in a message (fleets have thousands)


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
    more = f" and {len(parts) - MAX_NAMED} more" if len(parts) > MAX_NAMED else ""
    return " on " + ", ".join(parts[:MAX_NAMED]) + more


def names(names: Sequence[str]) -> str:
    """``names`` joined, at most five then how many more (fleets have thousands)."""
    if len(names) <= MAX_NAMED:
        return ", ".join(names)
    return ", ".join(names[:MAX_NAMED]) + f" and {len(names) - MAX_NAMED} more"
