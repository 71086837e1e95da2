"""ModelCache: its model source (shared with ModelCacheShard and ModelCacheHydration)
and its status contract (the roll-up other kinds read; at the end of this module).

Field names follow Modelplane v0.3 (``spec.source: HuggingFace`` with
``spec.huggingFace``). The auth Secret is a *reference* (name and key in the XR's
own namespace); its value never passes through the function.

The models are strict (pydantic strict mode): a value of the wrong JSON type, such
as ``sizeGiB: "2"`` or ``sizeGiB: true``, is an error naming the field, as the XRD's
structural schema makes it for the API server, instead of being coerced.

This module also owns the ModelCache's status contract (written by
:mod:`function.composers.modelcache`): conditions :data:`CLUSTERS_MATCHED`,
:data:`ARTIFACT_READY` and :data:`CLUSTERS_DISTINCT` with their reasons, and
``status.clusters[].phase`` (a ModelCacheHydration phase,
:mod:`function.api.modelcachehydration`, or :data:`UNAVAILABLE`), which the
ModelExperiment artifact gate reads.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from google.protobuf.struct_pb2 import Struct
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from function.api.modelcachehydration import FAILED, READY
from function.core import structs, versioned
from function.core.errors import SpecError, pydantic_errors
from function.core.k8svalidation import dns1123_subdomain_problem
from function.core.numbers import WholeInt
from function.naming import source_identity
from function.scheduling.selectors import LabelSelector

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+\Z")


class AuthSecret(BaseModel):
    """A Secret in the XR's namespace holding the hub token under ``key``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=253)
    key: str = Field(default="HF_TOKEN", min_length=1, max_length=253)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if dns1123_subdomain_problem(v) is not None:
            raise ValueError("must be a DNS-1123 subdomain")
        return v

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if not _SECRET_KEY.match(v):
            raise ValueError("must consist of alphanumerics, '-', '_' or '.'")
        return v


class HuggingFace(BaseModel):
    """A Hugging Face Hub model: ``repo`` at ``revision``, about ``sizeGiB`` GiB."""

    model_config = ConfigDict(extra="allow", strict=True)

    repo: str = Field(min_length=1, max_length=200)
    revision: str = Field(default="main", min_length=1, max_length=200)
    sizeGiB: WholeInt = Field(ge=1, le=100_000)
    authSecret: AuthSecret | None = None

    @field_validator("repo")
    @classmethod
    def _repo(cls, v: str) -> str:
        if not _REPO.match(v):
            raise ValueError("must look like org/name")
        return v

    @field_validator("revision")
    @classmethod
    def _revision(cls, v: str) -> str:
        # A branch, tag or commit: git refuses a ref starting with "-" (the download
        # program would read it as an option) or holding whitespace or control characters.
        if v.startswith("-") or any(c.isspace() or ord(c) < 32 or c == "\x7f" for c in v):
            raise ValueError(
                "must be a branch, tag or commit: no leading '-', no whitespace or control "
                "characters (for example main, v1.0 or a 40-hex commit)"
            )
        return v


# ``spec.huggingFace.revision`` when the spec leaves it out.
DEFAULT_REVISION: str = HuggingFace.model_fields["revision"].default


def spec_source_identity(resource: Any) -> str:
    """The source identity (``naming.source_identity``) of ``spec.huggingFace`` of a
    ModelCache or a ModelCacheHydration (Struct or dict), the revision defaulting to
    :data:`DEFAULT_REVISION`; ``""`` when the spec names no repo."""
    repo = structs.get_str(resource, "spec", "huggingFace", "repo")
    if not repo:
        return ""
    revision = structs.get_str(resource, "spec", "huggingFace", "revision") or DEFAULT_REVISION
    return source_identity(repo, revision)


# Copies of the weights the cache PVC has room for: a revision edit hydrates the new
# identity beside the old one, which is pruned once no live replica serves it.
PVC_COPIES = 2


class CacheSource(BaseModel):
    """``spec.source`` and ``spec.huggingFace`` of a ModelCache (or its hydrations)."""

    model_config = ConfigDict(extra="allow", strict=True)

    source: Literal["HuggingFace"] = "HuggingFace"
    huggingFace: HuggingFace

    def size_quantity(self) -> str:
        """The PVC request as a Kubernetes quantity in GiB (``"32Gi"`` for ``sizeGiB:
        16``), rounded up: room for :data:`PVC_COPIES` copies of the weights, the current
        source identity and the previous one side by side while replicas move from one
        to the other (see the README's "Side-by-side revisions")."""
        gib = self.huggingFace.sizeGiB * PVC_COPIES
        whole = int(gib) if gib == int(gib) else int(gib) + 1
        return f"{whole}Gi"

    def to_spec(self) -> dict[str, Any]:
        """The source as it is copied down into a ModelCacheHydration's spec."""
        hf: dict[str, Any] = {
            "repo": self.huggingFace.repo,
            "revision": self.huggingFace.revision,
            "sizeGiB": self.huggingFace.sizeGiB,
        }
        if self.huggingFace.authSecret is not None:
            hf["authSecret"] = self.huggingFace.authSecret.model_dump()
        return {"source": self.source, "huggingFace": hf}


def parse_source(spec: dict[str, Any]) -> CacheSource:
    """Validate the source fields of ``spec``.

    Raises:
        SpecError: naming the first invalid field (``spec.huggingFace.repo`` ...).
    """
    if "huggingFace" not in spec:
        raise SpecError("spec.huggingFace", "is required for source HuggingFace")
    try:
        return CacheSource.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors("spec", e) from None


CLUSTER_SELECTOR_FIELD = "spec.clusterSelector"


def parse_cluster_selector(spec: dict[str, Any]) -> LabelSelector:
    """``spec.clusterSelector`` of a ModelCache's ``spec`` (plain Python): the clusters
    its footprint may hold, with full Kubernetes label-selector semantics
    (:class:`~function.scheduling.selectors.LabelSelector`).

    Raises:
        SpecError: naming the field, when it is missing (``{}`` selects every cluster)
            or invalid.
    """
    return LabelSelector.parse(spec.get("clusterSelector"), CLUSTER_SELECTOR_FIELD)


@versioned.reading(1024)
def cluster_selector(cache: Struct) -> LabelSelector | None:
    """What another kind reads of an observed ModelCache's ``spec.clusterSelector``:
    the selector as the cache applies it (:func:`parse_cluster_selector`), or None when
    it is missing or invalid (the cache itself reports that: ``Synced=False`` naming the
    field). Kept by the object's version (:func:`function.core.versioned.reading`); call
    it as ``cluster_selector(cache, version)`` when the version is known."""
    raw = structs.to_py(structs.get(cache, "spec", "clusterSelector"))
    try:
        return parse_cluster_selector({"clusterSelector": raw})
    except SpecError:
        return None


# ---- status contract (written by function.composers.modelcache; read by the
# ModelExperiment artifact gate and ModelDeployment placement) ------------------------
#
# ``status.source {repo, revision, identity}``: the source the roll-up describes.
# ``status.summary {ready: "r/n", total, matched, shards, retained,
#   phases {Pending, Hydrating, Ready, Failed, Unavailable}}``: counts over the footprint.
# ``status.evidence[] {commit, digest, clusters, validated}``: one entry per distinct
#   artifact the Ready clusters recorded (``validated``: how many of them recorded a
#   checksum validation time), most clusters first, at most MAX_EVIDENCE entries;
#   ``summary.artifacts`` counts them all.
# ``status.failed[]``, ``status.unavailable[]``: ``{name, message}``, at most
#   MAX_LISTED each (the counts in ``summary.phases`` stay whole).
# ``status.retained[] {name, message}``: every cluster kept only while a live
#   ModelReplica uses it (at most one per live replica of the cache).
# Per-cluster rows live in the cache's ModelCacheShards (``status.clusters[]``).

# Conditions of a ModelCache.
CLUSTERS_MATCHED = "ClustersMatched"
ARTIFACT_READY = "ArtifactReady"
# Whether the InferenceClusters the cache is sent reach distinct workload clusters, as
# far as the function can see: no two Existing clusters name the same kubeconfig Secret.
CLUSTERS_DISTINCT = "ClustersDistinct"
# ClustersDistinct reasons (and ResolvingClusters while the clusters are not resolved).
REASON_DISTINCT = "Distinct"
REASON_SHARED_KUBECONFIG = "SharedKubeconfig"
# ArtifactReady reasons.
REASON_HYDRATED = "Hydrated"
REASON_HYDRATING = "Hydrating"
REASON_HYDRATION_FAILED = "HydrationFailed"
REASON_NO_MATCHING_CLUSTERS = "NoMatchingClusters"
REASON_NO_HOSTABLE_CLUSTERS = "NoHostableClusters"
# ``summary.phases`` and a shard's ``status.clusters[].phase``: a hydration phase
# (function.api.modelcachehydration.PHASES) for clusters of the footprint, or this one for
# a matched cluster that cannot host a cache.
UNAVAILABLE = "Unavailable"

MAX_EVIDENCE = 8


def retained_clusters(cache: Any) -> frozenset[str]:
    """The clusters a ModelCache keeps only while a live replica uses them.

    Read from ``status.retained[].name`` (the cluster left ``spec.clusterSelector``).
    The contract ModelDeployment placement reads: no new replica there, replicas there
    move into the footprint make-before-break, then the hydration is reclaimed. It is
    written from the shards' reports, one reconcile of a shard after the selector
    changed: placement also treats a footprint cluster that :func:`cluster_selector`
    no longer matches as retained.
    """
    out = set()
    for e in structs.items(cache, "status", "retained"):
        name = structs.get_str(e, "name")
        if name:
            out.add(name)
    return frozenset(out)


class CacheRollup(BaseModel):
    """What a ModelCache's status says about its footprint (see the contract above).

    ``evidence``: ``(commit, digest, clusters, validated)`` per distinct artifact among
    the Ready clusters; ``evidence_complete`` is False when the status lists fewer
    artifacts than ``summary.artifacts`` counts (a reader must then fail closed).
    """

    model_config = ConfigDict(frozen=True)

    total: int = 0
    ready: int = 0
    failed_count: int = 0
    failed: list[tuple[str, str]] = []
    waiting: list[str] = []
    evidence: list[tuple[str, str, int, int]] = []
    evidence_complete: bool = True


def read_rollup(cache: Any) -> CacheRollup:
    """Read :class:`CacheRollup` from a ModelCache (Struct or dict); absent fields are 0."""

    def count(*path: str | int, node: Any = None) -> int:
        v = structs.get(cache if node is None else node, *path)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e15
        return int(v) if ok else 0

    failed = [
        (structs.get_str(e, "name"), structs.get_str(e, "message"))
        for e in structs.items(cache, "status", "failed")
    ]
    evidence = [
        (
            structs.get_str(e, "commit"),
            structs.get_str(e, "digest"),
            count("clusters", node=e),
            count("validated", node=e),
        )
        for e in structs.items(cache, "status", "evidence")
    ]
    waiting = [v for v in structs.items(cache, "status", "waiting") if isinstance(v, str) and v]
    return CacheRollup(
        total=count("status", "summary", "total"),
        ready=count("status", "summary", "phases", READY),
        failed_count=count("status", "summary", "phases", FAILED),
        failed=failed,
        waiting=waiting,
        evidence=evidence,
        evidence_complete=len(evidence) >= count("status", "summary", "artifacts"),
    )
