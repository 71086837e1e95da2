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
