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
