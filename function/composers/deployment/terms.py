"""Names the ModelDeployment composer writes: requirement names, child keys, condition
types and reasons, status fields. Defined once here; the other modules import them."""

from __future__ import annotations

# Condition types and reasons are owned by function.api.modeldeployment (ModelReady by
# function.api.modelreplica); re-exported here for the package's modules.
from function.api import modeldeployment
from function.api.modeldeployment import CACHE_NOT_FOUND as CACHE_NOT_FOUND
from function.api.modeldeployment import HYDRATION_FAILED as HYDRATION_FAILED
from function.api.modeldeployment import INVALID_DEVICE_SELECTOR as INVALID_DEVICE_SELECTOR
from function.api.modeldeployment import MOVES_DEFERRED as MOVES_DEFERRED
from function.api.modeldeployment import MOVING as MOVING
from function.api.modeldeployment import SCHEDULED as SCHEDULED
from function.api.modeldeployment import SERVING_PREVIOUS_IDENTITY as SERVING_PREVIOUS_IDENTITY
from function.api.modeldeployment import UNKNOWN_REPLICA as UNKNOWN_REPLICA
from function.api.modeldeployment import WAITING_FOR_CACHE as WAITING_FOR_CACHE
from function.api.modelreplica import MODEL_READY as MODEL_READY

REQ_CLUSTERS = "clusters"
REQ_REPLICAS = "replicas"  # every ModelReplica of the fleet (the fallback)
REQ_CACHE = "cache"
REQ_HYDRATIONS = "hydrations"

READY_COND = modeldeployment.REPLICAS_READY

REPLICA_KIND = "ModelReplica"
USAGE_API_VERSION = "protection.crossplane.io/v1beta1"
USAGE_KEY = "cache-usage"
# A Usage of a ModelCache replicas still serve from while the spec references another:
# HELD_USAGE_PREFIX + <cache>.
HELD_USAGE_PREFIX = f"{USAGE_KEY}-held-"
REPLICA_PREFIX = "replica-"

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
# Side-by-side revisions: status.cacheIdentities[] {identity, replicas} (the source
# identities the replicas serve now) and status.cacheRollout (a message while replicas
# serve an identity other than their cluster's current one).
CACHE_IDENTITIES = "cacheIdentities"
CACHE_ROLLOUT = "cacheRollout"
