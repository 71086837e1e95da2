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

It requires its InferenceCluster by name (requirement ``cluster``) and, when
``authSecret`` is set, that Secret by name in the XR's own namespace (requirement
``auth-secret``), and composes three provider-kubernetes Objects applied with
the cluster's provider config (``status.providerConfigRef``):

- ``pvc``: a ReadWriteMany PVC of ``sizeGiB`` with the cluster's
  ``status.cache.storageClassName``, named ``naming.cache_pvc_name`` (the name
  the serving side mounts and Modelplane already uses, so an existing PVC is
  adopted, not downloaded again);
- ``token-secret``: the remote token Secret (only with ``authSecret``); its
  manifest has no data, the token is copied from the control-plane Secret by
  provider-kubernetes through ``spec.references[].patchesFrom``;
- ``job-<identity>``: the download Job, named ``naming.hydration_job_name`` (it
  carries the source identity: a Job's pod template is immutable, so a new
  repo/revision gets a new Job instead of colliding with the old one).

Phases come from observed state (``status.atProvider.manifest`` of the Objects):

- ``Pending``: the PVC is not bound yet, or the auth Secret is missing (a warning
  names ``<namespace>/<secret>``; creating the Secret recovers), or a requirement
  is not resolved yet (existing children are kept as they are, no warning).
- ``Hydrating``: the PVC is bound and the Job is running.
- ``Ready``: the Job has condition ``Complete=True``. Latched in status together
  with the source identity (``status.source``) and the PVC's uid (``status.pvcUID``);
  the Job and the token Secret are then dropped and never re-created while the latch
  holds. A new repo or revision is a new identity and hydrates again. The latch holds
  only while the PVC it describes exists and is Bound: a PVC Object that is no longer
  observed (deleted), a PVC whose phase is not ``Bound`` (``Lost``, ``Pending``) or
  one with another uid (re-created, so empty) breaks it: a warning (``PVCLost``) says
  why, and the hydration goes back to the download (Pending/Hydrating, a fresh
  ``startedAt``). A PVC whose state provider-kubernetes has not reported yet is "not
  known" and keeps the latch.
- ``Failed``: the Job has condition ``Failed=True`` (its reason, for example
  ``BackoffLimitExceeded`` or ``DeadlineExceeded``, and message are reported;
  ``status.failed`` counts are never used), or the PVC did not bind within
  ``settings.pvc_bind_timeout_seconds`` of ``status.pendingSince``. The failed Job
  is kept, so Kubernetes does not run it again.

Two more children report what the download did (issue 5's artifact evidence):
``result``, an empty ConfigMap the Job merge-patches with its marker JSON (kept
for the life of the hydration), and ``hydrate-sa``/``hydrate-role``/
``hydrate-rolebinding``, the least RBAC for that (``get``/``patch`` of that one
ConfigMap; dropped with the Job once Ready).

Status (declared in ``compositions/modelcachehydration/definition.yaml``):
``phase``; ``reason`` (CamelCase: ``WaitingForRequirements``, ``AuthSecretMissing``,
``AuthSecretKeyMissing``, ``ClusterUnavailable``, ``PVCNotBound``, ``WaitingForJob``,
``JobRunning``, ``Hydrated``, the Job's failure reason, ``PVCBindTimeout``);
``message`` (also carries every warning); ``source {repo, revision, identity}``;
``pvcName``; ``jobName`` (until Ready); ``pendingSince`` (RFC 3339, while the PVC
waits to bind with the Job desired); ``startedAt`` (the current source's Job first
desired), ``readyAt``, ``failedAt``; ``evidence {commit, digest, validatedAt}``
from the result ConfigMap when it reports the current identity (validated;
carried over while the identity stays the same). Condition ``Hydrated`` (reason =
phase), and the XR's readiness (True only when Ready).

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
    _download_objects,
    _evidence_memo,
    _lasting_objects,
    _parse_spec,
    _source_status,
    _token_object,
    rbac_name,
    result_configmap_name,
)
from function.core.inputs import Inputs
from function.core.outcome import Outcome

__all__ = [
    "CONDITION",
    "RBAC_KEYS",
    "REQ_CLUSTER",
    "REQ_SECRET",
    "_download_objects",
    "_evidence_memo",
    "_lasting_objects",
    "_parse_spec",
    "_source_status",
    "_token_object",
    "compose",
    "job_key",
    "rbac_name",
    "result_configmap_name",
]


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelCacheHydration (see the module docstring).

    Args:
        inputs: The request view; ``inputs.spec`` holds ``clusterName``,
            ``cacheName``, ``source`` and ``huggingFace``.

    Returns:
        The outcome: Objects ``pvc``, ``token-secret`` and ``job-<identity>``,
        status, condition ``Hydrated``, results and requirements.

    Raises:
        SpecError: for a missing ``spec.clusterName``/``spec.cacheName`` or an
            invalid source (``spec.huggingFace.repo`` ...).
    """
    return _Composer(inputs).compose()
