"""ModelBackfill: useful background work on a warm model, only while it is idle.

A ModelBackfill runs a one-shot Job, copied from a CronJob's job template, on the
cluster of one of its ModelDeployment's Ready replicas and pointed at that replica's
endpoint, when the deployment has had no foreground request for ``idleFor``. It never
reserves a GPU, never cold-starts, unloads or re-routes a model and never edits the
ModelDeployment: foreground service always wins.

Phases (``status.phase``) and what moves between them::

    WaitingForIdle --(Ready, idle for the whole window, a free Ready replica)--> Starting
    Starting --(the Job has active pods)--> Running
    Starting|Running --(Job Complete)--> Succeeded --(repeatAfter elapsed)--> WaitingForIdle
    Starting|Running --(Job Failed)--> Failed            (until the spec changes)
    Starting|Running --(foreground request, model/replica not Ready, suspend,
                        spec change, deletion, ...)--> Cancelling
    Cancelling --(the Job Object is gone)--> WaitingForIdle | Suspended | Blocked
    any idle phase --(suspend: true)--> Suspended; invalid spec or template --> Blocked

An invalid spec (one the XRD's CEL rules reject) is bad input: the function then keeps
every composed resource as it is and decides nothing (condition ``SpecValid=False``
names the field) until the spec is valid again, which counts as a change of the spec.

Rules and where they come from:

- The foreground signal is the annotation ``modelplane.ai/last-foreground-request``
  (``function.naming.ANNOTATION_LAST_FOREGROUND``) on the ModelDeployment, an RFC 3339
  time. Missing or unparsable means "not known to be idle": nothing starts, and a
  running Job is cancelled. The idle window starts at the latest of that time, the
  last time this backfill saw the model not Ready or stopped a Job
  (``status.notIdleBefore``) and the deployment's Ready transition.
- The function is stateless: every timestamp lives in status, and time comes from
  ``inputs.now``. It asks to be called again (response TTL) when the window ends, when
  the cool-down ends, and every ``poll_seconds`` while a Job is active, since a change
  of the ModelDeployment's annotation does not trigger a reconcile of the backfill.
- One Job per attempt: attempt N has its own Object (composition-resource name
  ``job-N``) and remote Job name, and only Starting and Running desire it. A Job with
  an outcome is dropped (Crossplane deletes the Object and provider-kubernetes the
  remote Job) and never desired again; once provider-kubernetes has created the Job,
  the Object's management policies drop ``Create``, so a Job deleted behind the
  function's back is not re-created either. The Job's ``ttlSecondsAfterFinished`` and
  ``suspend`` are not copied (the function deletes the Job once it recorded the outcome,
  and ``spec.suspend`` of the ModelBackfill is the only switch).
- At most one active backfill Job per ModelReplica across all ModelBackfills of the
  namespace (read from their ``status.phase`` and ``status.replica``). Two backfills that
  started on the same replica at once (each reconciled before the other's status was
  written) are resolved deterministically: the later ``(startedAt, name)`` yields.
- Decisions (and so status transitions, events and metrics) are made only in the call
  whose requirements are all resolved and equal to the ones the request carried, which
  is the call Crossplane's requirements loop ends with. Earlier calls keep everything as
  it is. Each transition is counted once, in the call that records it in status.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.struct_pb2 import ListValue, Struct

from function import API_VERSION
from function.api.modelbackfill import (
    ENDPOINT_ENV,
    Blocked,
    Parsed,
    accelerator_uses,
    parse,
    spec_hash,
)
from function.core import events, structs
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.outcome import Outcome
from function.core.timeutil import elapsed, format_time, parse_time
from function.manifests.jobs import job_from_cronjob
from function.manifests.objects import (
    OBJECT_API_VERSION,
    OBJECT_KIND,
    observed_manifest,
    provider_config_ref,
    remote_object,
    sync_error,
)
from function.naming import (
    ANNOTATION_LAST_FOREGROUND,
    LABEL_BACKFILL,
    LABEL_CLUSTER,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_RUN,
    LABEL_WORKLOAD_CLASS,
    REMOTE_NAMESPACE,
    WORKLOAD_CLASS_BACKGROUND,
    WORKLOAD_CLASS_ENV,
    backfill_job_name,
    backfill_object_name,
    label_value,
    labels_with_full,
)
from function.serving.env import set_env

KIND = "ModelBackfill"
REQ_DEPLOYMENT = "deployment"
REQ_TEMPLATE = "template"
REQ_REPLICAS = "replicas"
REQ_BACKFILLS = "backfills"
REQ_CLUSTER = "cluster"
REQ_JOB = "job-object"
JOB_PREFIX = "job-"
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
ACTIVE = frozenset({STARTING, RUNNING})
# Phases in which a backfill holds its replica (its Job exists or is being deleted).
HOLDING = frozenset({STARTING, RUNNING, CANCELLING})

# A Job still reported running this long after maxRunDuration (its activeDeadlineSeconds)
# is not being observed any more (deleted behind the function's back, cluster gone).
OVERDUE_GRACE_SECONDS = 600.0
# Object management once provider-kubernetes created the Job: everything but Create.
NO_CREATE_POLICIES = ["Observe", "Update", "LateInitialize", "Delete"]

# Status fields this composer writes, in order; empty ones are left out.
_FIELDS = (
    "phase",
    "reason",
    "message",
    "model",
    "cluster",
    "replica",
    "job",
    "idleSince",
    "startedAt",
    "runningSince",
    "attempts",
    "preemptions",
    "completionTime",
    "nextRunTime",
    "lastResult",
    "resultMessage",
    "notIdleBefore",
    "specHash",
)
_INT_FIELDS = frozenset({"attempts", "preemptions"})


class _Pending(Exception):
    """A requirement is not resolved yet: decide nothing in this call."""


@dataclass(frozen=True, slots=True)
class _Cancel:
    """Why an active attempt is cancelled: the metric reason, the status reason, a message."""

    metric: str
    reason: str
    message: str


def _ts(dt: datetime.datetime | None) -> str | None:
    return format_time(dt) if dt is not None else None


def _dur(seconds: float) -> str:
    """A short human duration: ``4m30s``, ``2h0m``, ``45s``."""
    s = int(max(0, round(seconds)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m}m"
    if m:
        return f"{m}m{sec}s" if sec else f"{m}m"
    return f"{sec}s"


def _ready(obj: Any) -> bool:
    return structs.condition_is(obj, "Ready")


def replica_ready(replica: Any) -> bool:
    """A ModelReplica serves: ``Ready=True``, ``ModelReady`` not False, an endpoint, a cluster."""
    if not _ready(replica) or structs.condition_is(replica, "ModelReady", "False"):
        return False
    return bool(
        structs.get_str(replica, "status", "endpoint")
        and structs.get_str(replica, "spec", "clusterName")
    )


def _index(replica: Any) -> float:
    i = structs.get(replica, "spec", "index")
    return float(i) if isinstance(i, (int, float)) and not isinstance(i, bool) else 0.0


def job_outcome(manifest: Any) -> tuple[str, str, datetime.datetime | None] | None:
    """The outcome of an observed batch/v1 Job, or None while it has none.

    Reads the terminal conditions ``Complete`` and ``Failed``
    (https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions),
    never pod counts.

    Returns:
        ``(phase, message, time)`` with phase ``Succeeded`` or ``Failed``; ``time`` is
        the Job's ``completionTime`` or the condition's ``lastTransitionTime`` when
        parseable.
    """
    conds = structs.conditions(manifest)
    done = conds.get("Complete")
    if done is not None and structs.get(done, "status") == "True":
        t = parse_time(structs.get(manifest, "status", "completionTime")) or parse_time(
            structs.get(done, "lastTransitionTime")
        )
        return SUCCEEDED, "the Job completed", t
    failed = conds.get("Failed")
    if failed is not None and structs.get(failed, "status") == "True":
        reason = structs.get_str(failed, "reason") or "Failed"
        msg = structs.get_str(failed, "message")
        return (
            FAILED,
            f"{reason}: {msg}" if msg else reason,
            parse_time(structs.get(failed, "lastTransitionTime")),
        )
    return None


def job_running(manifest: Any) -> bool:
    """The observed Job has at least one active (pending or running) pod."""
    active = structs.get(manifest, "status", "active")
    return isinstance(active, (int, float)) and active >= 1


class _Composer:
    def __init__(self, inputs: Inputs) -> None:
        self.i = inputs
        self.out = Outcome()
        self.now = inputs.now
        self.parsed = parse(inputs.spec)
        self.hash = spec_hash(inputs.spec, self.parsed if isinstance(self.parsed, Parsed) else None)
        self.prior = self._read_status()
        self.st: dict[str, Any] = dict(self.prior)
        if isinstance(self.parsed, Parsed):
            self.model = self.parsed.spec.modelRef.name
        else:  # an invalid spec: the model of the attempt in progress, if any
            self.model = str(self.prior.get("model", ""))
        self.poll = float(max(1, inputs.settings.poll_seconds))

    # ---- status ---------------------------------------------------------------

    def _read_status(self) -> dict[str, Any]:
        st: dict[str, Any] = {}
        for f in _FIELDS:
            v = self.i.status(f)
            if v is None or v == "":
                continue
            if f in _INT_FIELDS:
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < 2**31:
                    continue
                v = int(v)
            elif not isinstance(v, str):
                continue  # a status this function did not write: ignore the field
            st[f] = v
        return st

    def _time(self, field: str) -> datetime.datetime | None:
        return parse_time(self.st.get(field))

    def _set(self, phase: str, reason: str, message: str) -> None:
        self.st["phase"] = phase
        self.st["reason"] = reason
        self.st["message"] = message

    # ---- requirements -----------------------------------------------------------

    def _require_base(self) -> None:
        ns = self.i.namespace
        if isinstance(self.parsed, Parsed):
            self.out.require(
                REQ_TEMPLATE,
                "batch/v1",
                "CronJob",
                match_name=self.parsed.spec.templateRef.name,
                namespace=ns,
            )
        else:
            return
        self.out.require(
            REQ_DEPLOYMENT, API_VERSION, "ModelDeployment", match_name=self.model, namespace=ns
        )
        self.out.require(
            REQ_REPLICAS,
            API_VERSION,
            "ModelReplica",
            match_labels={LABEL_DEPLOYMENT: label_value(self.model)},
            namespace=ns,
        )
        self.out.require(REQ_BACKFILLS, API_VERSION, KIND, match_labels={}, namespace=ns)

    def _get(self, name: str) -> Resolved:
        r = self.i.required(name)
        if r is UNRESOLVED:
            raise _Pending(name)
        assert isinstance(r, Resolved)
        return r

    def _one(self, name: str) -> Struct | None:
        items = self._get(name).items
        return items[0] if items else None

    def _final(self) -> bool:
        """This call's requirements are exactly the resolved ones the request carried."""
        return set(self.out.requirements) == set(self.i.required_resources)

    # ---- metrics and labels -------------------------------------------------------

    def _labels(self) -> dict[str, str]:
        return {"backfill": self.i.name, "namespace": self.i.namespace, "model": self.model}

    def _observe(self, metric: str, value: float = 1.0, **extra: str) -> None:
        self.out.observe(metric, {**self._labels(), **extra}, value)

    # ---- the state machine ----------------------------------------------------------

    def run(self) -> None:
        if isinstance(self.parsed, Blocked):
            self._invalid(self.parsed)
            return
        self._require_base()
        phase = self.prior.get("phase", "")
        if phase in ACTIVE:
            self._active(phase)
        elif phase == CANCELLING:
            self._cancelling()
        else:
            self._admit()

    def _invalid(self, b: Blocked) -> None:
        """An invalid spec (one the XRD's CEL rules reject): decide nothing, delete nothing.

        Every observed child is kept as it is (a Job already created keeps running, up to
        its activeDeadlineSeconds, and is never re-created: its Object no longer allows
        Create); outcomes and cancellations wait until the spec is valid again. With no
        attempt in progress the phase is ``Blocked``.
        """
        self._keep_all()
        phase = str(self.prior.get("phase", ""))
        if phase in HOLDING:
            self._set(
                phase,
                b.reason,
                f"{b.message}; Job {self.st.get('job')} is left as it is until the spec is "
                f"valid again",
            )
            self.out.requeue_after(self.poll)
            return
        self._set(BLOCKED, b.reason, b.message)

    def _deleting(self) -> bool:
        return bool(structs.get_str(self.i.xr, "metadata", "deletionTimestamp"))

    def _foreground(self, deployment: Any) -> datetime.datetime | None:
        return parse_time(
            structs.get(deployment, "metadata", "annotations", ANNOTATION_LAST_FOREGROUND)
        )

    def _holders(self) -> dict[str, list[tuple[str, str, str]]]:
        """Other backfills holding a replica: replica -> [(startedAt, name, phase)]."""
        out: dict[str, list[tuple[str, str, str]]] = {}
        for b in self._get(REQ_BACKFILLS).items:
            name = structs.get_str(b, "metadata", "name")
            if name == self.i.name:
                continue
            phase = structs.get_str(b, "status", "phase")
            replica = structs.get_str(b, "status", "replica")
            if phase in HOLDING and replica:
                started = structs.get_str(b, "status", "startedAt")
                out.setdefault(replica, []).append((started, name, phase))
        for v in out.values():
            v.sort()
        return out

    def _replicas(self) -> dict[str, Struct]:
        return self._get(REQ_REPLICAS).by_name()

    # -- active attempts --

    def _active(self, phase: str) -> None:
        attempt = int(self.st.get("attempts", 0))
        key = f"{JOB_PREFIX}{attempt}"
        obs = self.i.observed_body(key)
        manifest = observed_manifest(obs) if obs is not None else None
        if manifest is not None:
            fin = job_outcome(manifest)
            if fin is not None:
                self._finish(*fin, manifest=manifest)
                return
        cancel = self._cancel_reason(phase)
        if cancel is not None and cancel.metric == "spec_changed":
            assert isinstance(self.parsed, Parsed)
            problem = self._template_problem(self.parsed)
            if problem is not None:
                # The edited spec cannot run (its template is unusable): the running
                # attempt is not given up for it. Bad input loses nothing.
                self._keep_all()
                reason, message = problem
                self.st["reason"] = reason
                self.st["message"] = (
                    f"{message}; Job {self.st.get('job')} keeps running under the previous "
                    f"spec until the new one can replace it"
                )
                self.out.warning(message, reason)
                self.out.requeue_after(self.poll)
                return
        if cancel is not None:
            self._cancel(cancel, exists=obs is not None)
            return
        if obs is None:
            if phase == RUNNING:
                self._cancel(
                    _Cancel(
                        "other",
                        "JobLost",
                        f"Job {self.st.get('job')} disappeared before it finished",
                    ),
                    exists=False,
                )
                return
            # Starting, and Crossplane has not created the Object yet: desire it again.
            self._create(attempt)
            return
        self._keep(key, obs, created=manifest is not None)
        err = sync_error(obs)
        if phase == STARTING and manifest is not None and job_running(manifest):
            self.st["runningSince"] = format_time(self.now)
            self._set(RUNNING, "JobRunning", self._running_message())
        elif phase == STARTING:
            msg = f"Job {self.st.get('job')} on {self.st.get('cluster')} is starting"
            if err:
                msg += f"; the cluster reports: {err}"
            self._set(STARTING, "JobStarting" if not err else "JobNotSynced", msg)
        else:
            self._set(RUNNING, "JobRunning", self._running_message())
        self.out.requeue_after(self.poll)

    def _running_message(self) -> str:
        return (
            f"Job {self.st.get('job')} runs on {self.st.get('cluster')} against replica "
            f"{self.st.get('replica')}; it is cancelled on the next foreground request"
        )

    def _keep(self, key: str, obs: Struct, *, created: bool) -> Struct:
        self.out.keep(key, obs, ready=True)
        body = self.out.resources[key].body
        assert isinstance(body, Struct)
        if created:
            body.get_or_create_struct("spec")["managementPolicies"] = NO_CREATE_POLICIES
        return body

    def _keep_all(self) -> None:
        for key, child in self.i.observed.items():
            if key not in self.out.resources:
                self.out.keep(key, child.resource, ready=True)

    def _cancel_reason(self, phase: str) -> _Cancel | None:
        if self._deleting():
            return _Cancel("other", "Deleting", "the ModelBackfill is being deleted")
        assert isinstance(self.parsed, Parsed)
        if self.hash != self.st.get("specHash"):
            return _Cancel("spec_changed", "SpecChanged", "the spec changed")
        if self.parsed.spec.suspend:
            return _Cancel("suspended", "Suspended", "spec.suspend is true")
        dep = self._one(REQ_DEPLOYMENT)
        replicas = self._replicas()
        holders = self._holders()
        if dep is None:
            return _Cancel("not_ready", "ModelNotFound", f"ModelDeployment {self.model} is gone")
        if not _ready(dep):
            return _Cancel(
                "not_ready", "ModelNotReady", f"ModelDeployment {self.model} is not Ready"
            )
        rname = str(self.st.get("replica", ""))
        rep = replicas.get(rname)
        if rep is None or not replica_ready(rep):
            return _Cancel("not_ready", "ReplicaNotReady", f"replica {rname} is not Ready")
        fg = self._foreground(dep)
        started = self._time("startedAt")
        if fg is None:
            return _Cancel(
                "other",
                "ForegroundSignalUnknown",
                f"the foreground signal ({ANNOTATION_LAST_FOREGROUND}) of ModelDeployment "
                f"{self.model} is missing or not an RFC 3339 time",
            )
        if started is None or fg > started:
            return _Cancel(
                "foreground",
                "PreemptedByForeground",
                f"a foreground request reached {self.model} at {format_time(fg)}",
            )
        mine = (str(self.st.get("startedAt", "")), self.i.name)
        for started_at, other, other_phase in holders.get(rname, []):
            if other_phase in ACTIVE and (started_at, other) < mine:
                return _Cancel(
                    "other",
                    "ReplicaConflict",
                    f"ModelBackfill {other} started on replica {rname} first",
                )
        max_run = self.parsed.max_run_seconds
        if phase == RUNNING and elapsed(started, self.now) > max_run + OVERDUE_GRACE_SECONDS:
            return _Cancel(
                "other",
                "JobOverdue",
                f"Job {self.st.get('job')} still reports running "
                f"{_dur(elapsed(started, self.now))} after it started, past maxRunDuration; "
                f"its state is no longer observed",
            )
        return None

    def _cancel(self, c: _Cancel, *, exists: bool) -> None:
        self._observe("model_backfill_preemptions_total", reason=c.metric)
        running = self._time("runningSince")
        if running is not None:
            self._observe("model_backfill_useful_running_seconds_total", elapsed(running, self.now))
        self.st.pop("runningSince", None)
        self.st["preemptions"] = int(self.st.get("preemptions", 0)) + 1
        self.st["notIdleBefore"] = format_time(self.now)
        job = self.st.get("job")
        if exists:
            self._set(
                CANCELLING,
                c.reason,
                f"cancelling Job {job}: {c.message}; it retries after the next full idle window",
            )
            self.out.requeue_after(self.poll)
            return
        self._admit()
        self.st["message"] = f"Job {job} cancelled ({c.message}); {self.st.get('message', '')}"

    def _cancelling(self) -> None:
        attempt = int(self.st.get("attempts", 0))
        key = f"{JOB_PREFIX}{attempt}"
        job = self.st.get("job")
        if key not in self.i.observed:
            self.out.require(
                REQ_JOB,
                OBJECT_API_VERSION,
                OBJECT_KIND,
                match_name=backfill_object_name(self.i.name, attempt),
                namespace=self.i.namespace,
            )
            if not self._get(REQ_JOB).items:
                self.st["notIdleBefore"] = format_time(self.now)
                self._admit()
                self.st["message"] = f"Job {job} was cancelled; {self.st.get('message', '')}"
                return
        self.st["message"] = f"waiting for Job {job} to be deleted ({self.st.get('reason')})"
        self.out.requeue_after(self.poll)

    def _finish(
        self, result: str, message: str, when: datetime.datetime | None, *, manifest: Any
    ) -> None:
        started = self._time("startedAt")
        end = when if when is not None and when <= self.now else self.now
        if started is not None and end < started:
            end = started
        begin = (
            self._time("runningSince")
            or parse_time(structs.get(manifest, "status", "startTime"))
            or started
        )
        self._observe("model_backfill_completions_total", result=result.lower())
        self._observe("model_backfill_useful_running_seconds_total", elapsed(begin, end))
        self.st.pop("runningSince", None)
        self.st["lastResult"] = result
        self.st["resultMessage"] = message
        self.st["completionTime"] = format_time(end)
        self.st.pop("nextRunTime", None)
        job = self.st.get("job")
        if result == SUCCEEDED:
            text = f"Job {job} completed on {self.st.get('cluster')}"
            if isinstance(self.parsed, Parsed) and self.parsed.repeat_after > 0:
                nxt = end + datetime.timedelta(seconds=self.parsed.repeat_after)
                self.st["nextRunTime"] = format_time(nxt)
                text += f"; the next run is admitted from {format_time(nxt)}"
                self.out.requeue_after(max(1.0, (nxt - self.now).total_seconds()))
            self._set(SUCCEEDED, "JobSucceeded", text)
        else:
            self._set(
                FAILED,
                "JobFailed",
                f"Job {job} failed on {self.st.get('cluster')}: {message}; it is not retried "
                f"until the spec changes",
            )

    # -- admission --

    def _admit(self) -> None:
        if self._deleting():
            self._set(
                self.st.get("phase") or WAITING, "Deleting", "the ModelBackfill is being deleted"
            )
            return
        if isinstance(self.parsed, Parsed) and self.parsed.spec.suspend:
            self._set(SUSPENDED, "Suspended", "spec.suspend is true: no Job is started")
            return
        if isinstance(self.parsed, Blocked):
            self._invalid(self.parsed)
            return
        p = self.parsed
        if self.st.get("specHash") != self.hash:
            for f in ("lastResult", "resultMessage", "completionTime", "nextRunTime"):
                self.st.pop(f, None)
            self.st["specHash"] = self.hash
        last = self.st.get("lastResult")
        if last == FAILED:
            self._set(
                FAILED,
                "JobFailed",
                f"Job {self.st.get('job')} failed at {self.st.get('completionTime')}: "
                f"{self.st.get('resultMessage') or 'no reason given'}; it is not retried until "
                f"the spec changes",
            )
            return
        if last == SUCCEEDED:
            if p.repeat_after <= 0:
                self._set(
                    SUCCEEDED,
                    "JobSucceeded",
                    f"Job {self.st.get('job')} completed at {self.st.get('completionTime')}; "
                    f"repeatAfter is 0 (one-shot)",
                )
                return
            nxt = self._time("nextRunTime")
            if nxt is not None and self.now < nxt:
                self._set(
                    SUCCEEDED,
                    "CoolingDown",
                    f"Job {self.st.get('job')} completed at {self.st.get('completionTime')}; "
                    f"the next run is admitted from {format_time(nxt)}",
                )
                self.out.requeue_after((nxt - self.now).total_seconds())
                return
        self._admit_template_and_model(p)

    def _wait(self, reason: str, message: str, *, ttl: float | None = None) -> None:
        self._set(WAITING, reason, message)
        self.out.requeue_after(ttl if ttl is not None else self.poll)

    def _template_problem(self, p: Parsed) -> tuple[str, str] | None:
        """(reason, message) when the referenced CronJob cannot template a Job, else None."""
        ns = self.i.namespace
        tmpl = self._one(REQ_TEMPLATE)
        if tmpl is None:
            return (
                "TemplateNotFound",
                f"spec.templateRef: CronJob {ns}/{p.spec.templateRef.name} not found",
            )
        uses = accelerator_uses(structs.to_py(tmpl))
        if uses:
            return (
                "GPURequestForbidden",
                f"spec.templateRef: CronJob {ns}/{p.spec.templateRef.name} asks for accelerators "
                f"({', '.join(uses)}); a backfill shares the serving process and never "
                f"reserves a device",
            )
        containers = structs.get(
            tmpl, "spec", "jobTemplate", "spec", "template", "spec", "containers"
        )
        if not isinstance(containers, ListValue) or len(containers) == 0:
            return (
                "InvalidTemplate",
                f"spec.templateRef: CronJob {ns}/{p.spec.templateRef.name} has no "
                f"spec.jobTemplate.spec.template.spec.containers",
            )
        return None

    def _admit_template_and_model(self, p: Parsed) -> None:
        ns = self.i.namespace
        dep = self._one(REQ_DEPLOYMENT)
        replicas = self._replicas()
        holders = self._holders()
        problem = self._template_problem(p)
        if problem is not None:
            self._set(BLOCKED, *problem)
            return
        if dep is None:
            self.st["notIdleBefore"] = format_time(self.now)
            self._wait(
                "ModelNotFound", f"spec.modelRef: ModelDeployment {ns}/{self.model} not found"
            )
            return
        if not _ready(dep):
            self.st["notIdleBefore"] = format_time(self.now)
            self.st.pop("idleSince", None)
            self._wait(
                "ModelNotReady",
                f"ModelDeployment {self.model} is not Ready; backfill never cold-starts a model",
            )
            return
        fg = self._foreground(dep)
        if fg is None:
            self.st.pop("idleSince", None)
            self._wait(
                "ForegroundSignalUnknown",
                f"ModelDeployment {self.model} has no valid {ANNOTATION_LAST_FOREGROUND} "
                f"annotation (an RFC 3339 time); it is not known to be idle",
            )
            return
        since = fg
        for t in (self._time("notIdleBefore"), self._ready_since(dep)):
            if t is not None and t > since:
                since = t
        self.st["idleSince"] = format_time(since)
        idle = elapsed(since, self.now)
        if idle < p.idle_for:
            left = p.idle_for - idle
            self._wait(
                "NotIdle",
                f"{self.model} idle for {_dur(idle)} of {_dur(p.idle_for)} (since "
                f"{format_time(since)}); admission at {format_time(since + _td(p.idle_for))} "
                f"if no foreground request arrives",
                ttl=min(left, float(getattr(self.i.settings, "default_ttl_seconds", 60))),
            )
            return
        ready = sorted(
            (r for r in replicas.values() if replica_ready(r)),
            key=lambda r: (_index(r), structs.get_str(r, "metadata", "name")),
        )
        if not ready:
            self._wait("NoReadyReplica", f"ModelDeployment {self.model} has no Ready replica")
            return
        free = [r for r in ready if structs.get_str(r, "metadata", "name") not in holders]
        if not free:
            busy = "; ".join(
                f"{rep}: {', '.join(n for _, n, _ in hs)}"
                for rep, hs in sorted(holders.items())
                if rep in {structs.get_str(r, "metadata", "name") for r in ready}
            )
            self._wait(
                "ReplicaBusy",
                f"every Ready replica of {self.model} already runs a backfill Job ({busy})",
            )
            return
        replica = free[0]
        tmpl = self._one(REQ_TEMPLATE)
        assert tmpl is not None  # _template_problem found it
        self._start(p, replica, structs.to_py(tmpl))

    def _ready_since(self, dep: Any) -> datetime.datetime | None:
        c = structs.conditions(dep).get("Ready")
        return parse_time(structs.get(c, "lastTransitionTime")) if c is not None else None

    def _cluster(self, cluster_name: str) -> dict[str, str] | None:
        self.out.require(REQ_CLUSTER, API_VERSION, "InferenceCluster", match_name=cluster_name)
        c = self._one(REQ_CLUSTER)
        return provider_config_ref(c) if c is not None else None

    def _start(self, p: Parsed, replica: Struct, cronjob: dict[str, Any]) -> None:
        cluster = structs.get_str(replica, "spec", "clusterName")
        pc = self._cluster(cluster)
        if pc is None:
            self._wait(
                "ClusterNotReady",
                f"InferenceCluster {cluster} of replica "
                f"{structs.get_str(replica, 'metadata', 'name')} is missing or reports no "
                f"status.providerConfigRef",
            )
            return
        attempt = int(self.st.get("attempts", 0)) + 1
        self.st["attempts"] = attempt
        self.st["model"] = self.model
        self.st["cluster"] = cluster
        self.st["replica"] = structs.get_str(replica, "metadata", "name")
        self.st["startedAt"] = format_time(self.now)
        self.st.pop("runningSince", None)
        self.st.pop("completionTime", None)
        self.st.pop("nextRunTime", None)
        self.st.pop("lastResult", None)
        self.st.pop("resultMessage", None)
        self.st["specHash"] = self.hash
        self._emit_job(p, attempt, replica, cronjob, pc)
        self._observe("model_backfill_starts_total")
        self._set(
            STARTING,
            "JobCreated",
            f"{self.model} idle since {self.st.get('idleSince')}: started Job {self.st['job']} "
            f"(attempt {attempt}) on {cluster} against replica {self.st['replica']}",
        )
        self.out.requeue_after(self.poll)

    def _create(self, attempt: int) -> None:
        """Desire attempt ``attempt``'s Object again (Starting, not created yet)."""
        assert isinstance(self.parsed, Parsed)
        tmpl = self._one(REQ_TEMPLATE)
        rep = self._replicas().get(str(self.st.get("replica", "")))
        cluster = str(self.st.get("cluster", ""))
        pc = self._cluster(cluster)
        if tmpl is None or rep is None or pc is None:
            what = (
                "its CronJob is gone"
                if tmpl is None
                else "its replica is gone"
                if rep is None
                else f"InferenceCluster {cluster} reports no provider config"
            )
            self._cancel(
                _Cancel("other", "CannotCreate", f"cannot create the Job: {what}"), exists=False
            )
            return
        self._emit_job(self.parsed, attempt, rep, structs.to_py(tmpl), pc)
        self._set(
            STARTING,
            "JobCreated",
            f"Job {self.st.get('job')} (attempt {attempt}) on {cluster} is being created",
        )
        self.out.requeue_after(self.poll)

    def _emit_job(
        self,
        p: Parsed,
        attempt: int,
        replica: Struct,
        cronjob: dict[str, Any],
        pc: Mapping[str, str],
    ) -> None:
        ns = self.i.namespace
        job_name = backfill_job_name(ns, self.i.name, attempt)
        cluster = structs.get_str(replica, "spec", "clusterName")
        endpoint = structs.get_str(replica, "status", "endpoint")
        labels, ann = labels_with_full(
            {
                LABEL_BACKFILL: self.i.name,
                LABEL_DEPLOYMENT: self.model,
                LABEL_COMPONENT: "backfill",
                LABEL_RUN: str(attempt),
                LABEL_WORKLOAD_CLASS: WORKLOAD_CLASS_BACKGROUND,
            }
        )
        job = job_from_cronjob(
            cronjob,
            name=job_name,
            namespace=REMOTE_NAMESPACE,
            labels=labels,
            env=p.env,
            active_deadline_seconds=p.max_run_seconds,
            annotations=ann or None,
        )
        job["spec"].pop("ttlSecondsAfterFinished", None)
        job["spec"].pop("suspend", None)
        # First in every container (init and regular), so that the template's own
        # entries can use $(MODELPLANE_ENDPOINT): Kubernetes expands $(VAR) in an env
        # value only from entries defined earlier.
        injected = [
            {"name": WORKLOAD_CLASS_ENV, "value": WORKLOAD_CLASS_BACKGROUND},
            {"name": ENDPOINT_ENV, "value": endpoint},
            # Hide every GPU from the NVIDIA container runtime even where a node's default
            # runtime would expose them to a pod without a device request.
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        ]
        pod_spec = job["spec"]["template"]["spec"]
        for group in ("initContainers", "containers"):
            for c in pod_spec.get(group) or []:
                if isinstance(c, dict):
                    set_env(c, injected, first=True)
        obj_labels, obj_ann = labels_with_full(
            {
                LABEL_BACKFILL: self.i.name,
                LABEL_DEPLOYMENT: self.model,
                LABEL_CLUSTER: cluster,
                LABEL_COMPONENT: "backfill",
            }
        )
        obj = remote_object(
            backfill_object_name(self.i.name, attempt),
            ns,
            dict(pc),
            job,
            labels=obj_labels,
            annotations=obj_ann or None,
            deletion_policy="Foreground",
        )
        self.out.add(f"{JOB_PREFIX}{attempt}", obj, ready=True)
        self.st["job"] = job_name

    # ---- output -------------------------------------------------------------------

    def finish(self) -> Outcome:
        out = self.out
        phase = self.st.get("phase") or WAITING
        self.st["phase"] = phase
        if not self.st.get("message"):
            self.st["message"] = phase
        if not self.st.get("reason"):
            self.st["reason"] = phase
        for f in _FIELDS:
            v = self.st.get(f)
            if v is not None and v != "":
                out.status[f] = v
        active = phase in ACTIVE
        out.condition(
            CONDITION,
            "True" if active else "False",
            str(self.st["reason"]),
            str(self.st["message"]),
        )
        if isinstance(self.parsed, Blocked):
            out.condition(SPEC_CONDITION, "False", self.parsed.reason, self.parsed.message)
        else:
            out.condition(SPEC_CONDITION, "True", "Valid", "the spec is valid")
        out.ready = phase not in (BLOCKED, FAILED)
        old = self.prior.get("phase")
        if old != phase or (phase == BLOCKED and self.prior.get("reason") != self.st["reason"]):
            events.transition(
                out,
                old if old != phase else None,
                phase,
                str(self.st["message"]),
                reason=f"Backfill{phase}" if phase != BLOCKED else str(self.st["reason"]),
            )
        return out

    def pending(self) -> Outcome:
        """Decide nothing: keep what exists, repeat the last status, ask for requirements."""
        out = Outcome(requirements=dict(self.out.requirements))
        for key, child in self.i.observed.items():  # not known is not empty: keep all
            out.keep(key, child.resource, ready=True)
        for f in _FIELDS:
            if f in self.prior:
                out.status[f] = self.prior[f]
        out.requeue_after(self.poll)
        return out


def _td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelBackfill (see the module docstring for the rules).

    Args:
        inputs: The request's view; requirements used: ``deployment`` (ModelDeployment
            by name), ``template`` (CronJob by name), ``replicas`` (ModelReplicas labelled
            ``modelplane.ai/deployment``), ``backfills`` (every ModelBackfill of the
            namespace), ``cluster`` (the InferenceCluster a Job goes to) and, while
            cancelling, ``job-object`` (the attempt's Object by name).

    Returns:
        The outcome: at most one Object (the active attempt's Job), the status fields
        ``phase, reason, message, model, cluster, replica, job, idleSince, startedAt,
        runningSince, attempts, preemptions, completionTime, nextRunTime, lastResult,
        resultMessage, notIdleBefore, specHash``, the conditions ``Backfilling`` and
        ``SpecValid``, and lifecycle metric observations for the transitions recorded.
    """
    c = _Composer(inputs)
    try:
        c.run()
    except _Pending:
        return c.pending()
    if not c._final():
        return c.pending()
    return c.finish()
