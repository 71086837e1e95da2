"""What provider-kubernetes, Kubernetes and Crossplane write back, for lifecycle tests.

A lifecycle test renders an XR through the real engine, then feeds each composed
resource back as the next reconcile's observed state, with the status the component
that owns it would have written:

- a provider-kubernetes ``Object`` (:func:`observed_object`): ``status.conditions``
  ``Synced``/``Ready`` as the provider sets them, and ``status.atProvider.manifest``,
  the remote object as the workload cluster's API server returns it (the applied
  manifest, a uid, and the ``status`` its controller wrote: PVC phase, Job conditions,
  Deployment replicas, ConfigMap data);
- a composed XR (:func:`observed_xr`): the status that rendering that XR through the
  engine produced, Crossplane's own ``Ready``/``Synced`` conditions included.

Remote statuses are the shapes Kubernetes documents: a Job's ``Complete``/``Failed``
conditions (https://kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup),
a PVC's ``status.phase``, a Deployment's ``availableReplicas`` and ``Available``
condition.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

NOW = "2026-12-01T10:00:00Z"


def _uid(*parts: str) -> str:
    h = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def observed_object(
    desired: dict[str, Any], *, remote: dict[str, Any] | None = None, ready: bool = True, **top: Any
) -> dict[str, Any]:
    """``desired`` (a rendered Object) as provider-kubernetes reports it once applied.

    Args:
        desired: the composed Object as ``crossplane render`` printed it.
        remote: the remote object's ``status`` (None: it has none yet).
        ready: the Object's ``Ready`` condition (the provider's readiness policy).
        top: other top-level fields of the remote object (``data`` of a ConfigMap).
    """
    obj = copy.deepcopy(desired)
    manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
    meta = manifest.setdefault("metadata", {})
    meta["uid"] = _uid(obj["metadata"]["name"], str(meta.get("name")))
    meta.setdefault("namespace", "default")
    # Set by the workload cluster's API server on every object it stores.
    meta.setdefault("generation", 1)
    meta.setdefault("resourceVersion", "1")
    meta.setdefault("creationTimestamp", NOW)
    if remote is not None:
        manifest["status"] = remote
    manifest.update(top)
    obj["status"] = {
        "atProvider": {"manifest": manifest},
        "conditions": [
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess",
             "lastTransitionTime": NOW},
            {"type": "Ready", "status": "True" if ready else "False",
             "reason": "Available" if ready else "Creating", "lastTransitionTime": NOW},
        ],
    }
    return obj


# crossplane-runtime v2.4.0, pkg/reconciler/managed/reconciler.go: the constants of lines
# 65 (errReconcileObserve) and 71 (errExternalResourceNotExist), joined as line 1205 joins
# them (errors.Wrap is fmt.Errorf("%s: %w", message, err)), in the ReconcileError
# condition (Synced=False, reason ReconcileError) it writes when an Observe-only managed
# resource's external resource does not exist. Transcribed here, apart from the
# function's own constant (function.manifests.objects), so a test compares the two.
ERR_RECONCILE_OBSERVE = "observe failed"
ERR_EXTERNAL_RESOURCE_NOT_EXIST = "external resource does not exist"
RECONCILE_ERROR_NOT_EXIST = f"{ERR_RECONCILE_OBSERVE}: {ERR_EXTERNAL_RESOURCE_NOT_EXIST}"


def policies(obj: dict[str, Any]) -> set[str]:
    """An Object's ``spec.managementPolicies`` as the API server stores it (the Object
    CRD's default ``['*']`` when the composed body carries none)."""
    return set((obj.get("spec") or {}).get("managementPolicies") or ["*"])


def creates(obj: dict[str, Any]) -> bool:
    """crossplane-runtime creates the remote object of ``obj`` when it is missing
    (``policy.ShouldCreate()``: ``Create`` or ``*`` in the set)."""
    return bool(policies(obj) & {"*", "Create"})


def deletes(obj: dict[str, Any]) -> bool:
    """Deleting ``obj`` deletes its remote object (``policy.ShouldDelete()``)."""
    return bool(policies(obj) & {"*", "Delete"})


def remote_gone(observed: dict[str, Any]) -> dict[str, Any]:
    """``observed`` (an Object as provider-kubernetes last reported it) at its next
    observation once its remote object was deleted on the workload cluster, as
    provider-kubernetes v1.3.1 and crossplane-runtime v2.4.0 record it.

    provider-kubernetes' Observe answers ``ResourceExists: false`` before it writes
    ``status.atProvider`` (``internal/controller/namespaced/object/object.go``, the
    ``kerrors.IsNotFound`` branch), so the last observation stays. Then the runtime
    (``pkg/reconciler/managed/reconciler.go``):

    - ``["Observe"]`` only (``policy.ShouldOnlyObserve()``, line 1203): ``Synced=False``,
      reason ``ReconcileError``, message :data:`RECONCILE_ERROR_NOT_EXIST`;
    - ``Create`` allowed (``*`` included): the remote object is created again from the
      manifest (a new uid, no status yet) and ``Synced=True``;
    - otherwise (``[Observe, Delete]``): nothing is created, there is nothing to update
      (``Skipping update due to managementPolicies``, line 1524): ``Synced=True``, and
      the Object still shows the remote object it last saw.

    ``Ready`` is left as it was in every case (no readiness is derived without an
    observed object).
    """
    obj = copy.deepcopy(observed)
    st = obj.setdefault("status", {})
    conds = [c for c in st.get("conditions") or [] if c.get("type") != "Synced"]
    if policies(obj) == {"Observe"}:
        conds.insert(0, {"type": "Synced", "status": "False", "reason": "ReconcileError",
                         "message": RECONCILE_ERROR_NOT_EXIST, "lastTransitionTime": NOW})
    else:
        if creates(obj):
            manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
            meta = manifest.setdefault("metadata", {})
            meta["uid"] = _uid(obj["metadata"]["name"], str(meta.get("name")), "re-created")
            meta.setdefault("namespace", "default")
            st["atProvider"] = {"manifest": manifest}
        conds.insert(0, {"type": "Synced", "status": "True", "reason": "ReconcileSuccess",
                         "lastTransitionTime": NOW})
    st["conditions"] = conds
    return obj


def observed_xr(desired: dict[str, Any], rendered_xr: dict[str, Any]) -> dict[str, Any]:
    """A composed XR (``desired``, as its parent's render printed it) with the status
    that rendering it through the engine produced (``rendered_xr``)."""
    obj = copy.deepcopy(desired)
    obj["metadata"].setdefault("uid", _uid(obj["metadata"]["name"]))
    obj["status"] = copy.deepcopy(rendered_xr.get("status") or {})
    return obj


def as_xr(desired: dict[str, Any]) -> dict[str, Any]:
    """A composed XR (as its parent's render printed it) as the input of its own render."""
    obj = copy.deepcopy(desired)
    meta = obj["metadata"]
    meta.setdefault("uid", _uid(meta["name"]))
    meta.setdefault("generation", 1)
    for k in ("ownerReferences",):
        meta.pop(k, None)
    return obj


# ---- remote statuses -----------------------------------------------------------------


def pvc(phase: str) -> dict[str, Any]:
    """A PersistentVolumeClaim's status (``Pending``, ``Bound``, ``Lost``)."""
    return {"phase": phase, **({"accessModes": ["ReadWriteMany"]} if phase == "Bound" else {})}


def job_running(at: str = NOW) -> dict[str, Any]:
    """A Job whose pod runs since ``at``."""
    return {"active": 1, "startTime": at}


def job_complete(at: str = NOW) -> dict[str, Any]:
    """A Job that completed at ``at`` (its ``completionTime``; pass a time derived from
    the function's wall clock where the function compares it with ``now``)."""
    return {
        "succeeded": 1,
        "startTime": at,
        "completionTime": at,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": at},
            {"type": "Complete", "status": "True", "lastTransitionTime": at},
        ],
    }


def job_failed(
    reason: str = "BackoffLimitExceeded", message: str = "", at: str = NOW
) -> dict[str, Any]:
    """A Job that failed at ``at`` (the ``Failed`` condition's ``lastTransitionTime``)."""
    return {
        "failed": 4,
        "startTime": at,
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": reason,
             "lastTransitionTime": at},
            {"type": "Failed", "status": "True", "reason": reason,
             "message": message or "Job has reached the specified backoff limit",
             "lastTransitionTime": at},
        ],
    }


def deployment_available(replicas: int = 1) -> dict[str, Any]:
    return {
        "observedGeneration": 1,
        "replicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "updatedReplicas": replicas,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
        ],
    }


def hydration_result(identity: str, repo: str, revision: str) -> dict[str, str]:
    """``data`` of the result ConfigMap after ``python -m jobs.hydrate`` succeeded."""
    result = {
        "repo": repo,
        "revision": revision,
        "identity": identity,
        "commit": hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest(),
        "digest": "sha256:" + hashlib.sha256(f"{repo}@{revision}".encode()).hexdigest(),
        "files": 3,
        "bytes": 1024,
        "validatedAt": NOW,
        "completedAt": NOW,
    }
    return {"result": json.dumps(result, sort_keys=True)}


def observed_provider_config(desired: dict[str, Any]) -> dict[str, Any]:
    """A composed provider-kubernetes ``ClusterProviderConfig`` as the API server returns
    it once created: server-set metadata and the ``status.users`` count the provider keeps
    (a ProviderConfig reports no ``Ready`` condition)."""
    obj = copy.deepcopy(desired)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("uid", _uid(str(meta.get("name"))))
    meta.setdefault("generation", 1)
    meta.setdefault("resourceVersion", "1")
    meta.setdefault("creationTimestamp", NOW)
    obj["status"] = {"users": 0}
    return obj


def deployment_xr_status(*, ready: int, total: int = 1) -> dict[str, Any]:
    """The status of a composed ModelDeployment as its composer and Crossplane write it:
    ``replicas``, ``ReplicasScheduled``/``ReplicasReady`` and Crossplane's ``Ready``."""
    done = ready >= total
    return {
        "replicas": {"total": total, "ready": ready},
        "conditions": [
            {"type": "ReplicasScheduled", "status": "True", "reason": "Scheduled",
             "message": f"{total}/{total} replicas placed", "lastTransitionTime": NOW},
            {"type": "ReplicasReady", "status": "True" if done else "False",
             "reason": "Ready" if done else "Starting",
             "message": f"{ready}/{total} replicas ready", "lastTransitionTime": NOW},
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess",
             "lastTransitionTime": NOW},
            {"type": "Ready", "status": "True" if done else "False",
             "reason": "Available" if done else "Creating", "lastTransitionTime": NOW},
        ],
    }
