"""ModelReplica names: its condition, requirements and composition resources."""

from __future__ import annotations

from function import API_GROUP
from function.api.modelreplica import MODEL_READY

# The replica's own condition (True while every engine serves); its contract is
# function.api.modelreplica.
CONDITION = MODEL_READY
REQ_CLUSTER = "cluster"
REQ_CACHE = "cache"
REQ_HYDRATION = "hydration"
SERVICE_KEY = "service"
WORKLOAD_PREFIX = "workload-"
CLAIM_PREFIX = "claim-"

# On the workload Object (control plane) of an engine that replaces engines renamed
# away (their names, comma-separated): while it does not serve, their workloads are
# kept (:mod:`.handover`). Written with the Object that first composes the workload,
# so it cannot exist without it; dropped once it serves.
ANNOTATION_REPLACES = f"{API_GROUP}/replaces-engines"


def workload_key(engine: str) -> str:
    """Composition-resource name of an engine's workload Object."""
    return f"{WORKLOAD_PREFIX}{engine}"


def claim_key(engine: str, role: str) -> str:
    """Composition-resource name of a member's ResourceClaimTemplate Object."""
    return f"{CLAIM_PREFIX}{engine}-{role.lower()}"


def engine_of_key(key: str) -> str | None:
    """The engine whose workload (:func:`workload_key`) or claim template
    (:func:`claim_key`) is composition resource ``key``; None for any other key."""
    if key.startswith(WORKLOAD_PREFIX):
        return key[len(WORKLOAD_PREFIX) :]
    if key.startswith(CLAIM_PREFIX) and "-" in key[len(CLAIM_PREFIX) :]:
        return key[len(CLAIM_PREFIX) :].rsplit("-", 1)[0]
    return None
