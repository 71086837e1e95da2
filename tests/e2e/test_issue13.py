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

from function.naming import cache_shard
from tests.e2e.lifecycle import XR
from tests.e2e.test_modelcache_lifecycle import CLUSTERS, READY, Fleet
from tests.e2e.test_modeldeployment_lifecycle import Deployment, fleet_resources
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
    cache = XR(render, cache_doc, clusters)
    # The hydrations the cache's shards composed before, as observed.
    observed_hyd = {}
    for h in hydrations:
        cl = h["spec"]["clusterName"]
        key = f"hydration-{cl}"
        meta = {**h["metadata"], "annotations": {"crossplane.io/composition-resource-name": key}}
        observed_hyd[cl] = world.observed_xr({**copy.deepcopy(h), "metadata": meta}, h)
    shards: dict[str, XR] = {}

    def tree(replicas):
        """The cache, each shard (its hydrations observed, replicas required), the cache."""
        out = cache.reconcile()
        for key, sdoc in out.composed.items():
            sh = shards.get(key) or XR(render, sdoc, [])
            sh.xr["spec"] = copy.deepcopy(sdoc["spec"])
            sh.required = [*clusters, *replicas]
            sh.observed = {
                f"hydration-{cl}": o
                for cl, o in observed_hyd.items()
                if cache_shard(cl) == sdoc["spec"]["shard"]
            }
            shards[key] = sh
            sh.reconcile()
            for cl in [c for c in observed_hyd if f"hydration-{c}" in sh.observed]:
                if f"hydration-{cl}" not in sh.last.composed:
                    del observed_hyd[cl]  # Crossplane deletes what the shard stopped desiring
            cache.observed[key] = world.observed_xr(sdoc, sh.last.xr)
        return cache.reconcile()

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
