"""The compute deadline (``function.core.deadline``) still ends a call whose
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

import os
import signal
import time
import uuid

import pytest
from celpy import celtypes

from function.core.deadline import CallDeadline, armed, can_arm, check
from function.core.memo import memo
from function.scheduling import cel_library
from function.scheduling import devices as devices_mod

# Longer than any test here runs: the deadline fires only when a test sends its signal.
DEADLINE = 30.0

pytestmark = pytest.mark.skipif(not can_arm(), reason="SIGALRM reaches the main thread only")


class _SlowKey(str):
    """An attribute name whose comparison runs Python code, as lark's ``Token`` does (the
    type lookup compares it with the class's own key of the same text and hash), and the
    deadline's signal arrives while it runs: sent here, not timed, so the handler runs
    inside it however loaded the machine is."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        os.kill(os.getpid(), signal.SIGALRM)  # the deadline's timer, as if it fired now
        time.sleep(0.01)  # the signal's handler raises here
        return str.__eq__(self, other)


class _Holder:
    name = "found"


def _lose_the_deadline() -> str:
    """Look an attribute up the way that loses the deadline's exception."""
    return getattr(_Holder(), _SlowKey("name"), "lost")


def test_cpython_loses_an_exception_raised_in_a_type_lookup() -> None:
    """The premise: without the remembered deadline, the body would return normally."""
    with pytest.raises(CallDeadline), armed(DEADLINE):
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
    with pytest.raises(CallDeadline) as e, armed(DEADLINE):
        _lose_the_deadline()
        after()
        time.sleep(0)  # nothing else may run past the deadline
    assert e.value.seconds == DEADLINE


def test_a_deadline_that_did_not_fire_is_forgotten() -> None:
    """Nothing is left behind: a later block, or a check outside any block, is clean."""
    with pytest.raises(CallDeadline), armed(DEADLINE):
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

    from function.core import deadline

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


# ---- review 18a F1/F1b: lost in a selector's last step, then an invalid-input error ----

GPU = devices_mod.Device.from_status(
    {"name": "gpu-0", "driver": "gpu.nvidia.com", "attributes": {"model": {"string": "H100"}}}
)


class SpecLikeError(Exception):
    """An ordinary error the body raises after the deadline was lost (the wrong result
    of the half-done step, turned into an invalid-input error)."""


def test_an_error_raised_after_a_lost_deadline_is_the_deadline() -> None:
    with pytest.raises(CallDeadline) as e, armed(DEADLINE):
        _lose_the_deadline()
        raise SpecLikeError("fails on device gpu: no operator >= for an int and list")
    assert isinstance(e.value.__cause__, SpecLikeError)


def test_nothing_computed_after_a_lost_deadline_is_memoized() -> None:
    calls = []

    @memo(16)
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    with pytest.raises(CallDeadline), armed(DEADLINE):
        _lose_the_deadline()
        square(3)
    assert square(3) == 9 and calls == [3, 3], "the value computed past the deadline was kept"


def test_a_deadline_lost_in_a_selectors_last_step_names_it_and_is_not_memoized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The evaluation's last step loses the deadline and ends with a wrong outcome (no
    further step charges the budget): the deadline is raised before the outcome is
    memoized, while the selector being evaluated is still known (the runner names it)."""
    expression = f'device.attributes["gpu.nvidia.com"].model == "H100" && "{uuid.uuid4()}" != ""'
    real = cel_library.CountingRunner.evaluate
    seen: list[object] = []

    def last_step_loses_it(self, context):
        _lose_the_deadline()
        return celtypes.BoolType(False)  # the wrong outcome of the half-done step

    monkeypatch.setattr(cel_library.CountingRunner, "evaluate", last_step_loses_it)
    with pytest.raises(CallDeadline), armed(DEADLINE):
        try:
            devices_mod.selector_matches(expression, GPU)
        finally:
            seen.append(devices_mod.in_progress())
    assert seen[0] is not None and seen[0][:2] == ("evaluating", devices_mod.normalize(expression))
    monkeypatch.setattr(cel_library.CountingRunner, "evaluate", real)
    assert devices_mod.selector_matches(expression, GPU) is True  # evaluated again, right
