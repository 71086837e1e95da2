"""ModelReplica names: its condition, requirements and composition resources."""

from __future__ import annotations

import re

from function import API_GROUP, naming
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


# The member roles, as a claim key spells them (lowercased).
_ROLES = frozenset({"standalone", "leader", "worker"})
_DIGEST = re.compile(rf"[0-9a-f]{{{naming.CLAIM_HASH_LEN}}}")


def claim_key(engine: str, role: str, digest: str = "") -> str:
    """Composition-resource name of a member's ResourceClaimTemplate Object:
    ``claim-<engine>-<role>-<digest>`` (``digest``: :func:`function.naming.claim_requests_hash`
    of what it asks for, so each set of requests is an Object of its own), or without
    ``digest`` the release-before's ``claim-<engine>-<role>`` (one Object per member,
    kept while it asks for what the spec asks: :mod:`.desired`)."""
    base = f"{CLAIM_PREFIX}{engine}-{role.lower()}"
    return f"{base}-{digest}" if digest else base


def engine_of_key(key: str) -> str | None:
    """The engine whose workload (:func:`workload_key`) or claim template
    (:func:`claim_key`, either form) is composition resource ``key``; None for any
    other key."""
    if key.startswith(WORKLOAD_PREFIX):
        return key[len(WORKLOAD_PREFIX) :]
    if not key.startswith(CLAIM_PREFIX):
        return None
    rest = key[len(CLAIM_PREFIX) :]
    head, _, last = rest.rpartition("-")
    if not head:
        return None
    if _DIGEST.fullmatch(last):
        # claim-<engine>-<role>-<digest>; a legacy key ends in its role, never in hex.
        engine, _, role = head.rpartition("-")
        if engine and role in _ROLES:
            return engine
    return head
