"""ModelCache: fan out one ModelCacheHydration per cluster of the footprint, roll up status.

The footprint is every InferenceCluster that ``spec.clusterSelector`` selects,
with full Kubernetes label-selector semantics (``function.scheduling.selectors``). The
requirement sent to Crossplane carries only the ``matchLabels`` part (all that a
required-resources selector can express); the rest is applied here.

Rules (issue "ModelCache: fan out and roll up"):

- A new hydration is stamped only on a cluster that can host a cache: Ready, with
  a provider config and a cache storage class. A matched cluster that cannot is
  listed in ``status.clusters[]`` with the reason. An existing hydration on a
  cluster that still matches is kept even if the cluster stops being hostable.
- A cluster that stops matching loses its hydration (and so its PVC), except while
  a live ModelReplica that uses this cache still runs there.
- A hydration's phase counts only when its ``status.source.identity`` is the cache's
  current source identity (``naming.source_identity(repo, revision)``): after a repo or
  revision edit, the old hydrations' ``Ready`` (and ``Failed``) describe other bytes,
  so the cluster reads ``Pending`` until its hydration reports the new identity. The
  identity the roll-up is for is written to ``status.source``.
- ``ArtifactReady`` is True only when every footprint cluster is Ready; any Failed
  hydration makes it False with reason ``HydrationFailed``; no matched cluster is
  ``NoMatchingClusters``. The XR's readiness is set explicitly.
- A requirement Crossplane has not resolved yet never shrinks the desired set.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.struct_pb2 import ListValue, Struct

from function import API_VERSION
from function.api import inferencecluster
from function.api.modelcache import (
    ARTIFACT_READY,
    CLUSTERS_MATCHED,
    REASON_HYDRATED,
    REASON_HYDRATING,
    REASON_HYDRATION_FAILED,
    REASON_NO_HOSTABLE_CLUSTERS,
    REASON_NO_MATCHING_CLUSTERS,
    UNAVAILABLE,
    parse_source,
)
from function.api.modelcachehydration import FAILED, PENDING, PHASES, READY
from function.core import structs
from function.core.errors import SpecError
from function.core.inputs import UNRESOLVED, Inputs, ObservedView, Resolved
from function.core.memo import memo
from function.core.outcome import Desired, Outcome
from function.edge.wire import state_entry
from function.naming import (
    LABEL_CACHE,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    hydration_name,
    labels_with_full,
    source_identity,
)
from function.scheduling.selectors import LabelSelector

REQ_CLUSTERS = "clusters"
REQ_REPLICAS = "replicas"
CHILD_PREFIX = "hydration-"
_NO_LABELS = Struct().fields
_JUST_CREATED = "hydration created; waiting for its first status"


def child_key(cluster: str) -> str:
    """The composition-resource name of the hydration on ``cluster``."""
    return CHILD_PREFIX + cluster


@memo(16384, weight=4)
def _hydration_body(namespace: str, cache: str, source_json: str, cluster: str) -> Struct:
    """The desired ModelCacheHydration of ``cache`` on ``cluster`` (memoized).

    A pure function of its arguments, memoized because the same bodies are desired on
    every reconcile of every cache (the hot path at fleet scale). The returned Struct is
    shared: callers only read or copy it (the runner copies it into the response).
    """
    labels, ann = labels_with_full(
        {LABEL_CACHE: cache, LABEL_CLUSTER: cluster, LABEL_MANAGED_BY: MANAGED_BY}
    )
    meta: dict[str, Any] = {
        "name": hydration_name(namespace, cache, cluster),
        "namespace": namespace,
        "labels": labels,
    }
    if ann:
        meta["annotations"] = ann
    body = Struct()
    body.update(
        {
            "apiVersion": API_VERSION,
            "kind": "ModelCacheHydration",
            "metadata": meta,
            "spec": {"clusterName": cluster, "cacheName": cache, **json.loads(source_json)},
        }
    )
    return body


@memo(32768, weight=4)
def _hydration_entry(
    namespace: str, cache: str, source_json: str, cluster: str, ready: bool
) -> bytes:
    """The hydration of ``cluster`` as a pre-encoded desired-resources entry (memoized)."""
    body = _hydration_body(namespace, cache, source_json, cluster)
    return state_entry(child_key(cluster), body, ready)


def _replica_clusters(replicas: Resolved, cache: str) -> dict[str, list[str]]:
    """Clusters where a live ModelReplica uses ``cache`` -> replica names."""
    out: dict[str, list[str]] = {}
    for r in replicas.items:
        if structs.get_str(r, "spec", "modelCacheRef", "name") != cache:
            continue
        if structs.get(r, "metadata", "deletionTimestamp") is not None:
            continue
        cluster = structs.get_str(r, "spec", "clusterName")
        if cluster:
            out.setdefault(cluster, []).append(structs.get_str(r, "metadata", "name"))
    return out


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


def _hydration_state(obs: Struct | None) -> tuple[str, str, Struct | None]:
    """(phase, message, evidence) of an observed hydration; Pending when not observed yet."""
    if obs is None:
        return PENDING, _JUST_CREATED, None
    st = structs.fields_of(obs, "status")
    v = st.get("phase")
    phase = v.string_value if v is not None else ""
    if phase not in PHASES:
        phase = PENDING
    v = st.get("message")
    msg = (v.string_value if v is not None else "") or f"hydration is {phase}"
    v = st.get("evidence")
    return phase, msg, (v.struct_value if v is not None and v.HasField("struct_value") else None)


Row = tuple[str, str, str, "Struct | None", bool]
"""One ``status.clusters[]`` entry: name, phase, message, evidence, retained."""


def _previous_rows(inputs: Inputs) -> tuple[list[Row], ListValue | None]:
    """The ``status.clusters[]`` the function wrote last time, as rows, and the list itself.

    Rows are None-padded reads; an entry with fields this function does not write makes
    the list unusable for reuse (its rows still serve to detect transitions).
    """
    rows: list[Row] = []
    entries = structs.get(inputs.xr, "status", "clusters")
    if not isinstance(entries, ListValue):
        return rows, None
    reusable = True
    for v in entries.values:
        f = v.struct_value.fields
        n, p, m = f.get("name"), f.get("phase"), f.get("message")
        ev, rt = f.get("evidence"), f.get("retained")
        rows.append(
            (
                n.string_value if n is not None else "",
                p.string_value if p is not None else "",
                m.string_value if m is not None else "",
                ev.struct_value if ev is not None else None,
                rt.bool_value if rt is not None else False,
            )
        )
        if len(f) != 3 + (ev is not None) + (rt is not None):
            reusable = False
    return rows, entries if reusable else None


def _same_rows(a: list[Row], b: list[Row]) -> bool:
    """True when two row lists would serialize to the same ``status.clusters``."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x[0] != y[0] or x[1] != y[1] or x[2] != y[2] or x[4] != y[4]:
            return False
        if (x[3] is None) != (y[3] is None) or (x[3] is not None and x[3] != y[3]):
            return False
    return True


def _entries(rows: list[Row]) -> ListValue:
    """Build ``status.clusters[]`` from rows."""
    out = ListValue()
    values = out.values
    for name, phase, message, evidence, retained in rows:
        f = values.add().struct_value.fields
        f["name"].string_value = name
        f["phase"].string_value = phase
        f["message"].string_value = message
        if evidence is not None:
            f["evidence"].struct_value.CopyFrom(evidence)
        if retained:
            f["retained"].bool_value = True
    return out


@memo(4096, weight=4)
def _source_status(repo: str, revision: str, identity: str) -> Struct:
    """``status.source {repo, revision, identity}``: the source the roll-up describes
    (shared, read-only; the runner copies it)."""
    s = Struct()
    s.update({"repo": repo, "revision": revision, "identity": identity})
    return s


def retained_clusters(cache: Struct) -> frozenset[str]:
    """The clusters a ModelCache keeps only while a live replica uses them.

    Read from the ``status.clusters[]`` entries this composer writes with
    ``retained: true`` (the cluster left ``spec.clusterSelector``). The contract
    ModelDeployment placement reads: no new replica there, replicas there move into
    the footprint make-before-break, then the hydration is reclaimed.
    """
    entries = structs.get(cache, "status", "clusters")
    if not isinstance(entries, ListValue):
        return frozenset()
    out = set()
    for v in entries.values:
        f = v.struct_value.fields
        rt, n = f.get("retained"), f.get("name")
        if rt is not None and rt.bool_value and n is not None and n.string_value:
            out.add(n.string_value)
    return frozenset(out)


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelCache.

    Args:
        inputs: The request view; ``inputs.spec`` holds ``source``, ``huggingFace``
            and ``clusterSelector``.

    Returns:
        The outcome: ModelCacheHydrations keyed ``hydration-<cluster>``, status
        ``clusters[] {name, phase, message[, evidence, retained]}`` sorted by name,
        ``summary.ready`` ("r/n"), conditions ``ClustersMatched`` and ``ArtifactReady``.

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
    # Every ModelReplica of the namespace; those whose spec.modelCacheRef names this
    # cache keep a hydration alive on a cluster that stopped matching.
    out.require(
        REQ_REPLICAS, API_VERSION, "ModelReplica", match_labels={}, namespace=inputs.namespace
    )

    # The composition-resource name carries the cluster: hydration-<cluster>.
    observed = inputs.observed
    pairs = (
        observed.bodies()
        if isinstance(observed, ObservedView)
        else ((k, c.resource) for k, c in observed.items())
    )
    observed_by_cluster: dict[str, Struct] = {
        key[len(CHILD_PREFIX) :]: body for key, body in pairs if key.startswith(CHILD_PREFIX)
    }

    clusters = inputs.required(REQ_CLUSTERS)
    if clusters is UNRESOLVED:
        out.keep_observed(inputs)
        msg = "waiting for Crossplane to resolve the InferenceClusters of spec.clusterSelector"
        out.condition(CLUSTERS_MATCHED, "Unknown", "ResolvingClusters", msg)
        out.condition(ARTIFACT_READY, "Unknown", "ResolvingClusters", msg)
        out.ready = False
        return out
    assert isinstance(clusters, Resolved)
    replicas = inputs.required(REQ_REPLICAS)

    source_json = json.dumps(source.to_spec(), sort_keys=True)
    repo, revision = source.huggingFace.repo, source.huggingFace.revision
    identity = source_identity(repo, revision)
    ns, cache = inputs.namespace, inputs.name
    matched: list[str] = []
    unhostable: dict[str, str] = {}
    matches = selector.matches_fields
    for c in clusters.items:
        mv = c.fields.get("metadata")
        if mv is None:
            continue
        meta = mv.struct_value.fields
        nv = meta.get("name")
        name = nv.string_value if nv is not None else ""
        lv = meta.get("labels")
        if not name or not matches(lv.struct_value.fields if lv is not None else _NO_LABELS):
            continue
        matched.append(name)
        if name not in observed_by_cluster:
            why = inferencecluster.cache_host_problem(c)
            if why is not None:
                unhostable[name] = why
    matched.sort()
    footprint = [n for n in matched if n not in unhostable]
    matched_set = set(matched)

    # Children on clusters that no longer match: kept only while a live replica uses them,
    # or while Crossplane has not resolved the replicas yet ("not known").
    retained: dict[str, str] = {}
    users = _replica_clusters(replicas, inputs.name) if isinstance(replicas, Resolved) else {}
    for cluster in sorted(observed_by_cluster):
        if cluster in matched_set:
            continue
        if replicas is UNRESOLVED:
            retained[cluster] = "no longer matches spec.clusterSelector; checking for replicas"
        elif cluster in users:
            retained[cluster] = (
                "no longer matches spec.clusterSelector; kept while ModelReplica "
                f"{_names(sorted(users[cluster]))} still uses this cache there: it takes "
                "no new replica, its replicas move into the footprint once their "
                "replacements serve, then the hydration and its PVC are reclaimed"
            )
    for cluster in retained:
        out.keep(child_key(cluster), observed_by_cluster[cluster])

    prev_rows, prev_list = _previous_rows(inputs)
    prev = {r[0]: r[1] for r in prev_rows}
    rows: list[Row] = []
    counts = dict.fromkeys(PHASES, 0)
    failed: list[str] = []
    waiting: list[str] = []
    started: list[str] = []
    newly_ready: list[str] = []
    newly_failed: list[str] = []
    # The hot loop (one pass per footprint cluster): field reads and writes inline.
    resources = out.resources
    for name in footprint:
        obs = observed_by_cluster.get(name)
        evidence = None
        if obs is None:
            phase, msg = PENDING, _JUST_CREATED
        else:
            sv = obs.fields.get("status")
            st = sv.struct_value.fields if sv is not None else _NO_LABELS
            v = st.get("phase")
            phase = v.string_value if v is not None else ""
            if phase not in counts:
                phase = PENDING
            v = st.get("message")
            msg = (v.string_value if v is not None else "") or f"hydration is {phase}"
            v = st.get("evidence")
            if v is not None and v.HasField("struct_value"):
                evidence = v.struct_value
            got = _reported_identity(st)
            if got != identity and sv is not None:
                # Status for another source (or none yet): not evidence of this one.
                msg = _stale_message(repo, revision, identity, got, phase)
                phase, evidence = PENDING, None
        counts[phase] += 1
        is_ready = phase == READY
        resources[CHILD_PREFIX + name] = Desired(
            _hydration_body(ns, cache, source_json, name),
            is_ready,
            _hydration_entry(ns, cache, source_json, name, is_ready),
        )
        rows.append((name, phase, msg, evidence, False))
        if phase == FAILED:
            failed.append(f"{name} ({msg})")
        elif phase != READY:
            waiting.append(name)
        if name in prev:
            if prev[name] != phase:
                if phase == FAILED:
                    newly_failed.append(f"{name}: {msg}")
                elif phase == READY:
                    newly_ready.append(name)
        elif obs is None:
            started.append(name)
    # One event per kind of transition, not one per cluster: a fleet-wide change stays
    # a handful of events (and of response bytes).
    if started:
        out.normal(f"hydration started on {_names(started)}", "HydrationStarted")
    if newly_ready:
        out.normal(f"hydration finished on {_names(newly_ready)}", "HydrationReady")
    if newly_failed:
        out.warning(f"hydration failed on {_names(newly_failed)}", REASON_HYDRATION_FAILED)
    for name in sorted(unhostable):
        rows.append((name, UNAVAILABLE, f"cannot host a cache: {unhostable[name]}", None, False))
    for name, why in retained.items():
        phase, msg, _ = _hydration_state(observed_by_cluster[name])
        state = msg if msg.startswith("hydration") else f"hydration {msg}"
        rows.append((name, phase, f"{why}; {state}", None, True))

    total = len(footprint)
    ready = counts[READY]
    # Steady state: the same rows as last time; hand back the list from the request
    # instead of building it again (the runner copies it into the response).
    same = prev_list is not None and _same_rows(rows, prev_rows)
    out.status["clusters"] = prev_list if same and prev_list is not None else _entries(rows)
    out.status["summary"] = {"ready": f"{ready}/{total}", "total": total}
    out.status["source"] = _source_status(repo, revision, identity)

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

    matched_msg = f"{len(matched)} InferenceCluster(s) match spec.clusterSelector"
    if unhostable:
        matched_msg += f"; {len(unhostable)} cannot host a cache: " + _names(
            [f"{n} ({unhostable[n]})" for n in sorted(unhostable)]
        )
    out.condition(CLUSTERS_MATCHED, "True", "ClustersMatched", matched_msg)

    progress = f"{ready}/{total} clusters ready"
    if failed:
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_HYDRATION_FAILED,
            f"hydration failed on {_names(failed)}; {progress}",
        )
    elif total == 0:
        out.condition(
            ARTIFACT_READY,
            "False",
            REASON_NO_HOSTABLE_CLUSTERS,
            "no matched cluster can host a cache: " + _names(sorted(unhostable)),
        )
    elif ready == total:
        out.condition(ARTIFACT_READY, "True", REASON_HYDRATED, progress)
    else:
        out.condition(
            ARTIFACT_READY, "False", REASON_HYDRATING, f"{progress}; waiting for {_names(waiting)}"
        )
        out.requeue_after(inputs.settings.poll_seconds)
    out.ready = bool(total) and ready == total and not failed
    return out
