"""ModelReplica lifecycle timestamps and the cold-start sample.

Cold start (``modelplane_model_cold_start_duration_seconds``, see ``function.ops.metrics``
for why a stateless function counts through status): status ``createdAt`` (the XR's
``metadata.creationTimestamp``), ``hydrationReadyAt`` (when the hydration gate lifted
for a replica that waited for its cache: the hydration's ``status.readyAt``) and
``servingSince`` (the call in which every engine first served). That call, and only
it, observes ``servingSince`` minus ``hydrationReadyAt`` (or ``createdAt``); later
calls carry the timestamps and observe nothing. The timestamps come from the observed
XR on every call and never enter the memoized plan.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

from google.protobuf.struct_pb2 import Struct

from function.api.modelcachehydration import READY
from function.api.modelreplica import CACHE_GATE_REASONS
from function.composers.replica.names import CONDITION
from function.core import structs
from function.core.inputs import Inputs
from function.core.outcome import Outcome
from function.core.timeutil import elapsed, format_time, parse_time

CREATED_AT = "createdAt"
HYDRATION_READY_AT = "hydrationReadyAt"
SERVING_SINCE = "servingSince"
COLD_START = "model_cold_start_duration_seconds"
NO_CACHE = "none"
# ModelReady reasons of a replica waiting for its cache (the hydration gate).
CACHE_GATES = CACHE_GATE_REASONS


# What format_time writes: checked first, since nearly every carried timestamp is one.
_CANONICAL_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def canonical_time(value: str) -> str | None:
    """``value`` normalized by ``core.timeutil`` (UTC, whole seconds), None when invalid."""
    if not value:
        return None
    if _CANONICAL_TIME.fullmatch(value):
        try:
            datetime.datetime.fromisoformat(value)  # a real date and time (not 02-30)
        except ValueError:
            return None
        return value
    t = parse_time(value)
    return format_time(t) if t is not None else None


@dataclass(slots=True)
class Times:
    """The replica's lifecycle timestamps (RFC 3339), carried in its status.

    The function is stateless (``function.ops.metrics``): the cold start is computed from
    these, and observed only in the call that first writes ``servingSince``.

    Attributes:
        created: ``status.createdAt``, the replica's creation: the XR's
            ``metadata.creationTimestamp`` (the API server sets it), else the last
            status's, else the first call's ``now``.
        hydration_ready: ``status.hydrationReadyAt``, when the hydration gate lifted
            for a replica that had waited for its cache (None if it never waited).
        serving_since: ``status.servingSince``, when every engine first served.
    """

    created: str
    hydration_ready: str | None
    serving_since: str | None

    @classmethod
    def carried(cls, inputs: Inputs) -> Times:
        """The timestamps of the observed XR (its metadata and last written status)."""
        prev = structs.sub(inputs.xr, "status")
        created = (
            canonical_time(structs.sval(structs.sub(inputs.xr, "metadata"), "creationTimestamp"))
            or canonical_time(structs.sval(prev, CREATED_AT))
            or format_time(inputs.now)
        )
        return cls(
            created,
            canonical_time(structs.sval(prev, HYDRATION_READY_AT)),
            canonical_time(structs.sval(prev, SERVING_SINCE)),
        )

    def write(self, status: dict[str, Any]) -> None:
        """Set the timestamps in ``status`` (every call: Crossplane drops omitted fields)."""
        status[CREATED_AT] = self.created
        if self.hydration_ready is not None:
            status[HYDRATION_READY_AT] = self.hydration_ready
        if self.serving_since is not None:
            status[SERVING_SINCE] = self.serving_since


def was_gated(inputs: Inputs) -> bool:
    """Whether the last status shows the replica waiting for its cache.

    True when ``status.hydration.phase`` is anything but Ready (``NotFound``,
    ``Pending``, ``Hydrating``, ``Failed``) or the ``ModelReady`` condition's reason
    is a cache gate (``CacheNotFound`` writes no ``status.hydration``).
    """
    prev = structs.sub(inputs.xr, "status")
    phase = structs.sval(structs.sub(prev, "hydration"), "phase")
    if phase and phase != READY:
        return True
    for c in structs.items(prev, "conditions"):
        if structs.get(c, "type") == CONDITION:
            return structs.get(c, "reason") in CACHE_GATES
    return False


def gate_lifted_at(hyd_status: Struct | None, created: str, now: datetime.datetime) -> str:
    """When a waiting replica's hydration became Ready.

    The hydration's ``status.readyAt`` (written by the ModelCacheHydration composer)
    when it lies between the replica's creation and ``now``; otherwise (absent,
    invalid, in the future, or from before the replica existed, so it is not what
    held the replica back) ``now``, the call that sees the gate lifted.
    """
    ready = parse_time(structs.sval(hyd_status, "readyAt"))
    born = parse_time(created)
    if ready is None or ready > now or (born is not None and ready < born):
        return format_time(now)
    return format_time(ready)


def record_serving(
    inputs: Inputs, out: Outcome, engine_kinds: set[str], times: Times, cache: str | None
) -> None:
    """Every engine serves and no ``servingSince`` is recorded: record it, observe once.

    The sample is ``now`` minus ``hydrationReadyAt`` (the replica waited for its
    cache) or ``createdAt``, with labels ``namespace``, ``model`` (the
    ModelDeployment, ``spec.deploymentName``), ``engine_kind`` (the workload kinds,
    sorted and joined with ``+``: ``Deployment``, ``LeaderWorkerSet`` or
    ``Deployment+LeaderWorkerSet``) and ``cache`` (the ModelCache, ``none``).

    A replica whose last status already said Serving was serving before this record
    existed (composed by an earlier version of the function): ``servingSince`` is
    taken from the ``ModelReady`` condition's ``lastTransitionTime`` (else ``now``)
    and nothing is observed, so an upgrade counts no sample of its replicas' age.
    """
    now = inputs.now
    prev = structs.sub(inputs.xr, "status")
    if structs.sval(prev, "phase") == "Serving":
        since = None
        for c in structs.items(prev, "conditions"):
            if structs.get(c, "type") == CONDITION and structs.get(c, "status") == "True":
                since = canonical_time(structs.get_str(c, "lastTransitionTime"))
        times.serving_since = since or format_time(now)
        return
    times.serving_since = format_time(now)
    start = parse_time(times.hydration_ready or times.created)
    out.observe(
        COLD_START,
        {
            "namespace": inputs.namespace,
            "model": structs.get_str(inputs.xr, "spec", "deploymentName"),
            "engine_kind": "+".join(sorted(engine_kinds)),
            "cache": cache or NO_CACHE,
        },
        elapsed(start, now),
    )
