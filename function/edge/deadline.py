"""A compute deadline for one call, enforced inside the process that composes it.

:func:`armed` sets a real-time interval timer (``setitimer(ITIMER_REAL)``); when it
fires, ``SIGALRM``'s handler raises :class:`CallDeadline` in the main thread, wherever
the composer is (Python code, including a CEL evaluation). :class:`CallDeadline`
derives from ``BaseException`` so that a composer's ``except Exception`` (a CEL
evaluation error "does not match") cannot swallow it; the runner turns it into a fatal
result that names the XR and, for a device selector, the selector.

Only the main thread of a process can receive the signal: elsewhere (an in-process
server's worker thread, tests) :func:`armed` does nothing and the compute process pool
(``function.edge.pool``) is the only bound, by replacing a process past its deadline.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class CallDeadline(BaseException):
    """The call ran past its compute deadline (``seconds``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"compute deadline of {seconds:g} s passed")
        self.seconds = seconds


def can_arm() -> bool:
    """Whether :func:`armed` can enforce a deadline here (the main thread, POSIX)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def armed(seconds: float | None) -> Iterator[None]:
    """Raise :class:`CallDeadline` in the body once ``seconds`` (wall clock) have passed.

    ``None`` or a non-positive value, or a thread other than the main one: no deadline.
    """
    if seconds is None or seconds <= 0 or not can_arm():
        yield
        return

    def fire(_signum: int, _frame: Any) -> None:
        raise CallDeadline(seconds)

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
