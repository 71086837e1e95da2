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
    Starting|Running --(foreground request, model/replica not Ready, replica being
                        deleted or replaced, suspend, spec change, deletion,
                        ...)--> Cancelling
    Cancelling --(the Job Object is gone)--> WaitingForIdle | Suspended | Blocked
    any idle phase --(suspend: true)--> Suspended; unusable template --> Blocked

An invalid spec (one the XRD's CEL rules reject) is bad input, as for every kind: a
:class:`~function.core.errors.SpecError` naming the field, which the runner returns as
a fatal result, so Crossplane applies nothing and every composed resource (a running
Job, bounded by its ``activeDeadlineSeconds``) stays as it is until the spec is valid
again, which counts as a change of the spec.

Rules and where they come from:

- The foreground signal is the annotation ``modelplane.ai/last-foreground-request``
  (``function.naming.ANNOTATION_LAST_FOREGROUND``) on the ModelDeployment, an RFC 3339
  time. Missing or unparsable means "not known to be idle": nothing starts, and a
  running Job is cancelled. The idle window starts at the latest of that time,
  ``status.notIdleBefore`` and the deployment's Ready transition.
  ``status.notIdleBefore`` is written once per event, never on every call: when this
  backfill stops a Job, when it begins waiting on the model (missing or not Ready),
  and when that wait ends (the call that ends it, which is at or after the last call
  that saw the model missing or not Ready; not the deployment's Ready transition,
  another clock's).
- The function is stateless: every timestamp lives in status, and time comes from
  ``inputs.now``. A status is a fixed point while nothing changes (Crossplane v2.4
  reconciles an XR again on every write of it): messages name instants (idle since,
  admission at), never durations counted to now. Crossplane v2.4 reconciles the
  backfill when a required resource changes (it watches them, with realtime
  compositions, on by default), the ModelDeployment's foreground annotation included,
  so every write of that annotation reconciles every backfill of the model. The
  function also asks to be called again (response TTL) when the window ends, when the
  cool-down ends, and every ``poll_seconds`` while a Job is active or the backfill
  waits, which bounds the preemption latency where those watches are off.
- One Job per attempt: attempt N has its own Object (composition-resource name
  ``job-N``) and remote Job name, and only Starting and Running desire it. A Job with
  an outcome is dropped (Crossplane deletes the Object and provider-kubernetes the
  remote Job) and never desired again; once provider-kubernetes has created the Job,
  the Object's management policies drop ``Create``, so a Job deleted behind the
  function's back is not re-created either. Once that Object has reported the Job, an
  Observe-only observer Object (``observer-N``) watches the same Job: under
  ``[Observe, Delete]`` provider-kubernetes reports nothing when the Job is deleted on
  the cluster, under ``[Observe]`` crossplane-runtime marks the observer
  ``Synced=False`` ("external resource does not exist"), and the attempt is cancelled
  (``JobNotFound``) instead of running on until maxRunDuration plus a grace
  (``JobOverdue``). The Job's ``ttlSecondsAfterFinished`` and
  ``suspend`` are not copied (the function deletes the Job once it recorded the outcome,
  and ``spec.suspend`` of the ModelBackfill is the only switch).
- At most one active backfill Job per ModelReplica across all ModelBackfills of the
  namespace (read from their ``status.phase`` and ``status.replica``). Two backfills that
  started on the same replica at once (each reconciled before the other's status was
  written) are resolved deterministically: the later ``(startedAt, name)`` yields.
- A ModelReplica being deleted (``metadata.deletionTimestamp``; Crossplane calls no
  function for it, so its status still says Ready) is not live: no attempt starts on it,
  and a running one is cancelled (``ReplicaNotReady``). An attempt runs on the replica it
  started on, recorded as ``status.replica``, ``replicaUID`` and ``cluster``: a replica
  of that name with another uid or cluster (deleted and created again, names are per
  index) is another one, and the attempt is cancelled (``ReplicaReplaced``). A Job that
  fails while its replica no longer serves it is cancelled for that reason, not a
  terminal ``Failed``.
- Decisions (and so status transitions, events and metrics) are made only in the call
  whose requirements are all resolved and equal to the ones the request carried, which
  is the call Crossplane's requirements loop ends with. Earlier calls keep everything as
  it is. Each transition is counted once, in the call that records it in status.

Modules: :mod:`.status` (phases and the typed status), :mod:`.observed` (the
requirements, resolved, and what the Job and replicas report), :mod:`.children` (the
Job Object and its observer), :mod:`.call` (one call's context), :mod:`.admit` and :mod:`.attempt`
(the decisions: admission; an attempt in progress) and :mod:`.compose` (the entry).
"""

from function.composers.backfill.children import JOB_PREFIX
from function.composers.backfill.compose import compose
from function.composers.backfill.observed import job_outcome, job_running, replica_ready
from function.composers.backfill.status import CONDITION, SPEC_CONDITION

# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (CONDITION, SPEC_CONDITION)

__all__ = [
    "CONDITION_TYPES",
    "JOB_PREFIX",
    "SPEC_CONDITION",
    "compose",
    "job_outcome",
    "job_running",
    "replica_ready",
]
