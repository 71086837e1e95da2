"""ModelReplica cold start: status timestamps and one ``model_cold_start_duration_seconds``.

The function is stateless (``function.ops.metrics``): the replica records ``createdAt``,
``hydrationReadyAt`` (when it waited for its cache) and ``servingSince`` in its status,
and observes the cold start only in the call that writes ``servingSince``.

The lifecycle tests replay reconciles over a real gRPC channel with a controlled clock:
each reconcile is Crossplane's requirements loop (``function.render.drive``), after
which the desired status and the returned conditions are written back to the XR, as
Crossplane does, and the XR is validated against its XRD (the API server prunes
undeclared status fields). A small table covers the start-time rules in-process.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from function.composers.replica import CONDITION, children, lifecycle
from function.core.inputs import Inputs
from function.core.timeutil import format_time
from function.edge.runner import FunctionRunner
from function.ops import metrics
from function.ops.settings import default_settings
from tests.support import harness as h
from tests.support.replica_fixtures import (
    CACHE,
    DEPLOYMENT,
    cluster,
    hydration,
    model_cache,
    multi_spec,
    observed_object,
    ready_required,
    replica,
    single_spec,
)
from tests.support.table import Case, table
from tests.support.validation import validate_xr

NS = h.NAMESPACE
T0 = h.NOW
METRIC = "modelplane_model_cold_start_duration_seconds"
DEPLOYMENT_AVAILABLE = {
    "observedGeneration": 1,
    "replicas": 1,
    "updatedReplicas": 1,
    "availableReplicas": 1,
}
DEPLOYMENT_STARTING = {"observedGeneration": 1, "replicas": 1, "availableReplicas": 0}
LWS_AVAILABLE = {"readyReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]}
LWS_STARTING = {"readyReplicas": 0}


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def rfc(seconds: float) -> str:
    return format_time(at(seconds))


def hydration_in(phase: str, ready_at: str | None = None) -> dict[str, Any]:
    h_ = hydration("gpu-a", phase)
    if ready_at is not None:
        h_["status"]["readyAt"] = ready_at
    return h_


class Sim:
    """One ModelReplica reconciled over gRPC, its status persisted between reconciles."""

    def __init__(
        self,
        fn: h.GrpcFunction,
        spec: dict[str, Any],
        *,
        created: str | None = rfc(0),
        hydration_phase: str | None = "Hydrating",
        ready_at: str | None = None,
        status: dict[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.xr = replica(spec, status=status)
        if created is not None:
            self.xr["metadata"]["creationTimestamp"] = created
        self.cluster = cluster()
        self.cache = model_cache()
        self.hydration = hydration_in(hydration_phase, ready_at) if hydration_phase else None
        self.observed: dict[str, Any] = {}
        self.kind = "LeaderWorkerSet" if "kimi" in str(spec["engines"]) else "Deployment"
        self.key = "workload-kimi" if self.kind == "LeaderWorkerSet" else "workload-vllm"

    def world(self) -> h.World:
        docs = [self.cluster, self.cache]
        if self.hydration is not None:
            docs.append(self.hydration)
        return h.World(docs)

    def reconcile(self, at_seconds: float, *, persist: bool = True) -> Any:
        """Crossplane's requirements loop at ``T0 + at_seconds``, then the status write."""
        self.fn.clock.now = at(at_seconds)
        rsp, calls = self.fn.drive(self.xr, self.world(), self.observed)
        assert calls == 2, calls
        assert not h.fatal(rsp)
        if persist:
            self.xr = persisted(self.xr, rsp, self.fn.clock.now)
            validate_xr(self.xr | {"status": without_conditions(self.xr)})
        return rsp

    def workload(self, serving: bool, rsp: Any) -> None:
        """Observe the workload the last response desired, starting or serving."""
        body = h.desired(rsp)[self.key]
        if self.kind == "LeaderWorkerSet":
            remote = LWS_AVAILABLE if serving else LWS_STARTING
        else:
            remote = DEPLOYMENT_AVAILABLE if serving else DEPLOYMENT_STARTING
        self.observed = {self.key: observed_object(body, remote)}

    @property
    def status(self) -> dict[str, Any]:
        return self.xr.get("status", {})


def without_conditions(xr: dict[str, Any]) -> dict[str, Any]:
    st = dict(xr.get("status", {}))
    st.pop("conditions", None)  # Crossplane writes these, with its own schema
    return st


def persisted(xr: dict[str, Any], rsp: Any, now: datetime.datetime) -> dict[str, Any]:
    """The XR after Crossplane wrote the desired status and the returned conditions.

    A condition keeps its ``lastTransitionTime`` while its status does not change.
    """
    before = {c["type"]: c for c in xr.get("status", {}).get("conditions", [])}
    conds = []
    for typ, c in sorted(h.conditions(rsp).items()):
        old = before.get(typ)
        since = old["lastTransitionTime"] if old and old["status"] == c["status"] else None
        conds.append({"type": typ, **c, "lastTransitionTime": since or format_time(now)})
    out = copy.deepcopy(xr)
    out["status"] = {**h.status(rsp), "conditions": conds}
    return out


@pytest.fixture
def fn(clock: h.Clock) -> Iterator[h.GrpcFunction]:
    with h.GrpcFunction(clock=clock) as f:
        f.runner.metrics = metrics.Metrics(CollectorRegistry())
        yield f


def samples(fn: h.GrpcFunction) -> list[tuple[dict[str, str], float, float]]:
    """Every cold-start series: (labels, count, sum)."""
    out = []
    for family in fn.runner.metrics.registry.collect():
        if family.name != METRIC:
            continue
        by: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            if s.name.endswith("_count"):
                by.setdefault(labels, {})["count"] = s.value
            elif s.name.endswith("_sum"):
                by.setdefault(labels, {})["sum"] = s.value
        out += [(dict(k), v["count"], v["sum"]) for k, v in by.items() if v.get("count")]
    return out


def labels(engine_kind: str = "Deployment", cache: str = CACHE) -> dict[str, str]:
    return {"namespace": NS, "model": DEPLOYMENT, "engine_kind": engine_kind, "cache": cache}


def bucket(fn: h.GrpcFunction, le: str, **lbl: str) -> float:
    v = fn.runner.metrics.registry.get_sample_value(f"{METRIC}_bucket", {**lbl, "le": le})
    return 0.0 if v is None else v


def run_calls(fn: h.GrpcFunction) -> float:
    v = fn.runner.metrics.registry.get_sample_value(
        "modelplane_function_run_seconds_count", {"kind": "ModelReplica", "result": "success"}
    )
    return 0.0 if v is None else v


# ---- over gRPC: the lifecycle -------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "kind"), [(single_spec, "Deployment"), (multi_spec, "LeaderWorkerSet")]
)
def test_gated_replica_counts_from_its_hydration_becoming_ready(fn: Any, make: Any, kind: str):
    """Created at T0, gated while hydrating until T1, serving at T2: one sample of T2 - T1."""
    sim = Sim(fn, make(nodes=1) if make is multi_spec else make())
    rsp = sim.reconcile(0)
    assert h.conditions(rsp)[CONDITION]["reason"] == "Hydrating"
    assert sim.status["createdAt"] == rfc(0)
    assert "hydrationReadyAt" not in sim.status and "servingSince" not in sim.status
    sim.reconcile(600)  # still hydrating
    # The hydration becomes Ready at T1 = 900; the replica sees it at its next poll.
    sim.hydration = hydration_in("Ready", rfc(900))
    rsp = sim.reconcile(930)
    assert h.conditions(rsp)[CONDITION]["reason"] == "Starting"
    assert sim.status["hydrationReadyAt"] == rfc(900)
    sim.workload(False, rsp)
    sim.reconcile(1000)
    assert samples(fn) == []
    sim.workload(True, rsp)
    rsp = sim.reconcile(1300)  # T2
    assert h.conditions(rsp)[CONDITION]["reason"] == "Serving"
    assert sim.status["servingSince"] == rfc(1300)
    assert samples(fn) == [(labels(kind), 1.0, 400.0)]
    assert bucket(fn, "300.0", **labels(kind)) == 0 and bucket(fn, "450.0", **labels(kind)) == 1
    # Later calls see servingSince and observe nothing; the timestamps stay.
    recorded = {k: sim.status[k] for k in ("createdAt", "hydrationReadyAt", "servingSince")}
    for t in (1360, 1420, 5000):
        sim.reconcile(t)
    assert samples(fn) == [(labels(kind), 1.0, 400.0)]
    assert {k: sim.status[k] for k in recorded} == recorded
    # Every reconcile was two calls (the requirements loop); the sample counted once.
    assert run_calls(fn) == 2 * 8


def test_ungated_replica_without_cache_counts_from_its_creation(fn: Any):
    sim = Sim(fn, single_spec(cache=False), hydration_phase=None)
    rsp = sim.reconcile(5)
    assert h.conditions(rsp)[CONDITION]["reason"] == "Starting"
    assert sim.status["createdAt"] == rfc(0)  # metadata.creationTimestamp
    sim.workload(True, rsp)
    sim.reconcile(95)
    assert samples(fn) == [(labels(cache="none"), 1.0, 95.0)]
    assert "hydrationReadyAt" not in sim.status
    sim.reconcile(155)
    assert samples(fn) == [(labels(cache="none"), 1.0, 95.0)]


def test_replica_whose_hydration_was_already_ready_counts_from_its_creation(fn: Any):
    sim = Sim(fn, single_spec(), hydration_phase="Ready", ready_at=rfc(-3600))
    rsp = sim.reconcile(2)
    assert "hydrationReadyAt" not in sim.status
    sim.workload(True, rsp)
    sim.reconcile(242)
    assert samples(fn) == [(labels(), 1.0, 242.0)]


def test_without_creation_timestamp_the_first_call_records_created_at(fn: Any):
    sim = Sim(fn, single_spec(cache=False), created=None, hydration_phase=None)
    rsp = sim.reconcile(10)
    assert sim.status["createdAt"] == rfc(10)
    sim.reconcile(40)
    assert sim.status["createdAt"] == rfc(10)  # carried, not moved
    sim.workload(True, rsp)
    sim.reconcile(70)
    assert samples(fn) == [(labels(cache="none"), 1.0, 60.0)]


def test_hydration_without_ready_at_counts_from_the_call_that_saw_it_ready(fn: Any):
    sim = Sim(fn, single_spec())
    sim.reconcile(0)
    sim.hydration = hydration_in("Ready")  # no status.readyAt
    rsp = sim.reconcile(500)
    assert sim.status["hydrationReadyAt"] == rfc(500)
    sim.workload(True, rsp)
    sim.reconcile(620)
    assert samples(fn) == [(labels(), 1.0, 120.0)]


def test_gate_closing_again_before_serving_restarts_the_count(fn: Any):
    sim = Sim(fn, single_spec())
    sim.reconcile(0)
    sim.hydration = hydration_in("Ready", rfc(100))
    rsp = sim.reconcile(120)
    assert sim.status["hydrationReadyAt"] == rfc(100)
    sim.workload(False, rsp)
    sim.hydration = hydration_in("Hydrating")  # re-hydrating: the workload is kept
    sim.reconcile(200)
    assert "hydrationReadyAt" not in sim.status
    sim.hydration = hydration_in("Ready", rfc(700))
    sim.reconcile(720)
    assert sim.status["hydrationReadyAt"] == rfc(700)
    sim.workload(True, rsp)
    sim.reconcile(1000)
    assert samples(fn) == [(labels(), 1.0, 300.0)]


def test_waiting_for_a_missing_cache_is_a_gate(fn: Any):
    sim = Sim(fn, single_spec(), hydration_phase=None)
    sim.cache = {"kind": "Nothing"}  # no ModelCache yet
    rsp = sim.reconcile(0)
    assert h.conditions(rsp)[CONDITION]["reason"] == "CacheNotFound"
    sim.cache = model_cache()
    sim.hydration = hydration_in("Ready", rfc(300))  # created and hydrated between polls
    rsp = sim.reconcile(330)
    assert sim.status["hydrationReadyAt"] == rfc(300)
    sim.workload(True, rsp)
    sim.reconcile(400)
    assert samples(fn) == [(labels(), 1.0, 100.0)]


def test_after_serving_gates_and_unresolved_calls_keep_the_record(fn: Any):
    sim = Sim(fn, single_spec())
    sim.reconcile(0)
    sim.hydration = hydration_in("Ready", rfc(50))
    rsp = sim.reconcile(60)
    sim.workload(True, rsp)
    sim.reconcile(90)
    recorded = {k: sim.status[k] for k in ("createdAt", "hydrationReadyAt", "servingSince")}
    # The hydration fails after serving: the workload is kept, the replica not ready.
    sim.hydration = hydration_in("Failed")
    rsp = sim.reconcile(200)
    assert h.conditions(rsp)[CONDITION]["reason"] == "HydrationFailed"
    assert {k: sim.status[k] for k in recorded} == recorded
    # A call whose requirements are not resolved echoes the record too.
    fn.clock.now = at(250)
    rsp = fn.call(h.request(sim.xr, observed=sim.observed))
    assert h.conditions(rsp)[CONDITION]["reason"] == "Resolving"
    assert {k: h.status(rsp)[k] for k in recorded} == recorded
    # Serving again is not a first serve.
    sim.hydration = hydration_in("Ready", rfc(300))
    sim.reconcile(320)
    assert sim.status["phase"] == "Serving"
    assert {k: sim.status[k] for k in recorded} == recorded
    assert samples(fn) == [(labels(), 1.0, 40.0)]


def test_a_failed_status_write_counts_the_sample_twice(fn: Any):
    """Documented in function.ops.metrics: the next call sees no record and records again."""
    sim = Sim(fn, single_spec(cache=False), hydration_phase=None)
    rsp = sim.reconcile(0)
    sim.workload(True, rsp)
    sim.reconcile(60, persist=False)  # Crossplane could not write the status
    assert samples(fn) == [(labels(cache="none"), 1.0, 60.0)]
    sim.reconcile(90)
    assert samples(fn) == [(labels(cache="none"), 2.0, 150.0)]
    sim.reconcile(120)
    assert samples(fn) == [(labels(cache="none"), 2.0, 150.0)]


def test_replica_serving_before_the_record_existed_counts_nothing(fn: Any):
    """An upgrade: the last status says Serving but has no servingSince."""
    ready = {"type": CONDITION, "status": "True", "reason": "Serving", "message": "serving"}
    old_status = {
        "phase": "Serving",
        "conditions": [ready | {"lastTransitionTime": "2026-11-01T08:00:00Z"}],
    }
    sim = Sim(
        fn,
        single_spec(cache=False),
        created="2026-10-01T00:00:00Z",
        hydration_phase=None,
        status=old_status,
    )
    first = h.desired(h.run(h.request(sim.xr, required={"cluster": [cluster()]})))
    sim.observed = {"workload-vllm": observed_object(first["workload-vllm"], DEPLOYMENT_AVAILABLE)}
    sim.reconcile(0)
    assert sim.status["servingSince"] == "2026-11-01T08:00:00Z"
    assert sim.status["createdAt"] == "2026-10-01T00:00:00Z"
    sim.reconcile(60)
    assert samples(fn) == []


# ---- in-process: the start-time rules -------------------------------------------------


CALL = "the call that sees the gate lifted"

# Inputs: the hydration's status.readyAt (None: absent); the replica was created at 0 and
# the call is made at 130 s.
GATE_LIFTED: list[Case[str | None, str]] = [
    Case("readyAt", "the hydration's readyAt, between the replica's creation and now",
         rfc(100), rfc(100)),
    Case("no readyAt", CALL, None, rfc(130)),
    Case("invalid readyAt", CALL, "yesterday", rfc(130)),
    Case("readyAt in the future", f"{CALL} (clock skew)", rfc(500), rfc(130)),
    Case("readyAt before the replica", f"{CALL}: it is not what held the replica back",
         rfc(-60), rfc(130)),
    Case("readyAt with an offset", "normalized to UTC", "2026-11-29T10:01:40+01:00", rfc(100)),
]  # fmt: skip


@table(GATE_LIFTED)
def test_gate_lifted_at(case: Case[str | None, str]):
    status = {"phase": "Ready"} | ({"readyAt": case.inputs} if case.inputs else {})
    node = h.request(h.xr("X", "x", {}, status=status)).observed.composite.resource
    assert lifecycle.gate_lifted_at(node["status"], rfc(0), at(130)) == case.want, case.reason


INVALID_TIME = "not an RFC 3339 time: dropped, never trusted"

CARRIED: list[Case[str, str | None]] = [
    Case("canonical", "what format_time writes is kept", "2026-11-29T09:00:00Z",
         "2026-11-29T09:00:00Z"),
    Case("offset", "normalized to UTC", "2026-11-29T10:00:00+01:00", "2026-11-29T09:00:00Z"),
    Case("fraction", "whole seconds", "2026-11-29T09:00:00.750Z", "2026-11-29T09:00:00Z"),
    Case("February 30", INVALID_TIME, "2026-02-30T09:00:00Z", None),
    Case("hour 24", INVALID_TIME, "2026-11-29T24:00:00Z", None),
    Case("space separator", INVALID_TIME, "2026-11-29 09:00:00", None),
    Case("empty", "absent", "", None),
]  # fmt: skip


@table(CARRIED)
def test_carried_timestamps_are_normalized_or_dropped(case: Case[str, str | None]):
    assert lifecycle.canonical_time(case.inputs) == case.want, case.reason


WAITED = "the last status shows the replica waiting for its cache"

WAS_GATED: list[Case[dict[str, Any], bool]] = [
    Case("hydrating", WAITED, {"hydration": {"phase": "Hydrating"}}, True),
    Case("hydration not found", WAITED, {"hydration": {"phase": "NotFound"}}, True),
    Case("hydration failed", WAITED, {"hydration": {"phase": "Failed"}}, True),
    Case("hydration ready", "a Ready hydration held nothing back",
         {"hydration": {"phase": "Ready"}}, False),
    Case("cache not found", f"{WAITED} (CacheNotFound writes no status.hydration)",
         {"conditions": [{"type": CONDITION, "reason": "CacheNotFound"}]}, True),
    Case("cluster not found", "not a cache gate",
         {"conditions": [{"type": CONDITION, "reason": "ClusterNotFound"}]}, False),
    Case("another condition", "only ModelReady's reason counts",
         {"conditions": [{"type": "Other", "reason": "CacheNotFound"}]}, False),
    Case("no status", "nothing recorded", {}, False),
]  # fmt: skip


@table(WAS_GATED)
def test_was_gated(case: Case[dict[str, Any], bool]):
    req = h.request(replica(single_spec(), status=case.inputs), required=ready_required())
    inputs = Inputs(req.observed.composite.resource, {}, {}, T0, default_settings())
    assert lifecycle.was_gated(inputs) is case.want, case.reason


# ---- the memoized hot path ----------------------------------------------------------


def test_timestamps_never_enter_the_memoized_plan():
    """Two replicas' statuses with different timestamps share one plan; each response
    carries its own timestamps, and a warm response equals a cold process's."""
    spec = single_spec()
    req = ready_required()
    first = h.desired(h.run(h.request(replica(spec), required=req)))
    observed = {"workload-vllm": observed_object(first["workload-vllm"], DEPLOYMENT_AVAILABLE)}

    def call(status: dict[str, Any], now: datetime.datetime) -> Any:
        xr = replica(spec, status=status)
        return h.run(h.request(xr, observed=observed, required=req), now=now)

    a = {"phase": "Serving", "createdAt": rfc(0), "servingSince": rfc(60)}
    b = {
        "phase": "Starting",
        "createdAt": rfc(-7200),
        "hydrationReadyAt": rfc(-3600),
        "hydration": {"phase": "Hydrating"},
    }
    call(a, at(100))  # warm
    misses = children.plan.cache_info().misses
    warm_a, warm_b = call(a, at(100)), call(b, at(200))
    assert children.plan.cache_info().misses == misses  # both served from the memo
    assert h.desired(warm_a) == h.desired(warm_b)
    assert {k: h.status(warm_a).get(k) for k in ("createdAt", "servingSince")} == {
        "createdAt": rfc(0),
        "servingSince": rfc(60),
    }
    st = h.status(warm_b)
    assert (st["createdAt"], st["hydrationReadyAt"], st["servingSince"]) == (
        rfc(-7200),
        rfc(-3600),
        rfc(200),
    )
    for status, now, warm in ((a, at(100), warm_a), (b, at(200), warm_b)):
        for fn_ in (children.parsed, children.head, children.plan):
            fn_.cache_clear()
        cold = call(status, now)
        assert cold.SerializeToString(deterministic=True) == warm.SerializeToString(
            deterministic=True
        )


def test_engine_kind_of_a_mixed_replica_joins_its_workload_kinds():
    """PrefillDecode with a Standalone prefill engine and a Leader + Worker decode engine."""
    spec = multi_spec(nodes=1)
    prefill = single_spec()["engines"][0] | {"phase": "Prefill"}
    spec["engines"] = [prefill, spec["engines"][0] | {"phase": "Decode"}]
    spec["serving"] = {"mode": "PrefillDecode"}
    first = h.desired(h.run(h.request(replica(spec), required=ready_required())))
    observed = {
        "workload-vllm": observed_object(first["workload-vllm"], DEPLOYMENT_AVAILABLE),
        "workload-kimi": observed_object(first["workload-kimi"], LWS_AVAILABLE),
    }
    m = metrics.Metrics(CollectorRegistry())
    runner = FunctionRunner(default_settings(), h.Clock(at(180)), metrics=m)
    xr = replica(spec, status={"phase": "Starting", "createdAt": rfc(0)})
    rsp = runner.run(h.request(xr, observed=observed, required=ready_required()))
    assert h.conditions(rsp)[CONDITION]["reason"] == "Serving"
    want = labels("Deployment+LeaderWorkerSet")
    assert m.registry.get_sample_value(f"{METRIC}_sum", want) == 180
    assert m.registry.get_sample_value(f"{METRIC}_count", want) == 1
