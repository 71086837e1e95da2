"""ModelCacheHydration: stage one model's weights on one InferenceCluster.

A ModelCacheHydration is composed by the ModelCache composer, never authored::

    spec:
      clusterName: gpu-a          # pinned
      cacheName: qwen-cache
      source: HuggingFace
      huggingFace:
        repo: Qwen/Qwen2.5-0.5B-Instruct
        revision: main            # default
        sizeGiB: 2
        authSecret: {name: hf-token, key: HF_TOKEN}   # a reference, never the value

It requires its InferenceCluster by name (requirement ``cluster``), the live
ModelReplicas of its cache on its cluster (requirement ``replicas``: labels
``modelplane.ai/cache`` and ``modelplane.ai/cluster`` in its namespace, the spec's cache
and cluster checked too; every identity ``modelreplica.identities_in_use`` names for one
of them is kept on the PVC), the ModelReplicas on its cluster whose old pods still read
its cache while they roll onto another one (requirement ``leaving-replicas``: labels
``modelplane.ai/leaving-cache`` and ``modelplane.ai/cluster``, the full cache name
and the spec's cluster checked; every identity their ``status.cacheIdentities`` names is
kept too; ``api.modeldeployment.LABEL_LEAVING_CACHE``) and, until Ready, when
``authSecret`` is set, that Secret by name in the XR's own namespace (requirement
``auth-secret``). It composes, as
provider-kubernetes Objects applied with the cluster's provider config
(``status.providerConfigRef``):

- ``pvc``: a ReadWriteMany PVC of twice ``sizeGiB`` (room for two source identities side
  by side; ``CacheSource.size_quantity``; grown, never shrunk) with the cluster's
  ``status.cache.storageClassName`` when it is created, named ``naming.cache_pvc_name``
  (the name the serving side mounts). An existing PVC keeps the class it has (observed,
  or as its Object was sent while the PVC is not reported; none when it has none): a
  PVC's spec is immutable after creation except a bound claim's request, and a note
  names the PVC and both classes when the cluster's differs
  (``decide._Composer._pvc_class``). A PVC Object that reports ``Synced=False`` (e.g. a
  storage class that cannot expand refusing the larger request) is a ``PVCNotSynced``
  warning naming the PVC, the request (not when the API server says the spec is
  immutable: then what was refused) and the error, in every phase;
- ``token-secret``: the remote token Secret (only with ``authSecret``, only while a
  download is composed, and, after ``authSecret`` was removed, while the download Job's
  Object the function keeps, running or failed, reads it: kept as observed, without
  data, and dropped with that Object); its manifest has
  no data, the token is copied from the control-plane Secret by provider-kubernetes
  through ``spec.references[].patchesFrom``;
- ``job-<identity>``: the download Job, named ``naming.hydration_job_name`` (a Job's
  pod template is immutable, so a new repo/revision gets a new Job), writing
  ``<mount>/<identity>.partial`` and renaming it to ``<mount>/<identity>``
  (``jobs.contract.identity_dir``) once complete and verified. Once its Object is
  observed it is kept exactly as observed, unless the Job is known never to have been
  created (``Synced=False``, no remote Job, no create that succeeded or is in flight:
  ``observed._never_created``; it then follows the spec). One whose remote Job is not
  reported yet may exist ("not known") and is kept
  (``Outcome.keep``, as the prune Jobs are) until it is dropped: an ``authSecret`` edit or
  a new release's template applies to the next download, and when the edit changes
  whether the Job reads the token, the message says so ("spec.huggingFace.authSecret
  change applies after the running download ends", or "... applies to the next
  download" once it failed);
- ``prune-<hash>``: once the current identity is Ready, the prune Job
  (``python -m jobs.hydrate --prune-keep``) keeping the current identity and those live
  replicas may read, and removing the other identities stored (renamed to
  ``<identity>.pruning`` first, so a half-deleted identity is never visible).

``status.stored`` (``function.api.modelcachehydration``) lists the identities complete on
the PVC, each with ``usedBy`` (the live replicas that may read it) whenever the live
replicas are known. An identity leaves it in the call that composes the prune Job
removing it (Crossplane writes the status only after applying the Job). A prune Job is
never dropped before its outcome is read: kept while it runs, and a completed one whose
removals the last status still lists is kept for the call that records them. A failed
one is recorded in ``status.prune`` (a ``PruneFailed`` warning, in the message while the
record stands) and dropped once recorded, at once when its keep-list no longer covers
the current identity and every identity live replicas may read: deleted on the
cluster, a desired failed Job would be re-created and run again. One known never to
have been created (``observed._never_created``: ``Synced=False``, no remote Job, no
create that succeeded or is in flight: a jobs quota, a webhook) is not running: a
``PruneNotSynced`` warning naming the Job and the error, recorded the same way, dropped,
and it holds no download; any other one without a Job result may be running and is
kept. The next prune keeps the
current identities; the keep-list that failed is not composed again before
``function.manifests.hydration.PRUNE_RETRY_SECONDS`` (1 h) after ``failedAt``. One prune
at a time, only while the current identity is Ready and stored (a download always comes
first), none while a download Job of an identity it removes still exists, and none while
the live replicas are not known.

Phases come from observed state (``status.atProvider.manifest`` of the Objects):

- ``Pending``: the PVC is not bound yet, or the auth Secret is missing (a warning
  names ``<namespace>/<secret>``; creating the Secret recovers), or a requirement
  is not resolved yet (existing children are kept as they are, no warning), or a
  running prune Job removes the current identity (``WaitingForPrune``: its download
  starts once the prune is done).
- ``Hydrating``: the PVC is bound and the Job is running.
- ``Ready``: the current identity is in ``status.stored``: its Job has condition
  ``Complete=True``, or it was stored already (a revert: Ready at once, no Job, no
  token). Latched in status together with the source identity (``status.source``) and
  the PVC's uid (``status.pvcUID``); the Job and the token Secret are then dropped and
  never re-created while the latch holds. A Ready status whose ``stored`` does not list
  its identity (written before side-by-side revisions: weights at the PVC root)
  downloads again into the identity's directory, and the message says why. The latch
  (and ``stored``) holds only while the PVC it describes exists and is Bound: a PVC
  Object that is no longer observed (deleted), a PVC whose phase is not ``Bound``
  (``Lost``, ``Pending``) or one with another uid (re-created, so empty) breaks it: a
  warning (``PVCLost``) says why, ``stored`` is emptied, and the hydration goes back to
  the download (Pending/Hydrating, a fresh ``startedAt``). A PVC whose state
  provider-kubernetes has not reported yet is "not known" and keeps the latch.
- ``Failed``: the Job has condition ``Failed=True`` (its reason, for example
  ``BackoffLimitExceeded`` or ``DeadlineExceeded``, and message are reported;
  ``status.failed`` counts are never used), or the PVC did not bind within
  ``settings.pvc_bind_timeout_seconds`` of ``status.pendingSince``, or provider-kubernetes
  could not create the download Job (its Object ``Synced=False``, no remote Job, and no
  create that succeeded or is in flight: ``observed._never_created``) for
  ``settings.hydration_deadline_seconds`` (``JobNotCreated``; ``Pending`` /
  ``JobNotSynced`` until then). The failed Job is kept, so Kubernetes does not run it
  again.

Two more children report what the download did (issue 5's artifact evidence):
``result``, an empty ConfigMap the Job merge-patches with its marker JSON (kept
for the life of the hydration), and ``hydrate-sa``/``hydrate-role``/
``hydrate-rolebinding``, the least RBAC for that (``get``/``patch`` of that one
ConfigMap; dropped with the Job once Ready).

Status (declared in ``compositions/modelcachehydration/definition.yaml``):
``phase``; ``reason`` (CamelCase: ``WaitingForRequirements``, ``AuthSecretMissing``,
``AuthSecretKeyMissing``, ``ClusterUnavailable``, ``PVCNotBound``, ``WaitingForJob``,
``JobRunning``, ``JobNotSynced`` (the download Job cannot be created), ``Hydrated``, the
Job's failure reason, ``PVCBindTimeout``, ``JobNotCreated``, ``WaitingForPrune``);
``message`` (also carries every warning: ``PVCLost``, ``PVCNotSynced``, ``PruneFailed``,
``PruneNotSynced``, ``AuthSecretMissing``...);
``source {repo, revision, identity}``; ``stored [{identity, usedBy}]``; ``prune {jobName,
keep, reason, message, failedAt}`` (the last failed or never-created prune); ``pvcUID``
(while Ready or anything is stored); ``pvcName``; ``jobName`` (until Ready);
``pendingSince`` (RFC 3339, while the PVC waits to bind with the Job desired);
``startedAt`` (the current source's Job first desired; a Job desired again after a
failure starts afresh), ``readyAt``, ``failedAt``;
``evidence {commit, digest, validatedAt}`` from the result ConfigMap when it reports the
current identity (validated; carried over while the identity stays the same).
Condition ``Hydrated`` (reason = phase), and the XR's readiness (True only when Ready).

Events: a Normal one on each phase transition (Warning for Failed, see
``function.core.events``) and a Warning once when a warning is first recorded in the
status message. The ``cache_hydration_duration_seconds`` metric is observed when
Ready is recorded; ``cache_hydration_transitions_total{phase}`` with each phase event,
and ``cache_hydration_failures_total{cluster,reason}`` when Failed is recorded. The
function asks to be called again (``meta.ttl``) every ``settings.poll_seconds`` while
Pending or Hydrating, sooner when the PVC bind deadline is closer.
Once Ready the auth Secret is no longer required. The token
never passes through the function's output: only the Secret's key names are
read, never its values, a kept Secret Object is stripped of any ``data``, and the
token Secret's apply errors are referred to by Object name, not quoted.

Hot path (see the README's Performance section): observed Objects and the XR's status
are read field by field from their Structs; the spec is validated once per distinct
spec; the desired Objects are built once per distinct input by bounded, memoized
builders and kept serialized (see ``_wire``), so a call parses them back instead
of building them from dicts.
"""

from __future__ import annotations

from function.composers.hydration.decide import _Composer
from function.composers.hydration.keys import (
    CONDITION,
    RBAC_KEYS,
    REQ_CLUSTER,
    REQ_SECRET,
    job_key,
)
from function.composers.hydration.wire import (
    _evidence_memo,
    _parse_spec,
    _source_status,
    download_objects,
    lasting_objects,
    rbac_name,
    result_configmap_name,
    token_object,
)
from function.core.inputs import Inputs
from function.core.outcome import Outcome

# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (CONDITION,)

__all__ = [
    "CONDITION",
    "CONDITION_TYPES",
    "RBAC_KEYS",
    "REQ_CLUSTER",
    "REQ_SECRET",
    "_evidence_memo",
    "_parse_spec",
    "_source_status",
    "compose",
    "download_objects",
    "job_key",
    "lasting_objects",
    "rbac_name",
    "result_configmap_name",
    "token_object",
]


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelCacheHydration (see the module docstring).

    Args:
        inputs: The request view; ``inputs.spec`` holds ``clusterName``,
            ``cacheName``, ``source`` and ``huggingFace``.

    Returns:
        The outcome: Objects ``pvc``, ``result``, ``token-secret``, the RBAC children,
        ``job-<identity>`` and ``prune-<hash>``, status, condition ``Hydrated``,
        results and requirements.

    Raises:
        SpecError: for a missing ``spec.clusterName``/``spec.cacheName`` or an
            invalid source (``spec.huggingFace.repo`` ...).
    """
    return _Composer(inputs).compose()
