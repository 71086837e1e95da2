"""The slow lane's bookkeeping when processes die and come back (``function.edge.pool``).

The acceptor's state is driven directly, with stand-in processes whose CPU affinity is
recorded instead of set (no process is spawned): what ``tests/test_serving.py`` cannot
arrange on demand through a real server. The rule under test: one live regular process
always stays outside the lane; a slow call that found no room goes in once there is
some; a process that is dying or being replaced does not count as outside.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from function.edge import pool as P

LANE = (1,)
ALL = (0, 1)


class _Proc:
    def __init__(self, pid: int) -> None:
        self.pid, self.exitcode = pid, None

    def is_alive(self) -> bool:
        return False


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


@pytest.fixture
def affinity(monkeypatch: pytest.MonkeyPatch) -> dict[int, tuple[int, ...]]:
    """The CPU affinity the pool set for each stand-in pid."""
    got: dict[int, tuple[int, ...]] = {}
    monkeypatch.setattr(
        P.os, "sched_setaffinity", lambda pid, cpus: got.__setitem__(pid, tuple(cpus))
    )
    return got


def _retiring(slot: Any, kill: bool) -> None:
    slot.retiring = True  # what _replace_soon does first (the rest spawns a process)


def _nothing() -> None:
    pass


def _pool(processes: int) -> P.ComputePool:
    p = P.ComputePool(processes, lane=LANE)
    p._cpus = ALL
    for s in p._slots:
        s.proc, s.retiring = _Proc(100 + s.index), False
        s.transport = _Transport()  # type: ignore[assignment]
    p._replace_soon = _retiring  # type: ignore[method-assign]
    p._dispatch = _nothing  # type: ignore[method-assign]
    return p


def _busy(p: P.ComputePool, *slots: Any) -> None:
    loop = asyncio.new_event_loop()
    try:
        for s in slots:
            s.job = P._Job(b"", {}, 10.0, loop.create_future(), s.index, b"", False)
    finally:
        loop.close()


def _go(p: P.ComputePool, s: Any) -> None:
    """Slot ``s``'s call has composed SLOW_CALL_SECONDS: its lane timer fires."""
    assert s.job is not None
    p._to_lane(s, s.job)


def _x_in_lane_y_waiting() -> tuple[P.ComputePool, Any, Any]:
    """Two regular processes, both composing slow calls: x's went in, y's found no room."""
    p = _pool(2)
    x, y = p._slots[0], p._slots[1]
    _busy(p, x, y)
    _go(p, x)
    _go(p, y)
    return p, x, y


def test_a_slow_call_without_room_goes_in_when_the_lane_has_room(affinity: Any) -> None:
    p, x, y = _x_in_lane_y_waiting()
    assert (x.in_lane, y.in_lane, y.slow) == (True, False, True)
    p._finish(x)  # x answers
    assert y.in_lane and affinity[y.proc.pid] == LANE
    assert affinity[x.proc.pid] == ALL


def test_a_dying_process_in_the_lane_does_not_count_as_outside(affinity: Any) -> None:
    p, x, y = _x_in_lane_y_waiting()
    p._lost(x)  # x's process died while its call was in the lane
    assert x.retiring and not y.in_lane, "y is the only live process: it stays outside"
    # The replacement is up (what _attach does): y goes in.
    x.proc, x.retiring = _Proc(200), False
    p._make_room()
    assert y.in_lane and affinity[y.proc.pid] == LANE


def test_when_the_process_outside_dies_one_in_the_lane_is_let_out(affinity: Any) -> None:
    p = _pool(2)
    x, y = p._slots[0], p._slots[1]
    _busy(p, x, y)
    _go(p, y)  # y confined; x outside, composing a short call
    p._lost(x)
    assert not y.in_lane and y.slow and affinity[y.proc.pid] == ALL
    x.proc, x.retiring = _Proc(201), False
    p._make_room()
    assert y.in_lane


def test_the_large_call_process_never_counts_as_outside(affinity: Any) -> None:
    p = _pool(1)  # one regular process and the large-call one
    (x,) = [s for s in p._slots if not s.large]
    _busy(p, x)
    _go(p, x)
    assert not x.in_lane and x.slow, "the only regular process stays outside"
