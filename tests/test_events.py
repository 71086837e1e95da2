"""Events say what changed, once (function.core.events)."""

from __future__ import annotations

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.core import events
from function.core.outcome import Outcome, Result
from function.edge.runner import FunctionRunner
from tests.support.harness import request, xr


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, "Pending", [Result("Normal", "m", "R")]),
        ("", "Pending", [Result("Normal", "m", "R")]),
        ("Pending", "Hydrating", [Result("Normal", "m", "R")]),
        ("Hydrating", "Hydrating", []),
        ("Hydrating", "Failed", [Result("Warning", "m", "R")]),
        ("Evaluating", "Blocked", [Result("Warning", "m", "R")]),
        ("Failed", "Failed", []),
    ],
)
def test_transition_adds_one_event_only_on_change(old, new, expected):
    out = Outcome()
    added = events.transition(out, old, new, "m", reason="R")
    assert out.results == expected
    assert added is bool(expected)


def test_custom_warning_phases():
    out = Outcome()
    events.transition(out, "Serving", "Degraded", "m", warning_phases={"Degraded"})
    assert out.results == [Result("Warning", "m", None)]


def test_changed_for_any_recorded_value():
    out = Outcome()
    assert not events.changed(out, "gpu-a", "gpu-a", "replica moved")
    assert events.changed(out, "gpu-a", "gpu-b", "replica moved from gpu-a to gpu-b",
                          reason="ReplicaMoved")  # fmt: skip
    assert out.results == [Result("Normal", "replica moved from gpu-a to gpu-b", "ReplicaMoved")]


def test_empty_message_is_refused():
    with pytest.raises(ValueError):
        events.transition(Outcome(), None, "Ready", "")


def test_once_across_calls_when_status_records_the_phase(monkeypatch):
    """A composer using transition() emits the event in the call that records the
    phase, and not in the next call, which sees the phase in status."""
    from function import composers

    def compose(inputs):
        out = Outcome()
        old = inputs.status("phase")
        out.status["phase"] = "Ready"
        events.transition(out, old, "Ready", "hydration finished", reason="HydrationReady")
        return out

    monkeypatch.setitem(composers._loaded, "ModelCacheHydration", compose)
    runner = FunctionRunner()
    first = runner.run(request(xr("ModelCacheHydration", "h", {}, status={"phase": "Hydrating"})))
    second = runner.run(request(xr("ModelCacheHydration", "h", {}, status={"phase": "Ready"})))
    assert [(r.severity, r.message, r.reason, r.target) for r in first.results] == [
        (fnv1.SEVERITY_NORMAL, "hydration finished", "HydrationReady", fnv1.TARGET_COMPOSITE)
    ]
    assert list(second.results) == []
