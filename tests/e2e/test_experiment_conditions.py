"""ModelExperiment conditions over many reconciles, through Crossplane's own engine
(review 16a).

- F3: every InferenceCluster of the candidate's selector briefly absent is a wait
  (``NoMatchingClusters``), not a terminal ``CandidateFailed``.
"""

from __future__ import annotations

from typing import Any

from function.naming import hydration_name
from function.render import load_yaml
from tests.e2e.lifecycle import XR
from tests.e2e.test_lifecycles import EXPERIMENT
from tests.support import world


def _example() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (xr,) = load_yaml([str(EXPERIMENT / "xr.yaml")])
    base = [d for d in load_yaml([str(EXPERIMENT / "required")]) if d["kind"] != "ModelReplica"]
    return xr, base


def _hydrations() -> list[dict[str, Any]]:
    """The example cache's hydrations, Ready on both clusters (the candidate's footprint)."""
    return [
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelCacheHydration",
            "metadata": {
                "name": hydration_name("ml-team", "qwen-cache", c),
                "namespace": "ml-team",
                "labels": {
                    "modelplane.ai/cache": "qwen-cache",
                    "modelplane.ai/cluster": c,
                    "app.kubernetes.io/managed-by": "function-modelplane",
                },
            },
            "spec": {
                "clusterName": c,
                "cacheName": "qwen-cache",
                "source": "HuggingFace",
                "huggingFace": {
                    "repo": "Qwen/Qwen2.5-0.5B-Instruct",
                    "revision": "main",
                    "sizeGiB": 2,
                },
            },
            "status": {
                "phase": "Ready",
                "source": {
                    "repo": "Qwen/Qwen2.5-0.5B-Instruct",
                    "revision": "main",
                    "identity": "b91df569bcd7",
                },
            },
        }
        for c in ("gpu-us-east", "gpu-us-west")
    ]


def test_clusters_briefly_absent_while_the_candidate_deploys_is_a_wait(render) -> None:
    """Review 16a F3: every InferenceCluster of the candidate's selector absent (deleted
    and re-created) made the candidate report NoClusterInCacheFootprint, which the
    experiment read as final: the run Failed (CandidateFailed) for good."""
    xr, base = _example()
    e = XR(render, xr, base)
    out = e.reconcile()
    cand = out.composed["candidate-r1"]

    # The candidate ModelDeployment, rendered through the engine, without the clusters.
    gone = [d for d in base if d["kind"] != "InferenceCluster"] + _hydrations()
    c = XR(render, cand, gone)
    cout = c.reconcile()
    sched = cout.condition("ReplicasScheduled") or {}
    assert (sched.get("status"), sched.get("reason")) == ("False", "NoMatchingClusters"), sched
    e.observed["candidate-r1"] = world.observed_xr(cand, cout.xr)
    e.required = gone
    out = e.reconcile()
    assert e.status["phase"] == "Deploying", (e.status["phase"], out.condition("Verdict"))
    assert "candidate-r1" in out.composed

    # The clusters are back: the run goes on (the same run, its clock unchanged).
    created = e.status["candidate"]["createdAt"]
    c.required = base + _hydrations()
    cout = c.reconcile()
    e.observed["candidate-r1"] = world.observed_xr(cand, cout.xr)
    e.required = base + _hydrations()
    out = e.reconcile()
    assert e.status["phase"] == "Deploying", (e.status["phase"], out.condition("Verdict"))
    assert e.status["candidate"]["createdAt"] == created and "verdict" not in e.status
