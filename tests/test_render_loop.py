"""The stand-in requirements loop (``function.render.drive``, ``python -m function.render``)
is Crossplane v2.4.0's ``FetchingFunctionRunner.RunFunction`` (review 14c #3): it stops
only on a fatal result, on requirements equal to the previous call's (none equals only
none), or, on the first call, when what the request was given equals what its
requirements resolve to; pre-populated resources (a Composition's bootstrap
requirements, or last reconcile's requirements Crossplane v2.4 seeds) persist across
calls; after 6 calls it fails with Crossplane's error and applies nothing.

A probe function over gRPC on 127.0.0.1 (``tests/support/probe.py``) drives each loop
shape; ``tests/e2e/test_render_loop_parity.py`` runs the same table through the real
``crossplane render`` and asserts the same outcome.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function import render
from function.render import NOT_STABLE, RequirementsDidNotStabilize, World, drive
from tests.support import probe
from tests.support.table import Case, table


@dataclass(frozen=True)
class Loop:
    """A probe shape and the ConfigMaps pre-populated by requirement name."""

    shape: str
    given: tuple[tuple[str, str], ...] = ()


GO = "Crossplane v2.4.0 FetchingFunctionRunner (internal/xfn/required_resources.go)"
LOOPS: list[Case[Loop, probe.Outcome]] = [
    Case("asks-nothing", GO, Loop("none"), probe.Outcome("nothing", None, 1)),
    Case("asks-one", GO, Loop("one"), probe.Outcome("x=cm", None, 2)),
    Case("asks-a-missing-name", GO + ": a name not found is nil, sent as an empty entry",
         Loop("missing"), probe.Outcome("x=-", None, 2)),
    Case("chain", GO, Loop("chain"), probe.Outcome("x=cm y=cm-2", None, 3)),
    Case("drops-a-requirement-once-read", GO + ": requirements differ, so it calls again "
         "without it, until the limit", Loop("drop-once-read"),
         probe.Outcome(None, NOT_STABLE, 6)),
    Case("never-repeats", GO, Loop("never-repeat"), probe.Outcome(None, NOT_STABLE, 6)),
    Case("given-what-it-asks", GO + ": on the first call, given == resolved is final",
         Loop("one", (("x", "cm"),)), probe.Outcome("x=cm", None, 1)),
    Case("given-a-missing-name", GO + ": nil given equals nil resolved",
         Loop("missing", (("x", "missing"),)), probe.Outcome("x=-", None, 1)),
    Case("given-an-old-selector", GO + ": the name holds what the old selector resolved",
         Loop("one", (("x", "old"),)), probe.Outcome("x=cm", None, 2)),
    Case("given-a-name-never-asked", GO + ": pre-populated resources persist across calls",
         Loop("one", (("z", "old"),)), probe.Outcome("x=cm z=old", None, 2)),
    Case("given-then-asks-nothing", GO + ": no requirements equals the nil it started from",
         Loop("drop-once-read", (("x", "cm"),)), probe.Outcome("x=cm", None, 1)),
    Case("asks-nothing-given-one", GO, Loop("none", (("x", "cm"),)),
         probe.Outcome("x=cm", None, 1)),
]  # fmt: skip


@pytest.fixture(scope="module")
def served() -> Iterator[probe.Probe]:
    with probe.serving() as p:
        yield p


def stand_in(p: probe.Probe, loop: Loop, how: str) -> probe.Outcome:
    """The loop through ``drive`` over gRPC, pre-populated as ``how`` says."""
    given = {n: probe.selector(cm) for n, cm in loop.given}
    kw = {how: given} if given else {}
    p.reset()
    with grpc.insecure_channel(p.address) as ch:
        stub = grpcv1.FunctionRunnerServiceStub(ch)  # type: ignore[no-untyped-call]
        try:
            rsp, calls = drive(
                lambda r: stub.RunFunction(r, timeout=10),
                probe.xr(loop.shape),
                {},
                World(probe.WORLD),
                **kw,
            )
        except RequirementsDidNotStabilize as e:
            assert e.calls == p.calls
            return probe.Outcome(None, str(e), p.calls)
    assert calls == p.calls
    return probe.Outcome(rsp.desired.composite.resource["status"]["probe"], None, calls)


@table(LOOPS)
@pytest.mark.parametrize("how", ["bootstrap", "seed"])
def test_the_stand_in_loop_is_crossplanes(
    served: probe.Probe, how: str, case: Case[Loop, probe.Outcome]
) -> None:
    assert stand_in(served, case.inputs, how) == case.want, case.reason


def test_the_cli_fails_as_crossplane_when_requirements_do_not_stabilize(
    served: probe.Probe, tmp_path, capsys
) -> None:
    (tmp_path / "xr.yaml").write_text(yaml.safe_dump(probe.xr("never-repeat")))
    code = render.main([str(tmp_path / "xr.yaml"), "--address", served.address])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.strip().endswith(NOT_STABLE), err


def test_the_cli_seeds_the_first_call(served: probe.Probe, tmp_path, capsys) -> None:
    (tmp_path / "xr.yaml").write_text(yaml.safe_dump(probe.xr("one")))
    (tmp_path / "req.yaml").write_text(yaml.safe_dump_all(probe.WORLD))
    seed = {"x": {"apiVersion": "v1", "kind": "ConfigMap", "matchName": "cm",
                  "namespace": probe.NAMESPACE}}  # fmt: skip
    (tmp_path / "seed.yaml").write_text(yaml.safe_dump(seed))
    args = [str(tmp_path / "xr.yaml"), "--required", str(tmp_path / "req.yaml")]
    code = render.main([*args, "--address", served.address, "--seed", str(tmp_path / "seed.yaml")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "# 1 RunFunction call(s)" in err
    assert "probe: x=cm" in out
    code = render.main([*args, "--address", served.address])
    out, err = capsys.readouterr()
    assert code == 0 and "# 2 RunFunction call(s)" in err and "probe: x=cm" in out
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"x": {"kind": 3, "nope": 1}}))
    code = render.main([*args, "--address", served.address, "--seed", str(tmp_path / "bad.yaml")])
    _, err = capsys.readouterr()
    assert code == 2 and "bad.yaml: x: not a ResourceSelector" in err
