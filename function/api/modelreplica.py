"""The ModelReplica spec: the contract between the ModelDeployment composer (which
writes it) and the ModelReplica composer (which reads it).

A ModelReplica is composed, never authored. Its spec is the deployment's
``template.spec`` narrowed to one placed cluster::

    apiVersion: modelplane.ai/v1alpha1
    kind: ModelReplica
    metadata:
      name: <naming.replica_name(namespace, deployment, index)>
      namespace: <deployment's namespace>
      labels:
        modelplane.ai/deployment: <deployment>
        modelplane.ai/cluster: <cluster>
        modelplane.ai/replica-index: "<index>"
        # plus the deployment's template.metadata.labels
    spec:
      deploymentName: chat
      index: 0
      clusterName: gpu-a                 # pinned: placement never changes it
      modelCacheRef: {name: qwen-cache, identity: 3fcdafdaf7e1}  # optional; identity: the
                                         # source identity served (set by the deployment)
      tolerations: [...]                 # verbatim from the deployment
      serving: {mode: Unified}           # verbatim
      shmSizeLimit: 16Gi                 # optional per-deployment override
      flashLoader: {enabled, image, concurrency, tmpfsSizeLimit}  # optional, deployment level
      engines:
      - name: vllm
        copies: 1
        phase: Prefill                   # optional, verbatim
        members:
        - role: Standalone | Leader | Worker
          worker: {nodes: 2}             # Worker members only
          pool: h100-pool                # the gpuPools[].name placement chose
          nodeSelector: {devices: [...]} # verbatim (devices with name, count, selectors)
          template: {metadata: ..., spec: {containers: [{name: engine, ...}]}}

One model, one strictness policy: the XRD's types (``compositions/modelreplica/
definition.yaml``) with pydantic strict types, so ``"3"``, ``true`` for a number or
``3.5`` for an integer are errors naming the field, as the API server makes them, never
coerced (numbers arrive as doubles, so an integer field takes ``3.0``). Unknown fields
are kept (``extra="allow"``) so the deployment can pass Modelplane fields through
verbatim. Pod templates stay the dicts the author wrote; the parts the function reads
or extends (containers, env, ports, mounts, volumes, tolerations, claims) are checked
against :class:`PodTemplate`.

:class:`Engine`, :class:`Member` and :class:`Worker` are declared here once: the
ModelDeployment's ``template.spec.engines`` and the ModelExperiment's
``candidate.engines`` use them too (a ModelReplica's engines are the deployment's,
with ``pool`` filled in by placement).

This module also owns the ModelReplica's status contract (written by
:mod:`function.composers.replica`): the condition :data:`MODEL_READY` and its cache-gate
reasons, which the ModelDeployment, ModelExperiment and ModelBackfill composers read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from google.protobuf.struct_pb2 import ListValue, Struct
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    model_validator,
)

from function.api.fields import Ref, WholeInt, checked
from function.api.modelcachehydration import source_identity_of
from function.core import structs
from function.core.errors import SpecError, pydantic_errors
from function.naming import SERVICE_PART
from function.serving.env import EnvVar
from jobs.contract import IDENTITY_PATTERN

__all__ = [
    "CACHE_GATE_REASONS",
    "ENGINE_AVAILABLE",
    "MODEL_READY",
    "PHASE_SERVING",
    "PHASE_STARTING",
    "REASON_CACHE_NOT_FOUND",
    "REASON_HYDRATING",
    "REASON_HYDRATION_FAILED",
    "REASON_HYDRATION_NOT_FOUND",
    "REASON_OBJECT_NOT_SYNCED",
    "REASON_ROLLOUT_STALLED",
    "REASON_WORKLOAD_KIND_CHANGED",
    "STATUS_CACHE_IDENTITIES",
    "CacheRef",
    "Engine",
    "FlashLoader",
    "Member",
    "ModelReplicaSpec",
    "PodTemplate",
    "Ref",
    "ReplicaEngine",
    "ReplicaMember",
    "Worker",
    "identities_in_use",
    "parse",
    "pods_answer",
    "reads_pvc_root",
    "reported_identities",
    "status_identity",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# ---- the parts of a pod template the function reads or extends --------------------


class Toleration(_Model):
    """A Kubernetes toleration (``operator`` and ``effect`` as the API server takes them)."""

    key: StrictStr | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: StrictStr | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: WholeInt | None = None


class _PodToleration(Toleration):
    """A pod's toleration: an empty ``operator`` means Equal and an empty ``effect``
    matches every effect (the Kubernetes ``Toleration`` type)."""

    operator: Literal["Exists", "Equal", ""] | None = None  # type: ignore[assignment]
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None  # type: ignore[assignment]


class _Port(_Model):
    containerPort: WholeInt = Field(ge=1, le=65535)
    name: StrictStr | None = None


class _Mount(_Model):
    name: StrictStr = Field(min_length=1)
    mountPath: StrictStr = Field(min_length=1)


class _Named(_Model):
    name: StrictStr = Field(min_length=1)


# The most entries of a container's ``resources.claims`` and a pod's ``resourceClaims``.
# Kubernetes sets no count (each container claim names a pod claim, and each pod claim
# is a ResourceClaim of its own); the XRDs keep both inside preserve-unknown
# ``resources``/pod templates, so without a bound a 1.5 MiB XR holds 400,000 of them and
# each wrong one costs an error. A pod with more device claims than this is not one
# anyone runs: refused at once, naming the list (review 20b F2).
MAX_POD_CLAIMS = 128


def _first_wrong() -> Any:
    """An optional list field checked up to its first wrong item (pydantic's
    ``fail_fast``): the XRDs keep pod templates preserve-unknown, so a list may hold
    500,000 wrong items, and an error each cost seconds of CPU and hundreds of MiB; the
    first wrong item (the smallest index) is the one the message names (review 20b F2)."""
    return Field(default=None, fail_fast=True)


class _Resources(_Model):
    claims: list[_Named] | None = Field(default=None, max_length=MAX_POD_CLAIMS, fail_fast=True)


class _Container(_Model):
    name: StrictStr = Field(min_length=1)
    image: StrictStr | None = None
    command: list[StrictStr] | None = _first_wrong()
    args: list[StrictStr] | None = _first_wrong()
    env: list[EnvVar] | None = _first_wrong()
    ports: list[_Port] | None = _first_wrong()
    volumeMounts: list[_Mount] | None = _first_wrong()
    resources: _Resources | None = None


class _PodSpec(_Model):
    containers: list[_Container] = Field(min_length=1, fail_fast=True)
    initContainers: list[_Container] | None = _first_wrong()
    volumes: list[_Named] | None = _first_wrong()
    tolerations: list[_PodToleration] | None = _first_wrong()
    nodeSelector: dict[str, StrictStr] | None = None
    resourceClaims: list[_Named] | None = Field(
        default=None, max_length=MAX_POD_CLAIMS, fail_fast=True
    )


class _PodMeta(_Model):
    labels: dict[str, StrictStr] | None = None
    annotations: dict[str, StrictStr] | None = None


class PodTemplate(_Model):
    """A member's pod template, as far as the function reads or extends it."""

    metadata: _PodMeta | None = None
    spec: _PodSpec


class _Selector(_Model):
    cel: StrictStr = Field(min_length=1, max_length=8192)


class _DeviceRequest(_Model):
    name: StrictStr = Field(min_length=1, max_length=63)
    count: WholeInt = Field(default=1, ge=1, le=64)
    selectors: list[_Selector] = Field(min_length=1, max_length=8)
    deviceClassName: StrictStr | None = None


class NodeSelector(_Model):
    """A member's ``nodeSelector``: the devices each of its pods claims (the bounds of the
    ModelDeployment and ModelReplica XRDs; the deployment and the experiment's candidate
    check theirs with this model too)."""

    devices: list[_DeviceRequest] = Field(min_length=1, max_length=16)


# ---- engines (shared with ModelDeployment and ModelExperiment) ----------------------


class Worker(_Model):
    """Worker sizing of a multi-node engine."""

    nodes: WholeInt = Field(ge=1)


class Member(_Model):
    """One member of an engine; ``template`` is a pod template.

    ``template`` is checked against :class:`PodTemplate` and ``nodeSelector`` against
    :class:`NodeSelector` wherever a member is written (a ModelDeployment's
    ``template.spec.engines``, a ModelExperiment's ``candidate.engines``), so a wrong
    field inside them is refused where the user wrote it, naming it, before any replica
    is composed from it; both stay the dicts the author wrote.
    """

    role: Literal["Standalone", "Leader", "Worker"] = "Standalone"
    worker: Worker | None = None
    nodeSelector: Annotated[dict[str, Any] | None, checked(NodeSelector)] = None
    template: Annotated[dict[str, Any], checked(PodTemplate)]


class Engine(_Model):
    """One serving unit: a Standalone pod, or a Leader with Workers.

    A multi-node engine may not be named ``svc`` (:data:`function.naming.SERVICE_PART`):
    its LeaderWorkerSet would get the name of the replica's Service, and the headless
    Service the LeaderWorkerSet controller creates under its own name would never be
    created (or ours would take it over), so the workers could not reach the leader.
    """

    name: StrictStr = Field(min_length=1, max_length=63)
    copies: WholeInt = Field(default=1, ge=1)
    phase: Literal["Prefill", "Decode"] | None = None
    members: list[Member] = Field(min_length=1)

    @model_validator(mode="after")
    def _not_the_service_name(self) -> Engine:
        if self.name == SERVICE_PART and any(m.role == "Leader" for m in self.members):
            raise ValueError(
                f"name: {SERVICE_PART!r} is reserved on a multi-node engine (the replica's "
                "Service has that name, and its LeaderWorkerSet would take it); rename the "
                "engine"
            )
        return self


class FlashLoader(_Model):
    """Flash-loader settings at one level; ``None`` inherits from the level below."""

    enabled: StrictBool | None = None
    image: StrictStr | None = None
    concurrency: WholeInt | None = None
    tmpfsSizeLimit: StrictStr | None = None


class _Serving(_Model):
    mode: Literal["Unified", "PrefillDecode"] = "Unified"


class ReplicaMember(Member):
    """A member as a ModelReplica holds it: placed on ``pool``."""

    pool: StrictStr | None = None


class ReplicaEngine(Engine):
    """An engine as a ModelReplica holds it (members checked, see :class:`ReplicaMember`)."""

    members: list[ReplicaMember] = Field(min_length=1)  # type: ignore[assignment]  # narrower: read only


class CacheRef(Ref):
    """``spec.modelCacheRef``: the ModelCache by name and the source identity this replica
    serves (``function.naming.source_identity``; set by the ModelDeployment, see the
    README's "Side-by-side revisions")."""

    identity: Annotated[StrictStr, Field(pattern=f"^{IDENTITY_PATTERN.pattern}$")] | None = None


class ModelReplicaSpec(_Model):
    """The spec of a ModelReplica (see the module docstring)."""

    deploymentName: StrictStr = Field(min_length=1)
    index: WholeInt = Field(ge=0)
    clusterName: StrictStr = Field(min_length=1)
    modelCacheRef: CacheRef | None = None
    tolerations: list[Annotated[dict[str, Any], checked(Toleration)]] = Field(default_factory=list)
    serving: Annotated[dict[str, Any] | None, checked(_Serving)] = None
    shmSizeLimit: StrictStr | None = None
    flashLoader: FlashLoader | None = None
    engines: list[ReplicaEngine] = Field(min_length=1)


def parse(spec: Any) -> ModelReplicaSpec:
    """Validate a ModelReplica ``spec`` (plain Python) in one pass.

    Raises:
        SpecError: naming the first wrong field (``spec.engines[0].copies`` ...) and
            listing up to five problems.
    """
    if not isinstance(spec, dict):
        raise SpecError("spec", "must be an object")
    try:
        return ModelReplicaSpec.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors("spec", e) from None


# ---- status contract (written by function.composers.replica; read by ModelDeployment,
# ModelExperiment and ModelBackfill) ---------------------------------------------------

# The ModelReplica's own condition: True when every engine serves.
MODEL_READY = "ModelReady"
# Reasons of ModelReady=False while the model cache gates the replica.
REASON_CACHE_NOT_FOUND = "CacheNotFound"
REASON_HYDRATION_NOT_FOUND = "HydrationNotFound"
REASON_HYDRATING = "Hydrating"
REASON_HYDRATION_FAILED = "HydrationFailed"
# The workload's roll onto a new identity stopped (its controller reports the progress
# deadline exceeded: no room for the surge pod, an image that does not pull...). The old
# pods still serve the old identity; the replica is not ready for the new one.
REASON_ROLLOUT_STALLED = "RolloutStalled"
# An engine's members changed role (one Standalone member <-> a Leader and a Worker)
# under the same engine name, which needs a workload of another kind (Deployment <->
# LeaderWorkerSet) in place of the observed one: the observed workload is kept as it is
# and nothing new is composed for that engine; renaming it switches make-before-break.
REASON_WORKLOAD_KIND_CHANGED = "WorkloadKindChanged"
# A child the replica serves through (its workload, a claim template, its Service) reports
# Synced=False: the workload cluster refused the last apply, so what runs there is what
# was applied before, not what the spec asks. Not ready until it applies.
REASON_OBJECT_NOT_SYNCED = "ObjectNotSynced"
# Every reason that means "waiting on (or failed by) the cache", not the workload.
CACHE_GATE_REASONS = frozenset(
    {REASON_CACHE_NOT_FOUND, REASON_HYDRATION_NOT_FOUND, REASON_HYDRATING, REASON_HYDRATION_FAILED}
)

# ``status.cacheIdentities``: the source identities (12 lowercase hex) that the replica's
# pods may be reading now, written by the ModelReplica composer: the identity of
# ``spec.modelCacheRef`` and, while the workload rolls onto it (make-before-break: the
# old pods serve until every new pod is updated and available), the identity it served
# before. A ModelCacheHydration keeps every identity that a live replica names in its spec
# or here; it never prunes weights that a pod still reads.
STATUS_CACHE_IDENTITIES = "cacheIdentities"


def identities_in_use(replica: Struct | None) -> set[str]:
    """The source identities a live ModelReplica's pods may read.

    Args:
        replica: A ModelReplica as observed or required (a protobuf ``Struct`` with
            ``spec`` and ``status``).

    Returns:
        ``spec.modelCacheRef.identity`` and every string of ``status.cacheIdentities``
        that is a well-formed identity (``jobs.contract.IDENTITY_PATTERN``); malformed
        entries are "not known" and skipped (statuses are read, not trusted). Empty for
        a replica with neither.
    """
    out = reported_identities(replica) or set()
    spec_identity = source_identity_of(structs.sub(structs.sub(replica, "spec"), "modelCacheRef"))
    if spec_identity:
        out.add(spec_identity)
    return out


def reported_identities(replica: Any) -> set[str] | None:
    """The identities a ModelReplica's status says its pods may read.

    Args:
        replica: A ModelReplica as observed or required (protobuf ``Struct`` or dict).

    Returns:
        Every string of ``status.cacheIdentities`` that is a well-formed identity
        (``jobs.contract.IDENTITY_PATTERN``; malformed entries are skipped); None when
        the status has no such list (not reported: "not known").
    """
    if not isinstance(structs.get(replica, "status", STATUS_CACHE_IDENTITIES), ListValue | list):
        return None
    return {
        v
        for v in structs.items(replica, "status", STATUS_CACHE_IDENTITIES)
        if isinstance(v, str) and IDENTITY_PATTERN.fullmatch(v)
    }


# ``status.engines[].available``: whether the engine's workload answers, as its own
# controller reports it (a Deployment's ``Available`` condition, a LeaderWorkerSet's
# groups all ready), whatever template its pods run. It differs from
# ``status.engines[].ready`` while the workload rolls make-before-break onto another
# identity (or its roll stalled): the old pods answer, the replica is not ready for the
# new identity. Written by :mod:`function.composers.replica`; read by the
# ModelDeployment's make-before-break moves (:func:`pods_answer`).
ENGINE_AVAILABLE = "available"


def pods_answer(replica: Struct | None) -> bool:
    """Whether every engine of a ModelReplica answers traffic, whatever template its
    pods run (``status.engines[].available``, see :data:`ENGINE_AVAILABLE`).

    Args:
        replica: A ModelReplica as observed (its ``status`` is read, not trusted).

    Returns:
        True when ``status.engines`` is a non-empty list and every entry is an object
        with ``available: true``; False otherwise (no status yet, a gated replica, whose
        status lists no engines, a malformed entry, or one engine not answering).
    """
    engines = structs.get(structs.sub(replica, "status"), "engines")
    if not isinstance(engines, ListValue) or not engines.values:
        return False
    for v in engines.values:
        if v.WhichOneof("kind") != "struct_value":
            return False
        a = v.struct_value.fields.get(ENGINE_AVAILABLE)
        if a is None or a.WhichOneof("kind") != "bool_value" or not a.bool_value:
            return False
    return True


# ``status.phase`` of a replica whose workload is composed (the cache gate lifted).
PHASE_SERVING = "Serving"
PHASE_STARTING = "Starting"


def reads_pvc_root(replica: Struct | None) -> bool:
    """Whether a ModelReplica's workload reads the cache PVC root: a replica of the
    release before side-by-side revisions, held there until its cluster's hydration
    stores the identity in its own directory (README, "Side-by-side revisions").

    Args:
        replica: A ModelReplica as observed (``spec`` and ``status``).

    Returns:
        True when ``spec.modelCacheRef`` names no identity, ``status.hydration`` reports
        none (the schema: absent while the engines read the PVC root) and the last
        status shows the workload composed: ``status.phase`` :data:`PHASE_SERVING` or
        :data:`PHASE_STARTING`, or :data:`MODEL_READY` True. A gated replica (phase
        ``Pending``, ``Hydrating`` or ``Failed``, not ready) or one without status:
        False. The side-by-side layout never writes or prunes the PVC root, so such a
        replica keeps serving whatever its cluster's hydration does.
    """
    if replica is None:
        return False
    ref = structs.sub(structs.sub(replica, "spec"), "modelCacheRef")
    if ref is None or source_identity_of(ref):
        return False
    status = structs.sub(replica, "status")
    if structs.sval(structs.sub(status, "hydration"), "identity"):
        return False
    if structs.sval(status, "phase") in (PHASE_SERVING, PHASE_STARTING):
        return True
    ready = structs.conditions(replica).get(MODEL_READY)
    return ready is not None and structs.get(ready, "status") == "True"


def status_identity(replica: Struct | None) -> str:
    """The source identity a ModelReplica's workload was last composed to read, as its
    status reports it: ``status.hydration.identity`` (written by
    :mod:`function.composers.replica` whenever it composes the workload on an identity).

    Args:
        replica: A ModelReplica as observed or as the XR of its own call (its
            ``status`` is read).

    Returns:
        The identity when it is well-formed (``jobs.contract.IDENTITY_PATTERN``; a
        status is read, not trusted); "" when absent, malformed or the workload reads
        the PVC root.
    """
    v = structs.get_str(structs.sub(replica, "status"), "hydration", "identity")
    return v if IDENTITY_PATTERN.fullmatch(v) else ""
