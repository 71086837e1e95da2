"""ModelBackfill admission: start a Job only on a Ready model that has been idle for the
whole window, on a Ready replica no other backfill holds.

The idle window starts at the latest of the deployment's last foreground request
(``modelplane.ai/last-foreground-request``), ``status.notIdleBefore`` (see
:meth:`~function.composers.backfill.call.Call.note_model_wait`) and the deployment's
Ready transition. A missing or unparsable foreground signal means "not known to be
idle". A Succeeded run is admitted again after ``repeatAfter``; a Failed one only after
a spec change. Messages name instants, never durations counted to now (a status must
not change while nothing does).
"""

from __future__ import annotations

import datetime

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.inferencecluster import provider_config_ref
from function.api.modelbackfill import Parsed, accelerator_uses
from function.composers.backfill.call import Call
from function.composers.backfill.children import Attempt, job_key, job_object
from function.composers.backfill.observed import (
    REQ_CLUSTER,
    Required,
    foreground,
    ready,
    ready_since,
    replica_index,
    replica_ready,
    replica_uid,
)
from function.composers.backfill.status import (
    BLOCKED,
    FAILED,
    MODEL_NOT_FOUND,
    MODEL_NOT_READY,
    STARTING,
    SUCCEEDED,
    SUSPENDED,
    WAITING,
)
from function.core import structs, versioned
from function.core.inputs import Resolved
from function.core.timeutil import elapsed, format_time, parse_time
from function.manifests.jobs import cronjob_problem, env_copies_problem
from function.naming import ANNOTATION_LAST_FOREGROUND


def dur(seconds: float) -> str:
    """A short human duration: ``4m30s``, ``2h0m``, ``45s``."""
    s = int(max(0, round(seconds)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m}m"
    if m:
        return f"{m}m{sec}s" if sec else f"{m}m"
    return f"{sec}s"


def admit(c: Call, p: Parsed, req: Required) -> bool:
    """No attempt in progress: admit one if everything allows it.

    Returns:
        False when a requirement is not resolved yet (decide nothing), else True.
    """
    st = c.st
    if _stopped(c, p):
        return True
    if st.spec_hash != c.hash:
        st.clear_result()
        st.spec_hash = c.hash
    if _held_by_result(c, p):
        return True
    problem = template_problem(c, p, req)
    if problem is not None:
        st.set(BLOCKED, *problem)
        return True
    if _idle_since(c, p, req.deployment) is None:
        return True
    replica = _free_replica(c, req)
    if replica is None:
        return True
    assert req.template is not None  # template_problem found it
    return start(c, p, replica, req.template)


def _stopped(c: Call, p: Parsed) -> bool:
    """Nothing starts while the ModelBackfill is being deleted or suspended."""
    if c.deleting():
        c.st.set(c.st.phase or WAITING, "Deleting", "the ModelBackfill is being deleted")
        return True
    if p.spec.suspend:
        c.st.set(SUSPENDED, "Suspended", "spec.suspend is true: no Job is started")
        return True
    return False


def _held_by_result(c: Call, p: Parsed) -> bool:
    """The last attempt's outcome holds the next one back: Failed until the spec changes,
    Succeeded for good (one-shot) or until ``nextRunTime``."""
    st = c.st
    if st.last_result == FAILED:
        st.set(
            FAILED,
            "JobFailed",
            f"Job {st.job} failed at {st.completion_time}: "
            f"{st.result_message or 'no reason given'}; it is not retried until "
            f"the spec changes",
        )
        return True
    if st.last_result != SUCCEEDED:
        return False
    if p.repeat_after <= 0:
        st.set(
            SUCCEEDED,
            "JobSucceeded",
            f"Job {st.job} completed at {st.completion_time}; repeatAfter is 0 (one-shot)",
        )
        return True
    nxt = parse_time(st.next_run_time)
    if nxt is not None and c.now < nxt:
        st.set(
            SUCCEEDED,
            "CoolingDown",
            f"Job {st.job} completed at {st.completion_time}; "
            f"the next run is admitted from {format_time(nxt)}",
        )
        c.out.requeue_after((nxt - c.now).total_seconds())
        return True
    return False


@versioned.reading(1024)
def _accelerator_uses(cronjob: Struct) -> tuple[str, ...]:
    """:func:`accelerator_uses` of a CronJob (kept by its uid and resourceVersion)."""
    return tuple(accelerator_uses(structs.to_py(cronjob)))


def template_problem(c: Call, p: Parsed, req: Required) -> tuple[str, str] | None:
    """(reason, message) when the referenced CronJob cannot template a Job, else None."""
    ref = f"CronJob {c.inputs.namespace}/{p.spec.templateRef.name}"
    tmpl = req.template
    if tmpl is None:
        return ("TemplateNotFound", f"spec.templateRef: {ref} not found")
    uses = _accelerator_uses(tmpl)
    if uses:
        return (
            "GPURequestForbidden",
            f"spec.templateRef: {ref} asks for accelerators "
            f"({', '.join(uses)}); a backfill shares the serving process and never "
            f"reserves a device",
        )
    problem = cronjob_problem(tmpl) or env_copies_problem(tmpl, p.env, "spec.env")
    if problem:
        return ("InvalidTemplate", f"spec.templateRef: {ref}: {problem}")
    return None


def _idle_since(c: Call, p: Parsed, dep: Struct | None) -> datetime.datetime | None:
    """When the model became idle, if it has been idle for the whole window; else None
    (the backfill waits, with the reason)."""
    st = c.st
    # While the model is missing or not Ready, status.notIdleBefore keeps the instant
    # the wait began (Call.note_model_wait, in finish): re-stamping it on every call
    # would write the status, and so reconcile again, on every call.
    if dep is None:
        c.wait(
            MODEL_NOT_FOUND,
            f"spec.modelRef: ModelDeployment {c.inputs.namespace}/{c.model} not found",
        )
        return None
    if not ready(dep):
        st.idle_since = None
        c.wait(
            MODEL_NOT_READY,
            f"ModelDeployment {c.model} is not Ready; backfill never cold-starts a model",
        )
        return None
    if c.prior.waiting_on_model():
        # The wait ends in this call: no window starts before now, which is at or after
        # the last call that saw the model missing or not Ready (not at the deployment's
        # Ready transition: another clock's, or a cached read, which may come before
        # that call; review 15d). Stamped here, before the window is read below.
        c.mark_not_idle()
    fg = foreground(dep)
    if fg is None:
        st.idle_since = None
        c.wait(
            "ForegroundSignalUnknown",
            f"ModelDeployment {c.model} has no valid {ANNOTATION_LAST_FOREGROUND} "
            f"annotation (an RFC 3339 time); it is not known to be idle",
        )
        return None
    since = fg
    for t in (parse_time(st.not_idle_before), ready_since(dep)):
        if t is not None and t > since:
            since = t
    st.idle_since = format_time(since)
    idle = elapsed(since, c.now)
    if idle < p.idle_for:
        left = p.idle_for - idle
        try:
            at = format_time(since + datetime.timedelta(seconds=p.idle_for))
        except OverflowError:  # a foreground time near year 9999: never idle
            at = "never (the foreground signal's time is past the last date)"
        # The instants, never the time idle so far: the message must not change with
        # the clock (a status write, and so a reconcile, on every call).
        c.wait(
            "NotIdle",
            f"{c.model} idle since {format_time(since)} (idleFor {dur(p.idle_for)}); "
            f"admission at {at} if no foreground request arrives",
            ttl=min(left, float(getattr(c.inputs.settings, "default_ttl_seconds", 60))),
        )
        return None
    return since


def _free_replica(c: Call, req: Required) -> Struct | None:
    """The first Ready replica (:func:`replica_ready`: not being deleted) by index, then
    name, that no other backfill holds."""
    ready_replicas = sorted(
        (r for r in req.replicas.values() if replica_ready(r)),
        key=lambda r: (replica_index(r), structs.get_str(r, "metadata", "name")),
    )
    if not ready_replicas:
        c.wait(
            "NoReadyReplica",
            f"ModelDeployment {c.model} has no Ready replica (one being deleted does not count)",
        )
        return None
    free = [r for r in ready_replicas if structs.get_str(r, "metadata", "name") not in req.holders]
    if free:
        return free[0]
    names = {structs.get_str(r, "metadata", "name") for r in ready_replicas}
    busy = "; ".join(
        f"{rep}: {', '.join(n for _, n, _ in hs)}"
        for rep, hs in sorted(req.holders.items())
        if rep in names
    )
    c.wait(
        "ReplicaBusy",
        f"every Ready replica of {c.model} already runs a backfill Job ({busy})",
    )
    return None


def require_cluster(c: Call, cluster_name: str) -> Resolved | None:
    """Require InferenceCluster ``cluster_name``; None while Crossplane has not resolved it."""
    c.out.require(REQ_CLUSTER, API_VERSION, "InferenceCluster", match_name=cluster_name)
    got = c.inputs.required(REQ_CLUSTER)
    return got if isinstance(got, Resolved) else None


def provider_config(cluster: Resolved) -> dict[str, str] | None:
    """The cluster's provider config; None when it is missing or reports none."""
    return provider_config_ref(cluster.items[0]) if cluster.items else None


def start(c: Call, p: Parsed, replica: Struct, cronjob: Struct) -> bool:
    """Start the next attempt on ``replica``; False while its cluster is not resolved."""
    st = c.st
    cluster = structs.get_str(replica, "spec", "clusterName")
    got = require_cluster(c, cluster)
    if got is None:
        return False
    pc = provider_config(got)
    if pc is None:
        c.wait(
            "ClusterNotReady",
            f"InferenceCluster {cluster} of replica "
            f"{structs.get_str(replica, 'metadata', 'name')} is missing or reports no "
            f"status.providerConfigRef",
        )
        return True
    attempt = (st.attempts or 0) + 1
    st.attempts = attempt
    st.model = c.model
    st.cluster = cluster
    st.replica = structs.get_str(replica, "metadata", "name")
    st.replica_uid = replica_uid(replica) or None
    st.started_at = format_time(c.now)
    st.running_since = None
    st.clear_result()
    st.spec_hash = c.hash
    emit_job(
        c, p, Attempt(c.inputs.name, c.inputs.namespace, c.model, attempt, replica, pc), cronjob
    )
    c.observe("model_backfill_starts_total")
    st.set(
        STARTING,
        "JobCreated",
        f"{c.model} idle since {st.idle_since}: started Job {st.job} "
        f"(attempt {attempt}) on {cluster} against replica {st.replica}",
    )
    c.out.requeue_after(c.poll)
    return True


def emit_job(c: Call, p: Parsed, a: Attempt, cronjob: Struct) -> None:
    """Desire attempt ``a``'s Job Object and record the Job's name."""
    name, obj = job_object(a, p, cronjob)
    c.out.add(job_key(a.number), obj, ready=True)
    c.st.job = name
