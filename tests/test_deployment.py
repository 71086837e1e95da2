"""ModelDeployment composer: tables in-process, and the same cases over gRPC.

Covers case C5, the placement half of C7, the Usage that protects the cache,
unresolved requirements, and status from observed replicas.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest

from function import API_VERSION
from function.api.modelreplica import ModelReplicaSpec
from function.naming import hydration_name, replica_name, source_identity
from tests.support import harness as h
from tests.support.fixtures import POD_TEMPLATE_FAULTS, inference_cluster, put_fault
from tests.support.table import Case, table
from tests.support.validation import validate_manifest, validate_xr

NS = h.NAMESPACE
MEM_40 = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'

H100_DEVICE = {
    "name": "gpu",
    "claim": "DRA",
    "driver": "gpu.nvidia.com",
    "deviceClassName": "gpu.nvidia.com",
    "count": 8,
    "attributes": {"architecture": {"string": "Hopper"}},
    "capacity": {"memory": {"value": "80Gi"}},
}
L4_DEVICE = {
    "name": "gpu",
    "claim": "DRA",
    "driver": "gpu.nvidia.com",
    "deviceClassName": "gpu.nvidia.com",
    "count": 1,
    "attributes": {"architecture": {"string": "Ada Lovelace"}},
    "capacity": {"memory": {"value": "23034Mi"}},
}


def ic(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    nodes: int = 4,
    device: dict[str, Any] = H100_DEVICE,
    ready: bool = True,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """An InferenceCluster with one GPU pool ``h100`` of ``nodes`` nodes."""
    c = inference_cluster(
        name,
        {"gpu": "h100"} if labels is None else labels,
        ready=ready,
        extra_status={"gpuPools": [{"name": "h100", "nodes": nodes, "devices": [device]}]},
    )
    c["spec"] = {"cluster": {"source": "Existing", "existing": {"secretRef": {"name": name}}}}
    if taints:
        c["spec"]["taints"] = taints
    return c


def cache(name: str = "qwen-cache") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelCache",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "clusterSelector": {"matchLabels": {"gpu": "h100"}},
            "source": "HuggingFace",
            "huggingFace": {"repo": "Qwen/Qwen2.5-7B-Instruct", "revision": "main"},
        },
    }


def hydration(cluster: str, phase: str, cache_name: str = "qwen-cache") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelCacheHydration",
        "metadata": {
            "name": hydration_name(NS, cache_name, cluster),
            "namespace": NS,
            "labels": {"modelplane.ai/cache": cache_name, "modelplane.ai/cluster": cluster},
        },
        "spec": {
            "clusterName": cluster,
            "cacheName": cache_name,
            "source": "HuggingFace",
            "huggingFace": {"repo": "Qwen/Qwen2.5-7B-Instruct", "revision": "main"},
        },
        "status": {"phase": phase, "message": f"hydration is {phase}"},
    }


def engine(count: int = 1, selector: str = MEM_40, copies: int = 1) -> dict[str, Any]:
    return {
        "name": "vllm",
        "copies": copies,
        "members": [
            {
                "role": "Standalone",
                "nodeSelector": {
                    "devices": [{"name": "gpu", "count": count, "selectors": [{"cel": selector}]}]
                },
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "engine",
                                "image": "vllm/vllm-openai:v0.9.2",
                                "args": ["--model=Qwen/Qwen2.5-7B-Instruct"],
                            }
                        ]
                    }
                },
            }
        ],
    }


def deployment(
    replicas: int = 2,
    *,
    name: str = "chat",
    selector: dict[str, Any] | None = None,
    cache_name: str | None = "qwen-cache",
    engines: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    ts: dict[str, Any] = {
        "clusterSelector": {"matchLabels": {"gpu": "h100"}} if selector is None else selector,
        "engines": engines or [engine()],
        **extra,
    }
    if cache_name:
        ts["modelCacheRef"] = {"name": cache_name}
    spec = {
        "replicas": replicas,
        "template": {"metadata": {"labels": {"team": "chat"}}, "spec": ts},
    }
    return h.xr("ModelDeployment", name, spec)


def other_replica(cluster: str, nodes: int = 1, namespace: str = "other-team") -> dict[str, Any]:
    """A ModelReplica of another deployment, using ``nodes`` nodes of pool h100, labelled
    with its cluster as the deployment composer labels every ModelReplica."""
    e = engine(copies=nodes)
    e["members"][0]["pool"] = "h100"
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelReplica",
        "metadata": {
            "name": f"other-{cluster}",
            "namespace": namespace,
            "labels": {"modelplane.ai/cluster": cluster, "modelplane.ai/deployment": "other"},
        },
        "spec": {"deploymentName": "other", "index": 0, "clusterName": cluster, "engines": [e]},
    }


C5_WORLD = [
    ic("gpu-a"),
    ic("gpu-b"),
    ic("gpu-c"),
    cache(),
    hydration("gpu-a", "Ready"),
    hydration("gpu-b", "Hydrating"),
]


def world(*extra: dict[str, Any], base: list[dict[str, Any]] | None = None) -> h.World:
    return h.World([*(C5_WORLD if base is None else base), *extra])


def drive(xr: dict[str, Any], w: h.World, observed: dict[str, Any] | None = None):
    rsp, _calls = h.drive(h.run, xr, observed, w)
    assert not h.fatal(rsp), h.fatal(rsp)
    return rsp


def replicas_of(rsp) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in h.desired(rsp).items() if v.get("kind") == "ModelReplica"}


def placed(rsp) -> list[tuple[int, str]]:
    return sorted(
        (int(r["spec"]["index"]), r["spec"]["clusterName"]) for r in replicas_of(rsp).values()
    )


def observe(rsp, ready: dict[int, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """Desired replicas as observed, with a ModelReady condition per index (status,
    reason, msg) and, given a fourth element, ``status.engines`` as the replica composer
    writes it: one engine, ``ready`` as the condition, ``available`` that element."""
    out = {}
    for k, body in h.desired(rsp).items():
        b = copy.deepcopy(body)
        if b.get("kind") == "ModelReplica":
            idx = int(b["spec"]["index"])
            st, reason, msg, *available = (ready or {}).get(idx, ("False", "Starting", "starting"))
            b["status"] = {
                "conditions": [
                    {"type": "ModelReady", "status": st, "reason": reason, "message": msg}
                ]
            }
            if available:
                b["status"]["engines"] = [
                    {"name": "main", "kind": "Deployment", "workload": "w",
                     "ready": st == "True", "available": available[0]}
                ]  # fmt: skip
        out[k] = b
    return out


# ---- requirements and "not known" ---------------------------------------------------


def test_first_call_asks_for_everything_and_composes_nothing() -> None:
    rsp = h.run(h.request(deployment()))
    req = h.requirements(rsp)
    assert req["clusters"] == {
        "apiVersion": API_VERSION,
        "kind": "InferenceCluster",
        "matchLabels": {"labels": {"gpu": "h100"}},
    }
    # Capacity is read per cluster, once placement knows which clusters it tries
    # (function.composers.deployment.capacity): nothing of the fleet's replicas yet.
    assert not [n for n in req if n == "replicas" or n.startswith("replicas-on-")]
    assert req["cache"] == {
        "apiVersion": API_VERSION,
        "kind": "ModelCache",
        "matchName": "qwen-cache",
        "namespace": NS,
    }
    assert req["hydrations"]["matchLabels"] == {"labels": {"modelplane.ai/cache": "qwen-cache"}}
    assert h.desired(rsp) == {}
    assert h.conditions(rsp)["ReplicasScheduled"]["status"] == "Unknown"
    assert not [m for s, m in h.results(rsp) if s == "Warning"]


# (the device's claim on every cluster, its replicas stay, without a warning)
CLAIM_CASES = [("DRA", True), ("Synthetic", False), ("Dra", True), ("", True)]


@pytest.mark.parametrize(("claim", "stays"), CLAIM_CASES, ids=[c for c, _ in CLAIM_CASES])
def test_a_device_claim_not_known_leaves_the_pools_not_known(claim: str, stays: bool) -> None:
    """Found by review 15a: a claim the function does not know (``Dra``) was read as
    Synthetic, so every replica "no longer fits" and should move. Now the cluster's
    pools are not known (as with ``status.gpuPools`` absent): each replica keeps its
    pools; a Synthetic device is still one that cannot be claimed."""
    first = drive(deployment(2), world())
    before = placed(first)
    device = {**H100_DEVICE, "claim": claim}
    clusters = [ic(n, device=device) for n in ("gpu-a", "gpu-b", "gpu-c")]
    w = world(base=[*clusters, *C5_WORLD[3:]])
    rsp = drive(deployment(2), w, observe(first))
    if stays:
        assert placed(rsp) == before
        assert not [m for s, m in h.results(rsp) if s == "Warning"], h.results(rsp)
    else:  # not starting yet, and no longer fitting: replaced at once, by none
        assert placed(rsp) != before


@pytest.mark.parametrize("missing", ["clusters", "cache", "hydrations"])
def test_unresolved_requirement_keeps_existing_replicas(missing: str) -> None:
    first = drive(deployment(2), world())
    observed = observe(first)
    # As Crossplane's reconciler of each ModelReplica writes it (review 13a): never
    # applied back by the parent, whose keep would overwrite the atomic resourceRefs.
    for body in observed.values():
        body["spec"]["crossplane"] = {
            "compositionRef": {"name": "modelreplica"},
            "resourceRefs": [{"apiVersion": "v1", "kind": "Service", "name": "x"}],
        }
    # Everything but one requirement resolved: nothing may move or vanish, even though
    # the deployment now asks for 1 replica only and the fleet changed.
    w = world(base=[ic("gpu-z"), cache(), hydration("gpu-z", "Ready")])
    required: dict[str, list[Mapping[str, Any]] | None] = {
        n: list(w.resolve(s))
        for n, s in h.run(h.request(deployment(1))).requirements.resources.items()
        if n != missing
    }
    rsp = h.run(h.request(deployment(1), observed=observed, required=required))
    assert placed(rsp) == placed(first)
    assert h.desired(rsp) == {
        k: {
            x: ({a: b for a, b in y.items() if a != "crossplane"} if x == "spec" else y)
            for x, y in v.items()
            if x != "status"
        }
        for k, v in observed.items()
    }
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert (c["status"], c["reason"]) == ("Unknown", "ResolvingRequirements")
    assert missing in c["message"]


def test_capacity_not_yet_resolved_is_not_known_and_keeps_everything() -> None:
    first = drive(deployment(2), world())
    observed = observe(first)
    w = world(ic("gpu-d"), hydration("gpu-d", "Ready"), hydration("gpu-c", "Ready"))
    # The fleet lists resolved, no capacity yet: a scale-up walks to gpu-c and gpu-d,
    # whose ModelReplicas it has not seen. Nothing is placed on them as if they were
    # empty, and nothing existing moves: it asks for them.
    lists = {
        n: list(w.resolve(s))
        for n, s in h.run(h.request(deployment(4))).requirements.resources.items()
        if not n.startswith("replicas-on-")
    }
    rsp = h.run(h.request(deployment(4), observed=observed, required=lists))
    assert h.desired(rsp) == {
        k: {x: y for x, y in v.items() if x != "status"} for k, v in observed.items()
    }
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert (c["status"], c["reason"]) == ("Unknown", "ResolvingRequirements")
    assert "ModelReplicas on gpu-c, gpu-d" in c["message"]
    req = h.requirements(rsp)
    assert req["replicas-on-gpu-c"] == {
        "apiVersion": API_VERSION,
        "kind": "ModelReplica",
        "matchLabels": {"labels": {"modelplane.ai/cluster": "gpu-c"}},
    }
    assert "replicas" not in req  # one expansion is per cluster, not the fleet
    # Resolved: placed, and the requirements repeat, so Crossplane's loop ends here.
    full = {n: list(w.resolve(s)) for n, s in rsp.requirements.resources.items()}
    done = h.run(h.request(deployment(4), observed=observed, required=full))
    assert placed(done) == [(0, "gpu-a"), (1, "gpu-b"), (2, "gpu-c"), (3, "gpu-d")]
    assert dict(done.requirements.resources) == dict(rsp.requirements.resources)


# ---- C5 ------------------------------------------------------------------------------


def test_c5_replicas_only_inside_the_prewarmed_footprint() -> None:
    rsp = drive(deployment(2), world())
    assert placed(rsp) == [(0, "gpu-a"), (1, "gpu-b")]
    cond = h.conditions(rsp)
    assert cond["ReplicasScheduled"]["status"] == "True"
    assert cond["ReplicasScheduled"]["message"] == "2 of 2 replicas placed on gpu-a, gpu-b"
    # Still more replicas: they pack inside the footprint, never on gpu-c.
    rsp = drive(deployment(5), world())
    assert {c for _, c in placed(rsp)} == {"gpu-a", "gpu-b"}


def test_c5_replica_spec_labels_and_schema() -> None:
    rsp = drive(deployment(2), world())
    reps = replicas_of(rsp)
    assert sorted(reps) == ["replica-0", "replica-1"]
    r = reps["replica-1"]
    assert r["metadata"]["name"] == replica_name(NS, "chat", 1)
    assert r["metadata"]["namespace"] == NS
    assert r["metadata"]["labels"] == {
        "team": "chat",
        "modelplane.ai/deployment": "chat",
        "modelplane.ai/cluster": "gpu-b",
        "modelplane.ai/replica-index": "1",
        "modelplane.ai/cache": "qwen-cache",
        "app.kubernetes.io/managed-by": "function-modelplane",
    }
    spec = ModelReplicaSpec.model_validate(r["spec"])
    assert (spec.deploymentName, spec.index, spec.clusterName) == ("chat", 1, "gpu-b")
    assert spec.modelCacheRef is not None and spec.modelCacheRef.name == "qwen-cache"
    assert spec.engines[0].members[0].pool == "h100"
    for body in reps.values():
        validate_xr(body)


def test_c5_replica_on_hydrating_cluster_reports_waiting() -> None:
    first = drive(deployment(2), world())
    observed = observe(
        first,
        {
            0: ("True", "Serving", "1/1 engines serving"),
            1: ("False", "Hydrating", "waiting for the cache on gpu-b"),
        },
    )
    rsp = drive(deployment(2), world(), observed)
    assert h.status(rsp)["replicas"] == {"total": 2, "ready": 1}
    c = h.conditions(rsp)["ReplicasReady"]
    assert c["status"] == "False" and c["reason"] == "WaitingForCache"
    assert "replica 1 on gpu-b" in c["message"]
    assert h.desired_ready(rsp)["replica-0"] == "READY_TRUE"
    assert h.desired_ready(rsp)["replica-1"] == "READY_FALSE"


def test_c5_selector_and_footprint_do_not_intersect() -> None:
    w = world(ic("gpu-eu", {"gpu": "h100", "region": "eu"}))
    xr = deployment(2, selector={"matchLabels": {"gpu": "h100", "region": "eu"}})
    rsp = drive(xr, w)
    assert placed(rsp) == []
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert (c["status"], c["reason"]) == ("False", "NoClusterInCacheFootprint")
    assert c["message"].startswith("0 of 2 replicas placed")
    assert "gpu-eu" in c["message"] and "gpu-a, gpu-b" in c["message"]


def test_selectors_are_intersected_not_merged() -> None:
    # The deployment wants region us-east only; the footprint has gpu-a (us-west)
    # and gpu-b (us-east): only gpu-b is eligible.
    base = [
        ic("gpu-a", {"gpu": "h100", "region": "us-west"}),
        ic("gpu-b", {"gpu": "h100", "region": "us-east"}),
        cache(),
        hydration("gpu-a", "Ready"),
        hydration("gpu-b", "Ready"),
    ]
    xr = deployment(
        2,
        selector={
            "matchLabels": {"gpu": "h100"},
            "matchExpressions": [{"key": "region", "operator": "In", "values": ["us-east"]}],
        },
    )
    rsp = drive(xr, world(base=base))
    assert placed(rsp) == [(0, "gpu-b"), (1, "gpu-b")]


def test_cache_not_found() -> None:
    rsp = drive(deployment(1), world(base=[ic("gpu-a")]))
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert (c["status"], c["reason"]) == ("False", "CacheNotFound")
    assert f"{NS}/qwen-cache" in c["message"]
    assert h.desired(rsp) == {}


def test_cache_without_hydrations_is_waiting() -> None:
    rsp = drive(deployment(1), world(base=[ic("gpu-a"), cache()]))
    assert h.conditions(rsp)["ReplicasScheduled"]["reason"] == "WaitingForCache"


def test_usage_protects_the_cache() -> None:
    rsp = drive(deployment(1), world())
    usage = h.desired(rsp)["cache-usage"]
    assert usage["apiVersion"] == "protection.crossplane.io/v1beta1"
    assert usage["kind"] == "Usage"
    assert usage["spec"]["of"] == {
        "apiVersion": API_VERSION,
        "kind": "ModelCache",
        "resourceRef": {"name": "qwen-cache"},
    }
    assert "by" not in usage["spec"]  # lives and dies with the deployment: no deletion deadlock
    assert usage["spec"]["reason"] == "ModelDeployment chat serves from this ModelCache"
    assert usage["spec"]["replayDeletion"] is True
    assert usage["metadata"]["namespace"] == NS
    validate_manifest(usage)
    # No cache, no Usage.
    rsp = drive(deployment(1, cache_name=None), world())
    assert "cache-usage" not in h.desired(rsp)


# ---- C7 (placement half) -------------------------------------------------------------


C7_BASE = [
    ic("gpu-a"),
    ic("gpu-b"),
    ic("gpu-c"),
    cache(),
    hydration("gpu-a", "Ready"),
    hydration("gpu-b", "Ready"),
    hydration("gpu-c", "Failed"),
]


def test_c7_no_new_replica_where_hydration_failed() -> None:
    rsp = drive(deployment(3), world(base=C7_BASE))
    assert {c for _, c in placed(rsp)} == {"gpu-a", "gpu-b"}


def test_c7_failed_replica_moves_where_the_cache_is_ready() -> None:
    # A replica placed on gpu-c before its hydration failed.
    before = [ic("gpu-c"), cache(), hydration("gpu-c", "Hydrating")]
    first = drive(deployment(1), world(base=before))
    assert placed(first) == [(0, "gpu-c")]
    observed = observe(first, {0: ("False", "HydrationFailed", "gpu-c: Job DeadlineExceeded")})
    rsp = drive(deployment(1), world(base=C7_BASE), observed)
    assert placed(rsp) == [(1, "gpu-a")]
    assert (
        "Warning",
        "removed replica 0 from gpu-c: moved (hydration of ModelCache qwen-cache Failed)",
    ) in h.results(rsp)


def test_c7_failed_replica_is_kept_and_reported_when_nowhere_to_go() -> None:
    before = [ic("gpu-c"), cache(), hydration("gpu-c", "Hydrating")]
    first = drive(deployment(1), world(base=before))
    observed = observe(first, {0: ("False", "HydrationFailed", "gpu-c: Job DeadlineExceeded")})
    full = [
        ic("gpu-a", nodes=0),
        ic("gpu-c"),
        cache(),
        hydration("gpu-a", "Ready"),
        hydration("gpu-c", "Failed"),
    ]
    rsp = drive(deployment(1), world(base=full), observed)
    assert placed(rsp) == [(0, "gpu-c")]
    c = h.conditions(rsp)["ReplicasReady"]
    assert (c["status"], c["reason"]) == ("False", "HydrationFailed")
    assert "replica 0 on gpu-c" in c["message"] and "DeadlineExceeded" in c["message"]
    assert h.status(rsp)["placement"] == [
        {"index": 0, "cluster": "gpu-c", "ready": False, "reason": "HydrationFailed"}
    ]


def test_c7_replicas_on_ready_clusters_unaffected() -> None:
    first = drive(deployment(2), world(base=C7_BASE))
    observed = observe(first, {0: ("True", "Serving", "ok"), 1: ("True", "Serving", "ok")})
    rsp = drive(deployment(2), world(base=C7_BASE), observed)
    assert placed(rsp) == placed(first)
    assert h.conditions(rsp)["ReplicasReady"]["status"] == "True"
    assert h.status(rsp)["replicas"] == {"total": 2, "ready": 2}


# ---- capacity, partial placement, stability -------------------------------------------


def test_capacity_counts_replicas_of_the_whole_fleet() -> None:
    base = [
        ic("gpu-a", nodes=2),
        ic("gpu-b", nodes=2),
        cache(),
        hydration("gpu-a", "Ready"),
        hydration("gpu-b", "Ready"),
    ]
    others = [other_replica("gpu-a", 2), other_replica("gpu-b", 1)]
    rsp = drive(deployment(2), world(*others, base=base))
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert placed(rsp) == [(0, "gpu-b")]
    assert (c["status"], c["reason"]) == ("False", "InsufficientCapacity")
    assert c["message"].startswith("1 of 2 replicas placed")
    assert "h100 0/2 free" in c["message"]


def test_stable_across_reconciles_and_deterministic() -> None:
    first = drive(deployment(2), world())
    observed = observe(first)
    # This deployment's own replicas appear in the fleet list too: not double counted.
    own = [copy.deepcopy(b) for b in observed.values() if b["kind"] == "ModelReplica"]
    for b in own:
        b["metadata"]["namespace"] = NS
    second = drive(deployment(2), world(*own), observed)
    assert placed(second) == placed(first)
    third = drive(deployment(2), world(*own), observed)
    assert second.SerializeToString(deterministic=True) == third.SerializeToString(
        deterministic=True
    )


def test_scale_up_keeps_existing_and_scale_down_removes() -> None:
    first = drive(deployment(2), world())
    up = drive(deployment(4), world(), observe(first))
    assert placed(up)[:2] == placed(first)
    assert len(placed(up)) == 4
    down = drive(deployment(1), world(), observe(up))
    assert len(placed(down)) == 1
    assert sum(1 for s, m in h.results(down) if s == "Normal" and "scaled down" in m) == 3


def test_no_execute_taint_moves_replica_no_schedule_keeps_it() -> None:
    first = drive(deployment(1), world())
    assert placed(first) == [(0, "gpu-a")]
    tainted = [ic("gpu-a", taints=[{"key": "maint", "effect": "NoSchedule"}]), *C5_WORLD[1:]]
    rsp = drive(deployment(1), world(base=tainted), observe(first))
    assert placed(rsp) == [(0, "gpu-a")]
    drained = [ic("gpu-a", taints=[{"key": "maint", "effect": "NoExecute"}]), *C5_WORLD[1:]]
    rsp = drive(deployment(1), world(base=drained), observe(first))
    assert placed(rsp) == [(1, "gpu-b")]
    tol = deployment(1, tolerations=[{"key": "maint", "operator": "Exists"}])
    rsp = drive(tol, world(base=drained), observe(first))
    assert placed(rsp) == [(0, "gpu-a")]


# ---- bad input -----------------------------------------------------------------------


def test_invalid_device_selector_names_it_and_keeps_replicas() -> None:
    first = drive(deployment(1), world())
    bad = deployment(3, engines=[engine(selector='device.capacity["gpu.nvidia.com"')])
    rsp = drive(bad, world(), observe(first))
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert (c["status"], c["reason"]) == ("False", "InvalidDeviceSelector")
    assert (
        "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
        in c["message"]
    )
    assert 'device.capacity["gpu.nvidia.com"' in c["message"]
    assert placed(rsp) == placed(first)


@pytest.mark.parametrize(
    "expr",
    [
        "(" * 124 + 'device.driver == "gpu.nvidia.com"' + ")" * 124,
        "||".join(["true"] * 1200),
        "dyn(" * 113 + "true" + ")" * 113,
    ],
    ids=["124 parentheses", "1200 terms", "113 calls"],
)
def test_a_selector_nested_too_deeply_is_invalid_not_an_internal_error(expr: str) -> None:
    """Found by a trial: the cost estimate recursed once per level of the parse tree, so
    a selector within the XRD's 8,192 characters raised RecursionError ("internal
    error", no field named)."""
    first = drive(deployment(1), world())
    rsp = drive(deployment(3, engines=[engine(selector=expr)]), world(), observe(first))
    assert not h.fatal(rsp), h.fatal(rsp)
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert (c["status"], c["reason"]) == ("False", "InvalidDeviceSelector"), c
    assert "levels deep, over the 300 it may" in c["message"], c["message"]
    assert placed(rsp) == placed(first)


# Issue 13: a selector that fails while evaluating is treated like one that does not
# compile (DRA: "Any other result is an error and causes allocation of devices to
# abort"): the replicas that exist are kept and the condition names field and error.
EVAL_ERRORS = [
    ("unknown attribute", 'device.attributes["gpu.nvidia.com"].missing', "missing"),
    ("division by zero", '1 / 0 == 1 || device.driver == "x"', "divide by zero"),
    ("non-boolean result", "dyn(device.driver)", "not a boolean"),
    # review 15a: RE2 compiled it to 3 MiB (0.15 s), kept outside the memo budget
    ("regex too large", 'device.driver != "" && !"a".matches("' + ".{1000}" * 9 + '")',
     "too large"),
]


@pytest.mark.parametrize("transport", ["in-process", "grpc"])
@pytest.mark.parametrize(("case", "expr", "error"), EVAL_ERRORS, ids=[c[0] for c in EVAL_ERRORS])
def test_selector_failing_at_evaluation_keeps_replicas_and_names_the_field(
    grpc_function: h.GrpcFunction, transport: str, case: str, expr: str, error: str
) -> None:
    first = drive(deployment(2), world())
    assert len(placed(first)) == 2
    bad = deployment(3, engines=[engine(selector=expr)])
    if transport == "grpc":
        rsp, _ = grpc_function.drive(bad, world(), observe(first))
    else:
        rsp = drive(bad, world(), observe(first))
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert (c["status"], c["reason"]) == ("False", "InvalidDeviceSelector"), (case, c)
    field = "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
    assert c["message"].startswith(field + ": "), c["message"]
    assert error in c["message"] and expr in c["message"], c["message"]
    assert placed(rsp) == placed(first)
    assert not any("removed replica" in m for _, m in h.results(rsp))
    assert ("Warning", c["message"]) in h.results(rsp)


def test_selector_that_matches_nothing_is_capacity_not_error() -> None:
    xr = deployment(1, engines=[engine(selector='device.driver == "amd.com"')])
    rsp = drive(xr, world())
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert c["reason"] == "InsufficientCapacity"
    assert "no pool's devices satisfy" in c["message"]


def test_multi_node_engine_without_cache_is_fatal_naming_the_field() -> None:
    gang = engine()
    gang["members"] = [
        {**gang["members"][0], "role": "Leader"},
        {**gang["members"][0], "role": "Worker", "worker": {"nodes": 1}},
    ]
    rsp = h.run(h.request(deployment(1, cache_name=None, engines=[gang])))
    assert h.fatal(rsp) and "spec.template.spec.modelCacheRef" in h.fatal(rsp)[0]


def test_bad_cluster_selector_is_fatal_naming_the_field() -> None:
    xr = deployment(1, selector={"matchExpressions": [{"key": "a", "operator": "Near"}]})
    rsp = h.run(h.request(xr))
    assert "spec.template.spec.clusterSelector.matchExpressions[0].operator" in h.fatal(rsp)[0]


# ---- XRD -----------------------------------------------------------------------------


def test_xrd_requires_a_cache_for_multi_node_engines() -> None:
    from tests.support.validation import xr_cel_errors

    gang = engine()
    gang["members"] = [
        {**gang["members"][0], "role": "Leader"},
        {**gang["members"][0], "role": "Worker", "worker": {"nodes": 1}},
    ]
    spec = deployment(1, cache_name=None, engines=[gang])["spec"]
    errors = xr_cel_errors("ModelDeployment", spec)
    assert any("requires modelCacheRef" in e for e in errors), errors
    spec["template"]["spec"]["modelCacheRef"] = {"name": "c"}
    assert xr_cel_errors("ModelDeployment", spec) == []


def test_xrd_accepts_full_label_selector() -> None:
    validate_xr(
        deployment(
            1,
            selector={
                "matchLabels": {"gpu": "h100"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["dev"]}],
            },
        )
    )


# ---- over gRPC -----------------------------------------------------------------------


def _case_table() -> list[tuple[str, dict[str, Any], h.World, dict[str, Any] | None, Any]]:
    """(id, XR, world, observed, (placed, ReplicasScheduled reason, ReplicasReady reason))."""
    eu = ic("gpu-eu", {"gpu": "h100", "region": "eu"})
    c7_first = drive(
        deployment(1), world(base=[ic("gpu-c"), cache(), hydration("gpu-c", "Hydrating")])
    )
    c7_observed = observe(
        c7_first, {0: ("False", "HydrationFailed", "gpu-c: Job DeadlineExceeded")}
    )
    ready_first = drive(deployment(2), world())
    both_ready = observe(ready_first, {0: ("True", "Serving", "ok"), 1: ("True", "Serving", "ok")})
    return [
        (
            "c5",
            deployment(2),
            world(),
            None,
            ([(0, "gpu-a"), (1, "gpu-b")], "Scheduled", "ReplicasNotReady"),
        ),
        (
            "c5-no-intersection",
            deployment(2, selector={"matchLabels": {"gpu": "h100", "region": "eu"}}),
            world(eu),
            None,
            ([], "NoClusterInCacheFootprint", "ReplicasNotReady"),
        ),
        (
            "c7-new",
            deployment(3),
            world(base=C7_BASE),
            None,
            (None, "Scheduled", "ReplicasNotReady"),
        ),
        (
            "c7-move",
            deployment(1),
            world(base=C7_BASE),
            c7_observed,
            ([(1, "gpu-a")], "Scheduled", "ReplicasNotReady"),
        ),
        (
            "cache-not-found",
            deployment(1),
            world(base=[ic("gpu-a")]),
            None,
            ([], "CacheNotFound", "ReplicasNotReady"),
        ),
        (
            "no-clusters",
            deployment(1, cache_name=None),
            world(base=[]),
            None,
            ([], "NoMatchingClusters", "ReplicasNotReady"),
        ),
        (
            "partial",
            deployment(3, cache_name=None),
            world(base=[ic("gpu-a", nodes=2)]),
            None,
            ([(0, "gpu-a"), (1, "gpu-a")], "InsufficientCapacity", "ReplicasNotReady"),
        ),
        (
            "all-ready",
            deployment(2),
            world(),
            both_ready,
            ([(0, "gpu-a"), (1, "gpu-b")], "Scheduled", "Ready"),
        ),
        ("scale-to-zero", deployment(0), world(), both_ready, ([], "Scheduled", "ScaledToZero")),
    ]


CASES = _case_table()


@pytest.mark.parametrize(("case", "xr", "w", "observed", "want"), CASES, ids=[c[0] for c in CASES])
def test_table_in_process_and_over_grpc(
    grpc_function: h.GrpcFunction,
    case: str,
    xr: dict[str, Any],
    w: h.World,
    observed: Any,
    want: Any,
) -> None:
    over_grpc, calls = grpc_function.drive(xr, w, observed)
    in_process, _ = h.drive(h.run, xr, observed, w)
    assert 2 <= calls <= 3
    assert over_grpc.SerializeToString(deterministic=True) == in_process.SerializeToString(
        deterministic=True
    )
    places, scheduled, ready = want
    cond = h.conditions(over_grpc)
    assert cond["ReplicasScheduled"]["reason"] == scheduled, cond
    assert cond["ReplicasReady"]["reason"] == ready, cond
    assert all(c["message"] for c in cond.values())
    if places is not None:
        assert placed(over_grpc) == places
    else:
        assert placed(over_grpc) and "gpu-c" not in {c for _, c in placed(over_grpc)}
    for body in replicas_of(over_grpc).values():
        validate_xr(body)


def test_replica_xrd_engines_follow_the_deployment_xrd() -> None:
    """compositions/modelreplica is generated from modeldeployment's engine schema: in step."""
    from tests.support.validation import find_xrd

    def spec_props(kind: str) -> dict[str, Any]:
        s = find_xrd(API_VERSION, kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        return s["properties"]["spec"]["properties"]

    dep = spec_props("ModelDeployment")["template"]["properties"]["spec"]["properties"]
    rep = copy.deepcopy(spec_props("ModelReplica"))
    member = rep["engines"]["items"]["properties"]["members"]["items"]["properties"]
    assert member.pop("pool")["type"] == "string"
    # The source identity a replica serves is the deployment's to set, never the author's.
    assert rep["modelCacheRef"]["properties"].pop("identity")["type"] == "string"
    for key in (
        "engines",
        "modelCacheRef",
        "tolerations",
        "serving",
        "shmSizeLimit",
        "flashLoader",
    ):
        assert rep[key] == dep[key], key


# ---- the two halves together: the replicas the deployment composes, composed ------------


def _as_xr(body: dict[str, Any]) -> dict[str, Any]:
    xr = copy.deepcopy(body)
    xr["metadata"]["uid"] = f"uid-{xr['metadata']['name']}"
    xr["metadata"]["generation"] = 1
    return xr


def _compose_replica(body: dict[str, Any], w: h.World) -> Any:
    rsp, _ = h.drive(h.run, _as_xr(body), None, w)
    assert not h.fatal(rsp), h.fatal(rsp)
    return rsp


def test_c5_replica_on_hydrating_cluster_composes_no_workload_until_ready() -> None:
    dep = drive(deployment(2), world())
    reps = replicas_of(dep)
    on_b = _compose_replica(reps["replica-1"], world())
    c = h.conditions(on_b)["ModelReady"]
    assert (c["status"], c["reason"]) == ("False", "Hydrating")
    assert not [k for k in h.desired(on_b) if k.startswith("workload-")]
    # gpu-b's hydration finishes: the same replica now composes its workload.
    ready = [*C5_WORLD[:-1], hydration("gpu-b", "Ready")]
    on_b = _compose_replica(reps["replica-1"], world(base=ready))
    assert [k for k in h.desired(on_b) if k.startswith("workload-")]
    # The replica on gpu-a composes its workload right away.
    on_a = _compose_replica(reps["replica-0"], world())
    assert [k for k in h.desired(on_a) if k.startswith("workload-")]


def test_c7_replica_gated_on_failed_hydration_fails_and_the_deployment_shows_it() -> None:
    before = [ic("gpu-c"), cache(), hydration("gpu-c", "Hydrating")]
    dep = drive(deployment(1), world(base=before))
    rep = replicas_of(dep)["replica-0"]
    failed_world = [ic("gpu-c"), cache(), hydration("gpu-c", "Failed")]
    r = _compose_replica(rep, world(base=failed_world))
    c = h.conditions(r)["ModelReady"]
    assert (c["status"], c["reason"]) == ("False", "HydrationFailed")
    # Feed the replica's own verdict back to the deployment (nowhere else to go: kept).
    observed = {
        "replica-0": {
            **rep,
            "status": {
                "conditions": [
                    {
                        "type": "ModelReady",
                        "status": "False",
                        "reason": c["reason"],
                        "message": c["message"],
                    }
                ]
            },
        },
        **{k: v for k, v in h.desired(dep).items() if k != "replica-0"},
    }
    again = drive(deployment(1), world(base=failed_world), observed)
    rr = h.conditions(again)["ReplicasReady"]
    assert (rr["status"], rr["reason"]) == ("False", "HydrationFailed")
    assert "gpu-c" in rr["message"]


@pytest.mark.parametrize(
    ("selectors", "field"),
    [
        (1.5, "devices[0].selectors"),
        ([{"cel": 3}], "devices[0].selectors[0].cel"),
        ([], "devices[0].selectors"),
    ],
)
def test_device_request_of_wrong_shape_is_fatal_naming_the_field(
    selectors: Any, field: str
) -> None:
    e = engine()
    e["members"][0]["nodeSelector"]["devices"][0]["selectors"] = selectors
    msg = h.fatal(h.run(h.request(deployment(1, engines=[e]))))
    assert msg and f"spec.template.spec.engines[0].members[0].nodeSelector.{field}" in msg[0]


# ---- hot path: lazy reads and memoized bodies stay exact --------------------------------


def test_footprint_ignores_hydrations_of_another_cache_or_cluster() -> None:
    """The footprint is read lazily (by hydration name); a hydration that carries the
    cache's label but another cache's name, or this cache's name for another cluster,
    is in no footprint, for new replicas and for existing ones alike."""
    stray = hydration("gpu-b", "Ready", cache_name="other-cache")
    stray["metadata"]["labels"]["modelplane.ai/cache"] = "qwen-cache"  # a label collision
    moved = hydration("gpu-a", "Ready")
    moved["spec"]["clusterName"] = "gpu-c"  # this cache's name for gpu-a, claiming gpu-c
    base = [ic("gpu-a"), ic("gpu-b"), ic("gpu-c"), cache(), stray, moved]
    rsp = drive(deployment(2), world(base=base))
    assert placed(rsp) == []
    c = h.conditions(rsp)["ReplicasScheduled"]
    # Neither counts as a hydration of this cache: the footprint is empty.
    assert (c["status"], c["reason"]) == ("False", "WaitingForCache")
    # Existing replicas on those clusters are outside the footprint: removed (the
    # deployment's own gpu-a hydration is what keeps one of them).
    first = drive(deployment(2), world())
    assert placed(first) == [(0, "gpu-a"), (1, "gpu-b")]
    base = [ic("gpu-a"), ic("gpu-b"), cache(), hydration("gpu-a", "Ready"), stray]
    rsp = drive(deployment(2), world(base=base), observe(first))
    assert placed(rsp) == [(0, "gpu-a"), (2, "gpu-a")]
    warnings = [m for s, m in h.results(rsp) if s == "Warning"]
    assert any("replica 1 from gpu-b" in m and "outside the footprint" in m for m in warnings)


def test_replica_bodies_follow_every_input_of_the_memo() -> None:
    """Replica bodies are memoized by (namespace, name, template, index, cluster, pools):
    a change to any of them changes the body, and a repeated call returns equal bodies."""
    a = replicas_of(drive(deployment(1), world()))["replica-0"]
    again = replicas_of(drive(deployment(1), world()))["replica-0"]
    assert a == again
    relabeled = deployment(1)
    relabeled["spec"]["template"]["metadata"]["labels"]["team"] = "search"
    b = replicas_of(drive(relabeled, world()))["replica-0"]
    assert b["metadata"]["labels"]["team"] == "search" and a["metadata"]["labels"]["team"] == "chat"
    assert b["spec"] == a["spec"]
    image = deployment(1)
    members = image["spec"]["template"]["spec"]["engines"][0]["members"]
    members[0]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.10.0"
    c = replicas_of(drive(image, world()))["replica-0"]
    assert c["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["image"] == (
        "vllm/vllm-openai:v0.10.0"
    )
    elsewhere = h.xr("ModelDeployment", "chat", deployment(1)["spec"], namespace="team-b")
    other_ns = {**cache(), "metadata": {"name": "qwen-cache", "namespace": "team-b"}}
    hyd = hydration("gpu-a", "Ready")
    hyd["metadata"].update(name=hydration_name("team-b", "qwen-cache", "gpu-a"), namespace="team-b")
    w = world(base=[*C5_WORLD[:3], other_ns, hyd])
    d = replicas_of(drive(elsewhere, w))["replica-0"]
    assert d["metadata"]["namespace"] == "team-b"
    assert d["metadata"]["name"] == replica_name("team-b", "chat", 0) != a["metadata"]["name"]


def test_cluster_changes_are_seen_across_calls() -> None:
    """InferenceClusters are memoized by content: a cluster that stops being Ready or
    loses nodes between two calls is read afresh."""
    first = drive(deployment(2), world())
    assert placed(first) == [(0, "gpu-a"), (1, "gpu-b")]
    base = [ic("gpu-a", ready=False), ic("gpu-b", nodes=1), ic("gpu-c"), *C5_WORLD[3:]]
    rsp = drive(deployment(3), world(base=base), observe(first))
    # gpu-a is not Ready: its replica stays (nowhere else has room) and nothing new goes
    # there; gpu-b's one node is taken by replica 1; gpu-c is outside the footprint.
    assert placed(rsp) == [(0, "gpu-a"), (1, "gpu-b")]
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert c["reason"] == "InsufficientCapacity" and "gpu-a: not Ready" in c["message"]


@pytest.mark.parametrize(
    "name", ["MODELPLANE_MODEL", "MODELPLANE_LEADER_ADDRESS", "MODELPLANE_RANK"]
)
def test_reserved_env_name_is_rejected_where_the_user_wrote_it(name: str) -> None:
    eng = engine()
    eng["members"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "HF_HOME", "value": "/cache"},
        {"name": name, "value": "/models/mine"},
    ]
    rsp = h.run(h.request(deployment(engines=[eng])))
    (msg,) = h.fatal(rsp)
    field = "spec.template.spec.engines[0].members[0].template.spec.containers[0].env[1].name"
    assert field in msg and name in msg
    assert not rsp.desired.resources


# ---- issue 13: reclaim finishes ---------------------------------------------------------


def test_retained_cluster_takes_no_replica_and_its_replicas_move_make_before_break(
    grpc_function: h.GrpcFunction,
) -> None:
    """A cluster leaves the cache's selector: its replica moves, then the cache reclaims it.

    The ModelCache and ModelDeployment composers run together over gRPC, each reading
    what the other wrote (the cache's status, the deployment's replicas).
    """
    from function.naming import cache_shard
    from tests.support.fixtures import cache_spec, observed_hydration

    east = ic("gpu-a", {"gpu": "h100", "zone": "east"})
    west = ic("gpu-b", {"gpu": "h100", "zone": "west"})
    clusters = [east, west]
    mc = h.xr("ModelCache", "qwen-cache", cache_spec({"matchLabels": {"gpu": "h100"}}))

    shards: dict = {}  # the cache's shards as observed (with the status they wrote)

    def cache_call(selector, replicas, observed):
        # The cache, each of its shards (with the hydrations observed), the cache again.
        mc["spec"]["clusterSelector"] = selector
        world = h.World([*clusters, *replicas])
        hyd: dict = {}
        for _ in range(2):
            rsp, _ = grpc_function.drive(mc, world, shards)
            mc["status"] = h.status(rsp)
            for k in [k for k in shards if k not in h.desired(rsp)]:
                del shards[k]
            for k, body in h.desired(rsp).items():
                sxr = {**body, "metadata": {**body["metadata"], "uid": k}}
                sxr["status"] = (shards.get(k) or {}).get("status") or {}
                mine = {
                    hk: hb
                    for hk, hb in (observed or {}).items()
                    if cache_shard(hb["spec"]["clusterName"]) == int(k.split("-")[1])
                }
                srsp, _ = grpc_function.drive(sxr, world, mine)
                shards[k] = {**body, "status": h.status(srsp)}
                hyd.update(
                    (hk, observed_hydration(b, "Ready"))
                    for hk, b in h.desired(srsp).items()
                    if b["kind"] == "ModelCacheHydration"
                )
        return rsp, hyd

    def deploy_call(cache_rsp, hyd, observed):
        cache_obj = {**mc, "status": h.status(cache_rsp)}
        world = h.World([*clusters, cache_obj, *hyd.values()])
        rsp, _ = grpc_function.drive(deployment(1), world, observed)
        assert not h.fatal(rsp)
        return rsp

    # Both clusters in the footprint; the replica lands on gpu-a and serves.
    c1, hyd = cache_call({"matchLabels": {"gpu": "h100"}}, [], None)
    d1 = deploy_call(c1, hyd, None)
    assert placed(d1) == [(0, "gpu-a")]
    serving = {0: ("True", "Serving", "ok")}
    obs = observe(d1, serving)
    r0 = [b for b in obs.values() if b["kind"] == "ModelReplica"]

    # gpu-a leaves the cache's selector: kept (a live replica uses it), shown retained.
    west_only = {"matchLabels": {"zone": "west"}}
    c2, hyd2 = cache_call(west_only, r0, hyd)
    rows = {r["name"]: r for r in h.status(c2)["retained"]}
    assert set(rows) == {"gpu-a"}
    assert "no new replica" in rows["gpu-a"]["message"]
    assert "reclaimed" in rows["gpu-a"]["message"]
    assert sorted(b["spec"]["clusterName"] for b in hyd2.values()) == ["gpu-a", "gpu-b"]

    # The deployment places a replacement on gpu-b and keeps gpu-a's replica serving.
    d2 = deploy_call(c2, hyd2, obs)
    assert placed(d2) == [(0, "gpu-a"), (1, "gpu-b")]
    assert not [m for _, m in h.results(d2) if "removed replica" in m]
    msg = h.conditions(d2)["ReplicasScheduled"]["message"]
    assert msg.startswith("1 of 1 replicas placed") and "retained" in msg, msg
    # Not yet serving: still make-before-break.
    obs2 = observe(d2, serving)
    d3 = deploy_call(c2, hyd2, obs2)
    assert placed(d3) == [(0, "gpu-a"), (1, "gpu-b")]

    # The replacement serves: gpu-a's replica goes.
    obs3 = observe(d3, {0: ("True", "Serving", "ok"), 1: ("True", "Serving", "ok")})
    d4 = deploy_call(c2, hyd2, obs3)
    assert placed(d4) == [(1, "gpu-b")]
    assert any("moved off gpu-a" in m for _, m in h.results(d4))

    # No live replica on gpu-a: the cache reclaims its hydration (and so its PVC).
    r1 = [b for b in observe(d4, serving).values() if b["kind"] == "ModelReplica"]
    c3, hyd3 = cache_call(west_only, r1, hyd2)
    assert h.status(c3)["retained"] == [] and h.status(c3)["summary"]["ready"] == "1/1"
    assert sorted(b["spec"]["clusterName"] for b in hyd3.values()) == ["gpu-b"]


# Found by review 17l (F3): the cache writes status.retained only from its shards'
# reports, so right after its clusterSelector drops a cluster (and before the shard
# reports it retained) the cluster read as an ordinary footprint cluster and a scale-up
# placed new replicas there. A footprint cluster the cache's selector no longer matches
# is treated like a retained one; an invalid selector changes nothing (the cache reports
# it).
EAST_WEST = [
    ic("gpu-a", {"gpu": "h100", "zone": "east"}),
    ic("gpu-b", {"gpu": "h100", "zone": "west"}),
]
HYDRATED = [hydration("gpu-a", "Ready"), hydration("gpu-b", "Ready")]
BOTH = {"matchLabels": {"gpu": "h100"}}


@dataclass(frozen=True)
class Leaving:
    """The cache's spec.clusterSelector and status.retained names when the deployment,
    with replica 0 serving on gpu-a, scales from 1 to ``replicas``."""

    selector: Any
    retained: tuple[str, ...] = ()
    replicas: int = 3


LEAVING: list[Case[Leaving, tuple[list[tuple[int, str]], str]]] = [
    Case("selector unchanged", "both clusters in the footprint: the new replicas spread",
         Leaving(BOTH), ([(0, "gpu-a"), (1, "gpu-b"), (2, "gpu-a")], "3 of 3")),
    Case("gpu-b left, not yet retained", "the reviewer's s14: gpu-b left the selector, "
         "the shard has not reported it: no new replica there",
         Leaving({"matchLabels": {"zone": "east"}}),
         ([(0, "gpu-a"), (1, "gpu-a"), (2, "gpu-a")], "3 of 3")),
    Case("gpu-b left and retained", "the status says so too: the same placement",
         Leaving({"matchLabels": {"zone": "east"}}, ("gpu-b",)),
         ([(0, "gpu-a"), (1, "gpu-a"), (2, "gpu-a")], "3 of 3")),
    Case("gpu-b left by matchExpressions", "the full selector with Kubernetes semantics",
         Leaving({"matchExpressions": [
             {"key": "zone", "operator": "NotIn", "values": ["west"]}]}),
         ([(0, "gpu-a"), (1, "gpu-a"), (2, "gpu-a")], "3 of 3")),
    Case("gpu-a left, not yet retained", "the replica's cluster left: new replicas go to "
         "gpu-b, replica 0 stays until they serve (make-before-break)",
         Leaving({"matchLabels": {"zone": "west"}}),
         ([(0, "gpu-a"), (1, "gpu-b"), (2, "gpu-b"), (3, "gpu-b")], "kept on retained")),
    Case("gpu-a left and retained", "the status says so too: the same placement",
         Leaving({"matchLabels": {"zone": "west"}}, ("gpu-a",)),
         ([(0, "gpu-a"), (1, "gpu-b"), (2, "gpu-b"), (3, "gpu-b")], "kept on retained")),
    Case("invalid selector", "the cache reports its invalid selector; placement is as "
         "before the edit",
         Leaving({"matchExpressions": [{"key": "zone", "operator": "Near"}]}),
         ([(0, "gpu-a"), (1, "gpu-b"), (2, "gpu-a")], "3 of 3")),
]  # fmt: skip


@table(LEAVING)
def test_a_cluster_that_left_the_cache_selector_takes_no_new_replica(
    case: Case[Leaving, tuple[list[tuple[int, str]], str]],
) -> None:
    first = drive(deployment(1), world(base=[*EAST_WEST, cache(), *HYDRATED]))
    assert placed(first) == [(0, "gpu-a")]
    mc = cache()
    mc["spec"]["clusterSelector"] = case.inputs.selector
    mc["status"] = {"retained": [{"name": n, "message": "kept"} for n in case.inputs.retained]}
    rsp = drive(
        deployment(case.inputs.replicas),
        world(base=[*EAST_WEST, mc, *HYDRATED]),
        observe(first, {0: ("True", "Serving", "ok")}),
    )
    want, says = case.want
    assert placed(rsp) == want, case.reason
    assert says in h.conditions(rsp)["ReplicasScheduled"]["message"]


WHOLE_NUMBER_FIELDS = [
    # (field written wrong, the path the fatal result must name)
    ("replicas", "spec.replicas"),
    ("count", "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].count"),
]


@pytest.mark.parametrize("value", ["3", True, 2.5])
@pytest.mark.parametrize(("field", "path"), WHOLE_NUMBER_FIELDS)
def test_integers_must_be_whole_numbers(field: str, path: str, value: Any) -> None:
    """Found by the fuzz test ("3" passed pydantic's lax int and placed three replicas)
    and by a fresh-user trial (a device count of "1" placed replicas whose own spec the
    ModelReplica then refused): the XRD says integer, so the spec is refused, naming it."""
    xr = deployment(2)
    if field == "replicas":
        xr["spec"]["replicas"] = value
    else:
        member = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]
        member["nodeSelector"]["devices"][0]["count"] = value
    (msg,) = h.fatal(h.run(h.request(xr)))
    assert path in msg, msg


# What every replica would refuse in a member's pod template (POD_TEMPLATE_FAULTS),
# refused by the deployment where it was written, with a fatal result (Crossplane applies
# nothing: its replicas stay as they are).


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [pytest.param(p, v, f, id=i) for i, p, v, f in POD_TEMPLATE_FAULTS],
)
def test_a_pod_template_fault_is_fatal_naming_it(
    path: tuple[Any, ...], value: Any, field: str
) -> None:
    first = drive(deployment(1), world())
    e = engine()
    put_fault(e["members"][0]["template"], path, value)
    rsp, _ = h.drive(h.run, deployment(1, engines=[e]), observe(first), world())
    (msg,) = h.fatal(rsp)
    assert f"spec.template.spec.engines[0].members[0].{field}" in msg, msg
    assert "internal error" not in msg


# Deployment-level values the XRD's patterns let through and every replica composed
# from them refused (found by a trial: the deployment stayed Ready while the edit never
# rolled out): refused by the deployment, naming the field.
LEVEL_FAULTS = [
    ("a /dev/shm of zero", {"shmSizeLimit": "0"}, "spec.template.spec.shmSizeLimit"),
    ("a flash-loader tmpfs of zero", {"flashLoader": {"tmpfsSizeLimit": "0"}},
     "spec.template.spec.flashLoader.tmpfsSizeLimit"),
    ("a flash-loader tmpfs of zero bytes in Gi", {"flashLoader": {"tmpfsSizeLimit": "0Gi"}},
     "spec.template.spec.flashLoader.tmpfsSizeLimit"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "field"), [pytest.param(x, f, id=i) for i, x, f in LEVEL_FAULTS]
)
def test_a_value_every_replica_would_refuse_is_fatal_naming_it(
    extra: dict[str, Any], field: str
) -> None:
    first = drive(deployment(1), world())
    edited = deployment(1, **extra)
    validate_xr(edited)  # the XRD admits it: only the function can refuse it
    rsp, _ = h.drive(h.run, edited, observe(first), world())
    (msg,) = h.fatal(rsp)
    assert f"{field}: must be a Kubernetes quantity greater than zero" in msg, msg


# Deployment-level tolerations the XRD admits and the workload cluster's API server
# refuses in every pod the function adds them to (review 16b F4): refused by the
# deployment, naming the field, the replicas kept.
TOLERATION_FAULTS = [
    ("a key that is no qualified name", {"key": "bad key!", "operator": "Exists"},
     "spec.template.spec.tolerations[0].key"),
    ("a key of 5,000 characters", {"key": "k" * 5000, "operator": "Exists"},
     "spec.template.spec.tolerations[0].key"),
    ("a key with two slashes", {"key": "a/b/c", "operator": "Exists"},
     "spec.template.spec.tolerations[0].key"),
    ("a value that is no label value", {"key": "gpu", "operator": "Equal", "value": "a b"},
     "spec.template.spec.tolerations[0].value"),
    ("a value of 64 characters", {"key": "gpu", "operator": "Equal", "value": "v" * 64},
     "spec.template.spec.tolerations[0].value"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("toleration", "field"), [pytest.param(t, f, id=i) for i, t, f in TOLERATION_FAULTS]
)
def test_a_toleration_every_pod_would_refuse_is_fatal_naming_it(
    toleration: dict[str, Any], field: str
) -> None:
    first = drive(deployment(1), world())
    edited = deployment(1)
    edited["spec"]["template"]["spec"]["tolerations"] = [toleration]
    validate_xr(edited)  # the XRD admits it: only the function can refuse it
    rsp, _ = h.drive(h.run, edited, observe(first), world())
    (msg,) = h.fatal(rsp)
    assert f"{field}: " in msg and "API server refuses it" in msg, msg
    assert len(msg) < 800, len(msg)  # an excerpt of the value, never all of it


def test_cache_reference_removed_while_replicas_hydrate_names_no_none() -> None:
    """Found by a trial: with ``modelCacheRef`` removed while the observed replicas still
    reported Hydrating, ReplicasReady said "waiting for ModelCache None"."""
    first = drive(deployment(1), world())
    observed = observe(first, {0: ("False", "Hydrating", "hydrating on gpu-a")})
    rsp = drive(deployment(1, cache_name=None), world(), observed)
    c = h.conditions(rsp)["ReplicasReady"]
    assert c["status"] == "False" and "None" not in c["message"], c


def test_a_pod_template_with_the_tolerations_kubernetes_takes_is_accepted() -> None:
    """Found by a review: an empty ``effect`` (every effect) and an empty ``operator``
    (Equal) are Kubernetes tolerations, refused once the member template was checked."""
    e = engine()
    e["members"][0]["template"]["spec"]["tolerations"] = [
        {"key": "dedicated", "value": "ml", "effect": ""},
        {"key": "team", "operator": "", "value": "ml"},
    ]
    rsp = drive(deployment(1, engines=[e]), world())
    assert placed(rsp)


# ---- changing the cache reference (review 13b) ----------------------------------------

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _llama_hydration(cluster: str, phase: str) -> dict[str, Any]:
    hyd = hydration(cluster, phase, cache_name="llama-cache")
    hyd["spec"]["huggingFace"]["repo"] = LLAMA
    return hyd


def _llama_cache() -> dict[str, Any]:
    c = cache("llama-cache")
    c["spec"]["huggingFace"]["repo"] = LLAMA
    return c


def test_a_new_cache_reference_holds_each_replica_on_its_cache_until_the_new_one_is_ready() -> None:
    """Found by review 13b: switching ``modelCacheRef`` to a cache still hydrating gave
    each replica ``{name: <new cache>, identity: <the old cache's identity>}`` (an
    identity no hydration of the new cache would ever hold), moved the cache label and
    dropped the old cache's Usage while its pods still read it. Now a replica keeps its
    cache's name, identity and label until the new cache's hydration is Ready on its
    cluster, the old cache keeps a Usage while any replica is held on it, and then
    the replica is given the new cache's identity."""
    serving = ("True", "Serving", "serving")
    base = [ic("gpu-a"), ic("gpu-b"), cache(), _llama_cache(),
            hydration("gpu-a", "Ready"), hydration("gpu-b", "Ready")]  # fmt: skip
    xr = deployment(2)
    rsp = drive(xr, h.World(base))
    rsp = drive(xr, h.World(base), observe(rsp, {0: serving, 1: serving}))
    before = {int(r["spec"]["index"]): r for r in replicas_of(rsp).values()}
    old_ids = {i: r["spec"]["modelCacheRef"]["identity"] for i, r in before.items()}
    assert all(r["spec"]["modelCacheRef"]["name"] == "qwen-cache" for r in before.values())

    switched = copy.deepcopy(xr)
    switched["spec"]["template"]["spec"]["modelCacheRef"] = {"name": "llama-cache"}
    hydrating = [*base, _llama_hydration("gpu-a", "Hydrating"), _llama_hydration("gpu-b", "Ready")]
    rsp = drive(switched, h.World(hydrating), observe(rsp, {0: serving, 1: serving}))
    by_cluster = {r["spec"]["clusterName"]: r for r in replicas_of(rsp).values()}
    held = by_cluster["gpu-a"]
    assert held["spec"]["modelCacheRef"] == {"name": "qwen-cache", "identity": old_ids[0]}
    assert held["metadata"]["labels"]["modelplane.ai/cache"] == "qwen-cache"
    moved = by_cluster["gpu-b"]
    assert moved["spec"]["modelCacheRef"]["name"] == "llama-cache"
    assert moved["spec"]["modelCacheRef"]["identity"] not in old_ids.values()
    assert moved["metadata"]["labels"]["modelplane.ai/cache"] == "llama-cache"
    usages = {k: v["spec"]["of"]["resourceRef"]["name"] for k, v in h.desired(rsp).items()
              if v.get("kind") == "Usage"}  # fmt: skip
    assert sorted(usages.values()) == ["llama-cache", "qwen-cache"], usages
    names = [v["metadata"]["name"] for v in h.desired(rsp).values() if v.get("kind") == "Usage"]
    assert len(set(names)) == 2, names
    assert h.conditions(rsp)["ReplicasReady"]["status"] == "True"

    ready = [*base, _llama_hydration("gpu-a", "Ready"), _llama_hydration("gpu-b", "Ready")]
    rsp = drive(switched, h.World(ready), observe(rsp, {0: serving, 1: serving}))
    refs = [r["spec"]["modelCacheRef"] for r in replicas_of(rsp).values()]
    assert all(ref["name"] == "llama-cache" for ref in refs), refs
    assert not {ref["identity"] for ref in refs} & set(old_ids.values()), refs

    def usages(rsp: Any) -> list[str]:
        return sorted(v["spec"]["of"]["resourceRef"]["name"] for v in h.desired(rsp).values()
                      if v.get("kind") == "Usage")  # fmt: skip

    # Review 13d: the switched replica rolls make-before-break, its old pods reading
    # qwen-cache: the held Usage stays until every replica is ready.
    assert usages(rsp) == ["llama-cache", "qwen-cache"]
    rolling = ("False", "Starting", "rolling onto the new identity", True)
    rsp = drive(switched, h.World(ready), observe(rsp, {0: rolling, 1: serving}))
    assert usages(rsp) == ["llama-cache", "qwen-cache"]
    rsp = drive(switched, h.World(ready), observe(rsp, {0: serving, 1: serving}))
    assert usages(rsp) == ["llama-cache"]


# ---- a replica rolling off a cache is labelled as leaving it (review 17l F2) --------------

LEAVING = "modelplane.ai/leaving-cache"
QWEN_ID = source_identity("Qwen/Qwen2.5-7B-Instruct", "main")
LLAMA_ID = source_identity(LLAMA, "main")


def _cache_like(name: str, repo: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """ModelCache ``name`` of ``repo`` and its hydration, Ready on gpu-a."""
    c, hyd = cache(name), hydration("gpu-a", "Ready", cache_name=name)
    c["spec"]["huggingFace"]["repo"] = hyd["spec"]["huggingFace"]["repo"] = repo
    return c, hyd


class Roll(NamedTuple):
    """A 1-replica deployment on qwen-cache switched to ``to`` (Ready on the replica's
    cluster); the moved replica then observed with ModelReady ``ready`` (status,
    reason), ``status.cacheIdentities`` ``reads``, its condition written for the
    previous generation when ``stale`` (None: no ``observedGeneration``), its
    ``status.hydration`` naming cache ``hydrated``'s hydration (None: its spec's); the
    next reconcile with ``modelCacheRef`` ``then`` (None: ``to`` still)."""

    to: str
    ready: tuple[str, str]
    reads: tuple[str, ...]
    stale: bool | None = False
    then: str | None = None
    hydrated: str | None = None


class Marked(NamedTuple):
    """The replica after that reconcile: its spec's cache, its leaving-cache label (None:
    none), and the ModelCaches the deployment's Usages protect."""

    cache: str
    leaving: str | None
    usages: tuple[str, ...]


ROLLING = ("False", "Starting")
STALLED = ("False", "RolloutStalled")
SERVING = ("True", "Serving")
BOTH = (LLAMA_ID, QWEN_ID)

LEAVING_CASES = [
    Case(
        "rolling",
        "review 17l F2: the replica's pods of the previous template still read qwen-cache's "
        "PVC: it stays labelled as leaving it (its hydration and shard keep what they "
        "read), and qwen-cache keeps its Usage",
        Roll("llama-cache", ROLLING, BOTH),
        Marked("llama-cache", "qwen-cache", ("llama-cache", "qwen-cache")),
    ),
    Case(
        "roll-stalled",
        "a roll stalled for lack of GPU room lasts: the label stays as long",
        Roll("llama-cache", STALLED, BOTH),
        Marked("llama-cache", "qwen-cache", ("llama-cache", "qwen-cache")),
    ),
    Case(
        "ready-for-an-older-generation",
        "a ModelReady=True written before the switch (observedGeneration behind) says "
        "nothing of the roll",
        Roll("llama-cache", SERVING, (LLAMA_ID,), stale=True),
        Marked("llama-cache", "qwen-cache", ("llama-cache", "qwen-cache")),
    ),
    Case(
        "ready-while-its-status-names-the-old-identity",
        "the replica still says its pods may read qwen-cache's identity",
        Roll("llama-cache", SERVING, BOTH),
        Marked("llama-cache", "qwen-cache", ("llama-cache", "qwen-cache")),
    ),
    Case(
        "rolled",
        "ready for its current generation, reading the new cache's identity only: the "
        "label goes (qwen-cache releases its identity and hydration), and the Usage",
        Roll("llama-cache", SERVING, (LLAMA_ID,)),
        Marked("llama-cache", None, ("llama-cache",)),
    ),
    Case(
        "same-identity-rolling",
        "two caches of the same repo and revision share the identity: the status cannot "
        "tell them apart, the label (set from the spec the deployment rewrote) does",
        Roll("qwen-copy", ROLLING, (QWEN_ID,)),
        Marked("qwen-copy", "qwen-cache", ("qwen-cache", "qwen-copy")),
    ),
    Case(
        "same-identity-status-from-the-old-cache",
        "a ModelReady=True that names the old cache's hydration (written before the "
        "switch, no observedGeneration to tell) is not the roll's end",
        Roll("qwen-copy", SERVING, (QWEN_ID,), stale=None, hydrated="qwen-cache"),
        Marked("qwen-copy", "qwen-cache", ("qwen-cache", "qwen-copy")),
    ),
    Case(
        "same-identity-rolled",
        "ready for its current generation: rolled, released",
        Roll("qwen-copy", SERVING, (QWEN_ID,)),
        Marked("qwen-copy", None, ("qwen-copy",)),
    ),
    Case(
        "switched-again-while-rolling",
        "a replica leaves one cache at a time: switched to a third cache before its roll "
        "off qwen-cache is done, it is held on llama-cache until it is",
        Roll("llama-cache", ROLLING, BOTH, then="mistral-cache"),
        Marked("llama-cache", "qwen-cache", ("llama-cache", "mistral-cache", "qwen-cache")),
    ),
    Case(
        "switched-back-while-rolling",
        "back to the cache it is leaving (its old pods read it): it moves back at once, "
        "leaving llama-cache, whose new pods may have started",
        Roll("llama-cache", ROLLING, BOTH, then="qwen-cache"),
        Marked("qwen-cache", "llama-cache", ("llama-cache", "qwen-cache")),
    ),
    Case(
        "reference-removed-rolling",
        "review 17k F3: modelCacheRef removed (a single-node engine may serve without a "
        "cache) is a roll off qwen-cache as a switch is: labelled as leaving it, which "
        "keeps its Usage, while the old pods read its PVC",
        Roll("", ROLLING, (QWEN_ID,)),
        Marked("", "qwen-cache", ("qwen-cache",)),
    ),
    Case(
        "reference-removed-ready-for-an-older-generation",
        "a ModelReady=True written before the removal says nothing of the roll",
        Roll("", SERVING, (), stale=True),
        Marked("", "qwen-cache", ("qwen-cache",)),
    ),
    Case(
        "reference-removed-status-from-the-old-cache",
        "a ModelReady=True that names qwen-cache's hydration (written before the "
        "removal) is not the roll's end",
        Roll("", SERVING, (), stale=None, hydrated="qwen-cache"),
        Marked("", "qwen-cache", ("qwen-cache",)),
    ),
    Case(
        "reference-removed-rolled",
        "ready for its current generation, naming no identity and no hydration: rolled "
        "off, the label goes, and the Usage",
        Roll("", SERVING, ()),
        Marked("", None, ()),
    ),
]


def _with_cache(xr: dict[str, Any], name: str) -> dict[str, Any]:
    """``xr`` with ``spec.template.spec.modelCacheRef`` naming ``name`` ("": removed)."""
    out = copy.deepcopy(xr)
    spec = out["spec"]["template"]["spec"]
    if name:
        spec["modelCacheRef"] = {"name": name}
    else:
        spec.pop("modelCacheRef", None)
    return out


def _observe_rolling(rsp: Any, roll: Roll) -> dict[str, Any]:
    """The desired replica as observed mid-roll (``roll``'s status)."""
    out = observe(rsp, {0: (*roll.ready, "the roll")})
    for body in out.values():
        if body.get("kind") == "ModelReplica":
            if roll.stale is not None:
                body["metadata"]["generation"] = 2
                body["status"]["conditions"][0]["observedGeneration"] = 1 if roll.stale else 2
            body["status"]["cacheIdentities"] = list(roll.reads)
            cache = roll.hydrated or body["spec"].get("modelCacheRef", {}).get("name")
            if cache:  # a replica without a cache reports no hydration
                hyd = hydration_name(NS, cache, body["spec"]["clusterName"])
                body["status"]["hydration"] = {"name": hyd, "phase": "Ready", "message": "ready"}
    return out


@table(LEAVING_CASES)
def test_a_replica_rolling_off_a_cache_is_labelled_as_leaving_it(case: Case[Roll, Marked]) -> None:
    roll = case.inputs
    extra = [
        _cache_like("llama-cache", LLAMA),
        _cache_like("qwen-copy", "Qwen/Qwen2.5-7B-Instruct"),  # the same identity
        _cache_like("mistral-cache", "mistralai/Mistral-7B-Instruct-v0.3"),
    ]
    base = [ic("gpu-a"), cache(), hydration("gpu-a", "Ready"), *(o for pair in extra for o in pair)]
    xr = deployment(1)
    rsp = drive(xr, h.World(base))
    rsp = drive(xr, h.World(base), observe(rsp, {0: ("True", "Serving", "serving")}))
    switched = _with_cache(xr, roll.to)
    rsp = drive(switched, h.World(base), observe(rsp, {0: ("True", "Serving", "serving")}))
    (moved,) = replicas_of(rsp).values()
    assert moved["spec"].get("modelCacheRef", {}).get("name", "") == roll.to
    assert moved["metadata"]["labels"][LEAVING] == "qwen-cache"  # set in the call it moves
    then = _with_cache(switched, roll.then or roll.to)
    rsp = drive(then, h.World(base), _observe_rolling(rsp, roll))
    (after,) = replicas_of(rsp).values()
    got = Marked(
        after["spec"].get("modelCacheRef", {}).get("name", ""),
        after["metadata"]["labels"].get(LEAVING),
        tuple(sorted(_usage_keys(rsp).values())),
    )
    assert got == case.want, case.reason
    assert after["metadata"]["labels"].get("modelplane.ai/cache", "") == got.cache
    validate_xr(after)
    # The replica observed as composed, in the same roll state, twice: the same replica
    # and the same status (a fixed point).
    once = drive(then, h.World(base), _observe_rolling(rsp, roll))
    again = drive(then, h.World(base), _observe_rolling(once, roll))
    assert replicas_of(again) == replicas_of(once)
    assert h.status(again) == h.status(once)


def test_a_missing_cache_reference_keeps_the_serving_cache_protected() -> None:
    """Found by review 13d: a typo in ``modelCacheRef`` kept every replica serving from
    the old cache but removed its Usage, so that cache could be deleted under them."""
    serving = ("True", "Serving", "serving")
    base = [ic("gpu-a"), ic("gpu-b"), cache(), hydration("gpu-a", "Ready"),
            hydration("gpu-b", "Ready")]  # fmt: skip
    xr = deployment(2)
    rsp = drive(xr, h.World(base))
    rsp = drive(xr, h.World(base), observe(rsp, {0: serving, 1: serving}))
    before = placed(rsp)
    typo = copy.deepcopy(xr)
    typo["spec"]["template"]["spec"]["modelCacheRef"] = {"name": "nope-cache"}
    rsp = drive(typo, h.World(base), observe(rsp, {0: serving, 1: serving}))
    assert placed(rsp) == before
    assert h.conditions(rsp)["ReplicasScheduled"]["reason"] == "CacheNotFound"
    usages = [v["spec"]["of"]["resourceRef"]["name"] for v in h.desired(rsp).values()
              if v.get("kind") == "Usage"]  # fmt: skip
    assert usages == ["qwen-cache"], usages


def test_a_replica_outside_the_new_caches_footprint_moves_make_before_break() -> None:
    """Left by session 13, found by review 13b: after ``modelCacheRef`` changed, a
    replica on a cluster outside the new cache's footprint was removed at once, while
    its pods still served from the old cache and before a replacement served. Now it
    moves: it keeps serving, held on its cache (and that cache's Usage), until a
    replica on the new cache's footprint serves."""
    serving = ("True", "Serving", "serving")
    base = [ic("gpu-a"), ic("gpu-b"), ic("gpu-c"), cache(), _llama_cache(),
            hydration("gpu-a", "Ready"), hydration("gpu-b", "Ready")]  # fmt: skip
    xr = deployment(2)
    rsp = drive(xr, h.World(base))
    rsp = drive(xr, h.World(base), observe(rsp, {0: serving, 1: serving}))
    assert placed(rsp) == [(0, "gpu-a"), (1, "gpu-b")]
    switched = copy.deepcopy(xr)
    switched["spec"]["template"]["spec"]["modelCacheRef"] = {"name": "llama-cache"}
    world = h.World([*base, _llama_hydration("gpu-a", "Ready"), _llama_hydration("gpu-c", "Ready")])
    rsp = drive(switched, world, observe(rsp, {0: serving, 1: serving}))
    assert placed(rsp) == [(0, "gpu-a"), (1, "gpu-b"), (2, "gpu-c")], placed(rsp)
    by_cluster = {r["spec"]["clusterName"]: r for r in replicas_of(rsp).values()}
    assert by_cluster["gpu-b"]["spec"]["modelCacheRef"]["name"] == "qwen-cache"
    assert by_cluster["gpu-c"]["spec"]["modelCacheRef"]["name"] == "llama-cache"
    moving = [m for s, m in h.results(rsp) if s == "Warning" and "moves" in m]
    assert len(moving) == 1 and "replica 1 on gpu-b" in moving[0], h.results(rsp)
    assert "outside the footprint of ModelCache llama-cache" in moving[0]
    assert h.conditions(rsp)["ReplicasReady"]["reason"] == "Moving"

    def usages(rsp: Any) -> list[str]:
        return sorted(v["spec"]["of"]["resourceRef"]["name"] for v in h.desired(rsp).values()
                      if v.get("kind") == "Usage")  # fmt: skip

    assert usages(rsp) == ["llama-cache", "qwen-cache"]
    # The replacement serves: the moved replica goes, then the held Usage.
    rsp = drive(switched, world, observe(rsp, {0: serving, 1: serving, 2: serving}))
    assert placed(rsp) == [(0, "gpu-a"), (2, "gpu-c")], placed(rsp)
    assert usages(rsp) == ["llama-cache"]


def test_a_multi_node_engine_may_not_be_named_svc() -> None:
    """Found by review 14a: a multi-node engine named ``svc`` gave its LeaderWorkerSet the
    replica's Service name, so the LeaderWorkerSet controller never created its own
    headless Service (or ours took it over): the workers could not reach the leader.
    Refused by the XRD and by the function, naming the engine; a Standalone engine may
    keep the name (a Deployment and a Service may share one)."""
    from tests.support.validation import xr_cel_errors

    gang = engine()
    gang["name"] = "svc"
    gang["members"] = [
        {**gang["members"][0], "role": "Leader"},
        {**gang["members"][0], "role": "Worker", "worker": {"nodes": 1}},
    ]
    xr = deployment(1, engines=[gang])
    (msg,) = h.fatal(h.run(h.request(xr)))
    assert "spec.template.spec.engines[0]" in msg and "'svc' is reserved" in msg, msg
    assert any("may not be named svc" in e for e in xr_cel_errors("ModelDeployment", xr["spec"]))
    alone = engine()
    alone["name"] = "svc"
    assert not h.fatal(h.run(h.request(deployment(1, engines=[alone]))))
    assert xr_cel_errors("ModelDeployment", deployment(1, engines=[alone])["spec"]) == []


def test_a_replica_held_on_a_long_named_cache_gets_a_valid_label() -> None:
    """Found by review 14c: the label of a replica held on its old cache was the cache's
    raw name, so a name over 63 characters made the ModelReplica invalid (the API server
    refused the apply every reconcile) and differed from the shortened value that
    cache's hydration selects its live replicas by."""
    from function.naming import ANNOTATION_FULL_PREFIX, LABEL_CACHE, label_value

    serving = ("True", "Serving", "serving")
    old = "q" * 70  # a ModelCache name Kubernetes allows (253); label values stop at 63
    ready = hydration("gpu-a", "Ready", old)
    ready["metadata"]["labels"][LABEL_CACHE] = label_value(old)  # as its shard writes it
    base = [ic("gpu-a"), cache(old), _llama_cache(), ready]
    xr = deployment(1, cache_name=old)
    rsp = drive(xr, h.World(base))
    rsp = drive(xr, h.World(base), observe(rsp, {0: serving}))
    (before,) = replicas_of(rsp).values()
    assert before["metadata"]["labels"][LABEL_CACHE] == label_value(old)
    switched = copy.deepcopy(xr)
    switched["spec"]["template"]["spec"]["modelCacheRef"] = {"name": "llama-cache"}
    world = h.World([*base, _llama_hydration("gpu-a", "Hydrating")])
    rsp = drive(switched, world, observe(rsp, {0: serving}))
    (held,) = replicas_of(rsp).values()
    assert held["spec"]["modelCacheRef"]["name"] == old
    assert held["metadata"]["labels"][LABEL_CACHE] == label_value(old)
    assert held["metadata"]["annotations"][f"{ANNOTATION_FULL_PREFIX}cache"] == old
    validate_xr(held)


def _usage_keys(rsp: Any) -> dict[str, str]:
    """Desired Usages: key to the ModelCache each protects."""
    return {k: v["spec"]["of"]["resourceRef"]["name"] for k, v in h.desired(rsp).items()
            if v.get("kind") == "Usage"}  # fmt: skip


@pytest.mark.parametrize(
    "refs",
    [
        pytest.param(("qwen-cache", "nope-cache", "qwen-cache"), id="typo-then-fixed"),
        pytest.param(("qwen-cache", "llama-cache", "qwen-cache"), id="a-b-a"),
        pytest.param(("qwen-cache", None), id="reference-removed"),
    ],
)
def test_a_served_cache_keeps_its_usage_under_one_key(refs: tuple[str | None, ...]) -> None:
    """Found by review 14b: a typo in ``modelCacheRef``, its fix, or an A->B->A switch
    moved the protection of the served cache from one Usage key to another in one
    reconcile (and removing the reference dropped it at once). Crossplane deletes what
    is no longer desired before it applies the rest, so the cache was briefly
    unprotected. Now a Usage is never re-pointed or moved, and a cache replicas still
    read keeps its Usage until every replica is ready again."""
    serving = ("True", "Serving", "serving")
    world = h.World([ic("gpu-a"), cache(), _llama_cache(), hydration("gpu-a", "Ready"),
                     _llama_hydration("gpu-a", "Ready")])  # fmt: skip
    xr = deployment(1)
    rsp = drive(xr, world)
    rsp = drive(xr, world, observe(rsp, {0: serving}))
    for ref in refs[1:]:
        before = _usage_keys(rsp)
        step = copy.deepcopy(xr)
        if ref is None:
            del step["spec"]["template"]["spec"]["modelCacheRef"]
        else:
            step["spec"]["template"]["spec"]["modelCacheRef"] = {"name": ref}
        rsp = drive(step, world, observe(rsp, {0: serving}))
        after = _usage_keys(rsp)
        for key, of in before.items():  # never re-pointed; a cache kept keeps its key
            if of in after.values():
                assert after.get(key) == of, (ref, before, after)
        # What was protected stays protected in the step that changes the reference.
        assert set(before.values()) <= set(after.values()), (ref, before, after)
    # Once every replica is ready again, a cache nothing reads any more loses its Usage.
    final = refs[-1]
    rsp = drive(step, world, observe(rsp, {0: serving}))
    assert sorted(_usage_keys(rsp).values()) == ([final] if final else []), _usage_keys(rsp)


def _edited(rsp: Any, key: str, edit: Any) -> dict[str, Any]:
    """The replicas of ``rsp`` observed serving, the one at ``key`` edited."""
    serving = ("True", "Serving", "serving")
    observed = observe(rsp, {0: serving, 1: serving, 2: serving})
    edit(observed, observed[key])
    return observed


def test_an_edited_spec_index_is_written_back_not_a_second_replica() -> None:
    """Found by review 14b: a ModelReplica whose ``spec.index`` was edited to another's
    collapsed into that replica: Crossplane deleted the serving one, and the XR said 3 of
    3 placed and ready. The index is the composition-resource name's: the edit is
    written back and nothing is removed."""
    world = h.World([ic("gpu-a"), ic("gpu-b"), cache(), hydration("gpu-a", "Ready"),
                     hydration("gpu-b", "Ready")])  # fmt: skip
    xr = deployment(3)
    rsp = drive(xr, world)
    keys = sorted(replicas_of(rsp))
    assert keys == ["replica-0", "replica-1", "replica-2"]

    def dup(_obs: dict[str, Any], body: dict[str, Any]) -> None:
        body["spec"]["index"] = 2

    rsp = drive(xr, world, _edited(rsp, "replica-1", dup))
    assert sorted(replicas_of(rsp)) == keys
    assert [r["spec"]["index"] for _, r in sorted(replicas_of(rsp).items())] == [0, 1, 2]
    assert not [m for _, m in h.results(rsp) if "removed replica" in m], h.results(rsp)
    rows = [r["index"] for r in h.status(rsp)["placement"]]
    assert sorted(rows) == [0, 1, 2], rows


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        pytest.param(lambda obs, body: obs.update({"replica-01": obs.pop("replica-1")}),
                     "composed as 'replica-01'", id="unexpected-key"),
        pytest.param(lambda obs, body: body["spec"].pop("clusterName"),
                     "has no spec.clusterName", id="no-cluster"),
    ],
)  # fmt: skip
def test_a_replica_the_function_cannot_account_for_freezes_the_deployment(edit, said) -> None:
    """Found by review 14b: a ModelReplica under a key the function never writes was
    deleted and composed again under its own (Crossplane deletes before it applies); one
    without ``spec.clusterName`` was placed again, maybe elsewhere. Now every child is
    kept exactly and ``ReplicasScheduled=False`` names it."""
    world = h.World([ic("gpu-a"), ic("gpu-b"), cache(), hydration("gpu-a", "Ready"),
                     hydration("gpu-b", "Ready")])  # fmt: skip
    xr = deployment(3)
    rsp = drive(xr, world)
    observed = _edited(rsp, "replica-1", edit)
    rsp = drive(xr, world, observed)
    assert sorted(h.desired(rsp)) == sorted(observed)
    for key, body in h.desired(rsp).items():
        assert body["spec"] == observed[key]["spec"], key
        assert body["metadata"] == observed[key]["metadata"], key
    cond = h.conditions(rsp)["ReplicasScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "UnknownReplica"), cond
    assert said in cond["message"], cond


def test_a_usage_is_not_re_pointed_when_no_replica_reads_the_old_cache() -> None:
    """Found by review 14d: with 0 replicas, switching ``modelCacheRef`` re-pointed the
    observed ``cache-usage`` at the new cache (the old one kept a stale in-use label);
    now the old Usage goes and the new cache gets its own."""
    world = h.World([ic("gpu-a"), cache(), _llama_cache(), hydration("gpu-a", "Ready"),
                     _llama_hydration("gpu-a", "Ready")])  # fmt: skip
    xr = deployment(0)
    rsp = drive(xr, world)
    assert _usage_keys(rsp) == {"cache-usage": "qwen-cache"}
    switched = copy.deepcopy(xr)
    switched["spec"]["template"]["spec"]["modelCacheRef"] = {"name": "llama-cache"}
    rsp = drive(switched, world, observe(rsp))
    after = _usage_keys(rsp)
    assert after.get("cache-usage") in (None, "qwen-cache") and "llama-cache" in after.values()


def test_a_stale_model_ready_does_not_count_as_ready() -> None:
    """Found by review 14d: a ``ModelReady=True`` written for an older generation of the
    replica (Crossplane stamps ``observedGeneration``) counted as ready right after the
    deployment changed the replica, so removing ``modelCacheRef`` dropped the old cache's
    Usage before the replica had even been reconciled."""
    serving = ("True", "Serving", "serving")
    world = h.World([ic("gpu-a"), cache(), hydration("gpu-a", "Ready")])
    xr = deployment(1)
    rsp = drive(xr, world)
    rsp = drive(xr, world, observe(rsp, {0: serving}))
    removed = copy.deepcopy(xr)
    del removed["spec"]["template"]["spec"]["modelCacheRef"]
    rsp = drive(removed, world, observe(rsp, {0: serving}))
    assert sorted(_usage_keys(rsp).values()) == ["qwen-cache"]
    stale = observe(rsp, {0: serving})
    (body,) = [b for b in stale.values() if b.get("kind") == "ModelReplica"]
    body["metadata"]["generation"] = 2
    body["status"]["conditions"][0]["observedGeneration"] = 1
    rsp = drive(removed, world, stale)
    assert sorted(_usage_keys(rsp).values()) == ["qwen-cache"], _usage_keys(rsp)
    ready = h.conditions(rsp)["ReplicasReady"]
    assert ready["status"] == "False" and "Updating" in ready["message"], ready
    body["status"]["conditions"][0]["observedGeneration"] = 2  # reconciled: ready again
    rsp = drive(removed, world, stale)
    assert _usage_keys(rsp) == {}, _usage_keys(rsp)


@pytest.mark.parametrize("value", [1e19, -1e19, 2.0**65])
def test_a_status_int_attribute_outside_int64_reads_as_absent(value) -> None:
    """Found by review 15d: an int device attribute outside int64 in one cluster's status
    (hand-written or restored: the function never writes one) made every tenant selector
    fail with "overflow" on it, even one that never reads the attribute, and the
    deployment placed nothing anywhere, blaming its valid selector. The attribute now
    reads as absent, as any attribute of the wrong type does."""
    dev = copy.deepcopy(H100_DEVICE)
    dev.setdefault("attributes", {})["driverVersion"] = {"int": value}
    w = h.World([ic("gpu-a", device=dev), *C5_WORLD[1:]])
    rsp = drive(deployment(1), w)
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert c["reason"] != "InvalidDeviceSelector", c
    assert placed(rsp), c


def test_refused_regexes_are_charged_so_the_cost_limit_stops_them(
    grpc_function: h.GrpcFunction,
) -> None:
    """Found by review 15d: a pattern RE2 refuses as too large cost nothing, so a
    selector within the cost limit could try hundreds of them (`... || true` swallows
    each refusal, about 6 ms of CPU apiece): 8 such selectors took one call 11.7 s, into
    the compute deadline. Each refusal is now charged, and the evaluation's step limit
    stops the selector, naming it."""
    expr = ('lists.range(290).all(i, device.driver.matches("\\\\pL{300}" + string(i)) '
            '|| true) && device.driver != ""')  # fmt: skip
    first = drive(deployment(2), world())
    eng = engine(selector=expr)
    eng["members"][0]["nodeSelector"]["devices"][0]["selectors"] = [
        {"cel": expr.replace("string(i)", f"string(i + {k * 1000})")} for k in range(8)
    ]
    rsp, _ = grpc_function.drive(deployment(3, engines=[eng]), world(), observe(first))
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert (c["status"], c["reason"]) == ("False", "InvalidDeviceSelector"), c
    assert "selectors[" in c["message"], c


def test_a_status_int_attribute_of_int64_max_is_read() -> None:
    """INT64_MAX arrives as the double 2**63 (review 15e): read as INT64_MAX, so a
    selector on it matches."""
    dev = copy.deepcopy(H100_DEVICE)
    dev.setdefault("attributes", {})["maxBatch"] = {"int": 9223372036854775807}
    w = h.World([ic("gpu-a", device=dev), *C5_WORLD[1:]])
    eng = engine(selector='device.attributes["gpu.nvidia.com"].maxBatch == 9223372036854775807')
    rsp = drive(deployment(1, engines=[eng]), w)
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert c["status"] == "True", c


@pytest.mark.parametrize(
    ("case", "edit", "want"),
    [
        # Review 19a F2: a typo in modelCacheRef kept the replicas but told the user
        # they waited for the typo'd cache, which does not exist.
        (
            "cache-ref-typo",
            lambda x, r: x["spec"]["template"]["spec"].update(modelCacheRef={"name": "nope"}),
            "waiting for ModelCache qwen-cache: replica 0 on gpu-a (Hydrating)",
        ),
        # Review 19a F4: a replica whose spec.clusterName was removed was "on " nothing.
        (
            "cluster-name-removed",
            lambda x, r: [
                b["spec"].pop("clusterName") for b in r.values() if b["kind"] == "ModelReplica"
            ],
            "replica 0 (no spec.clusterName) (Hydrating)",
        ),
    ],
    ids=["cache-ref-typo", "cluster-name-removed"],
)
def test_ready_message_names_what_the_kept_replicas_wait_for(
    case: str, edit: Any, want: str
) -> None:
    """``ReplicasReady`` of held replicas names the cache they serve from and, when a
    replica names no cluster, says so."""
    hydrating = ("False", "Hydrating", "waiting for the cache")
    base = [ic("gpu-a"), cache(), hydration("gpu-a", "Hydrating")]
    xr = deployment(1)
    rsp = drive(xr, h.World(base))
    seen = observe(rsp, {0: hydrating})
    then = copy.deepcopy(xr)
    edit(then, seen)
    rsp = drive(then, h.World(base), seen)
    msg = h.conditions(rsp)["ReplicasReady"]["message"]
    assert want in msg, msg
    assert "nope" not in msg and " on  " not in msg, msg
