"""Names and label values of composed resources: one module owns them.

Kubernetes object names used here must be DNS-1123 labels: at most 63
characters of ``[a-z0-9-]``, starting and ending with an alphanumeric
(https://kubernetes.io/docs/concepts/overview/working-with-objects/names/).
Label values are at most 63 characters of ``[A-Za-z0-9_.-]``, starting and
ending with an alphanumeric, or empty
(https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/).

Every name is ``<readable head>-<hash>`` (the contract in the README, "Names"):
the hash is the first :data:`HASH_LEN` hex characters of the sha256 of an
unambiguous encoding of the parts (:func:`encode_parts`: each part's UTF-8 length,
``:``, the part), so no other tuple of parts can produce it (short of a 48-bit
hash collision); the head is only for people to read (parts folded into DNS-1123
characters, joined with ``-``, truncated to fit). Names are stable across calls,
processes and releases.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from function import API_GROUP
from function.core.k8svalidation import DNS1123_LABEL, DNS1123_LABEL_MAX, LABEL_VALUE
from function.core.memo import memo

_INVALID = re.compile(r"[^a-z0-9-]+")
MAX_LABEL = DNS1123_LABEL_MAX

# Labels that tie children to their parents.
LABEL_CACHE = f"{API_GROUP}/cache"
LABEL_CLUSTER = f"{API_GROUP}/cluster"
LABEL_SHARD = f"{API_GROUP}/shard"
LABEL_DEPLOYMENT = f"{API_GROUP}/deployment"
LABEL_REPLICA = f"{API_GROUP}/replica"
LABEL_REPLICA_INDEX = f"{API_GROUP}/replica-index"
LABEL_EXPERIMENT = f"{API_GROUP}/experiment"
LABEL_BACKFILL = f"{API_GROUP}/backfill"
LABEL_RUN = f"{API_GROUP}/run"
LABEL_GENERATION = f"{API_GROUP}/generation"
LABEL_COMPONENT = f"{API_GROUP}/component"
# Remote manifests (inside provider-kubernetes Objects): the control-plane namespace
# that owns the object, in its own metadata only (never a selector or a pod template).
# Every remote object lives in REMOTE_NAMESPACE, so this is what tells two namespaces'
# same-named caches or deployments apart on a workload cluster.
LABEL_NAMESPACE = f"{API_GROUP}/namespace"
# Serving pods: the Service selects them by LABEL_SERVING; a workload's pods carry
# LABEL_WORKLOAD, its selector.
LABEL_SERVING = f"{API_GROUP}/serving"
LABEL_WORKLOAD = f"{API_GROUP}/workload"
# Node label of a GPU pool's nodes (Modelplane's convention), used when the
# InferenceCluster's gpuPools[] entry declares no nodeSelector of its own.
LABEL_POOL = f"{API_GROUP}/pool"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "function-modelplane"
# ModelExperiment: annotations on the candidate that record what opened the artifact
# gate, and the experiment a gauntlet Job belongs to (``<namespace>/<name>``).
ANNOTATION_GATE_CACHE = f"{API_GROUP}/gate-cache"
ANNOTATION_GATE_CACHE_UID = f"{API_GROUP}/gate-cache-uid"
ANNOTATION_GATE_CACHE_GENERATION = f"{API_GROUP}/gate-cache-generation"
ANNOTATION_GATE_COMMIT = f"{API_GROUP}/gate-commit"
ANNOTATION_GATE_DIGEST = f"{API_GROUP}/gate-digest"
ANNOTATION_EXPERIMENT = f"{API_GROUP}/experiment"
# Labels of a candidate's replica and pod templates. The ModelDeployment XRD reserves
# the ``modelplane.ai/`` prefix in template labels for the function's own bookkeeping,
# so the experiment's own template labels live under a sub-domain of it.
EXPERIMENT_TEMPLATE_LABEL_PREFIX = f"experiment.{API_GROUP}/"
# Annotation prefix that keeps a label's full value when it had to be shortened:
# ``modelplane.ai/full-<label name part>``.
ANNOTATION_FULL_PREFIX = f"{API_GROUP}/full-"


def _fold(part: str) -> str:
    return _INVALID.sub("-", part.lower()).strip("-")


# Hex characters of the hash in every name: 48 bits, so a collision between two
# given tuples has probability 2**-48, and within a set of a million names about 2e-3.
HASH_LEN = 12
# Tags the hash input with the scheme, so a future scheme can never reproduce a name.
_SCHEME = b"modelplane-name-v1\x00"


def encode_parts(parts: tuple[str, ...]) -> bytes:
    """The unambiguous encoding of ``parts`` that names hash.

    Each part as ``<byte length of its UTF-8>:<its UTF-8>``, concatenated; for example
    ``("ml", "team-x")`` is ``b"2:ml6:team-x"``. Distinct tuples give distinct bytes
    (a decoder reads each length, then exactly that many bytes), whatever the parts
    contain: ``("ml", "team-x")`` and ``("ml-team", "x")`` differ, and so do
    ``("a", "")`` and ``("a",)``.
    """
    out = bytearray()
    for p in parts:
        b = p.encode()
        out += b"%d:" % len(b)
        out += b
    return bytes(out)


def name_hash(parts: tuple[str, ...]) -> str:
    """:data:`HASH_LEN` lowercase hex characters of sha256(scheme tag + encoded ``parts``)."""
    return hashlib.sha256(_SCHEME + encode_parts(parts)).hexdigest()[:HASH_LEN]


@memo(65536)
def child_name(*parts: str) -> str:
    """Build a stable DNS-1123 label (at most 63 characters) from ``parts``.

    Args:
        parts: Name components, for example ``("modelcache-hydration", namespace, cache,
            cluster)``. Any strings; characters outside ``[a-z0-9-]`` are folded to
            ``-`` in the readable head only.

    Returns:
        ``<head>-<hash>``: the head is the folded non-empty parts joined by ``-``,
        truncated to ``63 - 1 - HASH_LEN`` characters (trailing ``-`` dropped; ``x``
        when nothing is left); the hash is :func:`name_hash` of ``parts``. Injective
        on tuples of parts (up to the hash), whatever the parts contain.
    """
    head = "-".join(p for p in (_fold(x) for x in parts) if p)
    head = head[: MAX_LABEL - 1 - HASH_LEN].rstrip("-") or "x"
    return f"{head}-{name_hash(parts)}"


@memo(65536)
def label_value(value: str) -> str:
    """Return ``value`` as a valid label value, shortened with a hash if needed.

    Args:
        value: Any string.

    Returns:
        ``value`` itself when it is already valid; otherwise at most 57 safe
        characters, ``-``, and 5 hex characters of the sha256 of ``value``.
        Callers keep the full value in an annotation (see :func:`labels_with_full`).
    """
    if len(value) <= MAX_LABEL and LABEL_VALUE.match(value):
        return value
    h = hashlib.sha256(value.encode()).hexdigest()[:5]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:57]
    safe = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", safe)
    return f"{safe}-{h}" if safe else h


def labels_with_full(labels: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Make every value of ``labels`` valid; keep shortened values in annotations.

    Args:
        labels: Label key to desired (possibly too long) value.

    Returns:
        ``(labels, annotations)``: valid labels, and for every value that had to
        be shortened an annotation ``modelplane.ai/full-<key name>`` holding it.
    """
    out: dict[str, str] = {}
    ann: dict[str, str] = {}
    for k, v in labels.items():
        lv = label_value(v)
        out[k] = lv
        if lv != v:
            ann[ANNOTATION_FULL_PREFIX + k.rsplit("/", 1)[-1]] = v
    return out, ann


def composed_metadata(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """``metadata {name, namespace, labels[, annotations]}`` of a composed resource:
    label values shortened by :func:`labels_with_full`, full values kept in annotations."""
    short, ann = labels_with_full(labels)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": short}
    if ann:
        meta["annotations"] = ann
    return meta


# ---- Names shared between kinds (the contracts) -----------------------------


def hydration_name(namespace: str, cache: str, cluster: str) -> str:
    """Name of the ModelCacheHydration XR of ``cache`` on ``cluster``."""
    return child_name("modelcache-hydration", namespace, cache, cluster)


# The number of shards a ModelCache's footprint is split into. Fixed forever: a
# cluster's shard must never change (Crossplane deletes a composed resource its parent
# stops desiring, so a hydration that moved to another shard would lose its PVC).
CACHE_SHARDS = 64
_SHARD_SCHEME = b"modelplane-shard-v1\x00"


@memo(65536, weight=8)
def cache_shard(cluster: str) -> int:
    """The shard (``0 .. CACHE_SHARDS-1``) that holds the hydration on ``cluster``.

    ``int(sha256("modelplane-shard-v1\\0" + encode_parts((cluster,)))[:8]) % 64``:
    a pure function of the cluster's name alone, the same for every cache, fleet size
    and release (README, Names). Uniform enough that 10,000 clusters put about 156 in
    each shard.
    """
    digest = hashlib.sha256(_SHARD_SCHEME + encode_parts((cluster,))).digest()
    return int.from_bytes(digest[:8], "big") % CACHE_SHARDS


def shard_name(namespace: str, cache: str, shard: int) -> str:
    """Name of the ModelCacheShard XR of ``cache`` for shard number ``shard``."""
    return child_name("modelcache-shard", namespace, cache, str(shard))


def cache_pvc_name(namespace: str, cache: str) -> str:
    """Name of the cache PVC on every cluster; the serving side mounts it by this name.

    The same on every cluster: ``child_name("modelcache-pvc", namespace, cache)``.
    """
    return child_name("modelcache-pvc", namespace, cache)


def cache_secret_name(namespace: str, cache: str) -> str:
    """Name of the token Secret the hydration Job reads on a cluster."""
    return child_name("modelcache-token", namespace, cache)


def source_identity(repo: str, revision: str) -> str:
    """A short, stable identity of a model source (repo and revision).

    :func:`name_hash` of ``("source", repo, revision)``: 12 lowercase hex characters,
    distinct for distinct (repo, revision) pairs whatever they contain.
    """
    return name_hash(("source", repo, revision))


def hydration_job_name(namespace: str, cache: str, repo: str, revision: str) -> str:
    """Name of the download Job; it carries the source identity.

    A Job's pod template is immutable, so a change of repo or revision gets a
    new Job name instead of colliding with the old Job.
    """
    return child_name("modelcache-job", namespace, cache, source_identity(repo, revision))


def replica_name(namespace: str, deployment: str, index: int) -> str:
    """Name of the ModelReplica XR with ``index`` of a ModelDeployment."""
    return child_name("modelreplica", namespace, deployment, str(index))


# ---- Remote (workload-cluster) names of the serving side --------------------

# Namespace on a workload cluster that holds the cache PVC and the pods that mount
# it: a pod can mount only a PersistentVolumeClaim of its own namespace
# (https://kubernetes.io/docs/concepts/storage/persistent-volumes/#claims-as-volumes).
# Names that share it carry the control-plane namespace in their hash.
REMOTE_NAMESPACE = "default"

# The head of every name the function gives an object in REMOTE_NAMESPACE that a pod
# spec can name (the token Secret, cache PVC, result ConfigMap and ServiceAccount of
# each namespace's ModelCache: ``modelcache-token-...``, ``modelcache-pvc-...``,
# ``modelcache-result-...``, ``modelcache-rbac-...``). Those of every control-plane
# namespace share REMOTE_NAMESPACE, so a pod template a tenant writes may not name one
# (``function.manifests.tenancy``).
REMOTE_OWN_PREFIX = "modelcache-"

# A LeaderWorkerSet's name reappears in its StatefulSets (``<lws>-<group>``), pod
# names (``<lws>-<group>-<index>``) and their ``controller-revision-hash`` label
# (``<statefulset>-<10 chars>``), all limited to 63 characters, so workload names
# stay within 40.
MAX_WORKLOAD_NAME = 40


@memo(65536)
def short_name(max_len: int, shown: tuple[str, ...], hashed: tuple[str, ...] = ()) -> str:
    """A stable DNS-1035 label of at most ``max_len`` characters (>= 20).

    ``<folded shown parts joined by "-", truncated>-<hash>``, the hash
    (:func:`name_hash`) taken over ``("dns1035", <count of shown parts>, *shown,
    *hashed)``, so the split between shown and hashed parts is part of the input. It
    starts with a letter (``mr-`` is prepended otherwise), so it is also a valid
    Service name (DNS-1035,
    https://kubernetes.io/docs/concepts/services-networking/service/).
    """
    h = name_hash(("dns1035", str(len(shown)), *shown, *hashed))
    head = "-".join(p for p in (_fold(x) for x in shown) if p) or "x"
    if not head[0].isalpha():
        head = f"mr-{head}"
    head = head[: max_len - 1 - HASH_LEN].rstrip("-")
    return f"{head}-{h}"


def workload_name(namespace: str, replica: str, deployment: str, index: int, engine: str) -> str:
    """Remote name of the Deployment or LeaderWorkerSet of ``engine`` of a ModelReplica.

    Readable as ``<deployment>-<index>-<engine>-<hash>``; the hash also covers the
    control-plane namespace and the replica name, so replicas of namespaces that
    share a workload cluster never collide. At most :data:`MAX_WORKLOAD_NAME` characters.
    """
    return short_name(MAX_WORKLOAD_NAME, (deployment, str(index), engine), (namespace, replica))


# Hex characters of the hash a ResourceClaimTemplate's name ends with (40 bits): the
# longest workload name (40), ``-standalone`` and ``-`` plus these stay within 63.
CLAIM_HASH_LEN = 10
# Tags the claim hash input, as _SCHEME tags names.
_CLAIM_SCHEME = b"modelplane-claim-v1\x00"


def claim_requests_hash(requests: Any) -> str:
    """:data:`CLAIM_HASH_LEN` lowercase hex characters of sha256(scheme tag + the
    canonical JSON of ``requests``): keys sorted, no whitespace, UTF-8 (``ensure_ascii``
    off), numbers as Python's ``json`` writes them.

    Args:
        requests: The ``spec.spec.devices.requests`` a ResourceClaimTemplate asks for
            (plain JSON values: ``function.manifests.workloads.device_request``).

    Equal requests give equal hashes in every process and release; the order of keys
    does not count, the order of the list does (it is the order of the member's
    ``nodeSelector.devices``).
    """
    text = json.dumps(requests, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(_CLAIM_SCHEME + text.encode()).hexdigest()[:CLAIM_HASH_LEN]


def claim_template_name(workload: str, role: str, digest: str = "") -> str:
    """Remote name of the ResourceClaimTemplate of one member of a replica's engine.

    ``<workload>-<role lowercased>-<digest>``, ``digest`` being
    :func:`claim_requests_hash` of what the template asks for: a ResourceClaimTemplate's
    ``spec`` is immutable (``resource.k8s.io/v1``), so a template that asks for other
    devices is a new object under a new name, and the pod template that names it rolls.
    Without ``digest`` (""), the name of the release before it (``<workload>-<role>``),
    which a replica keeps while its observed template asks for what the spec asks
    (:mod:`function.composers.replica.desired`). At most 40 + 11 + 1 + 10 = 62
    characters (:data:`MAX_WORKLOAD_NAME`).
    """
    base = f"{workload}-{role.lower()}"
    return f"{base}-{digest}" if digest else base


SERVICE_PART = "svc"
"""The part of a replica's Service name where a workload name has its engine's name: so
no multi-node engine may be named this (``function.api.modelreplica.Engine``)."""


def replica_service_name(namespace: str, replica: str, deployment: str, index: int) -> str:
    """Remote name of the Service in front of a ModelReplica's serving pods.

    Distinct from every workload name of a multi-node engine (a LeaderWorkerSet creates
    a headless Service named after itself, and must not find ours under that name): the
    engine name :data:`SERVICE_PART` is refused there.
    """
    return short_name(MAX_LABEL, (deployment, str(index), SERVICE_PART), (namespace, replica))


# ---- ModelBackfill (issue 6) -------------------------------------------------

# The foreground signal: an annotation on a ModelDeployment holding the RFC 3339 time
# of the last foreground request to it, maintained by whatever sees the traffic (the
# gateway). Requests of the background workload class must not update it. Missing or
# unparsable means "not known to be idle" (see the README, ModelBackfill).
ANNOTATION_LAST_FOREGROUND = f"{API_GROUP}/last-foreground-request"
# Env var (and pod label) naming a workload's class; backfill Jobs always get
# ``background`` and users may not set it.
WORKLOAD_CLASS_ENV = "MODELPLANE_WORKLOAD_CLASS"
LABEL_WORKLOAD_CLASS = f"{API_GROUP}/workload-class"
WORKLOAD_CLASS_BACKGROUND = "background"
# A Job's name is the value of its pods' ``job-name`` label and the prefix of their
# names (``<job>-<5 chars>``), so backfill Job names stay well within 63 characters.
MAX_BACKFILL_JOB_NAME = 52


# An Indexed Job's pods are hostnamed ``<job>-<index>``, a DNS-1123 label: the API server
# refuses an Indexed Job whose ``<name>-<completions - 1>`` is not one (Kubernetes'
# ``pkg/apis/batch/validation`` ValidateJob: "will not able to create pod with invalid
# DNS label"). ``completions`` is an int32, at most 10 digits, so a name of at most 52
# characters fits every index.
MAX_INDEXED_JOB_NAME = MAX_LABEL - len(f"-{2**31 - 1}")


def indexed_job_fits(name: str, completions: int) -> bool:
    """Whether an Indexed Job named ``name`` with ``completions`` can create its last pod:
    ``<name>-<completions - 1>`` is a DNS-1123 label."""
    host = f"{name}-{completions - 1}"
    return len(host) <= MAX_LABEL and bool(DNS1123_LABEL.match(host))


def backfill_object_name(backfill: str, attempt: int) -> str:
    """Name of the provider-kubernetes Object (beside the ModelBackfill) of ``attempt``."""
    return child_name("modelbackfill", backfill, str(attempt))


def backfill_observer_name(backfill: str, attempt: int) -> str:
    """Name of the Observe-only Object (beside the ModelBackfill) that watches the Job of
    ``attempt`` (``function.composers.backfill.children.observer_object``)."""
    return child_name("modelbackfill-observer", backfill, str(attempt))


def backfill_job_name(namespace: str, backfill: str, attempt: int) -> str:
    """Remote name of the Job of ``attempt`` of a ModelBackfill (in :data:`REMOTE_NAMESPACE`).

    One name per attempt, so a finished Job is never confused with the next one; the
    hash covers the control-plane namespace, since clusters are shared.
    """
    return short_name(MAX_BACKFILL_JOB_NAME, ("bf", backfill, str(attempt)), (namespace,))
