"""ModelExperiment's artifact gate: may the candidate claim a GPU yet?

Reads the gated ModelCache (``spec.artifactGate.modelCacheRef``): its
``status.source.identity``, ``status.clusters[]`` (phase and ``evidence``) and the
``ArtifactReady`` condition (see :func:`evaluate_gate`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.struct_pb2 import ListValue

from function.api.modelcache import ARTIFACT_READY
from function.api.modelcachehydration import FAILED, PHASES, READY
from function.api.modelexperiment import ArtifactGate, ExperimentSpec
from function.core import structs
from function.core.timeutil import parse_time
from function.naming import source_identity

COMMIT = re.compile(r"^[0-9a-f]{40}$")
# The ModelCache XRD accepts a digest with or without the ``sha256:`` prefix.
DIGEST = re.compile(r"^(sha256:)?[0-9a-f]{64}$")
# Cache clusters that belong to the footprint (modelcache: Unavailable clusters cannot
# host a cache; retained entries are outside the selector).
FOOTPRINT_PHASES = frozenset(PHASES)


@dataclass(frozen=True)
class Gate:
    """The artifact gate's decision: open (``reason`` None) or closed with a reason."""

    reason: str | None
    message: str
    record: dict[str, Any] = field(default_factory=dict)


def _count_of(v: Any) -> int:
    """``v`` as a whole number when it is a finite number (not a bool), else 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or abs(v) == float("inf"):
        return 0
    return int(v)


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
    ``metadata.generation``. The footprint is every ``status.clusters[]`` entry of
    the cache that is not ``retained`` and whose phase is Pending, Hydrating, Ready
    or Failed. Evidence
    is each entry's ``evidence {commit, digest, validatedAt}``: ``commit`` 40
    lowercase hex, ``digest`` ``sha256:<64 hex>``, ``validatedAt`` RFC 3339.
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
    """The cache's footprint: every ``status.clusters[]`` entry that is not ``retained``
    and whose phase is Pending, Hydrating, Ready or Failed; and their evidence."""

    entries: list[Any]

    @classmethod
    def read(cls, cache: Any) -> _Footprint:
        entries = structs.get(cache, "status", "clusters")
        if not isinstance(entries, ListValue):  # absent, or another type: no clusters reported
            entries = ()
        return cls(
            [
                e
                for e in entries
                if structs.get(e, "retained") is not True
                and structs.get_str(e, "phase") in FOOTPRINT_PHASES
                and structs.get_str(e, "name")
            ]
        )

    def phase(self, phase: str) -> list[Any]:
        return [e for e in self.entries if structs.get_str(e, "phase") == phase]

    @property
    def progress(self) -> str:
        return f"{len(self.phase('Ready'))}/{len(self.entries)} clusters ready"

    @property
    def names(self) -> list[str]:
        return [structs.get_str(e, "name") for e in self.entries]

    def evidence(self, key: str) -> dict[str, Any]:
        """``{cluster: evidence.<key>}`` over the footprint."""
        return {
            structs.get_str(e, "name"): structs.get(structs.get(e, "evidence"), key)
            for e in self.entries
        }

    def commits(self) -> dict[str, str]:
        return {n: structs.get_str(e, "evidence", "commit") for n, e in self._named()}

    def digests(self) -> dict[str, str]:
        return {n: _digest(structs.get_str(e, "evidence", "digest")) for n, e in self._named()}

    def _named(self) -> list[tuple[str, Any]]:
        return [(structs.get_str(e, "name"), e) for e in self.entries]


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
    revision = structs.get_str(cache, "spec", "huggingFace", "revision") or "main"
    reported = structs.get_str(cache, "status", "source", "identity")
    if repo and reported == source_identity(repo, revision):
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
    progress = footprint.progress
    failed = footprint.phase(FAILED)
    if failed:
        detail = [
            f"{structs.get_str(e, 'name')} ({structs.get_str(e, 'message') or 'Failed'})"
            for e in failed
        ]
        return Gate(
            "ArtifactCacheFailed", f"ModelCache {ref} failed on {_names(detail)}; {progress}"
        )
    generation = structs.get(cache, "metadata", "generation")
    artifact_ready = structs.conditions(cache).get(ARTIFACT_READY)
    seen = structs.get(artifact_ready, "observedGeneration")
    if (
        isinstance(seen, (int, float))
        and isinstance(generation, (int, float))
        and not isinstance(seen, bool)
        and seen < generation
    ):
        # The status describes an older spec (a new revision, a wider footprint).
        return Gate(
            "ArtifactCacheNotReady",
            f"ModelCache {ref} status is for generation {int(seen)}, the cache is at "
            f"generation {int(generation)}; waiting for it to catch up",
        )
    ready = footprint.phase(READY)
    total = len(footprint.entries)
    cond_false = artifact_ready is not None and structs.get(artifact_ready, "status") != "True"
    if total and len(ready) == total and not cond_false:
        return None
    waiting = [structs.get_str(e, "name") for e in footprint.entries if e not in ready]
    msg = f"ModelCache {ref} is not ready: {progress}"
    if waiting:
        msg += f"; waiting for {_names(waiting)}"
    elif total == 0:
        msg += "; it has no cluster in its footprint yet"
    elif cond_false:
        msg += "; ArtifactReady is " + (structs.get_str(artifact_ready, "message") or "not True")
    return Gate("ArtifactCacheNotReady", msg)


def _missing_evidence(gate: ArtifactGate, ref: str, footprint: _Footprint) -> Gate | None:
    """``requireValidation`` and ``requirePublishedDigest`` on every cluster's evidence."""
    names = footprint.names
    if gate.requireValidation:
        validated = footprint.evidence("validatedAt")
        missing = [n for n in names if parse_time(validated[n]) is None]
        if missing:
            return Gate(
                "ArtifactValidationMissing",
                f"requireValidation: no recorded checksum validation (evidence.validatedAt) "
                f"on {_names(missing)} of ModelCache {ref}",
            )
    if not gate.requirePublishedDigest:
        return None
    commits, digests = footprint.commits(), footprint.digests()
    missing = [n for n in names if not COMMIT.match(commits[n]) or not DIGEST.match(digests[n])]
    if missing:
        return Gate(
            "ArtifactDigestMissing",
            f"requirePublishedDigest: no commit (40 hex) and sha256 digest recorded on "
            f"{_names(missing)} of ModelCache {ref}",
        )
    if len({(commits[n], digests[n]) for n in names}) > 1:
        pairs = [f"{n}={commits[n][:12]}/{digests[n][7:19]}" for n in names]
        return Gate(
            "ArtifactDigestMissing",
            f"requirePublishedDigest: clusters of ModelCache {ref} recorded different "
            f"artifacts ({_names(pairs)}); no single digest to certify",
        )
    return None


def _opened(gate: ArtifactGate, cache: Any, ref: str, footprint: _Footprint) -> Gate:
    """The open gate: its record (the evidence every cluster agrees on) and message."""
    commits, digests = footprint.commits(), footprint.digests()
    record: dict[str, Any] = {
        "cache": gate.modelCacheRef.name,
        "uid": structs.get_str(cache, "metadata", "uid"),
        "generation": _count_of(structs.get(cache, "metadata", "generation")),
    }
    if len(set(commits.values())) == 1 and COMMIT.match(next(iter(commits.values()), "")):
        record["commit"] = next(iter(commits.values()))
    if len(set(digests.values())) == 1 and DIGEST.match(next(iter(digests.values()), "")):
        record["digest"] = next(iter(digests.values()))
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
