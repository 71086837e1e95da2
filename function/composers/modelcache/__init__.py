"""ModelCache: fan out one ModelCacheShard per shard of the footprint, roll status up.

The footprint is every InferenceCluster that ``spec.clusterSelector`` selects, with
full Kubernetes label-selector semantics (``function.scheduling.selectors``). The
requirement sent to Crossplane carries only the ``matchLabels`` part (all that a
required-resources selector can express); the rest is applied here.

Issue 17: a cache over 10,000 clusters cannot return one hydration per cluster in one
response (6.7 MiB, over Crossplane's 4 MiB). So the cache composes one
ModelCacheShard per shard of 64 (``naming.cache_shard``, a pure function of the
cluster's name), and each shard composes the ModelCacheHydrations of its clusters
(``function.composers.modelcacheshard``). Hydration names and labels are unchanged.

Rules:

- A matched cluster that cannot host a cache (not Ready, no provider config or no
  cache storage class) is passed to its shard with the reason: it gets no new
  hydration, an existing one is kept.
- A shard whose clusters all left the footprint stays desired, with no clusters,
  until it reports that it keeps no hydration (it keeps one while a live ModelReplica
  uses it: ``retained``); nothing is deleted while a requirement is unresolved.
- Status is a summary (:mod:`function.api.modelcache`, "Status contract"): counts
  per phase, evidence as one entry per distinct artifact with its count, the failed,
  unavailable and retained clusters listed up to a bound. A shard's report counts only
  when it describes the spec the cache desires now (``status.specHash``), so
  ``ArtifactReady`` never opens on stale evidence. The XR's readiness is explicit.
"""

from __future__ import annotations

import json

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.modelcache import (
    ARTIFACT_READY,
    CLUSTERS_MATCHED,
    REASON_HYDRATED,
    REASON_HYDRATING,
    REASON_HYDRATION_FAILED,
    REASON_NO_HOSTABLE_CLUSTERS,
    REASON_NO_MATCHING_CLUSTERS,
    parse_source,
    retained_clusters,
)
from function.api.modelcachehydration import FAILED, READY
from function.api.modelcacheshard import (
    ShardReport,
    evidence_list,
    named_list,
    read_report,
)
from function.composers.modelcache import footprint, wire
from function.composers.modelcache.rollup import Rollup
from function.core import structs
from function.core.errors import SpecError
from function.core.inputs import UNRESOLVED, Inputs, ObservedView, Resolved
from function.core.outcome import Desired, Outcome
from function.naming import source_identity
from function.scheduling.selectors import LabelSelector

__all__ = ["compose", "retained_clusters"]

REQ_CLUSTERS = "clusters"
CHILD_PREFIX = wire.CHILD_PREFIX


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _observed_shards(inputs: Inputs) -> dict[int, Struct]:
    """Observed shards by number (composition-resource name ``shard-<n>``)."""
    observed = inputs.observed
    pairs = (
        observed.bodies()
        if isinstance(observed, ObservedView)
        else ((k, c.resource) for k, c in observed.items())
    )
    out: dict[int, Struct] = {}
    for key, body in pairs:
        if key.startswith(CHILD_PREFIX) and key[len(CHILD_PREFIX) :].isdigit():
            out[int(key[len(CHILD_PREFIX) :])] = body
    return out


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelCache.

    Args:
        inputs: The request view; ``inputs.spec`` holds ``source``, ``huggingFace``
            and ``clusterSelector``.

    Returns:
        The outcome: ModelCacheShards keyed ``shard-<n>``; status ``source``,
        ``summary``, ``evidence[]``, ``failed[]``, ``unavailable[]``, ``retained[]``,
        ``waiting[]``; conditions ``ClustersMatched`` and ``ArtifactReady``.

    Raises:
        SpecError: for a missing or malformed ``spec.clusterSelector`` or source.
    """
    spec = inputs.spec
    if "clusterSelector" not in spec:
        raise SpecError("spec.clusterSelector", "is required (use {} to select every cluster)")
    selector = LabelSelector.parse(spec["clusterSelector"], "spec.clusterSelector")
    source = parse_source(spec)

    out = Outcome()
    out.require(
        REQ_CLUSTERS, API_VERSION, "InferenceCluster", match_labels=selector.requirement_labels()
    )
    observed = _observed_shards(inputs)
    clusters = inputs.required(REQ_CLUSTERS)
    if clusters is UNRESOLVED:
        out.keep_observed(inputs)
        msg = "waiting for Crossplane to resolve the InferenceClusters of spec.clusterSelector"
        out.condition(CLUSTERS_MATCHED, "Unknown", "ResolvingClusters", msg)
        out.condition(ARTIFACT_READY, "Unknown", "ResolvingClusters", msg)
        out.ready = False
        return out
    assert isinstance(clusters, Resolved)

    source_json = json.dumps(source.to_spec(), sort_keys=True)
    repo, revision = source.huggingFace.repo, source.huggingFace.revision
    identity = source_identity(repo, revision)
    ns, cache = inputs.namespace, inputs.name
    matched = footprint.match(clusters, selector)
    desired = footprint.shards(matched)
    roll = Rollup()
    for n, obs in observed.items():
        if n in desired:
            continue
        if footprint.keep_draining(obs, read_report(obs)):
            desired[n] = ()
    new = [n for n in desired if n not in observed]
    for n in sorted(desired):
        entries = desired[n]
        obs = observed.get(n)
        report: ShardReport | None = read_report(obs) if obs is not None else None
        current = roll.add(n, entries, identity, report)
        ready = (
            current
            and report is not None
            and report.phases.get(READY, 0) == report.total
            and not report.phases.get(FAILED, 0)
        )
        out.resources[wire.child_key(n)] = Desired(
            wire.shard_body(ns, cache, source_json, n, entries),
            ready,
            wire.shard_entry(ns, cache, source_json, n, entries, ready),
        )

    failed, unavailable, retained, waiting = roll.lists()
    total, ready_n = roll.total, roll.phases[READY]
    failed_n = roll.phases[FAILED]
    groups = roll.evidence_groups()
    prev_ready = structs.get(inputs.xr, "status", "summary", "phases", READY)
    prev_failed = structs.get(inputs.xr, "status", "summary", "phases", FAILED)
    st = out.status
    st["source"] = {"repo": repo, "revision": revision, "identity": identity}
    st["summary"] = {
        "ready": f"{ready_n}/{total}",
        "total": total,
        "matched": len(matched),
        "shards": len(desired),
        "retained": len(roll.retained),
        "artifacts": len(roll.evidence),
        "phases": roll.phases,
    }
    st["evidence"] = evidence_list(groups)
    st["failed"] = named_list(failed)
    st["unavailable"] = named_list(unavailable)
    st["retained"] = named_list(retained)
    st["waiting"] = waiting

    # Events on transitions of the roll-up, a handful per fleet-wide change.
    if new:
        count = sum(len(desired[n]) for n in new)
        out.normal(
            f"hydration started: {count} cluster(s) in {len(new)} new shard(s)", "HydrationStarted"
        )
    if total and ready_n == total and prev_ready != ready_n:
        out.normal(f"hydration finished on all {total} clusters", "HydrationReady")
    if failed_n and (not isinstance(prev_failed, float) or failed_n > prev_failed):
        out.warning(
            f"hydration failed on {_names([f'{n}: {m}' for n, m in failed])}",
            REASON_HYDRATION_FAILED,
        )

    if not matched:
        out.condition(
            CLUSTERS_MATCHED,
            "False",
            REASON_NO_MATCHING_CLUSTERS,
            "no InferenceCluster matches spec.clusterSelector",
        )
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_NO_MATCHING_CLUSTERS,
            "no cluster to hydrate: no InferenceCluster matches spec.clusterSelector",
        )
        out.ready = False
        return out

    unhostable = sorted(n for n, why in matched.items() if why)
    matched_msg = f"{len(matched)} InferenceCluster(s) match spec.clusterSelector"
    if unhostable:
        matched_msg += f"; {len(unhostable)} cannot host a cache: " + _names(
            [f"{n} ({matched[n]})" for n in unhostable]
        )
    out.condition(CLUSTERS_MATCHED, "True", CLUSTERS_MATCHED, matched_msg)

    progress = f"{ready_n}/{total} clusters ready"
    if failed_n:
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_HYDRATION_FAILED,
            f"hydration failed on {failed_n} cluster(s): "
            f"{_names([f'{n} ({m})' for n, m in failed])}; {progress}",
        )
    elif total == 0 and not roll.stale:
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_NO_HOSTABLE_CLUSTERS,
            "no matched cluster can host a cache: " + _names(unhostable),
        )
    elif ready_n == total and total and not roll.stale:
        out.condition(ARTIFACT_READY, "True", REASON_HYDRATED, progress)
    else:
        detail = f"waiting for {_names(waiting)}" if waiting else "waiting for the shards"
        if roll.stale:
            detail += f" ({len(roll.stale)} shard(s) not yet reporting the current footprint)"
        out.condition(ARTIFACT_READY, "False", REASON_HYDRATING, f"{progress}; {detail}")
        out.requeue_after(inputs.settings.poll_seconds)
    out.ready = bool(total) and ready_n == total and not failed_n and not roll.stale
    return out
