"""ModelExperiment run state: what the XR's status remembers between calls.

The function is stateless; ``status.run``, ``runNumber``, ``runGeneration``,
``specHash``, ``candidate``, ``gauntlet``, ``gate``, ``verdict``, ``nextRunAt`` and
``history[]`` carry a run from one call to the next. Status is input like any other:
a field of the wrong shape is treated as absent, never trusted.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.struct_pb2 import ListValue

from function.api.modelexperiment import MAX_HISTORY_LIMIT, VERDICT_REASONS, ExperimentSpec
from function.composers.experiment.names import run_name, run_number
from function.core import structs
from function.core.inputs import Inputs
from function.core.numbers import ints_from_doubles, is_whole
from function.core.timeutil import parse_time
from function.naming import DNS1123_LABEL, MAX_LABEL

CANDIDATE_FIELDS = {
    "name": str,
    "createdAt": str,
    "deadline": str,
    "seen": bool,
    "releasedAt": str,
}
GATE_FIELDS = {"cache": str, "uid": str, "generation": int, "commit": str, "digest": str}
MAX_COUNT = 10**9


def whole_count(v: Any) -> int:
    """A non-negative whole number from status, 0 when it is anything else."""
    return int(v) if is_whole(v) and 0 <= v <= MAX_COUNT else 0


def _shape(v: Any, fields: dict[str, type]) -> dict[str, Any]:
    """The fields of ``v`` that have the expected type (others are dropped)."""
    if not isinstance(v, dict):
        return {}
    return {
        k: v[k]
        for k, t in fields.items()
        if k in v and isinstance(v[k], t) and not (t is int and isinstance(v[k], bool))
    }


def _gauntlet(v: Any) -> dict[str, Any]:
    """The recorded gauntlet Job, or {} unless every field it is rebuilt from is sound."""
    g = _shape(
        v,
        {
            "job": str,
            "cluster": str,
            "endpoint": str,
            "providerConfig": dict,
            "activeDeadlineSeconds": int,
            "startedAt": str,
        },
    )
    pc = _shape(g.get("providerConfig"), {"kind": str, "name": str})
    if not (g.get("job") and g.get("cluster") and g.get("endpoint") and pc.get("name")):
        return {}
    if not DNS1123_LABEL.match(g["job"]) or len(g["job"]) > MAX_LABEL:
        return {}
    g["providerConfig"] = {"kind": pc.get("kind") or "ClusterProviderConfig", "name": pc["name"]}
    g["activeDeadlineSeconds"] = max(1, min(int(g.get("activeDeadlineSeconds", 1)), MAX_COUNT))
    return g


def _verdict(v: Any) -> dict[str, Any]:
    """A recorded verdict, or {} when it is not one."""
    out = _shape(v, {"pass": bool, "reason": str, "summary": str, "completedAt": str})
    if "pass" not in out or out.get("reason") not in VERDICT_REASONS:
        return {}
    return out


def _record(v: Any) -> dict[str, Any]:
    """A history record, or {} when it is not one."""
    rec = _verdict(v)
    extra = _shape(v, {"run": str, "number": int, "job": str})
    if not rec or not extra.get("run") or not 1 <= extra.get("number", 0) <= MAX_COUNT:
        return {}
    return {
        "run": extra["run"],
        "number": extra["number"],
        **rec,
        **({"job": extra["job"]} if extra.get("job") else {}),
    }


@dataclass
class RunState:
    """What the XR's status remembers between calls (the function is stateless)."""

    number: int = 0
    name: str = ""
    spec_hash: str = ""
    generation: int = 0
    candidate: dict[str, Any] = field(default_factory=dict)
    gauntlet: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] = field(default_factory=dict)
    next_run_at: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    phase: str = ""
    unread: int = 0
    """How many records of ``status.history`` were not read: the function writes at most
    :data:`~function.api.modelexperiment.MAX_HISTORY_LIMIT` (newest last), so only the
    last that many are read; more can only be a forged or hand-edited status (review 20b
    F5: 25,000 forged records made one response carry 24,993 events)."""
    recorded: int = 0
    """With ``status.runNumber`` lost (``number`` 0): the number of the run ``status.run``
    names (:func:`~function.composers.experiment.names.run_number`), whose record the
    other fields still hold; 0 when there is none."""

    @classmethod
    def read(cls, inputs: Inputs) -> RunState:
        """Read the run state from the XR's last written status.

        Status is input like any other: a field of the wrong shape (an edit by hand,
        an older version of the function) is treated as absent, never trusted.
        """

        def small(key: str) -> Any:
            return ints_from_doubles(structs.to_py(inputs.status(key)))

        number = whole_count(inputs.status("runNumber"))
        raw = inputs.status("history")
        total = len(raw.values) if isinstance(raw, ListValue) else 0
        unread = max(0, total - MAX_HISTORY_LIMIT)
        hist = ints_from_doubles([structs.to_py(v) for v in raw.values[unread:]]) if total else None
        history = [h for h in (_record(x) for x in hist) if h] if isinstance(hist, list) else []
        recorded = 0
        if not number:  # lost or rewritten: the run status.run names, if it is one of ours
            after = 1 + max((rec["number"] for rec in history), default=0)
            run = structs.get_str(inputs.xr, "status", "run")
            recorded = (run_number(inputs.name, run, after) or 0) if run else 0
        return cls(
            number=number,
            name=run_name(inputs.name, number) if number else "",
            spec_hash=structs.get_str(inputs.xr, "status", "specHash"),
            generation=whole_count(inputs.status("runGeneration")),
            candidate=_shape(small("candidate"), CANDIDATE_FIELDS),
            gauntlet=_gauntlet(small("gauntlet")),
            gate=_shape(small("gate"), GATE_FIELDS),
            verdict=_verdict(small("verdict")),
            next_run_at=structs.get_str(inputs.xr, "status", "nextRunAt"),
            history=history,
            unread=unread,
            phase=structs.get_str(inputs.xr, "status", "phase"),
            recorded=recorded,
        )

    def start(self, experiment: str, number: int, hash_: str, generation: int) -> None:
        """Begin run ``number`` with nothing admitted yet."""
        self.number = number
        self.name = run_name(experiment, number)
        self.spec_hash = hash_
        self.generation = generation
        self.candidate = {}
        self.gauntlet = {}
        self.gate = {}
        self.verdict = {}
        self.next_run_at = ""

    def archive(self) -> None:
        """Move the current run's verdict into history (newest last)."""
        if not self.verdict:
            return
        rec = {"run": self.name, "number": self.number, **self.verdict}
        if self.gauntlet.get("job"):
            rec["job"] = self.gauntlet["job"]
        self.history.append(rec)

    def to_status(self) -> dict[str, Any]:
        """The status fields this composer owns (written in full on every call)."""
        st: dict[str, Any] = {
            "run": self.name,
            "runNumber": self.number,
            "runGeneration": self.generation,
            "specHash": self.spec_hash,
            "history": self.history,
        }
        for key, val in (
            ("candidate", self.candidate),
            ("gauntlet", self.gauntlet),
            ("gate", self.gate),
            ("verdict", self.verdict),
        ):
            if val:
                st[key] = val
        if self.next_run_at:
            st["nextRunAt"] = self.next_run_at
        return st


def next_run(spec: ExperimentSpec, st: RunState) -> datetime.datetime | None:
    """When the next run starts: ``repeatAfter`` after a passed run's ``completedAt``.

    None for a one-shot experiment, a run without a verdict, or a failed run (failed
    runs are terminal). Computed from the current spec, so a changed ``repeatAfter``
    applies at once. A verdict without a readable time falls back to the recorded
    ``nextRunAt``, else is due now.
    """
    if spec.repeat_seconds <= 0 or st.verdict.get("pass") is not True:
        return None
    done = parse_time(st.verdict.get("completedAt"))
    if done is None:
        return parse_time(st.next_run_at) or datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return done + datetime.timedelta(seconds=spec.repeat_seconds)
