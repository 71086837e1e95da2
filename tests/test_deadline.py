"""The compute deadline (``function.edge.deadline``) still ends a call whose
``CallDeadline`` CPython lost.

Found by CI on 6f7af7fd (``test_a_deadline_on_compose_sets_its_span_to_error``, about
one run in 25): the timer's ``SIGALRM`` handler ran inside lark's ``Token.__eq__``
during ``getattr(evaluator, token)``; CPython clears an error raised while it looks an
attribute up in a type's dictionary, so the runaway selector evaluated on for 37 s, half
a step lost, to a wrong reason (``no operator + for an int and list``) instead of the
deadline's fatal result.

These run in the test process's main thread, which the signal reaches.
"""

from __future__ import annotations

import time

import pytest

from function.edge.deadline import CallDeadline, armed, can_arm, check
from function.scheduling import cel_library

pytestmark = pytest.mark.skipif(not can_arm(), reason="SIGALRM reaches the main thread only")


class _SlowKey(str):
    """An attribute name whose comparison runs Python code long enough for the timer to
    fire inside it, as lark's ``Token`` does: the type lookup compares it with the
    class's own key of the same text and hash."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        time.sleep(0.5)  # the signal's handler raises here
        return str.__eq__(self, other)


class _Holder:
    name = "found"


def _lose_the_deadline() -> str:
    """Look an attribute up the way that loses the deadline's exception."""
    return getattr(_Holder(), _SlowKey("name"), "lost")


def test_cpython_loses_an_exception_raised_in_a_type_lookup() -> None:
    """The premise: without the remembered deadline, the body would return normally."""
    with pytest.raises(CallDeadline), armed(0.05):
        _lose_the_deadline()  # the exception raised in __eq__ is cleared here
        # ... and the body goes on; only leaving the block raises it again
        returned = True
    assert returned


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(lambda: None, id="body returns"),
        pytest.param(check, id="check"),
        pytest.param(lambda: (cel_library.begin(10**9), cel_library.charge(1)), id="CEL step"),
    ],
)
def test_a_lost_deadline_is_raised_again(after) -> None:
    with pytest.raises(CallDeadline) as e, armed(0.05):
        _lose_the_deadline()
        after()
        time.sleep(0)  # nothing else may run past the deadline
    assert e.value.seconds == 0.05


def test_a_deadline_that_did_not_fire_is_forgotten() -> None:
    """Nothing is left behind: a later block, or a check outside any block, is clean."""
    with pytest.raises(CallDeadline), armed(0.05):
        _lose_the_deadline()
    check()  # outside the block: nothing to raise
    with armed(5):
        check()
        cel_library.begin(10)
        cel_library.charge(1)


def test_a_deadline_firing_as_the_block_ends_leaves_nothing_behind(monkeypatch) -> None:
    """The timer fires after the body returned and before it is disarmed: the handler is
    still restored and the deadline forgotten, so a CEL step after the block (a call
    without a deadline) does not raise it again."""
    import signal

    from function.edge import deadline

    real = signal.setitimer
    fired = []

    def setitimer(which: int, seconds: float, *rest: float) -> object:
        if seconds == 0 and not fired:  # as if the handler ran just before disarming
            real(which, 0)  # a timer that fired is no longer armed
            fired.append(True)
            deadline._fired = 0.05
            raise CallDeadline(0.05)
        return real(which, seconds, *rest)

    monkeypatch.setattr(deadline.signal, "setitimer", setitimer)
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(CallDeadline), armed(5):
        pass
    assert fired and signal.getsignal(signal.SIGALRM) is before
    check()
    cel_library.begin(10)
    cel_library.charge(1)
