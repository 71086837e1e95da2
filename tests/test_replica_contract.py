"""The ModelReplica contract end to end: what the ModelDeployment composer writes composes here.

The deployment example (``examples/modeldeployment``) is driven through
Crossplane's requirements loop; each ModelReplica it desires is then driven
through the replica composer against the same world. This is C5 across both
composers: a replica on a cluster whose hydration is Ready composes its
workload, one on a cluster still Hydrating composes nothing and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from function.naming import hydration_name
from function.render import World, drive, load_yaml
from tests.support import harness as h
from tests.test_replica import validate_all

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "modeldeployment"

pytestmark = pytest.mark.skipif(
    not (EXAMPLE / "xr.yaml").exists(), reason="examples/modeldeployment has not landed"
)


def _replicas() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    [xr] = load_yaml([str(EXAMPLE / "xr.yaml")])
    world = load_yaml([str(EXAMPLE / "required")])
    rsp, _ = drive(h.run, xr, None, World(world))
    assert not h.fatal(rsp)
    replicas = []
    for body in h.desired(rsp).values():
        if body.get("kind") == "ModelReplica":
            body.setdefault("metadata", {}).setdefault("namespace", xr["metadata"]["namespace"])
            replicas.append(body)
    return replicas, world


def test_every_placed_replica_composes_or_waits_for_its_hydration():
    replicas, world = _replicas()
    assert replicas, "the deployment example places no replica"
    phases = {
        d["metadata"]["name"]: (d.get("status") or {}).get("phase", "Pending")
        for d in world
        if d.get("kind") == "ModelCacheHydration"
    }
    seen = set()
    for r in replicas:
        rsp, calls = drive(h.run, r, None, World(world))
        assert not h.fatal(rsp), h.fatal(rsp)
        assert calls == 2
        spec = r["spec"]
        cache = (spec.get("modelCacheRef") or {}).get("name")
        phase = "Ready"
        if cache:
            phase = phases.get(
                hydration_name(r["metadata"]["namespace"], cache, spec["clusterName"]), "NotFound"
            )
        reason = h.conditions(rsp)["ModelReady"]["reason"]
        d = validate_all(rsp)
        if phase == "Ready":
            assert reason == "Starting"
            assert any(k.startswith("workload-") for k in d)
        else:
            assert reason in {"Hydrating", "HydrationFailed", "HydrationNotFound"}
            assert d == {}
            assert h.xr_ready(rsp) == "READY_FALSE"
        seen.add(phase)
    assert "Ready" in seen
