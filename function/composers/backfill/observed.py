"""ModelBackfill's reading of observed state: its requirements, resolved, and what the
ModelDeployment, its ModelReplicas and the Job report."""

from __future__ import annotations

import datetime
from functools import cached_property
from typing import Any, NamedTuple

import structlog
from google.protobuf.struct_pb2 import Struct

from function.api.modelreplica import MODEL_READY
from function.composers.backfill.status import FAILED, HOLDING, SUCCEEDED
from function.core import structs
from function.core.inputs import Inputs, Resolved
from function.core.timeutil import parse_time
from function.naming import ANNOTATION_LAST_FOREGROUND

_log = structlog.get_logger("backfill")

KIND = "ModelBackfill"
REQ_DEPLOYMENT = "deployment"
REQ_TEMPLATE = "template"
REQ_REPLICAS = "replicas"
REQ_BACKFILLS = "backfills"
REQ_CLUSTER = "cluster"
REQ_JOB = "job-object"
# The requirements every call with a valid spec makes.
BASE = (REQ_TEMPLATE, REQ_DEPLOYMENT, REQ_REPLICAS, REQ_BACKFILLS)

# A backfill holding a replica: (startedAt, name, phase).
Holder = tuple[str, str, str]


class Required:
    """The base requirements, resolved: the ModelDeployment and the CronJob (None when
    not found), the deployment's ModelReplicas by name, and the other ModelBackfills of
    the namespace that hold a replica (replica -> holders, sorted). Each is read when a
    decision first needs it (a cooling-down backfill reads none)."""

    def __init__(self, inputs: Inputs, resolved: dict[str, Resolved], model: str) -> None:
        self._name = inputs.name
        self._resolved = resolved
        self._model = model

    @classmethod
    def read(cls, inputs: Inputs, model: str) -> Required | None:
        """The base requirements of a backfill of ModelDeployment ``model``
        (``spec.modelRef.name``), or None while one is not resolved yet."""
        resolved = {}
        for name in BASE:
            r = inputs.required(name)
            if not isinstance(r, Resolved):
                return None
            resolved[name] = r
        return cls(inputs, resolved, model)

    @property
    def deployment(self) -> Struct | None:
        return _first(self._resolved[REQ_DEPLOYMENT])

    @property
    def template(self) -> Struct | None:
        return _first(self._resolved[REQ_TEMPLATE])

    @cached_property
    def replicas(self) -> dict[str, Struct]:
        """The model's ModelReplicas by ``metadata.name``: those the
        ``modelplane.ai/deployment`` label selected whose ``spec.deploymentName`` is the
        model. The label value is shortened past 63 characters
        (:func:`function.naming.label_value`), and a shortened value is itself a valid
        ModelDeployment name, so two deployments' replicas can share it; another
        deployment's replica is left out with a debug log line."""
        out: dict[str, Struct] = {}
        for r in self._resolved[REQ_REPLICAS].items:
            name = structs.get_str(r, "metadata", "name")
            dep = structs.get_str(r, "spec", "deploymentName")
            if dep != self._model:
                _log.debug(
                    "ignoring a ModelReplica of another deployment with the same label",
                    requirement=REQ_REPLICAS,
                    name=name,
                    deployment=dep,
                    model=self._model,
                )
                continue
            out[name] = r
        return out

    @cached_property
    def holders(self) -> dict[str, list[Holder]]:
        return _holders(self._resolved[REQ_BACKFILLS], self._name)


def _first(r: Resolved) -> Struct | None:
    return r.items[0] if r.items else None


def _holders(backfills: Resolved, me: str) -> dict[str, list[Holder]]:
    """Other backfills holding a replica: replica -> [(startedAt, name, phase)]."""
    out: dict[str, list[Holder]] = {}
    for b in backfills.items:
        name = structs.get_str(b, "metadata", "name")
        if name == me:
            continue
        phase = structs.get_str(b, "status", "phase")
        replica = structs.get_str(b, "status", "replica")
        if phase in HOLDING and replica:
            started = structs.get_str(b, "status", "startedAt")
            out.setdefault(replica, []).append((started, name, phase))
    for v in out.values():
        v.sort()
    return out


def ready(obj: Any) -> bool:
    return structs.condition_is(obj, "Ready")


def replica_ready(replica: Any) -> bool:
    """A ModelReplica serves: not being deleted (``metadata.deletionTimestamp``: its
    status still says Ready while its workload is torn down), ``Ready=True``,
    ``ModelReady`` not False, an endpoint, a cluster."""
    if structs.being_deleted(replica):
        return False
    if not ready(replica) or structs.condition_is(replica, MODEL_READY, "False"):
        return False
    return bool(
        structs.get_str(replica, "status", "endpoint")
        and structs.get_str(replica, "spec", "clusterName")
    )


def replica_uid(replica: Any) -> str:
    """The ModelReplica's ``metadata.uid`` ("" when absent)."""
    return structs.get_str(replica, "metadata", "uid")


def replica_index(replica: Any) -> float:
    i = structs.get(replica, "spec", "index")
    return float(i) if isinstance(i, (int, float)) and not isinstance(i, bool) else 0.0


def foreground(deployment: Any) -> datetime.datetime | None:
    """The deployment's last foreground request (``modelplane.ai/last-foreground-request``)."""
    return parse_time(
        structs.get(deployment, "metadata", "annotations", ANNOTATION_LAST_FOREGROUND)
    )


def ready_since(deployment: Any) -> datetime.datetime | None:
    """When the deployment's ``Ready`` condition last changed."""
    c = structs.conditions(deployment).get("Ready")
    return parse_time(structs.get(c, "lastTransitionTime")) if c is not None else None


class JobOutcome(NamedTuple):
    """A finished Job: ``phase`` Succeeded or Failed, a message, and when (if known)."""

    phase: str
    message: str
    time: datetime.datetime | None


def job_outcome(manifest: Any) -> JobOutcome | None:
    """The outcome of an observed batch/v1 Job, or None while it has none.

    Reads the terminal conditions ``Complete`` and ``Failed``
    (https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions),
    never pod counts.

    Returns:
        ``(phase, message, time)`` with phase ``Succeeded`` or ``Failed``; ``time`` is
        the Job's ``completionTime`` or the condition's ``lastTransitionTime`` when
        parseable.
    """
    conds = structs.conditions(manifest)
    done = conds.get("Complete")
    if done is not None and structs.get(done, "status") == "True":
        t = parse_time(structs.get(manifest, "status", "completionTime")) or parse_time(
            structs.get(done, "lastTransitionTime")
        )
        return JobOutcome(SUCCEEDED, "the Job completed", t)
    failed = conds.get("Failed")
    if failed is not None and structs.get(failed, "status") == "True":
        reason = structs.get_str(failed, "reason") or "Failed"
        msg = structs.get_str(failed, "message")
        return JobOutcome(
            FAILED,
            f"{reason}: {msg}" if msg else reason,
            parse_time(structs.get(failed, "lastTransitionTime")),
        )
    return None


def job_running(manifest: Any) -> bool:
    """The observed Job has at least one active (pending or running) pod."""
    active = structs.get(manifest, "status", "active")
    return isinstance(active, (int, float)) and active >= 1
