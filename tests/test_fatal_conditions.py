"""A fatal result keeps the XR's own conditions as they were (review 15b, finding 3).

On a fatal result Crossplane v2.4 sets ``Synced=False`` with the fatal message and
rewrites every non-system condition the response does not carry to
``Unknown``/``FatalError`` (``composite/reconciler.go``, after Compose fails). It reads
the fatal response's own conditions first, so every fatal response sends back the
observed XR's non-system conditions unchanged. The end-to-end proof through the pinned
engine is ``tests/e2e/test_fatal_conditions.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.core import deadline as deadline_mod
from function.core.outcome import Outcome
from function.edge import codec
from function.edge import runner as runner_mod
from function.edge.pool import fatal_for
from function.edge.runner import FunctionRunner
from function.render import load_yaml
from tests.support import harness as hh
from tests.support.crossplane import ROOT
from tests.support.harness import GrpcFunction

# What the observed XR carries: two conditions of its own, Crossplane's, and malformed
# ones (a client that writes the status by hand, or sends protobuf directly).
OBSERVED_CONDITIONS: list[Any] = [
    {"type": "Ready", "status": "True", "reason": "Available"},
    {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
    {"type": "ReplicasScheduled", "status": "True", "reason": "Scheduled", "message": "2 of 2"},
    {"type": "ReplicasReady", "status": "Unknown", "reason": "Pending"},  # no message
    # Another pipeline step's: Crossplane applies the steps' conditions in order, the
    # last winning, so sending it back would undo that step's value (review 15d).
    {"type": "DatabaseReady", "status": "False", "reason": "Creating", "message": "stale"},
    {"type": "ReplicasScheduled", "status": "False", "reason": "Dup", "message": "a repeat"},
    {"type": 5, "status": "True", "reason": "NotAString"},
    {"status": "True", "reason": "NoType"},
    {"type": "", "status": "True", "reason": "EmptyType"},
    {"type": "BadStatus", "status": "Maybe", "reason": "X"},
    {"type": "NoStatus", "reason": "X"},
    {"type": "ObjectStatus", "status": {"value": "True"}, "reason": "X"},
    {"type": "ListStatus", "status": ["True"], "reason": "X"},
    {"type": "NumberReason", "status": "True", "reason": 3},
    {"type": "ListMessage", "status": "True", "reason": "X", "message": ["a"]},
    "not an object",
    7,
    None,
]

# The ModelDeployment's own (function.composers.condition_types), as they were.
KEPT = {
    "ReplicasScheduled": {"status": "True", "reason": "Scheduled", "message": "2 of 2"},
    "ReplicasReady": {"status": "Unknown", "reason": "Pending", "message": ""},
}


def _xr(conditions: Any = OBSERVED_CONDITIONS) -> dict[str, Any]:
    (doc,) = load_yaml([str(ROOT / "examples" / "modeldeployment" / "xr.yaml")])
    doc = copy.deepcopy(doc)
    doc.setdefault("status", {})["conditions"] = copy.deepcopy(conditions)
    return doc


def _kept(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, str]]:
    assert hh.fatal(rsp), hh.results(rsp)
    assert all(c.target == fnv1.TARGET_COMPOSITE for c in rsp.conditions)
    assert len(rsp.conditions) == len(hh.conditions(rsp)), "a type sent twice"
    return hh.conditions(rsp)


def _invalid_spec(monkeypatch: pytest.MonkeyPatch, xr: dict[str, Any]) -> None:
    xr["spec"]["replicas"] = 1.5  # a SpecError naming spec.replicas


def _unknown_kind(monkeypatch: pytest.MonkeyPatch, xr: dict[str, Any]) -> None:
    xr["kind"] = "XBucket"


def _raising(error: BaseException) -> Callable[[pytest.MonkeyPatch, dict[str, Any]], None]:
    def setup(monkeypatch: pytest.MonkeyPatch, xr: dict[str, Any]) -> None:
        def composer(inputs: Any) -> Outcome:
            raise error

        monkeypatch.setattr(runner_mod, "composer_for", lambda api_version, kind: composer)

    return setup


def _over_4mib(monkeypatch: pytest.MonkeyPatch, xr: dict[str, Any]) -> None:
    monkeypatch.setattr(runner_mod, "MAX_RESPONSE_BYTES", 256)


@pytest.mark.parametrize(
    ("setup", "says", "kept"),
    [
        (_invalid_spec, "spec.replicas", KEPT),
        (_unknown_kind, "does not serve XBucket", {}),  # no condition of it is ours
        (_raising(RuntimeError("boom")), "internal error", KEPT),
        (_raising(deadline_mod.CallDeadline(10)), "compute deadline of 10 s", KEPT),
        (_over_4mib, "over the 4 MiB", KEPT),
    ],
    ids=["invalid-spec", "unknown-kind", "internal-error", "deadline", "response-over-4mib"],
)
def test_every_fatal_response_over_grpc_keeps_the_xrs_own_conditions(
    monkeypatch: pytest.MonkeyPatch,
    setup: Callable[[pytest.MonkeyPatch, dict[str, Any]], None],
    says: str,
    kept: dict[str, Any],
) -> None:
    xr = _xr()
    setup(monkeypatch, xr)
    with GrpcFunction() as fn:
        rsp = fn.call(hh.request(xr))
    (msg,) = hh.fatal(rsp)
    assert says in msg, msg
    assert _kept(rsp) == kept


def test_a_composers_fatal_outcome_keeps_the_xrs_own_conditions() -> None:
    out = Outcome()
    out.condition("ReplicasReady", "True", "Mine", "what the composer decided")
    out.fatal("refused")
    rsp = FunctionRunner(settings=hh.default_settings(), clock=hh.Clock()).encode(
        hh.request(_xr()), out
    )
    assert _kept(rsp) == KEPT


def _deep(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(depth):
        node = {"a": node}
    return node


@pytest.mark.parametrize(
    ("where", "kept"),
    [
        # protobuf cannot parse the request (a composed resource nested past its limit),
        # but the observed XR alone parses: its conditions are kept
        ("observed", KEPT),
        # the XR's own spec is nested past the limit: its conditions are read from the
        # wire alone (review 15e F2: before, none were, and Crossplane reset them all)
        ("xr", KEPT),
        # its conditions themselves nested past the limit: none can be read
        ("conditions", {}),
    ],
)
def test_an_undecodable_request_keeps_the_conditions_it_can_read(
    where: str, kept: dict[str, Any]
) -> None:
    xr = _xr()
    observed: dict[str, Any] = {}
    if where == "xr":
        xr["spec"]["deep"] = _deep(120)
    elif where == "conditions":
        xr["status"]["conditions"][0]["deep"] = _deep(120)
    else:
        observed["deep"] = {"apiVersion": "v1", "kind": "ConfigMap", "data": _deep(120)}
    data = hh.request(xr, observed=observed).SerializeToString()
    with pytest.raises(Exception):  # noqa: B017 - upb's DecodeError
        fnv1.RunFunctionRequest.FromString(data)
    runner = FunctionRunner(settings=hh.default_settings(), clock=hh.Clock())
    rsp = fnv1.RunFunctionResponse.FromString(runner.run_bytes(data))
    (msg,) = hh.fatal(rsp)
    assert "could not be parsed" in msg, msg
    assert _kept(rsp) == kept


def test_a_fatal_from_the_compute_pool_keeps_the_xrs_own_conditions() -> None:
    """A compute process that died or was killed past its deadline (``fatal_for``)."""
    rsp = fnv1.RunFunctionResponse.FromString(
        fatal_for(hh.request(_xr()).SerializeToString(), "past its deadline")
    )
    assert _kept(rsp) == KEPT


@pytest.mark.parametrize(
    "conditions",
    [None, "a string", 5, {"type": "ReplicasReady"}, [], [[{"type": "X", "status": "True"}]]],
)
def test_malformed_observed_conditions_are_skipped_never_raise(conditions: Any) -> None:
    rsp = fnv1.RunFunctionResponse()
    xr = hh.request(_xr(conditions)).observed.composite.resource
    codec.keep_conditions(rsp, xr)
    assert not rsp.conditions
    codec.keep_conditions_of(rsp, b"\xff\xff garbage")
    assert not rsp.conditions


def _set(xr: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node = xr
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


SPEC_CONDITION_CASES = [
    # Found by review 15d: with every owned condition kept as it was, a ModelBackfill
    # whose spec turned invalid kept SpecValid=True "the spec is valid" beside the fatal.
    (
        "modelbackfill",
        ("spec", "idleFor"),
        "fifteen minutes",
        "SpecValid",
        {"type": "Backfilling", "status": "False", "reason": "NotIdle", "message": "idle"},
        "spec.idleFor",
    ),
    # Found by review 19b: an InferenceClass kept DevicesValid=True describing the
    # devices before an edit the XRD admits and the function refuses.
    (
        "inferenceclass",
        ("spec", "devices", 0, "attributes", "cudaComputeCapability"),
        {"version": "nine"},
        "DevicesValid",
        None,
        "spec.devices[0].attributes.cudaComputeCapability.version",
    ),
]


@pytest.mark.parametrize(
    ("example", "path", "value", "spec_type", "other", "field"),
    SPEC_CONDITION_CASES,
    ids=[c[0] for c in SPEC_CONDITION_CASES],
)
def test_an_invalid_spec_says_so_in_the_kinds_spec_condition(
    example: str,
    path: tuple[Any, ...],
    value: Any,
    spec_type: str,
    other: dict[str, str] | None,
    field: str,
) -> None:
    """A spec error sets the kind's spec condition False, reason InvalidSpec, naming the
    field; its other conditions are kept as they were."""
    (xr,) = load_yaml([str(ROOT / "examples" / example / "xr.yaml")])
    xr = copy.deepcopy(xr)
    _set(xr, path, value)
    valid = {"type": spec_type, "status": "True", "reason": "Valid", "message": "valid"}
    xr["status"] = {"conditions": [valid] + ([other] if other else [])}
    rsp = FunctionRunner(settings=hh.default_settings(), clock=hh.Clock()).run(hh.request(xr))
    (msg,) = hh.fatal(rsp)
    assert field in msg, msg
    got = _kept(rsp)
    assert got[spec_type]["status"] == "False" and got[spec_type]["reason"] == "InvalidSpec"
    assert field in got[spec_type]["message"], got
    if other:
        assert got[other["type"]] == {k: other[k] for k in ("status", "reason", "message")}


def test_every_condition_a_kind_writes_is_one_it_declares() -> None:
    """What a fatal response keeps is the kind's ``CONDITION_TYPES``: every condition
    type of every golden response (every kind, every lifecycle step) is declared there,
    so no condition of the function's own is ever left to Crossplane's reset."""
    from pathlib import Path

    import yaml

    from function import API_VERSION
    from function.composers import condition_types

    seen: dict[str, set[str]] = {}
    for want in sorted(Path(ROOT / "tests" / "golden").glob("*/*/want.yaml")):
        doc = yaml.safe_load(want.read_text())
        (xr,) = load_yaml([str(want.parent / "xr.yaml")])
        for c in doc.get("conditions") or []:
            seen.setdefault(xr["kind"], set()).add(c["type"])
    assert len(seen) >= 8, seen
    for kind, types in seen.items():
        assert types <= condition_types(API_VERSION, kind), (kind, types)
