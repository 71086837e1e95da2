"""ModelCache: footprint, fan-out, roll-up.

The team's cases C1, C3, C4, C6, C7: long names, selectors, stale conditions, partial failure.
"""

from __future__ import annotations

import copy

import pytest

from function.naming import DNS1123_LABEL, LABEL_VALUE, hydration_name, source_identity
from tests.support.fixtures import cache_spec, inference_cluster, observed_hydration
from tests.support.harness import (
    NAMESPACE,
    World,
    conditions,
    desired,
    desired_ready,
    fatal,
    request,
    requirements,
    results,
    run,
    status,
    xr,
    xr_ready,
)

C3_CLUSTERS = [
    inference_cluster("gpu-a", {"tier": "prod"}),
    inference_cluster("gpu-b", {"tier": "dev"}),
    inference_cluster("gpu-c"),
]

C4_SELECTOR = {
    "matchLabels": {"gpu": "h100"},
    "matchExpressions": [
        {"key": "region", "operator": "In", "values": ["us-east", "us-west"]},
        {"key": "tier", "operator": "NotIn", "values": ["dev"]},
        {"key": "drain", "operator": "DoesNotExist"},
    ],
}
C4_CLUSTERS = [
    inference_cluster("c1", {"gpu": "h100", "region": "us-east", "tier": "prod"}),
    inference_cluster("c2", {"gpu": "h100", "region": "us-west"}),
    inference_cluster("c3", {"gpu": "h100", "region": "us-east", "tier": "dev"}),
    inference_cluster("c4", {"gpu": "h100", "region": "eu", "tier": "prod"}),
    inference_cluster("c5", {"gpu": "h100", "region": "us-east", "drain": "true"}),
    inference_cluster("c6", {"gpu": "a100", "region": "us-east"}),
]


def cache(name="qwen-cache", selector=None, status=None, **kw):
    return xr("ModelCache", name, cache_spec(selector, **kw), status=status)


def resolved(clusters, replicas=()):
    return {"clusters": list(clusters), "replicas": list(replicas)}


def hydrated_clusters(rsp):
    return sorted(d["spec"]["clusterName"] for d in desired(rsp).values())


# ---- C3: selector semantics ------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "want"),
    [
        ({}, ["gpu-a", "gpu-b", "gpu-c"]),
        ({"matchLabels": {"tier": "prod"}}, ["gpu-a"]),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, ["gpu-a", "gpu-b"]),
        (
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}]},
            ["gpu-b", "gpu-c"],
        ),
    ],
)
def test_c3_selector_semantics(selector, want):
    rsp = run(request(cache(selector=selector), required=resolved(C3_CLUSTERS)))
    assert not fatal(rsp)
    assert hydrated_clusters(rsp) == want


def test_c3_missing_selector_is_fatal_naming_the_field():
    rsp = run(request(cache(selector=None), required=resolved(C3_CLUSTERS)))
    msgs = fatal(rsp)
    assert len(msgs) == 1 and "spec.clusterSelector" in msgs[0]
    assert not rsp.desired.resources


def test_c3_no_cluster_at_all():
    rsp = run(request(cache(selector={}), required=resolved([])))
    assert not desired(rsp)
    c = conditions(rsp)
    assert c["ArtifactReady"]["status"] == "False"
    assert c["ArtifactReady"]["reason"] == "NoMatchingClusters"
    assert c["ClustersMatched"]["reason"] == "NoMatchingClusters"
    assert xr_ready(rsp) == "READY_FALSE"
    assert status(rsp)["summary"]["ready"] == "0/0"


# ---- C4: matchExpressions filtered locally ----------------------------------------


def test_c4_requirement_carries_only_match_labels():
    rsp = run(request(cache(selector=C4_SELECTOR)))
    req = requirements(rsp)["clusters"]
    assert req["kind"] == "InferenceCluster"
    assert req["matchLabels"] == {"labels": {"gpu": "h100"}}
    assert "namespace" not in req


def test_c4_selected_set_is_exact():
    # Crossplane would only send the matchLabels matches; send all to prove local filtering.
    rsp = run(request(cache(selector=C4_SELECTOR), required=resolved(C4_CLUSTERS)))
    assert hydrated_clusters(rsp) == ["c1", "c2"]


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        (
            {"key": "region", "operator": "Matches", "values": ["x"]},
            "spec.clusterSelector.matchExpressions[0].operator",
        ),
        (
            {"key": "region", "operator": "In", "values": []},
            "spec.clusterSelector.matchExpressions[0].values",
        ),
        ({"key": "region", "operator": "NotIn"}, "spec.clusterSelector.matchExpressions[0].values"),
        (
            {"key": "region", "operator": "Exists", "values": ["x"]},
            "spec.clusterSelector.matchExpressions[0].values",
        ),
        ({"key": "bad key!", "operator": "Exists"}, "spec.clusterSelector.matchExpressions[0].key"),
    ],
)
def test_c4_malformed_selector_is_fatal_and_touches_nothing(expr, field):
    good = run(request(cache(selector={}), required=resolved(C4_CLUSTERS)))
    observed = {k: observed_hydration(v, "Ready") for k, v in desired(good).items()}
    rsp = run(
        request(
            cache(selector={"matchExpressions": [expr]}),
            observed=observed,
            required=resolved(C4_CLUSTERS),
        )
    )
    msgs = fatal(rsp)
    assert len(msgs) == 1 and field in msgs[0]
    # A fatal result makes Crossplane apply nothing: the response desires no change.
    assert not rsp.desired.resources
    assert not rsp.conditions


# ---- C1: long names ---------------------------------------------------------------


def test_c1_long_names_are_valid_and_distinct():
    long_cache = "qwen2-5-72b-instruct-awq-int4-weights-shared-cache-prod"
    cluster = "gpu-cluster-us-east-1a-production-h100"
    clusters = [inference_cluster(cluster)]
    rsp = run(request(cache(long_cache, selector={}), required=resolved(clusters)))
    (body,) = desired(rsp).values()
    name = body["metadata"]["name"]
    assert len(name) <= 63 and DNS1123_LABEL.match(name)
    for k, v in body["metadata"]["labels"].items():
        assert len(v) <= 63 and LABEL_VALUE.match(v), (k, v)
    # The full value is kept in an annotation when a label value had to be shortened.
    ann = body["metadata"].get("annotations", {})
    assert (
        long_cache in ann.values()
        or body["metadata"]["labels"]["modelplane.ai/cache"] == long_cache
    )
    # Same input, same names.
    assert desired(
        run(request(cache(long_cache, selector={}), required=resolved(clusters)))
    ) == desired(rsp)
    # Two caches sharing their first 60 characters get different names.
    other = long_cache[:60] + "xyz"
    assert hydration_name(NAMESPACE, other, cluster) != name
    assert hydration_name(NAMESPACE, long_cache, cluster + "-b") != name


def test_c1_label_value_shortened_keeps_full_value():
    cluster = "gpu-cluster-" + "x" * 70
    rsp = run(request(cache(selector={}), required=resolved([inference_cluster(cluster)])))
    (body,) = desired(rsp).values()
    label = body["metadata"]["labels"]["modelplane.ai/cluster"]
    assert len(label) <= 63 and LABEL_VALUE.match(label)
    assert body["metadata"]["annotations"]["modelplane.ai/full-cluster"] == cluster
    assert body["spec"]["clusterName"] == cluster


# ---- Roll-up: C6, C7 ----------------------------------------------------------------


def _with_phases(selector, clusters, phases, status_=None):
    first = run(request(cache(selector=selector, status=status_), required=resolved(clusters)))
    observed = {}
    for k, v in desired(first).items():
        phase, msg = phases[v["spec"]["clusterName"]]
        observed[k] = observed_hydration(v, phase, msg)
    return observed


def test_c6_no_stale_message_and_byte_identical():
    clusters = [inference_cluster("gpu-a")]
    stale = {
        "conditions": [
            {
                "type": "ArtifactReady",
                "status": "False",
                "reason": "HydrationFailed",
                "message": "gpu-a: BackoffLimitExceeded",
            }
        ],
        "clusters": [{"name": "gpu-a", "phase": "Failed", "message": "BackoffLimitExceeded"}],
    }
    observed = _with_phases({}, clusters, {"gpu-a": ("Ready", "weights ready")})
    req = request(cache(selector={}, status=stale), observed=observed, required=resolved(clusters))
    rsp = run(req)
    c = conditions(rsp)["ArtifactReady"]
    assert c == {"status": "True", "reason": "Hydrated", "message": "1/1 clusters ready"}
    assert xr_ready(rsp) == "READY_TRUE"
    assert run(req).SerializeToString(deterministic=True) == rsp.SerializeToString(
        deterministic=True
    )
    # The transition Failed -> Ready is an event once.
    assert ("Normal", "hydration finished on gpu-a") in results(rsp)


def test_c7_partial_failure_is_not_success():
    clusters = [inference_cluster(n) for n in ("gpu-a", "gpu-b", "gpu-c")]
    phases = {
        "gpu-a": ("Ready", ""),
        "gpu-b": ("Ready", ""),
        "gpu-c": ("Failed", "Job DeadlineExceeded"),
    }
    observed = _with_phases({}, clusters, phases)
    rsp = run(request(cache(selector={}), observed=observed, required=resolved(clusters)))
    c = conditions(rsp)["ArtifactReady"]
    assert c["status"] == "False" and c["reason"] == "HydrationFailed"
    assert "gpu-c" in c["message"] and "gpu-a" not in c["message"]
    st = status(rsp)
    assert st["summary"]["ready"] == "2/3"
    by_name = {e["name"]: e for e in st["clusters"]}
    assert by_name["gpu-c"]["message"] == "Job DeadlineExceeded"
    assert by_name["gpu-c"]["phase"] == "Failed"
    assert xr_ready(rsp) == "READY_FALSE"
    ready = desired_ready(rsp)
    assert sorted(v for v in ready.values()) == ["READY_FALSE", "READY_TRUE", "READY_TRUE"]


def test_hydrating_requeues_and_says_what_it_waits_for():
    clusters = [inference_cluster(n) for n in ("gpu-a", "gpu-b")]
    observed = _with_phases(
        {}, clusters, {"gpu-a": ("Ready", ""), "gpu-b": ("Hydrating", "Job running")}
    )
    rsp = run(request(cache(selector={}), observed=observed, required=resolved(clusters)))
    c = conditions(rsp)["ArtifactReady"]
    assert c["reason"] == "Hydrating" and "1/2" in c["message"] and "gpu-b" in c["message"]
    assert rsp.meta.ttl.seconds <= 60


# ---- Unresolved is not empty; nothing deleted by surprise ---------------------------


def test_unresolved_clusters_keep_every_child():
    clusters = [inference_cluster(n) for n in ("gpu-a", "gpu-b")]
    observed = _with_phases({}, clusters, {"gpu-a": ("Ready", ""), "gpu-b": ("Ready", "")})
    rsp = run(request(cache(selector={}), observed=observed, required={}))
    assert set(desired(rsp)) == set(observed)
    for k, body in desired(rsp).items():
        assert body["spec"] == observed[k]["spec"]
        assert "status" not in body
    assert conditions(rsp)["ArtifactReady"]["status"] == "Unknown"
    assert not fatal(rsp)


def test_unhostable_cluster_is_listed_not_stamped():
    clusters = [
        inference_cluster("gpu-a"),
        inference_cluster("gpu-b", ready=False),
        inference_cluster("gpu-c", storage_class=None),
    ]
    rsp = run(request(cache(selector={}), required=resolved(clusters)))
    assert hydrated_clusters(rsp) == ["gpu-a"]
    by_name = {e["name"]: e for e in status(rsp)["clusters"]}
    assert by_name["gpu-b"]["phase"] == "Unavailable" and "not Ready" in by_name["gpu-b"]["message"]
    assert "storageClassName" in by_name["gpu-c"]["message"]
    assert "gpu-b" in conditions(rsp)["ClustersMatched"]["message"]


def test_existing_hydration_survives_cluster_turning_unready():
    clusters = [inference_cluster("gpu-a")]
    observed = _with_phases({}, clusters, {"gpu-a": ("Ready", "")})
    rsp = run(
        request(
            cache(selector={}),
            observed=observed,
            required=resolved([inference_cluster("gpu-a", ready=False)]),
        )
    )
    assert hydrated_clusters(rsp) == ["gpu-a"]


def _replica(name, cluster, cache_name="qwen-cache"):
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"clusterName": cluster, "modelCacheRef": {"name": cache_name}},
    }


def test_cluster_that_stops_matching_loses_its_hydration_unless_a_replica_runs_there():
    both = [
        inference_cluster("gpu-a", {"tier": "prod"}),
        inference_cluster("gpu-b", {"tier": "prod"}),
    ]
    observed = _with_phases({}, both, {"gpu-a": ("Ready", ""), "gpu-b": ("Ready", "")})
    now = [
        inference_cluster("gpu-a", {"tier": "prod"}),
        inference_cluster("gpu-b", {"tier": "dev"}),
    ]
    sel = {"matchLabels": {"tier": "prod"}}
    # No replica there: dropped.
    rsp = run(request(cache(selector=sel), observed=observed, required=resolved(now)))
    assert hydrated_clusters(rsp) == ["gpu-a"]
    # A replica of another cache there does not count.
    rsp = run(
        request(
            cache(selector=sel),
            observed=observed,
            required=resolved(now, [_replica("r0", "gpu-b", "other")]),
        )
    )
    assert hydrated_clusters(rsp) == ["gpu-a"]
    # A live replica of this cache keeps it, and status says why.
    rsp = run(
        request(
            cache(selector=sel),
            observed=observed,
            required=resolved(now, [_replica("chat-0", "gpu-b")]),
        )
    )
    assert hydrated_clusters(rsp) == ["gpu-a", "gpu-b"]
    entry = next(e for e in status(rsp)["clusters"] if e["name"] == "gpu-b")
    assert entry["retained"] is True and "chat-0" in entry["message"]
    assert status(rsp)["summary"]["ready"] == "1/1"
    # Replicas not resolved yet: not known, so kept.
    rsp = run(request(cache(selector=sel), observed=observed, required={"clusters": now}))
    assert hydrated_clusters(rsp) == ["gpu-a", "gpu-b"]


def test_events_only_on_transitions():
    clusters = [inference_cluster("gpu-a")]
    first = run(request(cache(selector={}), required=resolved(clusters)))
    assert ("Normal", "hydration started on gpu-a") in results(first)
    observed = {k: observed_hydration(v, "Hydrating") for k, v in desired(first).items()}
    prev = {"clusters": [{"name": "gpu-a", "phase": "Hydrating", "message": "x"}]}
    steady = run(
        request(cache(selector={}, status=prev), observed=observed, required=resolved(clusters))
    )
    assert results(steady) == []
    failed = {
        k: observed_hydration(v, "Failed", "BackoffLimitExceeded") for k, v in observed.items()
    }
    rsp = run(
        request(cache(selector={}, status=prev), observed=failed, required=resolved(clusters))
    )
    assert ("Warning", "hydration failed on gpu-a: BackoffLimitExceeded") in results(rsp)


def test_source_is_copied_down_without_secret_values():
    spec_hf = {"authSecret": {"name": "hf-token"}}
    rsp = run(
        request(cache(selector={}, **spec_hf), required=resolved([inference_cluster("gpu-a")]))
    )
    (body,) = desired(rsp).values()
    hf = body["spec"]["huggingFace"]
    assert hf["authSecret"] == {"name": "hf-token", "key": "HF_TOKEN"}
    assert body["spec"]["cacheName"] == "qwen-cache"
    assert body["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize(
    ("hf", "field"),
    [
        ({"repo": "not a repo"}, "spec.huggingFace.repo"),
        ({"sizeGiB": -1}, "spec.huggingFace.sizeGiB"),
        ({"authSecret": {"name": "Bad_Name"}}, "spec.huggingFace.authSecret.name"),
    ],
)
def test_invalid_source_is_fatal_naming_the_field(hf, field):
    rsp = run(request(cache(selector={}, **hf), required=resolved(C3_CLUSTERS)))
    msgs = fatal(rsp)
    assert len(msgs) == 1 and field in msgs[0], msgs


# ---- Over gRPC, through the requirements loop ----------------------------------------


def test_requirements_loop_over_grpc(grpc_function):
    world = World([*C4_CLUSTERS, _replica("x", "c1", "other")])
    composite = cache(selector=C4_SELECTOR)
    rsp, calls = grpc_function.drive(composite, world)
    assert 2 <= calls <= 6
    assert hydrated_clusters(rsp) == ["c1", "c2"]
    # Same answer as in-process.
    local = run(request(composite, required={"clusters": C4_CLUSTERS, "replicas": []}))
    assert desired(local) == desired(rsp)
    # Deterministic across calls over the wire.
    again, _ = grpc_function.drive(copy.deepcopy(composite), world)
    assert again.SerializeToString(deterministic=True) == rsp.SerializeToString(deterministic=True)


def test_fleet_wide_transitions_are_one_event_each():
    clusters = [inference_cluster(f"gpu-{i:02d}") for i in range(12)]
    rsp = run(request(cache(selector={}), required=resolved(clusters)))
    started = [m for s, m in results(rsp) if "started" in m]
    assert started == ["hydration started on gpu-00, gpu-01, gpu-02, gpu-03, gpu-04 and 7 more"]


def test_steady_state_status_is_the_same_whether_reused_or_rebuilt():
    clusters = [inference_cluster(n) for n in ("gpu-a", "gpu-b", "gpu-c")]
    phases = {
        "gpu-a": ("Ready", "ok"),
        "gpu-b": ("Hydrating", "Job running"),
        "gpu-c": ("Ready", ""),
    }
    observed = _with_phases({}, clusters, phases)
    fresh = run(request(cache(selector={}), observed=observed, required=resolved(clusters)))
    # The status the function wrote becomes the XR's; the next call reuses its list.
    again = run(
        request(
            cache(selector={}, status=status(fresh)), observed=observed, required=resolved(clusters)
        )
    )
    assert status(again) == status(fresh)
    # A changed message is not hidden by the reuse.
    observed2 = dict(observed)
    key = next(k for k, v in observed.items() if v["spec"]["clusterName"] == "gpu-b")
    observed2[key] = observed_hydration(observed[key], "Hydrating", "Job running: 40%")
    changed = run(
        request(
            cache(selector={}, status=status(fresh)),
            observed=observed2,
            required=resolved(clusters),
        )
    )
    entry = next(e for e in status(changed)["clusters"] if e["name"] == "gpu-b")
    assert entry["message"] == "Job running: 40%"
    # An entry carrying a field this function does not write is rebuilt, not kept.
    stale = status(fresh)
    stale["clusters"][0]["note"] = "edited by hand"
    rebuilt = run(
        request(cache(selector={}, status=stale), observed=observed, required=resolved(clusters))
    )
    assert "note" not in status(rebuilt)["clusters"][0]


# ---- A source edit is never reported from stale evidence (issue 13) ------------------

# (case, what the hydration's status says: (phase, reported revision or None for no
# status.source), the cluster's phase in the roll-up, ArtifactReady reason)
STALE_CASES = [
    ("current identity Ready counts", ("Ready", "v2"), "Ready", "Hydrated"),
    ("old revision Ready is not Ready", ("Ready", "main"), "Pending", "Hydrating"),
    ("old revision Failed is not a failure of v2", ("Failed", "main"), "Pending", "Hydrating"),
    ("status without a source is not known", ("Ready", None), "Pending", "Hydrating"),
    ("current identity Failed fails", ("Failed", "v2"), "Failed", "HydrationFailed"),
]


def _edited_to_v2(phase, reported):
    """A cache edited from revision main to v2, its hydration reporting ``reported``."""
    clusters = [inference_cluster("gpu-a")]
    first = run(request(cache(selector={}, revision="v2"), required=resolved(clusters)))
    ((key, body),) = desired(first).items()
    ev = {"commit": "a" * 40, "digest": "sha256:" + "b" * 64, "validatedAt": "2026-11-29T08:00:00Z"}
    extra = {"evidence": ev}
    if reported is None:
        obs = observed_hydration(body, phase, **extra)
        obs["status"].pop("source")
    else:
        src = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": reported}
        src["identity"] = source_identity(src["repo"], reported)
        obs = observed_hydration(body, phase, source=src, **extra)
    return request(
        cache(selector={}, revision="v2"), observed={key: obs}, required=resolved(clusters)
    )


@pytest.mark.parametrize("transport", ["in-process", "grpc"])
@pytest.mark.parametrize(
    "case, reported, want_phase, want_reason", STALE_CASES, ids=[c[0] for c in STALE_CASES]
)
def test_roll_up_counts_only_the_current_source_identity(
    case, reported, want_phase, want_reason, transport, grpc_function
):
    req = _edited_to_v2(*reported)
    rsp = run(req) if transport == "in-process" else grpc_function.call(req)
    st = status(rsp)
    (row,) = st["clusters"]
    assert row["phase"] == want_phase, (case, row)
    assert conditions(rsp)["ArtifactReady"]["reason"] == want_reason, case
    assert st["source"] == {
        "repo": "Qwen/Qwen2.5-0.5B-Instruct",
        "revision": "v2",
        "identity": source_identity("Qwen/Qwen2.5-0.5B-Instruct", "v2"),
    }
    if want_phase == "Pending":
        # Stale evidence is never copied up (the experiment's gate reads it).
        assert "evidence" not in row
        assert "Qwen/Qwen2.5-0.5B-Instruct@v2" in row["message"]
        assert xr_ready(rsp) == "READY_FALSE"
