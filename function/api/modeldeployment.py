"""ModelDeployment status contract: condition types and reasons.

Written by :mod:`function.composers.deployment` (the owner; placement,
:mod:`function.scheduling.placement`, chooses the ``ReplicasScheduled`` reasons it
writes) and read by the ModelExperiment composer (the candidate's readiness) and the
ModelBackfill composer. Declared in ``compositions/modeldeployment/definition.yaml``.

- :data:`SCHEDULED` (``ReplicasScheduled``): True when every wanted replica is placed
  (reason ``Scheduled``, or :data:`MOVES_DEFERRED` while some moves wait for room in the
  response); False with one of the reasons below otherwise.
- :data:`REPLICAS_READY` (``ReplicasReady``): True when every wanted replica serves
  (reason ``Ready``, ``ScaledToZero``, :data:`SERVING_PREVIOUS_IDENTITY` when some
  keep serving an earlier source identity because the new one Failed to hydrate on
  their cluster, or :data:`MOVING` while replicas that serve move make-before-break
  and only their replacements are not ready yet); False with :data:`HYDRATION_FAILED`
  (the replica's own ModelReady reason, passed through), :data:`WAITING_FOR_CACHE`
  or ``ReplicasNotReady``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from function import API_GROUP
from function.api.fields import Ref, WholeInt
from function.api.modelreplica import (
    REASON_CACHE_NOT_FOUND,
    REASON_HYDRATION_FAILED,
    FlashLoader,
)
from function.api.modelreplica import Engine as EngineSpec
from function.core import structs
from function.naming import ANNOTATION_FULL_PREFIX

KIND = "ModelDeployment"

SCHEDULED = "ReplicasScheduled"
REPLICAS_READY = "ReplicasReady"

# ReplicasScheduled=True reason while replicas due to move (their cluster failed or
# stopped being eligible) stay where they are because the replacements of all of them
# would not fit in the response Crossplane accepts beside the replicas they replace:
# the message says how many moves wait, which, and the bound; they move in batches.
MOVES_DEFERRED = "MovesDeferred"

# ReplicasScheduled=False reasons.
CACHE_NOT_FOUND = REASON_CACHE_NOT_FOUND  # the same word as the replica's gate reason
WAITING_FOR_CACHE = "WaitingForCache"
# clusterSelector matches InferenceClusters and none is in the cache's footprint.
NO_CLUSTER_IN_FOOTPRINT = "NoClusterInCacheFootprint"
# clusterSelector matches no InferenceCluster at all, with or without a cache (a wait:
# clusters being re-created or relabelled come back).
NO_MATCHING_CLUSTERS = "NoMatchingClusters"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
INVALID_DEVICE_SELECTOR = "InvalidDeviceSelector"
# A composed ModelReplica the function cannot account for: under a composition-resource
# name it never writes (``replica-<index>``), or without ``spec.clusterName``; every
# child is kept exactly and nothing is placed or removed until it is corrected.
UNKNOWN_REPLICA = "UnknownReplica"
# ReplicasReady=False reasons: a replica's hydration failed (the replica's own
# ModelReady reason, passed through), or replicas wait for the cache (WAITING_FOR_CACHE).
# Also a ReplicasScheduled=False reason: the hydration Failed on every selected cluster
# of the footprint (the message names where, for which source identity and why).
HYDRATION_FAILED = REASON_HYDRATION_FAILED

# Reasons no amount of waiting fixes (the ModelExperiment fails the run on them).
# NO_MATCHING_CLUSTERS is not one: an InferenceCluster re-created or relabelled comes
# back, and the experiment's own deadline bounds the wait.
FATAL_SCHEDULING = frozenset({INVALID_DEVICE_SELECTOR, NO_CLUSTER_IN_FOOTPRINT, HYDRATION_FAILED})

# ReplicasReady=True reason when every wanted replica serves but some serve an earlier
# source identity of the cache because its hydration Failed for the new one on their
# cluster (the earlier one still complete there): the message names the clusters and
# the identity that failed; status.cacheRollout says the same.
SERVING_PREVIOUS_IDENTITY = "ServingPreviousIdentity"
# ReplicasReady=True reason while serving replicas move make-before-break (their
# cluster is not Ready, or their hydration Failed): as many replicas as wanted serve,
# and the only ones not ready are their replacements. The message names each move.
# ``status.replicas.total`` counts both meanwhile, as a Deployment's ``status.replicas``
# counts its surge pods.
MOVING = "Moving"


# ---- the ModelReplica label of a replica rolling off a ModelCache ----------------------
#
# ``modelplane.ai/leaving-cache: <cache>`` on a ModelReplica whose
# ``spec.modelCacheRef`` the deployment moved off ModelCache ``<cache>`` (its spec
# ``modelCacheRef`` changed, and the new cache's hydration is Ready on the replica's
# cluster; or it was removed: at once) while the replica's pods may still read
# ``<cache>``'s PVC: its workload rolls make-before-break onto the new cache's PVC (or
# none), and the old pods serve until it is done (a roll can stall for lack of GPU
# room). Set in the call that moves the replica; kept
# until the replica reports ``ModelReady=True`` for its current generation, for the new
# cache (a ``status.hydration`` naming another cache's hydration was written before the
# switch) and with ``status.cacheIdentities`` naming no identity but its spec's (its
# pods read the new cache only). Written by :mod:`function.composers.deployment`; read
# by the ModelCacheHydration of ``<cache>`` (its second live-replica requirement: the
# identities of such a replica's ``status.cacheIdentities`` stay on the PVC) and by the
# ModelCacheShard of ``<cache>`` (the hydration is retained on a cluster that left the
# cache's selector). Shortened like every label (``naming.labels_with_full``): the full
# name is then in the annotation ``modelplane.ai/full-leaving-cache``
# (:func:`leaving_cache` reads it).
LABEL_LEAVING_CACHE = f"{API_GROUP}/leaving-cache"
_FULL_LEAVING_CACHE = ANNOTATION_FULL_PREFIX + LABEL_LEAVING_CACHE.rsplit("/", 1)[-1]


def leaving_cache(replica: Any) -> str:
    """The ModelCache a ModelReplica's pods may still read while they roll off it.

    Args:
        replica: A ModelReplica as observed or required (protobuf ``Struct`` or dict).

    Returns:
        The full name from :data:`LABEL_LEAVING_CACHE`: the annotation
        ``modelplane.ai/full-leaving-cache`` when present (a shortened label), else
        the label's value; "" when the replica carries no such label.
    """
    label = structs.get_str(replica, "metadata", "labels", LABEL_LEAVING_CACHE)
    if not label:
        return ""
    return structs.get_str(replica, "metadata", "annotations", _FULL_LEAVING_CACHE) or label


# ---- the spec model (read by function.composers.deployment.spec) -----------------------
#
# Mirrors compositions/modeldeployment/definition.yaml. An XRD ``integer`` arrives as a
# Struct double: WholeInt takes 3.0 and refuses "3", true and 1.5, naming the field, as
# the API server's structural schema would.


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute"] | None = None


class Serving(_Model):
    mode: Literal["Unified", "PrefillDecode"] = "Unified"


class TemplateSpec(_Model):
    clusterSelector: dict[str, Any] | None = None
    modelCacheRef: Ref | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    serving: Serving | None = None
    shmSizeLimit: str | None = None
    flashLoader: FlashLoader | None = None
    engines: list[EngineSpec] = Field(min_length=1)


class TemplateMeta(_Model):
    labels: dict[str, str] = Field(default_factory=dict)


class Template(_Model):
    metadata: TemplateMeta | None = None
    spec: TemplateSpec


class DeploymentSpec(_Model):
    replicas: WholeInt = Field(ge=0)
    template: Template
