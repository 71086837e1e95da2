"""Events that say what changed, once.

Crossplane turns every Normal or Warning result a function returns into a
Kubernetes event on the XR (results with ``target: Composite``), on every call:
about once a minute per XR, and again on every watched change. A result added on
every call therefore floods the XR's events with the same line. Results meant as
events must be added only in the call that records a change in the XR's status;
the helpers here do that by comparing what the last written status says (read from
``inputs.status(...)``) with what this call writes.

Usage in a composer::

    old = inputs.status("phase")            # what the last call recorded
    new = "Ready"                           # what this call writes to status
    out.status["phase"] = new
    events.transition(out, old, new, "hydration finished on gpu-a", reason="HydrationReady")

Like the lifecycle metrics (``function.ops.metrics``), this rests on the status write:
if Crossplane fails to write the status, the next call sees the old value and the
event is emitted again. Crossplane's requirements loop may call the function
several times in one reconcile with the same observed XR; only the last response is
used (Crossplane's FetchingFunctionRunner returns the final iteration's response),
so the event is still emitted once.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from google.protobuf.struct_pb2 import Struct

from function.core import structs
from function.core.outcome import Outcome

# Phases after which an event is a warning rather than a normal event.
WARNING_PHASES: frozenset[str] = frozenset({"Failed", "Blocked", "Lost"})


def transition(
    out: Outcome,
    old_phase: str | None,
    new_phase: str,
    message: str,
    *,
    reason: str | None = None,
    warning_phases: Collection[str] = WARNING_PHASES,
) -> bool:
    """Add an event result when the phase changes, and nothing otherwise.

    Args:
        out: The outcome to add the result to.
        old_phase: The phase the XR's status held before this call (None or "" when
            the XR has none yet).
        new_phase: The phase this call writes to status.
        message: What changed, for people: "hydration started on gpu-a". Must be
            non-empty.
        reason: The event reason (CamelCase, e.g. ``HydrationStarted``); Crossplane
            uses a generic one when None.
        warning_phases: Phases whose entry is a Warning event; any other is Normal.

    Returns:
        True if a result was added.

    Raises:
        ValueError: for an empty message.
    """
    return changed(
        out, old_phase or None, new_phase, message, reason=reason,
        warning=new_phase in warning_phases,
    )  # fmt: skip


def changed(
    out: Outcome,
    before: Any,
    after: Any,
    message: str,
    *,
    reason: str | None = None,
    warning: bool = False,
) -> bool:
    """Add an event result when ``before != after`` (any comparable recorded value,
    such as the cluster a replica is placed on or the run whose verdict was recorded).

    Returns:
        True if a result was added.

    Raises:
        ValueError: for an empty message.
    """
    if not message:
        raise ValueError("an event needs a message that says what changed")
    if before == after:
        return False
    if warning:
        out.warning(message, reason)
    else:
        out.normal(message, reason)
    return True


def condition_warning(
    out: Outcome,
    xr: Struct,
    condition_type: str,
    reason: str,
    message: str,
    *,
    event: str | None = None,
) -> bool:
    """A Warning event (``event``, else ``message``) when this call sets condition
    ``condition_type`` to False with ``reason`` and ``message`` and the XR's last
    written condition of that type (``status.conditions[]`` of ``xr``, the observed
    XR) said something else: once per change, not on every call that finds it
    unchanged.

    Returns:
        True if a result was added.

    Raises:
        ValueError: for an empty message.
    """
    last = structs.conditions(xr).get(condition_type)
    before = (
        (structs.sval(last, "status"), structs.sval(last, "reason"), structs.sval(last, "message"))
        if last is not None
        else None
    )
    return changed(
        out, before, ("False", reason, message), event or message, reason=reason, warning=True
    )
