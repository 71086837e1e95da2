"""provider-kubernetes ``Object`` (``kubernetes.m.crossplane.io/v1alpha1``) wrappers.

A namespaced XR cannot compose cluster-scoped resources, and the workload runs on
another cluster, so every remote manifest travels inside a namespaced Object whose
``providerConfigRef`` comes from the InferenceCluster's status (never from user
input). provider-kubernetes reports the remote object's state under
``status.atProvider.manifest``. Jobs, PVCs and Deployments have no ``Ready``
condition, so readiness uses ``DeriveFromCelQuery`` over that observed object
(provider-kubernetes v1.x, ``spec.readiness``).

Every remote object lives in ``REMOTE_NAMESPACE`` on its workload cluster, so each
wrapped manifest gets the label ``modelplane.ai/namespace: <the XR's namespace>``
(:data:`function.naming.LABEL_NAMESPACE`) in its own ``metadata.labels``: two
namespaces' same-named caches or deployments are told apart there by it. Only there:
a selector (immutable on Deployments and LeaderWorkerSets) or a pod template (rolls
serving pods; immutable on Jobs) is never changed by it.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from google.protobuf.struct_pb2 import Struct

from function.core import structs
from function.naming import LABEL_MANAGED_BY, LABEL_NAMESPACE, MANAGED_BY

OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
OBJECT_KIND = "Object"

# crossplane-runtime's managed reconciler (pkg/meta) writes these on every managed
# resource, an Object included, around each create of its external resource: ``pending``
# before the create, then ``succeeded`` or ``failed`` (RFC 3339, whole seconds). A
# ``pending`` newer than both is a create whose result is not known
# (``meta.ExternalCreateIncomplete``).
ANNOTATION_CREATE_PENDING = "crossplane.io/external-create-pending"
ANNOTATION_CREATE_SUCCEEDED = "crossplane.io/external-create-succeeded"
ANNOTATION_CREATE_FAILED = "crossplane.io/external-create-failed"
# ``spec.managementPolicies`` of an Object kept once its remote object exists: observed
# and deleted with the Object, never created again (deleted by hand, it stays deleted)
# nor updated (a Job's template is immutable). A set provider-kubernetes supports:
# crossplane-runtime's default list, which it uses (review 19b found the backfill's
# {Observe, Update, LateInitialize, Delete} refused: the Object was left unobserved and
# undeleted); tests/e2e/test_provider_policies.py checks it with the resolver itself.
OBSERVE_DELETE_POLICIES = ["Observe", "Delete"]
# ``spec.managementPolicies`` of an Object that only watches a remote object another
# Object created: crossplane-runtime never creates, updates or deletes its remote object
# (deleting the Object only removes its finalizer, before any observation). It is the one
# set under which the runtime reports a remote object that does not exist: with
# :data:`OBSERVE_DELETE_POLICIES` (no Create) its reconciler skips the create, finds
# nothing to update and marks the Object ``Synced=True``, leaving the last
# ``status.atProvider`` in place (crossplane-runtime v2.4.0
# ``pkg/reconciler/managed/reconciler.go``, ``policy.ShouldOnlyObserve()``). In the
# runtime's default supported list; tests/e2e/test_provider_policies.py checks it.
OBSERVE_ONLY_POLICIES = ["Observe"]
# The ``Synced`` condition crossplane-runtime v2.4.0 writes on an Object with
# :data:`OBSERVE_ONLY_POLICIES` whose remote object does not exist:
# ``xpv2.ReconcileError(errors.Wrap(errors.New(errExternalResourceNotExist),
# errReconcileObserve))`` (``pkg/reconciler/managed/reconciler.go``: errReconcileObserve
# "observe failed", errExternalResourceNotExist "external resource does not exist";
# ``errors.Wrap`` is ``fmt.Errorf("%s: %w", ...)``); provider-kubernetes v1.3.1's Observe
# answers ``ResourceExists: false`` when the API server says NotFound
# (``internal/controller/namespaced/object/object.go``). Any other failure (the cluster
# unreachable, a Get forbidden) is another message.
REASON_RECONCILE_ERROR = "ReconcileError"
MESSAGE_REMOTE_NOT_FOUND = "observe failed: external resource does not exist"


class ObjectOptions(TypedDict, total=False):
    """The optional parts of an Object (keyword arguments of :func:`remote_object`).

    Attributes:
        labels: Labels for the Object (``app.kubernetes.io/managed-by`` is added).
        annotations: Annotations for the Object.
        readiness_cel: A CEL query over the observed remote object; sets policy
            ``DeriveFromCelQuery``. None leaves provider-kubernetes' default
            (``SuccessfulCreate``).
        references: ``spec.references`` entries (for example ``patchesFrom``).
        management_policies: ``spec.managementPolicies`` (for example ``["Observe"]``).
        deletion_policy: ``spec.forProvider.deletionPropagationPolicy``.
    """

    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    readiness_cel: str | None
    references: list[dict[str, Any]] | None
    management_policies: list[str] | None
    deletion_policy: str | None


def remote_object(
    name: str,
    namespace: str,
    provider_config: dict[str, str],
    manifest: dict[str, Any],
    **options: Unpack[ObjectOptions],
) -> dict[str, Any]:
    """Wrap ``manifest`` in an Object applied with ``provider_config``.

    Args:
        name: The Object's name (a DNS-1123 label, see ``function.naming``).
        namespace: The XR's namespace (the Object lives beside it; the manifest is
            labelled with it, :data:`function.naming.LABEL_NAMESPACE`).
        provider_config: From :func:`function.api.inferencecluster.provider_config_ref`.
        manifest: The remote Kubernetes object (not modified: the label is added to
            a copy of its ``metadata``).
        options: :class:`ObjectOptions`, by keyword.

    Returns:
        The Object as a dict, valid against the Object CRD.
    """
    labels, annotations = options.get("labels"), options.get("annotations")
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, **(labels or {})},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    remote_meta = dict(manifest.get("metadata") or {})
    remote_meta["labels"] = {**(remote_meta.get("labels") or {}), LABEL_NAMESPACE: namespace}
    spec: dict[str, Any] = {
        "forProvider": {"manifest": {**manifest, "metadata": remote_meta}},
        "providerConfigRef": dict(provider_config),
    }
    if deletion_policy := options.get("deletion_policy"):
        spec["forProvider"]["deletionPropagationPolicy"] = deletion_policy
    if readiness_cel := options.get("readiness_cel"):
        spec["readiness"] = cel_readiness(readiness_cel)
    if references := options.get("references"):
        spec["references"] = references
    if management_policies := options.get("management_policies"):
        spec["managementPolicies"] = management_policies
    return {"apiVersion": OBJECT_API_VERSION, "kind": OBJECT_KIND, "metadata": meta, "spec": spec}


def cel_readiness(query: str) -> dict[str, str]:
    """An Object's ``spec.readiness``: Ready when the CEL ``query`` over the observed
    remote object (``object``) is true (provider-kubernetes ``DeriveFromCelQuery``)."""
    return {"policy": "DeriveFromCelQuery", "celQuery": query}


def observed_manifest(obj: Any) -> Any:
    """The remote object as provider-kubernetes last saw it (``status.atProvider.manifest``)."""
    return structs.get(obj, "status", "atProvider", "manifest")


def sync_error(obj: Any) -> str | None:
    """The remote error when the Object reports ``Synced=False``, else None."""
    c = structs.conditions(obj).get("Synced")
    if c is not None and structs.get(c, "status") == "False":
        return structs.get_str(c, "message") or structs.get_str(c, "reason") or "not synced"
    return None


def remote_not_found(obj: Struct) -> bool:
    """Whether an Observe-only Object (:data:`OBSERVE_ONLY_POLICIES`) reports that its
    remote object does not exist: ``Synced=False``, reason ``ReconcileError``, message
    :data:`MESSAGE_REMOTE_NOT_FOUND`, as crossplane-runtime writes it at the Object's last
    observation. An Object under any other set never reports this (see
    :data:`OBSERVE_ONLY_POLICIES`); nor does one not observed yet (no ``Synced``)."""
    status = structs.sub(obj, "status")  # hot path: Struct accessors, no Python wrappers
    v = status.fields.get("conditions") if status is not None else None
    if v is None:
        return False
    for item in v.list_value.values:  # a list of anything else reads as empty
        f = item.struct_value.fields
        t = f.get("type")
        if t is not None and t.string_value == "Synced":
            st, reason, msg = f.get("status"), f.get("reason"), f.get("message")
            return (
                st is not None
                and st.string_value == "False"
                and reason is not None
                and reason.string_value == REASON_RECONCILE_ERROR
                and msg is not None
                and msg.string_value == MESSAGE_REMOTE_NOT_FOUND
            )
    return False
