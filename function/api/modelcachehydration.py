"""ModelCacheHydration status contract: phases, condition type and reasons.

Written by :mod:`function.composers.hydration` (the owner; declared in
``compositions/modelcachehydration/definition.yaml``) and read by the ModelCache
roll-up (:mod:`function.composers.modelcache`), placement
(:mod:`function.scheduling.placement` through the ModelDeployment composer), the
ModelReplica cache gate, the ModelExperiment gate and the metrics labels
(:mod:`function.ops.metrics`). Those readers import the names from here, never
write them as literals.

``status.phase`` is one of :data:`PHASES`:

- :data:`PENDING`: nothing downloaded yet (PVC not bound, auth Secret missing, a
  requirement not resolved, or no status at all yet: readers treat a missing or
  unknown phase as Pending).
- :data:`HYDRATING`: the download Job runs.
- :data:`READY`: the weights of ``status.source.identity`` are on the PVC.
- :data:`FAILED`: the Job failed, or the PVC did not bind in time.

``status.reason`` is one of the ``REASON_*`` names below, or the failed Job's own
condition reason (``BackoffLimitExceeded``, ``DeadlineExceeded``,
https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions).
The condition :data:`CONDITION` carries the phase as its reason.

``status.stored`` lists the source identities whose weights are complete on the PVC,
each in its own directory (``jobs.contract.identity_dir``): the current identity once
Ready, and earlier ones kept while a live replica on the cluster may read them, each
entry ``{identity, usedBy: [ModelReplica names]}``
(:func:`stored_identities` reads it). A new revision hydrates beside the identities
stored; the ModelReplica cache gate lets a replica serve any identity listed there. An
identity leaves the list in the call that composes the prune Job removing it (before
any of it is deleted), so the list never names an identity that is being removed or
is gone. Ready holds only for an identity listed there: a status written before
side-by-side revisions (Ready, no ``stored``; weights at the PVC root) hydrates again
into the identity's directory.

``status.prune`` records the last prune Job that failed (a Job condition
``Failed=True``) or that provider-kubernetes could not create (its Object
``Synced=False`` with no remote Job): ``{jobName, keep: [identities], reason, message,
failedAt}``. The Job is dropped once that is recorded (a failed Job deleted on the
cluster must never be re-created with a keep-list that may no longer cover what live
replicas read); its ``PruneFailed``/``PruneNotSynced`` warning stays in the message
while the record stands. The next prune is composed from the current keep-list, not
before ``function.manifests.hydration.PRUNE_RETRY_SECONDS`` after ``failedAt`` when
that keep-list is the failed one; composing it clears the record.

The weights a hydration writes are read where ``jobs.contract.CACHE_MOUNT_PATH`` mounts
the cache PVC: the download Job (``python -m jobs.hydrate``) writes there and every
engine container reads there; that path, the completion marker and the result
ConfigMap's keys are the contract of :mod:`jobs.contract`.
"""

from __future__ import annotations

from google.protobuf.struct_pb2 import Struct

from function.core import structs
from jobs.contract import IDENTITY_PATTERN

KIND = "ModelCacheHydration"

PENDING = "Pending"
HYDRATING = "Hydrating"
READY = "Ready"
FAILED = "Failed"
PHASES = (PENDING, HYDRATING, READY, FAILED)

# Condition type; its reason is the phase, its status True only when Ready.
CONDITION = "Hydrated"

# status.reason values.
REASON_WAITING_FOR_REQUIREMENTS = "WaitingForRequirements"
REASON_AUTH_SECRET_MISSING = "AuthSecretMissing"
REASON_AUTH_SECRET_KEY_MISSING = "AuthSecretKeyMissing"
REASON_CLUSTER_UNAVAILABLE = "ClusterUnavailable"
REASON_PVC_NOT_BOUND = "PVCNotBound"
REASON_WAITING_FOR_JOB = "WaitingForJob"
REASON_JOB_RUNNING = "JobRunning"
REASON_HYDRATED = "Hydrated"
REASON_PVC_BIND_TIMEOUT = "PVCBindTimeout"
# Warning reason (status message and event) when the latched PVC is gone or re-created.
REASON_PVC_LOST = "PVCLost"
# Warning reason when provider-kubernetes cannot apply the PVC (its Object reports
# Synced=False), e.g. a storage class that cannot expand refusing the larger request.
REASON_PVC_NOT_SYNCED = "PVCNotSynced"
# status.reason (and a Warning) while provider-kubernetes cannot create the download Job
# (its Object reports Synced=False and no remote Job: a jobs quota, an admission
# webhook): nothing downloads, so the hydration is Pending, not Hydrating; Failed with
# REASON_JOB_NOT_CREATED once that has lasted the hydration deadline.
REASON_JOB_NOT_SYNCED = "JobNotSynced"
REASON_JOB_NOT_CREATED = "JobNotCreated"
# status.reason while the current identity's download waits for a running prune Job
# that removes it (never a download into a directory being deleted).
REASON_WAITING_FOR_PRUNE = "WaitingForPrune"
# Warning reason when a prune Job failed (recorded in status.prune, then dropped: never
# run again with that keep-list; retried from the current keep-list after a back-off).
REASON_PRUNE_FAILED = "PruneFailed"
# Warning reason (and status.prune.reason) when provider-kubernetes cannot create a prune
# Job (its Object reports Synced=False and no remote Job: a jobs quota, an admission
# webhook): it is not running, is dropped, and blocks nothing.
REASON_PRUNE_NOT_SYNCED = "PruneNotSynced"

# status.stored: the identities complete on the PVC (see the module docstring).
STATUS_STORED = "stored"
# status.prune: the last prune Job that failed or could not be created, while no newer
# prune has been composed: {jobName, keep: [identities], reason, message, failedAt}.
STATUS_PRUNE = "prune"


def stored_identities(status: Struct | None) -> frozenset[str]:
    """The identities ``status.stored[].identity`` lists (empty when absent or malformed).

    Args:
        status: The hydration's ``status`` Struct, or None.
    """
    v = status.fields.get(STATUS_STORED) if status is not None else None
    if v is None or v.WhichOneof("kind") != "list_value":
        return frozenset()
    out = set()
    for item in v.list_value.values:
        if item.WhichOneof("kind") == "struct_value":
            ident = source_identity_of(item.struct_value)
            if ident:
                out.add(ident)
    return frozenset(out)


def source_identity_of(node: Struct | None) -> str:
    """``node.identity`` when it is a source identity (12 lowercase hex), else "".

    Statuses are read, not trusted: a malformed identity is "not known", never a path.
    """
    ident = structs.sval(node, "identity")
    return ident if IDENTITY_PATTERN.fullmatch(ident) else ""
