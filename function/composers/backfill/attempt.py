"""ModelBackfill: an attempt in progress (Starting, Running) and its cancellation.

Foreground service always wins: a foreground request, the model or replica no longer
Ready, suspend, a spec change, deletion, a replica conflict, a Job deleted on its
cluster or a Job that is no longer observed cancels the attempt (``Cancelling`` until
its Object is gone). A Job with an outcome is recorded once and dropped.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from google.protobuf.struct_pb2 import Struct

from function.api.modelbackfill import Parsed
from function.composers.backfill.admit import (
    admit,
    dur,
    emit_job,
    provider_config,
    require_cluster,
    template_problem,
)
from function.composers.backfill.call import Call
from function.composers.backfill.children import (
    Attempt,
    Watched,
    job_key,
    keep_job,
    observer_key,
    observer_object,
)
from function.composers.backfill.observed import (
    REQ_JOB,
    JobOutcome,
    Required,
    foreground,
    job_outcome,
    job_running,
    ready,
    replica_ready,
    replica_uid,
)
from function.composers.backfill.status import (
    ACTIVE,
    CANCELLING,
    FAILED,
    RUNNING,
    STARTING,
    SUCCEEDED,
)
from function.core import structs
from function.core.inputs import Resolved
from function.core.timeutil import elapsed, format_time, parse_time
from function.manifests.objects import (
    MESSAGE_REMOTE_NOT_FOUND,
    OBJECT_API_VERSION,
    OBJECT_KIND,
    observed_manifest,
    remote_not_found,
    sync_error,
)
from function.naming import (
    ANNOTATION_LAST_FOREGROUND,
    backfill_object_name,
    backfill_observer_name,
)

# A Job still reported running this long after maxRunDuration (its activeDeadlineSeconds)
# is not being observed any more (the cluster or provider-kubernetes gone; a Job deleted
# on the cluster is reported by its observer, _gone_reason, unless the observer was never
# observed). Its bound is
# provider-kubernetes' poll of the Job's Object, which is not Ready while the Job runs
# (function.manifests.jobs.JOB_FINISHED_CEL): v1.3.1 observes an Object that is not
# Ready every 30 s (its poll interval hook, internal/controller/namespaced/object/
# object.go) plus --poll-jitter-percentage (default 10, below 100): under 60 s. The
# Job's own deadline counts from its startTime, set within seconds of the Object's first
# observation. 600 s is ten of those polls. (A Ready Object is observed every --poll,
# 10 min by default, plus the jitter: longer than this grace, which is why the Object
# must not be Ready while the Job runs: review 19d F6.)
OVERDUE_GRACE_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class Cancel:
    """Why an active attempt is cancelled: the metric reason, the status reason, a message."""

    metric: str
    reason: str
    message: str


def active(c: Call, p: Parsed, req: Required, phase: str) -> bool:
    """Starting or Running: record an outcome, cancel, (re-)create, or keep the Job.

    Returns:
        False when a requirement is not resolved yet (decide nothing), else True.
    """
    attempt = c.st.attempts or 0
    key = job_key(attempt)
    obs = c.inputs.observed_body(key)
    manifest = observed_manifest(obs) if obs is not None else None
    if manifest is not None and (outcome := job_outcome(manifest)) is not None:
        return _outcome(c, p, req, outcome, manifest)
    cancel = cancel_reason(c, p, req, phase)
    if cancel is not None and cancel.metric == "spec_changed":
        # The edited spec cannot run: a Job that exists keeps running under the previous
        # one, unless something else stops it anyway (foreground service always wins).
        other = cancel_reason(c, p, req, phase, spec_change=False)
        problem = template_problem(c, p, req)
        # Kept only while the Job exists on the cluster: an Object whose Job was never
        # created (refused) runs nothing under any spec (found by a review).
        if problem is not None and other is None and manifest is not None:
            _keep_previous_spec(c, phase, manifest, *problem)
            _watch(c, attempt, obs)
            return True
    if cancel is not None:
        return cancel_attempt(c, p, req, cancel, exists=obs is not None)
    if obs is None and phase == RUNNING:
        lost = Cancel("other", "JobLost", f"Job {c.st.job} disappeared before it finished")
        return cancel_attempt(c, p, req, lost, exists=False)
    if obs is None:
        # Starting, and Crossplane has not created the Object yet: desire it again.
        return create(c, p, req, attempt)
    _progress(c, phase, key, obs, manifest)
    if manifest is not None:
        _watch(c, attempt, obs)
    return True


def _watch(c: Call, attempt: int, obs: Struct) -> None:
    """Desire the attempt's observer (:func:`~.children.observer_object`), once its Job's
    Object has reported the Job (so the observer's first observation comes after the Job
    existed: any "does not exist" it reports means the Job was deleted since)."""
    st = c.st
    watched = Watched(
        c.inputs.name, c.inputs.namespace, st.model or c.model, st.cluster or "", attempt
    )
    body = observer_object(obs, watched)
    if body is not None:
        c.out.add(observer_key(attempt), body, ready=True)


def _outcome(c: Call, p: Parsed, req: Required, outcome: JobOutcome, manifest: Any) -> bool:
    """Record the Job's outcome, unless it failed while its replica no longer serves it
    (gone, replaced, being deleted, not Ready): that is no failure of the backfill (which
    would be terminal until the spec changes) but a cancellation for that reason.

    Returns:
        False when a requirement is not resolved yet (decide nothing), else True.
    """
    gone = _replica_reason(c, req) if outcome.phase == FAILED else None
    if gone is None:
        finish_attempt(c, p, outcome, manifest)
        return True
    failed = Cancel(
        gone.metric,
        gone.reason,
        f"Job {c.st.job} failed ({outcome.message}) while {gone.message}; not counted as a failure",
    )
    return cancel_attempt(c, p, req, failed, exists=True)


def _keep_previous_spec(c: Call, phase: str, manifest: Any, reason: str, message: str) -> None:
    """The edited spec cannot run (its template is unusable): the running attempt is not
    given up for it. Bad input loses nothing. The phase still follows the observed Job
    (:func:`_running`: Starting becomes Running once it has active pods); only the reason
    and the message say that the edit is held (found by review 17n: a held Starting
    attempt stayed Starting, with no ``runningSince``, while its Job ran)."""
    c.keep_all()
    entering = c.st.reason != reason
    c.st.set(
        RUNNING if _running(c, phase, manifest) else STARTING,
        reason,
        f"{message}; Job {c.st.job} keeps running under the previous "
        f"spec until the new one can replace it",
    )
    if entering:  # one Warning event on entry, not one per reconcile
        c.out.warning(message, reason)
    c.out.requeue_after(c.poll)


def _running(c: Call, phase: str, manifest: Any) -> bool:
    """Whether the attempt in ``phase`` (Starting or Running) is Running now, from its
    observed Job (``manifest``, None before the Object reports one). Starting becomes
    Running, and ``status.runningSince`` this call's time, the first time the Job has
    active pods; so ``runningSince`` is written once, never re-stamped."""
    if phase == STARTING and manifest is not None and job_running(manifest):
        c.st.running_since = format_time(c.now)
        return True
    return phase == RUNNING


def _progress(c: Call, phase: str, key: str, obs: Struct, manifest: Any) -> None:
    """Keep the Job; Starting becomes Running once the Job has active pods."""
    st = c.st
    keep_job(c.out, key, obs, created=manifest is not None)
    err = sync_error(obs)
    if _running(c, phase, manifest):
        st.set(RUNNING, "JobRunning", _running_message(c))
    else:
        msg = f"Job {st.job} on {st.cluster} is starting"
        if err:
            msg += f"; the cluster reports: {err}"
        st.set(STARTING, "JobStarting" if not err else "JobNotSynced", msg)
    c.out.requeue_after(c.poll)


def _running_message(c: Call) -> str:
    return (
        f"Job {c.st.job} runs on {c.st.cluster} against replica "
        f"{c.st.replica}; it is cancelled on the next foreground request"
    )


def cancel_reason(
    c: Call, p: Parsed, req: Required, phase: str, *, spec_change: bool = True
) -> Cancel | None:
    """Why the attempt in progress must stop now, or None (checked in this order;
    ``spec_change`` False: a changed spec is not a reason)."""
    return (
        _own_reason(c, p, spec_change)
        or _serving_reason(c, req)
        or _foreground_reason(c, req)
        or _conflict_reason(c, req)
        or _gone_reason(c)
        or _overdue_reason(c, p, phase)
    )


def _own_reason(c: Call, p: Parsed, spec_change: bool) -> Cancel | None:
    """The ModelBackfill itself: deleted, its spec changed, or suspended."""
    if c.deleting():
        return Cancel("other", "Deleting", "the ModelBackfill is being deleted")
    if spec_change and c.hash != c.st.spec_hash:
        return Cancel("spec_changed", "SpecChanged", "the spec changed")
    if p.spec.suspend:
        return Cancel("suspended", "Suspended", "spec.suspend is true")
    return None


def _serving_reason(c: Call, req: Required) -> Cancel | None:
    """The model or the attempt's replica no longer serves."""
    dep = req.deployment
    if dep is None:
        return Cancel("not_ready", "ModelNotFound", f"ModelDeployment {c.model} is gone")
    if not ready(dep):
        return Cancel("not_ready", "ModelNotReady", f"ModelDeployment {c.model} is not Ready")
    return _replica_reason(c, req)


def _replica_reason(c: Call, req: Required) -> Cancel | None:
    """The attempt's replica no longer serves its Job: gone, replaced (the ModelReplica of
    that name has another ``metadata.uid`` than ``status.replicaUID``, or is on another
    cluster than ``status.cluster``: deleted and created again, on another cluster after a
    scale-down and up), being deleted (its status still says Ready), or not Ready.

    An attempt recorded without ``replicaUID`` (before it existed), or a replica that
    reports no uid, is compared by cluster only.
    """
    st = c.st
    rname = st.replica or ""
    rep = req.replicas.get(rname)
    if rep is None:
        return Cancel("not_ready", "ReplicaNotReady", f"replica {rname} is gone")
    uid = replica_uid(rep)
    cluster = structs.get_str(rep, "spec", "clusterName")
    if cluster != (st.cluster or "") or (st.replica_uid and uid and uid != st.replica_uid):
        was = f"uid {st.replica_uid}, " if st.replica_uid else ""
        return Cancel(
            "not_ready",
            "ReplicaReplaced",
            f"replica {rname} was deleted and created again (uid {uid or 'unknown'}, on "
            f"{cluster or 'no cluster'}); the Job's replica ({was}on {st.cluster}) is gone",
        )
    if structs.being_deleted(rep):
        return Cancel("not_ready", "ReplicaNotReady", f"replica {rname} is being deleted")
    if not replica_ready(rep):
        return Cancel("not_ready", "ReplicaNotReady", f"replica {rname} is not Ready")
    return None


def _foreground_reason(c: Call, req: Required) -> Cancel | None:
    """A foreground request arrived since the attempt started (or none is known)."""
    fg = foreground(req.deployment)
    started = parse_time(c.st.started_at)
    if fg is None:
        return Cancel(
            "other",
            "ForegroundSignalUnknown",
            f"the foreground signal ({ANNOTATION_LAST_FOREGROUND}) of ModelDeployment "
            f"{c.model} is missing or not an RFC 3339 time",
        )
    # Both are whole seconds (startedAt is written so; producers stamp requests so): a
    # request in the second the attempt started may have come after it, and foreground
    # service always wins, so it cancels (found by a review: it was ignored).
    if started is None or fg >= started:
        return Cancel(
            "foreground",
            "PreemptedByForeground",
            f"a foreground request reached {c.model} at {format_time(fg)}",
        )
    return None


def _conflict_reason(c: Call, req: Required) -> Cancel | None:
    """Another backfill started on the same replica first (the later (startedAt, name)
    yields)."""
    rname = c.st.replica or ""
    mine = (c.st.started_at or "", c.inputs.name)
    for started_at, other, other_phase in req.holders.get(rname, []):
        if other_phase in ACTIVE and (started_at, other) < mine:
            return Cancel(
                "other",
                "ReplicaConflict",
                f"ModelBackfill {other} started on replica {rname} first",
            )
    return None


def _gone_reason(c: Call) -> Cancel | None:
    """The attempt's Job was deleted on its cluster: its observer (``observer-<N>``,
    desired only once the Job's Object reported the Job) reports that it does not exist
    (:func:`function.manifests.objects.remote_not_found`), and the Job's Object still
    holds its last observation of the Job (it always does: provider-kubernetes keeps
    ``status.atProvider`` when the Job is gone). Checked before :func:`_overdue_reason`,
    which would otherwise end the attempt only 10 minutes past maxRunDuration."""
    attempt = c.st.attempts or 0
    observer = c.inputs.observed_body(observer_key(attempt))
    if observer is None or not remote_not_found(observer):
        return None
    job_obj = c.inputs.observed_body(job_key(attempt))
    if job_obj is None or observed_manifest(job_obj) is None:
        return None
    return Cancel(
        "other",
        "JobNotFound",
        f"Job {c.st.job} no longer exists on {c.st.cluster}: it was deleted there "
        f"(Object {backfill_observer_name(c.inputs.name, attempt)} reports "
        f'"{MESSAGE_REMOTE_NOT_FOUND}")',
    )


def _overdue_reason(c: Call, p: Parsed, phase: str) -> Cancel | None:
    """The attempt outlived maxRunDuration (and a grace): a Job that still reports
    running is not observed any more; one still Starting never started (the cluster
    refused to create it, a quota say: found by a review, the attempt held its replica
    for ever)."""
    running = elapsed(parse_time(c.st.started_at), c.now)
    if phase not in (STARTING, RUNNING) or running <= p.max_run_seconds + OVERDUE_GRACE_SECONDS:
        return None
    if phase == STARTING:
        return Cancel(
            "other",
            "JobNotStarted",
            f"Job {c.st.job} did not start within maxRunDuration ({dur(running)} since the "
            f"attempt began){'; ' + c.st.message if c.st.message else ''}",
        )
    return Cancel(
        "other",
        "JobOverdue",
        f"Job {c.st.job} still reports running {dur(running)} after it started, past "
        f"maxRunDuration; its state is no longer observed",
    )


def cancel_attempt(c: Call, p: Parsed, req: Required, cancel: Cancel, *, exists: bool) -> bool:
    """Stop the attempt: Cancelling while its Object exists, else admit again at once.

    Returns:
        False when a requirement is not resolved yet (decide nothing), else True.
    """
    st = c.st
    c.observe("model_backfill_preemptions_total", reason=cancel.metric)
    running = parse_time(st.running_since)
    if running is not None:
        c.observe("model_backfill_useful_running_seconds_total", elapsed(running, c.now))
    st.running_since = None
    st.preemptions = (st.preemptions or 0) + 1
    c.mark_not_idle()
    job = st.job
    if exists:
        st.set(
            CANCELLING,
            cancel.reason,
            f"cancelling Job {job}: {cancel.message}; it retries after the next full idle window",
        )
        c.out.requeue_after(c.poll)
        return True
    if not admit(c, p, req):
        return False
    st.message = f"Job {job} cancelled ({cancel.message}); {st.message or ''}"
    return True


def require_job_object(c: Call) -> None:
    """Cancelling, and the attempt's Object is no longer observed: ask whether it still
    exists (Crossplane deletes it in the background)."""
    attempt = c.st.attempts or 0
    if job_key(attempt) not in c.inputs.observed:
        c.out.require(
            REQ_JOB,
            OBJECT_API_VERSION,
            OBJECT_KIND,
            match_name=backfill_object_name(c.inputs.name, attempt),
            namespace=c.inputs.namespace,
        )


def cancelling(c: Call, p: Parsed, req: Required) -> bool:
    """Wait until the cancelled attempt's Object is gone, then admit again.

    Returns:
        False when a requirement is not resolved yet (decide nothing), else True.
    """
    st = c.st
    job = st.job
    if job_key(st.attempts or 0) not in c.inputs.observed:
        objects = c.inputs.required(REQ_JOB)
        assert isinstance(objects, Resolved)  # required by require_job_object, resolved
        if not objects.items:
            c.mark_not_idle()
            if not admit(c, p, req):
                return False
            st.message = f"Job {job} was cancelled; {st.message or ''}"
            return True
    st.message = f"waiting for Job {job} to be deleted ({st.reason})"
    c.out.requeue_after(c.poll)
    return True


def create(c: Call, p: Parsed, req: Required, attempt: int) -> bool:
    """Desire attempt ``attempt``'s Object again (Starting, not created yet).

    Returns:
        False when a requirement is not resolved yet (decide nothing), else True.
    """
    tmpl = req.template
    rep = req.replicas.get(c.st.replica or "")
    cluster = c.st.cluster or ""
    got = require_cluster(c, cluster)
    if got is None:
        return False
    pc = provider_config(got)
    what = None
    if tmpl is None:
        what = "its CronJob is gone"
    elif rep is None:
        what = "its replica is gone"
    elif pc is None:
        what = f"InferenceCluster {cluster} reports no provider config"
    elif (problem := template_problem(c, p, req)) is not None:
        what = f"its CronJob can no longer template it ({problem[0]})"
    if what is not None:
        return cancel_attempt(
            c,
            p,
            req,
            Cancel("other", "CannotCreate", f"cannot create the Job: {what}"),
            exists=False,
        )
    assert rep is not None and pc is not None  # what is None: all of them found
    emit_job(
        c,
        p,
        Attempt(c.inputs.name, c.inputs.namespace, c.model, attempt, rep, pc),
        tmpl,
    )
    c.st.set(
        STARTING,
        "JobCreated",
        f"Job {c.st.job} (attempt {attempt}) on {cluster} is being created",
    )
    c.out.requeue_after(c.poll)
    return True


def finish_attempt(c: Call, p: Parsed, outcome: JobOutcome, manifest: Any) -> None:
    """Record the Job's outcome (once) and its useful running time; drop the Job."""
    st = c.st
    started = parse_time(st.started_at)
    when = outcome.time
    end = when if when is not None and when <= c.now else c.now
    if started is not None and end < started:
        end = started
    begin = (
        parse_time(st.running_since)
        or parse_time(structs.get(manifest, "status", "startTime"))
        or started
    )
    c.observe("model_backfill_completions_total", result=outcome.phase.lower())
    c.observe("model_backfill_useful_running_seconds_total", elapsed(begin, end))
    st.running_since = None
    st.last_result = outcome.phase
    st.result_message = outcome.message
    st.completion_time = format_time(end)
    st.next_run_time = None
    if outcome.phase != SUCCEEDED:
        st.set(
            FAILED,
            "JobFailed",
            f"Job {st.job} failed on {st.cluster}: {outcome.message}; it is not retried "
            f"until the spec changes",
        )
        return
    text = f"Job {st.job} completed on {st.cluster}"
    if p.repeat_after > 0:
        nxt = end + datetime.timedelta(seconds=p.repeat_after)
        st.next_run_time = format_time(nxt)
        text += f"; the next run is admitted from {format_time(nxt)}"
        c.out.requeue_after(max(1.0, (nxt - c.now).total_seconds()))
    st.set(SUCCEEDED, "JobSucceeded", text)
