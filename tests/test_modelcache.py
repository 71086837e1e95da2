"""ModelCache: footprint, fan-out, roll-up.

The team's cases C1, C3, C4, C6, C7: long names, selectors, stale conditions, partial failure.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest

from function.api.modelcache import retained_clusters
from function.naming import (
    CACHE_SHARDS,
    DNS1123_LABEL,
    LABEL_VALUE,
    cache_shard,
    hydration_name,
    label_value,
    labels_with_full,
    shard_name,
    source_identity,
)
from tests.support.cache_tree import Tree, cache, shard_clusters, shard_xr
from tests.support.fixtures import inference_cluster, observed_hydration
from tests.support.harness import (
    NAMESPACE,
    World,
    conditions,
    desired,
    fatal,
    request,
    requirements,
    results,
    run,
    status,
    xr_ready,
)
from tests.support.table import Case, table

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


def resolved(clusters):
    return {"clusters": list(clusters)}


def hydrated_clusters(rsp_or_tree):
    """The clusters that get a hydration: through the shards the cache composed."""
    if isinstance(rsp_or_tree, Tree):
        return rsp_or_tree.hydrated_clusters()
    return sorted(
        c["name"]
        for d in desired(rsp_or_tree).values()
        for c in d["spec"]["clusters"]
        if not c.get("unavailable")
    )


def grown(composite, clusters, phases=None, **extra):
    """A tree reconciled once from nothing, its hydrations then observed at ``phases``."""
    t = Tree(composite, clusters)
    t.step()
    if phases is not None:
        t.observe(phases, **extra)
        t.step()
    return t


# ---- C3: selector semantics ------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    """A cache's clusterSelector and the InferenceClusters Crossplane sends for it."""

    selector: dict[str, Any]
    clusters: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Hydrated:
    """The clusters that get a hydration, by name, sorted."""

    clusters: tuple[str, ...]


C3 = "C3: the clusterSelector has Kubernetes label-selector semantics ({} selects all)"
C4 = (
    "C4: Crossplane sends only the matchLabels matches; matchExpressions are filtered "
    "locally (all clusters are sent to prove it)"
)

SELECTED: list[Case[Fleet, Hydrated]] = [
    Case("c3-empty-selects-all", C3, Fleet({}, tuple(C3_CLUSTERS)),
         Hydrated(("gpu-a", "gpu-b", "gpu-c"))),
    Case("c3-match-labels", C3, Fleet({"matchLabels": {"tier": "prod"}}, tuple(C3_CLUSTERS)),
         Hydrated(("gpu-a",))),
    Case("c3-exists", C3,
         Fleet({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, tuple(C3_CLUSTERS)),
         Hydrated(("gpu-a", "gpu-b"))),
    Case("c3-not-in-selects-missing-key", C3,
         Fleet({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}]},
               tuple(C3_CLUSTERS)),
         Hydrated(("gpu-b", "gpu-c"))),
    Case("c4-selected-set-is-exact", C4, Fleet(C4_SELECTOR, tuple(C4_CLUSTERS)),
         Hydrated(("c1", "c2"))),
]  # fmt: skip


@table(SELECTED)
def test_selector_picks_the_hydrated_clusters(case: Case[Fleet, Hydrated]) -> None:
    rsp = run(
        request(cache(selector=case.inputs.selector), required=resolved(case.inputs.clusters))
    )
    assert not fatal(rsp), case.reason
    assert hydrated_clusters(rsp) == list(case.want.clusters), case.reason


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


@dataclass(frozen=True)
class BadSpec:
    """A cache spec (``cache()`` keywords), the clusters sent, and whether its children
    already exist (observed Ready, from the same cache with ``clusterSelector: {}``)."""

    spec: dict[str, Any]
    clusters: tuple[dict[str, Any], ...]
    children: bool = False


@dataclass(frozen=True)
class Fatal:
    """One fatal result naming ``field``; nothing desired, no condition."""

    field: str


FATAL = "bad input is one fatal result naming the field, and the response desires no change"
MALFORMED = (
    "C4: a malformed matchExpression is fatal and touches nothing: with a fatal result "
    "Crossplane applies nothing, so existing hydrations stay"
)
EXPR = "spec.clusterSelector.matchExpressions[0]"


def malformed(expr: dict[str, Any]) -> BadSpec:
    return BadSpec({"selector": {"matchExpressions": [expr]}}, tuple(C4_CLUSTERS), children=True)


def source(**hf: Any) -> BadSpec:
    return BadSpec({"selector": {}, **hf}, tuple(C3_CLUSTERS))


FATALS: list[Case[BadSpec, Fatal]] = [
    Case("c3-missing-selector", FATAL, BadSpec({"selector": None}, tuple(C3_CLUSTERS)),
         Fatal("spec.clusterSelector")),
    Case("c4-unknown-operator", MALFORMED,
         malformed({"key": "region", "operator": "Matches", "values": ["x"]}),
         Fatal(f"{EXPR}.operator")),
    Case("c4-in-without-values", MALFORMED,
         malformed({"key": "region", "operator": "In", "values": []}), Fatal(f"{EXPR}.values")),
    Case("c4-not-in-without-values", MALFORMED, malformed({"key": "region", "operator": "NotIn"}),
         Fatal(f"{EXPR}.values")),
    Case("c4-exists-with-values", MALFORMED,
         malformed({"key": "region", "operator": "Exists", "values": ["x"]}),
         Fatal(f"{EXPR}.values")),
    Case("c4-bad-key", MALFORMED, malformed({"key": "bad key!", "operator": "Exists"}),
         Fatal(f"{EXPR}.key")),
    Case("source-bad-repo", FATAL, source(repo="not a repo"), Fatal("spec.huggingFace.repo")),
    Case("source-negative-size", FATAL, source(sizeGiB=-1), Fatal("spec.huggingFace.sizeGiB")),
    Case("source-bad-secret-name", FATAL, source(authSecret={"name": "Bad_Name"}),
         Fatal("spec.huggingFace.authSecret.name")),
    # Review 16b: the pattern took "hf..token" and "hf.-token", which no Secret can be
    # named (Kubernetes' DNS-1123 subdomain, function.core.k8svalidation).
    Case("source-secret-name-two-dots", FATAL, source(authSecret={"name": "hf..token"}),
         Fatal("spec.huggingFace.authSecret.name")),
    Case("source-secret-name-dot-dash", FATAL, source(authSecret={"name": "hf.-token"}),
         Fatal("spec.huggingFace.authSecret.name")),
    # A trial: "-x" became the download program's option and failed the Job after every
    # retry, naming nothing.
    Case("source-revision-an-option", FATAL, source(revision="-x"),
         Fatal("spec.huggingFace.revision")),
    Case("source-revision-with-a-space", FATAL, source(revision="main --force"),
         Fatal("spec.huggingFace.revision")),
]  # fmt: skip


@table(FATALS)
def test_bad_spec_is_fatal_naming_the_field_and_touches_nothing(
    case: Case[BadSpec, Fatal],
) -> None:
    clusters = resolved(case.inputs.clusters)
    observed = {}
    if case.inputs.children:
        good = run(request(cache(selector={}), required=clusters))
        observed = {k: observed_hydration(v, "Ready") for k, v in desired(good).items()}
        assert observed, "the cache must have children for this row to test keeping them"
    rsp = run(request(cache(**case.inputs.spec), observed=observed, required=clusters))
    msgs = fatal(rsp)
    assert len(msgs) == 1 and case.want.field in msgs[0], (case.reason, msgs)
    # A fatal result makes Crossplane apply nothing: the response desires no change.
    assert not rsp.desired.resources, case.reason
    assert not rsp.conditions, case.reason


# ---- C1: long names ---------------------------------------------------------------


def test_c1_long_names_are_valid_and_distinct():
    long_cache = "qwen2-5-72b-instruct-awq-int4-weights-shared-cache-prod"
    cluster = "gpu-cluster-us-east-1a-production-h100"
    t = grown(cache(long_cache, selector={}), [inference_cluster(cluster)])
    (shard,) = t.shards.values()
    body = t.desired_hydrations()[cluster]
    for b in (shard, body):
        name = b["metadata"]["name"]
        assert len(name) <= 63 and DNS1123_LABEL.match(name)
        for k, v in b["metadata"]["labels"].items():
            assert len(v) <= 63 and LABEL_VALUE.match(v), (k, v)
    name = body["metadata"]["name"]
    assert name == hydration_name(NAMESPACE, long_cache, cluster)
    assert shard["metadata"]["name"] == shard_name(NAMESPACE, long_cache, cache_shard(cluster))
    # The full value is kept in an annotation when a label value had to be shortened.
    ann = body["metadata"].get("annotations", {})
    assert (
        long_cache in ann.values()
        or body["metadata"]["labels"]["modelplane.ai/cache"] == long_cache
    )
    # Same input, same names.
    again = grown(cache(long_cache, selector={}), [inference_cluster(cluster)])
    assert again.desired_hydrations() == t.desired_hydrations()
    # Two caches sharing their first 60 characters get different names.
    other = long_cache[:60] + "xyz"
    assert hydration_name(NAMESPACE, other, cluster) != name
    assert hydration_name(NAMESPACE, long_cache, cluster + "-b") != name


def test_c1_label_value_shortened_keeps_full_value():
    cluster = "gpu-cluster-" + "x" * 70
    t = grown(cache(selector={}), [inference_cluster(cluster)])
    body = t.desired_hydrations()[cluster]
    label = body["metadata"]["labels"]["modelplane.ai/cluster"]
    assert len(label) <= 63 and LABEL_VALUE.match(label)
    assert body["metadata"]["annotations"]["modelplane.ai/full-cluster"] == cluster
    assert body["spec"]["clusterName"] == cluster


# ---- Shards (issue 17) ----------------------------------------------------------------


def test_a_cluster_shard_depends_on_its_name_only():
    names = [f"gpu-{i:05d}" for i in range(2000)]
    small = grown(cache(selector={}), [inference_cluster(n) for n in names[:40]])
    large = Tree(cache(selector={}), [inference_cluster(n) for n in names])
    large.reconcile_cache()
    where_small = {
        c["name"]: d["spec"]["shard"] for d in small.shards.values() for c in d["spec"]["clusters"]
    }
    where_large = {
        c["name"]: d["spec"]["shard"] for d in large.shards.values() for c in d["spec"]["clusters"]
    }
    # Growing the fleet 50-fold moves no cluster to another shard.
    assert all(where_large[n] == s for n, s in where_small.items())
    assert all(s == cache_shard(n) for n, s in where_large.items())
    assert len(large.shards) == CACHE_SHARDS
    for d in large.shards.values():
        names_in = [c["name"] for c in d["spec"]["clusters"]]
        assert names_in == sorted(names_in)
        assert d["metadata"]["labels"]["modelplane.ai/shard"] == str(int(d["spec"]["shard"]))


def test_a_shard_whose_clusters_all_left_drains_before_it_goes():
    a, b = (
        inference_cluster("gpu-a", {"tier": "prod"}),
        inference_cluster("gpu-b", {"tier": "prod"}),
    )
    assert cache_shard("gpu-a") != cache_shard("gpu-b")
    t = grown(cache(selector={}), [a, b], {"gpu-a": ("Ready", ""), "gpu-b": ("Ready", "")})
    assert t.rsp.desired.composite.ready == 1  # READY_TRUE
    key_b = f"shard-{cache_shard('gpu-b')}"
    # gpu-b leaves the selector while a live replica of this cache runs there.
    t.xr = cache(selector={"matchLabels": {"tier": "prod"}}, status=t.xr["status"])
    t.clusters = [a, inference_cluster("gpu-b", {"tier": "dev"})]
    t.replicas = [_replica("chat-0", "gpu-b")]
    t.reconcile_cache()
    assert t.shards[key_b]["spec"]["clusters"] == []
    t.reconcile_shards()
    assert "gpu-b" in t.hydrated_clusters()
    t.reconcile_cache()
    assert key_b in t.shards, "a shard holding a retained hydration was dropped"
    st = status(t.rsp)
    assert [e["name"] for e in st["retained"]] == ["gpu-b"]
    assert "chat-0" in st["retained"][0]["message"]
    assert st["summary"]["ready"] == "1/1"
    # The replica is gone: the shard lets go, then the cache drops the empty shard once
    # the shard has seen its hydration gone (Crossplane deletes it meanwhile).
    t.replicas = []
    t.reconcile_shards()
    assert "gpu-b" not in t.hydrated_clusters()
    assert t.rows()["gpu-b"]["phase"] == "Deleting"
    t.reconcile_cache()
    assert key_b in t.shards, "a shard whose hydration is still being deleted was dropped"
    t.reconcile_shards()
    assert "gpu-b" not in t.rows()
    t.reconcile_cache()
    assert key_b not in t.shards
    assert status(t.rsp)["retained"] == []


@dataclass(frozen=True)
class DrainReport:
    """The status a draining shard (told ``spec.clusters: []``) is observed with: which
    spec its ``specHash`` describes and the hydrations it says it keeps."""

    spec: str  # "drain" (no clusters, current source), "old" (with its cluster), "none",
    # "drain-other-source" (no clusters, the previous revision)
    hydrations: int


DRAIN = (
    "a draining shard is dropped only on a report of the spec it drains with (review 14b "
    "#5): an older status's hydrations: 0 says nothing of the hydration a live replica keeps"
)
DRAIN_REPORTS: list[Case[DrainReport, bool]] = [
    Case("drain-spec-no-hydration", DRAIN, DrainReport("drain", 0), False),
    Case("drain-spec-keeps-one", DRAIN, DrainReport("drain", 1), True),
    Case("older-spec-no-hydration", DRAIN, DrainReport("old", 0), True),
    Case("no-spec-hash", DRAIN, DrainReport("none", 0), True),
    Case("drain-spec-other-source", DRAIN, DrainReport("drain-other-source", 0), True),
]  # fmt: skip


@table(DRAIN_REPORTS)
def test_a_draining_shard_goes_only_on_a_report_of_its_drain_spec(
    case: Case[DrainReport, bool],
) -> None:
    from function.api.modelcacheshard import spec_hash

    a = inference_cluster("gpu-a", {"tier": "prod"})
    b = inference_cluster("gpu-b", {"tier": "prod"})
    t = grown(cache(selector={}), [a, b], {"gpu-a": ("Ready", ""), "gpu-b": ("Ready", "")})
    n = cache_shard("gpu-b")
    key_b = f"shard-{n}"
    old_hash = t.shard_status[key_b]["specHash"]
    t.xr = cache(selector={"matchLabels": {"tier": "prod"}}, status=t.xr["status"])
    t.clusters = [a, inference_cluster("gpu-b", {"tier": "dev"})]
    t.replicas = [_replica("chat-0", "gpu-b")]
    t.reconcile_cache()
    assert t.shards[key_b]["spec"]["clusters"] == []
    identity = source_identity("Qwen/Qwen2.5-0.5B-Instruct", "main")
    assert status(t.rsp)["source"]["identity"] == identity
    hashes = {
        "drain": spec_hash(identity, n, ()),
        "old": old_hash,
        "none": "",
        "drain-other-source": spec_hash(source_identity("Qwen/Qwen2.5-0.5B-Instruct", "v1"), n, ()),
    }
    st = copy.deepcopy(t.shard_status[key_b])
    st["specHash"] = hashes[case.inputs.spec]
    st["summary"]["hydrations"] = case.inputs.hydrations
    t.shard_status[key_b] = st
    t.reconcile_cache()
    assert (key_b in t.shards) is case.want, case.reason


def test_an_unreported_shard_is_not_ready():
    clusters = [inference_cluster("gpu-a")]
    t = grown(cache(selector={}), clusters, {"gpu-a": ("Ready", "")})
    assert conditions(t.rsp)["ArtifactReady"]["reason"] == "Hydrated"
    # The shard's status describes another footprint (a cluster was added): not known.
    k = next(iter(t.shard_status))
    t.shard_status[k]["specHash"] = "0" * 12
    t.shard_status[k]["namesHash"] = "0" * 12
    rsp = t.reconcile_cache()
    c = conditions(rsp)["ArtifactReady"]
    assert c["status"] == "False" and "not yet reporting" in c["message"], c
    assert xr_ready(rsp) == "READY_FALSE"


def _two_in_one_shard() -> list[str]:
    """Two cluster names of the same shard."""
    return shard_clusters(2, shard=5)


def test_a_cluster_turning_unavailable_keeps_its_shard_counted() -> None:
    """Found by a trial: a cluster's InferenceCluster turning not Ready (its Ready
    hydration kept) read every cluster of its shard Pending until the shard caught up:
    the cache went not Ready and announced its unchanged roll-up again. Only clusters'
    availability changed, so the shard's status still describes the footprint."""
    a, b = _two_in_one_shard()
    t = grown(
        cache(selector={}),
        [inference_cluster(a), inference_cluster(b)],
        {a: ("Ready", ""), b: ("Ready", "")},
    )
    assert conditions(t.rsp)["ArtifactReady"]["reason"] == "Hydrated"
    t.clusters = [inference_cluster(a), inference_cluster(b, ready=False)]
    rsp = t.reconcile_cache()  # before the shard reconciles
    c = conditions(rsp)["ArtifactReady"]
    assert (c["status"], c["message"]) == ("True", "2/2 clusters ready"), c
    assert xr_ready(rsp) == "READY_TRUE" and not results(rsp)
    t.reconcile_shards()
    rsp = t.reconcile_cache()
    assert conditions(rsp)["ArtifactReady"]["status"] == "True" and not results(rsp)
    # and back
    t.clusters = [inference_cluster(a), inference_cluster(b)]
    rsp = t.reconcile_cache()
    assert conditions(rsp)["ArtifactReady"]["status"] == "True" and not results(rsp)


def test_a_cluster_counted_unavailable_turning_available_is_not_known() -> None:
    """A cluster without a hydration that becomes available gets one: until its shard
    reports, the cache is not Ready (the status counted it out of the total)."""
    a, b = _two_in_one_shard()
    t = grown(
        cache(selector={}),
        [inference_cluster(a), inference_cluster(b, ready=False)],
        {a: ("Ready", "")},
    )
    assert conditions(t.rsp)["ArtifactReady"]["message"] == "1/1 clusters ready"
    t.clusters = [inference_cluster(a), inference_cluster(b)]
    rsp = t.reconcile_cache()
    c = conditions(rsp)["ArtifactReady"]
    assert c["status"] == "False" and "not yet reporting" in c["message"], c
    assert xr_ready(rsp) == "READY_FALSE"


# ---- Roll-up: C6, C7 ----------------------------------------------------------------


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
        "summary": {"phases": {"Failed": 1}},
    }
    t = grown(cache(selector={}, status=stale), clusters, {"gpu-a": ("Ready", "weights ready")})
    t.xr["status"] = stale
    t.reconcile_shards()
    req = request(t.xr, observed=t.observed_shards(), required=resolved(clusters))
    rsp = run(req)
    c = conditions(rsp)["ArtifactReady"]
    assert c == {"status": "True", "reason": "Hydrated", "message": "1/1 clusters ready"}
    assert xr_ready(rsp) == "READY_TRUE"
    assert run(req).SerializeToString(deterministic=True) == rsp.SerializeToString(
        deterministic=True
    )
    # The transition to all Ready is an event once.
    assert ("Normal", "hydration finished on all 1 clusters") in results(rsp)


def test_c7_partial_failure_is_not_success():
    clusters = [inference_cluster(n) for n in ("gpu-a", "gpu-b", "gpu-c")]
    phases = {
        "gpu-a": ("Ready", ""),
        "gpu-b": ("Ready", ""),
        "gpu-c": ("Failed", "Job DeadlineExceeded"),
    }
    t = grown(cache(selector={}), clusters, phases)
    c = conditions(t.rsp)["ArtifactReady"]
    assert c["status"] == "False" and c["reason"] == "HydrationFailed"
    assert "gpu-c" in c["message"] and "gpu-a" not in c["message"]
    st = status(t.rsp)
    assert st["summary"]["ready"] == "2/3"
    assert st["summary"]["phases"]["Failed"] == 1
    assert st["failed"] == [{"name": "gpu-c", "message": "Job DeadlineExceeded"}]
    assert t.rows()["gpu-c"]["phase"] == "Failed"
    assert xr_ready(t.rsp) == "READY_FALSE"
    assert sorted(t.hydration_ready().values()) == ["READY_FALSE", "READY_TRUE", "READY_TRUE"]


def test_hydrating_requeues_and_says_what_it_waits_for():
    clusters = [inference_cluster(n) for n in ("gpu-a", "gpu-b")]
    t = grown(
        cache(selector={}),
        clusters,
        {"gpu-a": ("Ready", ""), "gpu-b": ("Hydrating", "Job running")},
    )
    c = conditions(t.rsp)["ArtifactReady"]
    assert c["reason"] == "Hydrating" and "1/2" in c["message"] and "gpu-b" in c["message"]
    assert t.rsp.meta.ttl.seconds <= 60


def test_evidence_is_rolled_up_per_artifact_not_per_cluster():
    clusters = [inference_cluster(f"gpu-{i:02d}") for i in range(12)]
    ev = {"commit": "a" * 40, "digest": "b" * 64, "validatedAt": "2026-11-29T08:00:00Z"}
    t = grown(
        cache(selector={}),
        clusters,
        {c["metadata"]["name"]: ("Ready", "") for c in clusters},
        evidence=ev,
    )
    st = status(t.rsp)
    assert st["evidence"] == [
        {"commit": "a" * 40, "digest": "sha256:" + "b" * 64, "clusters": 12, "validated": 12}
    ]
    assert st["summary"]["artifacts"] == 1
    assert "clusters" not in st  # no per-cluster rows in the cache


# ---- Unresolved is not empty; nothing deleted by surprise ---------------------------


def test_unresolved_clusters_keep_every_child():
    clusters = [inference_cluster(n) for n in ("gpu-a", "gpu-b")]
    t = grown(cache(selector={}), clusters, {"gpu-a": ("Ready", ""), "gpu-b": ("Ready", "")})
    observed = t.observed_shards()
    rsp = run(request(t.xr, observed=observed, required={}))
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
    t = grown(cache(selector={}), clusters)
    assert hydrated_clusters(t) == ["gpu-a"]
    by_name = {e["name"]: e for e in status(t.rsp)["unavailable"]}
    assert "not Ready" in by_name["gpu-b"]["message"]
    assert "storageClassName" in by_name["gpu-c"]["message"]
    assert t.rows()["gpu-b"]["phase"] == "Unavailable"
    assert status(t.rsp)["summary"]["phases"]["Unavailable"] == 2
    assert "gpu-b" in conditions(t.rsp)["ClustersMatched"]["message"]


def test_existing_hydration_survives_cluster_turning_unready():
    t = grown(cache(selector={}), [inference_cluster("gpu-a")], {"gpu-a": ("Ready", "")})
    t.clusters = [inference_cluster("gpu-a", ready=False)]
    t.step()
    assert hydrated_clusters(t) == ["gpu-a"]


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
    now = [
        inference_cluster("gpu-a", {"tier": "prod"}),
        inference_cluster("gpu-b", {"tier": "dev"}),
    ]
    sel = {"matchLabels": {"tier": "prod"}}

    def after(replicas):
        t = grown(cache(selector={}), both, {"gpu-a": ("Ready", ""), "gpu-b": ("Ready", "")})
        t.xr = cache(selector=sel, status=t.xr["status"])
        t.clusters, t.replicas = now, replicas
        t.step()
        return t

    # No replica there: dropped.
    assert hydrated_clusters(after([])) == ["gpu-a"]
    # A replica of another cache there does not count.
    assert hydrated_clusters(after([_replica("r0", "gpu-b", "other")])) == ["gpu-a"]
    # A live replica of this cache keeps it, and status says why.
    t = after([_replica("chat-0", "gpu-b")])
    assert hydrated_clusters(t) == ["gpu-a", "gpu-b"]
    entry = t.rows()["gpu-b"]
    assert entry["retained"] is True and "chat-0" in entry["message"]
    assert status(t.rsp)["summary"]["ready"] == "1/1"
    assert retained_clusters(t.xr) == frozenset({"gpu-b"})
    # Replicas not resolved yet: not known, so kept.
    assert hydrated_clusters(after(None)) == ["gpu-a", "gpu-b"]


def _leaving_replica(name, cluster, leaving="qwen-cache", *, deleting=False):
    """A replica its deployment moved onto ``llama-cache`` while its old pods still mount
    ``leaving``'s PVC: spec, labels and annotations as the deployment writes them
    (``naming.labels_with_full``: a long name's label shortened, the full name kept)."""
    body = _replica(name, cluster, "llama-cache")
    labels, ann = labels_with_full(
        {"modelplane.ai/cache": "llama-cache", "modelplane.ai/leaving-cache": leaving}
    )
    body["metadata"]["labels"] = labels
    if ann:
        body["metadata"]["annotations"] = ann
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    return body


LONG_CACHE = "qwen-cache-" + "x" * 70
SHORT_CACHE = label_value(LONG_CACHE)  # a valid name: equals LONG_CACHE's label


class Leaving(NamedTuple):
    """The cache whose selector drops gpu-b, and the namespace's replicas meanwhile."""

    cache: str
    replicas: list[dict[str, Any]]


LEAVING_CASES = [
    Case(
        "rolling-off-this-cache",
        "review 17l F2: the deployment moved the replica onto another cache, its roll "
        "stalls, its old pods still mount this cache's PVC there: the hydration is "
        "retained, and the status names the replica",
        Leaving("qwen-cache", [_leaving_replica("chat-0", "gpu-b")]),
        "chat-0",
    ),
    Case(
        "rolling-off-a-long-named-cache",
        "a long cache name: the label is shortened, the full name (annotation) matches",
        Leaving(LONG_CACHE, [_leaving_replica("chat-0", "gpu-b", LONG_CACHE)]),
        "chat-0",
    ),
    Case(
        "rolled-off",
        "the roll is done: the deployment dropped the leaving label, the spec names the "
        "other cache: released",
        Leaving("qwen-cache", [_replica("chat-0", "gpu-b", "llama-cache")]),
        None,
    ),
    Case(
        "leaving-another-cache-whose-label-is-this-name",
        "a replica leaving a long-named cache whose shortened label is this cache's "
        "name: the full names are compared, it keeps nothing here",
        Leaving(SHORT_CACHE, [_leaving_replica("chat-0", "gpu-b", LONG_CACHE)]),
        None,
    ),
    Case(
        "leaving-and-being-deleted",
        "a replica being deleted keeps nothing (as one of this cache)",
        Leaving("qwen-cache", [_leaving_replica("chat-0", "gpu-b", deleting=True)]),
        None,
    ),
]


@table(LEAVING_CASES)
def test_a_replica_rolling_off_the_cache_retains_its_hydration(case: Case[Leaving, Any]):
    both = [
        inference_cluster("gpu-a", {"tier": "prod"}),
        inference_cluster("gpu-b", {"tier": "prod"}),
    ]
    name = case.inputs.cache
    t = grown(cache(name, selector={}), both, {"gpu-a": ("Ready", ""), "gpu-b": ("Ready", "")})
    # The cache's selector drops gpu-b while the replica there rolls off the cache.
    t.xr = cache(name, selector={"matchLabels": {"tier": "prod"}}, status=t.xr["status"])
    t.clusters = [both[0], inference_cluster("gpu-b", {"tier": "dev"})]
    t.replicas = case.inputs.replicas
    # Then its roll completes (the deployment drops the label): the hydration is released.
    _assert_gpu_b_kept_until(t, case, [_replica(case.want, "gpu-b", "llama-cache")])


def _assert_gpu_b_kept_until(t, case, moved):
    """gpu-b has left the footprint: after a step, its hydration is dropped when no live
    replica runs there (``case.want`` None), else retained (its row names the replica
    ``case.want``) until ``moved`` replaces the replicas, then released."""
    t.step()
    if case.want is None:
        assert hydrated_clusters(t) == ["gpu-a"], case.reason
        assert retained_clusters(t.xr) == frozenset(), case.reason
        return
    assert hydrated_clusters(t) == ["gpu-a", "gpu-b"], case.reason
    entry = t.rows()["gpu-b"]
    assert entry["retained"] is True and case.want in entry["message"], entry
    assert retained_clusters(t.xr) == frozenset({"gpu-b"})
    t.replicas = moved
    t.step()
    assert hydrated_clusters(t) == ["gpu-a"]
    assert retained_clusters(t.xr) == frozenset()


def _deleting_cluster(name: str) -> dict[str, Any]:
    """An InferenceCluster as the API server holds it during a foreground deletion
    (``kubectl delete --cascade=foreground``, Argo CD's default prune): deletionTimestamp,
    the foregroundDeletion finalizer, and the ``Ready=False, reason Deleting`` Crossplane
    writes (it calls no function for an XR being deleted), the rest of its status as
    last written."""
    ic = inference_cluster(name)
    ic["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    ic["metadata"]["finalizers"] = ["foregroundDeletion"]
    ic["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Deleting"}]
    return ic


DELETING_CLUSTER_CASES = [
    Case(
        "no-replica-there",
        "review 21d F1: a cluster being deleted has left the fleet; no replica of the "
        "cache runs there, so its hydration is dropped (its Objects release the "
        "cluster's provider config and the foreground deletion completes)",
        [],
        None,
    ),
    Case(
        "replica-still-there",
        "a live replica of the cache still runs there: the hydration is retained (as for "
        "a cluster the selector dropped) until the replica moves",
        [_replica("chat-0", "gpu-b")],
        "chat-0",
    ),
]


@table(DELETING_CLUSTER_CASES)
def test_a_cluster_being_deleted_leaves_the_footprint(case: Case[list[Any], Any]):
    both = [inference_cluster("gpu-a"), inference_cluster("gpu-b")]
    t = grown(cache(selector={}), both, {"gpu-a": ("Ready", ""), "gpu-b": ("Ready", "")})
    t.clusters = [both[0], _deleting_cluster("gpu-b")]
    t.replicas = case.inputs
    # Then the replica moves off the cluster being deleted: the hydration is released.
    _assert_gpu_b_kept_until(t, case, [_replica(case.want, "gpu-a")])


def test_a_shard_requires_replicas_only_while_a_hydration_leaves():
    t = grown(cache(selector={}), [inference_cluster("gpu-a")], {"gpu-a": ("Ready", "")})
    (rsp,) = t.shard_rsp.values()
    assert requirements(rsp) == {}, "a steady shard needs nothing: one call"
    t.xr = cache(selector={"matchLabels": {"tier": "none"}}, status=t.xr["status"])
    t.replicas = None
    t.step()
    (rsp,) = t.shard_rsp.values()
    assert list(requirements(rsp)) == ["replicas"]
    assert requirements(rsp)["replicas"]["namespace"] == NAMESPACE


def test_events_only_on_transitions():
    clusters = [inference_cluster("gpu-a")]
    t = Tree(cache(selector={}), clusters)
    first = t.reconcile_cache()
    assert ("Normal", "hydration started: 1 cluster(s) in 1 new shard(s)") in results(first)
    t.reconcile_shards()
    (srsp,) = t.shard_rsp.values()
    assert ("Normal", "hydration started on gpu-a") in results(srsp)
    t.observe({"gpu-a": ("Hydrating", "")})
    t.step()
    steady = t.reconcile_cache()
    assert results(steady) == []
    t.observe({"gpu-a": ("Failed", "BackoffLimitExceeded")})
    t.reconcile_shards()
    (srsp,) = t.shard_rsp.values()
    assert ("Warning", "hydration failed on gpu-a: BackoffLimitExceeded") in results(srsp)
    rsp = t.reconcile_cache()
    assert ("Warning", "hydration failed on gpu-a: BackoffLimitExceeded") in results(rsp)
    assert results(t.reconcile_cache()) == []


class _Logged(Tree):
    """A Tree that logs, per cache reconcile, ``ArtifactReady``'s status and whether
    the response carries the ``HydrationReady`` event."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.log: list[tuple[str, bool]] = []

    def reconcile_cache(self, required: Any = "clusters") -> Any:
        rsp = super().reconcile_cache(required)
        ready_events = [m for _, m in results(rsp) if m.startswith("hydration finished")]
        self.log.append((conditions(rsp)["ArtifactReady"]["status"], bool(ready_events)))
        return rsp


def _grow(t: _Logged) -> None:
    t.step()
    t.observe({c: ("Ready", "") for c in t.desired_hydrations()})
    t.step()
    t.step()


def _leave_with_replica(t: _Logged) -> None:
    """gpu-b leaves the selector while a live replica of the cache runs there."""
    _grow(t)
    t.xr = cache(selector={"matchLabels": {"tier": "prod"}}, status=t.xr["status"])
    t.clusters = [t.clusters[0], inference_cluster("gpu-b", {"tier": "dev"})]
    t.replicas = [_replica("chat-0", "gpu-b")]
    t.step()
    t.step()


def _join(t: _Logged) -> None:
    """A third cluster joins the footprint and hydrates."""
    _grow(t)
    t.clusters = [*t.clusters, inference_cluster("gpu-c", {"tier": "prod"})]
    t.step()
    t.observe({"gpu-c": ("Ready", "")})
    t.step()
    t.step()


def _turn_unavailable(t: _Logged) -> None:
    _grow(t)
    t.clusters = [t.clusters[0], inference_cluster("gpu-b", {"tier": "prod"}, ready=False)]
    t.step()
    t.clusters = [t.clusters[0], inference_cluster("gpu-b", {"tier": "prod"})]
    t.step()


WITH_CONDITION = (
    "the HydrationReady event comes with ArtifactReady turning True, never while a shard "
    "still reports another footprint (review 14b #7)"
)
READY_EVENT_SCENARIOS: list[Case[Any, None]] = [
    Case("grow-to-ready", WITH_CONDITION, _grow, None),
    Case("cluster-leaves-with-live-replica", WITH_CONDITION, _leave_with_replica, None),
    Case("cluster-joins", WITH_CONDITION, _join, None),
    Case("cluster-turns-unavailable-and-back", WITH_CONDITION, _turn_unavailable, None),
]


@table(READY_EVENT_SCENARIOS)
def test_the_ready_event_comes_with_artifact_ready_turning_true(case: Case[Any, None]) -> None:
    a = inference_cluster("gpu-a", {"tier": "prod"})
    t = _Logged(cache(selector={}), [a, inference_cluster("gpu-b", {"tier": "prod"})])
    case.inputs(t)
    prev = "absent"
    for i, (now, event) in enumerate(t.log):
        assert event == (now == "True" and prev != "True"), (case.reason, i, t.log)
        prev = now
    assert t.log[-1][0] == "True", t.log
    assert sum(e for _, e in t.log) >= 1


def test_source_is_copied_down_without_secret_values():
    spec_hf = {"authSecret": {"name": "hf-token"}}
    t = grown(cache(selector={}, **spec_hf), [inference_cluster("gpu-a")])
    for body in (*t.shards.values(), *t.desired_hydrations().values()):
        hf = body["spec"]["huggingFace"]
        assert hf["authSecret"] == {"name": "hf-token", "key": "HF_TOKEN"}
        assert body["spec"]["cacheName"] == "qwen-cache"
        assert body["metadata"]["namespace"] == NAMESPACE


# ---- Over gRPC, through the requirements loop ----------------------------------------


def test_requirements_loop_over_grpc(grpc_function):
    world = World([*C4_CLUSTERS, _replica("x", "c1", "other")])
    composite = cache(selector=C4_SELECTOR)
    rsp, calls = grpc_function.drive(composite, world)
    assert calls == 2
    assert hydrated_clusters(rsp) == ["c1", "c2"]
    # Same answer as in-process.
    local = run(request(composite, required={"clusters": C4_CLUSTERS}))
    assert desired(local) == desired(rsp)
    # Deterministic across calls over the wire.
    again, _ = grpc_function.drive(copy.deepcopy(composite), world)
    assert again.SerializeToString(deterministic=True) == rsp.SerializeToString(deterministic=True)


def test_fleet_wide_transitions_are_one_event_each():
    clusters = [inference_cluster(f"gpu-{i:02d}") for i in range(12)]
    t = Tree(cache(selector={}), clusters)
    rsp = t.reconcile_cache()
    started = [m for s, m in results(rsp) if "started" in m]
    assert started == [f"hydration started: 12 cluster(s) in {len(t.shards)} new shard(s)"]


def test_steady_state_status_is_the_same_whether_reused_or_rebuilt():
    clusters = [inference_cluster(n) for n in ("gpu-a", "gpu-b", "gpu-c")]
    phases = {
        "gpu-a": ("Ready", "ok"),
        "gpu-b": ("Hydrating", "Job running"),
        "gpu-c": ("Ready", ""),
    }
    t = grown(cache(selector={}), clusters, phases)
    before = copy.deepcopy(t.shard_status)
    # The status the shard wrote becomes its XR's; the next call reuses its list.
    t.reconcile_shards()
    assert t.shard_status == before
    # A changed message is not hidden by the reuse.
    t.observe({"gpu-b": ("Hydrating", "Job running: 40%")})
    t.reconcile_shards()
    assert t.rows()["gpu-b"]["message"] == "Job running: 40%"
    # An entry carrying a field this function does not write is rebuilt, not kept.
    k = f"shard-{cache_shard('gpu-a')}"
    t.shard_status[k]["clusters"][0]["note"] = "edited by hand"
    t.reconcile_shards()
    assert "note" not in t.shard_status[k]["clusters"][0]


# ---- A source edit is never reported from stale evidence (issue 13) ------------------


@dataclass(frozen=True)
class Reported:
    """What the hydration's status says after the edit from revision main to v2:
    its phase and reported revision (None: no status.source)."""

    phase: str
    revision: str | None


@dataclass(frozen=True)
class RolledUp:
    """The cluster's phase in the shard's roll-up and the cache's ArtifactReady reason."""

    phase: str
    reason: str


STALE = "a source edit is never reported from stale evidence: only the current identity counts"

STALE_CASES: list[Case[Reported, RolledUp]] = [
    Case("current identity Ready counts", STALE, Reported("Ready", "v2"),
         RolledUp("Ready", "Hydrated")),
    Case("old revision Ready is not Ready", STALE, Reported("Ready", "main"),
         RolledUp("Pending", "Hydrating")),
    Case("old revision Failed is not a failure of v2", STALE, Reported("Failed", "main"),
         RolledUp("Pending", "Hydrating")),
    Case("status without a source is not known", STALE + "; no source is not known",
         Reported("Ready", None), RolledUp("Pending", "Hydrating")),
    Case("current identity Failed fails", STALE, Reported("Failed", "v2"),
         RolledUp("Failed", "HydrationFailed")),
]  # fmt: skip


def _edited_to_v2(phase, reported):
    """A cache edited from revision main to v2, its hydration reporting ``reported``."""
    clusters = [inference_cluster("gpu-a")]
    t = grown(cache(selector={}, revision="v2"), clusters)
    body = t.desired_hydrations()["gpu-a"]
    ev = {"commit": "a" * 40, "digest": "sha256:" + "b" * 64, "validatedAt": "2026-11-29T08:00:00Z"}
    extra = {"evidence": ev}
    if reported is None:
        obs = observed_hydration(body, phase, **extra)
        obs["status"].pop("source")
    else:
        src = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": reported}
        src["identity"] = source_identity(src["repo"], reported)
        obs = observed_hydration(body, phase, source=src, **extra)
    t.hydrations["gpu-a"] = obs
    return t


@pytest.mark.parametrize("transport", ["in-process", "grpc"])
@table(STALE_CASES)
def test_roll_up_counts_only_the_current_source_identity(
    case: Case[Reported, RolledUp], transport: str, grpc_function
) -> None:
    want_phase, want_reason = case.want.phase, case.want.reason
    t = _edited_to_v2(case.inputs.phase, case.inputs.revision)
    ((k, body),) = t.shards.items()
    req = request(shard_xr(body), observed={"hydration-gpu-a": t.hydrations["gpu-a"]})
    srsp = run(req) if transport == "in-process" else grpc_function.call(req)
    t.shard_status[k] = status(srsp)
    (row,) = t.shard_status[k]["clusters"]
    assert row["phase"] == want_phase, (case, row)
    rsp = t.reconcile_cache()
    st = status(rsp)
    assert conditions(rsp)["ArtifactReady"]["reason"] == want_reason, case
    assert st["source"] == {
        "repo": "Qwen/Qwen2.5-0.5B-Instruct",
        "revision": "v2",
        "identity": source_identity("Qwen/Qwen2.5-0.5B-Instruct", "v2"),
    }
    if want_phase == "Pending":
        # Stale evidence is never copied up (the experiment's gate reads it).
        assert "evidence" not in row and st["evidence"] == []
        assert "Qwen/Qwen2.5-0.5B-Instruct@v2" in row["message"]
        assert xr_ready(rsp) == "READY_FALSE"


def test_a_failure_stays_reported_while_a_cluster_joins_its_shard() -> None:
    """Found by a trial: a cluster joining the shard of a Failed one turned the cache's
    HydrationFailed into Hydrating until the shard caught up, and then announced the
    same failure again. The failure is a verdict for the current source: it stays."""
    a, b, c = shard_clusters(3, shard=5)
    t = grown(
        cache(selector={}),
        [inference_cluster(a), inference_cluster(b)],
        {a: ("Failed", "BackoffLimitExceeded"), b: ("Ready", "")},
    )
    assert conditions(t.rsp)["ArtifactReady"]["reason"] == "HydrationFailed"
    t.clusters = [inference_cluster(a), inference_cluster(b), inference_cluster(c)]
    rsp = t.reconcile_cache()  # the shard's status is for the old footprint
    cond = conditions(rsp)["ArtifactReady"]
    assert cond["reason"] == "HydrationFailed" and a in cond["message"], cond
    assert [e["name"] for e in status(rsp)["failed"]] == [a]
    assert not [m for s, m in results(rsp) if s == "Warning"]
    t.reconcile_shards()
    rsp = t.reconcile_cache()
    assert conditions(rsp)["ArtifactReady"]["reason"] == "HydrationFailed"
    assert not [m for s, m in results(rsp) if s == "Warning"], results(rsp)


def test_no_hostable_cluster_is_said_on_the_first_reconcile() -> None:
    """Found by a new user's trial: with no matched cluster able to host a cache, the
    first reconcile announced "hydration started: 2 cluster(s)" and read Hydrating
    "0/0 clusters ready" until the shards first reported."""
    clusters = [inference_cluster(n, storage_class=None) for n in ("gpu-a", "gpu-b")]
    t = Tree(cache(selector={}), clusters)
    rsp = t.reconcile_cache()
    assert not [m for _, m in results(rsp) if "hydration started" in m], results(rsp)
    c = conditions(rsp)["ArtifactReady"]
    assert (c["status"], c["reason"]) == ("False", "NoHostableClusters"), c


# ---- One InferenceCluster per workload cluster ----------------------------------------
#
# Remote object names do not include the InferenceCluster: two InferenceClusters that
# reach one workload cluster would make two hydrations own the same PVC, token Secret
# and Job there, and the one that goes deletes the PVC the other's replicas mount. The
# function sees one such case: two Existing clusters naming the same kubeconfig Secret.

DISTINCT = "ClustersDistinct"
T1, T2, T3 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"

Kubeconfig = str | tuple[str, str | None] | None


@dataclass(frozen=True)
class SharedFleet:
    """InferenceClusters ``(name, kubeconfig Secret, creationTimestamp)``, which of them
    already have a Ready hydration of the cache (composed before this check, each then
    with its own kubeconfig), and whether Crossplane sends the list in reverse order."""

    clusters: tuple[tuple[str, Kubeconfig, str | None], ...]
    existing: tuple[str, ...] = ()
    reverse: bool = False


@dataclass(frozen=True)
class OneHydration:
    """The clusters with a desired hydration; ``ClustersDistinct``'s status; the
    InferenceClusters and words its message must name."""

    hydrated: tuple[str, ...]
    status: str
    names: tuple[str, ...] = ()
    says: tuple[str, ...] = ()


ONE = (
    "two Existing InferenceClusters naming the same kubeconfig Secret reach one workload "
    "cluster: only the oldest (creationTimestamp, then name) gets a hydration there"
)
ORDER = "the choice does not depend on the order Crossplane sends the clusters in"
KEEP = (
    "hydrations composed before the check are kept, both (bad input loses nothing), and "
    "nothing new is composed on that cluster"
)
NEWER_ONLY = (
    "the older InferenceCluster gets no second hydration while the newer one's (composed "
    "before the check) exists there"
)
UNCHANGED = "distinct kubeconfig Secrets (or clusters that are not Existing): as before"
DEFAULT_KEY = "a secretRef without key reads key kubeconfig (the XRD's default)"

SHARED: list[Case[SharedFleet, OneHydration]] = [
    Case("shared-older-wins", ONE,
         SharedFleet((("gpu-a", "kc", T2), ("gpu-b", "kc", T1))),
         OneHydration(("gpu-b",), "False", ("gpu-a", "gpu-b"), ("gpu-b is the oldest",))),
    Case("shared-older-wins-reversed", ORDER,
         SharedFleet((("gpu-a", "kc", T2), ("gpu-b", "kc", T1)), reverse=True),
         OneHydration(("gpu-b",), "False", ("gpu-a", "gpu-b"), ("gpu-b is the oldest",))),
    Case("shared-same-time-name-breaks-tie", ONE,
         SharedFleet((("gpu-a", "kc", T1), ("gpu-b", "kc", T1))),
         OneHydration(("gpu-a",), "False", ("gpu-a", "gpu-b"))),
    Case("shared-same-time-reversed", ORDER,
         SharedFleet((("gpu-a", "kc", T1), ("gpu-b", "kc", T1)), reverse=True),
         OneHydration(("gpu-a",), "False", ("gpu-a", "gpu-b"))),
    Case("shared-no-timestamp-sorts-last", ONE,
         SharedFleet((("gpu-a", "kc", None), ("gpu-b", "kc", T3))),
         OneHydration(("gpu-b",), "False", ("gpu-a", "gpu-b"))),
    Case("shared-by-three", ONE,
         SharedFleet((("gpu-a", "kc", T3), ("gpu-b", "kc", T2), ("gpu-c", "kc", T1),
                      ("gpu-d", "other", T3))),
         OneHydration(("gpu-c", "gpu-d"), "False", ("gpu-a", "gpu-b", "gpu-c"))),
    Case("shared-default-key", DEFAULT_KEY,
         SharedFleet((("gpu-a", ("kc", None), T1), ("gpu-b", ("kc", "kubeconfig"), T2))),
         OneHydration(("gpu-a",), "False", ("gpu-a", "gpu-b"))),
    Case("both-existing-kept", KEEP,
         SharedFleet((("gpu-a", "kc", T2), ("gpu-b", "kc", T1)), existing=("gpu-a", "gpu-b")),
         OneHydration(("gpu-a", "gpu-b"), "False", ("gpu-a", "gpu-b"),
                      ("both are kept", "nothing new"))),
    Case("newer-existing-blocks-the-older", NEWER_ONLY,
         SharedFleet((("gpu-a", "kc", T2), ("gpu-b", "kc", T1)), existing=("gpu-a",)),
         OneHydration(("gpu-a",), "False", ("gpu-a", "gpu-b"), ("gpu-b gets none",))),
    Case("distinct-secrets", UNCHANGED,
         SharedFleet((("gpu-a", "kc-a", T1), ("gpu-b", "kc-b", T1))),
         OneHydration(("gpu-a", "gpu-b"), "True")),
    Case("same-secret-other-key", UNCHANGED,
         SharedFleet((("gpu-a", ("kc", "a"), T1), ("gpu-b", ("kc", "b"), T1))),
         OneHydration(("gpu-a", "gpu-b"), "True")),
    Case("not-existing-clusters", UNCHANGED,
         SharedFleet((("gpu-a", None, T1), ("gpu-b", None, T1))),
         OneHydration(("gpu-a", "gpu-b"), "True")),
]  # fmt: skip


def _shared_fleet(fleet: SharedFleet) -> list[dict[str, Any]]:
    out = [inference_cluster(n, kubeconfig=k, created=c) for n, k, c in fleet.clusters]
    return out[::-1] if fleet.reverse else out


@table(SHARED)
def test_one_hydration_per_workload_cluster(case: Case[SharedFleet, OneHydration]) -> None:
    fleet, want = case.inputs, case.want
    if fleet.existing:
        before = [
            inference_cluster(n, kubeconfig=f"own-{n}", created=c)
            for n, _, c in fleet.clusters
            if n in fleet.existing
        ]
        t = grown(cache(selector={}), before, dict.fromkeys(fleet.existing, ("Ready", "")))
        assert hydrated_clusters(t) == sorted(fleet.existing), "the row's setup"
        t.clusters = _shared_fleet(fleet)
    else:
        t = Tree(cache(selector={}), _shared_fleet(fleet))
    t.step()
    t.step()
    assert hydrated_clusters(t) == list(want.hydrated), case.reason
    assert all(n in t.hydrations for n in fleet.existing), "a hydration was deleted"
    c = conditions(t.rsp)[DISTINCT]
    assert c["status"] == want.status, (case.reason, c)
    for words in (*want.names, *want.says):
        assert words in c["message"], (case.reason, words, c)
    if want.status == "False":
        assert c["reason"] == "SharedKubeconfig", c
        assert "spec.cluster.existing.secretRef" in c["message"], c
    # A fixed point: the same world gives the same response, and no event again.
    first = t.reconcile_cache()
    again = t.reconcile_cache()
    assert first.SerializeToString(deterministic=True) == again.SerializeToString(
        deterministic=True
    ), case.reason
    assert not results(again), results(again)


def test_the_one_used_does_not_depend_on_the_order_clusters_are_sent() -> None:
    """Every order of three clusters sharing a Secret: the same shards, conditions and
    status (the tie-break reads creationTimestamp and name, never the list's order)."""
    import itertools

    rows = [("gpu-a", T2), ("gpu-b", T1), ("gpu-c", T1)]
    seen = set()
    for order in itertools.permutations(rows):
        clusters = [inference_cluster(n, kubeconfig="kc", created=c) for n, c in order]
        rsp = run(request(cache(selector={}), required=resolved(clusters)))
        seen.add(
            (
                repr(sorted(desired(rsp).items())),
                repr(sorted(conditions(rsp).items())),
                repr(status(rsp)),
            )
        )
        assert hydrated_clusters(rsp) == ["gpu-b"]
    assert len(seen) == 1


def test_a_shared_kubeconfig_is_warned_once_and_said_while_unresolved_is_unknown() -> None:
    clusters = [
        inference_cluster("gpu-a", kubeconfig="kc", created=T2),
        inference_cluster("gpu-b", kubeconfig="kc", created=T1),
    ]
    t = Tree(cache(selector={}), clusters)
    rsp = t.reconcile_cache()
    warnings = [m for s, m in results(rsp) if s == "Warning"]
    assert len(warnings) == 1 and "gpu-a" in warnings[0] and "gpu-b" in warnings[0], warnings
    # Not resolved yet is "not known", never "no conflict".
    rsp = run(request(t.xr, observed=t.observed_shards(), required={}))
    assert conditions(rsp)[DISTINCT]["status"] == "Unknown"
    assert set(desired(rsp)) == set(t.observed_shards())


def test_a_hydration_kept_for_a_cluster_that_left_blocks_the_one_that_shares_its_secret() -> None:
    """gpu-a left the selector while a replica runs there (its hydration retained);
    gpu-b, older, names the same kubeconfig Secret and is selected: it would be a second
    hydration on that workload cluster, so it gets none while gpu-a's exists."""
    prod, dev = {"tier": "prod"}, {"tier": "dev"}
    a = inference_cluster("gpu-a", prod, kubeconfig="kc", created=T2)
    t = grown(cache(selector={"matchLabels": prod}), [a], {"gpu-a": ("Ready", "")})
    t.replicas = [_replica("chat-0", "gpu-a")]
    t.clusters = [
        inference_cluster("gpu-a", dev, kubeconfig="kc", created=T2),
        inference_cluster("gpu-b", prod, kubeconfig="kc", created=T1),
    ]
    # Crossplane sends only the matchLabels matches; gpu-a still comes when the
    # requirement is wider than the selector (here: matchExpressions filter it).
    t.xr = cache(
        selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": ["prod"]}]},
        status=t.xr["status"],
    )
    t.step()
    t.step()
    assert hydrated_clusters(t) == ["gpu-a"]
    assert [e["name"] for e in status(t.rsp)["retained"]] == ["gpu-a"]
    c = conditions(t.rsp)[DISTINCT]
    assert (c["status"], c["reason"]) == ("False", "SharedKubeconfig"), c
    assert "gpu-a (not selected by spec.clusterSelector)" in c["message"], c
    assert "gpu-b gets none" in c["message"], c
    # The replica goes: gpu-a's hydration is reclaimed, then gpu-b gets its own once
    # gpu-a's shard has seen it gone (a round later).
    t.replicas = []
    t.step()
    t.step()
    assert hydrated_clusters(t) == []
    t.step()
    assert hydrated_clusters(t) == ["gpu-b"]
    assert conditions(t.rsp)[DISTINCT]["status"] == "True"


class Blocker(NamedTuple):
    """``gpu-a`` (older, hydrated) and ``blocked`` share a kubeconfig; ``gpu-a`` then
    leaves the selector. ``also`` are clusters with their own kubeconfig (in the
    selector throughout), hydrated too."""

    blocked: str
    also: tuple[str, ...] = ()


WAIT_FOR_GONE = (
    "a hydration that stops being wanted is deleted by Crossplane (foreground: its "
    "Objects, the remote PVC/Job/Secret go first) while its shard no longer observes it; "
    "the other member sharing the kubeconfig gets a hydration (the same remote names) "
    "only once the first one is gone, as the README's procedure says"
)

BLOCKER_GOES = [
    Case("blocker-alone-in-its-shard", WAIT_FOR_GONE + "; the drained shard stays meanwhile",
         Blocker("gpu-b"), None),
    Case("blocker-shard-keeps-other-clusters", WAIT_FOR_GONE,
         Blocker("gpu-b", also=("gpu-298",)), None),
    Case("both-in-one-shard", WAIT_FOR_GONE + "; one shard drops one and must not add the other",
         Blocker("gpu-462"), None),
]  # fmt: skip


@table(BLOCKER_GOES)
def test_the_other_member_waits_until_the_blocking_hydration_is_gone(
    case: Case[Blocker, None],
) -> None:
    prod, dev = {"tier": "prod"}, {"tier": "dev"}
    sel = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["prod"]}]}
    also = case.inputs.also
    other = [inference_cluster(n, prod, kubeconfig=f"own-{n}", created=T1) for n in also]
    blocked = inference_cluster(case.inputs.blocked, prod, kubeconfig="kc", created=T2)
    a = inference_cluster("gpu-a", prod, kubeconfig="kc", created=T1)
    t = grown(cache(selector=sel), [a, blocked, *other], {"gpu-a": ("Ready", "")})
    t.observe(dict.fromkeys(case.inputs.also, ("Ready", "")))
    t.step()
    assert hydrated_clusters(t) == sorted(["gpu-a", *case.inputs.also]), "the row's setup"
    t.linger = True
    # gpu-a leaves the selector (still sent: the requirement is wider); no replica there.
    t.clusters = [inference_cluster("gpu-a", dev, kubeconfig="kc", created=T1), blocked, *other]
    seen = []
    for _ in range(4):  # Crossplane is still deleting hydration-gpu-a all along
        t.reconcile_cache()
        t.reconcile_shards()
        assert "gpu-a" not in t.desired_hydrations(), case.name
        assert "gpu-a" in t.deleting, "the setup: its deletion is under way"
        assert case.inputs.blocked not in t.desired_hydrations(), (case.reason, t.rows())
        c = conditions(t.rsp)[DISTINCT]
        assert c["status"] == "False" and "gpu-a" in c["message"], c
        seen.append((repr(status(t.rsp)), repr(sorted(t.shard_status.items()))))
    assert seen[-1] == seen[-2], "not a fixed point while the hydration is being deleted"
    assert all(n in t.desired_hydrations() for n in case.inputs.also), "a hydration was dropped"
    t.finish_deleting("gpu-a")
    for _ in range(3):
        t.step()
    assert hydrated_clusters(t) == sorted([case.inputs.blocked, *case.inputs.also]), t.rows()
    assert conditions(t.rsp)[DISTINCT]["status"] == "True"
    assert "gpu-a" not in t.rows()


def test_the_guard_reads_each_observed_shard_once_per_call(monkeypatch) -> None:
    """Review 17g F4: at 5,000 clusters in kubeconfig-sharing pairs the guard looked up
    each member's shard rows (a memo lookup reading the shard's resourceVersion) on
    every steady call; it now reads each observed shard's rows at most once a call."""
    from function.composers.modelcache import footprint

    clusters = [
        inference_cluster(f"gpu-{i:03d}", kubeconfig=f"kc-{i // 2}", created=T1) for i in range(400)
    ]
    t = grown(cache(selector={}), clusters)
    t.step()
    seen: list[int] = []
    real = footprint.hydrated_clusters
    monkeypatch.setattr(footprint, "hydrated_clusters", lambda s: seen.append(1) or real(s))
    t.reconcile_cache()
    assert 0 < len(seen) <= len(t.shards), (len(seen), len(t.shards))
