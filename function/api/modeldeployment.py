"""ModelDeployment status contract: condition types and reasons.

Written by :mod:`function.composers.deployment` (the owner; placement,
:mod:`function.scheduling.placement`, chooses the ``ReplicasScheduled`` reasons it
writes) and read by the ModelExperiment composer (the candidate's readiness) and the
ModelBackfill composer. Declared in ``compositions/modeldeployment/definition.yaml``.

- :data:`SCHEDULED` (``ReplicasScheduled``): True when every wanted replica is placed;
  False with one of the reasons below otherwise.
- :data:`REPLICAS_READY` (``ReplicasReady``): True when every wanted replica serves
  (reason ``Ready``, or ``ScaledToZero``); False with :data:`HYDRATION_FAILED`
  (the replica's own ModelReady reason, passed through), :data:`WAITING_FOR_CACHE`
  or ``ReplicasNotReady``.
"""

from __future__ import annotations

from function.api.modelreplica import REASON_CACHE_NOT_FOUND, REASON_HYDRATION_FAILED

KIND = "ModelDeployment"

SCHEDULED = "ReplicasScheduled"
REPLICAS_READY = "ReplicasReady"

# ReplicasScheduled=False reasons.
CACHE_NOT_FOUND = REASON_CACHE_NOT_FOUND  # the same word as the replica's gate reason
WAITING_FOR_CACHE = "WaitingForCache"
NO_CLUSTER_IN_FOOTPRINT = "NoClusterInCacheFootprint"
NO_MATCHING_CLUSTERS = "NoMatchingClusters"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
INVALID_DEVICE_SELECTOR = "InvalidDeviceSelector"
# Reasons no amount of waiting fixes (the ModelExperiment fails the run on them).
FATAL_SCHEDULING = frozenset({INVALID_DEVICE_SELECTOR, NO_CLUSTER_IN_FOOTPRINT})

# ReplicasReady=False reasons: a replica's hydration failed (the replica's own
# ModelReady reason, passed through), or replicas wait for the cache (WAITING_FOR_CACHE).
HYDRATION_FAILED = REASON_HYDRATION_FAILED
