"""examples/modelreplica/: every replica renders as its comment says, over gRPC.

Each top-level XR is driven through Crossplane's requirements loop against the
resources of ``required/`` (a ModelCache Ready on one cluster, Hydrating on
another, Failed on a third); ``serving/`` is the single-node replica a reconcile
later, with its Objects observed serving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from function.render import World, load_yaml, observed_by_name
from tests.support import harness as h
from tests.support.validation import validate_xr
from tests.test_replica import ints, manifest, validate_all

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "modelreplica"
WORLD = load_yaml([str(EXAMPLE / "required")])

# file -> (ModelReady reason, workload kind or None)
EXPECTED = {
    "xr-single-node-ready.yaml": ("Starting", "Deployment"),
    "xr-single-node-hydrating.yaml": ("Hydrating", None),
    "xr-single-node-failed.yaml": ("HydrationFailed", None),
    "xr-multi-node-ready.yaml": ("Starting", "LeaderWorkerSet"),
    "xr-multi-node-hydrating.yaml": ("Hydrating", None),
    "xr-multi-node-failed.yaml": ("HydrationFailed", None),
}


def test_every_example_is_covered():
    assert sorted(p.name for p in EXAMPLE.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_renders_as_documented(grpc_function: Any, name: str):
    [xr] = load_yaml([str(EXAMPLE / name)])
    rsp, calls = grpc_function.drive(xr, World(WORLD))
    assert calls == 2 and not h.fatal(rsp)
    reason, kind = EXPECTED[name]
    cond = h.conditions(rsp)["ModelReady"]
    assert cond["reason"] == reason
    d = validate_all(rsp)
    workloads = [k for k in d if k.startswith("workload-")]
    if kind is None:
        assert d == {}
        assert h.xr_ready(rsp) == "READY_FALSE"
        assert xr["spec"]["clusterName"] in cond["message"]
        return
    [key] = workloads
    m = manifest(d, key)
    assert m["kind"] == kind
    if kind == "LeaderWorkerSet":
        lwt = m["spec"]["leaderWorkerTemplate"]
        assert lwt["size"] == 2
        # kimi-cache enables the flash loader for its replicas.
        for t in ("leaderTemplate", "workerTemplate"):
            assert lwt[t]["spec"]["initContainers"][0]["name"] == "modelplane-flash-loader"
    else:
        assert m["spec"]["replicas"] == 2
        vols = {v["name"]: v for v in m["spec"]["template"]["spec"]["volumes"]}
        assert vols["modelplane-dshm"]["emptyDir"]["sizeLimit"] == "16Gi"


def test_serving_example_reports_endpoint(grpc_function: Any):
    [xr] = load_yaml([str(EXAMPLE / "serving" / "xr.yaml")])
    observed = observed_by_name(load_yaml([str(EXAMPLE / "serving" / "observed")]))
    rsp, _ = grpc_function.drive(xr, World(WORLD), observed)
    st = h.status(rsp)
    assert st["phase"] == "Serving"
    # The status the function writes survives the XRD's schema (nothing is pruned).
    validate_xr({**xr, "status": st})
    svc = manifest(rsp, "service")["metadata"]["name"]
    assert st["endpoint"] == f"http://{svc}.default.svc.cluster.local:8000"
    assert h.xr_ready(rsp) == "READY_TRUE"
    # The observed Objects are exactly what the function desires (a steady state).
    desired = validate_all(rsp)
    assert set(observed) == set(desired)
    for key, body in observed.items():
        assert ints(body["spec"]) == ints(desired[key]["spec"]), key
