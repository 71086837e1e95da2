"""Review 17l F2 through Crossplane's own engine: a ModelDeployment switches
``modelCacheRef`` from cache A to cache B and the replica's roll onto B's PVC stalls
(no room for the surge pod); its old pods still read identity X from A's PVC.

Every XR is rendered through ``crossplane render`` with the core binary: the
deployment (it labels the moved replica ``modelplane.ai/leaving-cache: A``), the
replica (its ``status.cacheIdentities`` keeps X while the roll stalls), A's hydration
on the replica's cluster (the engine resolves its ``leaving-replicas`` requirement by
that label) and A's cache and shards. While the roll stalls, a revision edit of A keeps
X on the PVC (``status.stored`` lists it for the replica) and A's selector dropping the
cluster retains the hydration and its PVC. Once the roll is done, the label goes, X is
pruned and the hydration is reclaimed.
"""

from __future__ import annotations

import copy
from typing import Any

from function.naming import hydration_name, source_identity
from tests.e2e.lifecycle import CacheTree, Hydration, Replica, cluster
from tests.e2e.test_modeldeployment_lifecycle import one_serving_replica
from tests.support import world

A, B = "qwen-7b-cache", "other-cache"
B_REPO = "Qwen/Qwen2.5-3B-Instruct"
LEAVING = "modelplane.ai/leaving-cache"


def _cache_b(required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cache B (another repo) and its hydrations, Ready wherever A's are."""
    out = []
    for doc in required:
        if doc["kind"] == "ModelCache":
            b = copy.deepcopy(doc)
            b["metadata"]["name"] = B
            b["spec"]["huggingFace"]["repo"] = B_REPO
            out.append(b)
        elif doc["kind"] == "ModelCacheHydration":
            h = copy.deepcopy(doc)
            cl = h["spec"]["clusterName"]
            h["metadata"]["name"] = hydration_name(h["metadata"]["namespace"], B, cl)
            h["metadata"]["labels"]["modelplane.ai/cache"] = B
            h["spec"]["cacheName"] = B
            h["spec"]["huggingFace"]["repo"] = B_REPO
            h["status"]["source"] = {
                "repo": B_REPO,
                "revision": "main",
                "identity": source_identity(B_REPO, "main"),
            }
            out.append(h)
    return out


def _stalled(replicas: int) -> dict[str, Any]:
    """A Deployment whose roll stopped: the surge pod of the new template never became
    available (no GPU room), the old pod still serves."""
    status = world.deployment_available(replicas)
    status["replicas"] = replicas + 1  # the surge pod
    status["conditions"] = [
        c if c["type"] != "Progressing"
        else {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
        for c in status["conditions"]
    ]  # fmt: skip
    return status


def _publish(rep: Replica, doc: dict[str, Any], required: list[dict[str, Any]]) -> None:
    """The replica as the deployment composed it (``doc``): its spec and labels, a new
    generation, what the engine resolves for it."""
    rep.xr["spec"] = copy.deepcopy(doc["spec"])
    rep.xr["metadata"]["labels"] = copy.deepcopy(doc["metadata"]["labels"])
    rep.xr["metadata"]["generation"] += 1
    rep.required = required


def _roll(rep: Replica, *, done: bool) -> None:
    """Reconcile the replica, its workloads then observed stalled or rolled, again."""
    rep.reconcile()
    before, rep.observed = rep.observed, {}
    assert rep.last is not None
    for name, doc in rep.last.composed.items():
        manifest = doc["spec"]["forProvider"]["manifest"]
        if manifest["kind"] == "Deployment":
            n = int(manifest["spec"].get("replicas", 1))
            remote = world.deployment_available(n) if done else _stalled(n)
            rep.observed[name] = rep.applied(name, doc, before, remote=remote)
        else:
            rep.observed[name] = rep.applied(name, doc, before)
    rep.reconcile()


def test_a_stalled_roll_off_a_cache_keeps_what_the_old_pods_read(render):
    d, rname, rep = one_serving_replica(render, _cache_b)
    where = rep.xr["spec"]["clusterName"]
    x = rep.xr["spec"]["modelCacheRef"]["identity"]
    y = source_identity(B_REPO, "main")
    ns = rep.xr["metadata"]["namespace"]

    # A's hydration on the replica's cluster, through the engine from here on.
    hdoc = next(
        copy.deepcopy(r)
        for r in d.required
        if r["kind"] == "ModelCacheHydration"
        and r["spec"]["cacheName"] == A
        and r["spec"]["clusterName"] == where
    )
    hdoc.pop("status")

    def replica_seen() -> dict[str, Any]:
        assert rep.last is not None
        return world.observed_xr(rep.xr, rep.last.xr)

    hyd = Hydration(render, hdoc, [cluster(where), replica_seen()])
    hyd.settle(pvc="Bound", job="complete", result=True)
    hyd.reconcile()
    assert hyd.status["stored"] == [{"identity": x, "usedBy": [rep.xr["metadata"]["name"]]}]

    # modelCacheRef -> B, Ready on the cluster: the deployment rewrites the replica's
    # spec and cache label at once, and labels it as leaving A.
    d.dep.xr["spec"]["template"]["spec"]["modelCacheRef"] = {"name": B}
    out = d.dep.reconcile()
    moved = out.composed[rname]
    assert moved["spec"]["modelCacheRef"] == {"name": B, "identity": y}
    assert moved["metadata"]["labels"]["modelplane.ai/cache"] == B
    assert moved["metadata"]["labels"][LEAVING] == A

    # The replica's roll onto B's PVC stalls: its old pods still read X from A's PVC.
    _publish(rep, moved, d.required)
    _roll(rep, done=False)
    assert rep.status["cacheIdentities"] == [y, x], rep.status
    assert rep.last is not None and not rep.last.is_ready()
    d.dep.observed[rname] = world.observed_xr(moved, rep.last.xr)
    out = d.dep.reconcile()
    assert out.composed[rname]["metadata"]["labels"][LEAVING] == A, "label dropped mid-roll"

    # A's revision is edited meanwhile: the new identity hydrates beside X, and X stays.
    new = source_identity(hdoc["spec"]["huggingFace"]["repo"], "v2")
    hdoc["spec"]["huggingFace"]["revision"] = "v2"
    hyd.xr["spec"] = copy.deepcopy(hdoc["spec"])
    hyd.required = [cluster(where), replica_seen()]
    hyd.settle(pvc="Bound", job="complete", result=True)
    out = hyd.reconcile()
    assert hyd.status["phase"] == "Ready"
    name = rep.xr["metadata"]["name"]
    assert hyd.status["stored"] == [{"identity": new}, {"identity": x, "usedBy": [name]}]
    for n, doc in out.composed.items():
        if n.startswith("prune-"):
            args = doc["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]
            assert x in args["containers"][0]["args"][-1], "X pruned under the old pods"

    # A's selector drops the cluster meanwhile: the hydration (and its PVC) is retained.
    clusters = [copy.deepcopy(r) for r in d.required if r["kind"] == "InferenceCluster"]
    for c in clusters:  # the selector reads the name label Kubernetes sets
        c["metadata"]["labels"]["kubernetes.io/metadata.name"] = c["metadata"]["name"]
    cache_doc = next(copy.deepcopy(r) for r in d.required if r["kind"] == "ModelCache"
                     and r["metadata"]["name"] == A)  # fmt: skip
    hyds = [r for r in d.required if r["kind"] == "ModelCacheHydration"
            and r["spec"]["cacheName"] == A]  # fmt: skip
    t = CacheTree(render, cache_doc, clusters, hyds)
    cache, observed_hyd, tree = t.cache, t.observed, t.reconcile
    tree([replica_seen()])
    cache.xr["spec"]["clusterSelector"] = {
        "matchLabels": {"modelplane.ai/gpu": "h100"},
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [where]}
        ],
    }
    tree([replica_seen()])
    tree([replica_seen()])
    assert where in observed_hyd, "A's hydration deleted under the rolling pods"
    assert [r["name"] for r in cache.status["retained"]] == [where], cache.status
    assert name in cache.status["retained"][0]["message"]

    # The roll completes: the label goes, X is pruned, the hydration is reclaimed.
    _roll(rep, done=True)
    assert rep.status["cacheIdentities"] == [y] and rep.last is not None
    assert rep.last.is_ready()
    d.dep.observed[rname] = world.observed_xr(d.dep.last.composed[rname], rep.last.xr)
    out = d.dep.reconcile()
    assert LEAVING not in out.composed[rname]["metadata"]["labels"]
    _publish(rep, out.composed[rname], d.required)
    hyd.required = [cluster(where), replica_seen()]
    out = hyd.reconcile()
    (prune,) = [doc for n, doc in out.composed.items() if n.startswith("prune-")]
    (c,) = prune["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]["containers"]
    assert c["args"][-2:] == ["--prune-keep", new]
    tree([replica_seen()])
    tree([replica_seen()])
    assert where not in observed_hyd
    assert cache.status["retained"] == []
    assert ns == d.dep.xr["metadata"]["namespace"]


def test_a_roll_off_a_removed_cache_keeps_the_label_until_it_is_done(render):
    """``modelCacheRef`` removed (a single-node engine serves without a cache): the
    replica's roll off A stalls, its old pods still read X. Before, the replica reported
    ModelReady as soon as those pods answered, wrote no ``status.cacheIdentities``, and
    the deployment dropped the ``leaving-cache`` label in that reconcile, so A's
    hydration no longer kept X for it. Now the replica is not ready and keeps X until
    its roll is done, and the label stays until then."""
    d, rname, rep = one_serving_replica(render)
    x = rep.xr["spec"]["modelCacheRef"]["identity"]

    del d.dep.xr["spec"]["template"]["spec"]["modelCacheRef"]
    out = d.dep.reconcile()
    moved = out.composed[rname]
    assert "modelCacheRef" not in moved["spec"]
    assert moved["metadata"]["labels"][LEAVING] == A

    _publish(rep, moved, d.required)
    _roll(rep, done=False)
    assert rep.status["cacheIdentities"] == [x], rep.status
    assert rep.last is not None and not rep.last.is_ready()
    [engine] = rep.status["engines"]
    assert engine["available"] is True and "rolling off the cache" in engine["message"]
    d.dep.observed[rname] = world.observed_xr(moved, rep.last.xr)
    out = d.dep.reconcile()
    assert out.composed[rname]["metadata"]["labels"][LEAVING] == A, "label dropped mid-roll"

    _roll(rep, done=True)
    assert "cacheIdentities" not in rep.status and rep.last is not None
    assert rep.last.is_ready()
    d.dep.observed[rname] = world.observed_xr(d.dep.last.composed[rname], rep.last.xr)
    out = d.dep.reconcile()
    assert LEAVING not in out.composed[rname]["metadata"]["labels"]
