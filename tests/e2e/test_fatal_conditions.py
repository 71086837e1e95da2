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
from pathlib import Path

from tests.e2e.test_member_templates_and_cel import _steady
from tests.support import crossplane, engine

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
