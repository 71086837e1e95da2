"""ModelReplica names: its condition, requirements and composition resources."""

from __future__ import annotations

from function.api.modelreplica import MODEL_READY

# The replica's own condition (True while every engine serves); its contract is
# function.api.modelreplica.
CONDITION = MODEL_READY
REQ_CLUSTER = "cluster"
REQ_CACHE = "cache"
REQ_HYDRATION = "hydration"
SERVICE_KEY = "service"
WORKLOAD_PREFIX = "workload-"


def workload_key(engine: str) -> str:
    """Composition-resource name of an engine's workload Object."""
    return f"{WORKLOAD_PREFIX}{engine}"


def claim_key(engine: str, role: str) -> str:
    """Composition-resource name of a member's ResourceClaimTemplate Object."""
    return f"claim-{engine}-{role.lower()}"
