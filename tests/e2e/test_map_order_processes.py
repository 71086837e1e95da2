"""Review 19b F2 through the real engine: the same world gets the same status whichever
function process answers (adapted from the reviewer's repros).

upb seeds its map hash per process, so before the fix each fresh process named a
different "first" wrong attribute of an InferenceClass (the InferenceCluster's
``PoolsResolved``/``ClassInvalid`` message) or refused AppArmor annotation of a
backfill's CronJob (``Blocked``/``InvalidTemplate``). Each test reconciles three
times, each against a freshly started ``python -m function`` process, feeding the
status (and observed children) back. ``tests/test_map_order.py`` is the fast,
deterministic version of the same property.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from function.render import load_yaml, start_function
from tests.e2e.lifecycle import XR
from tests.e2e.test_lifecycles import Backfill
from tests.support import engine, world
from tests.support.modelplane_examples_paths import KIND_LOCAL_CPU

PROCESSES = 3
BAD = {k: {"version": f"v-{k}"} for k in ("alpha", "bravo", "charlie", "delta", "echo", "golf")}
APPARMOR = "container.apparmor.security.beta.kubernetes.io/"


@contextmanager
def _fresh(xp: Any) -> Iterator[Callable[..., Any]]:
    """A render through a newly started function process (stopped on exit)."""
    proc, address = start_function(workers=1)
    try:
        yield lambda xr, **kw: engine.render(xp, address, xr, **kw)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_pools_resolved_is_the_same_whichever_process_answers(xp: Any) -> None:
    docs = load_yaml([str(KIND_LOCAL_CPU)])
    (cluster,) = [copy.deepcopy(d) for d in docs if d["kind"] == "InferenceCluster"]
    classes = copy.deepcopy([d for d in docs if d["kind"] == "InferenceClass"])
    cluster.pop("status", None)
    classes[0]["spec"]["devices"][0].setdefault("attributes", {}).update(BAD)
    messages = []
    state: tuple[Any, Any] | None = None
    for _ in range(PROCESSES):
        with _fresh(xp) as render:
            ic = XR(render, copy.deepcopy(cluster), classes)
            if state is not None:  # the world as the previous process left it
                ic.xr["status"] = copy.deepcopy(state[0])
                ic.observed = copy.deepcopy(state[1])
            out = ic.reconcile()
            if "provider-config" not in ic.observed:
                ic.observed["provider-config"] = world.observed_provider_config(
                    out.composed["provider-config"]
                )
            conds = {c["type"]: c for c in ic.xr["status"]["conditions"]}
            pr = conds["PoolsResolved"]
            messages.append((pr["reason"], pr["message"]))
            state = (ic.xr["status"], ic.observed)
    assert all(r == "ClassInvalid" for r, _ in messages), messages
    assert len({m for _, m in messages}) == 1, messages
    assert "attributes.alpha.version" in messages[0][1], messages[0]


def test_backfill_blocked_message_is_the_same_whichever_process_answers(xp: Any) -> None:
    msgs = []
    state = None
    for _ in range(PROCESSES):
        with _fresh(xp) as render:
            b = Backfill(render)
            cj = next(d for d in b.bf.required if d["kind"] == "CronJob")
            cj["metadata"].update(uid="11111111-2222-3333-4444-555555555555", resourceVersion="9")
            t = cj["spec"]["jobTemplate"]["spec"]["template"]
            t.setdefault("metadata", {}).setdefault("annotations", {}).update(
                {f"{APPARMOR}{n}": "unconfined" for n in ("e", "b", "d", "a", "c")}
            )
            if state is not None:
                b.bf.xr["status"] = copy.deepcopy(state)
            b.bf.reconcile()
            st = b.bf.status
            msgs.append((st["phase"], st["reason"], st["message"]))
            state = st
    assert all(m[:2] == ("Blocked", "InvalidTemplate") for m in msgs), msgs
    assert len({m[2] for m in msgs}) == 1, msgs
    assert f"annotations[{APPARMOR}a]" in msgs[0][2], msgs[0]
