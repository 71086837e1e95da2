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
      modelCacheRef: {name: qwen-cache}  # optional
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

The models below validate it; unknown fields are kept (``extra="allow"``) so the
deployment can pass Modelplane fields through verbatim.

This module also owns the ModelReplica's status contract (written by
:mod:`function.composers.replica`): the condition :data:`MODEL_READY` and its cache-gate
reasons, which the ModelDeployment, ModelExperiment and ModelBackfill composers read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Ref(_Model):
    """A reference by name in the XR's own namespace."""

    name: str = Field(min_length=1)


class Worker(_Model):
    """Worker sizing of a multi-node engine."""

    nodes: int = Field(default=1, ge=1)


class Member(_Model):
    """One member of an engine, placed on ``pool``."""

    role: Literal["Standalone", "Leader", "Worker"] = "Standalone"
    worker: Worker | None = None
    pool: str | None = None
    nodeSelector: dict[str, Any] | None = None
    template: dict[str, Any]


class Engine(_Model):
    """One serving unit: a Standalone pod, or a Leader with Workers."""

    name: str = Field(min_length=1, max_length=63)
    copies: int = Field(default=1, ge=1)
    phase: Literal["Prefill", "Decode"] | None = None
    members: list[Member] = Field(min_length=1)


class FlashLoader(_Model):
    """Flash-loader settings at one level; ``None`` inherits from the level below."""

    enabled: bool | None = None
    image: str | None = None
    concurrency: int | None = None
    tmpfsSizeLimit: str | None = None


class ModelReplicaSpec(_Model):
    """The spec of a ModelReplica (see the module docstring)."""

    deploymentName: str = Field(min_length=1)
    index: int = Field(ge=0)
    clusterName: str = Field(min_length=1)
    modelCacheRef: Ref | None = None
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    serving: dict[str, Any] | None = None
    shmSizeLimit: str | None = None
    flashLoader: FlashLoader | None = None
    engines: list[Engine] = Field(min_length=1)


# ---- status contract (written by function.composers.replica; read by ModelDeployment,
# ModelExperiment and ModelBackfill) ---------------------------------------------------

# The ModelReplica's own condition: True when every engine serves.
MODEL_READY = "ModelReady"
# Reasons of ModelReady=False while the model cache gates the replica.
REASON_CACHE_NOT_FOUND = "CacheNotFound"
REASON_HYDRATION_NOT_FOUND = "HydrationNotFound"
REASON_HYDRATING = "Hydrating"
REASON_HYDRATION_FAILED = "HydrationFailed"
# Every reason that means "waiting on (or failed by) the cache", not the workload.
CACHE_GATE_REASONS = frozenset(
    {REASON_CACHE_NOT_FOUND, REASON_HYDRATION_NOT_FOUND, REASON_HYDRATING, REASON_HYDRATION_FAILED}
)
