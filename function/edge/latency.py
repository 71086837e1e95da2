"""How the serving processes ask the Linux scheduler for short waits.

Linux's EEVDF scheduler (6.6+) lets a running task finish its time slice (the base
slice: 0.7 ms times 1 + log2 of the CPU count, 1.4 ms on 2 CPUs) before a task that
wakes up runs on its CPU, unless
the woken task asked for a shorter slice than the running one: since 6.12 a task may set
its own slice (``sched_setattr(2)``, ``sched_runtime`` of a ``SCHED_OTHER`` task,
0.1-100 ms; no privilege needed), and a shorter slice preempts a longer one on wake-up
(the ``PREEMPT_SHORT`` scheduler feature). A slice changes when a task runs, not how much
CPU it gets: its share is still set by its nice value.

So the acceptor and the compute processes, whose work for a call is a fraction of a
millisecond at a time, ask for :data:`CALL_PATH_SLICE_SECONDS`; the large-call process
asks for the default again (:func:`request_slice` with None), and a compute process
whose call runs long asks for a long slice while it does (``function.edge.pool``), so a
small call's next step preempts them instead of waiting out their slice. Threads and
child processes inherit the slice of the thread that creates them. Python has no
binding for ``sched_setattr``; it is called through the C library, and on a kernel or
platform without it nothing changes.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

CALL_PATH_SLICE_SECONDS = 0.0005
"""The slice the acceptor and the compute processes ask for (seconds)."""

_SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}


class _SchedAttr(ctypes.Structure):
    """``struct sched_attr`` (include/uapi/linux/sched/types.h), version 1 (56 bytes)."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
        ("sched_util_min", ctypes.c_uint32),
        ("sched_util_max", ctypes.c_uint32),
    ]


def request_slice(seconds: float | None) -> bool:
    """Ask for a time slice of ``seconds`` (None: the scheduler's default) for every thread
    of this process, keeping its policy (``SCHED_OTHER``) and nice value.

    Returns:
        True when every thread took it; False where it is not supported (not Linux, a
        policy other than ``SCHED_OTHER``, a kernel that refuses it). Never raises.
    """
    number = _SYS_SCHED_SETATTR.get(os.uname().machine) if sys.platform == "linux" else None
    if number is None or os.sched_getscheduler(0) != os.SCHED_OTHER:
        return False
    libc = _libc()
    runtime = 0 if seconds is None else int(seconds * 1e9)
    ok = True
    for tid in _threads():
        try:
            nice = os.getpriority(os.PRIO_PROCESS, tid)
        except OSError:  # the thread ended meanwhile
            continue
        attr = _SchedAttr(
            size=ctypes.sizeof(_SchedAttr),
            sched_policy=os.SCHED_OTHER,
            sched_nice=nice,
            sched_runtime=runtime,
        )
        ok = libc.syscall(number, tid, ctypes.byref(attr), 0) == 0 and ok
    return ok


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library's symbols, through the process's own (no library search: this runs
    in a signal handler too)."""
    return ctypes.CDLL(None, use_errno=True)


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")]
    except OSError:
        return [os.getpid()]
