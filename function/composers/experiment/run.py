"""ModelExperiment: the current run while it has no verdict.

Admission (the CronJob exists and the artifact gate is open), then ``Deploying``
(the candidate is composed), ``Serving`` (it is Ready; its replica and cluster are
found) and ``Evaluating`` (the gauntlet Job runs), until the Job's result, the
deadline, or the candidate's loss or failure decides the verdict.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from function import API_VERSION
from function.api.inferencecluster import provider_config_ref
from function.api.modelexperiment import (
    ARTIFACT_GATE,
    CANDIDATE_CACHE_NOT_FOUND,
    CANDIDATE_FAILED,
    CANDIDATE_LOST,
    FAILED,
    GATE_NOT_EVALUATED,
    GATE_NOT_SET,
    GATE_OPEN,
    GAUNTLET_NOT_SYNCED,
    PASSED,
    RUNNABLE,
    TEMPLATE_INVALID,
    TEMPLATE_NOT_FOUND,
    TEMPLATE_REASONS,
    TIMED_OUT,
    VERDICT,
    ExperimentSpec,
)
from function.composers.experiment.children import candidate_body, gauntlet_object
from function.composers.experiment.gate import Gate, evaluate_gate
from function.composers.experiment.names import (
    REQ_CACHE,
    REQ_CANDIDATE_CACHE,
    REQ_CLUSTER,
    REQ_REPLICAS,
    candidate_key,
    gauntlet_job_name,
    job_key,
    key_run_number,
)
from function.composers.experiment.observed import (
    candidate_failure,
    candidate_progress,
    candidate_ready,
    candidate_report,
    job_result,
    serving_replica,
)
from function.composers.experiment.state import RunState, whole_count
from function.core import structs
from function.core.inputs import UNRESOLVED, Resolved
from function.core.timeutil import format_time, parse_time
from function.manifests.jobs import cronjob_problem, env_copies_problem, is_indexed
from function.manifests.objects import observed_manifest, sync_error
from function.naming import LABEL_DEPLOYMENT, label_value

if TYPE_CHECKING:
    from function.composers.experiment.compose import _Composer
    from function.core.outcome import Outcome


def job_message(st: RunState) -> str:
    g = st.gauntlet
    return f"gauntlet Job {g['job']} on {g['cluster']} against {g['endpoint']}"


def not_synced(job_obs: Any, st: RunState) -> str | None:
    """What provider-kubernetes reports of the gauntlet Job's Object when it is not
    ``Synced`` (:func:`function.manifests.objects.sync_error`), or None: the Job was not
    created (no remote Job observed: quota, admission, validation) or not applied."""
    err = sync_error(job_obs)
    if not err:
        return None
    g = st.gauntlet
    if observed_manifest(job_obs) is None:
        return f"gauntlet Job {g['job']} not created on {g['cluster']}: {err}"
    return f"{job_message(st)}; the Job is not applied: {err}"


def active(c: _Composer, spec: ExperimentSpec, st: RunState) -> None:
    """The current run, not suspended, no verdict yet."""
    admitted = parse_time(st.candidate.get("createdAt")) is not None
    if not admitted and not admit(c, spec, st):
        return
    run = ActiveRun.observe(c, spec, st)
    if not run.decided():
        run.proceed()


def decided_while_held(c: _Composer, spec: ExperimentSpec, st: RunState) -> bool:
    """Whether a run whose spec was edited is decided in this call: its gauntlet Job
    finished, its deadline passed, or its candidate was lost. The verdict is then
    recorded (and the candidate released) before the edit ends the run, so neither a
    hold nor a new run drops a result, and a hold never outlives the run's deadline.
    (A failed candidate is not checked: that needs its ModelReplicas.)"""
    run = ActiveRun.observe(c, spec, st, replicas=False)
    return run.job_finished() or run.deadline_passed() or run.candidate_lost()


def _live(obj: Any) -> Any:
    """``obj``, or None when it is being deleted (:func:`function.core.structs.being_deleted`)."""
    if obj is None or structs.being_deleted(obj):
        return None
    return obj


def decided_under_invalid_spec(c: _Composer, st: RunState) -> bool:
    """Whether an admitted run is decided in a call whose spec the function refuses (a
    check only the function makes, so the edit reached it): its gauntlet Job finished,
    its deadline passed, or its candidate was lost. A run is bounded whatever the edit
    (found by a review: a mid-run edit refused as InvalidSpec never ended the run, its
    candidate held for ever); the verdict is recorded and the candidate released."""
    if not st.candidate.get("createdAt") or st.verdict:
        return False
    if parse_time(st.candidate.get("deadline")) is None:
        return False
    deadline = run_clock(c, None, st)
    run = _run_as_observed(c, None, st, deadline)
    return run.job_finished() or run.deadline_passed() or run.candidate_lost()


def admit(c: _Composer, spec: ExperimentSpec, st: RunState) -> bool:
    """Check the CronJob, the artifact gate and the candidate's ModelCache; create the
    candidate when all pass.

    A missing candidate cache (``CandidateCacheNotFound``) blocks only a run that has
    not created its candidate: when run ``st``'s candidate or gauntlet Job is observed
    (its admission not recorded in status: a status lost or rewritten), the run was
    admitted and is admitted again; its candidate waits for the cache (its own
    ``CacheNotFound``) and the deadline bounds the run, as for a cache deleted after
    admission. (Found by the fuzz test, merge 17 case 1218: blocking dropped the
    candidate and the Job.) Any other reason (``TemplateNotFound``, ``TemplateInvalid``,
    a closed gate) holds such a run as a held edit does (:meth:`~function.composers.
    experiment.compose._Composer.hold`): its children are kept as observed, phase
    ``Blocked`` and ``Runnable=False`` name the field; bad input never drops children
    that exist. Fixing the spec admits the run again. Such a hold is bounded: its Job
    finishing or its deadline (:func:`children_deadline`: ``spec.timeout`` after its
    children's creation, there being no ``createdAt``) decides the run as an admitted
    run's (:func:`decided_without_record`). A run whose children are observed and that
    its spec can start is admitted with the clock it had: ``createdAt`` is its oldest
    child's ``metadata.creationTimestamp`` and the deadline ``spec.timeout`` later
    (:func:`children_deadline`; ``now`` only when no child carries one), so losing the
    status never extends a run.

    Returns:
        True when the candidate was admitted in this call.
    """
    found = admission(c, spec)
    if found is UNRESOLVED:
        c.waiting(st, "waiting for Crossplane to resolve the CronJob and the ModelCache")
        return False
    assert isinstance(found, Admission)
    created = children_observed(c, st)
    if found.reason == CANDIDATE_CACHE_NOT_FOUND and created:
        found = Admission(None, found.gate.message if found.gate is not None else "", found.gate)
    if found.reason is not None and created:
        until = "as observed (its admission is not recorded in status) until the spec can start it"
        deadline = children_deadline(c, spec, st)
        if deadline is not None:
            if decided_without_record(c, spec, st, deadline):
                return False
            until += (
                f", or its deadline {format_time(deadline)} passes (spec.timeout after its "
                "oldest child's metadata.creationTimestamp)"
            )
            c.out.requeue_after((deadline - c.now).total_seconds())
        c.hold(st, found, until)
        return False
    if found.reason is not None:
        gate_condition(c.out, found)
        c.blocked(st, found.reason, found.message)
        return False
    if found.gate is not None:
        st.gate = found.gate.record
    # ArtifactGate is then the admitted run's (compose's run_gate_condition, every call).
    timeout = datetime.timedelta(seconds=spec.timeout_seconds)
    at, deadline = c.now, None
    if created:
        # Admitted again after its admission was lost (review 19c F6: from now, every loss
        # moved the deadline later): the clock started when its children were created.
        deadline = children_deadline(c, spec, st)
        if deadline is not None:
            at = deadline - timeout  # its oldest child's metadata.creationTimestamp
    st.candidate = {
        "name": st.name,
        "createdAt": format_time(at),
        "deadline": format_time(deadline or c.now + timeout),
    }
    return True


def _children(c: _Composer, st: RunState) -> tuple[Any, Any]:
    """Run ``st``'s candidate and gauntlet Job Object as observed, each None when it is
    not observed or is being deleted: an object being deleted is a previous run's going
    away under the same names (a suspended run resumed, say), not this run's (found by a
    review: the terminating candidate was taken as the resumed run's, then "lost")."""
    inputs = c.inputs
    return (
        _live(inputs.observed_body(candidate_key(st.number))),
        _live(inputs.observed_body(job_key(st.number))),
    )


def children_observed(c: _Composer, st: RunState) -> bool:
    """Whether run ``st``'s candidate or gauntlet Job is observed (and not being deleted:
    :func:`_children`)."""
    return any(obs is not None for obs in _children(c, st))


def observed_run(c: _Composer, st: RunState) -> int:
    """The highest run number whose candidate or gauntlet Job is observed (composed
    resource names ``candidate-r<N>``, ``gauntlet-r<N>``: :func:`~function.composers.
    experiment.names.key_run_number`), not being deleted and not a run ``st.history``
    records (its evidence Job); 0 when there is none.

    What ``status.runNumber`` lost or rewritten is recovered from: the current run is
    the last one composed, so losing status neither drops a running run N > 1 nor
    starts another on top of it."""
    recorded = {rec["number"] for rec in st.history}
    numbers = (
        n
        for key in c.inputs.observed
        if (n := key_run_number(key)) is not None
        and n not in recorded
        and _live(c.inputs.observed_body(key)) is not None
    )
    return max(numbers, default=0)


def children_deadline(c: _Composer, spec: ExperimentSpec, st: RunState) -> datetime.datetime | None:
    """The deadline of run ``st`` when its children are observed but its admission is not
    recorded in status (``status.candidate.createdAt``, from which an admitted run's
    deadline is ``spec.timeout`` later, is lost or rewritten): ``spec.timeout`` after
    the oldest ``metadata.creationTimestamp`` of its live candidate and gauntlet Job
    Object. The API server sets it when each is created and never changes it, so the
    deadline is the same on every call (no time of a call is written into status); the
    candidate is created at admission, so it is the admitted run's deadline to within
    the time Crossplane took to create it. None when no child carries one (or the
    deadline is past the last date Python can hold)."""
    created = [
        t
        for obs in _children(c, st)
        if obs is not None
        and (t := parse_time(structs.get(obs, "metadata", "creationTimestamp"))) is not None
    ]
    if not created:
        return None
    try:
        return min(created) + datetime.timedelta(seconds=spec.timeout_seconds)
    except OverflowError:  # a timestamp near year 9999
        return None


# How much later than its oldest child's creationTimestamp (or the function's clock) a
# recorded status.candidate.createdAt may be before it is not trusted: clock skew between
# the function and the API server.
CLOCK_SKEW_SECONDS = 60


def run_clock(c: _Composer, spec: ExperimentSpec | None, st: RunState) -> datetime.datetime:
    """The deadline of admitted run ``st``, from ``status.candidate.createdAt`` and
    ``deadline`` as far as observed facts and the spec allow (status is not trusted:
    review 20b F1, a forged deadline 2099 kept a run and its GPUs for ever).

    ``createdAt`` later than the oldest ``metadata.creationTimestamp`` of the run's live
    children (the API server's, never changed), or than now, by more than
    :data:`CLOCK_SKEW_SECONDS`, is replaced by that time; the deadline is at most
    ``spec.timeout`` after ``createdAt`` (``spec`` None, an invalid spec: not bounded
    by it). A replaced value is written back (``st.candidate``) with one Warning
    ``StatusIgnored`` naming the field (:meth:`~function.composers.experiment.compose.
    _Composer.status_ignored`)."""
    created = parse_time(st.candidate.get("createdAt"))
    facts = [
        t
        for obs in _children(c, st)
        if obs is not None
        and (t := parse_time(structs.get(obs, "metadata", "creationTimestamp"))) is not None
    ]
    bound = min([c.now, *facts])
    if created is not None and (created - bound).total_seconds() > CLOCK_SKEW_SECONDS:
        what = "its oldest child's metadata.creationTimestamp" if facts else "now"
        c.status_ignored(
            "status.candidate.createdAt",
            st.candidate.get("createdAt"),
            f"later than {what} {format_time(bound)}",
            format_time(bound),
        )
        created = bound
        st.candidate["createdAt"] = format_time(bound)
    start = created or c.now
    recorded = parse_time(st.candidate.get("deadline"))
    limit = None
    if spec is not None:
        try:
            limit = start + datetime.timedelta(seconds=spec.timeout_seconds)
        except OverflowError:  # past the last date Python can hold
            limit = None
    if recorded is None:
        return limit or datetime.datetime.max.replace(tzinfo=datetime.UTC)
    if limit is not None and recorded > limit:
        c.status_ignored(
            "status.candidate.deadline",
            st.candidate.get("deadline"),
            f"later than spec.timeout ({spec.timeout if spec else ''}) after the run's start "
            f"{format_time(start)}",
            format_time(limit),
        )
        st.candidate["deadline"] = format_time(limit)
        return limit
    return recorded


def decided_without_record(
    c: _Composer, spec: ExperimentSpec, st: RunState, deadline: datetime.datetime
) -> bool:
    """Whether a run held without its admission recorded (:func:`admit`) is decided in
    this call, as a held edit is: its gauntlet Job finished (before ``deadline``: else it
    is ``TimedOut``), or ``deadline`` (:func:`children_deadline`) passed. The verdict is
    recorded as an admitted run's, the candidate released and the Job kept as evidence."""
    run = _run_as_observed(c, spec, st, deadline)
    return run.job_finished() or run.deadline_passed()


def _run_as_observed(
    c: _Composer, spec: ExperimentSpec | None, st: RunState, deadline: datetime.datetime
) -> ActiveRun:
    """Run ``st`` as its observed children show it (the CronJob not read: ``UNRESOLVED``),
    to decide it without admitting it."""
    cand_obs, job_obs = _children(c, st)
    return ActiveRun(c, spec, st, deadline, cand_obs, job_obs, UNRESOLVED)


_NOT_SET = "spec.artifactGate is not set: no artifact evidence is required"


def gate_condition(out: Outcome, found: Admission) -> None:
    """``ArtifactGate`` for what admitting a spec found (a run not admitted yet, or an
    edit held): the gate as evaluated, True ``ArtifactGateOpen`` or False with the
    gate's reason, even when the CronJob blocks the run first; without
    ``spec.artifactGate``, True ``NoArtifactGate`` (a False left by a gate since removed
    is cleared: Crossplane keeps the last value of a condition type the function no
    longer returns)."""
    if found.gate is None:
        out.condition(ARTIFACT_GATE, "True", GATE_NOT_SET, _NOT_SET)
        return
    gate = found.gate
    out.condition(
        ARTIFACT_GATE,
        "True" if gate.reason is None else "False",
        gate.reason or GATE_OPEN,
        gate.message,
    )


def run_gate_condition(
    out: Outcome, st: RunState, namespace: str, gated: bool | None, why_not: str
) -> None:
    """``ArtifactGate`` of a call that does not evaluate the spec's gate.

    Args:
        out: Where the condition is written.
        st: The run; admitted when ``st.candidate.createdAt`` or ``st.verdict`` is set.
        namespace: The experiment's (and the gated ModelCache's) namespace.
        gated: Whether the spec has ``spec.artifactGate``; None when the spec is invalid.
        why_not: Why the gate is not evaluated in this call (the Unknown's message).

    An admitted run (its verdict too) says the gate it opened with, from ``status.gate``
    (``{cache, uid, generation, commit?, digest?}``): True ``ArtifactGateOpen``, or True
    ``NoArtifactGate`` for a run admitted without one, so nothing a held edit or an
    earlier run wrote outlives it. Otherwise (suspended, the ModelCache not resolved yet,
    an invalid spec, or a record unreadable) Unknown ``ArtifactGateNotEvaluated`` naming
    why, and True ``NoArtifactGate`` for a spec without a gate. Messages carry no time,
    so an unchanged world writes the same condition.
    """
    # A verdict was reached by an admitted run (its record may be lost: children_deadline).
    admitted = bool(st.candidate.get("createdAt") or st.verdict)
    gate = st.gate
    if admitted and gate.get("cache"):
        msg = (
            f"run {st.name} was admitted with its artifact gate open: ModelCache "
            f"{namespace}/{gate['cache']} generation {gate.get('generation', 0)}"
        )
        for key in ("commit", "digest"):
            if gate.get(key):
                msg += f", {key} {gate[key]}"
        out.condition(ARTIFACT_GATE, "True", GATE_OPEN, msg)
        return
    if gated is False:
        out.condition(ARTIFACT_GATE, "True", GATE_NOT_SET, _NOT_SET)
        return
    if admitted and gated:
        why_not = f"status.gate does not record the gate run {st.name} was admitted with"
    out.condition(
        ARTIFACT_GATE,
        "Unknown",
        GATE_NOT_EVALUATED,
        f"the artifact gate was not evaluated: {why_not}",
    )


@dataclass(frozen=True)
class Admission:
    """What admitting a spec found: it can start (``reason`` None), or the reason and
    message that block it; ``gate`` is the artifact gate's decision (None without
    ``spec.artifactGate``; evaluated also when the CronJob blocks first)."""

    reason: str | None = None
    message: str = ""
    gate: Gate | None = None


def admission(c: _Composer, spec: ExperimentSpec) -> Admission | object:
    """Whether a run of ``spec`` can start: its gauntlet CronJob exists and can template a
    Job, its artifact gate (if any) is open, and the candidate's ModelCache (if any)
    exists. Asks Crossplane for all three.

    Returns:
        ``UNRESOLVED`` while Crossplane has not resolved a requirement (not known),
        else an :class:`Admission` (reasons ``TemplateNotFound``, ``TemplateInvalid``,
        the gate's (:func:`~function.composers.experiment.gate.evaluate_gate`), or
        ``CandidateCacheNotFound``, checked in that order).
    """
    inputs = c.inputs
    tmpl = c.require_template(spec)
    cache: Any = None
    if spec.artifactGate is not None:
        cache = _require_cache(c, REQ_CACHE, spec.artifactGate.modelCacheRef.name)
    cand_cache = _candidate_cache(c, spec, cache)
    if any(r is UNRESOLVED for r in (tmpl, cache, cand_cache)):
        return UNRESOLVED
    assert isinstance(tmpl, Resolved)
    # The gate is evaluated whatever the CronJob: its condition says the gate's state,
    # never "not set" for a set gate (review 16a: a missing CronJob reported a closed
    # gate as True NoArtifactGate).
    gate: Gate | None = None
    if spec.artifactGate is not None:
        assert isinstance(cache, Resolved)
        gate = evaluate_gate(spec, inputs.namespace, cache.items[0] if cache.items else None)
    ref = f"CronJob {inputs.namespace}/{spec.gauntlet.templateRef.name} (spec.gauntlet.templateRef)"
    if not tmpl.items:
        return Admission(TEMPLATE_NOT_FOUND, f"{ref} not found", gate)
    problem = cronjob_problem(tmpl.items[0]) or env_copies_problem(
        tmpl.items[0], spec.gauntlet.sorted_env(), "spec.gauntlet.env"
    )
    if problem:
        return Admission(TEMPLATE_INVALID, f"{ref}: {problem}", gate)
    if gate is not None and gate.reason is not None:
        return Admission(gate.reason, gate.message, gate)
    if isinstance(cand_cache, Resolved) and not cand_cache.items:
        assert spec.candidate.modelCacheRef is not None  # asked for only when it is set
        return Admission(
            CANDIDATE_CACHE_NOT_FOUND,
            f"ModelCache {inputs.namespace}/{spec.candidate.modelCacheRef.name} "
            "(spec.candidate.modelCacheRef) not found; the candidate is not created "
            "until it exists",
            gate,
        )
    return Admission(None, gate.message if gate is not None else "", gate)


def _require_cache(c: _Composer, key: str, name: str) -> Any:
    """Ask Crossplane for ModelCache ``name`` in the experiment's namespace under
    requirement ``key``: its :class:`~function.core.inputs.Resolved` answer, or
    ``UNRESOLVED``."""
    c.out.require(key, API_VERSION, "ModelCache", match_name=name, namespace=c.inputs.namespace)
    return c.inputs.required(key)


def _candidate_cache(c: _Composer, spec: ExperimentSpec, gated: Any) -> Any:
    """The candidate's ModelCache (``spec.candidate.modelCacheRef``) as Crossplane
    resolved it, ``UNRESOLVED``, or None when the candidate names none. The gated cache's
    answer (``gated``) when it is the same cache: one requirement for one object.

    Found by review 17n: a typo'd candidate cache was admitted; the candidate waited for
    it (its ModelDeployment's ``CacheNotFound``, a wait there) until the run ended
    ``TimedOut`` without saying why. It blocks now, as the gate's missing cache does.
    """
    ref = spec.candidate.modelCacheRef
    if ref is None:
        return None
    gate = spec.artifactGate
    if gate is not None and gate.modelCacheRef.name == ref.name:
        return gated
    return _require_cache(c, REQ_CANDIDATE_CACHE, ref.name)


# Where start_job takes each field of status.gauntlet from (a Warning names it).
_DERIVED_FROM = {
    "job": "not the name the function derives for this run's gauntlet Job",
    "cluster": "not the cluster the candidate's serving ModelReplica is on",
    "endpoint": "not the endpoint the candidate's serving ModelReplica reports",
    "providerConfig": "not the provider config the candidate's InferenceCluster reports",
}


def _shown(value: Any) -> str:
    """A derived value as a StatusIgnored message gives it."""
    if isinstance(value, dict):
        return f"{value.get('kind')} {value.get('name')}"
    return str(value)


@dataclass(frozen=True)
class _Target:
    """Where the gauntlet runs: the candidate's serving replica and its cluster."""

    cluster: str
    endpoint: str
    provider_config: dict[str, Any]
    cronjob: Any


@dataclass
class ActiveRun:
    """An admitted run and what Crossplane observed of it in this call."""

    c: _Composer
    spec: ExperimentSpec | None
    """None while the XR's spec is invalid: the run is only decided (its Job, deadline or
    candidate), nothing is composed (:func:`decided_under_invalid_spec`)."""
    st: RunState
    deadline: datetime.datetime
    cand_obs: Any
    job_obs: Any
    replicas: Any

    @classmethod
    def observe(
        cls, c: _Composer, spec: ExperimentSpec, st: RunState, *, replicas: bool = True
    ) -> ActiveRun:
        """The run as observed (``replicas``: ask for the candidate's ModelReplicas too,
        which only the candidate's checks read)."""
        inputs = c.inputs
        deadline = run_clock(c, spec, st)
        cand_obs, job_obs = _children(c, st)  # not a previous run's being deleted
        found: Any = UNRESOLVED
        if cand_obs is not None and replicas:
            c.out.require(
                REQ_REPLICAS,
                API_VERSION,
                "ModelReplica",
                match_labels={LABEL_DEPLOYMENT: label_value(st.name)},
                namespace=inputs.namespace,
            )
            found = inputs.required(REQ_REPLICAS)
        return cls(c, spec, st, deadline, cand_obs, job_obs, found)

    @property
    def valid(self) -> ExperimentSpec:
        """The parsed spec (what composing the run needs)."""
        assert self.spec is not None, "composing a run needs a valid spec"
        return self.spec

    def verdict(self, reason: str, summary: str, at: datetime.datetime) -> bool:
        self.c.verdict(self.spec, self.st, reason, summary, at)
        return True

    # -- the verdict, when this call can decide it
    def decided(self) -> bool:
        """Record the verdict if the run is decided (in this order); True when it was."""
        if (
            self.job_finished()
            or self.deadline_passed()
            or self.candidate_lost()
            or self.replica_left()
            or self.candidate_failed()
        ):
            return True
        if self.cand_obs is not None and not self.st.candidate.get("seen"):
            self.st.candidate["seen"] = True
        return False

    def job_finished(self) -> bool:
        """A finished Job decides, if it finished before the deadline."""
        if self.job_obs is None:
            return False
        result = job_result(self.job_obs, self.c.inputs.name, self.st)
        if result is None:
            return False
        if result.finished_at is not None and result.finished_at > self.deadline:
            return self.verdict(
                TIMED_OUT,
                f"{result.summary}, after the deadline {format_time(self.deadline)}",
                result.finished_at,
            )
        return self.verdict(
            PASSED if result.passed else FAILED, result.summary, result.finished_at or self.c.now
        )

    def deadline_passed(self) -> bool:
        if self.c.now < self.deadline:
            return False
        stood = ""
        if self.st.gauntlet:
            what = "the gauntlet did not finish"
            err = not_synced(self.job_obs, self.st) if self.job_obs is not None else None
            if err:
                what += f" ({err})"
        elif self.job_obs is not None:  # its record lost with the status (children_deadline)
            what = "the gauntlet did not finish"
        elif not candidate_ready(self.cand_obs):
            what = "the candidate never became Ready"
            # Where the run stood (review 17n: "never became Ready" alone did not say why).
            stood = candidate_report(self.cand_obs)
        elif self.c.prev_phase == "Blocked" and self.c.prev_reason in TEMPLATE_REASONS:
            # Held since its CronJob broke (template_unusable): no Job was ever observed.
            what = f"the gauntlet's CronJob could not template its Job ({self.c.prev_reason})"
        else:
            what = "the candidate was Ready but its endpoint or cluster was never found"
        # The run's own timeout (an edit held behind it may have changed the spec's).
        created = parse_time(self.st.candidate.get("createdAt"))
        own = (self.deadline - created).total_seconds() if created is not None else None
        timeout = self.spec.timeout if self.spec is not None else f"{own or 0:g}s"
        if own is not None and self.spec is not None and own != self.spec.timeout_seconds:
            timeout = f"{own:g}s"
        summary = f"{what} within {timeout} (deadline {format_time(self.deadline)})"
        return self.verdict(TIMED_OUT, summary + (f"; {stood}" if stood else ""), self.c.now)

    def candidate_lost(self) -> bool:
        """The candidate disappeared after it was seen."""
        if self.cand_obs is not None or not self.st.candidate.get("seen"):
            return False
        return self.verdict(
            CANDIDATE_LOST, f"candidate ModelDeployment {self.st.name} disappeared", self.c.now
        )

    def replica_left(self) -> bool:
        """The replica the gauntlet runs against left its cluster (moved or deleted).
        Only once its Job Object is observed: before, the cluster is derived again from
        the serving replica (:meth:`start_job`), whatever status records."""
        g = self.st.gauntlet
        if not g or self.job_obs is None or not isinstance(self.replicas, Resolved):
            return False
        on = [
            r
            for r in self.replicas.items
            if structs.get_str(r, "spec", "clusterName") == g["cluster"]
            and not structs.being_deleted(r)
        ]
        if on:
            return False
        return self.verdict(
            CANDIDATE_LOST,
            f"candidate {self.st.name} no longer has a replica on {g['cluster']}, "
            f"where the gauntlet runs against {g['endpoint']}",
            self.c.now,
        )

    def candidate_failed(self) -> bool:
        """The candidate can never become ready."""
        if self.cand_obs is None:
            return False
        why = candidate_failure(self.cand_obs, self.replicas)
        if why is None:
            return False
        return self.verdict(CANDIDATE_FAILED, f"candidate {self.st.name} {why}", self.c.now)

    # -- no verdict yet: compose the candidate, then the Job
    def proceed(self) -> None:
        c, out, st = self.c, self.c.out, self.st
        out.requeue_after(min(c.poll, max(1.0, (self.deadline - c.now).total_seconds())))
        out.condition(RUNNABLE, "True", "Admitted", c.admitted_message(st))
        out.add(candidate_key(st.number), candidate_body(c.inputs, c.inputs.spec, st))
        if st.gauntlet:
            self.evaluating()
        elif not candidate_ready(self.cand_obs):
            self.phase("Deploying", f"candidate {st.name}: {candidate_progress(self.cand_obs)}")
        else:
            self.serving()

    @property
    def left(self) -> str:
        # The deadline, not the time left: a condition message that changes on every call
        # would rewrite the XR's status on every reconcile.
        return format_time(self.deadline)

    def phase(self, phase: str, msg: str, reason: str = "") -> None:
        """Write ``phase`` (and ``reason``, the phase by default) with the Verdict
        condition; ``GauntletNotSynced`` is a Warning event on entry."""
        reason = reason or phase
        self.c.set_phase(phase, reason, msg, warning=reason == GAUNTLET_NOT_SYNCED)
        self.c.out.condition(VERDICT, "Unknown", reason, f"{msg}; deadline {self.left}")

    def evaluating(self) -> None:
        """The Job was composed; keep it as it was (a Job's pod template is immutable)."""
        c, st = self.c, self.st
        if self.job_obs is not None:
            c.out.keep(job_key(st.number), self.job_obs)
            err = not_synced(self.job_obs, st)
            if err:
                self.phase("Evaluating", err, GAUNTLET_NOT_SYNCED)
                return
            msg: str | None = job_message(st)
        else:
            # Not created yet: everything the Object is built from is derived again
            # (status is not trusted: review 20b F1), as when the Job was first composed.
            self.serving()
            return
        if msg is not None:
            self.phase("Evaluating", msg)

    def add_job(self, cronjob: Any) -> str | None:
        """Compose the gauntlet Job from ``st.gauntlet``; None when the CronJob is unusable
        (the run is then held, :meth:`~function.composers.experiment.compose._Composer.
        template_unusable`)."""
        c, st = self.c, self.st
        try:
            body = gauntlet_object(c.inputs, self.valid, st, cronjob)
        except ValueError as e:
            c.template_unusable(self.valid, st, invalid=str(e))
            return None
        c.out.add(job_key(st.number), body)
        return job_message(st)

    def serving(self) -> None:
        """Ready: find where it serves, then compose the Job."""
        found = self.serving_replica()
        target = self.target(*found) if isinstance(found, tuple) else found
        if isinstance(target, str):
            self.phase("Serving", target)
        elif target is not None:
            self.start_job(target)

    def serving_replica(self) -> tuple[str, str] | str | None:
        """``(cluster, endpoint)``, a message to wait with, or None when waiting for
        Crossplane."""
        if self.replicas is UNRESOLVED:
            self.c.waiting(
                self.st, "waiting for Crossplane to resolve the candidate's ModelReplicas"
            )
            return None
        assert isinstance(self.replicas, Resolved)
        found = serving_replica(self.replicas, self.st.name)
        if found is None:
            return (
                f"candidate {self.st.name} is Ready; waiting for its replica to report an endpoint"
            )
        return found

    def target(self, cluster_name: str, endpoint: str) -> _Target | str | None:
        """The cluster's provider config and the CronJob; a message to wait with; or None
        when waiting for Crossplane or Blocked."""
        c, st, out = self.c, self.st, self.c.out
        out.require(REQ_CLUSTER, API_VERSION, "InferenceCluster", match_name=cluster_name)
        tmpl = c.require_template(self.valid)
        cluster = c.inputs.required(REQ_CLUSTER)
        if cluster is UNRESOLVED or tmpl is UNRESOLVED:
            c.waiting(st, "waiting for Crossplane to resolve the candidate's cluster")
            return None
        assert isinstance(cluster, Resolved) and isinstance(tmpl, Resolved)
        if not tmpl.items:
            c.template_unusable(self.valid, st)
            return None
        if not cluster.items:
            return f"candidate {st.name} serves on {cluster_name}: InferenceCluster not found"
        pc = provider_config_ref(cluster.items[0])
        if pc is None:
            return f"candidate {st.name} serves on {cluster_name}: no status.providerConfigRef yet"
        return _Target(cluster_name, endpoint, pc, tmpl.items[0])

    def start_job(self, target: _Target) -> None:
        """Record the gauntlet Job in ``st.gauntlet`` and compose it. Every field is
        derived from trusted inputs: the cluster and endpoint from the candidate's
        serving ModelReplica, the provider config from the InferenceCluster that cluster
        names, the Job's name from the run (:func:`~function.composers.experiment.names.
        gauntlet_job_name`). A recorded ``status.gauntlet`` (the Job composed in an
        earlier call, not observed yet) keeps its ``activeDeadlineSeconds`` (at most
        ``spec.timeout``) and ``startedAt`` (not in the future), so the body is the same
        on every call; any other recorded value that differs is ignored with a Warning
        ``StatusIgnored``."""
        c, st = self.c, self.st
        prev = st.gauntlet
        # Time before the recorded start counts as zero: a clock behind createdAt (skew)
        # never gives the Job more than the timeout.
        created = parse_time(st.candidate.get("createdAt")) or c.now
        remaining = min(
            math.ceil((self.deadline - max(c.now, created)).total_seconds()),
            math.ceil(self.valid.timeout_seconds),
        )
        started = c.now
        if self.job_obs is not None:
            # The Job exists, its record lost with the status (the run admitted again):
            # it keeps the activeDeadlineSeconds it was created with, which Kubernetes
            # counts from the Job's start; the time left now would end it at once.
            manifest = structs.get(self.job_obs, "spec", "forProvider", "manifest")
            ran = whole_count(structs.get(manifest, "spec", "activeDeadlineSeconds"))
            remaining = ran or remaining
            since = parse_time(structs.get(self.job_obs, "metadata", "creationTimestamp"))
            started = since or started
        name = gauntlet_job_name(c.inputs.namespace, st.name, indexed=is_indexed(target.cronjob))
        if prev and self.job_obs is None:
            # The recorded name in either form this run's Job can have (a CronJob that
            # became Indexed keeps the name it recorded: gauntlet_job_name).
            forms = {
                gauntlet_job_name(c.inputs.namespace, st.name, indexed=flag)
                for flag in (False, True)
            }
            if prev["job"] in forms:
                name = prev["job"]
            recorded_start = parse_time(prev.get("startedAt"))
            if recorded_start is not None and recorded_start <= c.now:
                started = recorded_start
            remaining = min(int(prev["activeDeadlineSeconds"]), remaining)
        st.gauntlet = {
            "job": name,
            "cluster": target.cluster,
            "endpoint": target.endpoint,
            "providerConfig": target.provider_config,
            "activeDeadlineSeconds": max(1, remaining),
            "startedAt": format_time(started),
        }
        if prev:
            for key in ("job", "cluster", "endpoint", "providerConfig"):
                if prev.get(key) != st.gauntlet[key]:
                    c.status_ignored(
                        f"status.gauntlet.{key}",
                        prev.get(key),
                        _DERIVED_FROM[key],
                        _shown(st.gauntlet[key]),
                    )
        msg = self.add_job(target.cronjob)
        if msg is not None:
            self.phase("Evaluating", msg)
