"""ModelCacheHydration: phases, requirement names and composition-resource names."""

from __future__ import annotations

# The status contract (phases, the Hydrated condition, its reasons) is owned by
# function.api.modelcachehydration; re-exported here for the package's modules.
from function.api.modelcachehydration import CONDITION as CONDITION
from function.api.modelcachehydration import FAILED as FAILED
from function.api.modelcachehydration import HYDRATING as HYDRATING
from function.api.modelcachehydration import PENDING as PENDING
from function.api.modelcachehydration import PHASES as PHASES
from function.api.modelcachehydration import READY as READY
from function.api.modelcachehydration import REASON_PVC_BIND_TIMEOUT
from function.naming import name_hash

PVC_TIMEOUT = REASON_PVC_BIND_TIMEOUT

REQ_CLUSTER = "cluster"
REQ_SECRET = "auth-secret"
# The live ModelReplicas of this cache on this cluster (the identities they serve are
# kept on the PVC; see the prune step).
REQ_REPLICAS = "replicas"
# The ModelReplicas on this cluster whose pods may still read this cache while they roll
# off it onto another ModelCache (label ``api.modeldeployment.LABEL_LEAVING_CACHE``):
# the identities their status names are kept too.
REQ_LEAVING = "leaving-replicas"

PVC_KEY = "pvc"
SECRET_KEY = "token-secret"
RESULT_KEY = "result"
RBAC_KEYS = ("hydrate-sa", "hydrate-role", "hydrate-rolebinding")
# Children that outlive the download: the weights and the record of what they are.
LASTING_KEYS = frozenset({PVC_KEY, RESULT_KEY})
JOB_PREFIX = "job-"
PRUNE_PREFIX = "prune-"


def job_key(identity: str) -> str:
    """Composition-resource name of the download Job Object of source ``identity``."""
    return JOB_PREFIX + identity


def prune_key(keep: tuple[str, ...]) -> str:
    """Composition-resource name of the prune Job Object that keeps ``keep`` (sorted)."""
    return PRUNE_PREFIX + name_hash(("prune", *keep))
