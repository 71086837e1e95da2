"""The ModelExperiment composer: decisions only (see the package docstring)."""

from __future__ import annotations

import datetime
from typing import Any

from function.api.modelexperiment import (
    ARTIFACT_GATE,
    FAILED,
    MAX_HISTORY_LIMIT,
    PASSED,
    RUNNABLE,
    STATUS_IGNORED,
    TEMPLATE_INVALID,
    TEMPLATE_NOT_FOUND,
    VERDICT,
    ExperimentSpec,
    definition_hash,
    parse_spec,
)
from function.composers.experiment.children import evidence_body, served_name_overrides
from function.composers.experiment.names import (
    REQ_REPLICAS,
    REQ_TEMPLATE,
    candidate_key,
    job_key,
    key_run_number,
    run_name,
)
from function.composers.experiment.run import (
    Admission,
    active,
    admission,
    children_observed,
    decided_under_invalid_spec,
    decided_while_held,
    gate_condition,
    observed_run,
    run_gate_condition,
)
from function.composers.experiment.state import RunState, next_run
from function.core import events, structs
from function.core.errors import SpecError, quoted
from function.core.inputs import Inputs
from function.core.memo import memo
from function.core.outcome import Outcome
from function.core.timeutil import format_time

# Phases of a run in progress (not Blocked, Suspended or decided).
ACTIVE_PHASES = frozenset({"Deploying", "Serving", "Evaluating"})


@memo(1024, weight=1)
def _parsed(spec_key: bytes) -> tuple[ExperimentSpec, str]:
    """The validated spec and its :func:`definition_hash`, from the spec's canonical form
    (:func:`function.core.structs.canonical`; memoized: Crossplane calls again with the
    same spec every reconcile). The model is shared between calls: read it, never change it.

    Raises:
        SpecError: naming the first invalid field (not memoized: raised on every call).
    """
    spec = parse_spec(structs.plain_object(spec_key))
    return spec, definition_hash(spec)


# How many runs a RunPruned event names (the rest are counted).
_PRUNED_SHOWN = 3


class _Composer:
    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.out = Outcome()
        self.now = inputs.now
        self.poll = float(max(1, inputs.settings.poll_seconds))  # as every kind: 0 is 1 s
        self.prev_phase = structs.get_str(inputs.xr, "status", "phase")
        self.prev_reason = structs.get_str(inputs.xr, "status", "reason")

    # -- helpers
    def set_phase(self, phase: str, reason: str, message: str, *, warning: bool = False) -> None:
        """Write ``phase`` and ``reason``; an event when either changed (a Warning for
        Failed, Blocked, or ``warning``)."""
        out = self.out
        out.status["phase"] = phase
        warn = warning or phase in ("Failed", "Blocked")
        events.changed(
            out,
            (self.prev_phase, self.prev_reason),
            (phase, reason),
            f"{phase}: {message}",
            reason=reason,
            warning=warn,
        )
        out.status["reason"] = reason

    def keep_evidence(self, number: int) -> None:
        obs = self.inputs.observed_body(job_key(number))
        if obs is not None:
            self.out.add(job_key(number), evidence_body(obs))

    def require_template(self, spec: ExperimentSpec) -> Any:
        self.out.require(
            REQ_TEMPLATE,
            "batch/v1",
            "CronJob",
            match_name=spec.gauntlet.templateRef.name,
            namespace=self.inputs.namespace,
        )
        return self.inputs.required(REQ_TEMPLATE)

    # -- entry point
    def compose(self) -> Outcome:
        inputs, out = self.inputs, self.out
        st = RunState.read(inputs)
        try:
            spec, h = _parsed(structs.canonical(inputs.xr, "spec"))
        except SpecError as e:
            return self.invalid(st, e)
        # The runs status records as this call starts: their children are decided on by
        # what follows; any other run's are kept (keep_unrecorded).
        known = {st.number, *(rec["number"] for rec in st.history)}

        if not self.advance(spec, h, st):  # held: the running run stays as it is
            out.status.update(st.to_status())
            self.gate_condition(spec, st)
            out.ready = False
            return out
        self.prune_history(spec, st)

        if st.verdict:
            self.finished(spec, st)
        elif spec.suspend:
            self.suspended(st)
        else:
            active(self, spec, st)

        out.status.update(st.to_status())
        self.gate_condition(spec, st)
        self.keep_unrecorded(known | {st.number}, lost=0 in known)
        self.keep_while_unresolved()
        phase = out.status.get("phase")
        last = st.verdict or (st.history[-1] if st.history else {})
        # Ready: the last verdict passed and nothing needs attention (a later run in
        # progress or a suspension does not un-certify; Blocked or Failed does).
        out.ready = phase == "Succeeded" or (
            phase in (*ACTIVE_PHASES, "Suspended") and last.get("pass") is True
        )
        return out

    def advance(self, spec: ExperimentSpec, h: str, st: RunState) -> bool:
        """Start run 1 (or, with no ``status.runNumber``: the run ``status.run`` names,
        ``st.recorded``, as status records it; else the run whose children are observed:
        :func:`~function.composers.experiment.run.observed_run`), or the next run on a
        spec change (``h``: the spec's :func:`definition_hash`) or when a passed run is
        due again.

        Returns:
            False when the spec changed under a run in progress and the edited spec
            cannot start (its CronJob or ModelCache not found, unusable, or not known
            yet): the running run is held, its children kept (bad input loses nothing;
            the spec written back resumes it), and nothing else is decided. A run whose
            children are observed without its admission recorded (a status lost or
            rewritten) is not a spec change: it goes on under ``h`` (held by
            :func:`~function.composers.experiment.run.admit` if ``h`` cannot start it).
        """
        inputs, out = self.inputs, self.out
        latest = observed_run(self, st) if st.number == 0 else 0
        if st.number == 0 and st.recorded and st.recorded >= latest:
            # Only status.runNumber lost or rewritten: the run status.run names goes on
            # as the rest of status records it (a decided run stays decided: review 19c
            # F5), unless a later run's children are observed.
            st.number, st.name = st.recorded, run_name(inputs.name, st.recorded)
        if st.number == 0:
            # No run recorded (status lost or rewritten): the current run is the last one
            # composed, if its children are observed, else the one after history.
            number = latest or 1 + max((rec["number"] for rec in st.history), default=0)
            st.start(inputs.name, number, h, inputs.generation)
        elif st.spec_hash != h:
            if not st.candidate.get("createdAt") and not st.verdict and children_observed(self, st):
                # Children without a recorded admission (a status lost or rewritten): the
                # same run under this spec, so writing back a spec whose input held it
                # resumes it (bad input loses nothing).
                st.start(inputs.name, st.number, h, inputs.generation)
                return True
            if self.held(spec, st):
                return False
            was = st.name
            st.archive()
            st.start(inputs.name, st.number + 1, h, inputs.generation)
            out.normal(
                f"spec changed: run {was} ends; run {st.name} starts", "ExperimentSpecChanged"
            )
        elif not spec.suspend and (due := next_run(spec, st)) is not None and self.now >= due:
            was = st.name
            st.archive()
            st.start(inputs.name, st.number + 1, h, inputs.generation)
            out.normal(f"cool-down after run {was} ended; run {st.name} starts", "RunStarted")
        return True

    def held(self, spec: ExperimentSpec, st: RunState) -> bool:
        """The spec changed: whether run ``st`` is held (see :meth:`advance`). Not when it
        has a verdict or none was admitted, not for a suspension, not when the run is
        decided in this call (its Job finished, its deadline passed, its candidate lost:
        the verdict is recorded first and goes to history, whatever the edit), and not
        when the edited spec can start."""
        if not st.candidate.get("createdAt") or st.verdict or spec.suspend:
            return False
        if decided_while_held(self, spec, st):
            return False
        found = admission(self, spec)
        if isinstance(found, Admission) and found.reason is None:
            return False
        if isinstance(found, Admission):
            self.hold(st, found)
        else:
            self.waiting(
                st, "waiting for Crossplane to resolve the edited spec's CronJob and ModelCache"
            )
        return True

    def hold(
        self,
        st: RunState,
        found: Admission,
        until: str = "under the previous spec until the edited one can start",
    ) -> None:
        """The edited spec cannot start (or, ``until`` saying so, the spec cannot start a
        run whose children exist without its admission recorded): run ``st`` keeps its
        candidate and Job as they are. Runnable's message is ``found.message`` (naming the
        field), then "run <name> keeps its candidate and gauntlet Job <until>"."""
        out = self.out
        out.keep_observed(self.inputs)
        msg = f"{found.message}; run {st.name} keeps its candidate and gauntlet Job {until}"
        gate_condition(out, found)
        self.set_phase("Blocked", str(found.reason), msg)
        out.condition(RUNNABLE, "False", str(found.reason), msg)
        out.condition(VERDICT, "Unknown", "Blocked", f"run {st.name} is held: {found.reason}")
        out.requeue_after(self.poll)

    def gate_condition(self, spec: ExperimentSpec | None, st: RunState) -> None:
        """``ArtifactGate`` on every call: unless this call evaluated the spec's gate
        (admission, a held edit), the admitted run's gate or why it was not evaluated
        (:func:`~function.composers.experiment.run.run_gate_condition`; ``spec`` None:
        the spec is invalid). A type the function stops returning keeps its last value
        in Crossplane (review 16a: a held edit's False outlived the edit)."""
        out = self.out
        if any(c.type == ARTIFACT_GATE for c in out.conditions):
            return
        if spec is None:
            gated, why = None, "the spec is invalid"
        elif spec.artifactGate is None:
            gated, why = False, ""
        elif spec.suspend:
            gated, why = True, "spec.suspend is true; it is evaluated when a run is admitted"
        else:
            ref = f"{self.inputs.namespace}/{spec.artifactGate.modelCacheRef.name}"
            gated, why = True, f"waiting for Crossplane to resolve ModelCache {ref}"
        run_gate_condition(out, st, self.inputs.namespace, gated, why)

    def prune_history(self, spec: ExperimentSpec, st: RunState) -> None:
        """Earlier runs: at most historyLimit records; a dropped record takes its Job.

        One ``RunPruned`` event per call, however many records leave (it names the first
        few runs and the count): with the records of ``status.history`` past
        :data:`~function.api.modelexperiment.MAX_HISTORY_LIMIT` not read at all
        (:attr:`RunState.unread`, counted here), a forged history costs one event, not one
        per record (review 20b F5)."""
        limit = spec.history_limit
        cut = max(0, len(st.history) - limit)
        dropped, st.history = st.history[:cut], st.history[cut:]
        count = len(dropped) + st.unread
        if count:
            shown = [self.run_label(rec) for rec in dropped[:_PRUNED_SHOWN]]
            if count == 1 and shown:
                what, their = f"run {shown[0]}", "its evidence Job is"
            else:
                more = count - len(shown)
                names = ", ".join(shown) + (f" and {more} more" if more and shown else "")
                what = f"{count} runs ({names})" if shown else f"{count} runs"
                their = "their evidence Jobs are"
            unread = (
                f"; {st.unread} records of status.history past the {MAX_HISTORY_LIMIT} the "
                "function writes were not read (status is not trusted)"
                if st.unread
                else ""
            )
            self.out.normal(
                f"{what} left the history (historyLimit {limit}); {their} deleted{unread}",
                "RunPruned",
            )
        for rec in st.history:
            n = rec.get("number")
            if isinstance(n, (int, float)):
                self.keep_evidence(int(n))

    def status_ignored(self, field: str, recorded: Any, why: str, used: str) -> None:
        """A Warning ``StatusIgnored``: the value of ``field`` read back from the XR's
        status is not the one the function derives from trusted inputs (``why``), so
        ``used`` is used (and written back). Status is not trusted (review 20b F1:
        Crossplane's edit role lets a tenant write it)."""
        self.out.warning(
            f"{field} {quoted(recorded)} ignored ({why}); using {quoted(used)}",
            STATUS_IGNORED,
        )

    def run_label(self, rec: dict[str, Any]) -> str:
        """A history record's run as a message names it: as is when it is the name
        :func:`~function.composers.experiment.names.run_name` gives its number, else
        quoted (a status written by hand or forged)."""
        run = rec.get("run")
        if isinstance(run, str) and run == run_name(self.inputs.name, int(rec.get("number", 0))):
            return run
        return quoted(run)

    def keep_unrecorded(self, known: set[int], *, lost: bool) -> None:
        """Keep the live children of runs status does not record (their number not in
        ``known``: the current run and the history's as the call started, the current
        run as it ends), as observed: a gauntlet Job as evidence (``[Observe, Delete]``,
        :func:`~function.composers.experiment.children.evidence_body`), a candidate as it
        was. Only a status lost or rewritten leaves such children (every run the function
        ends or prunes is in ``known`` in that call, and its children are being deleted
        in the next), so nothing is deleted by surprise (review 19c F3: an earlier run's
        evidence Job went with the history). They stay until deleted by hand. ``lost``
        (no ``status.runNumber`` as the call started): a Warning names them, once."""
        inputs, out = self.inputs, self.out
        kept = []
        for key in sorted(inputs.observed):
            n = key_run_number(key)
            obs = inputs.observed_body(key)
            if n is None or n in known or key in out.resources or obs is None:
                continue
            if structs.being_deleted(obs):
                continue
            if key == job_key(n):
                out.add(key, evidence_body(obs))
            else:
                out.keep(key, obs)
            kept.append(f"{key} (run {n})")
        if kept and lost:
            out.warning(
                f"status.runNumber was not recorded: {', '.join(kept)} kept as observed, "
                "its run's history record lost with the status; it stays until deleted "
                "by hand (a gauntlet Job Object takes its remote Job with it)",
                "UnrecordedRunKept",
            )

    def keep_while_unresolved(self) -> None:
        """A requirement not resolved yet is "not known": keep every observed child.

        Crossplane calls again with it resolved (its requirements loop), and only
        that last response is applied; until then nothing may be dropped.
        """
        if not self.out.final_iteration(self.inputs):
            self.out.keep_observed(self.inputs)

    # -- bad input: say so, change nothing
    def invalid(self, st: RunState, e: SpecError) -> Outcome:
        """Keep every child, decide nothing new; but a run in progress still ends by its
        Job, its deadline or a lost candidate (:func:`decided_under_invalid_spec`): its
        verdict is recorded and its candidate released."""
        out = self.out
        decided_under_invalid_spec(self, st)  # records a verdict when the run is decided
        out.keep_observed(self.inputs)
        if st.verdict and st.number:
            out.resources.pop(candidate_key(st.number), None)  # the run is over
        msg = f"invalid spec: {e}"
        self.set_phase("Blocked", "InvalidSpec", msg)
        out.condition(RUNNABLE, "False", "InvalidSpec", msg)
        if st.verdict:
            v = st.verdict
            out.condition(
                VERDICT,
                "True" if v.get("pass") is True else "False",
                str(v.get("reason") or FAILED),
                f"run {st.name}: {v.get('summary') or v.get('reason')}; no new run while "
                "the spec is invalid",
            )
        else:
            out.condition(VERDICT, "Unknown", "InvalidSpec", "no run while the spec is invalid")
        self.gate_condition(None, st)
        if st.number:
            out.status.update(st.to_status())
        out.ready = False
        return out

    # -- a run with a verdict: evidence only
    def finished(self, spec: ExperimentSpec, st: RunState) -> None:
        out, v = self.out, st.verdict
        self.keep_evidence(st.number)
        summary = str(v.get("summary") or v.get("reason") or "verdict recorded")
        if v.get("pass") is True:
            out.condition(VERDICT, "True", str(v.get("reason", PASSED)), summary)
        else:
            out.condition(VERDICT, "False", str(v.get("reason", FAILED)), summary)
        if spec.suspend:
            self.set_phase("Suspended", "Suspended", "spec.suspend is true; no new run starts")
            out.condition(RUNNABLE, "False", "Suspended", "spec.suspend is true")
            return
        due = next_run(spec, st)
        if due is not None:
            st.next_run_at = format_time(due)
            out.requeue_after(max(1.0, (due - self.now).total_seconds()))
            self.set_phase(
                "Succeeded", PASSED, f"run {st.name} passed; next run at {st.next_run_at}"
            )
            out.condition(RUNNABLE, "True", "CoolingDown", f"next run at {st.next_run_at}")
            return
        st.next_run_at = ""
        if v.get("pass") is True:
            self.set_phase("Succeeded", PASSED, f"run {st.name} passed: {summary}")
            out.condition(RUNNABLE, "True", "Finished", f"run {st.name} finished")
        else:
            reason = str(v.get("reason") or FAILED)
            self.set_phase("Failed", reason, f"run {st.name} failed: {summary}")
            out.condition(
                RUNNABLE,
                "False",
                "Finished",
                f"run {st.name} failed; a failed run is terminal (change the spec to run again)",
            )

    # -- suspended: no candidate, no running Job
    def suspended(self, st: RunState) -> None:
        out = self.out
        if st.candidate or st.gauntlet:
            out.normal(
                f"spec.suspend: run {st.name} released its candidate and Job; "
                "it starts over on resume",
                "RunSuspended",
            )
        st.candidate, st.gauntlet, st.gate = {}, {}, {}
        self.set_phase("Suspended", "Suspended", "spec.suspend is true")
        out.condition(RUNNABLE, "False", "Suspended", "spec.suspend is true")
        out.condition(VERDICT, "Unknown", "Suspended", f"run {st.name} has no verdict yet")

    def blocked(self, st: RunState, reason: str, message: str) -> None:
        """A run not admitted yet cannot start (its CronJob or artifact gate): no
        candidate is composed. Never for an admitted run: bad input found after
        admission holds it (:meth:`hold`, :meth:`template_unusable`)."""
        out = self.out
        if st.candidate:
            out.warning(f"run {st.name} released its candidate: {message}", "CandidateReleased")
        st.candidate, st.gauntlet, st.gate = {}, {}, {}
        self.set_phase("Blocked", reason, message)
        out.condition(RUNNABLE, "False", reason, message)
        out.condition(VERDICT, "Unknown", "Blocked", f"run {st.name} is blocked: {reason}")
        out.requeue_after(self.poll)

    def waiting(self, st: RunState, message: str) -> None:
        """A requirement is not resolved yet: keep what exists, decide nothing."""
        out = self.out
        out.keep_observed(self.inputs)
        out.status["phase"] = self.prev_phase or "Deploying"
        if self.prev_reason:
            out.status["reason"] = self.prev_reason
        out.condition(RUNNABLE, "Unknown", "Resolving", message)
        out.condition(VERDICT, "Unknown", "Pending", f"run {st.name} has no verdict yet")

    def admitted_message(self, st: RunState) -> str:
        msg = f"run {st.name} admitted at {st.candidate.get('createdAt')}"
        forced = served_name_overrides(self.inputs.spec)
        if forced:
            msg += f"; the candidate serves as {st.name}: " + "; ".join(forced[:3])
        if st.gate:
            msg += f"; artifact gate opened by ModelCache {st.gate.get('cache')}"
            if st.gate.get("digest"):
                msg += f" ({st.gate['digest']})"
        return msg

    def stop_asking(self, name: str) -> None:
        """Stop asking for requirement ``name``, unless this call's request carries it.

        A response that stops asking for what its request was resolved from differs
        from the previous call's, so Crossplane v2.4.0 calls again without it, the
        function asks again, and the loop ends in "requirements didn't stabilize"
        with nothing applied (``FetchingFunctionRunner``; found by the stand-in loop
        made Crossplane's, review 14c #3). The next reconcile, with the outcome in
        status, asks for none.
        """
        if name not in self.inputs.required_resources:
            self.out.requirements.pop(name, None)

    def template_unusable(
        self, spec: ExperimentSpec, st: RunState, invalid: str | None = None
    ) -> None:
        """The CronJob was deleted (``invalid`` None) or can no longer template a Job
        (``invalid``: why, naming its field) after run ``st`` was admitted, before its
        gauntlet Job was observed: the run is held, as for a spec edit (:meth:`hold`).

        Bad input loses nothing: the candidate stays desired (composed before this is
        called) and every observed child is kept; ``status.candidate`` and the gate's
        record stay, so the run goes on with the same clock once the CronJob is fixed.
        The gauntlet's record is cleared (no Job was observed): the Job is composed from
        the fixed CronJob with the time left then. The run's deadline still ends it
        (``TimedOut``). Phase ``Blocked``, reason ``TemplateNotFound`` or
        ``TemplateInvalid``; ``Runnable=False`` names the field.
        """
        out = self.out
        out.keep_observed(self.inputs)
        st.gauntlet = {}
        ref = f"CronJob {self.inputs.namespace}/{spec.gauntlet.templateRef.name}"
        ref += " (spec.gauntlet.templateRef)"
        if invalid:
            reason, what = TEMPLATE_INVALID, f"{ref}: {invalid}"
        else:
            reason, what = TEMPLATE_NOT_FOUND, f"{ref} not found"
        msg = (
            f"{what}; run {st.name} keeps its candidate until the CronJob can template its "
            f"gauntlet Job, or its deadline {st.candidate.get('deadline')} passes"
        )
        self.set_phase("Blocked", reason, msg)
        out.condition(RUNNABLE, "False", reason, msg)
        out.condition(VERDICT, "Unknown", "Blocked", f"run {st.name} is held: {reason}")

    def verdict(
        self,
        spec: ExperimentSpec | None,
        st: RunState,
        reason: str,
        summary: str,
        at: datetime.datetime,
    ) -> None:
        """Record the run's verdict (it passed when ``reason`` is ``GauntletPassed``); the
        candidate is released (not desired) from now on. ``spec`` None: the XR's spec is
        invalid; the verdict is recorded and its evidence kept, nothing else decided."""
        inputs, out = self.inputs, self.out
        st.verdict = {
            "pass": reason == PASSED,
            "reason": reason,
            "summary": summary,
            "completedAt": format_time(at),
        }
        st.candidate.pop("seen", None)
        st.candidate["releasedAt"] = format_time(self.now)
        self.stop_asking(REQ_REPLICAS)
        out.observe(
            "model_experiment_verdicts_total",
            {"namespace": inputs.namespace, "experiment": inputs.name, "reason": reason},
        )
        if spec is None:
            self.keep_evidence(st.number)
            return
        self.finished(spec, st)


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelExperiment (see the module docstring).

    Args:
        inputs: The request view; ``inputs.spec`` is validated by
            ``function.api.modelexperiment.parse_spec``.

    Returns:
        The outcome: the candidate (``candidate-r<N>``) and gauntlet Job Object
        (``gauntlet-r<N>``) of the current run, evidence Jobs of retained runs;
        status ``phase``, ``reason``, ``run``, ``runNumber``, ``runGeneration``,
        ``specHash``, ``candidate``, ``gauntlet``, ``gate``, ``verdict``,
        ``nextRunAt``, ``history[]``; conditions ``Runnable``, ``Verdict`` and
        ``ArtifactGate`` (all three on every call).
    """
    return _Composer(inputs).compose()
