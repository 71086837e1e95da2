"""ModelCache on three clusters, reconciled through Crossplane's own engine.

Each hydration is itself rendered through the engine (its PVC, Job and result ConfigMap
applied by a simulated provider-kubernetes and cluster), and the ModelCache observes
the hydrations with the status Crossplane wrote for them: Pending -> Hydrating -> Ready,
one cluster failing, and a revision edit.
"""

from __future__ import annotations

import copy

import pytest

from tests.e2e.lifecycle import XR, Hydration, cluster, secret
from tests.support import world

NS = "ml-team"
CLUSTERS = ["gpu-a", "gpu-b", "gpu-c"]


def cache_xr(revision: str = "main") -> dict:
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {
            "name": "qwen-cache", "namespace": NS, "uid": "6f1c2b7e-0d5a-4c1e-9a55-2f6f0e7c1a01"
        },
        "spec": {
            "source": "HuggingFace",
            "huggingFace": {
                "repo": "Qwen/Qwen2.5-0.5B-Instruct",
                "revision": revision,
                "sizeGiB": 2,
                "authSecret": {"name": "hf-token", "key": "HF_TOKEN"},
            },
            "clusterSelector": {"matchLabels": {"modelplane.ai/gpu": "h100"}},
        },
    }


REQUIRED = [cluster(c) for c in CLUSTERS] + [secret(NS)]


class Fleet:
    """The ModelCache and one simulated hydration per composed ModelCacheHydration."""

    def __init__(self, render):
        self.render = render
        self.cache = XR(render, cache_xr(), REQUIRED)
        self.hydrations: dict[str, Hydration] = {}

    def step(self, states: dict[str, dict]) -> None:
        """Reconcile the cache, then each hydration to ``states[cluster]``, then observe."""
        out = self.cache.reconcile()
        for name, doc in out.composed.items():
            cl = doc["spec"]["clusterName"]
            h = self.hydrations.get(cl)
            if h is None or h.xr["spec"] != doc["spec"]:
                keep = h.observed if h is not None else {}
                h = self.hydrations[cl] = Hydration(self.render, doc, REQUIRED)
                h.observed = keep
                h.xr.setdefault("status", {}).update(
                    (self.cache.observed.get(name) or {}).get("status") or {}
                )
            h.settle(**states.get(cl, {}))
            self.cache.observed[name] = world.observed_xr(doc, h.last.xr)

    def artifact(self) -> dict:
        return self.cache.last.condition("ArtifactReady") or {}


@pytest.fixture
def fleet(render) -> Fleet:
    return Fleet(render)


PENDING = {"pvc": "Pending"}
HYDRATING = {"pvc": "Bound", "job": "running"}
READY = {"pvc": "Bound", "job": "complete", "result": True}
FAILED = {"pvc": "Bound", "job": "failed"}


def test_pending_hydrating_ready(fleet: Fleet):
    first = fleet.cache.reconcile()
    assert sorted(d["spec"]["clusterName"] for d in first.composed.values()) == CLUSTERS
    assert not first.is_ready()

    for state, phase in ((PENDING, "Pending"), (HYDRATING, "Hydrating")):
        fleet.step(dict.fromkeys(CLUSTERS, state))
        assert {h.status["phase"] for h in fleet.hydrations.values()} == {phase}
        out = fleet.cache.reconcile()
        assert not out.is_ready(), f"ModelCache Ready while hydrations are {phase}"
        assert fleet.artifact()["status"] == "False"
        assert out.deleted(fleet.cache.observed.values()) == set()

    fleet.step(dict.fromkeys(CLUSTERS, READY))
    for h in fleet.hydrations.values():
        assert h.status["phase"] == "Ready"
        assert h.last.is_ready(), h.last.stdout
        assert h.status["evidence"]["digest"].startswith("sha256:")
    out = fleet.cache.reconcile()
    assert fleet.artifact()["status"] == "True", out.stdout
    assert out.is_ready()
    assert out.deleted(fleet.cache.observed.values()) == set()
    # Steady: the next reconcile says the same.
    again = fleet.cache.reconcile()
    assert again.is_ready() and again.composed.keys() == out.composed.keys()


def test_one_cluster_failing(fleet: Fleet):
    fleet.cache.reconcile()
    fleet.step({"gpu-a": READY, "gpu-b": READY, "gpu-c": FAILED})
    assert fleet.hydrations["gpu-c"].status["phase"] == "Failed"
    assert not fleet.hydrations["gpu-c"].last.is_ready()
    out = fleet.cache.reconcile()
    art = fleet.artifact()
    assert (art["status"], art["reason"]) == ("False", "HydrationFailed")
    assert "gpu-c" in art["message"]
    assert not out.is_ready()
    # Nothing is deleted: the failed Job stays so Kubernetes does not run it again.
    assert out.deleted(fleet.cache.observed.values()) == set()
    h = fleet.hydrations["gpu-c"]
    assert h.last.deleted(h.observed.values()) == set()


def test_revision_edit_is_not_ready_from_stale_evidence(fleet: Fleet):
    fleet.cache.reconcile()
    fleet.step(dict.fromkeys(CLUSTERS, READY))
    assert fleet.cache.reconcile().is_ready()

    fleet.cache.xr["spec"] = copy.deepcopy(cache_xr("v2")["spec"])
    out = fleet.cache.reconcile()
    revisions = {d["spec"]["huggingFace"]["revision"] for d in out.composed.values()}
    assert revisions == {"v2"}
    assert not out.is_ready(), "Ready from the old revision's hydrations"
    assert fleet.artifact()["status"] != "True"

    fleet.step(dict.fromkeys(CLUSTERS, READY))
    out = fleet.cache.reconcile()
    assert out.is_ready(), out.stdout
    for h in fleet.hydrations.values():
        assert h.status["source"]["revision"] == "v2"
