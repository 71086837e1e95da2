"""What a ModelReplica reads of an observed workload Object (its Deployment or
LeaderWorkerSet as provider-kubernetes reports it in ``status.atProvider.manifest``).

:func:`read_workload` reads it, as a given workload kind; :func:`observed_workload`
reads it as the kind its manifest says, once per ``(uid, resourceVersion)`` of the
Object (:func:`function.core.versioned.reading`): provider-kubernetes writes the
Object's status on every change of the remote object, so a new resourceVersion is a
new reading, and a steady replica reads only the two fields.
"""

from __future__ import annotations

from typing import NamedTuple

from google.protobuf.struct_pb2 import Struct

from function import naming
from function.core import structs, versioned
from function.core.numbers import finite_int
from function.manifests import workloads as wl
from function.manifests.objects import sync_error


class WorkloadFacts(NamedTuple):
    """An observed workload Object, read as workload kind ``kind``.

    Attributes:
        kind: The kind it was read as (``Deployment`` or ``LeaderWorkerSet``; a manifest
            that names no kind is read as a Deployment).
        manifest: Whether ``status.atProvider.manifest`` is an object (observed).
        reported: Whether ``status.atProvider.manifest`` is present at all.
        malformed: ``status.conditions`` of the Object or of the remote object is
            neither absent, null nor a list.
        sync_error: The remote error when the Object reports ``Synced=False``, else None.
        serving: The workload's own readiness (:func:`~function.manifests.workloads.
            deployment_serving`, :func:`~function.manifests.workloads.lws_serving`).
        have: Available pods (Deployment) or ready groups (LeaderWorkerSet).
        want: ``spec.replicas``.
        sources: What its pod templates read (:func:`~function.manifests.workloads.
            template_sources`).
        complete: :func:`~function.manifests.workloads.rollout_complete`.
        stalled: :func:`~function.manifests.workloads.rollout_stalled`.
        claims: The ResourceClaimTemplates its pod templates name
            (:func:`~function.manifests.workloads.template_claims`).
    """

    kind: str
    manifest: bool
    reported: bool
    malformed: bool
    sync_error: str | None
    serving: bool
    have: int
    want: int
    sources: frozenset[str]
    complete: bool | None
    stalled: str | None
    claims: frozenset[str] = frozenset()


def read_workload(obj: Struct, kind: str) -> WorkloadFacts:
    """Read the observed workload Object ``obj`` as a workload of kind ``kind``."""
    status = structs.sub(obj, "status")
    manifest = structs.get(structs.sub(status, "atProvider"), "manifest")
    remote_status = structs.sub(manifest, "status") if isinstance(manifest, Struct) else None
    malformed = not _conditions_ok(status) or not _conditions_ok(remote_status)
    lws = kind == "LeaderWorkerSet"
    return WorkloadFacts(
        kind=kind,
        manifest=isinstance(manifest, Struct),
        reported=manifest is not None,
        malformed=malformed,
        sync_error=None if malformed else sync_error(obj),
        serving=wl.lws_serving(manifest) if lws else wl.deployment_serving(manifest),
        have=_count(manifest, "status", "readyReplicas" if lws else "availableReplicas"),
        want=_count(manifest, "spec", "replicas"),
        sources=frozenset(wl.template_sources(manifest, kind)),
        complete=wl.rollout_complete(manifest, kind),
        stalled=wl.rollout_stalled(manifest, kind),
        claims=frozenset(wl.template_claims(manifest, kind)),
    )


@versioned.reading(16384, weight=2)
def observed_workload(obj: Struct) -> WorkloadFacts:
    """:func:`read_workload` as the kind the Object's manifest names (kept by the Object's
    uid and resourceVersion; shared between calls)."""
    manifest = structs.get(structs.sub(obj, "status"), "atProvider", "manifest")
    kind = structs.sval(manifest, "kind") if isinstance(manifest, Struct) else ""
    return read_workload(obj, kind)


def _conditions_ok(status: Struct | None) -> bool:
    """Whether ``status.conditions`` is absent, null or a list (``status`` may be None)."""
    if status is None:
        return True
    c = status.fields.get("conditions")
    return c is None or c.WhichOneof("kind") in (None, "null_value", "list_value")


def _count(node: object, *path: str) -> int:
    n = finite_int(structs.get(node, *path))
    return 0 if n is None else n


def refusal(obj: Struct) -> str | None:
    """:func:`function.manifests.objects.sync_error` of an observed Object: the remote
    error while it reports ``Synced=False``, else None. Read through the field maps (the
    hot path: every child of every replica, every call; cheaper than a memo's key)."""
    conds = structs.fields_of(obj, "status").get("conditions")
    if conds is None:
        return None
    for cv in conds.list_value.values:
        c = cv.struct_value.fields
        t = c.get("type")
        if t is not None and t.string_value == "Synced":
            st = c.get("status")
            if st is None or st.string_value != "False":
                return None
            return sync_error(obj)
    return None


@versioned.reading(4096, weight=1)
def claim_digest(obj: Struct) -> str | None:
    """:func:`function.naming.claim_requests_hash` of what an observed
    ResourceClaimTemplate Object's template asks for, its requests rebuilt as this
    function writes them (:func:`function.manifests.workloads.device_request`: fields the
    API server may add are not read); None when it is not a list of such requests.

    The remote object's requests, as the workload cluster reports them
    (``status.atProvider.manifest``), else, not observed there yet, those of the manifest
    last applied (``spec.forProvider.manifest``). The remote one first: a manifest the
    API server refused (the template's ``spec`` is immutable) is not what the template
    asks for. Kept by the Object's uid and resourceVersion; shared between calls.
    """
    for path in (("status", "atProvider", "manifest"), ("spec", "forProvider", "manifest")):
        manifest = structs.get(obj, *path)
        if isinstance(manifest, Struct):
            requests = structs.get(manifest, "spec", "spec", "devices", "requests")
            rebuilt = [_request(r) for r in structs.items(requests)] if requests else None
            if not rebuilt or None in rebuilt:
                return None
            return naming.claim_requests_hash(rebuilt)
    return None


def _request(r: object) -> dict[str, object] | None:
    """One observed DeviceRequest as :func:`~function.manifests.workloads.device_request`
    writes it, or None when it is not one (another allocation mode, a field missing)."""
    name = structs.get(r, "name")
    ex = structs.get(r, "exactly")
    dev_class = structs.get(ex, "deviceClassName")
    count = finite_int(structs.get(ex, "count"))
    if not isinstance(name, str) or not isinstance(dev_class, str) or count is None:
        return None
    if structs.get(ex, "allocationMode") != "ExactCount":
        return None
    cels = [structs.get(sel, "cel", "expression") for sel in structs.items(ex, "selectors")]
    if not all(isinstance(c, str) for c in cels):
        return None
    return wl.device_request(name, dev_class, count, [str(c) for c in cels])
