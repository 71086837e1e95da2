"""ModelCacheHydration: the spec parsed once per distinct spec, and the desired Objects
built by bounded, memoized builders and kept serialized (no decisions here)."""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import Struct

from function.api.modelcache import CacheSource, parse_source
from function.composers.hydration.keys import (
    RBAC_KEYS,
    job_key,
    prune_key,
)
from function.core import structs
from function.core.errors import SpecError
from function.core.memo import memo
from function.core.timeutil import format_time, parse_time
from function.manifests import hydration as storage
from function.manifests.objects import remote_object
from function.naming import (
    LABEL_CACHE,
    LABEL_CLUSTER,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    REMOTE_NAMESPACE,
    cache_pvc_name,
    cache_secret_name,
    child_name,
    hydration_job_name,
    labels_with_full,
    source_identity,
)
from jobs.contract import RESULT_COMMIT, RESULT_DIGEST, RESULT_IDENTITY, RESULT_VALIDATED_AT

_COMMIT = re.compile(r"^[0-9a-f]{40}\Z")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")

# ---- the spec (validated once per distinct spec) ------------------------------------


class _Spec(NamedTuple):
    """The validated spec of a ModelCacheHydration (shared between calls: read only)."""

    cluster: str
    cache: str
    source: CacheSource
    identity: str


@memo(8192, weight=4)
def _parse_spec(raw: bytes) -> _Spec:
    """Validate a serialized ``spec`` Struct (memoized: the spec rarely changes).

    Keyed by the Struct's deterministic serialization, so an equal spec is validated
    once (pydantic validation of the source is the costly part); an invalid spec
    raises every time (``lru_cache`` does not keep exceptions).

    Raises:
        SpecError: for a missing ``spec.clusterName``/``spec.cacheName`` or an
            invalid source.
    """
    spec = structs.to_py(Struct.FromString(raw))
    cluster = spec.get("clusterName")
    if not isinstance(cluster, str) or not cluster:
        raise SpecError("spec.clusterName", "is required")
    cache = spec.get("cacheName")
    if not isinstance(cache, str) or not cache:
        raise SpecError("spec.cacheName", "is required")
    source = parse_source(spec)
    hf = source.huggingFace
    return _Spec(cluster, cache, source, source_identity(hf.repo, hf.revision))


# ---- desired Objects (memoized pure builders) -------------------------------------
#
# Each builds its Objects once per distinct input (names, the provider config, settings
# values: one entry per hydration and source) and keeps them serialized: a Struct held
# in memory costs about 6 times its wire size (about 80 KiB per hydration against 10
# KiB), and the runner splices the bytes into the response as they are
# (:func:`function.edge.codec.resource_entry`). Building from dicts (``Struct.update``)
# is what would cost: it was most of a call's time.
# The caches are bounded; a Ready hydration needs only ``lasting_objects``, so that
# one is sized for a large fleet and the others for the hydrations running at once.


def _wire(d: dict[str, Any]) -> bytes:
    """``d`` as a serialized Struct (deterministic)."""
    s = Struct()
    s.update(d)
    return s.SerializeToString(deterministic=True)


def _labels(cache: str, cluster: str, component: str) -> tuple[dict[str, str], dict[str, str]]:
    return labels_with_full(
        {
            LABEL_CACHE: cache,
            LABEL_CLUSTER: cluster,
            LABEL_COMPONENT: component,
            LABEL_MANAGED_BY: MANAGED_BY,
        }
    )


def result_configmap_name(namespace: str, cache: str) -> str:
    """The remote ConfigMap the download Job reports its result to."""
    return child_name("modelcache-result", namespace, cache)


def rbac_name(namespace: str, cache: str) -> str:
    """The remote ServiceAccount, Role and RoleBinding that let the Job report."""
    return child_name("modelcache-rbac", namespace, cache)


class Target(NamedTuple):
    """Where a hydration's Objects go (a tuple: hashed and compared in C; part of every
    builder's memo key).

    Attributes:
        ns: The ModelCacheHydration's namespace (the Objects' too).
        xr_name: The ModelCacheHydration's name (prefix of the Objects' names).
        cache: The ModelCache's name.
        cluster: The InferenceCluster's name.
        pc: The cluster's provider config ``(kind, name)``.
    """

    ns: str
    xr_name: str
    cache: str
    cluster: str
    pc: tuple[str, str]


class Download(NamedTuple):
    """What the download Job runs (a tuple; part of :func:`download_objects`' key).

    Attributes:
        repo: The Hugging Face repository.
        revision: Its revision.
        with_token: Whether the Job reads the token Secret.
        image: The hydration image (``settings.hydration_image``).
        backoff_limit: The Job's ``backoffLimit``.
        deadline_seconds: The Job's ``activeDeadlineSeconds``.
    """

    repo: str
    revision: str
    with_token: bool
    image: str
    backoff_limit: int
    deadline_seconds: int


@memo(16384, weight=4)
def lasting_objects(
    target: Target, storage_class: str | None, size: str
) -> tuple[bytes, bytes]:
    """The ``pvc`` and ``result`` Objects, serialized (memoized); ``storage_class`` None
    leaves the PVC's ``storageClassName`` out (:func:`~function.manifests.hydration.cache_pvc`)."""
    ns, xr_name, cache, cluster, pc = target
    pc_ref = {"kind": pc[0], "name": pc[1]}
    labels, ann = _labels(cache, cluster, "cache")
    pvc = storage.cache_pvc(
        cache_pvc_name(ns, cache),
        REMOTE_NAMESPACE,
        size=size,
        storage_class=storage_class,
        labels=labels,
        annotations=ann,
    )
    result_labels, result_ann = _labels(cache, cluster, "hydration-result")
    result = storage.result_configmap(
        result_configmap_name(ns, cache),
        REMOTE_NAMESPACE,
        labels=result_labels,
        annotations=result_ann,
    )
    return (
        _wire(
            remote_object(
                child_name(xr_name, "pvc"),
                ns,
                pc_ref,
                pvc,
                labels=labels,
                annotations=ann,
                readiness_cel=storage.PVC_BOUND_CEL,
            )
        ),
        _wire(
            remote_object(
                child_name(xr_name, "result"),
                ns,
                pc_ref,
                result,
                labels=result_labels,
                annotations=result_ann,
            )
        ),
    )


@memo(2048, weight=4)
def token_object(target: Target, auth_name: str, auth_key: str) -> bytes:
    """The ``token-secret`` Object, serialized (memoized); no token in it."""
    ns, xr_name, cache, cluster, pc = target
    labels, ann = _labels(cache, cluster, "hydration-token")
    manifest = storage.token_secret(
        cache_secret_name(ns, cache), REMOTE_NAMESPACE, labels=labels, annotations=ann
    )
    return _wire(
        remote_object(
            child_name(xr_name, "token"),
            ns,
            {"kind": pc[0], "name": pc[1]},
            manifest,
            labels=labels,
            annotations=ann,
            references=[storage.token_reference(auth_name, ns, auth_key)],
        )
    )


@memo(2048, weight=4)
def download_objects(target: Target, download: Download) -> tuple[tuple[str, bytes], ...]:
    """``(key, serialized Object)`` of the RBAC children and the download Job (memoized)."""
    ns, xr_name, cache, cluster, pc = target
    repo, revision, with_token, image, backoff_limit, deadline_seconds = download
    pc_ref = {"kind": pc[0], "name": pc[1]}
    labels, ann = _labels(cache, cluster, "hydration")
    identity = source_identity(repo, revision)
    sa = rbac_name(ns, cache)
    result = result_configmap_name(ns, cache)
    job = storage.hydration_job(
        hydration_job_name(ns, cache, repo, revision),
        REMOTE_NAMESPACE,
        image=image,
        repo=repo,
        revision=revision,
        identity=identity,
        pvc_name=cache_pvc_name(ns, cache),
        token_secret_name=cache_secret_name(ns, cache) if with_token else None,
        backoff_limit=backoff_limit,
        active_deadline_seconds=deadline_seconds,
        labels=labels,
        annotations=ann,
        result_configmap=result,
        service_account=sa,
    )
    rbac = storage.result_rbac(sa, REMOTE_NAMESPACE, result, labels=labels, annotations=ann)
    out = [
        (
            key,
            _wire(
                remote_object(
                    child_name(xr_name, key), ns, pc_ref, manifest, labels=labels, annotations=ann
                )
            ),
        )
        for key, manifest in zip(RBAC_KEYS, rbac, strict=True)
    ]
    out.append(
        (
            job_key(identity),
            _wire(
                remote_object(
                    child_name(xr_name, "job", identity),
                    ns,
                    pc_ref,
                    job,
                    labels=labels,
                    annotations=ann,
                    readiness_cel=storage.JOB_COMPLETE_CEL,
                    deletion_policy="Background",
                )
            ),
        )
    )
    return tuple(out)


@memo(1024, weight=4)
def prune_object(target: Target, image: str, keep: tuple[str, ...]) -> bytes:
    """The prune Job Object that keeps ``keep`` (sorted identities), serialized."""
    ns, xr_name, cache, cluster, pc = target
    labels, ann = _labels(cache, cluster, "hydration-prune")
    key = prune_key(keep)
    job = storage.prune_job(
        child_name("modelcache-prune", ns, cache, *keep),
        REMOTE_NAMESPACE,
        image=image,
        pvc_name=cache_pvc_name(ns, cache),
        keep=keep,
        labels=labels,
        annotations=ann,
    )
    return _wire(
        remote_object(
            child_name(xr_name, key),
            ns,
            {"kind": pc[0], "name": pc[1]},
            job,
            labels=labels,
            annotations=ann,
            readiness_cel=storage.JOB_COMPLETE_CEL,
            deletion_policy="Background",
        )
    )


@memo(1024, weight=4)
def _source_status(repo: str, revision: str, identity: str) -> Struct:
    """``status.source`` (memoized and shared: never mutate it; the runner copies it)."""
    s = Struct()
    s.update({"repo": repo, "revision": revision, "identity": identity})
    return s


def _evidence(raw: str, identity: str) -> tuple[str, str, str] | None:
    """``(commit, digest, validatedAt)`` of a result JSON for ``identity``, or None.

    Memoized for results of the size the download program writes (under 4 KiB); a
    larger ``data.result`` is parsed every time rather than kept in memory.
    """
    if len(raw) <= _EVIDENCE_MEMO_MAX:
        return _evidence_memo(raw, identity)
    return _parse_evidence(raw, identity)


def _parse_evidence(raw: str, identity: str) -> tuple[str, str, str] | None:
    try:
        result = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(result, dict) or result.get(RESULT_IDENTITY) != identity:
        return None
    commit, digest = result.get(RESULT_COMMIT), result.get(RESULT_DIGEST)
    validated = parse_time(result.get(RESULT_VALIDATED_AT))
    if not (
        isinstance(commit, str)
        and _COMMIT.match(commit)
        and isinstance(digest, str)
        and _DIGEST.match(digest)
        and validated is not None
    ):
        return None
    return commit, digest, format_time(validated)


_EVIDENCE_MEMO_MAX = 4096
_evidence_memo = memo(4096)(_parse_evidence)
