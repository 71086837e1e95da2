"""Names the ModelDeployment composer writes: requirement names, child keys, condition
types and reasons, status fields. Defined once here; the other modules import them."""

from __future__ import annotations

REQ_CLUSTERS = "clusters"
REQ_REPLICAS = "replicas"  # every ModelReplica of the fleet (the fallback)
REQ_CACHE = "cache"
REQ_HYDRATIONS = "hydrations"

REPLICA_KIND = "ModelReplica"
USAGE_API_VERSION = "protection.crossplane.io/v1beta1"
USAGE_KEY = "cache-usage"
REPLICA_PREFIX = "replica-"

SCHEDULED = "ReplicasScheduled"
READY_COND = "ReplicasReady"
MODEL_READY = "ModelReady"  # the ModelReplica's own condition (function.composers.replica)
HYDRATION_FAILED = "HydrationFailed"
WAITING_FOR_CACHE = "WaitingForCache"
INVALID_DEVICE_SELECTOR = "InvalidDeviceSelector"
CACHE_NOT_FOUND = "CacheNotFound"

DISPLACED = "displaced"  # status.displaced[]
MAX_DISPLACED = 100  # records kept; the oldest are dropped (without a sample) past this
REPLACEMENT_METRIC = "replica_replacement_duration_seconds"

# Capacity (function.composers.deployment.capacity): per-cluster ModelReplica requirements
# are named REQ_ON_CLUSTER + <cluster>; REQ_REPLICAS is the fleet-wide fallback.
REQ_ON_CLUSTER = "replicas-on-"
MAX_CLUSTER_REQUIREMENTS = 128  # past this many clusters, one fleet-wide list instead
NEXT_CLUSTERS = "nextClusters"  # status.nextClusters[]: asked for up front next reconcile
MAX_NEXT_CLUSTERS = 64
MIN_NEXT_CLUSTERS = 4
