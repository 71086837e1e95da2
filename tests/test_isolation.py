"""Namespace isolation and provider configs from the fleet only (issue 9).

Every seed of every kind whose composer exists (``tests/support/reliability.py``) is moved
into namespace ``team-b``; decoys of every namespaced resource its world holds
(the auth Secret with another token, the ModelCache, the CronJob template, the
target ModelDeployment, ...) are planted with the same names in ``ml-team`` and
``other-team``. Each InferenceCluster gets a provider config of its own,
``pc-<cluster>``. Then Crossplane's requirements loop is run (``function.render.drive``
over an in-process runner) and every response is checked:

- every requirement of a namespaced kind carries the XR's namespace (so only the
  XR's own namespace can resolve it); only cluster-scoped kinds (InferenceCluster,
  DRA classes ...) and the fleet-wide reads listed in :data:`FLEET_WIDE` (no user
  writes them) are asked for without one;
- every composed resource lives in the XR's namespace, and every
  ``references[].patchesFrom`` of an Object reads from it;
- every Object's ``providerConfigRef`` is one an InferenceCluster reports in its
  status -- also when the user writes ``providerConfigRef`` (and ``namespace``)
  into every object of the spec: that input is ignored or rejected (a fatal result
  naming the field), never followed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composers import KINDS
from function.render import World, drive
from tests.support.harness import desired, fatal, run
from tests.support.reliability import Seed, missing_reason, seeds

NS = "team-b"
DECOY_NAMESPACES = ("ml-team", "other-team")
EVIL_PC = {"name": "attacker-pc", "kind": "ClusterProviderConfig"}
# Kinds that have no namespace (a requirement for them cannot carry one).
CLUSTER_SCOPED = {
    "InferenceCluster",
    "InferenceClass",
    "Namespace",
    "Node",
    "StorageClass",
    "DeviceClass",
    "ResourceSlice",
    "ClusterProviderConfig",
    "PriorityClass",
}


# Requirements that read a namespaced kind across the fleet on purpose, and why. They
# come from no user-written reference; each is listed with the rule it serves.
FLEET_WIDE = {
    ("ModelDeployment", "ModelReplica"): (
        "every replica of the fleet, to count the devices already used on shared "
        "clusters (placement capacity); own replicas are told apart by namespace and name"
    ),
}


def _is_cluster_scoped(doc: dict[str, Any]) -> bool:
    return doc.get("kind") in CLUSTER_SCOPED or not (doc.get("metadata") or {}).get("namespace")


def isolated(seed: Seed) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """``seed`` moved to :data:`NS`, with decoys and per-cluster provider configs."""
    body = copy.deepcopy(seed.xr)
    old_ns = body["metadata"].get("namespace")
    body["metadata"]["namespace"] = NS
    world: list[dict[str, Any]] = []
    pc_map = {
        ((d.get("status") or {}).get("providerConfigRef") or {}).get("name"): (
            f"pc-{d['metadata']['name']}"
        )
        for d in seed.world
        if d.get("kind") == "InferenceCluster"
    }
    for doc in seed.world:
        doc = copy.deepcopy(doc)
        meta = doc.setdefault("metadata", {})
        if doc.get("kind") == "InferenceCluster":
            status = doc.get("status") or {}
            if "providerConfigRef" in status:
                status["providerConfigRef"] = {
                    "name": f"pc-{meta['name']}",
                    "kind": "ClusterProviderConfig",
                }
            world.append(doc)
            continue
        if _is_cluster_scoped(doc):
            world.append(doc)
            continue
        if meta.get("namespace") == old_ns:
            mine = copy.deepcopy(doc)
            mine["metadata"]["namespace"] = NS
            world.append(mine)
        for decoy_ns in DECOY_NAMESPACES:
            decoy = copy.deepcopy(doc)
            decoy["metadata"]["namespace"] = decoy_ns
            decoy["metadata"].setdefault("labels", {})["isolation-test/decoy"] = decoy_ns
            world.append(decoy)
    observed = {}
    for name, obs in seed.observed.items():
        obs = _renamespace(copy.deepcopy(obs), old_ns)
        # An Object the function composed earlier carries its cluster's provider config.
        pc = (obs.get("spec") or {}).get("providerConfigRef")
        if obs.get("kind") == "Object" and isinstance(pc, dict) and pc.get("name") in pc_map:
            pc["name"] = pc_map[pc["name"]]
        observed[name] = obs
    return body, world, observed


def _renamespace(value: Any, old_ns: str | None) -> Any:
    """``value`` with every ``namespace: <old_ns>`` field set to :data:`NS`."""
    if isinstance(value, dict):
        return {
            k: NS if k == "namespace" and v == old_ns else _renamespace(v, old_ns)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_renamespace(v, old_ns) for v in value]
    return value


def inject(spec: Any, depth: int = 0) -> Any:
    """``spec`` with ``providerConfigRef`` in every object and ``namespace`` in every
    object that looks like a reference (has a ``name``)."""
    if isinstance(spec, dict):
        out = {k: inject(v, depth + 1) for k, v in spec.items()}
        out["providerConfigRef"] = dict(EVIL_PC)
        if "name" in out and isinstance(out["name"], str):
            out["namespace"] = "other-team"
        return out
    if isinstance(spec, list):
        return [inject(v, depth + 1) for v in spec]
    return spec


def drive_all(
    body: dict[str, Any], world: list[dict[str, Any]], observed: dict[str, Any]
) -> list[fnv1.RunFunctionResponse]:
    """Every response of the requirements loop."""
    got: list[fnv1.RunFunctionResponse] = []

    def call(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = run(req)
        got.append(rsp)
        return rsp

    drive(call, body, observed, World(world))
    return got


def check_response(
    rsp: fnv1.RunFunctionResponse, world: list[dict[str, Any]], where: str, kind: str = ""
) -> tuple[int, int]:
    """Assert isolation on one response; returns (requirements, Objects) checked."""
    pcs = {
        d["status"]["providerConfigRef"]["name"]
        for d in world
        if d.get("kind") == "InferenceCluster" and "providerConfigRef" in (d.get("status") or {})
    }
    nreq = 0
    for name, sel in rsp.requirements.resources.items():
        nreq += 1
        if sel.kind in CLUSTER_SCOPED:
            continue
        if (kind, sel.kind) in FLEET_WIDE and sel.WhichOneof("match") == "match_labels":
            continue
        assert sel.HasField("namespace") and sel.namespace == NS, (
            f"{where}: requirement {name} ({sel.kind}) has namespace "
            f"{sel.namespace if sel.HasField('namespace') else '<none>'}, want {NS}"
        )
    nobj = 0
    for name, body in desired(rsp).items():
        meta = body.get("metadata") or {}
        if meta.get("namespace"):
            assert meta["namespace"] == NS, f"{where}: {name} composed in {meta['namespace']}"
        if body.get("kind") != "Object":
            continue
        nobj += 1
        spec = body.get("spec") or {}
        pc = spec.get("providerConfigRef") or {}
        assert pc.get("name") in pcs, (
            f"{where}: Object {name} uses provider config {pc}, not one an InferenceCluster "
            f"reports ({sorted(pcs)})"
        )
        for ref in spec.get("references") or ():
            src = ref.get("patchesFrom") or ref.get("dependsOn") or {}
            if src.get("namespace"):
                assert src["namespace"] == NS, f"{where}: Object {name} reads from {src}"
    return nreq, nobj


def _params() -> list[Any]:
    out = []
    for kind in KINDS:
        reason = missing_reason(kind)
        if reason:
            out.append(pytest.param(kind, marks=pytest.mark.skip(reason=reason)))
        else:
            out.append(kind)
    return out


@pytest.mark.parametrize("kind", _params())
@pytest.mark.parametrize("injected", [False, True], ids=["plain", "injected"])
def test_references_resolve_only_in_the_xr_namespace(kind: str, injected: bool) -> None:
    checked = 0
    for seed in seeds(kind):
        body, world, observed = isolated(seed)
        if injected:
            body["spec"] = inject(body.get("spec") or {})
        for i, rsp in enumerate(drive_all(body, world, observed)):
            where = f"{seed.id} ({'injected' if injected else 'plain'}) call {i + 1}"
            if fatal(rsp):
                assert injected, f"{where}: fatal without injection: {fatal(rsp)}"
                assert any("spec." in m for m in fatal(rsp)), f"{where}: {fatal(rsp)}"
                checked += 1
                continue
            check_response(rsp, world, where, kind)
            checked += 1
    assert checked > 0, f"{kind}: no response was checked"


def test_hydration_objects_use_their_own_cluster_provider_config() -> None:
    """A hydration pinned to gpu-a applies with gpu-a's provider config, whatever the spec says."""
    for seed in seeds("ModelCacheHydration"):
        body, world, observed = isolated(seed)
        body["spec"] = inject(body["spec"])
        cluster = seed.xr["spec"]["clusterName"]
        rsp = drive_all(body, world, observed)[-1]
        if fatal(rsp):
            continue
        objs = [d for d in desired(rsp).values() if d.get("kind") == "Object"]
        assert objs, seed.id
        for d in objs:
            assert d["spec"]["providerConfigRef"]["name"] == f"pc-{cluster}", (seed.id, d)


# Which composer asks for which user-writable reference (issue 9's list).
USER_REFERENCES = {
    "ModelCacheHydration": {"Secret"},
    "ModelDeployment": {"ModelCache"},
    "ModelReplica": {"ModelCache"},
    "ModelBackfill": {"CronJob", "ModelDeployment"},
}


def test_every_user_writable_reference_is_asked_for_in_the_xr_namespace() -> None:
    """The seeds do reach the by-name references a user writes, each in the XR's namespace."""
    for kind, want in USER_REFERENCES.items():
        if missing_reason(kind):
            continue
        asked: set[str] = set()
        for seed in seeds(kind):
            body, world, observed = isolated(seed)
            for rsp in drive_all(body, world, observed):
                for sel in rsp.requirements.resources.values():
                    if sel.WhichOneof("match") == "match_name":
                        assert sel.kind in CLUSTER_SCOPED or sel.namespace == NS, (kind, sel)
                        asked.add(sel.kind)
        assert want <= asked, f"{kind}: never asked for {sorted(want - asked)}"
