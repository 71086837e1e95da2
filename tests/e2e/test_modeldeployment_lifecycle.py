"""ModelDeployment with a cache, from nothing to every replica serving, through the engine.

The fleet is the bundled example's (``examples/modeldeployment/required``): room for
replica 0 on gpu-us-east-1a (cache Ready) and replicas 1 and 2 on gpu-us-west-2b (cache
Hydrating). Each composed ModelReplica is itself rendered through the engine, its
workload applied by a simulated provider-kubernetes and cluster, and the deployment
observes the replicas with the status Crossplane wrote for them. The deployment is
Ready only at the end, when every requested replica serves; never with a replica
waiting for its cache, never with a partial placement.
"""

from __future__ import annotations

import copy

import pytest

from function.render import load_yaml
from tests.e2e.lifecycle import XR, Replica
from tests.support import world
from tests.support.crossplane import ROOT

EXAMPLE = ROOT / "examples" / "modeldeployment"


def fleet_resources(hydrating: bool = True) -> list[dict]:
    docs = load_yaml([str(EXAMPLE / "required")])
    if not hydrating:
        for d in docs:
            if d["kind"] == "ModelCacheHydration" and d["status"]["phase"] == "Hydrating":
                d["status"]["phase"] = "Ready"
                d["status"]["message"] = "weights are on the cache PVC"
    return docs


class Deployment:
    def __init__(self, render, replicas: int = 3, cache: bool = True):
        (xr,) = load_yaml([str(EXAMPLE / "xr.yaml")])
        xr["spec"]["replicas"] = replicas
        if not cache:
            del xr["spec"]["template"]["spec"]["modelCacheRef"]
        self.render = render
        self.required = fleet_resources()
        self.dep = XR(render, xr, self.required)
        self.replicas: dict[str, Replica] = {}

    def step(self, *, serving: bool = True) -> None:
        """Reconcile the deployment, then every replica, then observe them all."""
        self.dep.required = self.required
        out = self.dep.reconcile()
        for name, doc in out.composed.items():
            if doc["kind"] == "Usage":
                self.dep.observed[name] = world.observed_xr(doc, {"status": {"conditions": [
                    {"type": "Ready", "status": "True", "reason": "Available"}]}})
                continue
            r = self.replicas.get(name)
            if r is None or r.xr["metadata"]["name"] != doc["metadata"]["name"]:
                r = self.replicas[name] = Replica(self.render, doc, self.required)
            elif r.xr["spec"] != doc["spec"]:
                # Crossplane updates the same ModelReplica: its children stay observed.
                r.xr["spec"] = copy.deepcopy(doc["spec"])
                r.xr["metadata"]["labels"] = copy.deepcopy(doc["metadata"].get("labels", {}))
                r.xr["metadata"]["generation"] += 1
            r.required = self.required
            r.settle(serving=serving)
            self.dep.observed[name] = world.observed_xr(doc, r.last.xr)

    def condition(self, typ: str) -> dict:
        return self.dep.last.condition(typ) or {}


def one_serving_replica(render, more=None) -> tuple[Deployment, str, Replica]:
    """A ModelDeployment of one replica on the example's fleet (its hydrations Ready;
    ``more(required)`` adds to what the engine resolves), reconciled until it and its
    replica serve: the deployment, the replica's composition-resource name, the replica."""
    d = Deployment(render, replicas=1)
    d.required = fleet_resources(hydrating=False)
    if more is not None:
        d.required += more(d.required)
    d.step()
    d.step()
    assert d.dep.reconcile().is_ready()
    ((rname, rep),) = [(n, r) for n, r in d.replicas.items() if n in d.dep.last.composed]
    return d, rname, rep


def test_from_nothing_to_every_replica_serving(render):
    d = Deployment(render)
    first = d.dep.reconcile()
    assert sorted(n for n in first.composed if n.startswith("replica-")) == [
        "replica-0", "replica-1", "replica-2"]
    assert not first.is_ready()

    # Replica 0 serves; 1 and 2 wait while gpu-us-west-2b hydrates.
    d.step()
    assert d.replicas["replica-0"].last.is_ready()
    for n in ("replica-1", "replica-2"):
        rep = d.replicas[n].last
        assert not rep.is_ready()
        assert rep.condition("ModelReady")["reason"] == "Hydrating"
    out = d.dep.reconcile()
    assert not out.is_ready(), "Ready with replicas waiting for the cache"
    assert d.condition("ReplicasReady")["reason"] == "WaitingForCache"
    assert out.deleted(d.dep.observed.values()) == set()

    # The cache finishes on gpu-us-west-2b: every replica serves, the deployment is Ready.
    d.required = fleet_resources(hydrating=False)
    d.step()
    assert all(r.last.is_ready() for r in d.replicas.values())
    out = d.dep.reconcile()
    assert d.condition("ReplicasReady")["status"] == "True", out.stdout
    assert out.is_ready(), "every replica serves, the Usage exists: the deployment is Ready"
    assert out.deleted(d.dep.observed.values()) == set()
    assert not [r for r in out.results if "not yet ready" in r.get("message", "")]


@pytest.mark.parametrize("cache", [True, False], ids=["with-cache", "without-cache"])
def test_partial_placement_is_never_ready(render, cache: bool):
    # Room for three replicas where this deployment may run; four requested. Without a
    # cache there is no Usage: every composed resource is a serving replica, so only the
    # XR's explicit readiness keeps it from reading Ready.
    d = Deployment(render, replicas=4, cache=cache)
    d.required = fleet_resources(hydrating=False)
    d.step()
    d.step()
    assert len([n for n in d.dep.last.composed if n.startswith("replica-")]) == 3
    assert all(r.last.is_ready() for r in d.replicas.values())
    out = d.dep.reconcile()
    assert d.condition("ReplicasScheduled")["status"] == "False"
    assert d.condition("ReplicasReady")["status"] == "False"
    assert "3/4" in d.condition("ReplicasReady")["message"]
    assert not out.is_ready(), "3 of 4 replicas placed and serving is not Ready"


def test_missing_cache_deletes_nothing(render):
    d = Deployment(render)
    d.required = fleet_resources(hydrating=False)
    d.step()
    d.step()
    assert d.dep.reconcile().is_ready()
    # The ModelCache disappears (or is not visible): every replica is kept.
    d.dep.required = [r for r in d.required if r["kind"] != "ModelCache"]
    out = d.dep.reconcile()
    # Only the Usage goes: it protected a cache that no longer exists.
    assert out.deleted(d.dep.observed.values()) == {"cache-usage"}
    assert d.condition("ReplicasScheduled")["reason"] == "CacheNotFound"
    # The replicas still serve, and readiness says so; ReplicasScheduled says why
    # nothing new is placed.
    assert d.condition("ReplicasReady")["status"] == "True"


def _claims(composed: dict) -> dict[str, dict]:
    """The ResourceClaimTemplate manifests among ``composed`` Objects, by key."""
    return {
        k: d["spec"]["forProvider"]["manifest"]
        for k, d in composed.items()
        if d["spec"]["forProvider"]["manifest"]["kind"] == "ResourceClaimTemplate"
    }


def _count(claim: dict) -> int:
    return int(claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"])


def test_a_device_count_edit_rolls_every_replica_onto_a_new_claim_template(render):
    """Review 20a F1: a ResourceClaimTemplate's ``spec`` is immutable, and the function
    rewrote it in place under the same name when a member's device count changed: the
    workload cluster refused it (the harness fails such an update, naming it), nothing
    rolled, and the replicas read Serving with the old number of GPUs. Now the new count
    is a new template under a new name, the pod template names it and the workload
    rolls; the old template is kept until the roll is complete, then deleted."""
    d = Deployment(render)
    d.required = fleet_resources(hydrating=False)
    d.step()
    d.step()
    assert d.dep.reconcile().is_ready()
    live = {n: r for n, r in d.replicas.items() if n in d.dep.last.composed}
    assert len(live) == 3
    before = {n: _claims(r.last.composed) for n, r in live.items()}
    for claims in before.values():
        (claim,) = claims.values()
        assert _count(claim) == 1

    # One GPU -> two for the member: the same replicas, the count copied into them.
    member = d.dep.xr["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["count"] = 2
    out = d.dep.reconcile()
    assert {n for n in out.composed if n.startswith("replica-")} == set(live)
    for name, r in live.items():
        doc = out.composed[name]
        r.xr["spec"] = copy.deepcopy(doc["spec"])
        r.xr["metadata"]["generation"] += 1
        (old_key, old), = before[name].items()

        # The new template beside the old one, kept exactly; the pod template names the new.
        got = r.reconcile()
        claims = _claims(got.composed)
        assert set(claims) - {old_key} and claims[old_key] == old, claims
        (new_key,) = set(claims) - {old_key}
        new = claims[new_key]
        assert _count(new) == 2 and new["metadata"]["name"] != old["metadata"]["name"]
        pod = got.composed["workload-vllm"]["spec"]["forProvider"]["manifest"]["spec"]["template"]
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == (
            new["metadata"]["name"]
        )
        assert got.deleted(r.observed.values()) == set()
        assert got.condition("ModelReady")["status"] == "False"
        assert not got.is_ready()

        # Applied, the new pods not all available yet (rolling): the old one still kept.
        r.world(starting={"workload-vllm"})
        assert r.refused == []
        got = r.reconcile()
        assert set(_claims(got.composed)) == {old_key, new_key}
        assert got.deleted(r.observed.values()) == set()
        assert "is kept" in r.status["engines"][0]["message"], r.status
        assert got.condition("ModelReady")["status"] == "False"

        # The roll is complete: Serving with two GPUs, the old template goes.
        r.world(serving=True)
        got = r.reconcile()
        assert got.condition("ModelReady")["reason"] == "Serving", r.status
        assert got.deleted(r.observed.values()) == {old_key}
        assert set(_claims(got.composed)) == {new_key}
        r.world(serving=True)
        d.dep.observed[name] = world.observed_xr(doc, r.last.xr)

    d.step()
    out = d.dep.reconcile()
    assert out.is_ready() and d.condition("ReplicasReady")["status"] == "True"
    for r in live.values():
        assert [_count(c) for c in _claims(r.last.composed).values()] == [2]
        remote = [
            o["status"]["atProvider"]["manifest"]
            for o in r.observed.values()
            if o["spec"]["forProvider"]["manifest"]["kind"] == "ResourceClaimTemplate"
        ]
        assert [_count(m) for m in remote] == [2]
