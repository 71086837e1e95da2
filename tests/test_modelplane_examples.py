"""Modelplane's public ModelDeployment examples: accepted by our XRDs, placed as their comments say.

The fixtures in ``tests/modelplane_examples/`` are written anew from what the
examples of modelplaneai/modelplane declare (``docs/manifests/**`` and the
prefill-decode demo), with the ``clusterSelector`` this project requires added
to their ModelCaches. Each file's header comment says where it comes from and
what placement its comments call for.

The InferenceClusters get the status Modelplane derives for them (one
``gpuPools`` entry per node pool, ``maxNodeCount`` or ``nodeCount`` nodes, the
devices of the pool's class: ``function.composers.inferencecluster.gpu_pools``)
and a Ready condition; every ModelCache gets a Ready hydration on each cluster
its selector matches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from function.composers.inferencecluster import gpu_pools
from function.naming import hydration_name
from function.scheduling.selectors import LabelSelector
from tests.support import harness as h
from tests.support.validation import load_documents, validate_xr

EXAMPLES = Path(__file__).parent / "modelplane_examples"


def fleet(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The resources Crossplane would resolve: clusters with status, caches, hydrations."""
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "InferenceClass"}
    out: list[dict[str, Any]] = []
    clusters = []
    for d in docs:
        if d["kind"] == "InferenceCluster":
            pools, missing = gpu_pools(d["spec"].get("nodePools", []), classes)
            assert not missing, missing
            c = {
                **d,
                "status": {
                    "gpuPools": pools,
                    "providerConfigRef": {"name": d["metadata"]["name"]},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
                },
            }
            clusters.append(c)
            out.append(c)
    for d in docs:
        if d["kind"] != "ModelCache":
            continue
        out.append(d)
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        sel = LabelSelector.parse(d["spec"]["clusterSelector"], "spec.clusterSelector")
        for c in clusters:
            cname = c["metadata"]["name"]
            if sel.matches(c["metadata"].get("labels") or {}):
                out.append(
                    {
                        "apiVersion": "modelplane.ai/v1alpha1",
                        "kind": "ModelCacheHydration",
                        "metadata": {
                            "name": hydration_name(ns, name, cname),
                            "namespace": ns,
                            "labels": {"modelplane.ai/cache": name, "modelplane.ai/cluster": cname},
                        },
                        "spec": {"clusterName": cname, "cacheName": name},
                        "status": {"phase": "Ready"},
                    }
                )
    return out


def placements(docs: list[dict[str, Any]], world: list[dict[str, Any]]) -> dict[str, Any]:
    """Deployment name -> (sorted [(cluster, {engine/member: pool})], ReplicasScheduled)."""
    out = {}
    for d in docs:
        if d["kind"] != "ModelDeployment":
            continue
        rsp, _ = h.drive(h.run, d, None, h.World(world))
        assert not h.fatal(rsp), h.fatal(rsp)
        reps = []
        for body in h.desired(rsp).values():
            if body["kind"] != "ModelReplica":
                continue
            validate_xr(body)
            pools = {
                f"{e['name']}/{m['role']}": m.get("pool")
                for e in body["spec"]["engines"]
                for m in e["members"]
            }
            reps.append((body["spec"]["clusterName"], pools))
        out[d["metadata"]["name"]] = (sorted(reps, key=str), h.conditions(rsp)["ReplicasScheduled"])
    return out


EXPECT: dict[str, dict[str, list[tuple[str, dict[str, str]]]]] = {
    "kind-local-cpu.yaml": {"qwen-fleet": [("mp-fleet", {"qwen/Standalone": "fake-a100"})]},
    "qwen2.5-7b-a16.yaml": {"qwen-7b": [("gke-us-central", {"qwen-7b/Standalone": "gpu-l4"})]},
    "gke-qwen-west.yaml": {
        "qwen-west": [("gke-us-west", {"qwen/Standalone": "gpu-a100"})],
        "qwen3-8b": [("gke-us-central", {"qwen3-8b/Standalone": "gpu-l4"})],
    },
    "nebius-scale.yaml": {"qwen-west": [("nebius-h100", {"qwen/Standalone": "gpu-h100"})]},
    "dynamo-multinode.yaml": {
        "qwen2-5-14b": [("eks-us-east-dynamo", {"qwen/Leader": "gpu-l4", "qwen/Worker": "gpu-l4"})]
    },
    "qwen3-coder-multinode.yaml": {
        "qwen3-coder": [
            ("nebius-h200-a", {"qwen3-coder/Leader": "h200", "qwen3-coder/Worker": "h200"})
        ]
    },
    "nemotron-lightning.yaml": {
        "nemotron-lightning": [("nebius-eu-north", {"nemotron-lightning/Standalone": "gpu-h100"})],
        "qwen3-8b": [("nebius-eu-north", {"qwen3-8b/Standalone": "gpu-h100"})],
    },
    "aks-qwen-west.yaml": {"qwen-west": [("aks-eastus", {"qwen/Standalone": "gpu-a100"})]},
    "glm-air-and-overview.yaml": {
        "glm-air": [("gke-us-west", {"glm/Standalone": "gpu-a100"})],
        "qwen-demo": [("gke-us-central", {"qwen/Standalone": "gpu-l4"})],
    },
    "qwen3-coder-efa.yaml": {
        "qwen3-coder": [
            (
                "eks-us-east-h200",
                {"qwen3-coder/Leader": "gpu-h200", "qwen3-coder/Worker": "gpu-h200"},
            )
        ]
    },
    "qwen2.5-0.5b-mi325x.yaml": {
        "qwen-demo": [("vultr-baremetal-ord", {"qwen/Standalone": "gpu-mi325x"})]
    },
    "prefill-decode.yaml": {
        "qwen-pd": [("pd-guide", {"prefill/Standalone": "gpu-l4", "decode/Standalone": "gpu-l4"})]
    },
}


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_example_is_accepted_by_the_xrds(name: str) -> None:
    docs = load_documents(EXAMPLES / name)
    assert any(d["kind"] == "ModelDeployment" for d in docs)
    for d in docs:
        validate_xr(d)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_example_places_as_its_comments_say(name: str) -> None:
    docs = load_documents(EXAMPLES / name)
    got = placements(docs, fleet(docs))
    assert {k: v[0] for k, v in got.items()} == EXPECT[name]
    for _, cond in got.values():
        assert cond["status"] == "True", cond


def test_kind_local_cpu_thresholds() -> None:
    """The example's own variations: >= 41Gi matches nothing, >= 20Gi either pool."""
    docs = load_documents(EXAMPLES / "kind-local-cpu.yaml")
    world = fleet(docs)
    dep = next(d for d in docs if d["kind"] == "ModelDeployment")
    sel = dep["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]
    sel["devices"][0]["selectors"][0]["cel"] = (
        'device.capacity["gpu.example.com"].memory.compareTo(quantity("41Gi")) >= 0'
    )
    reps, cond = placements(docs, world)["qwen-fleet"]
    assert reps == [] and cond["reason"] == "InsufficientCapacity"
    sel["devices"][0]["selectors"][0]["cel"] = (
        'device.capacity["gpu.example.com"].memory.compareTo(quantity("20Gi")) >= 0'
    )
    dep["spec"]["replicas"] = 2
    reps, cond = placements(docs, world)["qwen-fleet"]
    assert sorted(p["qwen/Standalone"] for _, p in reps) == ["fake-a100", "fake-l4"]


def test_qwen_7b_goes_to_the_a16_without_the_l4_cluster() -> None:
    docs = load_documents(EXAMPLES / "qwen2.5-7b-a16.yaml")
    docs = [d for d in docs if d["metadata"]["name"] != "gke-us-central"]
    reps, _ = placements(docs, fleet(docs))["qwen-7b"]
    assert reps == [("vultr-a16", {"qwen-7b/Standalone": "gpu-a16"})]


def test_dynamo_gang_second_replica_does_not_fit() -> None:
    docs = load_documents(EXAMPLES / "dynamo-multinode.yaml")
    dep = next(d for d in docs if d["kind"] == "ModelDeployment")
    dep["spec"]["replicas"] = 2
    reps, cond = placements(docs, fleet(docs))["qwen2-5-14b"]
    assert [c for c, _ in reps] == ["eks-us-east-dynamo"]
    assert cond["reason"] == "InsufficientCapacity"
    assert cond["message"].startswith("1 of 2 replicas placed")
    assert "eks-us-west-dynamo" in cond["message"]
