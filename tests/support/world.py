"""What provider-kubernetes, Kubernetes and Crossplane write back, for lifecycle tests.

A lifecycle test renders an XR through the real engine, then feeds each composed
resource back as the next reconcile's observed state, with the status the component
that owns it would have written:

- a provider-kubernetes ``Object`` (:func:`observed_object`): ``status.conditions``
  ``Synced``/``Ready`` as the provider sets them, and ``status.atProvider.manifest``,
  the remote object as the workload cluster's API server returns it (the applied
  manifest, a uid, and the ``status`` its controller wrote: PVC phase, Job conditions,
  Deployment replicas, ConfigMap data). Given the Object as observed before, an update
  the workload cluster's API server refuses (an immutable field changed:
  :func:`refused_update`) is not applied: the remote object keeps its manifest and the
  Object reports ``Synced=False`` with the provider's error, as provider-kubernetes does;
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
    desired: dict[str, Any],
    *,
    remote: dict[str, Any] | None = None,
    ready: bool = True,
    previous: dict[str, Any] | None = None,
    **top: Any,
) -> dict[str, Any]:
    """``desired`` (a rendered Object) as provider-kubernetes reports it once applied.

    Args:
        desired: the composed Object as ``crossplane render`` printed it.
        remote: the remote object's ``status`` (None: it has none yet).
        ready: the Object's ``Ready`` condition (the provider's readiness policy).
        previous: the same Object as observed before (None: the remote object is
            created now). An update its API server refuses (:func:`refused_update`) is
            not applied: the remote object keeps the manifest ``previous`` reports (with
            ``remote`` and ``top`` as given), and the Object says ``Synced=False``,
            reason ``ReconcileError``, with the provider's message. An Object whose
            ``managementPolicies`` exclude ``Update`` keeps it too (nothing is sent).
        top: other top-level fields of the remote object (``data`` of a ConfigMap).
    """
    obj = copy.deepcopy(desired)
    manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
    refused = None
    old = ((previous or {}).get("status") or {}).get("atProvider", {}).get("manifest")
    if isinstance(old, dict):
        policies = obj["spec"].get("managementPolicies") or ["*"]
        refused = refused_update(old, manifest)
        if refused is not None or not ({"*", "Update"} & set(policies)):
            manifest = copy.deepcopy(old)  # its status too, unless ``remote`` says
        if not ({"*", "Update"} & set(policies)):
            refused = None  # never sent
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
    synced = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess",
              "lastTransitionTime": NOW}
    if refused is not None:
        synced = {"type": "Synced", "status": "False", "reason": "ReconcileError",
                  "message": refused, "lastTransitionTime": NOW}
    obj["status"] = {
        "atProvider": {"manifest": manifest},
        "conditions": [
            synced,
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
def refusal(observed: dict[str, Any]) -> str | None:
    """The message of an Object :func:`observed_object` reported refused (None if not)."""
    for c in (observed.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Synced" and c.get("status") == "False":
            msg = c.get("message") or ""
            return msg if msg.startswith(_UPDATE_FAILED) else None
    return None


# ---- what the workload cluster's API server refuses on update ------------------------

# provider-kubernetes v1.3.1: Update wraps the client's error in "cannot apply object"
# (internal/controller/namespaced/object/object.go, errApplyObject), and
# crossplane-runtime's managed reconciler in "update failed" (errReconcileUpdate).
_UPDATE_FAILED = "update failed: cannot apply object: "
_IMMUTABLE = "field is immutable"  # apimachinery's FieldImmutableErrorMsg
_GROUPS = {
    "ResourceClaimTemplate": "resource.k8s.io",
    "Deployment": "apps",
    "Job": "batch",
    "RoleBinding": "rbac.authorization.k8s.io",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io",
}
# Job spec fields Kubernetes 1.35 never lets change (pkg/apis/batch/validation,
# ValidateJobSpecUpdate); ``completions`` too, but for an Indexed Job scaled with
# ``parallelism`` (elastic Indexed Jobs), and ``template`` but for the scheduling
# directives of a Job suspended before it started (not modelled: none is composed).
_JOB_IMMUTABLE = (
    "selector", "template", "completionMode", "podFailurePolicy", "backoffLimitPerIndex",
    "managedBy", "successPolicy",
)  # fmt: skip
_PVC_MUTABLE = ("resources", "volumeAttributesClassName")


def _at(node: Any, *path: str) -> Any:
    for p in path:
        node = node.get(p) if isinstance(node, dict) else None
    return node


def _value(v: Any) -> str:
    """A refused value as apimachinery's field.Error prints one (its JSON)."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def refused_update(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The error the workload cluster gives provider-kubernetes for updating remote
    object ``old`` (as observed) to manifest ``new``; None when it accepts the update.

    Modelled on Kubernetes 1.35's update validation (``field.Invalid(path, new value,
    "field is immutable")`` printed as ``<path>: Invalid value: <JSON>: field is
    immutable``, a list of several as ``[a, b]``) and on the LeaderWorkerSet webhook
    (sigs.k8s.io/lws v0.9.0): a ResourceClaimTemplate's ``spec``; a PVC's ``spec`` but
    ``resources`` and ``volumeAttributesClassName``; a Job's :data:`_JOB_IMMUTABLE` and
    ``completions``; a Deployment's ``spec.selector``; a LeaderWorkerSet's
    ``leaderWorkerTemplate.subGroupPolicy`` and a ``networkConfig.subdomainPolicy``
    removed; a RoleBinding's ``roleRef``; ``data``/``binaryData``/``immutable`` of a
    Secret or ConfigMap created ``immutable: true``. A manifest of another kind or name
    is another object (the provider creates it), not an update.
    """
    kind = new.get("kind")
    name = _at(new, "metadata", "name")
    if kind != old.get("kind") or name != _at(old, "metadata", "name"):
        return None
    errs: list[str] = []

    def immutable(*path: str, msg: str = _IMMUTABLE) -> None:
        if _at(old, *path) != _at(new, *path):
            errs.append(f"{'.'.join(path)}: Invalid value: {_value(_at(new, *path))}: {msg}")

    if kind == "ResourceClaimTemplate":
        immutable("spec")
    elif kind == "PersistentVolumeClaim":
        was = {k: v for k, v in (old.get("spec") or {}).items() if k not in _PVC_MUTABLE}
        now = {k: v for k, v in (new.get("spec") or {}).items() if k not in _PVC_MUTABLE}
        if was != now:
            errs.append(
                "spec: Forbidden: spec is immutable after creation except resources.requests "
                "and volumeAttributesClassName for bound claims\n"
                f"  core.PersistentVolumeClaimSpec{{- {_value(was)}, + {_value(now)}}}"
            )
    elif kind == "Job":
        for f in _JOB_IMMUTABLE:
            immutable("spec", f)
        spec = new.get("spec") or {}
        elastic = spec.get("completionMode") == "Indexed" and spec.get("completions") == spec.get(
            "parallelism"
        )
        if not elastic:
            immutable("spec", "completions")
    elif kind == "Deployment":
        immutable("spec", "selector")
    elif kind == "LeaderWorkerSet":
        immutable("spec", "leaderWorkerTemplate", "subGroupPolicy")
        path = ("spec", "networkConfig", "subdomainPolicy")
        if _at(old, *path) is not None and _at(new, *path) is None:
            errs.append("spec.networkConfig.subdomainPolicy: Invalid value: null: cannot be unset")
    elif kind == "RoleBinding":
        immutable("roleRef", msg="cannot change roleRef")
    elif kind in ("Secret", "ConfigMap") and old.get("immutable") is True:
        for f in ("data", "binaryData", "immutable"):
            if old.get(f) != new.get(f):
                errs.append(f"{f}: Forbidden: field is immutable when `immutable` is set")
    if not errs:
        return None
    if kind == "LeaderWorkerSet":
        why = f'admission webhook "vleaderworkerset.kb.io" denied the request: {", ".join(errs)}'
        return _UPDATE_FAILED + why
    group = _GROUPS.get(str(kind))
    qualified = f"{kind}.{group}" if group else str(kind)
    listed = errs[0] if len(errs) == 1 else f"[{', '.join(errs)}]"
    return f'{_UPDATE_FAILED}{qualified} "{name}" is invalid: {listed}'


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
