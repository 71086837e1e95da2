"""ModelCache on three clusters, reconciled through Crossplane's own engine.

The cache composes its ModelCacheShards; each shard is rendered through the engine and
composes its hydrations; each hydration is rendered through the engine too (its PVC,
Job and result ConfigMap applied by a simulated provider-kubernetes and cluster). Each
level observes the one below with the status Crossplane wrote for it: Pending ->
Hydrating -> Ready, one cluster failing, and a revision edit.
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
            "name": "qwen-cache",
            "namespace": NS,
            "uid": "6f1c2b7e-0d5a-4c1e-9a55-2f6f0e7c1a01",
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
    """The ModelCache, its shards, and one simulated hydration per composed hydration."""

    def __init__(self, render, required: list[dict] | None = None):
        self.render = render
        self.required = REQUIRED if required is None else required
        self.cache = XR(render, cache_xr(), self.required)
        self.shards: dict[str, XR] = {}
        self.hydrations: dict[str, Hydration] = {}

    def step(self, states: dict[str, dict]) -> None:
        """Reconcile the cache, then each shard, each hydration to ``states[cluster]``,
        each shard again (it observes its hydrations), then the cache observes the shards."""
        out = self.cache.reconcile()
        for key, sdoc in out.composed.items():
            sh = self.shards.get(key)
            if sh is None or sh.xr["spec"] != sdoc["spec"]:
                keep = sh.observed if sh is not None else {}
                st = (sh.xr.get("status") if sh is not None else None) or {}
                sh = self.shards[key] = XR(self.render, sdoc, self.required)
                sh.observed, sh.xr["status"] = keep, st
            sout = sh.reconcile()
            for name, doc in sout.composed.items():
                cl = doc["spec"]["clusterName"]
                h = self.hydrations.get(cl)
                if h is None or h.xr["spec"] != doc["spec"]:
                    keep = h.observed if h is not None else {}
                    h = self.hydrations[cl] = Hydration(self.render, doc, self.required)
                    h.observed = keep
                    h.xr.setdefault("status", {}).update(
                        (sh.observed.get(name) or {}).get("status") or {}
                    )
                h.settle(**states.get(cl, {}))
                sh.observed[name] = world.observed_xr(doc, h.last.xr)
            sh.reconcile()
            self.cache.observed[key] = world.observed_xr(sdoc, sh.last.xr)

    def observe(self, cluster: str) -> None:
        """The cluster's shard, then the cache, read what its hydration says now."""
        h = self.hydrations[cluster]
        for key, sh in self.shards.items():
            for name, obs in sh.observed.items():
                if obs["spec"]["clusterName"] == cluster:
                    sh.observed[name] = world.observed_xr(obs, h.last.xr)
                    sh.reconcile()
                    self.cache.observed[key] = world.observed_xr(
                        self.cache.observed[key], sh.last.xr
                    )

    def composed_hydrations(self) -> dict[str, dict]:
        """cluster -> hydration as its shard last composed it."""
        return {
            d["spec"]["clusterName"]: d
            for sh in self.shards.values()
            for d in sh.last.composed.values()
        }

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
    assert (
        sorted(c["name"] for d in first.composed.values() for c in d["spec"]["clusters"])
        == CLUSTERS
    )
    assert {d["kind"] for d in first.composed.values()} == {"ModelCacheShard"}
    assert not first.is_ready()

    for state, phase in ((PENDING, "Pending"), (HYDRATING, "Hydrating")):
        fleet.step(dict.fromkeys(CLUSTERS, state))
        assert {h.status["phase"] for h in fleet.hydrations.values()} == {phase}
        out = fleet.cache.reconcile()
        assert not out.is_ready(), f"ModelCache Ready while hydrations are {phase}"
        assert fleet.artifact()["status"] == "False"
        assert out.deleted(fleet.cache.observed.values()) == set()

    fleet.step(dict.fromkeys(CLUSTERS, READY))
    assert sorted(fleet.composed_hydrations()) == CLUSTERS
    for h in fleet.hydrations.values():
        assert h.status["phase"] == "Ready"
        assert h.last.is_ready(), h.last.stdout
        assert h.status["evidence"]["digest"].startswith("sha256:")
    out = fleet.cache.reconcile()
    assert fleet.artifact()["status"] == "True", out.stdout
    assert out.is_ready()
    assert out.deleted(fleet.cache.observed.values()) == set()
    # Evidence is rolled up: one artifact shared by the three clusters.
    (ev,) = fleet.cache.status["evidence"]
    assert ev["clusters"] == 3 and ev["digest"].startswith("sha256:")
    for sh in fleet.shards.values():
        assert sh.last.is_ready()
        assert sh.last.deleted(sh.observed.values()) == set()
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
    assert [f["name"] for f in fleet.cache.status["failed"]] == ["gpu-c"]
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
    assert fleet.cache.status["evidence"] == []

    fleet.step(dict.fromkeys(CLUSTERS, READY))
    out = fleet.cache.reconcile()
    assert out.is_ready(), out.stdout
    for h in fleet.hydrations.values():
        assert h.status["source"]["revision"] == "v2"


def test_two_clusters_sharing_a_kubeconfig_get_one_hydration(render):
    """One InferenceCluster per workload cluster (README): gpu-b names gpu-a's kubeconfig
    Secret, so both reach one workload cluster, where two hydrations would own the same
    PVC. Only the older (gpu-a) gets one; the cache says so, and is a fixed point."""
    a, b = cluster("gpu-a"), cluster("gpu-b")
    a["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    b["metadata"]["creationTimestamp"] = "2026-01-02T00:00:00Z"
    b["spec"]["cluster"]["existing"]["secretRef"] = {"name": "gpu-a-kubeconfig"}
    fleet = Fleet(render, [b, cluster("gpu-c"), a, secret(NS)])
    fleet.cache.reconcile()
    fleet.step(dict.fromkeys(CLUSTERS, READY))
    assert sorted(fleet.composed_hydrations()) == ["gpu-a", "gpu-c"]
    out = fleet.cache.reconcile()
    cond = out.condition("ClustersDistinct") or {}
    assert (cond.get("status"), cond.get("reason")) == ("False", "SharedKubeconfig"), cond
    for words in ("gpu-a", "gpu-b", "spec.cluster.existing.secretRef", "gpu-a-kubeconfig"):
        assert words in cond["message"], (words, cond)
    assert [u["name"] for u in fleet.cache.status["unavailable"]] == ["gpu-b"]
    assert out.is_ready(), out.stdout  # every cluster the cache uses is Ready
    assert out.deleted(fleet.cache.observed.values()) == set()
    again = fleet.cache.reconcile()
    assert again.condition("ClustersDistinct") == out.condition("ClustersDistinct")
    assert again.composed == out.composed
