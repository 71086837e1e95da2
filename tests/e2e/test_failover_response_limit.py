"""A ModelDeployment that fits in Crossplane's 4 MiB response in steady state fails over
in batches through the engine, never refused whole.

Eight replicas of a template with a 400 KiB env value: ten such ModelReplicas fit in the
response. When their cluster stops being Ready, each serving replica moves
make-before-break, its replacement composed beside it: eight replacements would make
sixteen copies. Before, the whole call got a fatal result, so the deployment could not
fail over at all; now two replacements are composed at a time, the other six replicas
stay exactly as they are, ``ReplicasScheduled`` says ``MovesDeferred`` and why, and each
batch's old replicas go once their replacements serve, then the next batch starts.
"""

from __future__ import annotations

import copy
from typing import Any

from function.render import load_yaml
from tests.e2e.lifecycle import XR
from tests.support import world
from tests.support.crossplane import ROOT

EXAMPLE = ROOT / "examples" / "modeldeployment"
FIT = 10  # ModelReplicas of about 400.7 KiB within 4 MiB
SERVING = {
    "status": {
        "conditions": [
            {"type": "ModelReady", "status": "True", "reason": "Serving", "message": "ok"},
            {"type": "Ready", "status": "True", "reason": "Available"},
        ]
    }
}


def _deployment(replicas: int, kib: int) -> dict[str, Any]:
    (xr,) = load_yaml([str(EXAMPLE / "xr.yaml")])
    ts = xr["spec"]["template"]["spec"]
    del ts["modelCacheRef"]
    ts["clusterSelector"] = {"matchLabels": {"modelplane.ai/gpu": "h100"}}
    container = ts["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "BLOB", "value": "x" * (kib * 1024)}]
    xr["spec"]["replicas"] = replicas
    return xr


def _clusters(ready: dict[str, bool]) -> list[dict[str, Any]]:
    """The example's gpu-us-east-1a, renamed, with 16 nodes, Ready as given."""
    (base,) = [
        d
        for d in load_yaml([str(EXAMPLE / "required")])
        if d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "gpu-us-east-1a"
    ]
    out = []
    for name, up in ready.items():
        c = copy.deepcopy(base)
        c["metadata"]["name"] = name
        c["status"]["gpuPools"][0]["nodes"] = 16
        for cond in c["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond["status"] = "True" if up else "False"
        out.append(c)
    return out


def _observe_serving(dep: XR) -> None:
    """Every ModelReplica composed last is observed, serving (Crossplane deletes the
    ones no longer desired)."""
    assert dep.last is not None
    dep.observed = {
        name: world.observed_xr(doc, SERVING) for name, doc in dep.last.composed.items()
    }


def _on(dep: XR, cluster: str) -> int:
    assert dep.last is not None
    return sum(1 for d in dep.last.composed.values() if d["spec"]["clusterName"] == cluster)


def test_a_failover_past_the_response_limit_moves_in_batches(render: Any) -> None:
    dep = XR(render, _deployment(8, 400), _clusters({"gpu-a": True}))
    dep.reconcile()
    assert _on(dep, "gpu-a") == 8
    _observe_serving(dep)
    before = copy.deepcopy(dep.observed)

    dep.required = _clusters({"gpu-a": False, "gpu-b": True})
    out = dep.reconcile()  # check(): the call is not refused
    assert len(out.composed) == FIT and _on(dep, "gpu-b") == 2, sorted(out.composed)
    for name, obs in before.items():  # every replica kept as it was
        assert out.composed[name]["spec"] == obs["spec"], name
    cond = out.condition("ReplicasScheduled") or {}
    assert cond.get("status") == "True" and cond.get("reason") == "MovesDeferred", cond
    assert "6 moves deferred by the response size limit" in cond["message"], cond
    assert "4 MiB" in cond["message"], cond
    warned = [r for r in out.results if "deferred" in r.get("message", "")]
    assert len(warned) == 1 and warned[0]["severity"] == "Warning", out.results
    assert warned[0]["reason"] == "MovesDeferred", warned

    # A fixed point: the status written back, the same world, the same answer, no event.
    again = dep.reconcile()
    assert again.composed == out.composed
    assert again.condition("ReplicasScheduled") == out.condition("ReplicasScheduled")
    assert not [r for r in again.results if "deferred" in r.get("message", "")], again.results

    # The replacements serve: each batch's old replicas go, then the next batch comes.
    for _ in range(12):
        _observe_serving(dep)
        out = dep.reconcile()
        assert FIT >= len(out.composed) >= 8, sorted(out.composed)
        if not _on(dep, "gpu-a"):
            break
    assert len(out.composed) == 8 and _on(dep, "gpu-b") == 8, sorted(out.composed)
    cond = out.condition("ReplicasScheduled") or {}
    assert cond.get("reason") == "Scheduled", cond
