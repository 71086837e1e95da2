"""The slow lane's bookkeeping when processes die and come back (``function.edge.pool``).

The acceptor's state is driven directly, with stand-in processes whose CPU affinity is
recorded instead of set (no process is spawned): what ``tests/test_serving.py`` cannot
arrange on demand through a real server. The rules under test: one live regular process
always stays outside the lane; a slow call that found no room goes in once there is
some; a process that is dying or being replaced does not count as outside; while slow
calls compose, every other process and the acceptor are kept off the CPUs they compose
on, and get every CPU back when none does.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from function.edge import pool as P

LANE = (1,)
ALL = (0, 1)
OUTSIDE = (0,)
# Stand-in pids above Linux's largest (4,194,304): no /proc entry, no real process.
PID = 10_000_000


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
    monkeypatch.setattr(P.os, "sched_getaffinity", lambda pid: set(got.get(pid, ALL)))
    return got


def _retiring(slot: Any, kill: bool, **_: Any) -> None:
    slot.retiring = True  # what _replace_soon does first (the rest spawns a process)


def _nothing() -> None:
    pass


def _pool(processes: int) -> P.ComputePool:
    p = P.ComputePool(processes, lane=LANE)
    p._cpus = ALL
    for s in p._slots:
        s.proc, s.retiring = _Proc(PID + s.index), False
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
    assert affinity[x.proc.pid] == OUTSIDE, "x is kept off the CPU y composes on"
    p._finish(y)
    p._place()  # what _dispatch does after every answer
    assert affinity[x.proc.pid] == affinity[y.proc.pid] == affinity[os.getpid()] == ALL


def test_a_dying_process_in_the_lane_does_not_count_as_outside(affinity: Any) -> None:
    p, x, y = _x_in_lane_y_waiting()
    p._lost(x)  # x's process died while its call was in the lane
    assert x.retiring and not y.in_lane, "y is the only live process: it stays outside"
    # The replacement is up (what _attach does): y goes in.
    x.proc, x.retiring = _Proc(PID + 200), False
    p._make_room()
    assert y.in_lane and affinity[y.proc.pid] == LANE
    assert affinity[x.proc.pid] == OUTSIDE, "the replacement is kept off the lane's CPU too"


def test_when_the_process_outside_dies_one_in_the_lane_is_let_out(affinity: Any) -> None:
    p = _pool(2)
    x, y = p._slots[0], p._slots[1]
    _busy(p, x, y)
    _go(p, y)  # y confined; x outside, composing a short call
    p._lost(x)
    assert not y.in_lane and y.slow and affinity[y.proc.pid] == ALL
    x.proc, x.retiring = _Proc(PID + 201), False
    p._make_room()
    assert y.in_lane


def test_the_large_call_process_never_counts_as_outside(affinity: Any) -> None:
    p = _pool(1)  # one regular process and the large-call one
    (x,) = [s for s in p._slots if not s.large]
    _busy(p, x)
    _go(p, x)
    assert not x.in_lane and x.slow, "the only regular process stays outside"


def test_slow_calls_keep_everything_else_off_their_cpus(affinity: Any) -> None:
    """A slow call in the lane: the acceptor (every thread) and the other regular process
    run on the CPU outside it; when it answers, every process may run anywhere again."""
    p = _pool(2)
    x, y = p._slots[0], p._slots[1]
    _busy(p, x)
    p._place()  # a short call composing: nothing is touched
    assert affinity == {}
    _go(p, x)
    assert affinity[x.proc.pid] == LANE
    assert affinity[y.proc.pid] == affinity[os.getpid()] == OUTSIDE
    assert all(affinity[int(t)] == OUTSIDE for t in os.listdir("/proc/self/task"))
    p._finish(x)
    p._place()
    assert affinity[x.proc.pid] == affinity[y.proc.pid] == affinity[os.getpid()] == ALL
    affinity.clear()
    p._place()  # nothing changed since: no system call
    assert affinity == {}
    # A process that came up meanwhile gets every CPU if it inherited a narrowed mask
    # from the thread that spawned it while a slow call composed, and is left alone if not.
    y.proc = _Proc(PID + 300)
    affinity[y.proc.pid] = OUTSIDE
    x.proc = _Proc(PID + 301)
    p._place()
    assert affinity[y.proc.pid] == ALL
    assert x.proc.pid not in affinity
    # A process being replaced is left alone (its pid may be reused once it is reaped).
    _busy(p, x)
    _go(p, x)
    affinity.clear()
    y.retiring = True
    p._place()
    assert y.proc.pid not in affinity and affinity[x.proc.pid] == LANE


def test_a_large_call_counts_as_slow_from_its_hand_over(affinity: Any) -> None:
    p = _pool(2)
    big = next(s for s in p._slots if s.large)
    x = p._slots[0]
    _busy(p, big)
    p._place()
    assert affinity[big.proc.pid] == LANE
    assert affinity[x.proc.pid] == affinity[os.getpid()] == OUTSIDE
    p._finish(big)
    p._place()
    assert affinity[x.proc.pid] == affinity[os.getpid()] == ALL
    assert affinity[big.proc.pid] == LANE, "the idle large-call process was not moved"


@pytest.mark.parametrize(
    ("slow", "busy", "rest"),
    [(1, (1,), (0, 2, 3)), (2, (1, 2), (0, 3)), (3, (1, 2, 3), (0,))],
)
def test_slow_calls_take_as_many_cpus_of_a_wider_lane_as_they_compose_on(
    affinity: Any, slow: int, busy: tuple[int, ...], rest: tuple[int, ...]
) -> None:
    """A lane of 3 CPUs on 4: ``slow`` calls compose on that many of its CPUs (a process
    composes on one thread); the others keep the rest, lane CPUs included."""
    p = P.ComputePool(4, lane=(1, 2, 3))
    p._cpus = (0, 1, 2, 3)
    for s in p._slots:
        s.proc, s.retiring = _Proc(PID + s.index), False
        s.transport = _Transport()  # type: ignore[assignment]
    p._dispatch = _nothing  # type: ignore[method-assign]
    hogs = p._slots[:slow]
    _busy(p, *hogs)
    for s in hogs:
        _go(p, s)
    assert [affinity[s.proc.pid] for s in hogs] == [busy] * slow
    others = [s for s in p._slots if s not in hogs and not s.large]
    assert [affinity[s.proc.pid] for s in others] == [rest] * len(others)
    assert affinity[os.getpid()] == rest
