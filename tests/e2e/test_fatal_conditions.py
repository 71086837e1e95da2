"""A fatal result leaves the XR's conditions as they were, through Crossplane's engine
(review 15b, finding 3).

On a fatal result Crossplane v2.4 applies nothing, writes ``Synced=False`` with the
fatal message, and rewrites every non-system condition the response does not carry to
``Unknown``/``FatalError`` ("A fatal error occurred before the status of this condition
could be determined."). The function sends the observed XR's own conditions back with
every fatal result, so they keep what they said. The CLI prints nothing on a fatal
result; the core binary's own output (``core_output``) still holds the XR as the
reconciler writes it.
"""

from __future__ import annotations

import copy
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.render import load_yaml
from tests.e2e.test_member_templates_and_cel import _steady
from tests.support import crossplane, engine
from tests.support.crossplane import ROOT

OWN = ("ReplicasScheduled", "ReplicasReady")


def test_a_fatal_result_leaves_the_deployments_conditions_as_they_were(
    render: object, xp: crossplane.Tools, fn: str, tmp_path: Path
) -> None:
    d = _steady(render)
    before = {c["type"]: c for c in d.dep.xr["status"]["conditions"]}
    assert all(before[t]["status"] == "True" for t in OWN), before
    xr = copy.deepcopy(d.dep.xr)
    member = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["template"]["spec"]["hostPID"] = True  # refused: a fatal result naming the field
    core = tmp_path / "core.bin"
    out = engine.render(
        xp,
        fn,
        xr,
        observed=list(d.dep.observed.values()),
        required=d.required,
        full_xr=False,
        core_output=core,
    )
    assert out.exit_code != 0 and "hostPID" in out.stderr, out.stderr
    written = engine.core_composite(core)
    assert written is not None
    after = {c["type"]: c for c in written["status"]["conditions"]}
    # Synced carries the fatal message; Ready (every replica still serving) and the
    # deployment's own conditions are what they were.
    assert after["Synced"]["status"] == "False", after["Synced"]
    assert "hostPID" in after["Synced"]["message"], after["Synced"]
    assert after["Ready"]["status"] == "True", after["Ready"]
    for t in OWN:
        got = {k: after[t].get(k) for k in ("status", "reason", "message")}
        want = {k: before[t].get(k) for k in ("status", "reason", "message")}
        assert got == want, (t, got)


class _Database(grpcv1.FunctionRunnerServiceServicer):
    """Another step of the pipeline, before the function's: it sets its own condition."""

    def RunFunction(self, request: Any, context: Any) -> Any:
        rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=request.meta.tag))
        rsp.desired.CopyFrom(request.desired)
        rsp.conditions.add(
            type="DatabaseReady",
            status=fnv1.STATUS_CONDITION_TRUE,
            reason="Available",
            message="set by step db this reconcile",
            target=fnv1.TARGET_COMPOSITE,
        )
        return rsp


def test_a_fatal_result_leaves_another_steps_condition_to_that_step(
    xp: crossplane.Tools, fn: str, tmp_path: Path
) -> None:
    """Found by review 15d: the function sent back every observed condition with a fatal
    result, another step's too; Crossplane applies the steps' conditions in order, the
    last winning, so the earlier step's fresh ``DatabaseReady=True`` was overwritten by
    the stale ``False`` of the last reconcile. Only the kind's own are sent now."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    grpcv1.add_FunctionRunnerServiceServicer_to_server(_Database(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        (xr,) = load_yaml([str(ROOT / "examples" / "modeldeployment" / "xr.yaml")])
        xr = copy.deepcopy(xr)
        xr["spec"]["replicas"] = 1.5  # refused: a fatal result naming spec.replicas
        stale = {"type": "DatabaseReady", "status": "False", "reason": "Creating",
                 "message": "stale", "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
        xr["status"] = {"conditions": [stale]}
        comp = yaml.safe_load(engine.composition_for("ModelDeployment").read_text())
        comp["spec"]["pipeline"].insert(0, {"step": "db", "functionRef": {"name": "function-db"}})
        composition = tmp_path / "composition.yaml"
        composition.write_text(yaml.safe_dump(comp))
        db = engine.functions_yaml(f"127.0.0.1:{port}")
        db["metadata"]["name"] = "function-db"
        core = tmp_path / "core.bin"
        out = engine.render(
            xp, fn, xr, composition=composition, functions=[db], full_xr=False, core_output=core
        )
        assert out.exit_code != 0 and "spec.replicas" in out.stderr, out.stderr
        written = engine.core_composite(core)
        assert written is not None
        after = {c["type"]: c for c in written["status"]["conditions"]}
        assert after["DatabaseReady"]["status"] == "True", after["DatabaseReady"]
        assert after["DatabaseReady"]["reason"] == "Available", after["DatabaseReady"]
    finally:
        server.stop(0)


def test_an_invalid_class_edit_turns_devices_valid_false_through_the_engine(
    render: Any, xp: crossplane.Tools, fn: str, tmp_path: Path
) -> None:
    """Found by review 19b: an InferenceClass edited to a value the XRD admits but the
    function refuses kept ``DevicesValid=True`` describing the devices before the edit,
    beside ``Synced=False``. The class's spec condition now says the spec is invalid,
    naming the field, as the core binary writes it."""
    from tests.e2e.lifecycle import XR

    (xr,) = load_yaml([str(ROOT / "examples" / "inferenceclass" / "xr.yaml")])
    c = XR(render, xr, [])
    c.reconcile()
    c.reconcile()
    before = {x["type"]: x for x in c.status["conditions"]}
    assert before["DevicesValid"]["status"] == "True", before
    bad = copy.deepcopy(c.xr)
    # Admitted by the XRD (a string of at most 32 characters), not a semantic version.
    bad["spec"]["devices"][0]["attributes"]["cudaComputeCapability"] = {"version": "nine"}
    core = tmp_path / "core.bin"
    out = engine.render(xp, fn, bad, full_xr=False, core_output=core)
    assert out.exit_code != 0, out.stdout
    written = engine.core_composite(core)
    assert written is not None
    after = {x["type"]: x for x in written["status"]["conditions"]}
    field = "spec.devices[0].attributes.cudaComputeCapability.version"
    assert after["Synced"]["status"] == "False" and field in after["Synced"]["message"], after
    got = after["DevicesValid"]
    assert (got["status"], got["reason"]) == ("False", "InvalidSpec"), got
    assert field in got["message"] and "InferenceClass /" not in after["Synced"]["message"], after
