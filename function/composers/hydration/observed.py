"""ModelCacheHydration: reading observed state straight from the request's Structs (the
hot path; no decisions here)."""

from __future__ import annotations

import itertools

from google.protobuf.struct_pb2 import Struct

from function.composers.hydration.keys import (
    FAILED,
    READY,
)
from function.core import structs
from function.core.timeutil import parse_time
from function.manifests.objects import (
    ANNOTATION_CREATE_FAILED,
    ANNOTATION_CREATE_PENDING,
    ANNOTATION_CREATE_SUCCEEDED,
)
from jobs.contract import PRUNE_KEEP_FLAG, parse_prune_keep

# ---- reading observed state (hot path: straight from the Structs) ------------------


def _manifest(obj: Struct | None) -> Struct | None:
    """The remote object as provider-kubernetes last saw it (``status.atProvider.manifest``)."""
    return structs.sub(structs.sub(structs.sub(obj, "status"), "atProvider"), "manifest")


def _condition(node: Struct | None, typ: str) -> Struct | None:
    """The condition of type ``typ`` in ``node.status.conditions`` (the last one wins), or None."""
    conds = structs.fields_of(node, "status").get("conditions")
    if conds is None:
        return None
    found = None
    for c in conds.list_value.values:
        cond = c.struct_value
        if structs.sval(cond, "type") == typ:
            found = cond
    return found


def _sync_error(obj: Struct | None) -> str | None:
    """The remote error when an Object reports ``Synced=False``, else None.

    Same rule as ``function.manifests.objects.sync_error``, read without copies.
    """
    c = _condition(obj, "Synced")
    if c is not None and structs.sval(c, "status") == "False":
        return structs.sval(c, "message") or structs.sval(c, "reason") or "not synced"
    return None


def _never_created(obj: Struct | None) -> bool:
    """Whether an observed Object is known never to have created its remote object: no
    remote observation (``status.atProvider.manifest``), ``Synced=False``, and
    crossplane-runtime's create annotations
    (:data:`function.manifests.objects.ANNOTATION_CREATE_PENDING` ...) say no create
    succeeded and none is in flight: no create attempted (the error came before one:
    provider config, connection), or the latest attempt failed (``failed`` at or after
    ``pending``, after ``succeeded``).

    Anything else is "exists" or "not known", never "never created": an Object whose
    remote object provider-kubernetes has not reported yet (``Synced=True`` after the
    create, before the status carrying ``atProvider`` is written), a create whose result
    is not known (``pending`` newer than both results; provider-kubernetes v1.3.1 uses
    deterministic external names, so crossplane-runtime observes and creates again on its
    next reconcile rather than report "cannot determine creation result"), or a create
    that succeeded whose status was never written.
    Unparseable times read as absent, as crossplane-runtime reads them.
    """
    if obj is None or _manifest(obj) is not None or _sync_error(obj) is None:
        return False
    notes = structs.sub(structs.sub(obj, "metadata"), "annotations")
    keys = (ANNOTATION_CREATE_PENDING, ANNOTATION_CREATE_SUCCEEDED, ANNOTATION_CREATE_FAILED)
    pending, succeeded, failed = (parse_time(structs.sval(notes, key)) for key in keys)
    if failed is None:
        return pending is None and succeeded is None
    if succeeded is not None and succeeded >= failed:
        return False
    return pending is None or pending <= failed


def _job_result(job_obj: Struct | None) -> tuple[str, str, str] | None:
    """The terminal state of an observed Job Object: ``(phase, reason, message)`` or None.

    Reads only the Job conditions ``Complete`` and ``Failed``
    (https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions);
    never counts ``status.failed``.
    """
    manifest = _manifest(job_obj)
    if manifest is None:
        return None
    done = _condition(manifest, "Complete")
    if done is not None and structs.sval(done, "status") == "True":
        return READY, "Complete", structs.sval(done, "message")
    failed = _condition(manifest, "Failed")
    if failed is not None and structs.sval(failed, "status") == "True":
        return (
            FAILED,
            structs.sval(failed, "reason") or "Failed",
            structs.sval(failed, "message"),
        )
    return None


def _reads_secret(job_obj: Struct | None, secret: str) -> bool:
    """Whether an observed Job Object's pod template reads the Secret named ``secret``
    (a container's ``env[].valueFrom.secretKeyRef`` or ``envFrom[].secretRef``), as it
    was desired (``spec.forProvider.manifest``) or, when provider-kubernetes could not
    apply that (``Synced=False``: the two may differ), as it exists on the cluster
    (``status.atProvider.manifest``): either is enough."""
    desired = structs.sub(structs.sub(structs.sub(job_obj, "spec"), "forProvider"), "manifest")
    if _template_reads(desired, secret):
        return True
    return _sync_error(job_obj) is not None and _template_reads(_manifest(job_obj), secret)


def _template_reads(manifest: Struct | None, secret: str) -> bool:
    """:func:`_reads_secret` for one Job manifest (read Value by Value: the hot path; a
    field of another type reads as empty)."""
    pod = structs.sub(structs.sub(structs.sub(manifest, "spec"), "template"), "spec")
    containers = pod.fields.get("containers") if pod is not None else None
    if containers is None:
        return False
    for c in containers.list_value.values:
        fields = c.struct_value.fields
        env = fields.get("env")
        if env is not None:
            for e in env.list_value.values:
                source = e.struct_value.fields.get("valueFrom")  # most entries have none
                if source is None:
                    continue
                ref = structs.sub(source.struct_value, "secretKeyRef")
                if structs.sval(ref, "name") == secret:
                    return True
        env_from = fields.get("envFrom")
        if env_from is not None:
            for e in env_from.list_value.values:
                if structs.sval(structs.sub(e.struct_value, "secretRef"), "name") == secret:
                    return True
    return False


def _sent_manifest(obj: Struct | None) -> Struct | None:
    """The manifest an Object was last applied with (``spec.forProvider.manifest``)."""
    return structs.sub(structs.sub(structs.sub(obj, "spec"), "forProvider"), "manifest")


def _storage_class(pvc: Struct | None) -> str | None:
    """A PVC manifest's ``spec.storageClassName`` when it is a string (``""`` included:
    no class), else None (absent, null: Kubernetes' ``nil``)."""
    v = structs.fields_of(pvc, "spec").get("storageClassName")
    return v.string_value if v is not None and v.WhichOneof("kind") == "string_value" else None


def _pvc_phase(pvc_obj: Struct | None) -> str:
    """The observed PVC's ``status.phase`` (``Bound``, ``Pending``, ``Lost``), or ``""``."""
    return structs.sval(structs.sub(_manifest(pvc_obj), "status"), "phase")


def _secret_has_key(secret: Struct, key: str) -> bool:
    """True when the Secret's ``data`` (or ``stringData``) has ``key``; values are never read."""
    return any(key in structs.fields_of(secret, field) for field in ("data", "stringData"))


def _prune_keep(prune_obj: Struct | None) -> frozenset[str]:
    """The identities an observed prune Job Object keeps: the value after
    ``--prune-keep`` in its container's args (``function.manifests.hydration.prune_job``),
    as it was desired. Malformed entries are dropped; an unreadable Object keeps nothing
    (the safe reading: every identity it may remove is treated as removed)."""
    args = structs.items(
        prune_obj,
        *("spec", "forProvider", "manifest", "spec", "template", "spec", "containers"),
        0,
        "args",
    )
    for flag, value in itertools.pairwise(args):
        if flag == PRUNE_KEEP_FLAG and isinstance(value, str):
            return frozenset(parse_prune_keep(value)[0])
    return frozenset()


def _manifest_name(obj: Struct | None) -> str:
    """``metadata.name`` of the remote object an Object manifests, as desired."""
    return structs.get_str(obj, "spec", "forProvider", "manifest", "metadata", "name")
