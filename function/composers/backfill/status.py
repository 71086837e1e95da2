"""ModelBackfill status: the phases and the typed status this composer reads and writes.

The function is stateless: every timestamp of an attempt lives in the XR's status
(``status.startedAt``, ``runningSince``, ``notIdleBefore``, ...), read back on the next
call. Status is input like any other: a field of the wrong type (written by hand or by
another version) is ignored, field by field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from function.core.inputs import Inputs

# The condition that is True while a Job is Starting or Running.
CONDITION = "Backfilling"
# False while the spec is invalid (with the reason and the field), True otherwise.
SPEC_CONDITION = "SpecValid"

WAITING = "WaitingForIdle"
STARTING = "Starting"
RUNNING = "Running"
CANCELLING = "Cancelling"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
BLOCKED = "Blocked"
PHASES = (WAITING, STARTING, RUNNING, CANCELLING, SUCCEEDED, FAILED, SUSPENDED, BLOCKED)
# The reasons of WaitingForIdle while the ModelDeployment is missing or not Ready: no
# idle window begins during such a wait (see Status.waiting_on_model).
MODEL_NOT_FOUND = "ModelNotFound"
MODEL_NOT_READY = "ModelNotReady"
ACTIVE = frozenset({STARTING, RUNNING})
# Phases in which a backfill holds its replica (its Job exists or is being deleted).
HOLDING = frozenset({STARTING, RUNNING, CANCELLING})

_INT_FIELDS = frozenset({"attempts", "preemptions"})


# Status names that are not the attribute's plain camelCase: Kubernetes' API
# conventions spell an acronym in one case (``podIP``).
_NAMES = {"replica_uid": "replicaUID"}


def _status_key(attr: str) -> str:
    """``idle_since`` -> ``idleSince``, ``replica_uid`` -> ``replicaUID``."""
    if attr in _NAMES:
        return _NAMES[attr]
    head, *rest = attr.split("_")
    return head + "".join(w.title() for w in rest)


@dataclass
class Status:
    """The status fields this composer writes, in this order; None (or "") is left out.

    ``attempts`` counts the Jobs started (attempt N's Object is ``job-N``),
    ``preemptions`` the attempts cancelled; times are RFC 3339 strings. ``cluster``,
    ``replica`` and ``replica_uid`` (status ``replicaUID``; absent from an attempt
    recorded before it existed) identify the ModelReplica the last attempt runs on.
    """

    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    model: str | None = None
    cluster: str | None = None
    replica: str | None = None
    replica_uid: str | None = None
    job: str | None = None
    idle_since: str | None = None
    started_at: str | None = None
    running_since: str | None = None
    attempts: int | None = None
    preemptions: int | None = None
    completion_time: str | None = None
    next_run_time: str | None = None
    last_result: str | None = None
    result_message: str | None = None
    not_idle_before: str | None = None
    spec_hash: str | None = None

    @classmethod
    def read(cls, inputs: Inputs) -> Status:
        """The XR's last written status; a field of the wrong type reads as absent."""
        values: dict[str, Any] = {}
        for attr, key in _KEYS:
            v = inputs.status(key)
            if v is None or v == "":
                continue
            if attr in _INT_FIELDS:
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < 2**31:
                    continue
                v = int(v)
            elif not isinstance(v, str):
                continue  # a status this function did not write: ignore the field
            values[attr] = v
        return cls(**values)

    def copy(self) -> Status:
        return dataclasses.replace(self)

    def set(self, phase: str, reason: str, message: str) -> None:
        self.phase = phase
        self.reason = reason
        self.message = message

    def waiting_on_model(self) -> bool:
        """Whether this status waits for the ModelDeployment to exist and be Ready
        (``WaitingForIdle`` with reason ``ModelNotFound`` or ``ModelNotReady``)."""
        return self.phase == WAITING and self.reason in (MODEL_NOT_FOUND, MODEL_NOT_READY)

    def clear_result(self) -> None:
        """Forget the last attempt's outcome (a new attempt, or a changed spec)."""
        self.last_result = None
        self.result_message = None
        self.completion_time = None
        self.next_run_time = None

    def to_status(self) -> dict[str, Any]:
        """The fields that are set, under their status names, in order."""
        out: dict[str, Any] = {}
        for attr, key in _KEYS:
            v = getattr(self, attr)
            if v is not None and v != "":
                out[key] = v
        return out


# (attribute, status field) of every Status field, in order.
_KEYS = tuple((f.name, _status_key(f.name)) for f in dataclasses.fields(Status))
