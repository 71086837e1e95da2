"""ModelReplica, ModelExperiment, ModelBackfill and InferenceCluster lifecycles, each
reconciled step by step through Crossplane's own engine.

Every step renders the XR with ``crossplane render --crossplane-binary``, then feeds
what Crossplane would apply back as the next observed state, with the status its owner
would write (:mod:`tests.support.world`): provider-kubernetes for an ``Object``
(``Synced``/``Ready`` and ``status.atProvider.manifest`` with the remote status), the
API server for a ``ClusterProviderConfig``, Crossplane and the child's composer for a
composed XR. Each step asserts Crossplane's own ``Ready``/``Synced`` of the XR, the
composed resources by composition-resource name, the results, and which observed
resources Crossplane would delete.

The worlds are the bundled examples' (``examples/modelreplica``,
``examples/modelexperiment``, ``examples/modelbackfill``) and the kind fleet's
bring-your-own cluster (``tests/modelplane_examples/kind-local-cpu.yaml``).
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from function.core.timeutil import format_time
from function.naming import CLAIM_HASH_LEN
from function.render import load_yaml
from tests.e2e.lifecycle import XR, Replica
from tests.support import world
from tests.support.crossplane import ROOT
from tests.support.engine import Rendered
from tests.support.modelplane_examples_paths import KIND_LOCAL_CPU

EXAMPLES = ROOT / "examples"


def synced(out: Rendered) -> bool:
    c = out.condition("Synced")
    return c is not None and c.get("status") == "True"


def cond(out: Rendered, typ: str) -> tuple[str, str]:
    c = out.condition(typ) or {}
    return c.get("status", ""), c.get("reason", "")


def warnings(out: Rendered) -> list[dict[str, Any]]:
    return [r for r in out.results if r.get("severity") == "Warning"]


def events(out: Rendered) -> list[tuple[str, str]]:
    """The function's results as (severity, reason), without Crossplane's own."""
    return [
        (r["severity"], r.get("reason", ""))
        for r in out.results
        if r.get("reason") not in ("SelectComposition", "ComposeResources")
    ]


def unready(out: Rendered) -> set[str]:
    """Composed resources Crossplane reports as not yet ready (its ComposeResources
    events): each costs an event and a requeue on every reconcile."""
    prefix = 'Composed resource "'
    return {
        r["message"][len(prefix) :].split('"', 1)[0]
        for r in out.results
        if r.get("reason") == "ComposeResources" and r.get("message", "").startswith(prefix)
    }


def manifest(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["forProvider"]["manifest"]


def job_env(job: dict[str, Any]) -> dict[str, Any]:
    """The env of a Job manifest's first regular container, by name."""
    c = job["spec"]["template"]["spec"]["containers"][0]
    return {v["name"]: v.get("value") for v in c.get("env") or []}


# ---- 1. ModelReplica: gated on its cache's hydration, then serving ------------------

REPLICA = EXAMPLES / "modelreplica"
WORKLOAD_SINGLE = {"workload-vllm", "claim-vllm-standalone", "service"}
"""The single-node example's children, its claim template's key without the digest of
its requests (:func:`keys`)."""


def keys(composed: Any) -> set[str]:
    """The composition-resource names of ``composed``, a claim template's without the
    digest of what it asks for (``claim-<engine>-<role>-<digest>`` -> ``claim-<engine>-<role>``;
    the digest is pinned by tests/test_replica.py)."""
    out = set()
    for k in composed:
        head, _, last = k.rpartition("-")
        digest = len(last) == CLAIM_HASH_LEN and all(c in "0123456789abcdef" for c in last)
        out.add(head if k.startswith("claim-") and digest else k)
    return out


def key(composed: Any, short: str) -> str:
    """The full name in ``composed`` of the key :func:`keys` shortens to ``short``."""
    (found,) = [k for k in composed if k == short or k.rpartition("-")[0] == short]
    return found


def replica_world() -> list[dict[str, Any]]:
    return load_yaml([str(REPLICA / "required")])


def set_hydration(
    required: list[dict[str, Any]], replica: dict[str, Any], phase: str, message: str
) -> None:
    """The hydration the replica requires (its cache on its cluster, in the example's
    world) as its own reconcile reports it: phase and message (and readyAt). Only the
    fields that change; the rest (the source it hydrated) is the example's."""
    cache, cluster = replica["spec"]["modelCacheRef"]["name"], replica["spec"]["clusterName"]
    for d in required:
        if (
            d["kind"] == "ModelCacheHydration"
            and d["spec"]["cacheName"] == cache
            and d["spec"]["clusterName"] == cluster
        ):
            d["status"].update(phase=phase, message=message)
            if phase == "Ready":
                d["status"]["readyAt"] = world.NOW
            return
    raise AssertionError(f"no hydration of {cache} on {cluster}")


@pytest.mark.parametrize(
    "xr_file, workload",
    [
        ("xr-single-node-hydrating.yaml", WORKLOAD_SINGLE),
        ("xr-multi-node-hydrating.yaml", None),
    ],
    ids=["single-node", "multi-node"],
)
def test_replica_gated_then_serving_then_hydration_fails(render, xr_file, workload):
    (xr,) = load_yaml([str(REPLICA / xr_file)])
    required = replica_world()
    r = Replica(render, xr, required)

    # Gated: the cache is still hydrating on gpu-us-west-2b. Nothing is composed and
    # Crossplane does not mark the XR Ready.
    out = r.reconcile()
    assert out.composed == {}
    assert cond(out, "ModelReady") == ("False", "Hydrating")
    assert r.status["phase"] == "Hydrating"
    assert r.status["hydration"]["phase"] == "Hydrating"
    assert not out.is_ready() and synced(out)
    assert events(out) == []  # waiting for a cache is normal: no warning
    # Steady while it hydrates: same answer, still nothing composed.
    out = r.reconcile()
    assert out.composed == {} and not out.is_ready()

    # The hydration becomes Ready: the workload is composed, not yet applied.
    set_hydration(required, xr, "Ready", "weights are on the cache PVC")
    out = r.reconcile()
    names = set(out.composed)
    if workload is not None:
        assert keys(names) == workload
    else:
        assert "service" in names and any(n.startswith("workload-") for n in names)
        kinds = {manifest(d)["kind"] for n, d in out.composed.items() if n.startswith("workload-")}
        assert kinds == {"LeaderWorkerSet"}
    for d in out.composed.values():
        assert d["spec"]["providerConfigRef"]["name"] == "gpu-us-west-2b"
    assert cond(out, "ModelReady") == ("False", "Starting")
    assert "not created yet" in r.status["message"]
    assert "hydrationReadyAt" in r.status
    assert not out.is_ready()
    assert unready(out) == names  # nothing applied yet

    # Applied, pods not yet available: still Starting, nothing deleted.
    r.world(serving=False)
    out = r.reconcile()
    assert set(out.composed) == names
    assert cond(out, "ModelReady") == ("False", "Starting")
    assert not out.is_ready()
    assert unready(out) == {n for n in names if n.startswith("workload-")}
    assert out.deleted(r.observed.values()) == set()

    # Available: serving, and Crossplane marks the XR Ready.
    r.world(serving=True)
    out = r.reconcile()
    assert cond(out, "ModelReady") == ("True", "Serving")
    assert r.status["phase"] == "Serving"
    assert r.status["endpoint"].startswith("http://")
    assert "servingSince" in r.status
    assert out.is_ready() and synced(out), out.stdout
    assert out.deleted(r.observed.values()) == set()
    assert events(out) == [] and unready(out) == set()
    # Steady.
    r.world(serving=True)
    again = r.reconcile()
    assert again.is_ready() and set(again.composed) == names
    serving_since = r.status["servingSince"]

    # The hydration fails (a re-hydration went wrong): the replica reports it and is not
    # Ready, but keeps the running workload exactly as it was; nothing is deleted.
    set_hydration(required, xr, "Failed", "Job DeadlineExceeded: Job was active too long")
    out = r.reconcile()
    assert cond(out, "ModelReady") == ("False", "HydrationFailed")
    assert "gpu-us-west-2b" in out.condition("ModelReady")["message"]
    assert "existing workload is kept" in out.condition("ModelReady")["message"]
    assert not out.is_ready()
    assert out.deleted(r.observed.values()) == set()
    for n in names:
        assert out.composed[n]["spec"] == again.composed[n]["spec"], n
    assert events(out) == [("Warning", "HydrationFailed")]
    assert unready(out) == set()  # the kept workload still serves
    assert r.status["servingSince"] == serving_since


def test_replica_hydration_fails_before_anything_composed(render):
    (xr,) = load_yaml([str(REPLICA / "xr-single-node-hydrating.yaml")])
    required = replica_world()
    r = Replica(render, xr, required)
    assert r.reconcile().composed == {}
    set_hydration(required, xr, "Failed", "Job BackoffLimitExceeded")
    out = r.reconcile()
    assert out.composed == {}
    assert cond(out, "ModelReady") == ("False", "HydrationFailed")
    assert r.status["phase"] == "Failed"
    assert not out.is_ready() and synced(out)
    assert events(out) == [("Warning", "HydrationFailed")]


def _single_serving(render) -> tuple[Replica, dict[str, Any]]:
    """The single-node replica example, its hydration Ready, settled serving: the
    replica and the spec of each composed resource."""
    (xr,) = load_yaml([str(REPLICA / "xr-single-node-hydrating.yaml")])
    required = replica_world()
    set_hydration(required, xr, "Ready", "weights are on the cache PVC")
    r = Replica(render, xr, required)
    out = r.settle(serving=True)
    assert cond(out, "ModelReady") == ("True", "Serving") and keys(out.composed) == WORKLOAD_SINGLE
    return r, {n: copy.deepcopy(d["spec"]) for n, d in out.composed.items()}


def test_replica_engine_renamed_serves_throughout(render):
    """Review 17n C: renaming ``engines[0].name`` (the ModelDeployment copies it into
    every replica) names a new workload; the old one, serving, was deleted in the same
    reconcile. Now it is kept, exactly, until the new one serves, then Crossplane deletes
    it and its claim template."""
    r, before = _single_serving(render)

    r.xr["spec"]["engines"][0]["name"] = "vllm2"
    olds = {"workload-vllm", key(before, "claim-vllm-standalone")}
    out = r.reconcile()
    news = {"workload-vllm2", key(out.composed, "claim-vllm2-standalone")}
    assert set(out.composed) == olds | news | {"service"}
    assert out.deleted(r.observed.values()) == set()
    for n in olds:
        assert out.composed[n]["spec"] == before[n], n
    status, reason = cond(out, "ModelReady")
    assert (status, reason) == ("False", "Starting")
    assert "engine vllm (no longer in spec.engines) is kept" in r.status["message"]
    assert r.status["engines"][0]["available"] is True  # the old pods answer
    assert synced(out) and not out.is_ready()

    # Applied, the new pods not available yet: the same answer, nothing deleted.
    r.world(starting={"workload-vllm2"})
    out = r.reconcile()
    assert set(out.composed) == olds | news | {"service"}
    assert out.deleted(r.observed.values()) == set()
    again = r.reconcile()
    assert again.xr["status"] == out.xr["status"]

    # The new workload serves: the old one and its claim template go.
    r.world(serving=True)
    out = r.reconcile()
    assert cond(out, "ModelReady") == ("True", "Serving")
    assert out.deleted(r.observed.values()) == olds
    assert set(out.composed) == news | {"service"} and out.is_ready()


def test_replica_engine_renamed_back_while_its_old_workload_is_deleted(render):
    """Review 17g F1: vllm -> vllm2 (serves; workload-vllm goes, its Object still being
    deleted: provider-kubernetes' finalizer) -> vllm again. The deleting Object's stale
    status read as serving and, observed, counted as created: workload-vllm2, the only
    workload that serves, was deleted in that reconcile. Now vllm2 is kept until a live
    vllm workload serves."""
    (xr,) = load_yaml([str(REPLICA / "xr-single-node-hydrating.yaml")])
    required = replica_world()
    set_hydration(required, xr, "Ready", "weights are on the cache PVC")
    r = Replica(render, xr, required)
    r.settle(serving=True)
    r.xr["spec"]["engines"][0]["name"] = "vllm2"
    r.reconcile()
    r.world(serving=True)
    old_claim = key(r.observed, "claim-vllm-standalone")
    gone = {n: copy.deepcopy(r.observed[n]) for n in ("workload-vllm", old_claim)}
    out = r.reconcile()
    assert cond(out, "ModelReady") == ("True", "Serving") and not set(gone) & set(out.composed)
    r.world(serving=True)
    for n, obj in gone.items():  # Crossplane deletes them; their finalizers hold them
        obj["metadata"]["deletionTimestamp"] = "2026-01-05T10:00:00Z"
        r.observed[n] = obj

    r.xr["spec"]["engines"][0]["name"] = "vllm"  # renamed back
    kept = {"workload-vllm2", key(r.observed, "claim-vllm2-standalone")}
    out = r.reconcile()
    assert out.deleted(r.observed.values()) == set()
    assert kept <= set(out.composed)
    assert cond(out, "ModelReady") == ("False", "Starting")
    [engine] = r.status["engines"]
    assert "being deleted" in engine["message"] and engine["available"] is True, engine
    assert "engine vllm2 (no longer in spec.engines) is kept and answers" in r.status["message"]
    again = r.reconcile()
    assert again.xr["status"] == out.xr["status"]

    # The deletion finishes: vllm is created again, vllm2 still kept.
    for n in gone:
        del r.observed[n]
    out = r.reconcile()
    assert kept | set(gone) <= set(out.composed)
    assert out.deleted(r.observed.values()) == set()
    r.world(starting={"workload-vllm"})
    assert r.reconcile().deleted(r.observed.values()) == set()

    # The live vllm workload serves: vllm2 goes.
    r.world(serving=True)
    out = r.reconcile()
    assert cond(out, "ModelReady") == ("True", "Serving")
    assert out.deleted(r.observed.values()) == kept


def test_replica_engine_members_changing_role_keep_the_old_workload(render):
    """An engine's members changed from one Standalone member to a Leader and a Worker
    under the same name: provider-kubernetes would create the LeaderWorkerSet and leave
    the Deployment running, unmanaged. Through Crossplane's engine: the Deployment is kept
    exactly, nothing is deleted or added, ``WorkloadKindChanged`` says to rename; renamed
    in the next edit, the LeaderWorkerSet is composed beside it and the Deployment goes
    once it serves."""
    (multi,) = load_yaml([str(REPLICA / "xr-multi-node-hydrating.yaml")])
    r, before = _single_serving(render)

    gang = copy.deepcopy(multi["spec"]["engines"][0])
    r.xr["spec"]["engines"][0] = gang | {"name": "vllm"}
    out = r.reconcile()
    assert keys(out.composed) == WORKLOAD_SINGLE and out.deleted(r.observed.values()) == set()
    for n, spec in before.items():
        assert out.composed[n]["spec"] == spec, n
    assert cond(out, "ModelReady") == ("False", "WorkloadKindChanged")
    assert "rename the engine" in out.condition("ModelReady")["message"]
    assert events(out) == [("Warning", "WorkloadKindChanged")]
    [engine] = r.status["engines"]
    assert (engine["kind"], engine["available"], engine["ready"]) == ("Deployment", True, False)
    assert synced(out) and not out.is_ready()
    again = r.reconcile()
    assert again.xr["status"] == out.xr["status"] and events(again) == []

    # Renamed: the rename's make-before-break composes the LeaderWorkerSet beside it.
    r.xr["spec"]["engines"][0]["name"] = "kimi"
    out = r.reconcile()
    news = {"workload-kimi", "claim-kimi-leader", "claim-kimi-worker"}
    assert keys(out.composed) == WORKLOAD_SINGLE | news
    assert out.composed["workload-kimi"]["spec"]["forProvider"]["manifest"]["kind"] == (
        "LeaderWorkerSet"
    )
    assert out.deleted(r.observed.values()) == set()
    r.world(serving=True)
    out = r.reconcile()
    assert cond(out, "ModelReady") == ("True", "Serving")
    assert keys(out.deleted(r.observed.values())) == {"workload-vllm", "claim-vllm-standalone"}


# ---- 2. ModelExperiment: to a pass and to a fail verdict -----------------------------

EXPERIMENT = EXAMPLES / "modelexperiment"


class Experiment:
    """The experiment; its candidate ModelDeployment and gauntlet Job as observed."""

    def __init__(self, render):
        (xr,) = load_yaml([str(EXPERIMENT / "xr.yaml")])
        self.world = load_yaml([str(EXPERIMENT / "required")])
        self.replicas = [d for d in self.world if d["kind"] == "ModelReplica"]
        # No replica of the candidate exists until the candidate is placed.
        self.exp = XR(render, xr, [d for d in self.world if d["kind"] != "ModelReplica"])

    def candidate(self, *, ready: bool, key: str = "candidate-r1") -> None:
        """The candidate ModelDeployment applied (composition-resource name ``key``), with
        its replica serving when ``ready``."""
        doc = self.exp.last.composed[key]
        status = world.deployment_xr_status(ready=1 if ready else 0)
        self.exp.observed[key] = world.observed_xr(doc, {"status": status})
        if ready:
            self.exp.required = self.world

    def job(self, remote: dict[str, Any] | None, *, finished: bool = False) -> None:
        """The gauntlet Job applied; the Object's readiness is its ``Complete``/``Failed``
        CEL (``function.manifests.jobs.JOB_FINISHED_CEL``)."""
        doc = self.exp.last.composed["gauntlet-r1"]
        self.exp.observed["gauntlet-r1"] = self.exp.applied(
            "gauntlet-r1", doc, self.exp.observed, remote=remote, ready=finished
        )

    def started(self) -> str:
        """When the function composed the gauntlet Job (its wall clock): the Job finishes
        then, before the deadline, and the next run (repeatAfter) is in the future."""
        return str(self.exp.status["gauntlet"]["startedAt"])

    def drop_deleted(self) -> None:
        """Crossplane deletes what the last render did not compose."""
        for n in self.exp.last.deleted(self.exp.observed.values()):
            del self.exp.observed[n]


def experiment_to_evaluating(e: Experiment) -> None:
    out = e.exp.reconcile()
    assert set(out.composed) == {"candidate-r1"}
    assert e.exp.status["phase"] == "Deploying"
    assert cond(out, "ArtifactGate") == ("True", "ArtifactGateOpen")
    assert cond(out, "Runnable") == ("True", "Admitted")
    assert cond(out, "Verdict") == ("Unknown", "Deploying")
    assert not out.is_ready() and synced(out)
    assert events(out) == [("Normal", "Deploying")]
    cand = out.composed["candidate-r1"]
    assert cand["kind"] == "ModelDeployment" and cand["spec"]["replicas"] == 1

    e.candidate(ready=False)
    out = e.exp.reconcile()
    assert set(out.composed) == {"candidate-r1"}
    assert e.exp.status["phase"] == "Deploying"
    assert not out.is_ready()
    assert out.deleted(e.exp.observed.values()) == set()

    e.candidate(ready=True)
    out = e.exp.reconcile()
    assert set(out.composed) == {"candidate-r1", "gauntlet-r1"}, e.exp.status.get("message")
    assert e.exp.status["phase"] == "Evaluating"
    assert cond(out, "Verdict") == ("Unknown", "Evaluating")
    assert events(out) == [("Normal", "Evaluating")]
    job = manifest(out.composed["gauntlet-r1"])
    assert job["kind"] == "Job"
    env = job_env(job)
    # The candidate is evaluated under the name it serves (its served-model-name).
    served = {
        v["name"]: v.get("value")
        for c in out.composed["candidate-r1"]["spec"]["template"]["spec"]["engines"][0]["members"][
            0
        ]["template"]["spec"]["containers"]
        for v in c.get("env") or []
    }["MODELPLANE_SERVED_MODEL_NAME"]
    assert env["MODELS"] == f"{served}=vllm"
    assert env["MODELPLANE_ENDPOINT"] == e.replicas[0]["status"]["endpoint"]
    assert out.composed["gauntlet-r1"]["spec"]["providerConfigRef"]["name"] == "gpu-us-east"
    assert not out.is_ready()

    e.job(world.job_running())
    out = e.exp.reconcile()
    assert e.exp.status["phase"] == "Evaluating"
    assert not out.is_ready(), "Ready while the gauntlet runs"
    assert out.deleted(e.exp.observed.values()) == set()


def test_experiment_to_a_pass_verdict(render):
    e = Experiment(render)
    experiment_to_evaluating(e)

    e.job(world.job_complete(e.started()), finished=True)
    out = e.exp.reconcile()
    assert cond(out, "Verdict") == ("True", "GauntletPassed")
    assert e.exp.status["phase"] == "Succeeded"
    assert e.exp.status["verdict"]["pass"] is True
    # repeatAfter 24h: the next run is scheduled, the experiment cools down.
    assert cond(out, "Runnable") == ("True", "CoolingDown")
    assert e.exp.status["nextRunAt"]
    assert out.is_ready() and synced(out), "a passed experiment is Ready"
    assert events(out) == [("Normal", "GauntletPassed")]
    assert unready(out) == set()  # the finished Job reports Ready (its CEL)
    # The candidate is released (Crossplane deletes it); the Job stays as evidence,
    # observed and deleted only, never re-created.
    assert out.deleted(e.exp.observed.values()) == {"candidate-r1"}
    assert out.composed["gauntlet-r1"]["spec"]["managementPolicies"] == ["Observe", "Delete"]

    e.drop_deleted()
    again = e.exp.reconcile()
    assert set(again.composed) == {"gauntlet-r1"}
    assert again.is_ready()
    assert cond(again, "Verdict") == ("True", "GauntletPassed")
    assert again.deleted(e.exp.observed.values()) == set()


def test_experiment_to_a_fail_verdict(render):
    e = Experiment(render)
    experiment_to_evaluating(e)

    e.job(world.job_failed("BackoffLimitExceeded", at=e.started()), finished=True)
    out = e.exp.reconcile()
    assert cond(out, "Verdict") == ("False", "GauntletFailed")
    assert "BackoffLimitExceeded" in out.condition("Verdict")["message"]
    assert e.exp.status["phase"] == "Failed"
    assert e.exp.status["verdict"]["pass"] is False
    assert cond(out, "Runnable") == ("False", "Finished")
    assert not out.is_ready(), "a failed experiment is not Ready"
    assert synced(out)
    assert events(out) == [("Warning", "GauntletFailed")]
    assert unready(out) == set()
    assert out.deleted(e.exp.observed.values()) == {"candidate-r1"}
    assert out.composed["gauntlet-r1"]["spec"]["managementPolicies"] == ["Observe", "Delete"]

    # Terminal: later reconciles keep the evidence and start nothing.
    e.drop_deleted()
    again = e.exp.reconcile()
    assert set(again.composed) == {"gauntlet-r1"}
    assert not again.is_ready()
    assert e.exp.status["phase"] == "Failed"
    assert again.deleted(e.exp.observed.values()) == set()


def shift_clock(e: Experiment, minutes: int) -> None:
    """Simulate ``minutes`` passing: the function's clock is the wall clock, so move the
    run's recorded admission and deadline back instead (status is its only memory)."""
    cand = e.exp.xr["status"]["candidate"]
    for k in ("createdAt", "deadline"):
        t = datetime.datetime.fromisoformat(cand[k]) - datetime.timedelta(minutes=minutes)
        cand[k] = format_time(t)


def test_experiment_times_out_while_deploying(render):
    e = Experiment(render)
    e.exp.reconcile()
    e.candidate(ready=False)
    e.exp.reconcile()
    shift_clock(e, 46)  # timeout: 45m
    out = e.exp.reconcile()
    assert cond(out, "Verdict") == ("False", "TimedOut")
    assert "never became Ready" in out.condition("Verdict")["message"]
    assert e.exp.status["phase"] == "Failed"
    assert not out.is_ready() and synced(out)
    # The candidate is released; there is no Job to keep.
    assert out.composed == {}
    assert out.deleted(e.exp.observed.values()) == {"candidate-r1"}
    assert events(out) == [("Warning", "TimedOut")]


def test_experiment_times_out_while_evaluating(render):
    e = Experiment(render)
    experiment_to_evaluating(e)
    shift_clock(e, 46)
    out = e.exp.reconcile()
    assert cond(out, "Verdict") == ("False", "TimedOut")
    assert "gauntlet did not finish" in out.condition("Verdict")["message"]
    assert not out.is_ready()
    assert out.deleted(e.exp.observed.values()) == {"candidate-r1"}
    # The running Job stays as evidence (never re-created); its activeDeadlineSeconds,
    # capped at the run's deadline, ends it, and then it reports Ready.
    assert set(out.composed) == {"gauntlet-r1"}
    assert out.composed["gauntlet-r1"]["spec"]["managementPolicies"] == ["Observe", "Delete"]
    e.drop_deleted()
    e.job(world.job_failed("DeadlineExceeded", at=e.started()), finished=True)
    out = e.exp.reconcile()
    assert cond(out, "Verdict") == ("False", "TimedOut")  # the verdict stands
    assert set(out.composed) == {"gauntlet-r1"} and unready(out) == set()
    assert not out.is_ready()


def test_experiment_spec_change_mid_evaluation_starts_a_new_run(render):
    # Through the real engine the status Crossplane writes is the function's desired
    # status (server-side apply): run 1's gauntlet and "seen" candidate do not linger
    # into run 2 (with the CLI's merged -x status they did, and run 2 read "candidate
    # lost" one reconcile later).
    e = Experiment(render)
    experiment_to_evaluating(e)
    run1 = e.exp.status["run"]
    e.exp.xr["spec"]["gauntlet"]["env"][0]["value"] = "gsm8k"
    e.exp.xr["metadata"]["generation"] = 2
    out = e.exp.reconcile()
    assert set(out.composed) == {"candidate-r2"}
    assert out.deleted(e.exp.observed.values()) == {"candidate-r1", "gauntlet-r1"}
    assert e.exp.status["runNumber"] == 2
    assert e.exp.status["run"] != run1 and "r2" in e.exp.status["run"]
    assert "gauntlet" not in e.exp.status and "verdict" not in e.exp.status
    assert events(out) == [("Normal", "ExperimentSpecChanged"), ("Normal", "Deploying")]
    assert not out.is_ready()

    e.drop_deleted()
    out = e.exp.reconcile()
    assert e.exp.status["phase"] == "Deploying", e.exp.status.get("message")
    assert set(out.composed) == {"candidate-r2"}
    assert out.deleted(e.exp.observed.values()) == set()
    assert cond(out, "Verdict") == ("Unknown", "Deploying")


def test_experiment_suspend_releases_candidate_and_job(render):
    e = Experiment(render)
    experiment_to_evaluating(e)
    e.exp.xr["spec"]["suspend"] = True
    out = e.exp.reconcile()
    assert e.exp.status["phase"] == "Suspended"
    assert cond(out, "Runnable") == ("False", "Suspended")
    assert cond(out, "Verdict") == ("Unknown", "Suspended")
    assert out.composed == {}
    assert out.deleted(e.exp.observed.values()) == {"candidate-r1", "gauntlet-r1"}
    assert not out.is_ready(), "no verdict has passed yet"

    e.drop_deleted()
    e.exp.xr["spec"]["suspend"] = False
    out = e.exp.reconcile()
    # The run starts over, with a new clock.
    assert e.exp.status["phase"] == "Deploying"
    assert set(out.composed) == {"candidate-r1"}
    assert "gauntlet" not in e.exp.status
    assert not out.is_ready()


def lose_status(e: Experiment, created_minutes_ago: int) -> str:
    """The experiment's status is lost (restored from a backup without it, say); its
    children were created ``created_minutes_ago`` (their ``metadata.creationTimestamp``,
    which the API server set and Crossplane passes with the observed resources), which
    is returned."""
    e.exp.xr["status"] = {}
    now = datetime.datetime.now(datetime.UTC)
    created = format_time(now - datetime.timedelta(minutes=created_minutes_ago))
    for obs in e.exp.observed.values():
        obs["metadata"]["creationTimestamp"] = created
    return created


@pytest.mark.parametrize(
    ("created_minutes_ago", "timed_out"),
    [(5, False), (46, True)],  # timeout: 45m
    ids=["held-within-its-timeout", "ended-past-its-timeout"],
)
def test_experiment_held_without_its_admission_ends_at_its_children_deadline(
    render, created_minutes_ago, timed_out
):
    """A run whose status (its admission, ``status.candidate.createdAt``) is lost while
    its CronJob is gone is held, keeping its children; its deadline is the timeout after
    its children's creation, and past it the run ends TimedOut as an admitted run does."""
    e = Experiment(render)
    experiment_to_evaluating(e)
    e.exp.required = [d for d in e.world if d["kind"] != "CronJob"]
    lose_status(e, created_minutes_ago)
    out = e.exp.reconcile()
    if not timed_out:
        assert cond(out, "Runnable") == ("False", "TemplateNotFound")
        assert "or its deadline" in out.condition("Runnable")["message"]
        assert e.exp.status["phase"] == "Blocked"
        assert out.deleted(e.exp.observed.values()) == set()
        return
    assert cond(out, "Verdict") == ("False", "TimedOut")
    assert "the gauntlet did not finish within 45m" in out.condition("Verdict")["message"]
    assert e.exp.status["phase"] == "Failed"
    assert out.deleted(e.exp.observed.values()) == {"candidate-r1"}
    assert out.composed["gauntlet-r1"]["spec"]["managementPolicies"] == ["Observe", "Delete"]
    e.drop_deleted()
    again = e.exp.reconcile()
    assert cond(again, "Verdict") == ("False", "TimedOut")
    assert again.deleted(e.exp.observed.values()) == set()


def test_experiment_run_2_is_recognised_when_status_is_lost(render):
    """Run 2's candidate observed with no status is the current run: kept, not replaced
    by a run 1 started on top of it. Run 1's evidence Job, whose history record was lost
    with the status, is kept as evidence (review 19c F3), and run 2 keeps the deadline its
    candidate's creation gives (F6: not one from the time of the loss)."""
    e = Experiment(render)
    experiment_to_evaluating(e)
    e.job(world.job_complete(e.started()), finished=True)
    e.exp.reconcile()  # run 1 passed: its Job stays as evidence
    e.drop_deleted()
    e.exp.xr["spec"]["gauntlet"]["env"][0]["value"] = "gsm8k"
    e.exp.xr["metadata"]["generation"] = 2
    e.exp.reconcile()
    e.drop_deleted()
    e.candidate(ready=False, key="candidate-r2")
    out = e.exp.reconcile()
    assert e.exp.status["runNumber"] == 2 and e.exp.status["phase"] == "Deploying"
    assert set(out.composed) == {"candidate-r2", "gauntlet-r1"}
    run2 = e.exp.status["run"]
    created = lose_status(e, 5)
    out = e.exp.reconcile()
    assert (e.exp.status["runNumber"], e.exp.status["run"]) == (2, run2)
    assert e.exp.status["phase"] == "Deploying", e.exp.status.get("message")
    assert set(out.composed) == {"candidate-r2", "gauntlet-r1"}
    assert out.deleted(e.exp.observed.values()) == set()
    assert out.composed["gauntlet-r1"]["spec"]["managementPolicies"] == ["Observe", "Delete"]
    assert ("Warning", "UnrecordedRunKept") in events(out)
    assert e.exp.status["candidate"]["createdAt"] == created
    # A fixed point: the same status again, no event.
    again = e.exp.reconcile()
    assert again.xr["status"] == out.xr["status"] and events(again) == []
    assert set(again.composed) == {"candidate-r2", "gauntlet-r1"}


# ---- 3. ModelBackfill: run and cancel, and a run that completes ---------------------

BACKFILL = EXAMPLES / "modelbackfill"
FOREGROUND = "modelplane.ai/last-foreground-request"


class Backfill:
    def __init__(self, render):
        (xr,) = load_yaml([str(BACKFILL / "xr.yaml")])
        self.bf = XR(render, xr, load_yaml([str(BACKFILL / "required")]))

    def deployment(self) -> dict[str, Any]:
        return next(d for d in self.bf.required if d["kind"] == "ModelDeployment")

    def job(self, remote: dict[str, Any] | None, *, finished: bool = False) -> None:
        """The attempt's Job applied; the Object's readiness is its ``Complete``/``Failed``
        CEL (``function.manifests.jobs.JOB_FINISHED_CEL``)."""
        doc = self.bf.last.composed["job-1"]
        self.bf.observed["job-1"] = self.bf.applied(
            "job-1", doc, self.bf.observed, remote=remote, ready=finished
        )

    def observer(self) -> None:
        """The attempt's observer applied: provider-kubernetes gets the Job it names, the
        one the Job's Object reports (so its ``status.atProvider``), not Ready while the
        Job runs (the same readiness CEL)."""
        doc = self.bf.last.composed["observer-1"]
        obs = world.observed_object(doc, ready=False)
        job = self.bf.observed["job-1"]
        obs["status"]["atProvider"] = copy.deepcopy(job["status"]["atProvider"])
        self.bf.observed["observer-1"] = obs

    def drop_deleted(self) -> None:
        for n in self.bf.last.deleted(self.bf.observed.values()):
            del self.bf.observed[n]


def backfill_to_running(b: Backfill) -> None:
    # The gateway has not stamped the foreground signal yet: not known to be idle.
    dep = b.deployment()
    stamped = dep["metadata"]["annotations"].pop(FOREGROUND)
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "ForegroundSignalUnknown")
    assert cond(out, "Backfilling") == ("False", "ForegroundSignalUnknown")
    assert out.composed == {}
    assert out.is_ready() and synced(out)
    assert events(out) == [("Normal", "BackfillWaitingForIdle")]

    # Stamped: the last foreground request was two days ago, longer than idleFor.
    dep["metadata"]["annotations"][FOREGROUND] = stamped
    out = b.bf.reconcile()
    st = b.bf.status
    assert set(out.composed) == {"job-1"}
    assert (st["phase"], st["reason"]) == ("Starting", "JobCreated")
    assert cond(out, "Backfilling") == ("True", "JobCreated")
    assert cond(out, "SpecValid") == ("True", "Valid")
    # A backfill is Ready while it works as designed (not Blocked, not Failed).
    assert out.is_ready() and synced(out)
    assert events(out) == [("Normal", "BackfillStarting")]
    job = manifest(out.composed["job-1"])
    assert job["kind"] == "Job"
    # Another backfill of the namespace holds one replica: this one takes the other.
    held = {d["status"]["replica"] for d in b.bf.required if d["kind"] == "ModelBackfill"}
    (free,) = [
        d
        for d in b.bf.required
        if d["kind"] == "ModelReplica" and d["metadata"]["name"] not in held
    ]
    assert st["replica"] == free["metadata"]["name"]
    assert st["cluster"] == free["spec"]["clusterName"]
    env = job_env(job)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["MODELPLANE_ENDPOINT"] == free["status"]["endpoint"]

    b.job(None)  # created, no status yet
    out = b.bf.reconcile()
    assert b.bf.status["phase"] == "Starting"
    # The Job reported: its Observe-only observer is composed, naming the same Job on the
    # same cluster.
    assert set(out.composed) == {"job-1", "observer-1"}
    watcher = out.composed["observer-1"]
    assert watcher["spec"]["managementPolicies"] == ["Observe"]
    pc = out.composed["job-1"]["spec"]["providerConfigRef"]
    assert watcher["spec"]["providerConfigRef"] == pc
    assert manifest(watcher)["metadata"]["name"] == job["metadata"]["name"]
    # Created: the Object no longer allows Create (a Job deleted behind its back stays gone).
    assert "Create" not in out.composed["job-1"]["spec"]["managementPolicies"]
    assert out.deleted(b.bf.observed.values()) == set()

    b.job(world.job_running())
    out = b.bf.reconcile()
    assert (b.bf.status["phase"], b.bf.status["reason"]) == ("Running", "JobRunning")
    assert cond(out, "Backfilling") == ("True", "JobRunning")
    assert "runningSince" in b.bf.status
    assert out.is_ready()
    assert events(out) == [("Normal", "BackfillRunning")]
    assert out.deleted(b.bf.observed.values()) == set()


def test_backfill_run_then_cancelled_by_foreground_traffic(render):
    b = Backfill(render)
    backfill_to_running(b)

    # Foreground traffic returns: the gateway stamps the deployment's annotation with
    # the time of the request, after the Job started.
    started = datetime.datetime.fromisoformat(b.bf.status["startedAt"])
    fg = format_time(started + datetime.timedelta(seconds=1))
    b.deployment()["metadata"]["annotations"][FOREGROUND] = fg
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("Cancelling", "PreemptedByForeground")
    assert cond(out, "Backfilling") == ("False", "PreemptedByForeground")
    assert st["preemptions"] == 1
    # The Job is no longer desired: Crossplane deletes its Object (and with it the Job).
    assert out.composed == {}
    assert out.deleted(b.bf.observed.values()) == {"job-1"}
    assert out.is_ready() and synced(out)
    assert events(out) == [("Normal", "BackfillCancelling")]

    # Deletion in progress: the Object is still observed; still not desired.
    out = b.bf.reconcile()
    assert b.bf.status["phase"] == "Cancelling"
    assert out.deleted(b.bf.observed.values()) == {"job-1"}

    # The Object is gone: back to waiting for a full idle window.
    b.drop_deleted()
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle")
    assert cond(out, "Backfilling") == ("False", "NotIdle")
    assert out.composed == {}
    assert "was cancelled" in st["message"]
    assert out.is_ready()
    assert events(out) == [("Normal", "BackfillWaitingForIdle")]
    # Steady: it does not start again while the model is not idle.
    again = b.bf.reconcile()
    assert again.composed == {} and b.bf.status["phase"] == "WaitingForIdle"


def test_backfill_job_deleted_on_the_cluster_ends_the_attempt(render):
    """Session 20: the Job deleted on the workload cluster while its Object remains. With
    ``[Observe, Delete]`` provider-kubernetes goes on reporting the running Job (the
    attempt stayed Running until maxRunDuration plus 10 minutes, JobOverdue); the
    Observe-only observer turns Synced=False as crossplane-runtime writes it, and the
    attempt ends at once (JobNotFound), then is admitted again."""
    b = Backfill(render)
    backfill_to_running(b)
    b.observer()
    out = b.bf.reconcile()
    assert (b.bf.status["phase"], b.bf.status["reason"]) == ("Running", "JobRunning")
    assert set(out.composed) == {"job-1", "observer-1"}
    assert out.deleted(b.bf.observed.values()) == set() and events(out) == []

    # kubectl delete job on the cluster: each Object's next observation.
    for key in ("job-1", "observer-1"):
        b.bf.observed[key] = world.remote_gone(b.bf.observed[key])
    job_obj = b.bf.observed["job-1"]
    assert job_obj["status"]["atProvider"]["manifest"]["status"]["active"] == 1  # stale
    assert job_obj["status"]["conditions"][0]["status"] == "True"  # reports nothing
    gone = b.bf.observed["observer-1"]["status"]["conditions"][0]
    assert (gone["status"], gone["message"]) == ("False", world.RECONCILE_ERROR_NOT_EXIST)

    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("Cancelling", "JobNotFound"), st
    assert cond(out, "Backfilling") == ("False", "JobNotFound")
    assert world.RECONCILE_ERROR_NOT_EXIST in st["message"] and "deleted there" in st["message"]
    assert st["preemptions"] == 1
    # Both Objects are dropped: the Job's (nothing left to delete on the cluster) and its
    # observer (deleting it never touches the Job).
    assert out.composed == {}
    assert out.deleted(b.bf.observed.values()) == {"job-1", "observer-1"}
    assert out.is_ready() and synced(out)
    assert events(out) == [("Normal", "BackfillCancelling")]

    b.drop_deleted()
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("WaitingForIdle", "NotIdle"), st
    assert out.composed == {}

    # A full idle window later it is admitted again: attempt 2, its own Job.
    later = datetime.datetime.fromisoformat(st["notIdleBefore"]) - datetime.timedelta(hours=1)
    b.bf.xr["status"]["notIdleBefore"] = format_time(later)
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"], st["attempts"]) == ("Starting", "JobCreated", 2), st
    assert set(out.composed) == {"job-2"}
    assert events(out) == [("Normal", "BackfillStarting")]


def test_backfill_run_that_completes_then_repeats(render):
    b = Backfill(render)
    backfill_to_running(b)
    first = b.bf.last.composed["job-1"]

    b.job(world.job_complete(b.bf.status["startedAt"]), finished=True)
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("Succeeded", "JobSucceeded")
    assert st["lastResult"] == "Succeeded"
    assert st["nextRunTime"]  # repeatAfter 6h
    assert cond(out, "Backfilling") == ("False", "JobSucceeded")
    # The outcome is recorded in status; the Job is dropped.
    assert out.composed == {}
    assert out.deleted(b.bf.observed.values()) == {"job-1"}
    assert out.is_ready() and synced(out)
    assert events(out) == [("Normal", "BackfillSucceeded")]

    b.drop_deleted()
    again = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("Succeeded", "CoolingDown")
    assert again.composed == {}
    assert again.is_ready()

    # repeatAfter (6h) later, still idle: attempt 2 gets its own Object and Job name.
    for k in ("startedAt", "completionTime", "nextRunTime"):
        t = datetime.datetime.fromisoformat(st[k]) - datetime.timedelta(hours=7)
        b.bf.xr["status"][k] = format_time(t)
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"], st["attempts"]) == ("Starting", "JobCreated", 2)
    assert set(out.composed) == {"job-2"}
    assert (
        manifest(out.composed["job-2"])["metadata"]["name"] != manifest(first)["metadata"]["name"]
    )
    assert out.deleted(b.bf.observed.values()) == set()
    assert out.is_ready()


def test_backfill_run_that_fails(render):
    b = Backfill(render)
    backfill_to_running(b)

    b.job(
        world.job_failed(
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
            at=b.bf.status["startedAt"],
        ),
        finished=True,
    )
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("Failed", "JobFailed")
    assert "DeadlineExceeded" in st["message"]
    assert out.composed == {}
    assert out.deleted(b.bf.observed.values()) == {"job-1"}
    assert not out.is_ready(), "a failed backfill is not Ready"
    assert synced(out)
    assert events(out) == [("Warning", "BackfillFailed")]


def test_backfill_suspended_while_running(render):
    b = Backfill(render)
    backfill_to_running(b)
    b.bf.xr["spec"]["suspend"] = True
    out = b.bf.reconcile()
    assert (b.bf.status["phase"], b.bf.status["reason"]) == ("Cancelling", "Suspended")
    assert out.composed == {}
    assert out.deleted(b.bf.observed.values()) == {"job-1"}
    b.drop_deleted()
    out = b.bf.reconcile()
    assert (b.bf.status["phase"], b.bf.status["reason"]) == ("Suspended", "Suspended")
    assert cond(out, "Backfilling") == ("False", "Suspended")
    assert out.composed == {} and out.is_ready()
    assert events(out) == [("Normal", "BackfillSuspended")]


# ---- 4. A bring-your-own InferenceCluster ---------------------------------------------


def kind_fleet() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    docs = load_yaml([str(KIND_LOCAL_CPU)])
    (cluster,) = [d for d in docs if d["kind"] == "InferenceCluster"]
    classes = [d for d in docs if d["kind"] == "InferenceClass"]
    cluster = copy.deepcopy(cluster)
    cluster.pop("status", None)
    return cluster, classes


def test_byo_inferencecluster_from_nothing_to_ready(render):
    xr, classes = kind_fleet()
    ic = XR(render, xr, classes)

    out = ic.reconcile()
    assert set(out.composed) == {"provider-config"}
    pc = out.composed["provider-config"]
    assert pc["kind"] == "ClusterProviderConfig"
    assert pc["spec"]["credentials"]["secretRef"] == {
        "namespace": "modelplane-system",
        "name": "mp-fleet-kubeconfig",
        "key": "kubeconfig",
    }
    assert cond(out, "PoolsResolved") == ("True", "Resolved")
    assert [(p["name"], p["nodes"]) for p in ic.status["gpuPools"]] == [
        ("fake-l4", 1),
        ("fake-a100", 1),
    ]
    assert ic.status["providerConfigRef"] == {
        "kind": "ClusterProviderConfig",
        "name": pc["metadata"]["name"],
    }
    # The ProviderConfig is not created yet: nothing can reach the cluster.
    assert not out.is_ready() and synced(out)
    assert unready(out) == {"provider-config"}

    ic.observed["provider-config"] = world.observed_provider_config(pc)
    out = ic.reconcile()
    assert out.is_ready() and synced(out), out.stdout
    assert set(out.composed) == {"provider-config"}
    assert events(out) == [] and unready(out) == set()
    assert out.deleted(ic.observed.values()) == set()
    again = ic.reconcile()
    assert again.is_ready() and again.composed["provider-config"]["spec"] == pc["spec"]


def test_byo_inferencecluster_missing_class_is_not_ready(render):
    xr, classes = kind_fleet()
    ic = XR(render, xr, [c for c in classes if c["metadata"]["name"] != "fake-a100"])
    out = ic.reconcile()
    assert events(out) == [("Warning", "ClassNotFound")]
    ic.observed["provider-config"] = world.observed_provider_config(out.composed["provider-config"])
    out = ic.reconcile()
    assert cond(out, "PoolsResolved") == ("False", "ClassNotFound")
    assert [p["name"] for p in ic.status["gpuPools"]] == ["fake-l4"]
    assert events(out) == []  # once per change, not on every reconcile
    assert not out.is_ready()
    assert out.deleted(ic.observed.values()) == set()
    # The class is created: Ready.
    ic.required = classes
    out = ic.reconcile()
    assert cond(out, "PoolsResolved") == ("True", "Resolved")
    assert out.is_ready()


def test_inferencecluster_of_another_source_is_never_ready(render):
    # Selected onto the Existing composition by mistake: nothing is composed, and an
    # XR with no composed resources must not read Ready.
    xr, classes = kind_fleet()
    xr["spec"]["cluster"] = {"source": "GKE", "gke": {"project": "p", "location": "us-east1"}}
    ic = XR(render, xr, classes)
    out = ic.reconcile()
    assert out.composed == {}
    assert cond(out, "PoolsResolved") == ("False", "SourceNotServed")
    assert not out.is_ready(), "Ready with nothing composed for a source it does not serve"
