"""ModelCacheShard decisions: a cluster's phase from its hydration, which leaving
hydrations are retained, and the summary the ModelCache rolls up (no wire bytes)."""

from __future__ import annotations

from typing import Any

from google.protobuf.struct_pb2 import Struct

from function.api.modelcachehydration import PENDING
from function.api.modelcacheshard import MAX_RETAINED, PHASES
from function.api.modeldeployment import leaving_cache
from function.core import structs
from function.core.inputs import Resolved
from function.core.timeutil import parse_time

_NO_FIELDS = Struct().fields
JUST_CREATED = "hydration created; waiting for its first status"


def names(items: list[str], limit: int = 5) -> str:
    """``a, b, c and 4 more``."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def replica_clusters(replicas: Resolved, cache: str) -> dict[str, list[str]]:
    """Clusters where a live ModelReplica's pods may read ``cache`` -> replica names: its
    ``spec.modelCacheRef.name`` is ``cache``, or it rolls off ``cache`` onto another one
    (``api.modeldeployment.leaving_cache``: its old pods mount ``cache``'s PVC until
    the roll is done). Names, not labels, are compared (labels are shortened)."""
    out: dict[str, list[str]] = {}
    for r in replicas.items:
        uses = structs.get_str(r, "spec", "modelCacheRef", "name") == cache
        if not uses and leaving_cache(r) != cache:
            continue
        if structs.being_deleted(r):
            continue
        cluster = structs.get_str(r, "spec", "clusterName")
        if cluster:
            name = structs.get_str(r, "metadata", "name")
            out.setdefault(cluster, []).append(name if uses else f"{name} (rolling off it)")
    return out


def retention(leaving: list[str], replicas: Resolved | None, cache: str) -> dict[str, str]:
    """Which hydrations on clusters that left the shard are kept, and why.

    ``replicas`` None means Crossplane has not resolved the ModelReplicas yet: every
    leaving hydration is kept ("not known" is not "unused"). Otherwise a hydration is
    kept while a live (not deleting) ModelReplica of ``cache`` runs on its cluster, or
    one whose pods still read it while they roll off it (:func:`replica_clusters`).
    """
    if replicas is None:
        return dict.fromkeys(
            leaving, "no longer matches spec.clusterSelector; checking for replicas"
        )
    users = replica_clusters(replicas, cache)
    return {
        c: (
            "no longer matches spec.clusterSelector; kept while ModelReplica "
            f"{names(sorted(users[c]))} still uses this cache there: it takes "
            "no new replica, its replicas move into the footprint once their "
            "replacements serve, then the hydration and its PVC are reclaimed"
        )
        for c in leaving
        if c in users
    }


def _reported_identity(st: Any) -> str:
    """``status.source.identity`` from a hydration's status fields ("" when absent)."""
    v = st.get("source")
    if v is None or not v.HasField("struct_value"):
        return ""
    iv = v.struct_value.fields.get("identity")
    return iv.string_value if iv is not None else ""


def _stale_message(repo: str, revision: str, identity: str, got: str, phase: str) -> str:
    """Why a hydration whose status is for another source does not count."""
    want = f"waiting for the hydration to report {repo}@{revision} (identity {identity})"
    if not got:
        return want
    return f"{want}; its status ({phase}) is for source identity {got}"


def _phase_message(st: Any) -> tuple[str, str]:
    """(phase, message) from a hydration's status fields; an unknown phase is Pending."""
    v = st.get("phase")
    phase = v.string_value if v is not None else ""
    if phase not in PHASES:
        phase = PENDING
    v = st.get("message")
    return phase, (v.string_value if v is not None else "") or f"hydration is {phase}"


def hydration_state(
    obs: Struct | None, repo: str, revision: str, identity: str
) -> tuple[str, str, Struct | None]:
    """(phase, message, evidence) of the hydration on a footprint cluster.

    Pending when not observed yet. A status for another source identity (or none yet)
    is not evidence of this one: the cluster reads Pending, and its evidence is dropped,
    so ``ArtifactReady`` never opens on stale evidence.
    """
    if obs is None:
        return PENDING, JUST_CREATED, None
    sv = obs.fields.get("status")
    st = sv.struct_value.fields if sv is not None else _NO_FIELDS
    phase, msg = _phase_message(st)
    v = st.get("evidence")
    evidence = v.struct_value if v is not None and v.HasField("struct_value") else None
    got = _reported_identity(st)
    if got != identity and sv is not None:
        return PENDING, _stale_message(repo, revision, identity, got, phase), None
    return phase, msg, evidence


def retained_state(obs: Struct, why: str) -> tuple[str, str]:
    """(phase, message) of a retained hydration: its own phase, and why it is kept."""
    phase, msg = _phase_message(structs.fields_of(obs, "status"))
    state = msg if msg.startswith("hydration") else f"hydration {msg}"
    return phase, f"{why}; {state}"


def normal_digest(value: str) -> str:
    """A digest in ``sha256:<hex>`` form (the prefix is optional in evidence)."""
    return value if not value or value.startswith("sha256:") else f"sha256:{value}"


def evidence_groups(evidence: list[Struct | None]) -> list[tuple[str, str, int, int]]:
    """``(commit, digest, clusters, validated)`` per distinct (commit, digest) among
    the Ready clusters' evidence, most clusters first.

    ``validated`` counts the clusters whose ``validatedAt`` is an RFC 3339 time.
    """
    groups: dict[tuple[str, str], list[int]] = {}
    for ev in evidence:
        commit = structs.get_str(ev, "commit") if ev is not None else ""
        digest = normal_digest(structs.get_str(ev, "digest")) if ev is not None else ""
        g = groups.setdefault((commit, digest), [0, 0])
        g[0] += 1
        if ev is not None and parse_time(structs.get(ev, "validatedAt")) is not None:
            g[1] += 1
    return sorted(
        ((c, d, n, v) for (c, d), (n, v) in groups.items()), key=lambda g: (-g[2], g[0], g[1])
    )


def bounded_retained(retained: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The retained list as written (at most MAX_RETAINED entries)."""
    return retained[:MAX_RETAINED]
