"""ModelBackfill: idle admission, cancellation, outcomes, Blocked reasons, one Job per replica.

Every lifecycle test goes through a real gRPC channel with a controlled clock: each
``Sim.step`` runs Crossplane's requirements loop (``function.render.drive``) and applies
the response like Crossplane and provider-kubernetes would (see ``tests.support.backfill_sim``).
Emitted Objects and their Jobs are validated against the Object CRD and Kubernetes'
schemas on every step. Metrics are read from a fresh prometheus-client registry.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from prometheus_client import CollectorRegistry

from function.api.modelbackfill import accelerator_uses, definition_hash, is_accelerator, parse
from function.composers.backfill import JOB_PREFIX
from function.composers.backfill.children import OBSERVER_PREFIX
from function.core.errors import SpecError
from function.core.timeutil import format_time, parse_time
from function.manifests.jobs import JOB_FINISHED_CEL
from function.naming import label_value, replica_name
from function.ops import metrics as metrics_mod
from function.render import World, drive, load_yaml, observed_by_name
from tests.support import fixtures
from tests.support.backfill_sim import (
    BACKFILL,
    DEPLOYMENT,
    TEMPLATE,
    Sim,
    deployment,
    eval_cronjob,
    job_status,
    remote_name,
    replica,
)
from tests.support.harness import (
    NAMESPACE,
    Clock,
    GrpcFunction,
    conditions,
    desired,
    desired_ready,
    fatal,
    requirements,
    run,
    status,
    xr,
    xr_ready,
)
from tests.support.harness import request as build
from tests.support.table import Case, table
from tests.support.validation import validate_k8s, validate_object, validate_xr, xr_cel_errors

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "modelbackfill"
R0 = replica_name(NAMESPACE, DEPLOYMENT, 0)
R1 = replica_name(NAMESPACE, DEPLOYMENT, 1)


def spec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"modelRef": {"name": DEPLOYMENT}, "templateRef": {"name": TEMPLATE}}
    base.update(kw)
    return base


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def sim(clock: Clock, registry: CollectorRegistry) -> Iterator[Sim]:
    fn = GrpcFunction(clock=clock)
    fn.runner.metrics = metrics_mod.Metrics(registry)
    with fn:
        yield Sim(fn, clock)


def metric(registry: CollectorRegistry, name: str, backfill: str = BACKFILL, **labels: str):
    v = registry.get_sample_value(
        f"modelplane_model_backfill_{name}",
        {"backfill": backfill, "namespace": NAMESPACE, "model": DEPLOYMENT, **labels},
    )
    return v or 0.0


def job_manifest(sim: Sim, name: str = BACKFILL) -> dict[str, Any]:
    return sim.job(name)["spec"]["forProvider"]["manifest"]


def start(sim: Sim, clock: Clock, name: str = BACKFILL, **kw: Any) -> dict[str, Any]:
    """Add a backfill and run it until its Job is Running."""
    sim.add(spec(**kw), name)
    assert sim.step(name)["phase"] == "WaitingForIdle"
    clock.advance(600)
    st = sim.step(name)
    assert st["phase"] == "Starting", st
    sim.set_job("active", name)
    clock.advance(10)
    st = sim.step(name)
    assert st["phase"] == "Running", st
    return st


# ---- waiting ---------------------------------------------------------------------


def test_waits_for_the_model_to_be_ready_then_for_a_full_window(sim: Sim, clock: Clock) -> None:
    t0 = clock.now
    sim.deployment = deployment(ready=False, foreground=format_time(t0))
    sim.add(spec())
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "ModelNotReady")
    assert st["notIdleBefore"] == format_time(t0)  # when the wait began
    assert sim.observed[BACKFILL] == {}
    clock.advance(3600)  # idle for an hour, but not Ready: no start
    st = sim.step()
    assert st["reason"] == "ModelNotReady" and sim.observed[BACKFILL] == {}
    # Kept while the wait lasts (review 15b: re-stamped on every call, the status was
    # written, and so reconciled again, on every call).
    assert st["notIdleBefore"] == format_time(t0)
    clock.advance(30)
    first_ready = clock.now
    sim.deployment = deployment(foreground=format_time(t0))
    st = sim.step()
    # The window starts when the model is first seen Ready again (its Ready condition
    # reports no transition time here), not at the old foreground time (an hour ago).
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle")
    assert st["idleSince"] == st["notIdleBefore"] == format_time(first_ready)
    clock.advance(599)
    assert sim.step()["phase"] == "WaitingForIdle"
    clock.advance(1)
    assert sim.step()["phase"] == "Starting"


@dataclass(frozen=True)
class ModelWait:
    """A wait on the model from t0 (the deployment ``missing``, else not Ready; its last
    foreground request an hour before), seen again at t0+1h; at t0+1h30s it is Ready,
    its Ready condition's ``lastTransitionTime`` ``ready_at`` seconds after t0 (None:
    not reported), its last foreground request ``foreground_at`` seconds after t0."""

    missing: bool = False
    ready_at: float | None = None
    foreground_at: float = -3600


SEEN_READY = 3630  # the first call that sees the model Ready, seconds after t0
WINDOW_AFTER_A_WAIT: list[Case[ModelWait, float]] = [
    Case("not ready, no transition time",
         "at the first call that sees it Ready: at or after the last one that saw it not "
         "Ready (the call before re-stamped notIdleBefore on every call; review 15b)",
         ModelWait(), SEEN_READY),
    Case("not ready, transition during the wait",
         "the first call that sees it Ready, not the deployment's transition time: that is "
         "another clock's, and may come before a call that saw it not Ready (review 15d)",
         ModelWait(ready_at=3610), SEEN_READY),
    Case("not ready, transition before the last not-ready call",
         "the transition, by its writer's clock, before this function last saw it not "
         "Ready (review 15d: the backfill started 30 s after that call)",
         ModelWait(ready_at=3000), SEEN_READY),
    Case("not ready, transition before the wait",
         "a transition before the wait began cannot be the one that ended it",
         ModelWait(ready_at=-60), SEEN_READY),
    Case("missing, appears Ready", "as not ready, for a deployment that was missing",
         ModelWait(missing=True, ready_at=3610), SEEN_READY),
    Case("missing, appears, no transition time", "as not ready, no transition time",
         ModelWait(missing=True), SEEN_READY),
    Case("a foreground request during the wait", "the latest of the instants",
         ModelWait(ready_at=3610, foreground_at=3620), SEEN_READY),
]  # fmt: skip


@table(WINDOW_AFTER_A_WAIT)
def test_where_the_window_starts_after_a_wait_on_the_model(
    sim: Sim, clock: Clock, case: Case[ModelWait, float]
) -> None:
    t0 = clock.now
    w = case.inputs

    def at(seconds: float) -> datetime.datetime:
        return t0 + datetime.timedelta(seconds=seconds)

    if w.missing:
        sim.deployment = deployment(name="other", foreground=format_time(at(-3600)))
    else:
        sim.deployment = deployment(ready=False, foreground=format_time(at(-3600)))
    sim.add(spec())
    for seconds in (0, 3600):
        clock.advance(seconds)
        st = sim.step()
        assert st["reason"] == ("ModelNotFound" if w.missing else "ModelNotReady"), st
        assert st["notIdleBefore"] == format_time(t0)
    clock.advance(SEEN_READY - 3600)
    ready_at = at(w.ready_at) if w.ready_at is not None else None
    sim.deployment = deployment(foreground=format_time(at(w.foreground_at)), ready_since=ready_at)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle"), st
    assert st["idleSince"] == format_time(at(case.want)), case.reason
    clock.advance(case.want + 600 - SEEN_READY - 1)
    assert sim.step()["phase"] == "WaitingForIdle"
    clock.advance(1)
    assert sim.step()["phase"] == "Starting"


def test_a_wait_on_the_model_left_for_another_state_ends_there(sim: Sim, clock: Clock) -> None:
    """Suspended while the model is not Ready: the wait ends in the call that suspends
    (the model is not looked at while suspended), so after resuming on a Ready model
    that reports no transition time, the window starts there, not when the wait began."""
    t0 = clock.now
    sim.deployment = deployment(ready=False, foreground=format_time(t0))
    sim.add(spec())
    assert sim.step()["reason"] == "ModelNotReady"
    clock.advance(3600)
    sim.backfills[BACKFILL]["spec"]["suspend"] = True
    st = sim.step()
    suspended = clock.now
    assert st["phase"] == "Suspended" and st["notIdleBefore"] == format_time(suspended)
    clock.advance(60)
    sim.deployment = deployment(foreground=format_time(t0))
    sim.backfills[BACKFILL]["spec"]["suspend"] = False
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle"), st
    assert st["idleSince"] == format_time(suspended)


def test_the_ready_transition_time_also_starts_the_window(sim: Sim, clock: Clock) -> None:
    t0 = clock.now
    ready_at = t0 + datetime.timedelta(minutes=30)
    sim.deployment = deployment(foreground=format_time(t0), ready_since=ready_at)
    sim.add(spec())
    clock.advance(2400)  # 40m after the last request, 10m - 0s after becoming Ready
    st = sim.step()
    assert st["idleSince"] == format_time(ready_at) and st["phase"] == "Starting"


def test_a_foreground_request_resets_the_window(sim: Sim, clock: Clock) -> None:
    t0 = clock.now
    sim.add(spec(idleFor="10m"))
    st = sim.step()
    assert st["idleSince"] == format_time(t0)
    assert sim.last.meta.ttl.seconds == 60  # at most the default TTL while the window runs
    clock.advance(540)
    sim.foreground()  # 9 minutes in: a request arrives
    clock.advance(120)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle")
    assert st["idleSince"] == format_time(t0.replace(minute=9))
    assert st["message"] == (
        f"{DEPLOYMENT} idle since {format_time(t0.replace(minute=9))} (idleFor 10m); "
        f"admission at {format_time(t0.replace(minute=19))} if no foreground request arrives"
    )
    clock.advance(470)
    assert sim.step()["phase"] == "WaitingForIdle"
    assert sim.last.meta.ttl.seconds == 10  # called again exactly when the window ends
    clock.advance(10)
    assert sim.step()["phase"] == "Starting"


@pytest.mark.parametrize("raw", [None, "yesterday", "2026-11-29 09:00", ""])
def test_missing_or_unparsable_signal_is_not_idle(sim: Sim, clock: Clock, raw: str | None) -> None:
    sim.deployment = deployment(foreground=raw)
    sim.add(spec())
    for _ in range(3):
        clock.advance(3600)
        st = sim.step()
        assert (st["phase"], st["reason"]) == ("WaitingForIdle", "ForegroundSignalUnknown")
        assert sim.observed[BACKFILL] == {}


def test_no_ready_replica_waits(sim: Sim, clock: Clock) -> None:
    sim.replicas = [replica(0, "gpu-a", ready=False)]
    sim.add(spec())
    clock.advance(900)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NoReadyReplica")


def test_missing_model_waits_and_cluster_without_provider_config_waits(
    sim: Sim, clock: Clock
) -> None:
    sim.deployment = deployment(name="other", foreground=format_time(clock.now))
    sim.add(spec())
    clock.advance(900)
    assert sim.step()["reason"] == "ModelNotFound"
    appeared = clock.now + datetime.timedelta(seconds=60)  # Ready 14 minutes ago
    sim.deployment = deployment(
        foreground=format_time(clock.now - datetime.timedelta(hours=1)), ready_since=appeared
    )
    sim.clusters = [c for c in sim.clusters if c["metadata"]["name"] != "gpu-a"]
    clock.advance(900)
    # The window starts at the first call that sees the model (not at its transition
    # time, another clock's: review 15d), so the cluster is looked at idleFor later.
    assert sim.step()["reason"] == "NotIdle"
    clock.advance(900)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "ClusterNotReady")
    assert "gpu-a" in st["message"]


# ---- a fixed point in an unchanged world ---------------------------------------------


def _quiet(sim: Sim, clock: Clock) -> None:
    """The last foreground request an hour ago."""
    sim.foreground(clock.now - datetime.timedelta(hours=1))


def _fp_not_idle(sim: Sim, clock: Clock) -> None:
    sim.foreground(clock.now - datetime.timedelta(seconds=30))
    sim.add(spec())


def _fp_model_missing(sim: Sim, clock: Clock) -> None:
    sim.deployment = deployment(name="other", foreground=format_time(clock.now))
    sim.add(spec())


def _fp_model_not_ready(sim: Sim, clock: Clock) -> None:
    sim.deployment = deployment(ready=False, foreground=format_time(clock.now))
    sim.add(spec())


def _fp_model_not_ready_after_a_cancel(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    _model_not_ready(sim, clock)
    assert sim.step()["phase"] == "Cancelling"  # its Object is gone at the next step


def _fp_no_signal(sim: Sim, clock: Clock) -> None:
    sim.deployment = deployment(foreground=None)
    sim.add(spec())


def _fp_no_ready_replica(sim: Sim, clock: Clock) -> None:
    _quiet(sim, clock)
    sim.replicas = [replica(0, "gpu-a", ready=False)]
    sim.add(spec())


def _fp_cluster_not_ready(sim: Sim, clock: Clock) -> None:
    _quiet(sim, clock)
    sim.clusters = [c for c in sim.clusters if c["metadata"]["name"] != "gpu-a"]
    sim.add(spec())


def _fp_suspended(sim: Sim, clock: Clock) -> None:
    sim.add(spec(suspend=True))


def _fp_template_not_found(sim: Sim, clock: Clock) -> None:
    sim.cronjobs = []
    sim.add(spec())


def _fp_running(sim: Sim, clock: Clock) -> None:
    start(sim, clock)


def _fp_cancelling(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    sim.linger = True  # the Job's Object is still being deleted
    sim.foreground()
    clock.advance(5)


def _fp_replicas_being_deleted(sim: Sim, clock: Clock) -> None:
    _quiet(sim, clock)
    for r in sim.replicas:  # still Ready by their status: Crossplane calls no function
        r["metadata"]["deletionTimestamp"] = format_time(clock.now)
    sim.add(spec())


def _fp_running_recorded_without_a_uid(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    sim.backfills[BACKFILL]["status"].pop("replicaUID")  # written before it existed


def _fp_cooling_down(sim: Sim, clock: Clock) -> None:
    start(sim, clock, repeatAfter="1h")
    sim.set_job("complete")
    assert sim.step()["phase"] == "Succeeded"


def _fp_one_shot(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    sim.set_job("complete")


def _fp_failed(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    sim.set_job("failed")


FIXED_POINT: list[Case[Any, tuple[str, str]]] = [
    Case("not idle", "found by review 15b: the message counted the idle seconds",
         _fp_not_idle, ("WaitingForIdle", "NotIdle")),
    Case("model missing", "found by review 15b: notIdleBefore was now on every call",
         _fp_model_missing, ("WaitingForIdle", "ModelNotFound")),
    Case("model not ready", "found by review 15b: notIdleBefore was now on every call",
         _fp_model_not_ready, ("WaitingForIdle", "ModelNotReady")),
    Case("model not ready after a cancel", "as model not ready, entered from Cancelling",
         _fp_model_not_ready_after_a_cancel, ("WaitingForIdle", "ModelNotReady")),
    Case("no signal", "not known to be idle", _fp_no_signal,
         ("WaitingForIdle", "ForegroundSignalUnknown")),
    Case("no ready replica", "idle, no Ready replica", _fp_no_ready_replica,
         ("WaitingForIdle", "NoReadyReplica")),
    Case("cluster not ready", "idle, the replica's cluster has no provider config",
         _fp_cluster_not_ready, ("WaitingForIdle", "ClusterNotReady")),
    Case("suspended", "spec.suspend", _fp_suspended, ("Suspended", "Suspended")),
    Case("blocked", "the template is missing", _fp_template_not_found,
         ("Blocked", "TemplateNotFound")),
    Case("running", "the Job runs", _fp_running, ("Running", "JobRunning")),
    Case("every replica being deleted", "review 16a: not live, though their status says "
         "Ready", _fp_replicas_being_deleted, ("WaitingForIdle", "NoReadyReplica")),
    Case("running, recorded without a uid", "an attempt recorded before replicaUID "
         "existed is not rewritten", _fp_running_recorded_without_a_uid,
         ("Running", "JobRunning")),
    Case("cancelling", "the Job's Object is being deleted", _fp_cancelling,
         ("Cancelling", "PreemptedByForeground")),
    Case("cooling down", "Succeeded, repeatAfter not elapsed", _fp_cooling_down,
         ("Succeeded", "CoolingDown")),
    Case("one-shot succeeded", "repeatAfter 0", _fp_one_shot, ("Succeeded", "JobSucceeded")),
    Case("failed", "terminal until the spec changes", _fp_failed, ("Failed", "JobFailed")),
]  # fmt: skip


@table(FIXED_POINT)
def test_a_status_is_a_fixed_point_in_an_unchanged_world(
    sim: Sim, clock: Clock, case: Case[Any, tuple[str, str]]
) -> None:
    """Crossplane v2.4 reconciles an XR again on every write of it and writes the status
    whenever it differs: in a world that does not change, once the state is entered (a
    transition may write once more: "Job ... was cancelled; ..." becomes the state's
    own message), the reconciles a second and a minute later write the status and
    conditions the one before wrote."""
    case.inputs(sim, clock)
    sim.step()  # the transition into the state
    clock.advance(1)
    first = copy.deepcopy(sim.step())
    assert (first["phase"], first["reason"]) == case.want, first
    conds = conditions(sim.last)
    for seconds in (1, 60):
        clock.advance(seconds)
        assert sim.step() == first, f"{seconds}s later"
        assert conditions(sim.last) == conds, f"{seconds}s later"


# ---- start -------------------------------------------------------------------------


def test_start_composes_the_job_from_the_template(sim: Sim, clock: Clock) -> None:
    env = [{"name": "SUITE", "value": "mmlu"}, {"name": "HF_TOKEN", "value": "none"},
           {"name": "EXTRA", "value": "1"}]  # fmt: skip
    sim.add(spec(env=env, maxRunDuration="45m"))
    sim.step()
    clock.advance(600)
    st = sim.step()
    assert st["phase"] == "Starting" and st["attempts"] == 1
    assert st["cluster"] == "gpu-a" and st["replica"] == R0
    assert st["startedAt"] == format_time(clock.now)
    assert sim.calls == 3  # base requirements, then the chosen replica's cluster
    reqs = requirements(sim.last)
    assert reqs["cluster"]["matchName"] == "gpu-a"
    assert reqs["replicas"]["matchLabels"]["labels"] == {"modelplane.ai/deployment": DEPLOYMENT}
    obj = sim.job()
    assert obj["spec"]["providerConfigRef"]["name"] == "gpu-a"
    assert obj["spec"]["forProvider"]["deletionPropagationPolicy"] == "Foreground"
    job = obj["spec"]["forProvider"]["manifest"]
    assert job["metadata"]["name"] == st["job"] and job["metadata"]["namespace"] == "default"
    assert job["spec"]["activeDeadlineSeconds"] == 2700
    assert "ttlSecondsAfterFinished" not in job["spec"]
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["modelplane.ai/workload-class"] == "background"
    endpoint = "http://chat-0.default.svc.cluster.local:8000"
    (main,) = pod["spec"]["containers"]
    assert main["env"] == [
        {"name": "MODELPLANE_WORKLOAD_CLASS", "value": "background"},  # injected first
        {"name": "MODELPLANE_ENDPOINT", "value": endpoint},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "SUITE", "value": "mmlu"},  # replaced in place
        {"name": "LIMIT", "value": "200"},  # untouched
        {"name": "HF_TOKEN", "value": "none"},  # a valueFrom entry replaced by a literal
        {"name": "EXTRA", "value": "1"},  # appended
    ]
    assert main["args"] == eval_cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"][0]["args"]  # fmt: skip
    (init,) = pod["spec"]["initContainers"]
    assert {"name": "MODELPLANE_WORKLOAD_CLASS", "value": "background"} in init["env"]
    assert {"name": "SUITE", "value": "mmlu"} not in init["env"]  # overrides: regular only
    assert conditions(sim.last)["Backfilling"]["status"] == "True"
    assert xr_ready(sim.last) == "READY_TRUE"


@pytest.mark.parametrize(("containers", "refused"), [(200, True), (20, False)])
def test_env_times_containers_past_4mib_is_refused_naming_the_fields(
    sim: Sim, clock: Clock, containers: int, refused: bool
) -> None:
    """Every entry of spec.env is copied into every container of the CronJob: 201
    containers x 32 KiB would pass Crossplane's 4 MiB response; refused before the Job is
    built (Blocked, as any unusable template), naming spec.env and the CronJob's
    containers (review 16b F1)."""
    cj = eval_cronjob()
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    extra = [{"name": f"c{i}", "image": "busybox:1.36"} for i in range(containers)]
    pod["containers"] = [pod["containers"][0], *extra]
    sim.cronjobs = [cj]
    sim.add(spec(env=[{"name": "BLOB", "value": "x" * 32 * 1024}]))
    sim.step()
    clock.advance(600)
    st = sim.step()
    if not refused:
        assert st["phase"] == "Starting", st
        return
    assert (st["phase"], st["reason"]) == ("Blocked", "InvalidTemplate"), st
    for words in ("spec.env", f"{containers + 1} containers", "4 MiB", "ConfigMap"):
        assert words in st["message"], (words, st["message"])
    assert not desired(sim.last)


def test_a_template_that_sets_the_workload_class_is_overridden(sim: Sim, clock: Clock) -> None:
    cj = eval_cronjob()
    c = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    c["env"].insert(0, {"name": "MODELPLANE_WORKLOAD_CLASS", "value": "foreground"})
    sim.cronjobs = [cj]
    sim.add(spec())
    sim.step()
    clock.advance(600)
    sim.step()
    env = job_manifest(sim)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "MODELPLANE_WORKLOAD_CLASS"] == [
        {"name": "MODELPLANE_WORKLOAD_CLASS", "value": "background"}
    ]


# ---- cancellation -------------------------------------------------------------------


def test_foreground_cancels_and_retries_after_the_next_window(
    sim: Sim, clock: Clock, registry: CollectorRegistry
) -> None:
    first = start(sim, clock)
    job1 = first["job"]
    clock.advance(120)
    sim.foreground()
    sim.linger = True  # the Job takes a while to go (Foreground deletion)
    clock.advance(5)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "PreemptedByForeground")
    assert sim.observed[BACKFILL] == {}  # the Object is no longer desired: Crossplane deletes it
    assert st["preemptions"] == 1 and "runningSince" not in st
    clock.advance(20)
    st = sim.step()
    assert st["phase"] == "Cancelling" and "to be deleted" in st["message"]
    assert requirements(sim.last)["job-object"]["matchName"].startswith("modelbackfill-")
    sim.release()
    clock.advance(10)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle")
    assert "was cancelled" in st["message"]
    cancelled_at = clock.now
    clock.advance(590)  # 10m after the foreground request, but not after the cancellation
    assert sim.step()["phase"] == "WaitingForIdle"
    clock.advance(cancelled_at.timestamp() + 600 - clock.now.timestamp())
    st = sim.step()
    assert st["phase"] == "Starting" and st["attempts"] == 2
    assert st["job"] != job1 and JOB_PREFIX + "2" in sim.observed[BACKFILL]
    assert metric(registry, "preemptions_total", reason="foreground") == 1
    assert metric(registry, "starts_total") == 2
    assert metric(registry, "useful_running_seconds_total") == 125


def _replica_not_ready(sim: Sim, clock: Clock) -> None:
    sim.replicas[0] = replica(0, "gpu-a", ready=False)
    clock.advance(30)


def _model_not_ready(sim: Sim, clock: Clock) -> None:
    sim.deployment = deployment(ready=False, foreground=format_time(clock.now.replace(hour=8)))
    clock.advance(30)


def _deleted(sim: Sim, clock: Clock) -> None:
    sim.backfills[BACKFILL]["metadata"]["deletionTimestamp"] = format_time(clock.now)


def _signal_gone(sim: Sim, clock: Clock) -> None:
    sim.deployment["metadata"]["annotations"] = {}
    clock.advance(30)


def _foreground(sim: Sim, clock: Clock) -> None:
    clock.advance(120)
    sim.foreground()
    clock.advance(5)


@dataclass(frozen=True)
class Cancelled:
    """The status reason of the cancellation and the ``reason`` label it is counted with
    (``modelplane_model_backfill_preemptions_total``)."""

    reason: str
    metric: str


CANCELS: list[Case[Any, Cancelled]] = [
    Case("foreground request", "foreground service always wins", _foreground,
         Cancelled("PreemptedByForeground", "foreground")),
    Case("replica not ready", "the replica the Job runs against no longer serves",
         _replica_not_ready, Cancelled("ReplicaNotReady", "not_ready")),
    Case("model not ready", "backfill never runs on a model that is not Ready",
         _model_not_ready, Cancelled("ModelNotReady", "not_ready")),
    Case("deletion", "a ModelBackfill being deleted stops its Job", _deleted,
         Cancelled("Deleting", "other")),
    Case("foreground signal gone", "a missing signal means not known to be idle",
         _signal_gone, Cancelled("ForegroundSignalUnknown", "other")),
]  # fmt: skip


@table(CANCELS)
def test_what_cancels_a_running_job(
    sim: Sim, clock: Clock, registry: CollectorRegistry, case: Case[Any, Cancelled]
) -> None:
    start(sim, clock)
    case.inputs(sim, clock)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", case.want.reason), case.reason
    assert sim.observed[BACKFILL] == {}  # no longer desired: Crossplane deletes the Object
    assert st["preemptions"] == 1 and "runningSince" not in st
    assert metric(registry, "preemptions_total", reason=case.want.metric) == 1


def test_after_its_replica_stops_serving_another_waits_a_full_window(
    sim: Sim, clock: Clock
) -> None:
    start(sim, clock)
    _replica_not_ready(sim, clock)
    assert sim.step()["reason"] == "ReplicaNotReady"
    clock.advance(30)
    st = sim.step()
    # The cancelled attempt's replica is not Ready, but another is: still a full window first.
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle")


# ---- which replica an attempt runs on (review 16a F4) -----------------------------
# A ModelDeployment scale-down or make-before-break move deletes a ModelReplica, and
# Crossplane calls no function for an XR being deleted: its status still says Ready
# (with its endpoint) while its workload is torn down. Replica names are per index and
# the deployment reuses the lowest free index, so a later replica of the same name may
# live on another cluster. A replica being deleted is not live, and an attempt is on
# the replica it started on (status.replicaUID, status.cluster), not on a name.

UID0 = f"uid-modelreplica-{R0}"


def _being_deleted(sim: Sim, clock: Clock, index: int = 0) -> None:
    sim.replicas[index]["metadata"]["deletionTimestamp"] = format_time(clock.now)


def _recreated(sim: Sim, cluster: str) -> None:
    """Replica 0 deleted and created again under its name on ``cluster``: a new uid."""
    new = replica(0, cluster)
    new["metadata"]["uid"] = "uid-recreated"
    new["status"]["endpoint"] = f"http://{DEPLOYMENT}-0.{cluster}.example:8000"
    sim.replicas[0] = new


def _legacy(sim: Sim) -> None:
    """An attempt recorded before status.replicaUID existed."""
    sim.backfills[BACKFILL]["status"].pop("replicaUID", None)


@dataclass(frozen=True)
class OnReplica:
    """What a running attempt becomes: phase, reason, a fragment of the message, and
    status.replicaUID afterwards (None: not recorded)."""

    phase: str
    reason: str
    says: str
    uid: str | None


REPLICA_IDENTITY: list[Case[Any, OnReplica]] = [
    Case("unchanged", "the attempt's replica still serves: the Job keeps running, and the "
         "attempt records the replica's uid",
         lambda sim, clock: None, OnReplica("Running", "JobRunning", R0, UID0)),
    Case("being deleted", "found by review 16a: a replica being deleted still reports "
         "Ready; it is not live",
         _being_deleted, OnReplica("Cancelling", "ReplicaNotReady", "being deleted", UID0)),
    Case("re-created on another cluster", "found by review 16a: same name, new uid, "
         "another cluster: not the replica the Job runs against",
         lambda sim, clock: _recreated(sim, "gpu-b"),
         OnReplica("Cancelling", "ReplicaReplaced", "gpu-b", UID0)),
    Case("re-created on the same cluster", "a new uid is another replica, even on the "
         "same cluster", lambda sim, clock: _recreated(sim, "gpu-a"),
         OnReplica("Cancelling", "ReplicaReplaced", "uid-recreated", UID0)),
    Case("legacy attempt, unchanged", "an attempt recorded without a uid is compared by "
         "cluster: it keeps running and its status is not rewritten",
         lambda sim, clock: _legacy(sim), OnReplica("Running", "JobRunning", R0, None)),
    Case("legacy attempt, re-created elsewhere", "an attempt recorded without a uid: "
         "another cluster is another replica",
         lambda sim, clock: (_legacy(sim), _recreated(sim, "gpu-b")),
         OnReplica("Cancelling", "ReplicaReplaced", "gpu-b", None)),
]  # fmt: skip


@table(REPLICA_IDENTITY)
def test_a_running_attempt_is_on_the_replica_it_started_on(
    sim: Sim, clock: Clock, registry: CollectorRegistry, case: Case[Any, OnReplica]
) -> None:
    st = start(sim, clock)
    assert (st["replica"], st["cluster"]) == (R0, "gpu-a")
    case.inputs(sim, clock)
    clock.advance(30)
    st = sim.step()
    want = case.want
    assert (st["phase"], st["reason"]) == (want.phase, want.reason), (case.reason, st)
    assert want.says in st["message"], st["message"]
    assert st.get("replicaUID") == want.uid, st
    assert st["cluster"] == "gpu-a"  # where the attempt's Job is, until it is gone
    if want.phase == "Cancelling":
        assert sim.observed[BACKFILL] == {}  # no longer desired: Crossplane deletes it
        assert metric(registry, "preemptions_total", reason="not_ready") == 1
    else:
        assert JOB_PREFIX + "1" in sim.observed[BACKFILL]


ADMIT_LIVE: list[Case[tuple[int, ...], tuple[str, str, str | None]]] = [
    Case("first replica being deleted", "found by review 16a: a Job started on a replica "
         "being deleted; the next live one is used", (0,), ("Starting", "JobCreated", R1)),
    Case("every replica being deleted", "no live replica: wait", (0, 1),
         ("WaitingForIdle", "NoReadyReplica", None)),
]  # fmt: skip


@table(ADMIT_LIVE)
def test_no_attempt_starts_on_a_replica_being_deleted(
    sim: Sim, clock: Clock, case: Case[tuple[int, ...], tuple[str, str, str | None]]
) -> None:
    for i in case.inputs:
        _being_deleted(sim, clock, i)
    sim.add(spec())
    clock.advance(900)
    st = sim.step()
    phase, reason, on = case.want
    assert (st["phase"], st["reason"], st.get("replica")) == (phase, reason, on), case.reason
    if on is None:
        assert sim.observed[BACKFILL] == {}
    else:
        assert st["replicaUID"] == f"uid-modelreplica-{on}"


# Found by review 17l (F1): label values are shortened past 63 characters
# (naming.label_value), and the shortened value of a long name is itself a valid
# ModelDeployment name; the replicas selected by the modelplane.ai/deployment label are
# used only when their spec.deploymentName is the backfill's spec.modelRef.name.
LONG = "chat-" + "assistant-" * 6 + "prod"  # 69 characters
SHORT = label_value(LONG)  # 63 characters: another valid ModelDeployment name


@dataclass(frozen=True)
class Collision:
    """The backfill's deployment, and which replicas serve (deployment -> Ready)."""

    model: str
    ready: dict[str, bool]


SAME_LABEL: list[Case[Collision, tuple[str, str, str | None]]] = [
    Case("long name, only the short one serves", "the other deployment's replica carries "
         "the same label: it is not the model's, so nothing starts",
         Collision(LONG, {LONG: False, SHORT: True}),
         ("WaitingForIdle", "NoReadyReplica", None)),
    Case("short name, only the long one serves", "the reverse: the long deployment's "
         "replica is labelled with the short name",
         Collision(SHORT, {LONG: True, SHORT: False}),
         ("WaitingForIdle", "NoReadyReplica", None)),
    Case("long name, both serve", "the attempt starts on the model's own replica",
         Collision(LONG, {LONG: True, SHORT: True}),
         ("Starting", "JobCreated", replica_name(NAMESPACE, LONG, 0))),
    Case("short name, both serve", "the attempt starts on the model's own replica",
         Collision(SHORT, {LONG: True, SHORT: True}),
         ("Starting", "JobCreated", replica_name(NAMESPACE, SHORT, 0))),
]  # fmt: skip


@table(SAME_LABEL)
def test_only_the_named_deployments_replicas_are_used(
    sim: Sim, clock: Clock, case: Case[Collision, tuple[str, str, str | None]]
) -> None:
    model = case.inputs.model
    sim.deployment = deployment(name=model, foreground=format_time(clock.now))
    sim.replicas = [
        replica(0, cluster, ready=case.inputs.ready[dep], dep=dep)
        for dep, cluster in ((LONG, "gpu-a"), (SHORT, "gpu-b"))
    ]
    assert {r["metadata"]["labels"]["modelplane.ai/deployment"] for r in sim.replicas} == {SHORT}
    sim.add(spec(modelRef={"name": model}))
    clock.advance(900)
    st = sim.step()
    phase, reason, on = case.want
    assert (st["phase"], st["reason"], st.get("replica")) == (phase, reason, on), (
        case.reason,
        st,
    )
    if on is None:
        assert sim.observed[BACKFILL] == {}
    else:
        cluster = "gpu-a" if model == LONG else "gpu-b"
        assert st["cluster"] == cluster
        env = {
            e["name"]: e.get("value")
            for e in job_manifest(sim)["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["MODELPLANE_ENDPOINT"] == f"http://{model}-0.default.svc.cluster.local:8000"


def test_a_replaced_replica_is_cancelled_then_readmitted_on_the_new_one(
    sim: Sim, clock: Clock
) -> None:
    sim.replicas = [replica(0, "gpu-a")]
    start(sim, clock)
    _recreated(sim, "gpu-b")
    clock.advance(30)
    assert sim.step()["reason"] == "ReplicaReplaced"
    clock.advance(30)
    st = sim.step()  # the Object is gone: a full idle window from now
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle")
    clock.advance(599)
    assert sim.step()["phase"] == "WaitingForIdle"
    clock.advance(1)
    st = sim.step()
    assert (st["phase"], st["replica"], st["cluster"]) == ("Starting", R0, "gpu-b"), st
    assert st["replicaUID"] == "uid-recreated" and st["attempts"] == 2
    env = job_manifest(sim)["spec"]["template"]["spec"]["containers"][0]["env"]
    endpoint = f"http://{DEPLOYMENT}-0.gpu-b.example:8000"
    assert {"name": "MODELPLANE_ENDPOINT", "value": endpoint} in env


def _replica_gone(sim: Sim, clock: Clock) -> None:
    sim.replicas = sim.replicas[1:]


FAILED_UNDER: list[Case[Any, tuple[str, str]]] = [
    Case("replica unchanged", "a Job that fails on its own is terminal",
         lambda sim, clock: None, ("Failed", "JobFailed")),
    Case("replica being deleted", "the Job failed as its replica went away: not the "
         "backfill's failure", _being_deleted, ("Cancelling", "ReplicaNotReady")),
    Case("replica re-created elsewhere", "the Job failed against a replica that is gone",
         lambda sim, clock: _recreated(sim, "gpu-b"), ("Cancelling", "ReplicaReplaced")),
    Case("replica gone", "the Job failed against a replica that is gone", _replica_gone,
         ("Cancelling", "ReplicaNotReady")),
    Case("replica not ready", "the Job failed against a replica that stopped serving",
         _replica_not_ready, ("Cancelling", "ReplicaNotReady")),
]  # fmt: skip


@table(FAILED_UNDER)
def test_a_job_that_fails_as_its_replica_goes_is_not_a_terminal_failure(
    sim: Sim, clock: Clock, case: Case[Any, tuple[str, str]]
) -> None:
    start(sim, clock)
    case.inputs(sim, clock)
    sim.set_job("failed")
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == case.want, (case.reason, st)
    if st["phase"] == "Cancelling":
        assert "lastResult" not in st and "BackoffLimitExceeded" in st["message"]
        clock.advance(30)
        st = sim.step()
        assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle")


def test_suspend_cancels_then_resumes_with_a_new_window(
    sim: Sim, clock: Clock, registry: CollectorRegistry
) -> None:
    start(sim, clock)
    hash_before = sim.backfills[BACKFILL]["status"]["specHash"]
    sim.backfills[BACKFILL]["spec"]["suspend"] = True
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "Suspended")
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Suspended", "Suspended")
    assert xr_ready(sim.last) == "READY_TRUE"
    clock.advance(7200)
    assert sim.step()["phase"] == "Suspended" and sim.observed[BACKFILL] == {}
    sim.backfills[BACKFILL]["spec"]["suspend"] = False
    st = sim.step()
    # suspend is not part of the spec: the hash and attempts stay, and the model has
    # been idle since the cancellation, two hours ago.
    assert st["specHash"] == hash_before
    assert st["phase"] == "Starting" and st["attempts"] == 2
    assert metric(registry, "preemptions_total", reason="suspended") == 1


# Issue 13: the spec hash is over canonical values, so spelling the same spec another
# way never cancels a running Job (the sim runs over gRPC).
ENV_A = {"name": "SUITE", "value": "mmlu"}
ENV_B = {"name": "LIMIT", "value": "100"}
SAME = "the spec hash is of the canonical spec: a respelling is no change"

RESPELLED: list[Case[tuple[dict[str, Any], dict[str, Any]], bool]] = [
    Case("15m as 900s", SAME, ({"maxRunDuration": "15m"}, {"maxRunDuration": "900s"}), False),
    Case("1h as 60m", SAME, ({"idleFor": "1h"}, {"idleFor": "60m"}), False),
    Case("defaults spelled out", SAME, ({}, {"idleFor": "10m", "maxRunDuration": "30m"}), False),
    Case("0 as 0s", SAME, ({"repeatAfter": "0"}, {"repeatAfter": "0s"}), False),
    Case("env reordered", "env is a set of names: its order is no change",
         ({"env": [ENV_A, ENV_B]}, {"env": [ENV_B, ENV_A]}), False),
    Case("a real change", "a longer maxRunDuration is a new spec: the attempt restarts",
         ({"maxRunDuration": "15m"}, {"maxRunDuration": "16m"}), True),
]  # fmt: skip


@table(RESPELLED)
def test_respelling_the_spec_never_cancels_a_running_job(
    sim: Sim, clock: Clock, case: Case[tuple[dict[str, Any], dict[str, Any]], bool]
) -> None:
    before, after = case.inputs
    if "idleFor" in before:
        sim.add(spec(**before))
        sim.step()
        clock.advance(3600)
        sim.step()
        sim.set_job("active")
        clock.advance(10)
        assert sim.step()["phase"] == "Running"
    else:
        start(sim, clock, **before)
    hash_before = sim.backfills[BACKFILL]["status"]["specHash"]
    sim.backfills[BACKFILL]["spec"] = {**spec(**before), **after}
    clock.advance(30)
    st = sim.step()
    if case.want:
        assert (st["phase"], st["reason"]) == ("Cancelling", "SpecChanged"), case.reason
    else:
        assert (st["phase"], st["reason"]) == ("Running", "JobRunning"), (case.reason, st)
        assert st["specHash"] == hash_before


@pytest.mark.parametrize(
    ("spec_", "message"),
    [
        (
            spec(templateRef="nightly-eval"),
            "spec.templateRef: expected an object {name: <CronJob>}, got a string",
        ),
        (
            spec(modelRef=["chat"]),
            "spec.modelRef: expected an object {name: <ModelDeployment>}, got a list",
        ),
        (
            spec(env={"SUITE": "mmlu"}),
            "spec.env: expected a list [{name: <NAME>, value: <value>}], got an object",
        ),
        (
            spec(env=["SUITE=mmlu"]),
            "spec.env[0]: expected an object {name: <NAME>, value: <value>}, got a string",
        ),
        (spec(idleFor=["10m"]), "spec.idleFor: expected a Go duration such as 10m, got a list"),
    ],
)
def test_a_wrong_shape_says_what_to_write(
    grpc_function: GrpcFunction, spec_: Any, message: str
) -> None:
    # The XRD rejects these shapes; the function still says what to write (a spec that
    # reaches it unvalidated, or a render), never "Input should be a valid dictionary".
    rsp = grpc_function.call(build(xr("ModelBackfill", BACKFILL, spec_)))
    [msg] = fatal(rsp)
    assert message in msg, msg
    assert "Input should be" not in msg


def test_a_spec_change_cancels_and_restarts(
    sim: Sim, clock: Clock, registry: CollectorRegistry
) -> None:
    start(sim, clock)
    sim.backfills[BACKFILL]["spec"]["env"] = [{"name": "SUITE", "value": "hellaswag"}]
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "SpecChanged")
    clock.advance(30)
    assert sim.step()["phase"] == "WaitingForIdle"
    clock.advance(600)
    st = sim.step()
    assert st["phase"] == "Starting"
    env = job_manifest(sim)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "SUITE", "value": "hellaswag"} in env
    assert metric(registry, "preemptions_total", reason="spec_changed") == 1


def test_an_invalid_spec_touches_nothing_until_it_is_valid_again(
    sim: Sim, clock: Clock, registry: CollectorRegistry
) -> None:
    start(sim, clock)
    job = sim.job()
    before = copy.deepcopy(sim.backfills[BACKFILL]["status"])
    sim.backfills[BACKFILL]["spec"]["repeatAfter"] = "30s"  # not admitted by CEL
    sim.foreground()
    clock.advance(30)
    # Bad input is a fatal result naming the field, as for every kind: Crossplane applies
    # nothing, so the Job is kept as it is (bounded by its activeDeadlineSeconds).
    rsp = grpc_call(sim)
    [msg] = fatal(rsp)
    assert "spec.repeatAfter" in msg, msg
    assert not rsp.desired.resources and not status(rsp)
    assert sim.job() == job and sim.backfills[BACKFILL]["status"] == before
    sim.backfills[BACKFILL]["spec"]["repeatAfter"] = "1h"  # valid again: a change of spec
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "SpecChanged")
    assert conditions(sim.last)["SpecValid"]["status"] == "True"
    assert metric(registry, "preemptions_total", reason="spec_changed") == 1


def grpc_call(sim: Sim) -> Any:
    """One call with the backfill as it stands, over gRPC, without applying the response."""
    return sim.fn.call(build(sim.backfills[BACKFILL], observed=sim.observed[BACKFILL]))


ENV_RULE = "env names are C identifiers (serving.env, the XRD's rule), each set once"
SPEC_ERROR = "bad input is a SpecError naming the field, as for every kind"

# Specs the XRD's CEL rules reject at admission: a fatal result naming the field.
INVALID: list[Case[dict[str, Any], str]] = [
    Case("bad env name", ENV_RULE, {"env": [{"name": "1BAD", "value": "x"}]}, "spec.env[0].name"),
    Case("env name with dash", ENV_RULE, {"env": [{"name": "A-B", "value": "x"}]},
         "spec.env[0].name"),
    Case("env declared twice", ENV_RULE,
         {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "spec.env[1].name"),
    Case("reserved name", "the function sets MODELPLANE_WORKLOAD_CLASS itself",
         {"env": [{"name": "MODELPLANE_WORKLOAD_CLASS", "value": "foreground"}]},
         "spec.env[0].name"),
    Case("valueFrom", "only literal variables are copied",
         {"env": [{"name": "A", "valueFrom": {"fieldRef": {}}}]}, "spec.env[0].valueFrom"),
    Case("33 env entries", "at most 32 literal variables (the XRD's bound)",
         {"env": [{"name": f"V{i}", "value": "x"} for i in range(33)]}, "spec.env"),
    Case("repeatAfter 30s", "repeatAfter is 0 or at least 1m (the XRD's rule)",
         {"repeatAfter": "30s"}, "spec.repeatAfter"),
    Case("idleFor 0", "the idle window is longer than 0", {"idleFor": "0"}, "spec.idleFor"),
    Case("maxRunDuration 0.5s", "a run may take at least 1s", {"maxRunDuration": "500ms"},
         "spec.maxRunDuration"),
    Case("idleFor a number", f"{SPEC_ERROR}: durations are strings (the XRD's type)",
         {"idleFor": 600}, "spec.idleFor"),
    Case("suspend a string", f"{SPEC_ERROR}: suspend is a boolean, never coerced",
         {"suspend": "yes"}, "spec.suspend"),
]  # fmt: skip


@table(INVALID)
def test_an_invalid_spec_is_a_fatal_error_naming_the_field(
    sim: Sim, clock: Clock, case: Case[dict[str, Any], str]
) -> None:
    sim.add(spec())
    sim.step()
    sim.backfills[BACKFILL]["spec"] = spec(**case.inputs)  # not admitted by CEL
    rsp = grpc_call(sim)
    [msg] = fatal(rsp)
    prefix = f"invalid ModelBackfill {NAMESPACE}/{BACKFILL}: {case.want}: "
    assert msg.startswith(prefix), (case.reason, msg)
    assert not rsp.desired.resources


def test_without_a_signal_nothing_starts_again(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    _signal_gone(sim, clock)
    assert sim.step()["reason"] == "ForegroundSignalUnknown"
    clock.advance(3600)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "ForegroundSignalUnknown")


def test_a_job_reported_running_long_past_its_deadline_is_given_up(sim: Sim, clock: Clock) -> None:
    start(sim, clock, maxRunDuration="20m")
    clock.advance(20 * 60 + 590)  # within the grace after the deadline: still Running
    assert sim.step()["phase"] == "Running"
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "JobOverdue")


# provider-kubernetes v1.3.1 (internal/controller/namespaced/object/object.go, the poll
# interval hook it gives crossplane-runtime; cmd/provider/main.go, --poll 10m and
# --poll-jitter-percentage 10 by default): an Object that is Ready is observed again
# after --poll, one that is not after 30 s, each +/- the jitter. With watches off (the
# default) nothing else observes it: its Job's state reaches the function only then.
PROVIDER_POLL_READY = 600.0
PROVIDER_POLL_NOT_READY = 30.0
PROVIDER_JITTER = 0.10


def provider_ready(obj: dict[str, Any], remote: dict[str, Any]) -> bool:
    """Whether provider-kubernetes marks ``obj`` Ready once it observed ``remote``:
    ``spec.readiness.policy`` SuccessfulCreate (the CRD's default) as soon as the remote
    object exists, DeriveFromCelQuery when ``celQuery`` over it is true (cel-python)."""
    import celpy

    readiness = obj["spec"].get("readiness") or {}
    policy = readiness.get("policy", "SuccessfulCreate")
    if policy == "SuccessfulCreate":
        return True
    assert policy == "DeriveFromCelQuery", policy
    env = celpy.Environment()
    program = env.program(env.compile(readiness["celQuery"]))
    return bool(program.evaluate({"object": celpy.json_to_cel(remote)}))


def provider_next_poll(obj: dict[str, Any], remote: dict[str, Any], jitter: float) -> float:
    """Seconds until provider-kubernetes observes ``obj`` again after observing
    ``remote``; ``jitter`` from -1 to 1 is where in the provider's jitter the draw falls."""
    base = PROVIDER_POLL_READY if provider_ready(obj, remote) else PROVIDER_POLL_NOT_READY
    return base * (1 + jitter * PROVIDER_JITTER)


@dataclass(frozen=True)
class Race:
    """A Job that fails at its deadline (``maxRunDuration``), and provider-kubernetes'
    last observation of it running ``polled_before`` seconds earlier, with its next one
    ``jitter`` (-1 to 1) into the provider's jitter."""

    max_run: str
    polled_before: float
    jitter: float


RACES: list[Case[Race, None]] = [
    Case("the example's 45m, polled 10s before, longest jitter", "review 19d F6: a Ready "
         "Object is observed again 9-11 min later, past the 600 s grace",
         Race("45m", 10, 1.0), None),
    Case("20m, polled 1s before, half the jitter", "the failure is 629 s old when a Ready "
         "Object is observed again", Race("20m", 1, 0.5), None),
    Case("1m, polled 20s before, longest jitter", "a short run", Race("1m", 20, 1.0), None),
    Case("45m, polled 25s before, shortest jitter", "the shortest draw: within the grace "
         "even for a Ready Object; a Job not yet Ready is observed 2 s after it failed",
         Race("45m", 25, -1.0), None),
]  # fmt: skip


@table(RACES)
def test_a_job_failing_at_its_deadline_is_a_failure_whatever_the_providers_poll(
    sim: Sim, clock: Clock, registry: CollectorRegistry, case: Case[Race, None]
) -> None:
    """Found by review 19d (F6): the Job's Failed condition reaches the function only at
    provider-kubernetes' next observation of its Object. A Ready Object waits the 10 min
    poll, longer than OVERDUE_GRACE_SECONDS, and the attempt was cancelled as JobOverdue
    (a preemption, retried) although its Job had failed (JobFailed, terminal). The Object
    is not Ready while its Job runs, so the provider observes it every 30 s."""
    r = case.inputs
    start(sim, clock, maxRunDuration=r.max_run)
    started = parse_time(sim.backfills[BACKFILL]["status"]["startedAt"])
    assert started is not None
    # activeDeadlineSeconds counts from the Job's startTime, at or after startedAt.
    max_run = parse(spec(maxRunDuration=r.max_run)).max_run_seconds
    failed_at = started + datetime.timedelta(seconds=max_run)
    last_poll = failed_at - datetime.timedelta(seconds=r.polled_before)
    obj = sim.job()
    running = {**job_manifest(sim), "status": job_status("active", last_poll)}
    seen = last_poll + datetime.timedelta(seconds=provider_next_poll(obj, running, r.jitter))
    assert seen > failed_at, "the provider observes the failure on its next poll"
    # Until then every call of the function (Crossplane's, each 10 s here) sees it running.
    clock.now = max(clock.now, failed_at)
    while clock.now < seen:
        st = sim.step()
        assert (st["phase"], st["reason"]) == ("Running", "JobRunning"), (clock.now, st)
        clock.advance(10)
    sim.set_job("deadline")
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Failed", "JobFailed"), st
    assert "DeadlineExceeded" in st["message"]
    assert metric(registry, "preemptions_total", reason="other") == 0


JOB_STATES = [
    Case("pending", "not created yet, or no pod", "pending", False),
    Case("active", "running: observed every 30 s", "active", False),
    Case("complete", "finished: the 10 min poll is enough", "complete", True),
    Case("failed", "finished", "failed", True),
    Case("deadline", "finished at activeDeadlineSeconds", "deadline", True),
]  # fmt: skip


@table(JOB_STATES)
def test_the_job_object_is_ready_once_its_job_finished(
    sim: Sim, clock: Clock, case: Case[str, bool]
) -> None:
    """The Job Object's readiness is the Job's terminal conditions (review 19d F6), on
    the Object first desired and on the one kept once the Job exists; the XR's
    readiness is the function's own (stated for every child) and does not follow it."""
    sim.add(spec())
    sim.step()
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"
    first = sim.job()
    sim.set_job("active")
    clock.advance(10)
    assert sim.step()["phase"] == "Running"
    kept = sim.job()
    for obj in (first, kept):
        assert obj["spec"]["readiness"] == {
            "policy": "DeriveFromCelQuery",
            "celQuery": JOB_FINISHED_CEL,
        }
    remote = {**job_manifest(sim), "status": job_status(case.inputs, clock.now)}
    assert provider_ready(kept, remote) is case.want
    assert xr_ready(sim.last) == "READY_TRUE"
    assert set(desired_ready(sim.last).values()) == {"READY_TRUE"}


def test_a_job_object_created_without_readiness_gets_it(sim: Sim, clock: Clock) -> None:
    """An Object an earlier version created (no ``spec.readiness``: SuccessfulCreate, so
    Ready and observed every 10 min) gets the Job's readiness while its attempt runs."""
    start(sim, clock)
    key = f"{JOB_PREFIX}1"
    del sim.observed[BACKFILL][key]["spec"]["readiness"]
    clock.advance(30)
    assert sim.step()["phase"] == "Running"
    assert sim.job()["spec"]["readiness"]["celQuery"] == JOB_FINISHED_CEL


# ---- a Job deleted on its cluster ------------------------------------------------------


def test_a_job_deleted_on_the_cluster_ends_the_attempt_at_once(
    sim: Sim, clock: Clock, registry: CollectorRegistry
) -> None:
    """Session 20 (README, "A Job deleted on the workload cluster while its Object
    remains"): with ``[Observe, Delete]`` the Job's Object keeps reporting the running Job
    once the Job is deleted on the cluster, so the attempt stayed Running, holding its
    replica, until maxRunDuration plus 10 minutes (``JobOverdue``). Its Observe-only
    observer reports the Job gone (crossplane-runtime's ``Synced=False``), and the
    attempt ends at the next reconcile (``JobNotFound``), then is admitted again."""
    start(sim, clock)
    clock.advance(30)
    sim.delete_job()  # kubectl delete job on the workload cluster
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "JobNotFound"), st
    assert f"Job {st['job']} no longer exists on gpu-a: it was deleted there" in st["message"]
    assert conditions(sim.last)["Backfilling"]["status"] == "False"
    assert sim.observed[BACKFILL] == {}  # the Job's Object and its observer are dropped
    assert metric(registry, "preemptions_total", reason="other") == 1
    assert metric(registry, "useful_running_seconds_total") == 30
    clock.advance(5)
    st = sim.step()  # the Objects are gone: back to waiting for a full idle window
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle"), st
    assert "was cancelled" in st["message"]
    assert not sim.remote, "nothing re-created the Job"
    clock.advance(600)
    st = sim.step()
    assert (st["phase"], st["reason"], st["attempts"]) == ("Starting", "JobCreated", 2), st
    assert set(sim.observed[BACKFILL]) == {f"{JOB_PREFIX}2"}


def test_no_observer_for_a_job_object_that_names_no_job(sim: Sim, clock: Clock) -> None:
    """provider-kubernetes names a manifest without ``metadata.name`` after its Object:
    an observer of such a manifest would watch a Job that never exists and report it
    gone. The function never writes one; a corrupted observation gets no observer."""
    start(sim, clock)
    view = sim._observed_view(BACKFILL)
    del view["job-1"]["spec"]["forProvider"]["manifest"]["metadata"]["name"]
    del view["observer-1"]
    rsp, _ = sim.fn.drive(sim.backfills[BACKFILL], sim.world(), view)
    assert status(rsp)["phase"] == "Running"  # decided, not pending
    assert set(desired(rsp)) == {"job-1"}


def _deleted(sim: Sim, _clock: Clock) -> None:
    sim.delete_job()


def _observer_unreachable(sim: Sim, _clock: Clock) -> None:
    """The observer cannot reach the cluster (another Observe failure, not a missing Job)."""
    (obs,) = [o for k, o in sim.observed[BACKFILL].items() if k.startswith(OBSERVER_PREFIX)]
    sim.forced[obs["metadata"]["name"]] = {
        "conditions": [
            {"type": "Synced", "status": "False", "reason": "ReconcileError",
             "message": "observe failed: cannot get object: Get \"https://10.0.0.1:6443/apis/"
                        "batch/v1/namespaces/default/jobs/x\": dial tcp 10.0.0.1:6443: "
                        "connect: connection refused"},
        ]
    }  # fmt: skip


def _refused(sim: Sim, _clock: Clock) -> None:
    sim.set_job("refused")


@dataclass(frozen=True)
class Gone:
    """The attempt ``at`` a phase (``Starting``: its Job reported, no pod yet), then
    ``event``."""

    at: str
    event: Any


GONE: list[Case[Gone, tuple[str, str, frozenset[str]]]] = [
    Case("deleted while running", "the observer reports the Job gone",
         Gone("Running", _deleted), ("Cancelling", "JobNotFound", frozenset())),
    Case("deleted while starting", "the Job's Object had reported it, so it existed",
         Gone("Starting", _deleted), ("Cancelling", "JobNotFound", frozenset())),
    Case("cluster unreachable", "another Observe failure is no proof that the Job is gone",
         Gone("Running", _observer_unreachable),
         ("Running", "JobRunning", frozenset({"job-1", "observer-1"}))),
    Case("never created", "no observer before the Job's Object reports the Job: a "
         "brand-new observer would read 'does not exist' too",
         Gone("Created", _refused), ("Starting", "JobNotSynced", frozenset({"job-1"}))),
]  # fmt: skip


@table(GONE)
def test_a_job_is_gone_only_when_its_observer_says_so(
    sim: Sim, clock: Clock, case: Case[Gone, tuple[str, str, frozenset[str]]]
) -> None:
    sim.add(spec())
    sim.step()
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"  # job-1 composed; Created: not applied yet
    if case.inputs.at != "Created":
        if case.inputs.at == "Running":
            sim.set_job("active")
        clock.advance(10)
        assert sim.step()["phase"] == case.inputs.at
        assert set(sim.observed[BACKFILL]) == {"job-1", "observer-1"}
    case.inputs.event(sim, clock)
    for _ in range(2):  # the decision, then a fixed point (or the next step of Cancelling)
        clock.advance(10)
        st = sim.step()
        if st["phase"] == "Cancelling":
            break
    phase, reason, kept = case.want
    assert (st["phase"], st["reason"]) == (phase, reason), (case.reason, st)
    assert set(sim.observed[BACKFILL]) == kept, case.reason


def test_starting_reports_the_objects_sync_error(sim: Sim, clock: Clock) -> None:
    sim.add(spec())
    sim.step()
    clock.advance(600)
    sim.step()
    view = sim._observed_view(BACKFILL)
    (key,) = view
    view[key]["status"] = {
        "conditions": [
            {"type": "Synced", "status": "False", "reason": "ReconcileError",
             "message": 'jobs.batch is forbidden: User "system:serviceaccount" cannot create'}
        ]
    }  # fmt: skip
    rsp, _ = sim.fn.drive(sim.backfills[BACKFILL], sim.world(), view)
    st = status(rsp)
    assert (st["phase"], st["reason"]) == ("Starting", "JobNotSynced")
    assert "forbidden" in st["message"] and set(desired(rsp)) == {key}


# ---- outcomes -------------------------------------------------------------------------


def test_success_cools_down_then_repeats(
    sim: Sim, clock: Clock, registry: CollectorRegistry
) -> None:
    start(sim, clock, repeatAfter="1h")
    clock.advance(300)
    sim.set_job("complete")
    st = sim.step()
    done = clock.now
    assert (st["phase"], st["lastResult"]) == ("Succeeded", "Succeeded")
    assert st["completionTime"] == format_time(done)
    assert st["nextRunTime"] == format_time(done.replace(hour=done.hour + 1))
    assert sim.observed[BACKFILL] == {}  # the finished Job is dropped
    assert sim.last.meta.ttl.seconds == 3600  # called again when the cool-down ends
    clock.advance(1800)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Succeeded", "CoolingDown")
    assert sim.observed[BACKFILL] == {}  # never re-created
    assert sim.last.meta.ttl.seconds == 1800
    clock.advance(1800)
    st = sim.step()
    assert st["phase"] == "Starting" and st["attempts"] == 2
    assert "lastResult" not in st
    assert metric(registry, "completions_total", result="succeeded") == 1
    assert metric(registry, "starts_total") == 2
    assert metric(registry, "useful_running_seconds_total") == 300


def test_one_shot_success_stays_succeeded(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    clock.advance(60)
    sim.set_job("complete")
    assert sim.step()["phase"] == "Succeeded"
    for _ in range(3):
        clock.advance(86400)
        st = sim.step()
        assert (st["phase"], st["reason"]) == ("Succeeded", "JobSucceeded")
        assert sim.observed[BACKFILL] == {}
    assert st["attempts"] == 1


def test_failure_is_terminal_until_the_spec_changes(
    sim: Sim, clock: Clock, registry: CollectorRegistry
) -> None:
    start(sim, clock, repeatAfter="1h")
    clock.advance(60)
    sim.set_job("failed")
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Failed", "JobFailed")
    assert "BackoffLimitExceeded" in st["message"]
    assert xr_ready(sim.last) == "READY_FALSE"
    for _ in range(3):
        clock.advance(7200)
        st = sim.step()
        assert st["phase"] == "Failed" and "BackoffLimitExceeded" in st["message"]
        assert sim.observed[BACKFILL] == {}
    sim.backfills[BACKFILL]["spec"]["env"] = [{"name": "LIMIT", "value": "50"}]
    st = sim.step()
    assert st["phase"] == "Starting" and st["attempts"] == 2
    assert metric(registry, "completions_total", result="failed") == 1


def test_a_running_job_that_disappears_is_not_recreated(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    sim.observed[BACKFILL] = {}  # the Object vanished (deleted behind the function's back)
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle")
    assert "disappeared" in st["message"] and sim.observed[BACKFILL] == {}


def test_a_created_job_object_drops_create_from_its_policies(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    # Once provider-kubernetes created the Job, it must never create it again.
    # Nor update it (a Job's template is immutable), and a set provider-kubernetes
    # supports (review 19b: {Observe, Update, LateInitialize, Delete} is not one).
    assert sim.job()["spec"]["managementPolicies"] == ["Observe", "Delete"]


OLD_POLICIES = ["Observe", "Update", "LateInitialize", "Delete"]  # before session 19


def _held_edit(sim: Sim, clock: Clock) -> None:
    _i, path, value, _f = next(f for f in fixtures.POD_ACCESS_FAULTS if "ResourceClaim" not in f[0])
    sim.cronjobs = [_forbidden_cronjob(path, value)]
    sim.backfills[BACKFILL]["spec"]["env"] = [{"name": "LIMIT", "value": "50"}]
    clock.advance(10)


def _foreground(sim: Sim, clock: Clock) -> None:
    clock.advance(120)
    sim.foreground()
    clock.advance(5)


def _completes(sim: Sim, clock: Clock) -> None:
    sim.set_job("complete")
    clock.advance(30)


@pytest.mark.parametrize(
    ("event", "then"),
    [
        (None, ("Running",)),
        (_held_edit, ("Running",)),
        (_foreground, ("Cancelling", "WaitingForIdle")),
        (_completes, ("Succeeded", "WaitingForIdle", "Waiting")),
    ],
    ids=["running", "held-edit", "cancelled", "completed"],
)
def test_an_object_with_an_earlier_policy_set_is_rewritten_before_it_is_dropped(
    sim: Sim, clock: Clock, event: Any, then: tuple[str, ...]
) -> None:
    """Found by review 19c: a Job Object written before session 19 carries
    ``[Observe, Update, LateInitialize, Delete]``, which provider-kubernetes refuses, and
    refuses before it handles a deletion. Whatever the call decides (keep it as
    observed while an edit is held, cancel, record an outcome), the set is rewritten
    first, and the Object is dropped only with a set the provider deletes it under."""
    start(sim, clock)
    key = f"{JOB_PREFIX}1"
    sim.observed[BACKFILL][key]["spec"]["managementPolicies"] = list(OLD_POLICIES)
    if event is not None:
        event(sim, clock)
    for _ in range(4):
        before = {k: b["spec"].get("managementPolicies") for k, b in sim.observed[BACKFILL].items()}
        st = sim.step()
        for k, policies in before.items():
            if k not in sim.observed[BACKFILL]:  # dropped: Crossplane deletes it
                want = ["Observe"] if k.startswith(OBSERVER_PREFIX) else ["Observe", "Delete"]
                assert policies == want, (k, policies)
        for k, b in sim.observed[BACKFILL].items():
            want = ["Observe"] if k.startswith(OBSERVER_PREFIX) else ["Observe", "Delete"]
            assert b["spec"]["managementPolicies"] == want, (k, st)
        clock.advance(30)
    assert st["phase"] in then, st


@pytest.mark.parametrize("remote", [None, "refused"], ids=["not-created-yet", "create-refused"])
def test_an_object_with_the_crds_default_policies_keeps_create_until_its_job_exists(
    sim: Sim, clock: Clock, remote: str | None
) -> None:
    """Found by review 19e: the Job Object is composed without a set, so the API server
    stores the Object CRD's default ``['*']``; that set was rewritten to ``[Observe,
    Delete]`` as if it were an earlier version's before the Job existed, and
    provider-kubernetes then never created the Job (a slow provider, or a create
    refused by a quota, is enough)."""
    sim.add(spec())
    assert sim.step()["phase"] == "WaitingForIdle"
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"
    (key,) = sim.observed[BACKFILL]
    obj = sim.observed[BACKFILL][key]
    assert "managementPolicies" not in obj["spec"]  # composed without: the CRD default
    obj["spec"]["managementPolicies"] = ["*"]  # as the API server stores it
    sim.remote.pop(remote_name(obj), None)
    if remote is not None:  # Synced=False: the provider's create failed; it retries
        sim.remote[remote_name(obj)] = remote
    clock.advance(5)
    assert sim.step()["phase"] == "Starting"
    assert sim.observed[BACKFILL][key]["spec"].get("managementPolicies", ["*"]) == ["*"]


def test_starting_recreates_an_object_crossplane_has_not_created(sim: Sim, clock: Clock) -> None:
    sim.add(spec())
    sim.step()
    clock.advance(600)
    st = sim.step()
    first = copy.deepcopy(sim.job())
    sim.observed[BACKFILL] = {}  # the apply failed: nothing observed yet
    clock.advance(10)
    st2 = sim.step()
    assert st2["phase"] == "Starting" and st2["attempts"] == st["attempts"] == 1
    assert sim.job() == first


# ---- Blocked ---------------------------------------------------------------------------


def _gpu(key: str) -> dict[str, Any]:
    return {"limits": {key: "1"}}


@dataclass(frozen=True)
class Bad:
    """A spec (``spec(**extra)``) and, when not the default one, the CronJob it references."""

    extra: dict[str, Any]
    cronjob: dict[str, Any] | None = None


FORBIDDEN = "a backfill shares the serving process and never reserves a device"

BLOCKED: list[Case[Bad, str]] = [
    Case("template missing", "the CronJob of spec.templateRef must exist",
         Bad({"templateRef": {"name": "nope"}}), "TemplateNotFound"),
    Case("nvidia gpu", FORBIDDEN, Bad({}, eval_cronjob(resources=_gpu("nvidia.com/gpu"))),
         "GPURequestForbidden"),
    Case("amd gpu request", FORBIDDEN,
         Bad({}, eval_cronjob(resources={"requests": {"amd.com/gpu": "1"}})),
         "GPURequestForbidden"),
    Case("intel gpu", FORBIDDEN, Bad({}, eval_cronjob(resources=_gpu("gpu.intel.com/i915"))),
         "GPURequestForbidden"),
    Case("mig in init", f"{FORBIDDEN}, init containers included",
         Bad({}, eval_cronjob(init_resources=_gpu("nvidia.com/mig-1g.10gb"))),
         "GPURequestForbidden"),
    Case("DRA pod claim", f"{FORBIDDEN}: no DRA claim either",
         Bad({}, eval_cronjob(pod_extra={"resourceClaims": [
             {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]})),
         "GPURequestForbidden"),
    Case("DRA container claim", f"{FORBIDDEN}: no DRA claim either",
         Bad({}, eval_cronjob(resources={"claims": [{"name": "gpu"}]})), "GPURequestForbidden"),
]  # fmt: skip


@table(BLOCKED)
def test_blocked(sim: Sim, clock: Clock, case: Case[Bad, str]) -> None:
    reason = case.want
    if case.inputs.cronjob is not None:
        sim.cronjobs = [case.inputs.cronjob]
    # Not admitted by the XRD's CEL rules; the function still blocks it.
    sim.backfills[BACKFILL] = xr("ModelBackfill", BACKFILL, spec(**case.inputs.extra))
    sim.observed[BACKFILL] = {}
    clock.advance(3600)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Blocked", reason), (case.reason, st)
    assert sim.observed[BACKFILL] == {}
    cond = conditions(sim.last)["Backfilling"]
    assert cond["status"] == "False" and cond["reason"] == reason and cond["message"]
    assert xr_ready(sim.last) == "READY_FALSE"
    if reason == "GPURequestForbidden":
        assert "spec.jobTemplate.spec.template.spec" in st["message"]
    elif reason != "TemplateNotFound":
        assert "spec." in st["message"]
    # A blocked backfill stays blocked, with one event on entry only.
    clock.advance(60)
    st = sim.step()
    assert st["reason"] == reason and not list(sim.last.results)


# What a tenant's pod spec may not hold on the workload cluster's shared namespace
# (fixtures.POD_ACCESS_FAULTS), written in the CronJob: blocked, naming the CronJob's
# field, nothing composed; and the running Job kept when the CronJob turns so mid-run.
# (An existing ResourceClaim is a device request first: GPURequestForbidden, above.)
_ACCESS_FAULTS = [
    pytest.param(p, v, f, id=i)
    for i, p, v, f in fixtures.POD_ACCESS_FAULTS
    if "ResourceClaim" not in i
]


def _forbidden_cronjob(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    cj = eval_cronjob()
    fixtures.put_fault(cj["spec"]["jobTemplate"]["spec"]["template"], path, value)
    return cj


@pytest.mark.parametrize(("path", "value", "field"), _ACCESS_FAULTS)
def test_a_template_a_shared_namespace_forbids_is_blocked_naming_it(
    sim: Sim, clock: Clock, path: tuple[Any, ...], value: Any, field: str
) -> None:
    sim.cronjobs = [_forbidden_cronjob(path, value)]
    sim.add(spec())
    clock.advance(3600)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Blocked", "InvalidTemplate"), st
    assert f"spec.jobTemplate.spec.{field}" in st["message"], st["message"]
    assert sim.observed[BACKFILL] == {}


@pytest.mark.parametrize(("path", "value", "field"), _ACCESS_FAULTS)
def test_a_template_turned_forbidden_mid_run_keeps_the_job(
    sim: Sim, clock: Clock, path: tuple[Any, ...], value: Any, field: str
) -> None:
    start(sim, clock)
    before = copy.deepcopy(sim.observed[BACKFILL])
    sim.cronjobs = [_forbidden_cronjob(path, value)]
    clock.advance(10)
    # The CronJob alone edited: the running Job was built before; it runs on unchanged.
    assert sim.step()["phase"] == "Running"
    # The spec edited too (a new definition, which would start a new Job): the new one
    # cannot be built, the running one is kept, the reason names the field.
    sim.backfills[BACKFILL]["spec"]["env"] = [{"name": "LIMIT", "value": "50"}]
    clock.advance(10)
    st = sim.step()
    assert st["reason"] == "InvalidTemplate", st
    assert f"spec.jobTemplate.spec.{field}" in st["message"], st["message"]
    assert sim.observed[BACKFILL].keys() == before.keys()
    for k, obj in before.items():
        assert sim.observed[BACKFILL][k]["spec"] == obj["spec"], k


def test_a_template_turned_forbidden_before_the_job_is_created_cancels_the_attempt(
    sim: Sim, clock: Clock
) -> None:
    """Found by a trial: Starting, the Object not created yet, and the CronJob edited to
    something the shared namespace forbids: the Job was rebuilt from it and the
    SpecError came back as a fatal result blaming the backfill's spec, with no status.
    Now the attempt is cancelled and the backfill Blocked, naming the CronJob's field."""
    sim.add(spec())
    assert sim.step()["phase"] == "WaitingForIdle"
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"
    sim.observed[BACKFILL] = {}  # Crossplane has not created the Object yet
    sim.cronjobs[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["hostPID"] = True
    clock.advance(10)
    st = sim.step()
    assert not fatal(sim.last)
    assert (st["phase"], st["reason"]) == ("Blocked", "InvalidTemplate"), st
    assert "cannot create the Job" in st["message"], st["message"]
    assert "spec.jobTemplate.spec.template.spec.hostPID" in st["message"], st["message"]
    assert sim.observed[BACKFILL] == {}


def _edit_to_a_forbidden_template(sim: Sim) -> None:
    sim.cronjobs[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["hostPID"] = True
    sim.backfills[BACKFILL]["spec"]["env"] = [{"name": "SUITE", "value": "mmlu"}]


def _foreground(sim: Sim) -> None:
    sim.foreground()


def _suspend(sim: Sim) -> None:
    sim.backfills[BACKFILL]["spec"]["suspend"] = True


def _replicas_not_ready(sim: Sim) -> None:
    for r in sim.replicas:
        r["status"]["conditions"] = []


@pytest.mark.parametrize(
    "stop", [_foreground, _suspend, _replicas_not_ready], ids=["foreground", "suspend", "not ready"]
)
def test_a_held_edit_does_not_keep_a_job_that_must_stop(sim: Sim, clock: Clock, stop: Any) -> None:
    """Found by a trial: while an edit the template cannot run was held (the Job kept
    under the previous spec), foreground traffic, a suspension or replicas going not
    Ready no longer cancelled the Job: the changed spec masked every other reason."""
    start(sim, clock)
    _edit_to_a_forbidden_template(sim)
    clock.advance(30)
    assert sim.step()["reason"] == "InvalidTemplate"
    warnings = [r for r in sim.last.results if r.severity == fnv1.SEVERITY_WARNING]
    clock.advance(30)
    sim.step()
    assert warnings and not [r for r in sim.last.results if r.severity == fnv1.SEVERITY_WARNING]
    stop(sim)
    clock.advance(30)
    st = sim.step()
    assert st["phase"] == "Cancelling", st


def test_an_edit_to_a_forbidden_template_before_the_job_is_created_cancels_it(
    sim: Sim, clock: Clock
) -> None:
    """Found by a trial: Starting, the Object not created yet, the spec edited and the
    CronJob made unusable: held for hours, "Job ... keeps running" with no Job, the
    replica claimed. Nothing runs, so nothing is held: the backfill is Blocked."""
    sim.add(spec())
    sim.step()
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"
    sim.observed[BACKFILL] = {}  # not created yet
    _edit_to_a_forbidden_template(sim)
    clock.advance(60)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Blocked", "InvalidTemplate"), st
    assert "keeps running" not in st["message"] and sim.observed[BACKFILL] == {}


def test_blocked_by_the_template_recovers_when_it_is_fixed(sim: Sim, clock: Clock) -> None:
    sim.cronjobs = [eval_cronjob(resources=_gpu("nvidia.com/gpu"))]
    sim.add(spec())
    clock.advance(3600)
    assert sim.step()["reason"] == "GPURequestForbidden"
    sim.cronjobs = [eval_cronjob()]
    assert sim.step()["phase"] == "Starting"


# ---- one Job per replica ------------------------------------------------------------


def test_one_backfill_job_per_replica(sim: Sim, clock: Clock) -> None:
    sim.replicas = [replica(0, "gpu-a")]
    start(sim, clock, name="a-eval")
    sim.add(spec(), "b-eval")
    clock.advance(600)
    st = sim.step("b-eval")
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "ReplicaBusy")
    assert "a-eval" in st["message"] and sim.observed["b-eval"] == {}
    # A second Ready replica is free: b runs there.
    sim.replicas.append(replica(1, "gpu-b"))
    st = sim.step("b-eval")
    assert (st["phase"], st["replica"], st["cluster"]) == ("Starting", R1, "gpu-b")
    assert sim.job("b-eval")["spec"]["providerConfigRef"]["name"] == "gpu-b"


def test_a_finished_backfill_frees_its_replica(sim: Sim, clock: Clock) -> None:
    sim.replicas = [replica(0, "gpu-a")]
    start(sim, clock, name="a-eval")
    sim.add(spec(), "b-eval")
    clock.advance(600)
    assert sim.step("b-eval")["reason"] == "ReplicaBusy"
    sim.set_job("complete", "a-eval")
    assert sim.step("a-eval")["phase"] == "Succeeded"
    assert sim.step("b-eval")["phase"] == "Starting"


def test_two_backfills_that_started_at_once_resolve_to_one(sim: Sim, clock: Clock) -> None:
    sim.replicas = [replica(0, "gpu-a")]
    sim.add(spec(), "a-eval")
    sim.add(spec(), "b-eval")
    clock.advance(600)
    # Both reconciled before either status was written: both start on the same replica.
    assert sim.step("a-eval")["phase"] == "Starting"
    a_written = sim.backfills["a-eval"]
    sim.backfills["a-eval"] = xr("ModelBackfill", "a-eval", spec())  # a's status not seen yet
    assert sim.step("b-eval")["phase"] == "Starting"
    sim.backfills["a-eval"] = a_written
    clock.advance(10)
    # Same startedAt: the name breaks the tie, and b (the later) yields.
    st_b = sim.step("b-eval")
    assert (st_b["phase"], st_b["reason"]) == ("Cancelling", "ReplicaConflict")
    assert sim.observed["b-eval"] == {}
    st_a = sim.step("a-eval")
    assert st_a["phase"] == "Starting"


# ---- metrics ------------------------------------------------------------------------------


def test_metrics_count_each_transition_once(
    sim: Sim, clock: Clock, registry: CollectorRegistry
) -> None:
    start(sim, clock, repeatAfter="1h")
    for _ in range(3):  # steady state: many reconciles, one start
        clock.advance(30)
        assert sim.step()["phase"] == "Running"
    assert sim.calls >= 2
    assert metric(registry, "starts_total") == 1
    sim.foreground()
    clock.advance(15)
    assert sim.step()["phase"] == "Cancelling"
    for _ in range(2):
        clock.advance(30)
        sim.step()
    assert metric(registry, "preemptions_total", reason="foreground") == 1
    assert metric(registry, "useful_running_seconds_total") == 105
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"
    sim.set_job("active")
    clock.advance(10)
    sim.step()
    clock.advance(100)
    sim.set_job("complete")
    assert sim.step()["phase"] == "Succeeded"
    for _ in range(3):
        clock.advance(60)
        assert sim.step()["phase"] == "Succeeded"
    assert metric(registry, "starts_total") == 2
    assert metric(registry, "completions_total", result="succeeded") == 1
    assert metric(registry, "completions_total", result="failed") == 0
    assert metric(registry, "preemptions_total", reason="foreground") == 1
    assert metric(registry, "useful_running_seconds_total") == 205


def test_no_decision_while_requirements_are_unresolved(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    body = sim.backfills[BACKFILL]
    observed = sim._observed_view(BACKFILL)
    sim.foreground()  # would cancel, but the deployment is not resolved in this call
    rsp = run(build(body, observed=observed, required={}), now=clock)
    assert status(rsp)["phase"] == "Running"
    assert set(desired(rsp)) == {f"{JOB_PREFIX}1", "observer-1"}  # kept, not dropped
    assert set(requirements(rsp)) == {"deployment", "template", "replicas", "backfills"}


def test_same_input_same_bytes(sim: Sim, clock: Clock) -> None:
    start(sim, clock)
    req = build(
        sim.backfills[BACKFILL],
        observed=sim._observed_view(BACKFILL),
        required={n: sim.world().resolve(s) for n, s in sim.last.requirements.resources.items()},
    )
    a = run(req, now=clock).SerializeToString(deterministic=True)
    b = run(req, now=clock).SerializeToString(deterministic=True)
    assert a == b


# ---- a decision table, in-process and over gRPC -----------------------------------------------

T = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.UTC)


def _ago(minutes: float) -> str:
    return format_time(T - datetime.timedelta(minutes=minutes))


_RUNNING = {
    "phase": "Running", "reason": "JobRunning", "message": "m", "cluster": "gpu-a",
    "replica": R0, "job": "j", "startedAt": _ago(5), "runningSince": _ago(4), "attempts": 1,
    "specHash": definition_hash(parse(spec())),
}  # fmt: skip


@dataclass(frozen=True)
class Situation:
    """One call's world: the last written status (None: a new backfill), minutes since the
    deployment's last foreground request, and the remote Job's state (None: no Job)."""

    prior: dict[str, Any] | None
    foreground_minutes: float
    job: str | None = None


@dataclass(frozen=True)
class Decided:
    """What the call decides: the phase and reason in status, and the desired children."""

    phase: str
    reason: str
    desired: frozenset[str] = frozenset()


DECISIONS: list[Case[Situation, Decided]] = [
    Case(
        "fresh, idle long enough",
        "idle for the whole window (10m) with a free Ready replica: the Job starts",
        Situation(None, 30),
        Decided("Starting", "JobCreated", frozenset({"job-1"})),
    ),
    Case(
        "fresh, not idle",
        "a foreground request 3 minutes ago: the window has not elapsed",
        Situation(None, 3),
        Decided("WaitingForIdle", "NotIdle"),
    ),
    Case(
        "running, quiet",
        "no foreground request since the Job started: it keeps running",
        Situation(_RUNNING, 30, "active"),
        Decided("Running", "JobRunning", frozenset({"job-1", "observer-1"})),
    ),
    Case(
        "running, foreground",
        "a foreground request after the start preempts the Job (foreground always wins)",
        Situation(_RUNNING, 1, "active"),
        Decided("Cancelling", "PreemptedByForeground"),
    ),
    Case(
        "running, completed",
        "an outcome is recorded even when a foreground request arrived since",
        Situation(_RUNNING, 1, "complete"),
        Decided("Succeeded", "JobSucceeded"),
    ),
    Case(
        "running, failed",
        "a Failed Job ends the attempt; its Object is dropped",
        Situation(_RUNNING, 30, "failed"),
        Decided("Failed", "JobFailed"),
    ),
    Case(
        "cancelling, gone",
        "the cancelled Job's Object is gone: back to waiting for a full window",
        Situation({**_RUNNING, "phase": "Cancelling"}, 30),
        Decided("WaitingForIdle", "NotIdle"),
    ),
    Case(
        "failed stays",
        "a failed run is terminal until the spec changes",
        Situation({**_RUNNING, "phase": "Failed", "lastResult": "Failed"}, 300),
        Decided("Failed", "JobFailed"),
    ),
    Case(
        "succeeded one-shot stays",
        "repeatAfter 0: one run only",
        Situation({**_RUNNING, "phase": "Succeeded", "lastResult": "Succeeded"}, 300),
        Decided("Succeeded", "JobSucceeded"),
    ),
]


def _table_inputs(w: Situation):
    prior = w.prior
    body = xr("ModelBackfill", BACKFILL, spec(), status=dict(prior) if prior else None)
    rest = [replica(0, "gpu-a"), eval_cronjob(), fixtures.inference_cluster("gpu-a"), body]
    world = World([deployment(foreground=_ago(w.foreground_minutes)), *rest])
    observed = {}
    if w.job is not None:
        # The Object the function composed when it started this attempt, 5 minutes ago.
        then = World([deployment(foreground=_ago(60)), *rest])
        with GrpcFunction(clock=Clock(T - datetime.timedelta(minutes=5))) as fn:
            first, _ = fn.drive(xr("ModelBackfill", BACKFILL, spec()), then, None)
        obj = desired(first)["job-1"]
        manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
        manifest["status"] = job_status(w.job, T - datetime.timedelta(minutes=1))
        obj["status"] = {"atProvider": {"manifest": manifest}}
        observed["job-1"] = obj
    return body, world, observed


@table(DECISIONS)
def test_decision_table_in_process_and_over_grpc(case: Case[Situation, Decided]) -> None:
    body, world, observed = _table_inputs(case.inputs)

    def in_process(req):
        return run(req, now=T)

    rsp, _ = drive(in_process, body, observed, world)
    st = status(rsp)
    want = case.want
    assert (st["phase"], st["reason"]) == (want.phase, want.reason), (case.reason, st)
    assert set(desired(rsp)) == want.desired, case.reason
    with GrpcFunction(clock=Clock(T)) as fn:
        over_grpc, _ = fn.drive(body, world, observed)
    assert over_grpc.SerializeToString(deterministic=True) == rsp.SerializeToString(
        deterministic=True
    )


# ---- pure pieces -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "want"),
    [
        ("nvidia.com/gpu", True), ("nvidia.com/mig-3g.40gb", True), ("amd.com/gpu", True),
        ("gpu.intel.com/xe", True), ("habana.ai/gaudi", True), ("aws.amazon.com/neuroncore", True),
        ("google.com/tpu", True), ("example.com/gpu-shared", True), ("cpu", False),
        ("memory", False), ("ephemeral-storage", False), ("hugepages-2Mi", False),
        ("example.com/foo", False),
    ],
)  # fmt: skip
def test_is_accelerator(key: str, want: bool) -> None:
    assert is_accelerator(key) is want


def test_accelerator_uses_lists_every_place() -> None:
    cj = eval_cronjob(
        resources={"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "0"}},
        init_resources={"requests": {"amd.com/gpu": "1"}},
        pod_extra={"resourceClaims": [{"name": "x", "resourceClaimName": "y"}]},
    )
    base = "spec.jobTemplate.spec.template.spec"
    assert accelerator_uses(cj) == [
        f"{base}.initContainers[wait-for-endpoint].resources.requests[amd.com/gpu]",
        f"{base}.containers[eval].resources.limits[nvidia.com/gpu]",
        f"{base}.resourceClaims",
    ]
    assert accelerator_uses(eval_cronjob()) == []


def test_spec_parse_defaults_and_hash() -> None:
    p = parse(spec())
    assert not hasattr(p, "reason")
    assert (p.idle_for, p.max_run_seconds, p.repeat_after) == (600.0, 1800, 0.0)
    h = definition_hash(p)
    assert definition_hash(parse(spec(suspend=True))) == h
    assert definition_hash(parse({**spec(), "crossplane": {"resourceRefs": [1]}})) == h
    assert definition_hash(parse(spec(idleFor="600s"))) == h  # canonical: seconds
    assert definition_hash(parse(spec(env=[{"name": "A", "value": "1"}]))) != h
    with pytest.raises(SpecError) as err:
        parse({"templateRef": {"name": "x"}})
    assert err.value.field == "spec.modelRef"
    with pytest.raises(SpecError) as err:
        parse(spec(idleFor="soon"))
    assert err.value.field == "spec.idleFor"


# ---- XRD and example -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"env": [{"name": f"V{i}", "value": "x"} for i in range(33)]}, "at most 32"),
        ({"env": [{"name": "MODELPLANE_WORKLOAD_CLASS", "value": "x"}]}, "may not set"),
        ({"env": [{"name": "9LIVES", "value": "x"}]}, "letters, digits"),
        ({"repeatAfter": "30s"}, "at least 1m"),
        ({"idleFor": "0s"}, "longer than 0"),
    ],
)
def test_xrd_cel_rejects(extra: dict, fragment: str) -> None:
    errors = xr_cel_errors("ModelBackfill", spec(**extra))
    assert any(fragment in e for e in errors), errors


ENV_32 = [{"name": f"V{i}", "value": "x"} for i in range(32)]


@pytest.mark.parametrize(
    "extra", [{}, {"repeatAfter": "0"}, {"repeatAfter": "1m"}, {"env": ENV_32}]
)
def test_xrd_cel_admits(extra: dict) -> None:
    assert xr_cel_errors("ModelBackfill", spec(**extra)) == []


def test_example_renders_a_job() -> None:
    (bf,) = load_yaml([EXAMPLE / "xr.yaml"])
    validate_xr(bf)
    docs = load_yaml([EXAMPLE / "required"])
    for doc in docs:
        if doc.get("kind") == "CronJob":
            validate_k8s(doc)
            assert accelerator_uses(doc) == []
        if doc.get("kind") == "ModelBackfill":
            validate_xr(doc)
    world = World(docs)
    with GrpcFunction(clock=Clock(parse_time("2026-11-29T03:30:00Z"))) as fn:
        rsp, _ = fn.drive(bf, world, None)
        st = status(rsp)
        # Replica 0 runs another backfill (required/other-backfills.yaml): replica 1 it is.
        assert (st["phase"], st["cluster"]) == ("Starting", "gpu-us-west"), st
        (obj,) = desired(rsp).values()
        validate_object(obj)
        env = obj["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]["containers"][0]
        assert {"name": "SUITE", "value": "gsm8k"} in env["env"]

        (finishing,) = load_yaml([EXAMPLE / "xr-finishing.yaml"])
        validate_xr(finishing)
        observed = observed_by_name(load_yaml([EXAMPLE / "observed"]))
        assert set(observed) == {"job-1"}
        validate_object({k: v for k, v in observed["job-1"].items() if k != "status"})
        fn.clock.now = parse_time("2026-11-29T03:53:00Z")
        rsp, _ = fn.drive(finishing, world, observed)
    st = status(rsp)
    assert (st["phase"], st["completionTime"], st["nextRunTime"]) == (
        "Succeeded",
        "2026-11-29T03:52:41Z",
        "2026-11-29T09:52:41Z",
    )
    assert desired(rsp) == {}


def test_an_edit_that_cannot_run_never_cancels_the_running_job(sim: Sim, clock: Clock) -> None:
    """The spec changes while the template is unusable: the running attempt is kept (bad
    input loses nothing), the problem is named, and the edit takes effect once it can."""
    st = start(sim, clock)
    job_keys = set(sim.observed[BACKFILL])
    assert job_keys
    template = sim.cronjobs[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    containers = template.pop("containers")
    sim.backfills[BACKFILL]["spec"] = {**spec(), "env": [{"name": "SUITE", "value": "mmlu"}]}
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Running", "InvalidTemplate"), st
    assert "keeps running under the previous spec" in st["message"]
    assert set(sim.observed[BACKFILL]) == job_keys
    template["containers"] = containers
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "SpecChanged"), st


HELD = "keeps running under the previous spec"
EDIT_ENV = {"env": [{"name": "SUITE", "value": "mmlu"}]}

HELD_WHILE_STARTING: list[Case[Bad, str]] = [
    Case("template typo", "review 17n: spec.templateRef names no CronJob",
         Bad({"templateRef": {"name": "chat-evl"}}), "TemplateNotFound"),
    Case("template forbidden", "the spec edited while the CronJob reaches the host",
         Bad(EDIT_ENV, _forbidden_cronjob(("hostPID",), True)), "InvalidTemplate"),
    Case("template asks for a gpu", "the spec edited while the CronJob asks for a GPU",
         Bad(EDIT_ENV, eval_cronjob(resources=_gpu("nvidia.com/gpu"))), "GPURequestForbidden"),
]  # fmt: skip


@table(HELD_WHILE_STARTING)
def test_an_edit_held_behind_a_starting_attempt_still_follows_the_job(
    sim: Sim, clock: Clock, case: Case[Bad, str]
) -> None:
    """Found by review 17n: an edit held behind a Starting attempt froze the phase at
    Starting (no runningSince) while the Job had active pods, and fixing the edit set
    runningSince to that later moment. The held attempt still goes Starting -> Running
    from the observed Job; only the reason and message say the edit is held."""
    reason = case.want
    sim.add(spec())
    sim.step()
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"
    # The Job's Object, and its observer once the Object reported the Job.
    job_keys = {*sim.observed[BACKFILL], "observer-1"}
    sim.backfills[BACKFILL]["spec"] = spec(**case.inputs.extra)
    if case.inputs.cronjob is not None:
        sim.cronjobs = [case.inputs.cronjob]
    clock.advance(10)
    st = sim.step()  # no pod active yet: still Starting, held
    assert (st["phase"], st["reason"]) == ("Starting", reason), st
    assert HELD in st["message"] and "runningSince" not in st, st
    sim.set_job("active")
    clock.advance(10)
    began = format_time(clock.now)
    st = sim.step()
    assert (st["phase"], st["reason"], st.get("runningSince")) == ("Running", reason, began), st
    assert HELD in st["message"] and set(sim.observed[BACKFILL]) == job_keys, st
    assert conditions(sim.last)["Backfilling"]["status"] == "True"
    # A fixed point: the same world gives the same status (no clock-derived field).
    clock.advance(60)
    assert sim.step() == st
    # The edit undone: the attempt runs on, running since it began running.
    sim.backfills[BACKFILL]["spec"] = spec()
    sim.cronjobs = [eval_cronjob()]
    clock.advance(60)
    st = sim.step()
    assert (st["phase"], st["reason"], st["runningSince"]) == ("Running", "JobRunning", began), st


def test_a_request_in_the_second_the_attempt_started_cancels_it(sim: Sim, clock: Clock) -> None:
    """Found by a review: the Job was admitted at 09:10:00.7 and a request at 09:10:00.9
    stamped 09:10:00Z (producers write whole seconds) never cancelled it: the check was
    ``foreground > startedAt``, both whole seconds."""
    st = start(sim, clock)
    sim.foreground(at=parse_time(st["startedAt"]))
    clock.advance(5)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "PreemptedByForeground"), st


def test_a_foreground_time_at_the_end_of_dates_is_never_idle(sim: Sim, clock: Clock) -> None:
    """Found by a review: ``9999-12-31T23:59:59Z`` ("later is safe") cancelled the Job,
    then every call failed with OverflowError (an internal error)."""
    start(sim, clock)
    sim.foreground(raw="9999-12-31T23:59:59Z")
    for _ in range(3):
        clock.advance(30)
        st = sim.step()
        assert not fatal(sim.last), fatal(sim.last)
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle"), st
    assert "never" in st["message"]


def test_a_job_the_cluster_never_creates_does_not_hold_the_replica(sim: Sim, clock: Clock) -> None:
    """Found by a review: a Job refused by a quota left the attempt Starting for ever,
    its replica claimed (other backfills ReplicaBusy). Past maxRunDuration it is
    cancelled, JobNotStarted, naming what the cluster said."""
    sim.add(spec(maxRunDuration="30m"))
    sim.step()
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"
    sim.set_job("refused")
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Starting", "JobNotSynced"), st
    clock.advance(3600)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "JobNotStarted"), st
    assert "did not start within maxRunDuration" in st["message"]
    assert "exceeded quota" in st["message"]


def test_an_edit_does_not_hold_a_job_that_was_never_created(sim: Sim, clock: Clock) -> None:
    """Found by a review: an edit whose template is unusable, while the cluster refused
    the Job, said "keeps running under the previous spec" for hours: no Job existed."""
    sim.add(spec())
    sim.step()
    clock.advance(600)
    assert sim.step()["phase"] == "Starting"
    sim.set_job("refused")
    clock.advance(30)
    sim.step()
    sim.backfills[BACKFILL]["spec"]["templateRef"]["name"] = "missing"
    clock.advance(30)
    st = sim.step()
    assert (st["phase"], st["reason"]) == ("Cancelling", "SpecChanged"), st
    assert "keeps running under the previous spec" not in st["message"], st
