"""ModelCacheHydration: phases, requirement names and composition-resource names."""

from __future__ import annotations

PENDING, HYDRATING, READY, FAILED = "Pending", "Hydrating", "Ready", "Failed"
PHASES = (PENDING, HYDRATING, READY, FAILED)
CONDITION = "Hydrated"

PVC_TIMEOUT = "PVCBindTimeout"

REQ_CLUSTER = "cluster"
REQ_SECRET = "auth-secret"

PVC_KEY = "pvc"
SECRET_KEY = "token-secret"
RESULT_KEY = "result"
RBAC_KEYS = ("hydrate-sa", "hydrate-role", "hydrate-rolebinding")
# Children that outlive the download: the weights and the record of what they are.
LASTING_KEYS = frozenset({PVC_KEY, RESULT_KEY})
JOB_PREFIX = "job-"


def job_key(identity: str) -> str:
    """Composition-resource name of the download Job Object of source ``identity``."""
    return JOB_PREFIX + identity
