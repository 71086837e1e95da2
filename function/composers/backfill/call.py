"""One ModelBackfill call: the request, the outcome being built and the status being
written, with the small helpers every decision uses."""

from __future__ import annotations

import datetime

from function.api.modelbackfill import Parsed, definition_hash, parse
from function.composers.backfill.status import WAITING, Status
from function.core import structs
from function.core.inputs import Inputs
from function.core.memo import memo
from function.core.outcome import Outcome
from function.core.timeutil import format_time


@memo(1024, weight=1)
def _parsed(spec_key: bytes) -> tuple[Parsed, str]:
    """The validated spec and its :func:`definition_hash`, from the spec's canonical form
    (:func:`function.core.structs.canonical`; memoized: Crossplane calls again with the
    same spec every reconcile). Shared between calls: read it, never change it.

    Raises:
        SpecError: naming the first invalid field (not memoized: raised on every call).
    """
    parsed = parse(structs.plain_object(spec_key))
    return parsed, definition_hash(parsed)


class Call:
    """What one call decides with: ``inputs``, the ``out`` being built, the ``prior``
    status and the status ``st`` being written (a copy of it), the parsed spec (or why
    it is invalid) and its hash, and the model the backfill serves."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.out = Outcome()
        self.now: datetime.datetime = inputs.now
        # SpecError: nothing is applied (see the package)
        self.parsed, self.hash = _parsed(structs.canonical(inputs.xr, "spec"))
        self.prior = Status.read(inputs)
        self.st = self.prior.copy()
        self.model = self.parsed.spec.modelRef.name
        self.poll = float(max(1, inputs.settings.poll_seconds))

    def resolved(self) -> bool:
        """Every requirement made so far is resolved (``Outcome.final_iteration``'s rule)."""
        return self.out.final_iteration(self.inputs)

    def deleting(self) -> bool:
        return structs.being_deleted(self.inputs.xr)

    def observe(self, metric: str, value: float = 1.0, **extra: str) -> None:
        labels = {"backfill": self.inputs.name, "namespace": self.inputs.namespace}
        self.out.observe(metric, {**labels, "model": self.model, **extra}, value)

    def wait(self, reason: str, message: str, *, ttl: float | None = None) -> None:
        self.st.set(WAITING, reason, message)
        self.out.requeue_after(ttl if ttl is not None else self.poll)

    def mark_not_idle(self) -> None:
        """The idle window starts over now: ``status.notIdleBefore``.

        Called once per event (a Job stopped; a wait on the model begun or ended, see
        :meth:`note_model_wait`), never on every call while a state lasts: a status
        that changes with the clock is written, and so reconciled again, on every call.
        """
        self.st.not_idle_before = format_time(self.now)

    def note_model_wait(self) -> None:
        """Stamp ``status.notIdleBefore`` when this call begins or ends a wait on the
        model (``Status.waiting_on_model``); in between it keeps the instant the wait
        began.

        A wait begins now. A wait that ends in this call without the call saying when
        (the backfill suspended, blocked, ... while the model was not seen Ready) ends
        now too: the last call that saw the model missing or not Ready was earlier, so
        the window starts no earlier than it did when every call re-stamped the field.
        """
        was, waits = self.prior.waiting_on_model(), self.st.waiting_on_model()
        begins = waits and not was
        # A wait that admit._idle_since ends (the model seen Ready) is stamped there.
        ends_unsaid = was and not waits and self.st.not_idle_before == self.prior.not_idle_before
        if begins or ends_unsaid:
            self.mark_not_idle()

    def keep_all(self) -> None:
        self.out.keep_observed(self.inputs, ready=True)
