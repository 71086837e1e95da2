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
  selector) is kept while a live ModelReplica of the cache runs there (``retained``),
  else removed. Only then does the shard require the namespace's ModelReplicas, so a
  steady reconcile requires nothing and takes one call; until Crossplane resolved them
  every such hydration is kept.
- A hydration's phase counts only when its ``status.source.identity`` is the cache's
  current source identity; evidence is rolled up as one entry per distinct artifact.
- Readiness is explicit: Ready when every footprint cluster of the shard is Ready.
"""

from __future__ import annotations

import json

from function import API_VERSION
from function.api.modelcache import (
    ARTIFACT_READY,
    REASON_HYDRATED,
    REASON_HYDRATING,
    REASON_HYDRATION_FAILED,
    REASON_NO_HOSTABLE_CLUSTERS,
    parse_source,
)
from function.api.modelcachehydration import FAILED, READY
from function.api.modelcacheshard import (
    MAX_LISTED,
    MAX_WAITING,
    PHASES,
    UNAVAILABLE,
    evidence_list,
    named_list,
    parse_spec,
    spec_hash,
)
from function.composers.modelcacheshard import rows as decide
from function.composers.modelcacheshard import wire
from function.core.errors import SpecError
from function.core.inputs import Inputs, ObservedView, Resolved
from function.core.outcome import Desired, Outcome
from function.naming import cache_shard, source_identity

REQ_REPLICAS = "replicas"
CHILD_PREFIX = wire.CHILD_PREFIX


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
    listed: dict[str, str] = {}
    for i, c in enumerate(spec.clusters):
        if c.name in listed:
            raise SpecError(f"spec.clusters[{i}].name", f"{c.name!r} is listed twice")
        if cache_shard(c.name) != spec.shard:
            raise SpecError(
                f"spec.clusters[{i}].name",
                f"cluster {c.name!r} belongs to shard {cache_shard(c.name)}, not {spec.shard}",
            )
        listed[c.name] = c.unavailable or ""

    ns, cache = inputs.namespace, spec.cacheName
    repo, revision = source.huggingFace.repo, source.huggingFace.revision
    identity = source_identity(repo, revision)
    source_json = json.dumps(source.to_spec(), sort_keys=True)
    out = Outcome()

    observed = inputs.observed
    pairs = (
        observed.bodies()
        if isinstance(observed, ObservedView)
        else ((k, c.resource) for k, c in observed.items())
    )
    by_cluster = {k[len(CHILD_PREFIX) :]: b for k, b in pairs if k.startswith(CHILD_PREFIX)}

    # Hydrations of clusters that left the shard: the only reason to read replicas.
    leaving = sorted(c for c in by_cluster if c not in listed)
    replicas: Resolved | None = None
    if leaving:
        out.require(REQ_REPLICAS, API_VERSION, "ModelReplica", match_labels={}, namespace=ns)
        got = inputs.required(REQ_REPLICAS)
        replicas = got if isinstance(got, Resolved) else None
    retained = decide.retention(leaving, replicas, cache)
    for cluster in retained:
        out.keep(wire.child_key(cluster), by_cluster[cluster])
    if leaving and replicas is None:
        # Not resolved yet: every observed child stays as it was ("not known").
        for key, child in inputs.observed.items():
            if not key.startswith(CHILD_PREFIX):
                out.keep(key, child.resource)

    prev_rows, prev_list = wire.previous_rows(inputs)
    prev = {r[0]: r[1] for r in prev_rows}
    rows: list[wire.Row] = []
    counts = dict.fromkeys((*PHASES, UNAVAILABLE), 0)
    failed: list[tuple[str, str]] = []
    unavailable: list[tuple[str, str]] = []
    waiting: list[str] = []
    ready_evidence = []
    started: list[str] = []
    newly_ready: list[str] = []
    newly_failed: list[str] = []
    resources = out.resources
    for name in sorted(listed):
        obs = by_cluster.get(name)
        why = listed[name]
        if why and obs is None:
            msg = f"cannot host a cache: {why}"
            counts[UNAVAILABLE] += 1
            unavailable.append((name, msg))
            rows.append((name, UNAVAILABLE, msg, None, False))
            continue
        phase, msg, evidence = decide.hydration_state(obs, repo, revision, identity)
        counts[phase] += 1
        is_ready = phase == READY
        resources[CHILD_PREFIX + name] = Desired(
            wire.hydration_body(ns, cache, source_json, name),
            is_ready,
            wire.hydration_entry(ns, cache, source_json, name, is_ready),
        )
        rows.append((name, phase, msg, evidence, False))
        if phase == FAILED:
            failed.append((name, msg))
        elif is_ready:
            ready_evidence.append(evidence)
        else:
            waiting.append(name)
        if name in prev:
            if prev[name] != phase:
                if phase == FAILED:
                    newly_failed.append(f"{name}: {msg}")
                elif is_ready:
                    newly_ready.append(name)
        elif obs is None:
            started.append(name)
    # One event per kind of transition, not one per cluster.
    if started:
        out.normal(f"hydration started on {decide.names(started)}", "HydrationStarted")
    if newly_ready:
        out.normal(f"hydration finished on {decide.names(newly_ready)}", "HydrationReady")
    if newly_failed:
        out.warning(f"hydration failed on {decide.names(newly_failed)}", REASON_HYDRATION_FAILED)
    kept: list[tuple[str, str]] = []
    for name, why in retained.items():
        phase, msg = decide.retained_state(by_cluster[name], why)
        rows.append((name, phase, msg, None, True))
        kept.append((name, msg))
    rows.sort(key=lambda r: r[0])

    total = sum(counts[p] for p in PHASES)
    ready = counts[READY]
    same = prev_list is not None and wire.same_rows(rows, prev_rows)
    st = out.status
    st["specHash"] = spec_hash(
        identity, spec.shard, [(c.name, c.unavailable or "") for c in spec.clusters]
    )
    st["source"] = wire.source_status(repo, revision, identity)
    st["summary"] = {
        "ready": f"{ready}/{total}",
        "total": total,
        "hydrations": len(resources),
        "retained": len(retained),
        "phases": counts,
    }
    groups = decide.evidence_groups(ready_evidence)
    st["evidence"] = evidence_list(groups)
    st["failed"] = named_list(failed[:MAX_LISTED])
    st["unavailable"] = named_list(unavailable[:MAX_LISTED])
    st["retained"] = named_list(decide.bounded_retained(kept))
    st["waiting"] = waiting[:MAX_WAITING]
    st["clusters"] = prev_list if same and prev_list is not None else wire.entries(rows)

    progress = f"{ready}/{total} clusters ready"
    if failed:
        detail = decide.names([f"{n} ({m})" for n, m in failed])
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
            f"{progress}; waiting for {decide.names(waiting)}",
        )
        out.requeue_after(inputs.settings.poll_seconds)
    out.ready = not failed and ready == total and (total > 0 or not listed)
    return out
