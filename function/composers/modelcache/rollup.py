"""ModelCache roll-up: the shards' summaries merged into the cache's status (counts,
evidence per artifact, bounded lists), never copied per cluster (issue 17)."""

from __future__ import annotations

from dataclasses import dataclass, field

from function.api.modelcache import MAX_EVIDENCE
from function.api.modelcachehydration import FAILED, PENDING
from function.api.modelcacheshard import (
    MAX_LISTED,
    MAX_RETAINED,
    MAX_WAITING,
    PHASES,
    UNAVAILABLE,
    ShardReport,
    names_hash,
    spec_hash,
)

Entries = tuple[tuple[str, str], ...]


@dataclass
class Rollup:
    """The footprint as the cache's status reports it."""

    phases: dict[str, int] = field(default_factory=lambda: dict.fromkeys((*PHASES, UNAVAILABLE), 0))
    evidence: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    failed: list[tuple[str, str]] = field(default_factory=list)
    unavailable: list[tuple[str, str]] = field(default_factory=list)
    retained: list[tuple[str, str]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    stale: list[int] = field(default_factory=list)
    unreported: list[int] = field(default_factory=list)
    """Stale shards with no status at all (composed, not reconciled yet: no hydration)."""

    @property
    def total(self) -> int:
        """Footprint clusters (every phase but Unavailable)."""
        return sum(self.phases[p] for p in PHASES)

    def add(self, shard: int, entries: Entries, identity: str, report: ShardReport | None) -> bool:
        """Count shard ``shard``; True when its status describes ``entries`` and ``identity``.

        A shard whose status is for another spec (or absent) counts each of its
        clusters as Pending (or Unavailable, as the cache sees it): not known to be
        Ready, so the cache is not Ready either; a cluster the status reports Failed
        for the current source identity stays Failed (a verdict of this source, and
        never Ready on that account: the cache keeps saying HydrationFailed while a
        cluster joins or leaves the shard, instead of Hydrating and then announcing
        the same failure again). Except when only clusters' availability changed
        (:func:`_same_but_availability`): the status still holds.
        """
        if report is not None:
            self.retained += report.retained
        if report is None or (
            report.spec_hash != spec_hash(identity, shard, entries)
            and not _same_but_availability(shard, entries, identity, report)
        ):
            self.stale.append(shard)
            if report is None or not report.spec_hash:
                self.unreported.append(shard)
            failed = (
                dict(report.failed) if report is not None and report.identity == identity else {}
            )
            for name, why in entries:
                if name in failed:
                    self.phases[FAILED] += 1
                    self.failed.append((name, failed[name]))
                elif why:
                    self.phases[UNAVAILABLE] += 1
                    self.unavailable.append((name, f"cannot host a cache: {why}"))
                else:
                    self.phases[PENDING] += 1
                    self.waiting.append(name)
            return False
        for p in self.phases:
            self.phases[p] += report.phases.get(p, 0)
        for commit, digest, n, validated in report.evidence:
            g = self.evidence.setdefault((commit, digest), [0, 0])
            g[0] += n
            g[1] += validated
        self.failed += report.failed
        self.unavailable += report.unavailable
        self.waiting += report.waiting
        return True

    def ready(self, shard: int) -> bool:
        """Whether ``shard`` counted as current (its readiness as a composed resource)."""
        return shard not in self.stale

    def evidence_groups(self) -> list[tuple[str, str, int, int]]:
        """At most MAX_EVIDENCE ``(commit, digest, clusters, validated)``, most clusters first."""
        groups = sorted(
            ((c, d, n, v) for (c, d), (n, v) in self.evidence.items()),
            key=lambda g: (-g[2], g[0], g[1]),
        )
        return groups[:MAX_EVIDENCE]

    def lists(
        self,
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]], list[str]]:
        """failed, unavailable, retained and waiting as written (sorted, bounded)."""
        return (
            sorted(self.failed)[:MAX_LISTED],
            sorted(self.unavailable)[:MAX_LISTED],
            sorted(self.retained)[:MAX_RETAINED],
            sorted(self.waiting)[:MAX_WAITING],
        )


def _same_but_availability(
    shard: int, entries: Entries, identity: str, report: ShardReport
) -> bool:
    """Whether a shard's status for an older spec still describes the current one: the
    same source and cluster names (``namesHash``), and every cluster it counted
    Unavailable (no hydration, so it got none) still unavailable, its list complete.

    A shard's availability reasons change only which clusters *without* a hydration get
    one (an existing hydration is kept and counted by its phase either way). A cluster
    that became unavailable is counted as the status says (Pending, or its hydration's
    phase): never Ready on that account. One that became available while counted
    Unavailable would be missing from the total, so the status is not used then. Without
    this, one cluster's availability flipping read every cluster of its shard Pending
    until the shard caught up, and the cache went not Ready and announced its unchanged
    roll-up again (found by a trial).
    """
    if not report.names_hash or report.names_hash != names_hash(
        identity, shard, tuple(name for name, _ in entries)
    ):
        return False
    if len(report.unavailable) != report.phases.get(UNAVAILABLE, 0):
        return False  # the list was cut: who was counted Unavailable is not known
    still = {name for name, why in entries if why}
    return all(name in still for name, _ in report.unavailable)
