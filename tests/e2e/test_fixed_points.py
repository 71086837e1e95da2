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
from typing import Any

from function.core.timeutil import format_time
from function.render import load_yaml
from tests.e2e.lifecycle import XR, Hydration
from tests.support.crossplane import ROOT

EXAMPLES = ROOT / "examples"


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
