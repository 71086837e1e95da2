"""Issue 13 through Crossplane's own engine: what a transition must never do.

- A device selector that fails while evaluating deletes no replica (the deployment
  keeps every child and names the field).
- A hydration's Ready latch holds only while its PVC is Bound: a Lost PVC downloads
  again, and the ModelCache stops reading the cluster as Ready.
- Reclaim finishes: a cluster that leaves the cache's selector is shown retained, its
  replica moves make-before-break, then the cache reclaims its hydration.
"""

from __future__ import annotations

import copy

from tests.e2e.lifecycle import CacheTree
from tests.e2e.test_modelcache_lifecycle import CLUSTERS, READY, Fleet
from tests.e2e.test_modeldeployment_lifecycle import (
    Deployment,
    fleet_resources,
    one_serving_replica,
)
from tests.support import world

FAILING = 'device.attributes["gpu.nvidia.com"].noSuchAttribute == "x"'


def test_a_selector_failing_at_evaluation_deletes_no_replica(render):
    d = Deployment(render)
    d.required = fleet_resources(hydrating=False)
    d.step()
    d.step()
    assert d.dep.reconcile().is_ready()
    member = d.dep.xr["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"] = [{"cel": FAILING}]
    out = d.dep.reconcile()
    assert out.deleted(d.dep.observed.values()) == set(), "a failing selector deleted replicas"
    c = d.condition("ReplicasScheduled")
    assert (c["status"], c["reason"]) == ("False", "InvalidDeviceSelector")
    field = "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
    assert c["message"].startswith(field) and "noSuchAttribute" in c["message"]


def test_a_lost_pvc_breaks_the_ready_latch(render):
    fleet = Fleet(render)
    fleet.cache.reconcile()
    fleet.step(dict.fromkeys(CLUSTERS, READY))
    assert fleet.cache.reconcile().is_ready()
    h = fleet.hydrations["gpu-a"]
    # Ready: the download Job is gone; the PVC is Bound and its uid recorded.
    assert not [n for n in h.last.composed if n.startswith("job-")]
    assert h.status.get("pvcUID")

    h.world(pvc="Lost")
    out = h.reconcile()
    assert h.status["phase"] != "Ready" and not out.is_ready()
    assert "is Lost" in h.status["message"]
    assert [n for n in out.composed if n.startswith("job-")], "no download after the loss"
    assert out.deleted(h.observed.values()) == set()

    # The shard, then the cache, read the cluster as what its hydration says now.
    fleet.observe("gpu-a")
    out = fleet.cache.reconcile()
    assert not out.is_ready()
    assert fleet.artifact()["status"] == "False"


def test_reclaim_finishes_make_before_break(render):
    # One replica of the example deployment, a cache footprint of two clusters; then the
    # cache's selector drops the replica's cluster.
    d = Deployment(render, replicas=1)
    d.required = fleet_resources(hydrating=False)
    d.step()
    d.step()
    assert d.dep.reconcile().is_ready()
    (first,) = [r.xr for n, r in d.replicas.items() if n in d.dep.last.composed]
    old_cluster = first["spec"]["clusterName"]

    cache_doc = next(r for r in d.required if r["kind"] == "ModelCache")
    hydrations = [r for r in d.required if r["kind"] == "ModelCacheHydration"]
    clusters = [r for r in d.required if r["kind"] == "InferenceCluster"]
    for c in clusters:  # the selector reads the name label Kubernetes sets
        c["metadata"]["labels"]["kubernetes.io/metadata.name"] = c["metadata"]["name"]
    # The hydrations the cache's shards composed before, as observed.
    t = CacheTree(render, cache_doc, clusters, hydrations)
    cache, observed_hyd, tree = t.cache, t.observed, t.reconcile
    tree([first])
    cache.xr["spec"]["clusterSelector"] = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [old_cluster]}
        ]
    }
    out = tree([first])
    rows = {r["name"]: r for r in cache.status["retained"]}
    assert set(rows) == {old_cluster}, cache.status
    assert old_cluster in observed_hyd, "a hydration a live replica uses was deleted"
    assert out.deleted(cache.observed.values()) == set()

    # The deployment sees the cache's status: a replacement elsewhere, the old one kept.
    d.required = [cache.xr if r["kind"] == "ModelCache" else r for r in d.required]
    d.step(serving=False)
    placed = {
        doc["spec"]["clusterName"]
        for doc in d.dep.last.composed.values()
        if doc["kind"] == "ModelReplica"
    }
    assert old_cluster in placed and len(placed) == 2, placed
    # The replacement serves: the old replica goes.
    d.step()
    d.step()
    out = d.dep.reconcile()
    placed = {
        doc["spec"]["clusterName"] for doc in out.composed.values() if doc["kind"] == "ModelReplica"
    }
    assert old_cluster not in placed, placed

    # No live replica on the old cluster: the cache reclaims its hydration.
    live = [r.xr for n, r in d.replicas.items() if n in out.composed]
    tree(live)
    assert old_cluster not in observed_hyd
    tree(live)
    assert cache.status["retained"] == []
    assert cache.status["summary"]["retained"] == 0


def test_revision_edit_rolls_replicas_side_by_side(render):
    """A revision edit never disturbs a live replica, through the engine at every level:
    the new identity hydrates beside the old one while the replica keeps serving the
    old; the replica moves (same ModelReplica, its workload rolls) only once its
    cluster's hydration is Ready for the new one; then the old identity is pruned."""
    from function.naming import source_identity
    from jobs.contract import CACHE_MOUNT_PATH, identity_dir
    from tests.e2e.lifecycle import Hydration, cluster

    def model_env(rep) -> str:
        (wl,) = [d for n, d in rep.last.composed.items() if n.startswith("workload-")]
        pod = wl["spec"]["forProvider"]["manifest"]["spec"]["template"]
        (engine,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
        return next(e["value"] for e in engine["env"] if e["name"] == "MODELPLANE_MODEL")

    d, rname, rep = one_serving_replica(render)
    where = rep.xr["spec"]["clusterName"]
    old = rep.xr["spec"]["modelCacheRef"]["identity"]
    assert model_env(rep) == identity_dir(CACHE_MOUNT_PATH, old)

    # The replica's cluster's hydration, rendered through the engine from here on.
    i = next(
        i
        for i, r in enumerate(d.required)
        if r["kind"] == "ModelCacheHydration" and r["spec"]["clusterName"] == where
    )
    hdoc = copy.deepcopy(d.required[i])
    hdoc.pop("status")
    ns = hdoc["metadata"]["namespace"]

    def replicas_required() -> list[dict]:
        return [world.observed_xr(r.xr, r.last.xr) for r in d.replicas.values() if r.last]

    hyd = Hydration(render, hdoc, [cluster(where), *replicas_required()])
    hyd.settle(pvc="Bound", job="complete", result=True)
    hyd.reconcile()
    assert hyd.status["phase"] == "Ready"
    assert hyd.status["stored"] == [{"identity": old, "usedBy": [rep.xr["metadata"]["name"]]}]

    def publish_hydration() -> None:
        d.required[i] = world.observed_xr(hdoc, hyd.last.xr)

    # The revision edit reaches the hydration (its ModelCacheShard re-composes it).
    repo = hdoc["spec"]["huggingFace"]["repo"]
    new = source_identity(repo, "v2")
    hdoc["spec"]["huggingFace"]["revision"] = "v2"
    hyd.xr["spec"] = copy.deepcopy(hdoc["spec"])
    hyd.settle(pvc="Bound", job="running")
    assert hyd.status["phase"] == "Hydrating"
    assert [s["identity"] for s in hyd.status["stored"]] == [old]
    assert not [n for n in hyd.last.composed if n.startswith("prune-")]
    publish_hydration()

    # While the new identity hydrates, the replica keeps serving the old one.
    d.step()
    out = d.dep.reconcile()
    rep = d.replicas[rname]
    assert rep.xr["spec"]["modelCacheRef"]["identity"] == old
    assert model_env(rep) == identity_dir(CACHE_MOUNT_PATH, old)
    assert rep.last.is_ready(), rep.last.stdout
    assert out.is_ready(), "the deployment stopped serving during the revision edit"
    assert d.dep.status["cacheRollout"].startswith(f"1 replica serves identity {old}")
    assert out.deleted(d.dep.observed.values()) == set()

    # The new identity is Ready on the cluster: both are stored, the old one for the
    # replica still on it; nothing is pruned yet.
    hyd.required = [cluster(where), *replicas_required()]
    hyd.settle(pvc="Bound", job="complete", result=True)
    hyd.reconcile()
    assert hyd.status["phase"] == "Ready"
    assert [s["identity"] for s in hyd.status["stored"]] == [new, old]
    assert not [n for n in hyd.last.composed if n.startswith("prune-")]
    publish_hydration()

    # The replica moves: the same ModelReplica, its workload on the new identity.
    d.step()
    rep = d.replicas[rname]
    assert rep.xr["spec"]["modelCacheRef"]["identity"] == new
    assert model_env(rep) == identity_dir(CACHE_MOUNT_PATH, new)
    assert d.dep.reconcile().is_ready()
    assert "cacheRollout" not in d.dep.status
    assert d.dep.status["cacheIdentities"] == [{"identity": new, "replicas": 1}]

    # No live replica serves the old identity: a prune Job keeps the new one only, and
    # once it completed the old identity is gone from the PVC.
    hyd.required = [cluster(where), *replicas_required()]
    out = hyd.reconcile()
    (prune,) = [doc for n, doc in out.composed.items() if n.startswith("prune-")]
    (c,) = prune["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]["containers"]
    assert c["args"][-2:] == ["--prune-keep", new]
    hyd.world(pvc="Bound", job="complete", result=True)
    out = hyd.reconcile()
    assert hyd.status["stored"] == [{"identity": new, "usedBy": [rep.xr["metadata"]["name"]]}]
    assert not [n for n in out.composed if n.startswith("prune-")]
    assert ns == d.dep.xr["metadata"]["namespace"]
