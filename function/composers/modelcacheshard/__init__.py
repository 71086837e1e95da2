"""ModelCacheShard: one ModelCacheHydration per cluster of one shard of a ModelCache.

Composed by the ModelCache (never authored), one per shard of its footprint
(``naming.cache_shard``: 64 fixed shards by cluster name), so no response carries
more than about 1/64 of a fleet's hydrations (issue 17). Its spec and status are the
contract in :mod:`function.api.modelcacheshard`.

Rules (the ModelCache's, per shard):

- Each cluster of ``spec.clusters`` gets a hydration, except one marked
  ``unavailable`` that has none yet (it is listed as ``Unavailable`` with the reason);
  an existing hydration on a cluster that became unavailable is kept.
- A hydration whose cluster is no longer in ``spec.clusters`` (it left the cache's
  selector) is kept while a live ModelReplica of the cache runs there, or one whose old
  pods still read the cache while they roll onto another one
  (``api.modeldeployment.leaving_cache``) (``retained``), else removed. Only then does
  the shard require the namespace's ModelReplicas, so a steady reconcile requires
  nothing and takes one call; until Crossplane resolved them every such hydration is
  kept.
- A hydration's phase counts only when its ``status.source.identity`` is the cache's
  current source identity; evidence is rolled up as one entry per distinct artifact.
- Readiness is explicit: Ready when every footprint cluster of the shard is Ready.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from google.protobuf.struct_pb2 import ListValue, Struct

from function import API_VERSION
from function.api.modelcache import (
    ARTIFACT_READY,
    REASON_HYDRATED,
    REASON_HYDRATING,
    REASON_HYDRATION_FAILED,
    REASON_NO_HOSTABLE_CLUSTERS,
    CacheSource,
    parse_source,
)
from function.api.modelcachehydration import READY
from function.api.modelcacheshard import (
    DELETING,
    MAX_LISTED,
    MAX_WAITING,
    ShardSpec,
    evidence_list,
    named_list,
    names_hash,
    parse_spec,
    spec_hash,
)
from function.composers.modelcacheshard import rows as decide
from function.composers.modelcacheshard import wire
from function.composers.modelcacheshard.tally import Tally
from function.core.errors import SpecError, quoted
from function.core.inputs import Inputs, ObservedView, Resolved
from function.core.outcome import Desired, Outcome
from function.naming import cache_shard, hydration_name, source_identity

REQ_REPLICAS = "replicas"
# Requirement "gone-<cluster>": the hydration of a cluster that left the shard, by name,
# while its row says Deleting.
REQ_GONE = "gone-"
GOING = (
    "no longer in this shard's footprint: its hydration is being deleted, and with it "
    "the cache PVC and Job on the cluster; no InferenceCluster naming the same workload "
    "cluster gets a hydration of this cache until it is gone"
)
CHILD_PREFIX = wire.CHILD_PREFIX


@dataclass(frozen=True)
class _Call:
    """What the steps of one call share.

    Attributes:
        inputs: The request view.
        out: The outcome being built.
        spec: The parsed spec.
        source: The parsed source.
        identity: The source's identity (:func:`source_identity`).
        source_json: The canonical JSON of the source fields every hydration copies.
        listed: The shard's clusters, with why each cannot host a cache ("" if it can).
        by_cluster: The observed hydrations by cluster.
        retained: Hydrations of clusters that left the shard, kept, with why.
    """

    inputs: Inputs
    out: Outcome
    spec: ShardSpec
    source: CacheSource
    identity: str
    source_json: str
    listed: dict[str, str]
    by_cluster: dict[str, Struct]
    retained: dict[str, str]


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelCacheShard.

    Args:
        inputs: The request view; ``inputs.spec`` holds ``cacheName``, ``shard``,
            ``clusters`` and the source (``source``, ``huggingFace``).

    Returns:
        The outcome: ModelCacheHydrations keyed ``hydration-<cluster>``; status
        ``specHash``, ``source``, ``summary``, ``evidence[]``, ``failed[]``,
        ``unavailable[]``, ``retained[]``, ``waiting[]`` and ``clusters[]`` (the
        contract in :mod:`function.api.modelcacheshard`); condition ``ArtifactReady``.

    Raises:
        SpecError: for a malformed spec, a duplicated cluster, or a cluster that does
            not belong to ``spec.shard``.
    """
    spec = parse_spec(inputs.spec)
    source = parse_source(inputs.spec)
    listed = _listed(spec)
    out = Outcome()
    by_cluster = _observed_hydrations(inputs)
    retained = _retain(inputs, out, spec.cacheName, by_cluster, listed)
    hf = source.huggingFace
    call = _Call(
        inputs,
        out,
        spec,
        source,
        source_identity(hf.repo, hf.revision),
        json.dumps(source.to_spec(), sort_keys=True),
        listed,
        by_cluster,
        retained,
    )
    prev_rows, prev_list = wire.previous_rows(inputs)
    tally = _hydrations(call, {r[0]: r[1] for r in prev_rows})
    _events(out, tally)
    for name, why in retained.items():
        tally.add_retained(name, *decide.retained_state(by_cluster[name], why))
    _deleting(call, tally, prev_rows)
    tally.rows.sort(key=lambda r: r[0])
    same = prev_list is not None and wire.same_rows(tally.rows, prev_rows)
    _write_status(call, tally, prev_list if same else None)
    _artifact_ready(call, tally)
    out.ready = not tally.failed and tally.ready == tally.total and (tally.total > 0 or not listed)
    return out


def _listed(spec: ShardSpec) -> dict[str, str]:
    """``spec.clusters`` by name, with why each cannot host a cache ("" if it can).

    Raises:
        SpecError: for a cluster listed twice or one of another shard.
    """
    listed: dict[str, str] = {}
    for i, c in enumerate(spec.clusters):
        if c.name in listed:
            raise SpecError(f"spec.clusters[{i}].name", f"{quoted(c.name)} is listed twice")
        if cache_shard(c.name) != spec.shard:
            raise SpecError(
                f"spec.clusters[{i}].name",
                f"cluster {quoted(c.name)} belongs to shard {cache_shard(c.name)}, "
                f"not {spec.shard}",
            )
        listed[c.name] = c.unavailable or ""
    return listed


def _observed_hydrations(inputs: Inputs) -> dict[str, Struct]:
    """The observed hydrations by cluster (composition-resource name ``hydration-<c>``)."""
    observed = inputs.observed
    pairs = (
        observed.bodies()
        if isinstance(observed, ObservedView)
        else ((k, c.resource) for k, c in observed.items())
    )
    return {k[len(CHILD_PREFIX) :]: b for k, b in pairs if k.startswith(CHILD_PREFIX)}


def _retain(
    inputs: Inputs, out: Outcome, cache: str, by_cluster: dict[str, Struct], listed: dict[str, str]
) -> dict[str, str]:
    """Keep the hydrations of clusters that left the shard while replicas use them.

    Hydrations of clusters that left the shard are the only reason to read replicas;
    while that list is not resolved every observed child stays as it was ("not known").
    """
    leaving = sorted(c for c in by_cluster if c not in listed)
    replicas: Resolved | None = None
    if leaving:
        out.require(
            REQ_REPLICAS, API_VERSION, "ModelReplica", match_labels={}, namespace=inputs.namespace
        )
        got = inputs.required(REQ_REPLICAS)
        replicas = got if isinstance(got, Resolved) else None
    retained = decide.retention(leaving, replicas, cache)
    for cluster in retained:
        out.keep(wire.child_key(cluster), by_cluster[cluster])
    if leaving and replicas is None:
        for key, child in inputs.observed.items():
            if not key.startswith(CHILD_PREFIX):
                out.keep(key, child.resource)
    return retained


def _hydrations(call: _Call, prev: dict[str, str]) -> Tally:
    """Desire a hydration for every listed cluster that can host one (or has one) and
    tally its phase and its change since ``prev`` (phases of the previous status)."""
    tally = Tally()
    hf = call.source.huggingFace
    ns, cache = call.inputs.namespace, call.spec.cacheName
    resources = call.out.resources
    for name in sorted(call.listed):
        obs = call.by_cluster.get(name)
        why = call.listed[name]
        if why and obs is None:
            tally.add_unavailable(name, why)
            continue
        phase, msg, evidence = decide.hydration_state(obs, hf.repo, hf.revision, call.identity)
        is_ready = phase == READY
        resources[CHILD_PREFIX + name] = Desired(
            wire.hydration_body(ns, cache, call.source_json, name),
            is_ready,
            wire.hydration_entry(ns, cache, call.source_json, name, is_ready),
        )
        tally.add(name, phase, msg, evidence)
        if name in prev:
            tally.transition(name, phase, msg, prev[name])
        elif obs is None:
            tally.started.append(name)
    return tally


def _deleting(call: _Call, tally: Tally, prev_rows: list[wire.Row]) -> None:
    """A ``Deleting`` row for each hydration of a cluster that left the shard and is
    still there: one dropped in this call (observed, neither listed nor retained), and
    one whose previous row said ``Deleting`` while its hydration, looked up by name, is
    still found (or not resolved yet). Polls while any is left (required resources
    are not watched)."""
    by_cluster, listed, retained = call.by_cluster, call.listed, call.retained
    for name in sorted(by_cluster):
        if name not in listed and name not in retained:
            tally.add_deleting(name, GOING)
    ns, cache = call.inputs.namespace, call.spec.cacheName
    for name, phase, *_ in prev_rows:
        if phase != DELETING or name in by_cluster or name in listed:
            continue
        key = REQ_GONE + name
        match = hydration_name(ns, cache, name)
        call.out.require(key, API_VERSION, "ModelCacheHydration", match_name=match, namespace=ns)
        got = call.inputs.required(key)
        if not isinstance(got, Resolved) or got.items:
            tally.add_deleting(name, GOING)
    if tally.deleting:
        call.out.requeue_after(call.inputs.settings.poll_seconds)


def _events(out: Outcome, tally: Tally) -> None:
    """One event per kind of transition, not one per cluster."""
    if tally.started:
        out.normal(f"hydration started on {decide.names(tally.started)}", "HydrationStarted")
    if tally.newly_ready:
        out.normal(f"hydration finished on {decide.names(tally.newly_ready)}", "HydrationReady")
    if tally.newly_failed:
        out.warning(
            f"hydration failed on {decide.names(tally.newly_failed)}", REASON_HYDRATION_FAILED
        )


def _write_status(call: _Call, tally: Tally, same_list: ListValue | None) -> None:
    """``status``: spec hash, source, summary, evidence, the bounded lists and
    ``clusters[]`` (``same_list``, the previous one, when its rows are unchanged)."""
    spec, hf = call.spec, call.source.huggingFace
    st = call.out.status
    st["specHash"] = spec_hash(
        call.identity, spec.shard, tuple((c.name, c.unavailable or "") for c in spec.clusters)
    )
    st["namesHash"] = names_hash(call.identity, spec.shard, tuple(c.name for c in spec.clusters))
    st["source"] = wire.source_status(hf.repo, hf.revision, call.identity)
    st["summary"] = {
        "ready": f"{tally.ready}/{tally.total}",
        "total": tally.total,
        "hydrations": len(call.out.resources),
        "retained": len(call.retained),
        "deleting": tally.deleting,
        "phases": tally.counts,
    }
    st["evidence"] = evidence_list(decide.evidence_groups(tally.ready_evidence))
    st["failed"] = named_list(tally.failed[:MAX_LISTED])
    st["unavailable"] = named_list(tally.unavailable[:MAX_LISTED])
    st["retained"] = named_list(decide.bounded_retained(tally.kept))
    st["waiting"] = tally.waiting[:MAX_WAITING]
    st["clusters"] = same_list if same_list is not None else wire.entries(tally.rows)


def _artifact_ready(call: _Call, tally: Tally) -> None:
    """``ArtifactReady``: failed, no hostable cluster, no clusters, hydrated, or
    hydrating (then poll)."""
    out, listed, retained = call.out, call.listed, call.retained
    total, ready = tally.total, tally.ready
    progress = f"{ready}/{total} clusters ready"
    if tally.failed:
        detail = decide.names([f"{n} ({m})" for n, m in tally.failed])
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_HYDRATION_FAILED,
            f"hydration failed on {detail}; {progress}",
        )
    elif total == 0 and listed:
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_NO_HOSTABLE_CLUSTERS,
            "no cluster of this shard can host a cache: " + decide.names(sorted(listed)),
        )
    elif total == 0:
        out.condition(
            ARTIFACT_READY,
            "True",
            "NoClusters",
            "no footprint cluster in this shard"
            + (f"; {len(retained)} retained while replicas use them" if retained else ""),
        )
    elif ready == total:
        out.condition(ARTIFACT_READY, "True", REASON_HYDRATED, progress)
    else:
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_HYDRATING,
            f"{progress}; waiting for {decide.names(tally.waiting)}",
        )
        out.requeue_after(call.inputs.settings.poll_seconds)


# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (ARTIFACT_READY,)
