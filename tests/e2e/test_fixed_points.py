"""A status is a fixed point in a world that does not change, through Crossplane's engine.

Crossplane v2.4 enqueues an XR on every update of it (the XR controller's watch has no
predicate) and writes its status whenever the desired one differs from the one it read.
A status or condition message that moves with the wall clock therefore makes every
reconcile write, and every write the next reconcile: a reconcile loop (found by review
15b: a Failed hydration counting the seconds since ``pendingSince``, a waiting backfill
counting its idle seconds or re-stamping ``notIdleBefore``).

Each test brings an XR to a state, reconciles it, then reconciles it again a second
and a half later (whole-second timestamps: another second on the function's wall clock)
with nothing else changed: the second reconcile must write exactly the status the first
one wrote, Crossplane's conditions included.
"""

from __future__ import annotations

import copy
import datetime
import time
from collections.abc import Callable
from typing import Any

from function.core.timeutil import format_time
from function.render import load_yaml
from tests.e2e.lifecycle import XR, Hydration
from tests.support.crossplane import ROOT
from tests.support.table import Case, table

EXAMPLES = ROOT / "examples"
FOREGROUND = "modelplane.ai/last-foreground-request"


def _ago(seconds: int) -> str:
    return format_time(datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds))


def _unchanged(x: XR) -> tuple[dict[str, Any], dict[str, Any]]:
    """Reconcile, wait for the wall clock to move a second, reconcile again: both
    statuses Crossplane wrote."""
    x.reconcile()
    first = copy.deepcopy(x.status)
    time.sleep(1.5)
    x.reconcile()
    return first, copy.deepcopy(x.status)


def test_a_hydration_failed_on_an_unbound_pvc_writes_the_same_status_again(render):
    (xr,) = load_yaml([str(EXAMPLES / "modelcachehydration" / "xr.yaml")])
    h = Hydration(render, xr, load_yaml([str(EXAMPLES / "modelcachehydration" / "required")]))
    h.reconcile()
    h.world(pvc="Pending")  # the PVC never binds
    h.xr["status"]["pendingSince"] = _ago(1200)  # the wait began 20 minutes ago
    first, second = _unchanged(h)
    assert (first["phase"], first["reason"]) == ("Failed", "PVCBindTimeout"), first
    assert second == first


def _model_missing(required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in required if d["kind"] != "ModelDeployment"]


def _model_not_ready(required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for doc in required:
        if doc["kind"] == "ModelDeployment":
            for c in doc["status"]["conditions"]:
                if c["type"] == "Ready":
                    c["status"], c["reason"] = "False", "Creating"
    return required


def _recent_foreground(required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for doc in required:
        if doc["kind"] == "ModelDeployment":  # 30 s ago; idleFor is 15m
            doc["metadata"]["annotations"][FOREGROUND] = _ago(30)
    return required


def _no_signal(required: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for doc in required:
        if doc["kind"] == "ModelDeployment":
            doc["metadata"]["annotations"].pop(FOREGROUND)
    return required


Required = list[dict[str, Any]]
BACKFILL_STATES: list[Case[Callable[[Required], Required], str]] = [
    Case(
        "not-idle",
        "the message counted the idle seconds (review 15b): it names the instants",
        _recent_foreground,
        "NotIdle",
    ),
    Case(
        "model-missing",
        "status.notIdleBefore was set to now on every reconcile (review 15b): it records "
        "when the wait began",
        _model_missing,
        "ModelNotFound",
    ),
    Case(
        "model-not-ready",
        "as model-missing, for a ModelDeployment that is not Ready",
        _model_not_ready,
        "ModelNotReady",
    ),
    Case("no-signal", "no foreground annotation", _no_signal, "ForegroundSignalUnknown"),
]


@table(BACKFILL_STATES)
def test_a_waiting_backfill_writes_the_same_status_again(render, case: Case) -> None:
    (xr,) = load_yaml([str(EXAMPLES / "modelbackfill" / "xr.yaml")])
    required = case.inputs(load_yaml([str(EXAMPLES / "modelbackfill" / "required")]))
    b = XR(render, xr, required)
    b.reconcile()
    first, second = _unchanged(b)
    assert (first["phase"], first["reason"]) == ("WaitingForIdle", case.want), first
    assert second == first
