"""ModelExperiment's artifact gate: may the candidate claim a GPU yet?

Reads the gated ModelCache (``spec.artifactGate.modelCacheRef``): its
``status.source.identity``, its roll-up (``function.api.modelcache.read_rollup``: counts
per phase, failed clusters, evidence per distinct artifact) and the ``ArtifactReady``
condition (see :func:`evaluate_gate`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from function.api.modelcache import (
    ARTIFACT_READY,
    DEFAULT_REVISION,
    CacheRollup,
    read_rollup,
    spec_source_identity,
)
from function.api.modelexperiment import ArtifactGate, ExperimentSpec
from function.core import structs
from function.core.numbers import finite_int

COMMIT = re.compile(r"^[0-9a-f]{40}\Z")
# The ModelCache XRD accepts a digest with or without the ``sha256:`` prefix.
DIGEST = re.compile(r"^(sha256:)?[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Gate:
    """The artifact gate's decision: open (``reason`` None) or closed with a reason."""

    reason: str | None
    message: str
    record: dict[str, Any] = field(default_factory=dict)


def _count_of(v: Any) -> int:
    """``v`` as a whole number when it is a finite number (not a bool), else 0."""
    n = finite_int(v)
    return 0 if n is None else n


def _names(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _digest(value: str) -> str:
    """A digest in ``sha256:<hex>`` form (the prefix is optional in evidence)."""
    return value if not value or value.startswith("sha256:") else f"sha256:{value}"


def evaluate_gate(spec: ExperimentSpec, namespace: str, cache: Any) -> Gate:
    """Decide whether the artifact gate is open.

    Args:
        spec: The validated spec (``artifactGate`` set).
        namespace: The experiment's namespace (the cache's too).
        cache: The ModelCache (Struct) or None when it does not exist.

    Returns:
        An open gate with the record ``{cache, uid, generation, commit?, digest?}``,
        or a closed gate whose reason is one of ``ArtifactSourceMismatch``,
        ``ArtifactCacheNotFound``, ``ArtifactCacheFailed``, ``ArtifactCacheNotReady``,
        ``ArtifactValidationMissing``, ``ArtifactDigestMissing``.

    A status whose ``source.identity`` is not the identity of the cache's
    ``spec.huggingFace`` (repo and revision; ``naming.source_identity``), or that
    names no source, describes other bytes (or is not known to describe these) and
    keeps the gate closed (``ArtifactCacheNotReady``), so a revision edit never opens
    the gate on the old hydrations' Ready. So does a status whose ``ArtifactReady``
    condition reports an ``observedGeneration`` older than the cache's
    ``metadata.generation``. The footprint and its evidence are the cache's roll-up
    (``function.api.modelcache.read_rollup``: ``summary.total``, ``summary.phases``,
    ``failed[]``, ``evidence[] {commit, digest, clusters, validated}``): ``commit`` 40
    lowercase hex, ``digest`` ``sha256:<64 hex>``, ``validated`` the clusters that
    recorded a checksum validation time.
    """
    gate = spec.artifactGate
    assert gate is not None
    ref = f"{namespace}/{gate.modelCacheRef.name}"
    closed = _source_mismatch(spec, namespace, ref)
    if closed is not None:
        return closed
    if cache is None:
        return Gate("ArtifactCacheNotFound", f"ModelCache {ref} (spec.artifactGate) not found")
    footprint = _Footprint.read(cache)
    closed = (
        _stale_source(cache, ref)
        or _not_ready(cache, ref, footprint)
        or _missing_evidence(gate, ref, footprint)
    )
    return closed or _opened(gate, cache, ref, footprint)


@dataclass(frozen=True)
class _Footprint:
    """The cache's footprint as its roll-up reports it, and the evidence groups
    ``(commit, digest, clusters, validated)`` with digests normalized."""

    roll: CacheRollup

    @classmethod
    def read(cls, cache: Any) -> _Footprint:
        return cls(read_rollup(cache))

    @property
    def progress(self) -> str:
        return f"{self.roll.ready}/{self.roll.total} clusters ready"

    @property
    def groups(self) -> list[tuple[str, str, int, int]]:
        return [(c, _digest(d), n, v) for c, d, n, v in self.roll.evidence]


def _source_mismatch(spec: ExperimentSpec, namespace: str, ref: str) -> Gate | None:
    """``requireSourceMatch``: the candidate must load from the gated cache."""
    gate = spec.artifactGate
    assert gate is not None
    if not gate.requireSourceMatch:
        return None
    cand = spec.candidate.modelCacheRef
    if cand is not None and cand.name == gate.modelCacheRef.name:
        return None
    got = f"{namespace}/{cand.name}" if cand is not None else "no cache"
    return Gate(
        "ArtifactSourceMismatch",
        f"requireSourceMatch: the candidate loads from {got}, not the gated "
        f"ModelCache {ref} (spec.candidate.modelCacheRef)",
    )


def _stale_source(cache: Any, ref: str) -> Gate | None:
    """Closed while the status does not describe the source the cache's spec names."""
    repo = structs.get_str(cache, "spec", "huggingFace", "repo")
    revision = structs.get_str(cache, "spec", "huggingFace", "revision") or DEFAULT_REVISION
    reported = structs.get_str(cache, "status", "source", "identity")
    if repo and reported == spec_source_identity(cache):
        return None
    wants = f"{repo}@{revision}" if repo else "a source its spec does not name"
    says = f"source identity {reported}" if reported else "no source"
    return Gate(
        "ArtifactCacheNotReady",
        f"ModelCache {ref} status describes {says}, not {wants}; waiting for it "
        "to report the current source",
    )


def _not_ready(cache: Any, ref: str, footprint: _Footprint) -> Gate | None:
    """Closed while a cluster failed, the status is for an older generation, or not every
    cluster of the footprint is Ready."""
    roll, progress = footprint.roll, footprint.progress
    if roll.failed_count:
        detail = [f"{n} ({m or 'Failed'})" for n, m in roll.failed]
        return Gate(
            "ArtifactCacheFailed",
            f"ModelCache {ref} failed on {roll.failed_count} cluster(s): {_names(detail)}; "
            f"{progress}",
        )
    generation = structs.get(cache, "metadata", "generation")
    artifact_ready = structs.conditions(cache).get(ARTIFACT_READY)
    seen = finite_int(structs.get(artifact_ready, "observedGeneration"))
    generation = finite_int(generation)
    if seen is not None and generation is not None and seen < generation:
        # The status describes an older spec (a new revision, a wider footprint).
        return Gate(
            "ArtifactCacheNotReady",
            f"ModelCache {ref} status is for generation {seen}, the cache is at "
            f"generation {generation}; waiting for it to catch up",
        )
    cond_false = artifact_ready is not None and structs.get(artifact_ready, "status") != "True"
    if roll.total and roll.ready >= roll.total and not cond_false:
        return None
    msg = f"ModelCache {ref} is not ready: {progress}"
    if roll.waiting:
        msg += f"; waiting for {_names(roll.waiting)}"
    elif roll.total == 0:
        msg += "; it has no cluster in its footprint yet"
    elif cond_false:
        msg += "; ArtifactReady is " + (structs.get_str(artifact_ready, "message") or "not True")
    return Gate("ArtifactCacheNotReady", msg)


def _missing_evidence(gate: ArtifactGate, ref: str, footprint: _Footprint) -> Gate | None:
    """``requireValidation`` and ``requirePublishedDigest`` over the evidence groups: every
    cluster of the footprint must be counted in a group (the roll-up lists at most a few
    artifacts; a reader fails closed when it lists fewer than it counts)."""
    roll, groups = footprint.roll, footprint.groups
    total = roll.total
    if gate.requireValidation:
        validated = sum(v for *_, v in groups)
        if not roll.evidence_complete or validated < total:
            return Gate(
                "ArtifactValidationMissing",
                f"requireValidation: no recorded checksum validation (evidence.validatedAt) "
                f"on {total - validated} of {total} clusters of ModelCache {ref}",
            )
    if not gate.requirePublishedDigest:
        return None
    missing = sum(n for c, d, n, _ in groups if not COMMIT.match(c) or not DIGEST.match(d))
    if missing or not roll.evidence_complete or sum(n for _, _, n, _ in groups) < total:
        return Gate(
            "ArtifactDigestMissing",
            f"requirePublishedDigest: no commit (40 hex) and sha256 digest recorded on "
            f"{missing or total} of {total} clusters of ModelCache {ref}",
        )
    if len(groups) > 1:
        pairs = [f"{n} cluster(s) {c[:12]}/{d[7:19]}" for c, d, n, _ in groups]
        return Gate(
            "ArtifactDigestMissing",
            f"requirePublishedDigest: clusters of ModelCache {ref} recorded different "
            f"artifacts ({_names(pairs)}); no single digest to certify",
        )
    return None


def _opened(gate: ArtifactGate, cache: Any, ref: str, footprint: _Footprint) -> Gate:
    """The open gate: its record (the evidence every cluster agrees on) and message."""
    groups = footprint.groups
    record: dict[str, Any] = {
        "cache": gate.modelCacheRef.name,
        "uid": structs.get_str(cache, "metadata", "uid"),
        "generation": _count_of(structs.get(cache, "metadata", "generation")),
    }
    if len(groups) == 1 and COMMIT.match(groups[0][0]):
        record["commit"] = groups[0][0]
    if len(groups) == 1 and DIGEST.match(groups[0][1]):
        record["digest"] = groups[0][1]
    checks = [
        n
        for n, on in (
            ("validation", gate.requireValidation),
            ("published digest", gate.requirePublishedDigest),
            ("source match", gate.requireSourceMatch),
        )
        if on
    ]
    msg = f"ModelCache {ref} is ready ({footprint.progress})"
    if checks:
        msg += "; verified " + ", ".join(checks)
    return Gate(None, msg, record)
