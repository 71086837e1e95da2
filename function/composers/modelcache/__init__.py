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
- One InferenceCluster per workload cluster: of the matched Existing clusters that
  name the same kubeconfig Secret only the oldest is used, and not even that one while
  another has a hydration there; the others are passed to their shards with the reason
  (:func:`footprint.match`, :func:`footprint.guard`), nothing is deleted on this
  account, and condition ``ClustersDistinct`` names them.
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
from dataclasses import dataclass
from typing import Any

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.inferencecluster import KUBECONFIG_FIELD, SECRET_NAMESPACE
from function.api.modelcache import (
    ARTIFACT_READY,
    CLUSTERS_DISTINCT,
    CLUSTERS_MATCHED,
    REASON_DISTINCT,
    REASON_HYDRATED,
    REASON_HYDRATING,
    REASON_HYDRATION_FAILED,
    REASON_NO_HOSTABLE_CLUSTERS,
    REASON_NO_MATCHING_CLUSTERS,
    REASON_SHARED_KUBECONFIG,
    CacheSource,
    parse_cluster_selector,
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
from function.core import events, structs
from function.core.inputs import UNRESOLVED, Inputs, ObservedView, Resolved
from function.core.numbers import ascii_digits
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
        if key.startswith(CHILD_PREFIX) and ascii_digits(key[len(CHILD_PREFIX) :]):
            out[int(key[len(CHILD_PREFIX) :])] = body
    return out


_Lists = tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]], list[str]]
"""failed, unavailable, retained and waiting as written (:meth:`Rollup.lists`)."""


@dataclass(frozen=True)
class _Call:
    """What the steps of one resolved call share.

    Attributes:
        inputs: The request view.
        out: The outcome being built.
        source: The source as ``{repo, revision, identity}`` (``status.source``).
        source_json: The canonical JSON of the source fields every shard copies.
        matched: Every selected cluster, with why it cannot host a cache ("" if it can).
        desired: The desired shards by number, their clusters (draining shards: none).
        roll: The roll-up of the shards' reports.
    """

    inputs: Inputs
    out: Outcome
    source: dict[str, str]
    source_json: str
    matched: dict[str, str]
    desired: dict[int, wire.Entries]
    roll: Rollup


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelCache.

    Args:
        inputs: The request view; ``inputs.spec`` holds ``source``, ``huggingFace``
            and ``clusterSelector``.

    Returns:
        The outcome: ModelCacheShards keyed ``shard-<n>``; status ``source``,
        ``summary``, ``evidence[]``, ``failed[]``, ``unavailable[]``, ``retained[]``,
        ``waiting[]``; conditions ``ClustersMatched``, ``ArtifactReady`` and
        ``ClustersDistinct``.

    Raises:
        SpecError: for a missing or malformed ``spec.clusterSelector`` or source.
    """
    selector, source = _parse(inputs.spec)
    out = Outcome()
    out.require(
        REQ_CLUSTERS, API_VERSION, "InferenceCluster", match_labels=selector.requirement_labels()
    )
    observed = _observed_shards(inputs)
    clusters = inputs.required(REQ_CLUSTERS)
    if clusters is UNRESOLVED:
        return _resolving(inputs, out)
    assert isinstance(clusters, Resolved)

    repo, revision = source.huggingFace.repo, source.huggingFace.revision
    matched, shards, shared = footprint.match(clusters, selector)
    matched, shards, guarded = footprint.guard(shared, matched, shards, observed)
    call = _Call(
        inputs,
        out,
        {"repo": repo, "revision": revision, "identity": source_identity(repo, revision)},
        json.dumps(source.to_spec(), sort_keys=True),
        matched,
        _desired_shards(shards, observed, source_identity(repo, revision)),
        Rollup(),
    )
    new = [n for n in call.desired if n not in observed]
    _write_shards(call, observed)
    lists = call.roll.lists()
    _write_status(call, lists)
    _events(call, new, lists[0])
    _clusters_distinct(inputs, out, guarded)
    if not matched:
        return _no_matching_clusters(out)
    _clusters_matched(call)
    _artifact_ready(call, lists[0], lists[3])
    roll = call.roll
    total, ready_n = roll.total, roll.phases[READY]
    out.ready = bool(total) and ready_n == total and not roll.phases[FAILED] and not roll.stale
    return out


def _parse(spec: dict[str, Any]) -> tuple[LabelSelector, CacheSource]:
    """``spec.clusterSelector`` (required) and the source."""
    return parse_cluster_selector(spec), parse_source(spec)


def _resolving(inputs: Inputs, out: Outcome) -> Outcome:
    """The clusters are not resolved yet: keep everything, both conditions Unknown."""
    out.keep_observed(inputs)
    msg = "waiting for Crossplane to resolve the InferenceClusters of spec.clusterSelector"
    out.condition(CLUSTERS_MATCHED, "Unknown", "ResolvingClusters", msg)
    out.condition(ARTIFACT_READY, "Unknown", "ResolvingClusters", msg)
    out.condition(CLUSTERS_DISTINCT, "Unknown", "ResolvingClusters", msg)
    out.ready = False
    return out


def _desired_shards(
    desired: dict[int, wire.Entries], observed: dict[int, Struct], identity: str
) -> dict[int, wire.Entries]:
    """``desired`` plus every observed shard that left it but still drains (no clusters),
    as a new dict (``desired`` is the shared footprint: :func:`footprint.match`)."""
    desired = dict(desired)
    for n, obs in observed.items():
        if n not in desired and footprint.keep_draining(obs, read_report(obs), identity, n):
            desired[n] = ()
    return desired


def _write_shards(call: _Call, observed: dict[int, Struct]) -> None:
    """Roll up each desired shard's report and desire the shard (ready when current and
    every one of its clusters is Ready)."""
    identity = call.source["identity"]
    ns, cache = call.inputs.namespace, call.inputs.name
    for n in sorted(call.desired):
        entries = call.desired[n]
        obs = observed.get(n)
        report: ShardReport | None = read_report(obs) if obs is not None else None
        current = call.roll.add(n, entries, identity, report)
        ready = (
            current
            and report is not None
            and report.phases.get(READY, 0) == report.total
            and not report.phases.get(FAILED, 0)
        )
        key = wire.ShardKey(ns, cache, call.source_json, n, entries)
        call.out.resources[wire.child_key(n)] = Desired(
            wire.shard_body(key), ready, wire.shard_entry(key, ready)
        )


def _write_status(call: _Call, lists: _Lists) -> None:
    """``status``: source, summary, evidence and the bounded cluster lists."""
    roll = call.roll
    failed, unavailable, retained, waiting = lists
    st = call.out.status
    st["source"] = call.source
    st["summary"] = {
        "ready": f"{roll.phases[READY]}/{roll.total}",
        "total": roll.total,
        "matched": len(call.matched),
        "shards": len(call.desired),
        "retained": len(roll.retained),
        "artifacts": len(roll.evidence),
        "phases": roll.phases,
    }
    st["evidence"] = evidence_list(roll.evidence_groups())
    st["failed"] = named_list(failed)
    st["unavailable"] = named_list(unavailable)
    st["retained"] = named_list(retained)
    st["waiting"] = waiting


def _events(call: _Call, new: list[int], failed: list[tuple[str, str]]) -> None:
    """Events on transitions of the roll-up, a handful per fleet-wide change (the
    ``HydrationReady`` event comes with ``ArtifactReady`` turning True:
    :func:`_artifact_ready`)."""
    out, roll, xr = call.out, call.roll, call.inputs.xr
    failed_n = roll.phases[FAILED]
    prev_failed = structs.get(xr, "status", "summary", "phases", FAILED)
    count = sum(1 for n in new for _, why in call.desired[n] if not why)
    if count:  # clusters that can host a cache: the others get no hydration
        out.normal(
            f"hydration started: {count} cluster(s) in {len(new)} new shard(s)", "HydrationStarted"
        )
    if failed_n and (not isinstance(prev_failed, float) or failed_n > prev_failed):
        out.warning(
            f"hydration failed on {_names([f'{n}: {m}' for n, m in failed])}",
            REASON_HYDRATION_FAILED,
        )


def _no_matching_clusters(out: Outcome) -> Outcome:
    """No cluster is selected: both conditions False, not ready."""
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


def _shared_sentence(g: footprint.Guarded) -> str:
    """One group of :func:`_clusters_distinct`: who shares which Secret, and what the
    cache does there (each list of names cut after five, :func:`_names`)."""
    grp = g.group
    used, rest = grp.matched[0], grp.matched[1:]
    unselected = [n for n in grp.others if n in g.hydrated]
    members = [*grp.matched, *(f"{n} (not selected by spec.clusterSelector)" for n in unselected)]
    name, key = grp.secret
    head = (
        f"InferenceClusters {_names(members)} name the same {KUBECONFIG_FIELD} (Secret "
        f"{SECRET_NAMESPACE}/{name}, key {key}), so they reach one workload cluster"
    )
    if not g.blocked:
        return (
            f"{head}: {used} is the oldest (metadata.creationTimestamp, then name) and is "
            f"used there; {_names(list(rest))} {'gets' if len(rest) == 1 else 'get'} no "
            "hydration"
        )
    have = list(g.hydrated)
    if used in have:
        kept = "both are kept" if len(have) == 2 else f"all {len(have)} are kept"
        return (
            f"{head}: {_names(have)} each have a hydration there from before this "
            f"check and own the same PVC: {kept} and nothing new is composed"
        )
    return (
        f"{head}: {_names(have)} already {'has' if len(have) == 1 else 'have'} a "
        f"hydration there: {used} gets none while it exists, and nothing new is composed"
    )


def _clusters_distinct(inputs: Inputs, out: Outcome, guarded: list[footprint.Guarded]) -> None:
    """``ClustersDistinct``: False naming each group of InferenceClusters that name one
    kubeconfig Secret (:func:`footprint.guard`, at most three groups spelled out), with a
    Warning event when that changes; True otherwise. A pure function of the clusters
    and the shards' reports: the same world, the same condition."""
    if not guarded:
        out.condition(
            CLUSTERS_DISTINCT,
            "True",
            REASON_DISTINCT,
            f"no two InferenceClusters this cache uses name the same {KUBECONFIG_FIELD} "
            "(two kubeconfigs that reach one cluster cannot be told apart)",
        )
        return
    shown = [_shared_sentence(g) for g in guarded[:3]]
    if len(guarded) > 3:
        shown.append(f"and {len(guarded) - 3} more such groups")
    message = (
        "; ".join(shown)
        + ". Keep one InferenceCluster per workload cluster: delete the newer one or "
        f"point its {KUBECONFIG_FIELD} at the kubeconfig of its own cluster. A hydration "
        "that goes deletes the cache PVC on that cluster, which the other's replicas "
        "mount: the download runs again there (README, One InferenceCluster per "
        "workload cluster)"
    )
    out.condition(CLUSTERS_DISTINCT, "False", REASON_SHARED_KUBECONFIG, message)
    events.condition_warning(out, inputs.xr, CLUSTERS_DISTINCT, REASON_SHARED_KUBECONFIG, message)


def _unhostable(matched: dict[str, str]) -> list[str]:
    """The matched clusters that cannot host a cache, sorted."""
    return sorted(n for n, why in matched.items() if why)


def _clusters_matched(call: _Call) -> None:
    """``ClustersMatched`` True, naming the matched clusters that cannot host a cache."""
    matched = call.matched
    unhostable = _unhostable(matched)
    matched_msg = f"{len(matched)} InferenceCluster(s) match spec.clusterSelector"
    if unhostable:
        matched_msg += f"; {len(unhostable)} cannot host a cache: " + _names(
            [f"{n} ({matched[n]})" for n in unhostable]
        )
    call.out.condition(CLUSTERS_MATCHED, "True", CLUSTERS_MATCHED, matched_msg)


def _artifact_ready(call: _Call, failed: list[tuple[str, str]], waiting: list[str]) -> None:
    """``ArtifactReady``: failed, no hostable cluster, hydrated (with the
    ``HydrationReady`` event when it turns True), or hydrating (then poll)."""
    out, roll = call.out, call.roll
    total, ready_n, failed_n = roll.total, roll.phases[READY], roll.phases[FAILED]
    progress = f"{ready_n}/{total} clusters ready"
    if failed_n:
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_HYDRATION_FAILED,
            f"hydration failed on {failed_n} cluster(s): "
            f"{_names([f'{n} ({m})' for n, m in failed])}; {progress}",
        )
    elif total == 0 and set(roll.stale) <= set(roll.unreported):
        # Every shard reported, or new (no hydration yet): no cluster can host a cache.
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_NO_HOSTABLE_CLUSTERS,
            "no matched cluster can host a cache: " + _names(_unhostable(call.matched)),
        )
    elif ready_n == total and total and not roll.stale:
        out.condition(ARTIFACT_READY, "True", REASON_HYDRATED, progress)
        # The event comes with the condition's transition (the XR's conditions are
        # those Crossplane wrote from the last applied response): never while a shard
        # still reports another footprint (review 14b #7).
        if not structs.condition_is(call.inputs.xr, ARTIFACT_READY, "True"):
            out.normal(f"hydration finished on all {total} clusters", "HydrationReady")
    else:
        detail = f"waiting for {_names(waiting)}" if waiting else "waiting for the shards"
        if roll.stale:
            detail += f" ({len(roll.stale)} shard(s) not yet reporting the current footprint)"
        out.condition(ARTIFACT_READY, "False", REASON_HYDRATING, f"{progress}; {detail}")
        out.requeue_after(call.inputs.settings.poll_seconds)


# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (ARTIFACT_READY, CLUSTERS_MATCHED, CLUSTERS_DISTINCT)
