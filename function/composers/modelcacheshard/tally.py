"""ModelCacheShard: the tally of one call, cluster by cluster (counts per phase, the
bounded lists' contents, evidence, and the transitions that get an event; no wire
bytes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.struct_pb2 import Struct

from function.api.modelcachehydration import FAILED, READY
from function.api.modelcacheshard import DELETING, PHASES, UNAVAILABLE
from function.composers.modelcacheshard.wire import Row


@dataclass
class Tally:
    """What the shard's clusters add up to in one call.

    Attributes:
        rows: ``status.clusters[]`` rows (:data:`Row`), in the order added.
        counts: Clusters per phase (every phase, and Unavailable).
        failed: ``(cluster, message)`` of the Failed clusters.
        unavailable: ``(cluster, message)`` of the clusters that cannot host a cache.
        waiting: Clusters neither Ready nor Failed.
        ready_evidence: The evidence of each Ready cluster.
        started: Clusters whose hydration is desired for the first time.
        newly_ready: Clusters that turned Ready since the previous status.
        newly_failed: ``"cluster: message"`` of the clusters that turned Failed.
        kept: ``(cluster, message)`` of the retained clusters, in the order added.
        deleting: Hydrations no longer desired that are still there (being deleted).
    """

    rows: list[Row] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys((*PHASES, UNAVAILABLE), 0))
    failed: list[tuple[str, str]] = field(default_factory=list)
    unavailable: list[tuple[str, str]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    ready_evidence: list[Struct | None] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    newly_ready: list[str] = field(default_factory=list)
    newly_failed: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    deleting: int = 0

    @property
    def total(self) -> int:
        """Footprint clusters (every phase but Unavailable)."""
        return sum(self.counts[p] for p in PHASES)

    @property
    def ready(self) -> int:
        """Ready clusters."""
        return self.counts[READY]

    def add_unavailable(self, name: str, why: str) -> None:
        """Count ``name``, which cannot host a cache and has no hydration."""
        msg = f"cannot host a cache: {why}"
        self.counts[UNAVAILABLE] += 1
        self.unavailable.append((name, msg))
        self.rows.append((name, UNAVAILABLE, msg, None, False))

    def add(self, name: str, phase: str, msg: str, evidence: Struct | None) -> None:
        """Count ``name``'s hydration in ``phase``."""
        self.counts[phase] += 1
        self.rows.append((name, phase, msg, evidence, False))
        if phase == FAILED:
            self.failed.append((name, msg))
        elif phase == READY:
            self.ready_evidence.append(evidence)
        else:
            self.waiting.append(name)

    def transition(self, name: str, phase: str, msg: str, before: str) -> None:
        """Note ``name``'s change from ``before`` (its phase in the previous status)."""
        if before == phase:
            return
        if phase == FAILED:
            self.newly_failed.append(f"{name}: {msg}")
        elif phase == READY:
            self.newly_ready.append(name)

    def add_retained(self, name: str, phase: str, msg: str) -> None:
        """Add the row of ``name``, kept while replicas use it."""
        self.rows.append((name, phase, msg, None, True))
        self.kept.append((name, msg))

    def add_deleting(self, name: str, msg: str) -> None:
        """Add the row of ``name``, whose hydration is no longer desired and still there
        (not counted among the footprint's phases)."""
        self.rows.append((name, DELETING, msg, None, False))
        self.deleting += 1
