"""A compute deadline for one call, enforced inside the process that composes it.

:func:`armed` sets a real-time interval timer (``setitimer(ITIMER_REAL)``); when it
fires, ``SIGALRM``'s handler raises :class:`CallDeadline` in the main thread, wherever
the composer is (Python code, including a CEL evaluation). :class:`CallDeadline`
derives from ``BaseException`` so that a composer's ``except Exception`` (a CEL
evaluation error "does not match") cannot swallow it; the runner turns it into a fatal
result that names the XR and, for a device selector, the selector.

The exception can be lost: CPython clears an error raised while it looks an attribute
up in a type's dictionary (``getattr(evaluator, token)``, where lark's ``Token.__eq__``
runs Python code, so the signal's handler may run there), and the evaluation then goes
on with a half-done step, for the whole run of a runaway selector, to a wrong result.
So a deadline that fired is remembered until the armed block ends, and nothing
computed after it is trusted: :func:`check` raises it again (the CEL evaluation's step
counter calls it at every step, a selector's evaluation once it ends, and every memo
before it keeps a value, so no half-done result outlives the call), and a body that
leaves the block after the deadline fired, returning or raising another exception (a
wrong result turned into an invalid-input error), raises :class:`CallDeadline`.

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


# The seconds of the armed deadline once it has fired (None: not fired, or not armed).
_fired: float | None = None


def check() -> None:
    """Raise :class:`CallDeadline` again if the armed deadline has fired (cheap: one
    global read; called at every step of a CEL evaluation)."""
    if _fired is not None:
        raise CallDeadline(_fired)


def can_arm() -> bool:
    """Whether :func:`armed` can enforce a deadline here (the main thread, POSIX)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def armed(seconds: float | None) -> Iterator[None]:
    """Raise :class:`CallDeadline` in the body once ``seconds`` (wall clock) have passed.

    ``None`` or a non-positive value, or a thread other than the main one: no deadline.
    A body that returns, or raises another exception, after the deadline fired (its
    exception was lost, see the module docstring) raises :class:`CallDeadline` on
    leaving the block (from that exception).
    """
    global _fired
    if seconds is None or seconds <= 0 or not can_arm():
        yield
        return

    def fire(_signum: int, _frame: Any) -> None:
        global _fired
        _fired = seconds
        raise CallDeadline(seconds)

    previous = signal.signal(signal.SIGALRM, fire)
    _fired = None
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        try:
            yield
        except Exception as e:
            if _fired is not None:
                raise CallDeadline(_fired) from e
            raise
        check()
    finally:
        # Nested: the timer may fire before it is disarmed, and its exception must not
        # skip restoring the handler and forgetting the deadline (a stale one would
        # make the next CEL step outside any armed block raise).
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.signal(signal.SIGALRM, previous)
            _fired = None
