"""ModelExperiment: the full lifecycle over gRPC with a controlled clock.

A small simulator (:class:`Sim`) plays Crossplane: it drives the requirements
loop over a real gRPC channel (``tests.support.harness.GrpcFunction``), writes the
returned status back into the XR, turns desired composed resources into observed
ones (keeping the status the "cluster" gave them, deleting what is no longer
desired), and lets each test change the world (candidate Ready, replica endpoint,
Job finished, CronJob deleted, ...) between reconciles.
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import API_VERSION
from function.api.modelexperiment import (
    CANDIDATE_LOST,
    MAX_HISTORY_LIMIT,
    PASSED,
    definition_hash,
    parse_spec,
)
from function.composers import experiment as exp
from function.composers.experiment.names import (
    candidate_key,
    job_key,
    key_run_number,
    run_number,
)
from function.composers.experiment.observed import in_experiment_terms
from function.core.errors import SpecError
from function.core.timeutil import format_time
from function.naming import (
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_RUN,
    replica_name,
    source_identity,
)
from function.render import World, load_yaml, observed_by_name
from tests.support.cache_tree import Tree
from tests.support.fixtures import (
    POD_ACCESS_FAULTS,
    POD_TEMPLATE_FAULTS,
    cache_spec,
    inference_cluster,
    observed_hydration,
    put_fault,
)
from tests.support.harness import (
    NAMESPACE,
    NOW,
    Clock,
    GrpcFunction,
    conditions,
    desired,
    drive,
    fatal,
    request,
    results,
    run,
    status,
    xr,
    xr_ready,
)
from tests.support.table import Case, table
from tests.support.validation import (
    SchemaError,
    find_xrd,
    validate_k8s,
    validate_object,
    validate_xr,
    xr_cel_errors,
)

NAME = "qwen-canary"
# The candidates of runs 1 and 2 (hashed names: see function.naming).
RUN1 = exp.run_name(NAME, 1)
RUN2 = exp.run_name(NAME, 2)
CLUSTER = "gpu-a"
ENDPOINT = "http://qwen-canary-0-svc.default.svc.cluster.local:8000"
COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"
DIGEST = "sha256:" + "ab" * 32


def candidate(**kw: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "backend": "vllm",
        "modelCacheRef": {"name": "qwen-cache"},
        "engines": [
            {
                "name": "vllm",
                "members": [
                    {
                        "role": "Standalone",
                        "nodeSelector": {
                            "devices": [
                                {
                                    "name": "gpu",
                                    "count": 1,
                                    "selectors": [
                                        {
                                            "cel": 'device.capacity["gpu.nvidia.com"].memory'
                                            '.compareTo(quantity("20Gi")) >= 0'
                                        }
                                    ],
                                }
                            ]
                        },
                        "template": {
                            # Production labels a Service selects: must not reach the candidate.
                            "metadata": {"labels": {"app": "chat", "tier": "prod"}},
                            "spec": {
                                "containers": [
                                    {
                                        "name": "engine",
                                        "image": "vllm/vllm-openai:v0.8.5",
                                        "args": [
                                            "--model=$(MODELPLANE_MODEL)",
                                            "--served-model-name=$(MODELPLANE_SERVED_MODEL_NAME)",
                                        ],
                                        "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}],
                                    }
                                ]
                            },
                        },
                    }
                ],
            }
        ],
    }
    c.update(kw)
    return c


def spec(**kw: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "candidate": candidate(),
        "gauntlet": {
            "templateRef": {"name": "lm-eval"},
            "env": [{"name": "TASKS", "value": "gsm8k"}, {"name": "LIMIT", "value": "200"}],
        },
    }
    s.update(kw)
    return s


def cronjob(*, ttl: int | None = 300, deadline: int | None = None) -> dict[str, Any]:
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "template": {
            "metadata": {"labels": {"app": "lm-eval"}},
            "spec": {
                "restartPolicy": "Never",
                "initContainers": [
                    {
                        "name": "wait-for-endpoint",
                        "image": "curlimages/curl:8.10.1",
                        "command": [
                            "sh",
                            "-c",
                            "until curl -sf $(MODELPLANE_ENDPOINT)/health; do sleep 5; done",
                        ],
                    }
                ],
                "containers": [
                    {
                        "name": "lm-eval",
                        "image": "python:3.11-slim",
                        "command": ["sh", "-c", "lm_eval --tasks $(TASKS)"],
                        "env": [
                            {"name": "MODELS", "value": "chat=vllm"},  # the production lane
                            {"name": "TASKS", "value": "mmlu"},
                        ],
                    }
                ],
            },
        },
    }
    if ttl is not None:
        job_spec["ttlSecondsAfterFinished"] = ttl
    if deadline is not None:
        job_spec["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "lm-eval", "namespace": NAMESPACE},
        "spec": {"schedule": "0 3 * * *", "suspend": True, "jobTemplate": {"spec": job_spec}},
    }


CACHE_REPO = "Qwen/Qwen2.5-0.5B-Instruct"


def cache(
    phases: dict[str, str] | None = None,
    *,
    evidence: dict[str, dict[str, Any]] | None = None,
    name: str = "qwen-cache",
    generation: int = 3,
    revision: str = "main",
    reported_revision: str | None = "main",
) -> dict[str, Any]:
    phases = phases if phases is not None else {"gpu-a": "Ready", "gpu-b": "Ready"}
    # The ModelCache's roll-up (function.api.modelcache, "Status contract"): counts per
    # phase, failed clusters, one evidence entry per distinct artifact of the Ready ones.
    counts = dict.fromkeys(("Pending", "Hydrating", "Ready", "Failed", "Unavailable"), 0)
    for p in phases.values():
        counts[p] += 1
    groups: dict[tuple[str, str], list[int]] = {}
    for n, p in sorted(phases.items()):
        if p != "Ready":
            continue
        ev = (evidence or {}).get(n) or {}
        d = ev.get("digest") or ""
        key = (ev.get("commit") or "", d if not d or d.startswith("sha256:") else "sha256:" + d)
        g = groups.setdefault(key, [0, 0])
        g[0] += 1
        g[1] += (
            1 if isinstance(ev.get("validatedAt"), str) and ev["validatedAt"][:4].isdigit() else 0
        )
    evidence_list = [
        {
            **({"commit": c} if c else {}),
            **({"digest": d} if d else {}),
            "clusters": k,
            "validated": v,
        }
        for (c, d), (k, v) in sorted(groups.items(), key=lambda g: -g[1][0])
    ]
    rollup = {
        "evidence": evidence_list,
        "failed": [
            {"name": n, "message": f"hydration is {p}"}
            for n, p in sorted(phases.items())
            if p == "Failed"
        ],
        "waiting": [n for n, p in sorted(phases.items()) if p in ("Pending", "Hydrating")][:5],
    }
    ready = sum(1 for p in phases.values() if p == "Ready")
    all_ready = ready == len(phases) and bool(phases)
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelCache",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "generation": generation,
        },
        "spec": {
            "clusterSelector": {},
            "source": "HuggingFace",
            "huggingFace": {"repo": CACHE_REPO, "revision": revision, "sizeGiB": 2},
        },
        "status": {
            **(
                {}
                if reported_revision is None
                else {
                    "source": {
                        "repo": CACHE_REPO,
                        "revision": reported_revision,
                        "identity": source_identity(CACHE_REPO, reported_revision),
                    }
                }
            ),
            **rollup,
            "summary": {
                "ready": f"{ready}/{len(phases)}",
                "total": len(phases) - counts["Unavailable"],
                "phases": counts,
                "artifacts": len(evidence_list),
            },
            "conditions": [
                {
                    "type": "ArtifactReady",
                    "status": "True" if all_ready else "False",
                    "reason": "Hydrated" if all_ready else "Hydrating",
                    "message": f"{ready}/{len(phases)} clusters ready",
                }
            ],
        },
    }


def full_evidence(**over: Any) -> dict[str, Any]:
    return {
        "commit": COMMIT,
        "digest": DIGEST,
        "validatedAt": "2026-11-29T08:00:00Z",
        **over,
    }


def cond(typ: str, status_: str = "True", reason: str = "", message: str = "") -> dict[str, str]:
    return {
        "type": typ,
        "status": status_,
        "reason": reason or typ,
        "message": message,
        "lastTransitionTime": "2026-11-29T09:00:00Z",
    }


class Sim:
    """Crossplane and the clusters, simplified, around one ModelExperiment."""

    def __init__(
        self,
        fn: GrpcFunction,
        clock: Clock,
        spec_: dict[str, Any],
        world: list[dict[str, Any]] | None = None,
        *,
        generation: int = 1,
    ) -> None:
        self.fn = fn
        self.clock = clock
        self.xr = xr("ModelExperiment", NAME, spec_, generation=generation)
        self.observed: dict[str, dict[str, Any]] = {}
        self.world: list[dict[str, Any]] = (
            list(world)
            if world is not None
            else [cronjob(), inference_cluster(CLUSTER), cache()]  # the candidate's cache
        )
        self.rsp: Any = None
        self.calls = 0
        self.validate = True  # validate the XR against its XRD after each reconcile

    # -- Crossplane
    def reconcile(self) -> Any:
        rsp, calls = drive(self.fn.call, self.xr, self.observed, World(self.world))
        assert not fatal(rsp), fatal(rsp)
        self.rsp, self.calls = rsp, calls
        st = status(rsp)
        st["conditions"] = [
            {"type": t, **c, "lastTransitionTime": "2026-11-29T09:00:00Z"}
            for t, c in conditions(rsp).items()
        ]
        self.xr["status"] = st
        if self.validate:
            validate_xr(self.xr)
        new: dict[str, dict[str, Any]] = {}
        for key, body in desired(rsp).items():
            old = self.observed.get(key)
            b = copy.deepcopy(body)
            if old is not None and "status" in old:
                b["status"] = old["status"]
            # Set by the API server when the object is created, then never changed.
            created = (old or {}).get("metadata", {}).get("creationTimestamp")
            b.setdefault("metadata", {})["creationTimestamp"] = created or format_time(
                self.clock.now
            )
            new[key] = b
        self.observed = new
        return rsp

    def update_spec(self, **kw: Any) -> None:
        self.xr["spec"].update(kw)
        self.xr["metadata"]["generation"] += 1

    # -- readers
    @property
    def status(self) -> dict[str, Any]:
        return self.xr["status"]

    @property
    def phase(self) -> str:
        return self.status["phase"]

    def conditions(self) -> dict[str, dict[str, str]]:
        return conditions(self.rsp)

    def key(self, kind: str, number: int = 1) -> str:
        return f"{kind}-r{number}"

    def job(self, number: int = 1) -> dict[str, Any]:
        return self.observed[self.key("gauntlet", number)]["spec"]["forProvider"]["manifest"]

    # -- the world
    def candidate_ready(self, number: int = 1, *, endpoint: str = ENDPOINT) -> None:
        name = self.status["run"]
        self.observed[self.key("candidate", number)]["status"] = {
            "replicas": {"total": 1, "ready": 1},
            "conditions": [
                cond("ReplicasScheduled"),
                cond("ReplicasReady"),
                cond("Ready", reason="Available"),
            ],
        }
        self.world.append(replica(name, endpoint=endpoint))

    def job_finished(
        self, passed: bool, at: datetime.datetime, number: int = 1, *, labels: Any = None
    ) -> None:
        key = self.key("gauntlet", number)
        manifest = copy.deepcopy(self.observed[key]["spec"]["forProvider"]["manifest"])
        if labels is not None:
            manifest["metadata"]["labels"] = labels
        ts = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        if passed:
            manifest["status"] = {
                "succeeded": 1,
                "completionTime": ts,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": ts},
                    {"type": "Complete", "status": "True", "lastTransitionTime": ts},
                ],
            }
        else:
            manifest["status"] = {
                "failed": 1,
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                        "lastTransitionTime": ts,
                    }
                ],
            }
        self.observed[key]["status"] = {
            "atProvider": {"manifest": manifest},
            "conditions": [cond("Synced"), cond("Ready")],
        }

    def remove(self, kind: str, name: str) -> None:
        self.world = [
            r for r in self.world if not (r["kind"] == kind and r["metadata"]["name"] == name)
        ]

    def to_evaluating(self, number: int = 1) -> None:
        """Reconcile until the gauntlet Job of run ``number`` is composed."""
        self.reconcile()
        assert self.phase == "Deploying", self.status
        self.reconcile()  # the candidate is observed (seen)
        self.candidate_ready(number)
        self.reconcile()
        assert self.phase == "Evaluating", self.status


def replica(deployment: str, *, endpoint: str = ENDPOINT, **status_: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"conditions": [cond("ModelReady", reason="Serving")]}
    if endpoint:
        st["endpoint"] = endpoint
    st.update(status_)
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelReplica",
        "metadata": {
            "name": replica_name(NAMESPACE, deployment, 0),
            "namespace": NAMESPACE,
            "labels": {LABEL_DEPLOYMENT: deployment, LABEL_CLUSTER: CLUSTER},
        },
        "spec": {"deploymentName": deployment, "index": 0, "clusterName": CLUSTER},
        "status": st,
    }


def env_of(container: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["name"], e.get("value", "")) for e in container.get("env", [])]


def has_modeldeployment_xrd() -> bool:
    try:
        find_xrd(API_VERSION, "ModelDeployment")
    except (KeyError, SchemaError):
        return False
    return True


@pytest.fixture
def sim_factory(grpc_function: GrpcFunction, clock: Clock):
    def make(spec_: dict[str, Any] | None = None, world: list | None = None, **kw: Any) -> Sim:
        return Sim(grpc_function, clock, spec_ if spec_ is not None else spec(), world, **kw)

    return make


# ---- the happy path, in detail ----------------------------------------------------


def test_pass_full_lifecycle(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.reconcile()
    assert sim.phase == "Deploying"
    assert sim.status["candidate"]["createdAt"] == "2026-11-29T09:00:00Z"
    assert sim.status["candidate"]["deadline"] == "2026-11-29T09:30:00Z"
    cand = sim.observed["candidate-r1"]
    assert cand["kind"] == "ModelDeployment" and cand["metadata"]["name"] == RUN1
    assert cand["spec"]["replicas"] == 1
    # Isolation: only the experiment's own labels, on the deployment, template and pods.
    own = {
        "experiment.modelplane.ai/name": NAME,
        "experiment.modelplane.ai/run": "1",
        "experiment.modelplane.ai/generation": "1",
    }
    assert cand["metadata"]["labels"]["modelplane.ai/run"] == "1"
    assert cand["spec"]["template"]["metadata"]["labels"] == own
    member = cand["spec"]["template"]["spec"]["engines"][0]["members"][0]
    assert member["template"]["metadata"]["labels"] == own
    engine = member["template"]["spec"]["containers"][0]
    assert env_of(engine)[0] == ("MODELPLANE_SERVED_MODEL_NAME", RUN1)
    assert ("VLLM_LOGGING_LEVEL", "INFO") in env_of(engine)
    assert engine["args"][1] == "--served-model-name=$(MODELPLANE_SERVED_MODEL_NAME)"
    assert "backend" not in cand["spec"]["template"]["spec"]
    if has_modeldeployment_xrd():
        validate_xr(cand)
    assert xr_ready(sim.rsp) == "READY_FALSE"

    clock.advance(120)
    sim.reconcile()
    assert sim.phase == "Deploying" and sim.status["candidate"]["seen"] is True
    sim.candidate_ready()
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Evaluating", sim.status
    g = sim.status["gauntlet"]
    assert g["cluster"] == CLUSTER and g["endpoint"] == ENDPOINT
    assert g["activeDeadlineSeconds"] == 27 * 60  # 30m from creation, 3m later
    obj = sim.observed["gauntlet-r1"]
    validate_object(obj)
    assert obj["spec"]["providerConfigRef"] == {"kind": "ClusterProviderConfig", "name": "default"}
    assert obj["spec"]["readiness"]["policy"] == "DeriveFromCelQuery"
    assert obj["spec"]["forProvider"]["deletionPropagationPolicy"] == "Background"
    job = sim.job()
    validate_k8s(job)
    assert job["metadata"]["name"] == g["job"] and job["metadata"]["namespace"] == "default"
    assert job["metadata"]["labels"][LABEL_RUN] == "1"
    assert "ttlSecondsAfterFinished" not in job["spec"] and "suspend" not in job["spec"]
    assert job["spec"]["activeDeadlineSeconds"] == 27 * 60
    main = job["spec"]["template"]["spec"]["containers"][0]
    # MODELS and the endpoint first (the production MODELS is dropped); gauntlet.env by
    # name: TASKS replaced in place, LIMIT appended.
    assert env_of(main) == [
        ("MODELS", f"{RUN1}=vllm"),
        ("MODELPLANE_ENDPOINT", ENDPOINT),
        ("TASKS", "gsm8k"),
        ("LIMIT", "200"),
    ]
    init = job["spec"]["template"]["spec"]["initContainers"][0]
    assert env_of(init) == [("MODELS", f"{RUN1}=vllm"), ("MODELPLANE_ENDPOINT", ENDPOINT)]
    assert sim.conditions()["Verdict"]["status"] == "Unknown"

    # The CronJob may go away now: the Job exists and is kept as it is.
    sim.remove("CronJob", "lm-eval")
    clock.advance(600)
    sim.reconcile()
    assert sim.phase == "Evaluating"
    assert sim.observed["gauntlet-r1"]["spec"]["forProvider"]["manifest"] == job

    finished = clock.now
    sim.job_finished(True, finished)
    clock.advance(30)
    sim.reconcile()
    assert sim.phase == "Succeeded"
    assert sim.status["verdict"] == {
        "pass": True,
        "reason": "GauntletPassed",
        "summary": f"gauntlet Job {g['job']} completed (1 pod(s) succeeded)",
        "completedAt": finished.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    assert "candidate-r1" not in sim.observed  # released
    evidence = sim.observed["gauntlet-r1"]
    assert evidence["spec"]["managementPolicies"] == ["Observe", "Delete"]
    validate_object(evidence)
    assert sim.conditions()["Verdict"] == {
        "status": "True",
        "reason": "GauntletPassed",
        "message": sim.status["verdict"]["summary"],
    }
    assert xr_ready(sim.rsp) == "READY_TRUE"
    assert "nextRunAt" not in sim.status  # one-shot

    # Later calls change nothing, emit no event and never bring the candidate back.
    clock.advance(3600)
    sim.reconcile()
    assert sim.phase == "Succeeded" and "candidate-r1" not in sim.observed
    assert results(sim.rsp) == []
    a = sim.fn.call(request(sim.xr, observed=sim.observed))
    b = sim.fn.call(request(sim.xr, observed=sim.observed))
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def test_verdict_is_counted_once(sim_factory, clock: Clock) -> None:
    """The verdict metric is observed only in the call that records the verdict."""
    from function.edge.runner import FunctionRunner

    sim = sim_factory()
    sim.to_evaluating()
    sim.job_finished(False, clock.advance(60))
    runner = FunctionRunner(clock=clock)

    def observations() -> list[Any]:
        req = request(sim.xr, observed=sim.observed)
        return exp.compose(runner.decode(req)).observations

    (obs,) = observations()
    assert obs.metric == "model_experiment_verdicts_total"
    assert dict(obs.labels) == {
        "namespace": NAMESPACE,
        "experiment": NAME,
        "reason": "GauntletFailed",
    }
    sim.reconcile()  # the verdict is recorded in status
    assert observations() == []


SKEW_RULE = "issue 13: time before the recorded start counts as zero"

# The clock moves by ``inputs`` seconds between candidate creation and the gauntlet; the
# Job's activeDeadlineSeconds in a 30m run.
SKEW: list[Case[float, int]] = [
    Case("no skew, 3m later", "the Job gets the time left before the deadline", 180, 27 * 60),
    Case("clock 1h behind createdAt", SKEW_RULE, -3600, 30 * 60),
    Case("clock 1s behind createdAt", SKEW_RULE, -1, 30 * 60),
]


@table(SKEW)
def test_a_skewed_clock_never_gives_the_job_more_than_the_timeout(
    sim_factory, clock: Clock, case: Case[float, int]
) -> None:
    sim = sim_factory()
    sim.reconcile()
    assert sim.phase == "Deploying"
    clock.advance(case.inputs)
    sim.reconcile()
    sim.candidate_ready(1)
    sim.reconcile()
    assert sim.phase == "Evaluating", sim.status
    assert sim.status["gauntlet"]["activeDeadlineSeconds"] == case.want, case.reason
    assert sim.job()["spec"]["activeDeadlineSeconds"] == case.want, case.reason


CAPPED = "the Job's activeDeadlineSeconds is capped at the time left before the run's deadline"

# The CronJob's own activeDeadlineSeconds (None: unset); the gauntlet Job's, in a 30m run.
JOB_DEADLINES: list[Case[int | None, int]] = [
    Case("shorter than the run", "the template's own shorter deadline is kept", 600, 600),
    Case("longer than the run", CAPPED, 7200, 1800),
    Case("unset", CAPPED, None, 1800),
]


@table(JOB_DEADLINES)
def test_job_deadline_is_capped_by_the_run_deadline(
    sim_factory, case: Case[int | None, int]
) -> None:
    sim = sim_factory(world=[cronjob(deadline=case.inputs), inference_cluster(CLUSTER), cache()])
    sim.to_evaluating()
    assert sim.job()["spec"]["activeDeadlineSeconds"] == case.want, case.reason


def test_serving_waits_for_endpoint_and_provider_config(sim_factory, clock: Clock) -> None:
    sim = sim_factory(world=[cronjob(), inference_cluster(CLUSTER, provider_config=None), cache()])
    sim.reconcile()
    sim.reconcile()
    sim.candidate_ready(endpoint="")
    sim.reconcile()
    assert sim.phase == "Serving"
    assert "waiting for its replica to report an endpoint" in sim.conditions()["Verdict"]["message"]
    assert set(sim.observed) == {"candidate-r1"}
    sim.remove("ModelReplica", replica_name(NAMESPACE, RUN1, 0))
    sim.world.append(replica(RUN1))
    sim.reconcile()
    assert sim.phase == "Serving"
    assert "no status.providerConfigRef" in sim.conditions()["Verdict"]["message"]
    sim.world[1] = inference_cluster(CLUSTER)
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Evaluating"
    assert sim.status["gauntlet"]["startedAt"] == "2026-11-29T09:01:00Z"


def test_fail_is_terminal_even_with_repeat(sim_factory, clock: Clock) -> None:
    sim = sim_factory(spec(repeatAfter="1h", historyLimit=3))
    sim.to_evaluating()
    sim.job_finished(False, clock.advance(300))
    sim.reconcile()
    assert sim.phase == "Failed"
    v = sim.status["verdict"]
    assert v["pass"] is False and v["reason"] == "GauntletFailed"
    assert "BackoffLimitExceeded" in v["summary"]
    assert "candidate-r1" not in sim.observed and "gauntlet-r1" in sim.observed
    assert ("Warning", f"Failed: run {RUN1} failed: {v['summary']}") in results(sim.rsp)
    assert xr_ready(sim.rsp) == "READY_FALSE"
    # Far past any cool-down: no new run, no candidate.
    clock.advance(10 * 3600)
    sim.reconcile()
    assert sim.phase == "Failed" and sim.status["runNumber"] == 1
    assert "nextRunAt" not in sim.status
    assert not any(k.startswith("candidate") for k in sim.observed)


# ---- timeouts -------------------------------------------------------------------------


def test_timeout_candidate_never_ready(sim_factory, clock: Clock) -> None:
    sim = sim_factory(spec(timeout="10m"))
    sim.reconcile()
    rsp = sim.rsp
    assert rsp.meta.ttl.seconds <= 30
    clock.advance(300)
    sim.reconcile()
    assert sim.phase == "Deploying"
    clock.advance(300)
    sim.reconcile()
    assert sim.phase == "Failed"
    assert sim.status["verdict"]["reason"] == "TimedOut"
    assert "never became Ready" in sim.status["verdict"]["summary"]
    assert not sim.observed


def test_timeout_while_evaluating_keeps_job_as_evidence(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    clock.advance(30 * 60)
    sim.reconcile()
    assert sim.status["verdict"]["reason"] == "TimedOut"
    assert "gauntlet did not finish" in sim.status["verdict"]["summary"]
    assert list(sim.observed) == ["gauntlet-r1"]


def test_job_finished_before_deadline_counts_when_seen_late(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    sim.job_finished(True, NOW + datetime.timedelta(minutes=29))
    clock.now = NOW + datetime.timedelta(minutes=45)  # the function was not called in time
    sim.reconcile()
    assert sim.status["verdict"]["reason"] == "GauntletPassed"
    assert sim.status["verdict"]["completedAt"] == "2026-11-29T09:29:00Z"


def test_job_finished_after_deadline_is_timed_out(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    sim.job_finished(True, NOW + datetime.timedelta(minutes=31))
    clock.now = NOW + datetime.timedelta(minutes=32)
    sim.reconcile()
    assert sim.status["verdict"]["reason"] == "TimedOut"


def test_timeout_clock_starts_at_candidate_creation_not_at_gate(sim_factory, clock) -> None:
    gate = {"modelCacheRef": {"name": "qwen-cache"}}
    world = [cronjob(), inference_cluster(CLUSTER), cache({"gpu-a": "Hydrating"})]
    sim = sim_factory(spec(artifactGate=gate), world)
    sim.reconcile()
    assert sim.phase == "Blocked" and sim.status["reason"] == "ArtifactCacheNotReady"
    clock.advance(3 * 3600)  # hours at the gate
    sim.world[-1] = cache({"gpu-a": "Ready"})
    sim.reconcile()
    assert sim.phase == "Deploying"
    assert sim.status["candidate"]["createdAt"] == "2026-11-29T12:00:00Z"
    assert sim.status["candidate"]["deadline"] == "2026-11-29T12:30:00Z"


# ---- candidate failures ------------------------------------------------------------------


def test_candidate_lost(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    del sim.observed["candidate-r1"]  # deleted behind Crossplane's back
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Failed"
    assert sim.status["verdict"]["reason"] == "CandidateLost"
    assert "candidate-r1" not in sim.observed  # not re-created
    assert "gauntlet-r1" in sim.observed


def test_candidate_replica_gone_is_lost(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    sim.remove("ModelReplica", replica_name(NAMESPACE, RUN1, 0))  # its cluster was lost
    clock.advance(60)
    sim.reconcile()
    assert sim.status["verdict"]["reason"] == "CandidateLost"
    assert f"no longer has a replica on {CLUSTER}" in sim.status["verdict"]["summary"]
    assert list(sim.observed) == ["gauntlet-r1"]


def test_the_verdict_call_asks_for_what_its_request_carries(
    sim_factory, clock: Clock, monkeypatch
) -> None:
    """Review 14c #3: the call that records CandidateLost read the candidate's replicas
    and stopped asking for them; Crossplane v2.4.0 then calls again without them, the
    function asks again, and the loop ends in "requirements didn't stabilize" with the
    verdict never applied. The applied call asks for what its request was resolved for."""
    sim = sim_factory()
    sim.to_evaluating()
    sim.remove("ModelReplica", replica_name(NAMESPACE, RUN1, 0))
    clock.advance(60)
    seen: list[Any] = []
    call = sim.fn.call
    monkeypatch.setattr(sim.fn, "call", lambda r: (seen.append(r), call(r))[1])
    sim.reconcile()
    assert sim.status["verdict"]["reason"] == "CandidateLost"
    assert set(sim.rsp.requirements.resources) == set(seen[-1].required_resources)


def test_candidate_not_yet_observed_is_not_lost(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.reconcile()
    sim.observed.pop("candidate-r1")  # Crossplane did not create it yet
    clock.advance(30)
    sim.reconcile()
    assert sim.phase == "Deploying"


def test_candidate_hydration_failed_on_replica(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.reconcile()
    sim.reconcile()
    sim.world.append(
        replica(
            RUN1,
            endpoint="",
            conditions=[
                cond("ModelReady", "False", "HydrationFailed", "Job DeadlineExceeded"),
            ],
        )
    )
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Failed"
    v = sim.status["verdict"]
    assert v["reason"] == "CandidateFailed"
    assert "hydration failed on gpu-a: Job DeadlineExceeded" in v["summary"]
    assert not sim.observed


def test_candidate_sync_error_is_shown(sim_factory) -> None:
    sim = sim_factory()
    sim.reconcile()
    sim.observed["candidate-r1"]["status"] = {
        "conditions": [cond("Synced", "False", "ReconcileError", "cannot compose: spec.x: bad")]
    }
    sim.reconcile()
    assert sim.phase == "Deploying"
    assert (
        "Synced: ReconcileError cannot compose: spec.x: bad"
        in sim.conditions()["Verdict"]["message"]
    )


def test_candidate_hydration_failed_on_deployment(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.reconcile()
    sim.observed["candidate-r1"]["status"] = {
        "conditions": [cond("ReplicasReady", "False", "HydrationFailed", "gpu-a: Job failed")]
    }
    sim.reconcile()
    assert sim.status["verdict"]["reason"] == "CandidateFailed"
    assert "gpu-a: Job failed" in sim.status["verdict"]["summary"]


def test_candidate_waiting_for_capacity_is_not_failed(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.reconcile()
    sim.observed["candidate-r1"]["status"] = {
        "conditions": [cond("ReplicasScheduled", "False", "InsufficientCapacity", "0 of 1")]
    }
    sim.reconcile()
    assert sim.phase == "Deploying"
    assert "InsufficientCapacity" in sim.conditions()["Verdict"]["message"]


CANDIDATE_FIELD = "review 17n: the experiment names its own field, spec.candidate.*"
STOOD = "review 17n: a TimedOut summary says where the run stood (the candidate's last report)"
CACHE_GONE = (
    "ModelCache ml-team/qwen-cache (spec.template.spec.modelCacheRef) does not exist; "
    "no replica is placed until it does"
)


@dataclass(frozen=True)
class Waits:
    """What the candidate reports while it waits: its ``ReplicasScheduled=False`` reason
    and message (as the ModelDeployment composer writes them)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Stood:
    """A fragment of the Deploying message and of the TimedOut summary."""

    deploying: str
    summary: str


CANDIDATE_WAITS: list[Case[Waits, Stood]] = [
    Case("cache deleted after admission", f"{CANDIDATE_FIELD}; {STOOD}",
         Waits("CacheNotFound", CACHE_GONE),
         Stood("ReplicasScheduled: CacheNotFound ModelCache ml-team/qwen-cache "
               "(spec.candidate.modelCacheRef) does not exist",
               "the candidate never became Ready within 10m (deadline 2026-11-29T09:10:00Z); "
               "the candidate last reported: 0/1 replicas ready; ReplicasScheduled: "
               "CacheNotFound ModelCache ml-team/qwen-cache (spec.candidate.modelCacheRef) "
               "does not exist")),
    Case("no capacity", STOOD,
         Waits("InsufficientCapacity", "0 of 1 replicas fit: gpu-a: no device matches"),
         Stood("ReplicasScheduled: InsufficientCapacity 0 of 1",
               "the candidate last reported: 0/1 replicas ready; ReplicasScheduled: "
               "InsufficientCapacity 0 of 1 replicas fit: gpu-a: no device matches")),
    Case("no matching cluster", f"{CANDIDATE_FIELD}; {STOOD}",
         Waits("NoMatchingClusters",
               "no InferenceCluster matches spec.template.spec.clusterSelector"),
         Stood("NoMatchingClusters no InferenceCluster matches spec.candidate.clusterSelector",
               "ReplicasScheduled: NoMatchingClusters no InferenceCluster matches "
               "spec.candidate.clusterSelector")),
]  # fmt: skip


@table(CANDIDATE_WAITS)
def test_a_waiting_candidate_is_reported_in_the_experiments_terms(
    sim_factory, clock: Clock, case: Case[Waits, Stood]
) -> None:
    sim = sim_factory(spec(timeout="10m"))
    sim.reconcile()
    assert sim.phase == "Deploying"
    sim.observed["candidate-r1"]["status"] = {
        "replicas": {"total": 1, "ready": 0},
        "conditions": [cond("ReplicasScheduled", "False", case.inputs.reason, case.inputs.message)],
    }
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Deploying", sim.status
    msg = sim.conditions()["Verdict"]["message"]
    assert case.want.deploying in msg and "spec.template.spec" not in msg, msg
    # An unchanged world: the same status and conditions.
    before = (copy.deepcopy(sim.status), sim.conditions())
    clock.advance(60)
    sim.reconcile()
    assert (sim.status, sim.conditions()) == before
    clock.advance(600)
    sim.reconcile()
    v = sim.status["verdict"]
    assert (sim.phase, v["reason"]) == ("Failed", "TimedOut"), sim.status
    assert case.want.summary in v["summary"] and "spec.template.spec" not in v["summary"], v


def test_a_candidate_failure_names_the_experiments_field(sim_factory, clock: Clock) -> None:
    """Review 17n: the candidate's message names its own field (spec.template.spec...);
    the verdict names the experiment's, where the user writes it."""
    sim = sim_factory()
    sim.reconcile()
    field = "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
    sim.observed["candidate-r1"]["status"] = {
        "conditions": [cond("ReplicasScheduled", "False", "InvalidDeviceSelector",
                            f"{field}: no such key: memory")]
    }  # fmt: skip
    clock.advance(60)
    sim.reconcile()
    v = sim.status["verdict"]
    assert v["reason"] == "CandidateFailed", sim.status
    assert (
        "InvalidDeviceSelector: spec.candidate.engines[0].members[0].nodeSelector.devices[0]"
        ".selectors[0].cel: no such key: memory"
    ) in v["summary"], v


USER_TEXT = (
    "review 17h C: only the candidate's field paths are renamed; what the user wrote, quoted "
    "(function.core.errors.quoted) or a name, is left as written"
)
RENAMED = "the candidate's field paths are named as the experiment's, spec.candidate.*"
SEL = "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
CAND_SEL = "spec.candidate.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
EXPR = 'device.attributes["x.example.com"].path == "spec.template.spec"'
REWRITES: list[Case[str, str]] = [
    Case("a string literal in the user's CEL selector", USER_TEXT,
         f"{SEL}: CEL selector {EXPR!r} does not compile: ...",
         f"{CAND_SEL}: CEL selector {EXPR!r} does not compile: ..."),
    Case("a path in the user's CEL selector", USER_TEXT,
         f"{SEL}: CEL selector {'x == spec.template.spec.a'!r} does not compile: ...",
         f"{CAND_SEL}: CEL selector {'x == spec.template.spec.a'!r} does not compile: ..."),
    Case("a quote inside the quoted selector", USER_TEXT,
         f"{SEL}: CEL selector {'it' + chr(39) + 's (spec.template.spec.a)'!r} ...",
         f"{CAND_SEL}: CEL selector {'it' + chr(39) + 's (spec.template.spec.a)'!r} ..."),
    Case("a ModelCache named like the path", USER_TEXT,
         "ModelCache ml-team/spec.template.spec.x (spec.template.spec.modelCacheRef) "
         "does not exist",
         "ModelCache ml-team/spec.template.spec.x (spec.candidate.modelCacheRef) does not exist"),
    Case("a path after an apostrophe", RENAMED,
         "the candidate's spec.template.spec.engines[0] isn't 'x'",
         "the candidate's spec.candidate.engines[0] isn't 'x'"),
    Case("the function's own paths", RENAMED,
         "no InferenceCluster matches spec.template.spec.clusterSelector; "
         "spec.template.spec[0]",
         "no InferenceCluster matches spec.candidate.clusterSelector; spec.candidate[0]"),
    Case("a longer path is another object's", RENAMED,
         "spec.jobTemplate.spec.template.spec.containers: is empty",
         "spec.jobTemplate.spec.template.spec.containers: is empty"),
]  # fmt: skip


@table(REWRITES)
def test_the_rewrite_leaves_quoted_user_text_alone(case: Case[str, str]) -> None:
    assert in_experiment_terms(case.inputs) == case.want


@dataclass(frozen=True)
class CacheCase:
    """The spec's candidate cache and gate, the ModelCaches that exist."""

    candidate_cache: str
    gate: dict[str, Any] | None
    caches: list[dict[str, Any]]


@dataclass(frozen=True)
class Gated:
    """The reason the run is blocked, a fragment of its message, the ArtifactGate reason."""

    reason: str
    fragment: str
    gate_reason: str


CANDIDATE_CACHE_MISSING = (
    "review 17n: a candidate ModelCache that does not exist blocks before admission, as the "
    "gate's does: no candidate claims a GPU it cannot place, the clock has not started"
)
CANDIDATE_CACHES: list[Case[CacheCase, Gated]] = [
    Case("typo, no gate", CANDIDATE_CACHE_MISSING,
         CacheCase("qwen-cach", None, [cache()]),
         Gated("CandidateCacheNotFound",
               "ModelCache ml-team/qwen-cach (spec.candidate.modelCacheRef) not found",
               "NoArtifactGate")),
    Case("typo, the gate open on another cache", CANDIDATE_CACHE_MISSING,
         CacheCase("qwen-cach", {"modelCacheRef": {"name": "qwen-cache"}}, [cache()]),
         Gated("CandidateCacheNotFound",
               "ModelCache ml-team/qwen-cach (spec.candidate.modelCacheRef) not found",
               "ArtifactGateOpen")),
    Case("no cache yet, no gate", CANDIDATE_CACHE_MISSING,
         CacheCase("qwen-cache", None, []),
         Gated("CandidateCacheNotFound",
               "ModelCache ml-team/qwen-cache (spec.candidate.modelCacheRef) not found",
               "NoArtifactGate")),
]  # fmt: skip


@table(CANDIDATE_CACHES)
def test_a_missing_candidate_cache_blocks_until_it_exists(
    sim_factory, clock: Clock, case: Case[CacheCase, Gated]
) -> None:
    got, want = case.inputs, case.want
    s = spec(candidate=candidate(modelCacheRef={"name": got.candidate_cache}))
    if got.gate is not None:
        s["artifactGate"] = got.gate
    sim = sim_factory(s, [cronjob(), inference_cluster(CLUSTER), *got.caches])
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Blocked", want.reason), sim.status
    c = sim.conditions()
    assert (c["Runnable"]["status"], c["Runnable"]["reason"]) == ("False", want.reason)
    assert want.fragment in c["Runnable"]["message"], c["Runnable"]["message"]
    assert c["ArtifactGate"]["reason"] == want.gate_reason, c["ArtifactGate"]
    assert not sim.observed and "candidate" not in sim.status
    assert any(s_ == "Warning" and want.fragment in m for s_, m in results(sim.rsp))
    # A wait, not a verdict: the same status while the cache is missing (one event)...
    before = (copy.deepcopy(sim.status), sim.conditions())
    clock.advance(3600)
    sim.reconcile()
    assert (sim.status, sim.conditions()) == before and results(sim.rsp) == []
    # ...and the run is admitted once the cache exists, its clock starting then.
    sim.world.append(cache(name=got.candidate_cache))
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Deploying" and "candidate-r1" in sim.observed, sim.status
    assert sim.conditions()["Runnable"]["reason"] == "Admitted"
    assert sim.status["candidate"]["createdAt"] == format_time(clock.now)


ADMITTED_KEEPS = (
    "a run whose candidate or gauntlet Job exists was admitted: a missing candidate cache "
    "never drops them (fuzz, merge 17 case 1218); the candidate waits for its cache and the "
    "deadline bounds the run"
)


@dataclass(frozen=True)
class Lost:
    """How far the run got, and what of its status is gone when its cache is deleted."""

    evaluating: bool
    status: str  # "kept", "lost" (no status at all), "unadmitted" (no status.candidate)


@dataclass(frozen=True)
class Goes:
    """The run's phase afterwards and the children it keeps."""

    phase: str
    kept: tuple[str, ...]


CACHE_GONE_MID_RUN: list[Case[Lost, Goes]] = [
    Case("admitted, cache deleted while deploying", ADMITTED_KEEPS,
         Lost(False, "kept"), Goes("Deploying", ("candidate-r1",))),
    Case("admitted, cache deleted while evaluating", ADMITTED_KEEPS,
         Lost(True, "kept"), Goes("Evaluating", ("candidate-r1", "gauntlet-r1"))),
    Case("status lost while deploying", ADMITTED_KEEPS,
         Lost(False, "lost"), Goes("Deploying", ("candidate-r1",))),
    Case("status lost while evaluating", ADMITTED_KEEPS,
         Lost(True, "lost"), Goes("Evaluating", ("candidate-r1", "gauntlet-r1"))),
    Case("admission not recorded while evaluating", ADMITTED_KEEPS,
         Lost(True, "unadmitted"), Goes("Evaluating", ("candidate-r1", "gauntlet-r1"))),
]  # fmt: skip


@table(CACHE_GONE_MID_RUN)
def test_a_missing_candidate_cache_never_drops_a_running_runs_children(
    sim_factory, clock: Clock, case: Case[Lost, Goes]
) -> None:
    got, want = case.inputs, case.want
    sim = sim_factory()
    if got.evaluating:
        sim.to_evaluating()
    else:
        sim.reconcile()
        sim.reconcile()  # the candidate is observed
        assert sim.phase == "Deploying", sim.status
    sim.remove("ModelCache", "qwen-cache")
    if got.status == "lost":
        del sim.xr["status"]
    elif got.status == "unadmitted":
        sim.xr["status"].pop("candidate")
    clock.advance(60)
    sim.reconcile()
    assert set(want.kept) <= set(desired(sim.rsp)), sorted(desired(sim.rsp))
    assert sim.phase == want.phase, sim.status
    assert sim.conditions()["Runnable"]["reason"] == "Admitted", sim.conditions()
    # A fixed point in an unchanged world.
    before = (copy.deepcopy(sim.status), sim.conditions())
    sim.reconcile()
    assert (sim.status, sim.conditions()) == before
    assert set(want.kept) <= set(desired(sim.rsp)), sorted(desired(sim.rsp))


HELD_UNADMITTED = (
    "bad input never drops children that exist: a run whose candidate or gauntlet Job is "
    "observed (its admission not recorded in status) is held, as a held edit is, when its "
    "spec cannot start it"
)


def _templateref_typo(sim: Sim) -> None:
    sim.xr["spec"]["gauntlet"]["templateRef"]["name"] = "lm-evl"


def _forbidden_template(sim: Sim) -> None:
    sim.xr["spec"]["gauntlet"]["templateRef"]["name"] = "lm-eval-host"
    sim.world.append(_forbidden_cronjob("lm-eval-host"))


def _gate_on_a_missing_cache(sim: Sim) -> None:
    sim.xr["spec"]["artifactGate"] = {"modelCacheRef": {"name": "qwen-cahce"}}


def _cronjob_deleted(sim: Sim) -> None:
    sim.remove("CronJob", "lm-eval")


def _gated_cache_deleted(sim: Sim) -> None:
    sim.remove("ModelCache", "qwen-cache")


@dataclass(frozen=True)
class Unadmitted:
    """How far the run got, what of its status is gone, the bad input then (in the spec
    or the world), and whether the spec has an artifact gate from the start."""

    evaluating: bool
    status: str  # "lost" (no status at all), "unadmitted" (no status.candidate)
    bad: Callable[[Sim], None]
    gated: bool = False


@dataclass(frozen=True)
class Held:
    """The hold's reason and a fragment of its Runnable message."""

    reason: str
    fragment: str


TYPO = "CronJob ml-team/lm-evl (spec.gauntlet.templateRef) not found"
GONE = "CronJob ml-team/lm-eval (spec.gauntlet.templateRef) not found"
HELD_WHEN_UNADMITTED: list[Case[Unadmitted, Held]] = [
    Case("templateRef typo, status lost while deploying", HELD_UNADMITTED,
         Unadmitted(False, "lost", _templateref_typo), Held("TemplateNotFound", TYPO)),
    Case("templateRef typo, status lost while evaluating", HELD_UNADMITTED,
         Unadmitted(True, "lost", _templateref_typo), Held("TemplateNotFound", TYPO)),
    Case("templateRef typo, admission not recorded while evaluating", HELD_UNADMITTED,
         Unadmitted(True, "unadmitted", _templateref_typo), Held("TemplateNotFound", TYPO)),
    Case("CronJob deleted, status lost while evaluating", HELD_UNADMITTED,
         Unadmitted(True, "lost", _cronjob_deleted), Held("TemplateNotFound", GONE)),
    Case("CronJob deleted, admission not recorded while evaluating", HELD_UNADMITTED,
         Unadmitted(True, "unadmitted", _cronjob_deleted), Held("TemplateNotFound", GONE)),
    Case("forbidden CronJob, status lost while evaluating", HELD_UNADMITTED,
         Unadmitted(True, "lost", _forbidden_template),
         Held("TemplateInvalid", "spec.jobTemplate.spec.template.spec.hostPID")),
    Case("gate on a missing cache, status lost while deploying", HELD_UNADMITTED,
         Unadmitted(False, "lost", _gate_on_a_missing_cache),
         Held("ArtifactCacheNotFound", "qwen-cahce")),
    Case("gate on a missing cache, status lost while evaluating", HELD_UNADMITTED,
         Unadmitted(True, "lost", _gate_on_a_missing_cache),
         Held("ArtifactCacheNotFound", "qwen-cahce")),
    Case("gated cache deleted, admission not recorded while evaluating", HELD_UNADMITTED,
         Unadmitted(True, "unadmitted", _gated_cache_deleted, gated=True),
         Held("ArtifactCacheNotFound", "ml-team/qwen-cache")),
]  # fmt: skip


@table(HELD_WHEN_UNADMITTED)
def test_bad_input_holds_a_run_whose_children_exist_without_its_admission(
    sim_factory, clock: Clock, case: Case[Unadmitted, Held]
) -> None:
    got, want = case.inputs, case.want
    sim = _run_one(sim_factory, got)
    before = copy.deepcopy(sim.observed)
    original, world = copy.deepcopy(sim.xr["spec"]), list(sim.world)
    sim.xr["spec"] = copy.deepcopy(original)
    got.bad(sim)
    _lose_admission(sim, got)
    clock.advance(60)
    sim.reconcile()
    assert set(desired(sim.rsp)) == set(before), sorted(desired(sim.rsp))
    for k, obj in before.items():
        assert sim.observed[k]["spec"] == obj["spec"], k
    assert (sim.phase, sim.status["reason"]) == ("Blocked", want.reason), sim.status
    runnable = sim.conditions()["Runnable"]
    assert runnable["reason"] == want.reason and want.fragment in runnable["message"], runnable
    assert "keeps its candidate and gauntlet Job" in runnable["message"], runnable
    # A fixed point in an unchanged world.
    status_before = (copy.deepcopy(sim.status), sim.conditions())
    clock.advance(30)
    sim.reconcile()
    assert (sim.status, sim.conditions()) == status_before
    assert set(desired(sim.rsp)) == set(before), sorted(desired(sim.rsp))
    for k, obj in before.items():
        assert sim.observed[k]["spec"] == obj["spec"], k
    # The input fixed (the spec written back, the world restored): the same run is
    # admitted again, its children kept.
    sim.xr["spec"], sim.world = original, world
    clock.advance(30)
    sim.reconcile()
    assert sim.conditions()["Runnable"]["reason"] == "Admitted", sim.conditions()
    assert sim.status["run"] == RUN1, sim.status
    assert set(before) <= set(sim.observed), sorted(sim.observed)


def _run_one(sim_factory: Any, got: Unadmitted) -> Sim:
    """Run 1 as far as ``got`` says: deploying (its candidate observed) or evaluating."""
    gate = {"modelCacheRef": {"name": "qwen-cache"}}
    sim = sim_factory(spec(artifactGate=gate) if got.gated else None)
    if got.evaluating:
        sim.to_evaluating()
    else:
        sim.reconcile()
        sim.reconcile()  # the candidate is observed
        assert sim.phase == "Deploying", sim.status
    return sim


def _lose_admission(sim: Sim, got: Unadmitted) -> None:
    """The status lost whole, or only the run's admission record."""
    if got.status == "lost":
        del sim.xr["status"]
    else:
        sim.xr["status"].pop("candidate")


def _unadmitted_and_held(sim_factory: Any, got: Unadmitted, clock: Clock) -> Sim:
    """Run 1 as far as ``got`` says, its status lost or unadmitted, held by ``got.bad``."""
    sim = _run_one(sim_factory, got)
    got.bad(sim)
    _lose_admission(sim, got)
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Blocked", sim.status
    return sim


HELD_UNADMITTED_BOUNDED = (
    "a run held without its admission recorded is still a bounded canary: its deadline is "
    "spec.timeout after its oldest child's metadata.creationTimestamp (an admitted run's is "
    "spec.timeout after status.candidate.createdAt); then it ends TimedOut and its children "
    "go as an admitted run's do (the candidate released, the Job kept as evidence)"
)
# The children are created at NOW (the harness's clock) and the timeout is 30m.
CHILDREN_DEADLINE = NOW + datetime.timedelta(minutes=30)
WITHIN = f"within 30m (deadline {format_time(CHILDREN_DEADLINE)})"


@dataclass(frozen=True)
class TimesOut:
    """A fragment of the TimedOut verdict's summary, and whether the gauntlet Job stays
    as evidence."""

    fragment: str
    evidence: bool


HELD_UNADMITTED_DEADLINES: list[Case[Unadmitted, TimesOut]] = [
    Case("templateRef typo, status lost while deploying", HELD_UNADMITTED_BOUNDED,
         Unadmitted(False, "lost", _templateref_typo),
         TimesOut(f"the candidate never became Ready {WITHIN}", False)),
    Case("templateRef typo, status lost while evaluating", HELD_UNADMITTED_BOUNDED,
         Unadmitted(True, "lost", _templateref_typo),
         TimesOut(f"the gauntlet did not finish {WITHIN}", True)),
    Case("CronJob deleted, admission not recorded while evaluating", HELD_UNADMITTED_BOUNDED,
         Unadmitted(True, "unadmitted", _cronjob_deleted),
         TimesOut(f"the gauntlet did not finish {WITHIN}", True)),
    Case("gate on a missing cache, status lost while deploying", HELD_UNADMITTED_BOUNDED,
         Unadmitted(False, "lost", _gate_on_a_missing_cache),
         TimesOut(f"the candidate never became Ready {WITHIN}", False)),
    Case("gated cache deleted, admission not recorded while evaluating", HELD_UNADMITTED_BOUNDED,
         Unadmitted(True, "unadmitted", _gated_cache_deleted, gated=True),
         TimesOut(f"the gauntlet did not finish {WITHIN}", True)),
]  # fmt: skip


@table(HELD_UNADMITTED_DEADLINES)
def test_a_run_held_without_its_admission_ends_at_its_deadline(
    sim_factory, clock: Clock, case: Case[Unadmitted, TimesOut]
) -> None:
    got, want = case.inputs, case.want
    sim = _unadmitted_and_held(sim_factory, got, clock)
    held = set(sim.observed)
    runnable = sim.conditions()["Runnable"]
    assert f"or its deadline {format_time(CHILDREN_DEADLINE)} passes" in runnable["message"]
    # Held, and a fixed point (no "now" in status), until the deadline...
    before = (copy.deepcopy(sim.status), sim.conditions())
    clock.now = CHILDREN_DEADLINE - datetime.timedelta(seconds=1)
    sim.reconcile()
    assert (sim.status, sim.conditions()) == before and set(sim.observed) == held
    assert sim.rsp.meta.ttl.seconds <= 1, sim.rsp.meta.ttl  # called again at the deadline
    # ...which ends it as an admitted run's deadline does.
    clock.now = CHILDREN_DEADLINE
    sim.reconcile()
    verdict = sim.status["verdict"]
    assert (sim.phase, verdict["reason"]) == ("Failed", "TimedOut"), sim.status
    assert want.fragment in verdict["summary"], verdict
    # The run was admitted (it has a verdict): its gate is not "waiting for Crossplane".
    gate = sim.conditions()["ArtifactGate"]
    assert "waiting for Crossplane" not in gate["message"], gate
    assert "candidate-r1" not in desired(sim.rsp), sorted(desired(sim.rsp))
    if want.evidence:
        job = desired(sim.rsp)["gauntlet-r1"]
        assert job["spec"]["managementPolicies"] == ["Observe", "Delete"], job["spec"]
    else:
        assert "gauntlet-r1" not in desired(sim.rsp)
    # Terminal, and a fixed point.
    after = (copy.deepcopy(sim.status), sim.conditions())
    clock.advance(3600)
    sim.reconcile()
    assert (sim.status, sim.conditions()) == after


@pytest.mark.parametrize(
    "created",
    [None, "yesterday", "9999-12-31T23:59:59Z"],
    ids=["absent", "not a timestamp", "deadline past year 9999"],
)
def test_a_run_held_without_its_admission_and_no_creation_time_is_held(
    sim_factory, clock: Clock, created: str | None
) -> None:
    """No child's creationTimestamp to count from (the API server always sets one): the
    run stays held as before, no deadline said, no internal error."""
    sim = _unadmitted_and_held(sim_factory, Unadmitted(True, "lost", _templateref_typo), clock)
    for obs in sim.observed.values():
        obs["metadata"]["creationTimestamp"] = created
    clock.advance(7 * 24 * 3600)
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Blocked", "TemplateNotFound"), sim.status
    assert "or its deadline" not in sim.conditions()["Runnable"]["message"]
    assert {"candidate-r1", "gauntlet-r1"} <= set(desired(sim.rsp))


def test_a_gauntlet_that_finishes_while_held_without_admission_is_recorded(
    sim_factory, clock: Clock
) -> None:
    """As for a held edit: a run held without its admission recorded is decided by its
    gauntlet Job finishing before its deadline (a result is never dropped)."""
    sim = _unadmitted_and_held(sim_factory, Unadmitted(True, "lost", _templateref_typo), clock)
    sim.job_finished(True, clock.advance(60))
    sim.reconcile()
    verdict = sim.status["verdict"]
    assert (sim.phase, verdict["reason"]) == ("Succeeded", PASSED), sim.status
    assert verdict["completedAt"] == format_time(clock.now)
    assert "candidate-r1" not in sim.observed and "gauntlet-r1" in sim.observed


RUN_N_RECOGNISED = (
    "children of run N > 1 observed with no status are the current run (the highest run "
    "number observed): losing status never deletes a running evaluation nor starts a "
    "run on top of it"
)


@pytest.mark.parametrize(
    ("key", "number"),
    [("candidate-r1", 1), ("gauntlet-r12", 12), ("candidate-r1000000000", 10**9),
     ("candidate-r1000000001", None), ("candidate-r0", None), ("gauntlet-r01", None),
     ("candidate-r", None), ("cache-usage", None), ("candidate-r2x", None)],
)  # fmt: skip
def test_a_composed_resource_name_gives_its_run_number(key: str, number: int | None) -> None:
    """Only the names candidate_key and job_key write, for a run number status may hold."""
    assert key_run_number(key) == number
    if number is not None:
        assert key in (candidate_key(number), job_key(number))


LONG = "x" * 63  # its run names' readable head is truncated before "-r<N>"


@pytest.mark.parametrize(
    ("experiment", "run", "guesses", "number"),
    [(NAME, exp.run_name(NAME, 2), (), 2), (NAME, exp.run_name(NAME, 1), (), 1),
     (NAME, exp.run_name(NAME, 10**9), (), 10**9),
     (LONG, exp.run_name(LONG, 7), (7,), 7), (LONG, exp.run_name(LONG, 7), (3,), None),
     (NAME, exp.run_name("other", 2), (2,), None), (NAME, RUN2[:-1] + "0", (2,), None),
     (NAME, "r2", (2,), None), (NAME, "", (1,), None)],
    ids=["run 2", "run 1", "the last number", "long name, guessed", "long name, wrong guess",
         "another experiment's", "hash changed", "not a run name", "empty"],
)  # fmt: skip
def test_a_run_name_gives_its_run_number(
    experiment: str, run: str, guesses: tuple[int, ...], number: int | None
) -> None:
    """status.run read back (status.runNumber lost): only a name run_name gives for this
    experiment and the number (from the name's head, or guessed) is one of its runs."""
    assert run_number(experiment, run, *guesses) == number


def _run2_deploying(sim: Sim, clock: Clock) -> None:
    sim.reconcile()
    sim.update_spec(timeout="40m")  # run 2
    clock.advance(60)
    sim.reconcile()
    sim.reconcile()  # the candidate is observed
    assert (sim.status["run"], sim.phase) == (RUN2, "Deploying"), sim.status


def _run2_evaluating(sim: Sim, clock: Clock) -> None:
    sim.reconcile()
    sim.update_spec(timeout="40m")  # run 2
    clock.advance(60)
    sim.to_evaluating(2)


def _run2_after_a_pass(sim: Sim, clock: Clock) -> None:
    pass_run(sim, clock, 1)
    clock.advance(3600)  # repeatAfter 1h
    sim.to_evaluating(2)
    assert "gauntlet-r1" in sim.observed  # run 1's evidence


def _run2_passed_after_a_pass(sim: Sim, clock: Clock) -> None:
    pass_run(sim, clock, 1)
    clock.advance(24 * 3600)  # repeatAfter 24h
    pass_run(sim, clock, 2)
    assert {"gauntlet-r1", "gauntlet-r2"} <= set(sim.observed), sorted(sim.observed)


def _run2_timed_out_without_a_job(sim: Sim, clock: Clock) -> None:
    """Run 2 ends TimedOut with its candidate never Ready: released, no Job ever created;
    its verdict is in status.verdict (archived only when run 3 starts)."""
    pass_run(sim, clock, 1)
    clock.advance(3600)  # repeatAfter 1h
    sim.reconcile()
    sim.reconcile()  # the candidate is observed, never Ready
    assert sim.phase == "Deploying", sim.status
    clock.advance(31 * 60)  # past the 30m timeout
    sim.reconcile()
    sim.reconcile()  # the released candidate is gone
    assert (sim.phase, sim.status["verdict"]["reason"]) == ("Failed", "TimedOut"), sim.status
    assert set(sim.observed) == {"gauntlet-r1"}, sorted(sim.observed)


def _run2_evaluating_20m_after_a_pass(sim: Sim, clock: Clock) -> None:
    _run2_after_a_pass(sim, clock)
    clock.advance(20 * 60)
    sim.reconcile()
    assert sim.phase == "Evaluating", sim.status


@dataclass(frozen=True)
class LaterRun:
    """How run 2 got where it is (spec fields and steps), and bad input after it lost its
    status (None: none)."""

    setup: Callable[[Sim, Clock], None]
    spec_fields: tuple[tuple[str, Any], ...] = ()
    bad: Callable[[Sim], None] | None = None
    lost: tuple[str, ...] = ()  # the status fields lost; () is the whole status


@dataclass(frozen=True)
class Recognised:
    """The phase (and reason) afterwards, and the composed resources desired."""

    phase: str
    reason: str
    kept: tuple[str, ...]
    event: str = ""  # a fragment of a Warning event of the call after the loss


# Review 19c F3: an earlier run's evidence Job was deleted when the history was lost.
EARLIER_EVIDENCE_KEPT = (
    "an observed child of a run status does not record (its history record lost with the "
    "status) is kept as observed, a gauntlet Job as evidence ([Observe, Delete]): losing "
    "the status deletes nothing, and a Warning says so"
)
# Review 19c F5: a decided run was started again when only status.runNumber was lost.
DECIDED_RUN_STAYS_DECIDED = (
    "with only status.runNumber lost, the run status.run names (checked against its "
    "number) goes on as status records it: a decided run keeps its verdict and nothing "
    "is deployed again"
)
# Review 19c F6: a run re-admitted after its status was lost got a deadline from now.
SAME_DEADLINE = (
    "a run whose admission is lost is admitted again with the deadline it had: createdAt "
    "is its oldest child's metadata.creationTimestamp (an unbounded canary otherwise: "
    "every loss moved the deadline later)"
)
KEPT_AS_OBSERVED = "gauntlet-r1 (run 1) kept as observed"


LATER_RUNS_LOSING_STATUS: list[Case[LaterRun, Recognised]] = [
    Case("run 2 deploying", RUN_N_RECOGNISED, LaterRun(_run2_deploying),
         Recognised("Deploying", "Deploying", ("candidate-r2",))),
    Case("run 2 evaluating", RUN_N_RECOGNISED, LaterRun(_run2_evaluating),
         Recognised("Evaluating", "Evaluating", ("candidate-r2", "gauntlet-r2"))),
    Case("run 2 evaluating after run 1 passed", f"{RUN_N_RECOGNISED}; {EARLIER_EVIDENCE_KEPT}",
         LaterRun(_run2_after_a_pass, (("repeatAfter", "1h"),)),
         Recognised("Evaluating", "Evaluating", ("candidate-r2", "gauntlet-r2", "gauntlet-r1"),
                    KEPT_AS_OBSERVED)),
    Case("run 2 evaluating, its CronJob deleted", RUN_N_RECOGNISED,
         LaterRun(_run2_evaluating, bad=_cronjob_deleted),
         Recognised("Blocked", "TemplateNotFound", ("candidate-r2", "gauntlet-r2"))),
    Case("run 2 evaluating, only runNumber lost", RUN_N_RECOGNISED + " (run 1's evidence "
         "Job is a run the history records, not the current one)",
         LaterRun(_run2_after_a_pass, (("repeatAfter", "1h"),), lost=("runNumber",)),
         Recognised("Evaluating", "Evaluating", ("candidate-r2", "gauntlet-r2", "gauntlet-r1"))),
    Case("run 2 passed after run 1 passed", EARLIER_EVIDENCE_KEPT,
         LaterRun(_run2_passed_after_a_pass, (("repeatAfter", "24h"),)),
         Recognised("Succeeded", PASSED, ("gauntlet-r2", "gauntlet-r1"), KEPT_AS_OBSERVED)),
    Case("run 2 timed out without a Job, only runNumber lost", DECIDED_RUN_STAYS_DECIDED,
         LaterRun(_run2_timed_out_without_a_job, (("repeatAfter", "1h"),), lost=("runNumber",)),
         Recognised("Failed", "TimedOut", ("gauntlet-r1",))),
    Case("run 2 timed out without a Job, runNumber and history lost",
         f"{DECIDED_RUN_STAYS_DECIDED} (the number from status.run's name); "
         f"{EARLIER_EVIDENCE_KEPT}",
         LaterRun(_run2_timed_out_without_a_job, (("repeatAfter", "1h"),),
                  lost=("runNumber", "history")),
         Recognised("Failed", "TimedOut", ("gauntlet-r1",), KEPT_AS_OBSERVED)),
    Case("run 2 evaluating for 20m, only runNumber lost", SAME_DEADLINE,
         LaterRun(_run2_evaluating_20m_after_a_pass, (("repeatAfter", "1h"),),
                  lost=("runNumber",)),
         Recognised("Evaluating", "Evaluating", ("candidate-r2", "gauntlet-r2", "gauntlet-r1"))),
    Case("run 2 evaluating for 20m, the whole status lost",
         f"{SAME_DEADLINE}; {EARLIER_EVIDENCE_KEPT}",
         LaterRun(_run2_evaluating_20m_after_a_pass, (("repeatAfter", "1h"),)),
         Recognised("Evaluating", "Evaluating", ("candidate-r2", "gauntlet-r2", "gauntlet-r1"),
                    KEPT_AS_OBSERVED)),
]  # fmt: skip


@table(LATER_RUNS_LOSING_STATUS)
def test_a_later_run_is_recognised_when_status_is_lost(
    sim_factory, clock: Clock, case: Case[LaterRun, Recognised]
) -> None:
    got, want = case.inputs, case.want
    sim = sim_factory(spec(**dict(got.spec_fields)))
    got.setup(sim, clock)
    assert sim.status["runNumber"] == 2, sim.status
    if got.bad is not None:
        got.bad(sim)
    was = copy.deepcopy(sim.status)
    observed = set(sim.observed)
    jobs_before = {
        key: obs["spec"]["forProvider"]["manifest"]["spec"]["activeDeadlineSeconds"]
        for key, obs in sim.observed.items()
        if key.startswith("gauntlet-")
    }
    for field in got.lost or tuple(sim.xr["status"]):
        del sim.xr["status"][field]
    clock.advance(60)
    sim.reconcile()
    assert (sim.status["run"], sim.status["runNumber"]) == (RUN2, 2), sim.status
    assert (sim.phase, sim.status["reason"]) == (want.phase, want.reason), sim.status
    composed = set(desired(sim.rsp))
    assert set(want.kept) <= composed and "candidate-r1" not in composed, sorted(composed)
    # Nothing observed is deleted by the loss (a decided run's candidate was gone before).
    assert observed <= composed, sorted(observed - composed)
    for key in composed - {"candidate-r2", "gauntlet-r2"}:  # an earlier run's: evidence
        assert desired(sim.rsp)[key]["spec"]["managementPolicies"] == ["Observe", "Delete"]
    if "candidate-r2" in sim.observed:
        assert sim.observed["candidate-r2"]["metadata"]["name"] == RUN2
    # A verdict recorded stays; a run admitted again keeps its admission and deadline.
    if "verdict" in was and "verdict" not in got.lost and got.lost:
        assert sim.status.get("verdict") == was["verdict"], sim.status
    now = sim.status.get("candidate", {})
    if "deadline" in now:
        assert (now["createdAt"], now["deadline"]) == (
            was["candidate"]["createdAt"], was["candidate"]["deadline"],
        ), (was["candidate"], now)  # fmt: skip
    if "gauntlet-r2" in observed and "gauntlet-r2" in composed:
        # The Job as it runs: its activeDeadlineSeconds counts from the Job's start, so a
        # rebuilt record never shortens it to the time left (the Job would end at once).
        job = desired(sim.rsp)["gauntlet-r2"]["spec"]["forProvider"]["manifest"]
        assert job["spec"]["activeDeadlineSeconds"] == jobs_before["gauntlet-r2"], job["spec"]
    warnings = [r.message for r in sim.rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    if want.event:
        assert [m for m in warnings if want.event in m], warnings
    # A fixed point in an unchanged world.
    before = (copy.deepcopy(sim.status), sim.conditions())
    clock.advance(30)
    sim.reconcile()
    assert (sim.status, sim.conditions()) == before
    assert set(want.kept) <= set(desired(sim.rsp)), sorted(desired(sim.rsp))


# ---- blocked -------------------------------------------------------------------------------


def stale_cache() -> dict[str, Any]:
    c = cache()
    c["status"]["conditions"][0]["observedGeneration"] = 2
    return c


@dataclass(frozen=True)
class GateInputs:
    """``spec.artifactGate`` beyond its modelCacheRef, the candidate, the ModelCaches."""

    gate: dict[str, Any]
    candidate: dict[str, Any]
    caches: list[dict[str, Any]]


@dataclass(frozen=True)
class Closed:
    """The reason the gate stays closed and a fragment its message must contain."""

    reason: str
    fragment: str


NEW_SOURCE = "issue 13: a revision edit never opens the gate on the old hydrations' Ready"

GATE_CASES: list[Case[GateInputs, Closed]] = [
    Case("source-mismatch", "requireSourceMatch: the candidate must load from the gated cache",
         GateInputs({"requireSourceMatch": True}, candidate(modelCacheRef={"name": "other-cache"}),
                    [cache(evidence={"gpu-a": full_evidence(), "gpu-b": full_evidence()})]),
         Closed("ArtifactSourceMismatch", "ml-team/other-cache")),
    Case("not-found", "the gated ModelCache must exist", GateInputs({}, candidate(), []),
         Closed("ArtifactCacheNotFound", "ml-team/qwen-cache")),
    Case("failed", "a failed cluster closes the gate, named with the progress",
         GateInputs({}, candidate(), [cache({"gpu-a": "Ready", "gpu-b": "Failed",
                                             "gpu-c": "Ready"})]),
         Closed("ArtifactCacheFailed", "gpu-b (hydration is Failed); 2/3 clusters ready")),
    Case("not-ready", "every cluster of the footprint must be Ready",
         GateInputs({}, candidate(), [cache({"gpu-a": "Ready", "gpu-b": "Hydrating",
                                             "gpu-c": "Ready"})]),
         Closed("ArtifactCacheNotReady", "2/3 clusters ready; waiting for gpu-b")),
    Case("empty", "an empty footprint is not ready", GateInputs({}, candidate(), [cache({})]),
         Closed("ArtifactCacheNotReady", "0/0 clusters")),
    Case("stale-status", "a status for an older generation describes an older spec",
         GateInputs({}, candidate(), [stale_cache()]),
         Closed("ArtifactCacheNotReady",
                "status is for generation 2, the cache is at generation 3")),
    Case("validation-missing", "requireValidation: every cluster recorded evidence.validatedAt",
         GateInputs({"requireValidation": True}, candidate(),
                    [cache(evidence={"gpu-a": full_evidence(),
                                     "gpu-b": full_evidence(validatedAt="")})]),
         Closed("ArtifactValidationMissing", "on 1 of 2 clusters")),
    Case("digest-missing", "requirePublishedDigest: every cluster recorded commit and digest",
         GateInputs({"requirePublishedDigest": True}, candidate(),
                    [cache(evidence={"gpu-a": full_evidence(), "gpu-b": {"commit": COMMIT}})]),
         Closed("ArtifactDigestMissing", "on 1 of 2 clusters")),
    Case("commit-not-resolved", "requirePublishedDigest: a commit is 40 hex, not a branch",
         GateInputs({"requirePublishedDigest": True}, candidate(),
                    [cache(evidence={"gpu-a": full_evidence(),
                                     "gpu-b": full_evidence(commit="main")})]),
         Closed("ArtifactDigestMissing", "on 1 of 2 clusters")),
    Case("digests-disagree", "requirePublishedDigest: one artifact to certify, not two",
         GateInputs({"requirePublishedDigest": True}, candidate(),
                    [cache(evidence={"gpu-a": full_evidence(),
                                     "gpu-b": full_evidence(digest="sha256:" + "cd" * 32)})]),
         Closed("ArtifactDigestMissing", "recorded different artifacts")),
    Case("revision-edited-status-for-old-source", NEW_SOURCE,
         GateInputs({}, candidate(), [cache(revision="v2", reported_revision="main",
                                            evidence={"gpu-a": full_evidence()})]),
         Closed("ArtifactCacheNotReady", "not Qwen/Qwen2.5-0.5B-Instruct@v2")),
    Case("status-names-no-source", "a status that names no source is not known to describe it",
         GateInputs({}, candidate(), [cache(reported_revision=None)]),
         Closed("ArtifactCacheNotReady", "status describes no source")),
]  # fmt: skip


@table(GATE_CASES)
def test_gate_closed_blocks_without_candidate(sim_factory, case: Case[GateInputs, Closed]) -> None:
    g, want = case.inputs, case.want
    s = spec(
        candidate=g.candidate, artifactGate={"modelCacheRef": {"name": "qwen-cache"}, **g.gate}
    )
    sim = sim_factory(s, [cronjob(), inference_cluster(CLUSTER), *g.caches])
    sim.reconcile()
    assert sim.phase == "Blocked", case.reason
    assert sim.status["reason"] == want.reason
    c = sim.conditions()
    assert c["Runnable"]["status"] == "False" and c["Runnable"]["reason"] == want.reason
    assert want.fragment in c["Runnable"]["message"], c["Runnable"]["message"]
    assert not sim.observed
    assert "candidate" not in sim.status
    assert sim.rsp.meta.ttl.seconds <= 60
    assert any(s_ == "Warning" and want.fragment in m for s_, m in results(sim.rsp))


def test_gate_open_annotates_candidate(sim_factory) -> None:
    gate = {
        "modelCacheRef": {"name": "qwen-cache"},
        "requireValidation": True,
        "requirePublishedDigest": True,
        "requireSourceMatch": True,
    }
    ev = full_evidence(digest="ab" * 32)  # the prefix is optional in evidence
    world = [cronjob(), inference_cluster(CLUSTER), cache(evidence={"gpu-a": ev, "gpu-b": ev})]
    sim = sim_factory(spec(artifactGate=gate), world)
    sim.reconcile()
    assert sim.phase == "Deploying"
    ann = sim.observed["candidate-r1"]["metadata"]["annotations"]
    assert ann["modelplane.ai/gate-cache"] == "qwen-cache"
    assert ann["modelplane.ai/gate-cache-uid"] == "uid-qwen-cache"
    assert ann["modelplane.ai/gate-cache-generation"] == "3"
    assert ann["modelplane.ai/gate-digest"] == DIGEST
    assert ann["modelplane.ai/gate-commit"] == COMMIT
    assert sim.conditions()["ArtifactGate"]["status"] == "True"
    assert sim.status["gate"]["digest"] == DIGEST
    # The gate is an admission check: a later change of the cache does not stop the run,
    # and the annotations keep what opened the gate.
    sim.world[-1] = cache({"gpu-a": "Ready", "gpu-b": "Hydrating"}, generation=4)
    sim.reconcile()
    assert sim.phase == "Deploying"
    assert sim.observed["candidate-r1"]["metadata"]["annotations"] == ann


def test_gate_reads_what_the_modelcache_composer_reports(sim_factory) -> None:
    """The contract end to end: hydration evidence -> ModelCache status -> the gate."""
    clusters: list[Mapping[str, Any]] = [
        inference_cluster("gpu-a", {"gpu": "h100"}),
        inference_cluster("gpu-b", {"gpu": "h100"}),
    ]
    mc = xr("ModelCache", "qwen-cache", cache_spec({"matchLabels": {"gpu": "h100"}}), generation=2)
    tree = Tree(copy.deepcopy(mc), list(clusters))
    tree.step()
    for i, (cluster, body) in enumerate(sorted(tree.desired_hydrations().items())):
        ev = full_evidence(validatedAt=f"2026-11-29T08:0{i}:00Z")
        tree.hydrations[cluster] = observed_hydration(body, "Ready", "ok", evidence=ev)
        if cluster == "gpu-b":
            tree.hydrations[cluster]["status"].pop("evidence")  # gpu-b reported nothing yet
    tree.reconcile_shards()
    rolled = tree.reconcile_cache()
    mc_obs = {**mc, "status": status(rolled)}
    mc_obs["status"]["conditions"] = [
        {"type": t, **c, "lastTransitionTime": "2026-11-29T09:00:00Z"}
        for t, c in conditions(rolled).items()
    ]
    validate_xr(mc_obs)
    gate = {"modelCacheRef": {"name": "qwen-cache"}, "requirePublishedDigest": True}
    sim = sim_factory(spec(artifactGate=gate), [cronjob(), inference_cluster(CLUSTER), mc_obs])
    sim.reconcile()
    assert sim.status["reason"] == "ArtifactDigestMissing"
    assert "on 1 of 2 clusters" in sim.conditions()["Runnable"]["message"]
    # gpu-b reports the same artifact: the gate opens.
    tree.hydrations["gpu-b"]["status"]["evidence"] = full_evidence()
    tree.reconcile_shards()
    rolled = tree.reconcile_cache()
    sim.world[-1] = {**mc, "status": status(rolled)}
    sim.reconcile()
    assert sim.phase == "Deploying"
    assert sim.status["gate"] == {
        "cache": "qwen-cache",
        "uid": "uid-modelcache-qwen-cache",
        "generation": 2,
        "commit": COMMIT,
        "digest": DIGEST,
    }


def test_gate_fixed_retries(sim_factory, clock: Clock) -> None:
    gate = {"modelCacheRef": {"name": "qwen-cache"}}
    sim = sim_factory(spec(artifactGate=gate), [cronjob(), inference_cluster(CLUSTER)])
    sim.reconcile()
    assert sim.status["reason"] == "ArtifactCacheNotFound"
    sim.world.append(cache())
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Deploying" and "candidate-r1" in sim.observed


def test_template_missing_blocks_then_recovers(sim_factory, clock: Clock) -> None:
    sim = sim_factory(spec(), [inference_cluster(CLUSTER), cache()])
    sim.reconcile()
    assert sim.phase == "Blocked" and sim.status["reason"] == "TemplateNotFound"
    assert "ml-team/lm-eval" in sim.conditions()["Runnable"]["message"]
    assert not sim.observed
    sim.world.append(cronjob())
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Deploying"


# ---- a CronJob that breaks after admission holds the run (review 15a #5) ------------

HELD = (
    "review 15a #5: invalid input never shrinks the desired set; an admitted run keeps "
    "its candidate and says why it cannot go on, as for a spec edit"
)
KEPT = "a Job already observed is kept as it was (a running Job is never rebuilt)"


@dataclass(frozen=True)
class Break:
    """How the CronJob breaks (``fault``: ``removed``, or a key of
    :data:`TEMPLATE_FAULTS`) and when (``timing``: ``serving``, the candidate Ready and
    no Job composed yet; ``unobserved``, the Job desired and recorded in
    ``status.gauntlet`` but not observed yet; ``observed``, the Job observed)."""

    fault: str
    timing: str


@dataclass(frozen=True)
class Held:
    phase: str
    reason: str
    field: str


TEMPLATE_FAULTS: dict[str, tuple[tuple[Any, ...], Any]] = {
    "containers-empty": (("containers",), []),
    "hostPID": (("hostPID",), True),
}
CONTAINERS = "spec.jobTemplate.spec.template.spec.containers"
HOST_PID = "spec.jobTemplate.spec.template.spec.hostPID"
TEMPLATE_REF = "spec.gauntlet.templateRef"

TEMPLATE_BREAKS: list[Case[Break, Held]] = [
    Case("containers-empty-serving", HELD, Break("containers-empty", "serving"),
         Held("Blocked", "TemplateInvalid", CONTAINERS)),
    Case("containers-empty-unobserved", HELD, Break("containers-empty", "unobserved"),
         Held("Blocked", "TemplateInvalid", CONTAINERS)),
    Case("containers-empty-observed", KEPT, Break("containers-empty", "observed"),
         Held("Evaluating", "Evaluating", "")),
    Case("hostPID-serving", HELD, Break("hostPID", "serving"),
         Held("Blocked", "TemplateInvalid", HOST_PID)),
    Case("hostPID-unobserved", HELD, Break("hostPID", "unobserved"),
         Held("Blocked", "TemplateInvalid", HOST_PID)),
    Case("removed-serving", HELD, Break("removed", "serving"),
         Held("Blocked", "TemplateNotFound", TEMPLATE_REF)),
    Case("removed-unobserved", HELD, Break("removed", "unobserved"),
         Held("Blocked", "TemplateNotFound", TEMPLATE_REF)),
    Case("removed-observed", KEPT, Break("removed", "observed"),
         Held("Evaluating", "Evaluating", "")),
]  # fmt: skip


def _break_cronjob(sim: Sim, fault: str) -> None:
    sim.remove("CronJob", "lm-eval")
    if fault == "removed":
        return
    cj = cronjob()
    path, value = TEMPLATE_FAULTS[fault]
    put_fault(cj["spec"]["jobTemplate"]["spec"]["template"], path, value)
    sim.world.append(cj)


@table(TEMPLATE_BREAKS)
def test_a_cronjob_broken_after_admission_keeps_the_candidate(
    sim_factory, clock: Clock, case: Case[Break, Held]
) -> None:
    """Found by review 15a #5: an Evaluating run whose Job was not observed yet lost its
    candidate (``Blocked``, "released its candidate", desired ``[]``) when its CronJob
    was edited to ``containers: []``; one reconcile later (the Job observed) the same
    edit kept everything. A CronJob deleted before the Job existed released it too. Now
    the run keeps its candidate in every timing, names the field, stays a fixed point,
    and goes on with the same clock once the CronJob is fixed."""
    sim = sim_factory()
    if case.inputs.timing == "serving":
        sim.reconcile()
        sim.reconcile()  # the candidate is observed (seen)
        sim.candidate_ready()
    else:
        sim.to_evaluating()
        if case.inputs.timing == "unobserved":
            del sim.observed["gauntlet-r1"]  # desired, not created yet
    candidate = copy.deepcopy(sim.observed["candidate-r1"]["spec"])
    created = sim.status["candidate"]["createdAt"]
    _break_cronjob(sim, case.inputs.fault)
    clock.advance(10)
    rsp = sim.reconcile()
    want = case.want
    assert (sim.phase, sim.status["reason"]) == (want.phase, want.reason), sim.status
    assert sim.observed["candidate-r1"]["spec"] == candidate
    assert sim.status["candidate"]["createdAt"] == created
    assert not [r.message for r in rsp.results if "released" in r.message]
    if case.inputs.timing == "observed":
        assert "gauntlet-r1" in sim.observed
        return
    runnable = sim.conditions()["Runnable"]
    assert (runnable["status"], runnable["reason"]) == ("False", want.reason), runnable
    assert want.field in runnable["message"], runnable
    assert f"run {RUN1} keeps its candidate" in runnable["message"], runnable
    verdict = sim.conditions()["Verdict"]
    assert (verdict["status"], verdict["reason"]) == ("Unknown", "Blocked"), verdict
    # A fixed point: the same world gives the same status and children.
    before, kept = copy.deepcopy(sim.status), set(sim.observed)
    clock.advance(10)
    sim.reconcile()
    assert sim.status == before and set(sim.observed) == kept
    # Fixed: the run goes on with the same candidate and clock.
    sim.remove("CronJob", "lm-eval")
    sim.world.append(cronjob())
    clock.advance(10)
    sim.reconcile()
    assert sim.phase == "Evaluating", sim.status
    assert "gauntlet-r1" in sim.observed
    assert sim.status["candidate"]["createdAt"] == created


def test_a_run_held_by_a_broken_cronjob_ends_at_its_deadline(sim_factory, clock: Clock) -> None:
    """The hold is bounded: the run's deadline still decides it (TimedOut, the candidate
    released), naming why the gauntlet never started."""
    sim = sim_factory()
    sim.to_evaluating()
    del sim.observed["gauntlet-r1"]
    _break_cronjob(sim, "containers-empty")
    clock.advance(10)
    sim.reconcile()
    assert sim.phase == "Blocked" and "candidate-r1" in sim.observed
    clock.advance(31 * 60)
    sim.reconcile()
    assert (sim.phase, sim.status["verdict"]["reason"]) == ("Failed", "TimedOut"), sim.status
    assert "could not template its Job (TemplateInvalid)" in sim.status["verdict"]["summary"]
    assert "candidate-r1" not in sim.observed


def test_a_job_running_under_an_edit_held_for_its_cronjob_times_out_as_a_gauntlet(
    sim_factory, clock: Clock
) -> None:
    """A spec edit naming a missing CronJob holds the run (Blocked, TemplateNotFound)
    while its Job runs; at the deadline the verdict says the gauntlet did not finish,
    not that a CronJob could not template it (that is only for a run whose Job was
    never observed, :func:`test_a_run_held_by_a_broken_cronjob_ends_at_its_deadline`)."""
    sim = sim_factory()
    sim.to_evaluating()
    sim.update_spec(gauntlet={**sim.xr["spec"]["gauntlet"], "templateRef": {"name": "lm-evl"}})
    clock.advance(10)
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Blocked", "TemplateNotFound"), sim.status
    assert "gauntlet-r1" in sim.observed
    clock.advance(31 * 60)
    sim.reconcile()
    # Run 1 is decided first (TimedOut, to history), then the edit starts run 2.
    rec = sim.status["history"][-1]
    assert (rec["run"], rec["reason"]) == (RUN1, "TimedOut"), rec
    assert "the gauntlet did not finish" in rec["summary"], rec


def test_template_without_containers_is_invalid(sim_factory) -> None:
    cj = cronjob()
    cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"] = []
    sim = sim_factory(spec(), [cj, inference_cluster(CLUSTER), cache()])
    sim.reconcile()
    assert sim.status["reason"] == "TemplateInvalid"
    assert not sim.observed


@pytest.mark.parametrize(("containers", "refused"), [(200, True), (20, False)])
def test_gauntlet_env_times_containers_past_4mib_is_refused_at_admission(
    sim_factory, containers: int, refused: bool
) -> None:
    """Every entry of spec.gauntlet.env is copied into every container of the CronJob:
    201 containers x 32 KiB would pass Crossplane's 4 MiB response. Refused at admission,
    before a candidate or a Job is built, naming the fields (review 16b F1)."""
    cj = cronjob()
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    extra = [{"name": f"c{i}", "image": "busybox:1.36"} for i in range(containers)]
    pod["containers"] = [pod["containers"][0], *extra]
    s = spec()
    s["gauntlet"]["env"] = [{"name": "BLOB", "value": "x" * 32 * 1024}]
    sim = sim_factory(s, [cj, inference_cluster(CLUSTER), cache()])
    sim.reconcile()
    if not refused:
        assert sim.phase == "Deploying", sim.status
        return
    assert sim.status["reason"] == "TemplateInvalid", sim.status
    msg = sim.conditions()["Runnable"]["message"]
    for words in ("spec.gauntlet.env", f"{containers + 1} containers", "4 MiB", "ConfigMap"):
        assert words in msg, (words, msg)
    assert len(msg) < 1024, msg
    assert not sim.observed


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [pytest.param(p, v, f, id=i) for i, p, v, f in POD_ACCESS_FAULTS],
)
def test_a_gauntlet_template_a_shared_namespace_forbids_is_invalid_naming_it(
    sim_factory, path: tuple[Any, ...], value: Any, field: str
) -> None:
    """What a tenant's pod spec may not hold on the workload cluster's shared namespace,
    in the gauntlet's CronJob: no candidate, no Job; the field is named."""
    cj = cronjob()
    put_fault(cj["spec"]["jobTemplate"]["spec"]["template"], path, value)
    sim = sim_factory(spec(), [cj, inference_cluster(CLUSTER), cache()])
    sim.reconcile()
    assert sim.status["reason"] == "TemplateInvalid", sim.status
    msg = sim.conditions()["Runnable"]["message"]
    assert f"spec.jobTemplate.spec.{field}" in msg, msg
    assert not sim.observed


def _gauntlet_env(*entries: dict[str, str]) -> Any:
    return lambda s: s["gauntlet"]["env"].extend(entries)


INVALID_SPECS: list[Case[Any, str]] = [
    Case("MODELS in the gauntlet env", "the function sets MODELS itself",
         _gauntlet_env({"name": "MODELS", "value": "chat=vllm"}), "spec.gauntlet.env[2].name"),
    Case("33 gauntlet env entries", "at most 32 entries",
         _gauntlet_env(*({"name": f"V{i}", "value": "x"} for i in range(31))), "spec.gauntlet.env"),
    Case("env name not an identifier", "env names are C identifiers",
         _gauntlet_env({"name": "1BAD"}), "spec.gauntlet.env[2].name"),
    Case("repeatAfter 30s", "repeatAfter is at least 1m",
         lambda s: s.update(repeatAfter="30s"), "spec.repeatAfter"),
    Case("history without repeat", "historyLimit needs repeatAfter",
         lambda s: s.update(historyLimit=3), "spec.historyLimit"),
    Case("historyLimit 21", "historyLimit is at most 20",
         lambda s: s.update(repeatAfter="1h", historyLimit=21), "spec.historyLimit"),
    Case("timeout not a duration", "timeout is a Go duration",
         lambda s: s.update(timeout="soon"), "spec.timeout"),
    # A review: past Go's longest duration, an OverflowError (an internal error).
    Case("timeout past 292 years", "at most Go's longest duration",
         lambda s: s.update(timeout="100000000h"), "spec.timeout"),
    Case("repeatAfter past 292 years", "at most Go's longest duration",
         lambda s: s.update(repeatAfter="100000000h"), "spec.repeatAfter"),
    Case("no backend", "the candidate names its backend (the gauntlet's MODELS)",
         lambda s: s["candidate"].pop("backend"), "spec.candidate.backend"),
    # A trial: values the XRD's patterns let through and every replica refused.
    Case("/dev/shm of zero", "the candidate's replicas would refuse it",
         lambda s: s["candidate"].update(shmSizeLimit="0"), "spec.candidate.shmSizeLimit"),
    Case("flash-loader tmpfs of zero", "the candidate's replicas would refuse it",
         lambda s: s["candidate"].update(flashLoader={"tmpfsSizeLimit": "0"}),
         "spec.candidate.flashLoader.tmpfsSizeLimit"),
    # Review 16b F4: tolerations the candidate's replicas add to every pod, which the
    # workload cluster's API server refuses.
    Case("a candidate toleration key that is no qualified name",
         "the candidate's pods would be refused",
         lambda s: s["candidate"].update(tolerations=[{"key": "bad key!", "operator": "Exists"}]),
         "spec.candidate.tolerations[0].key"),
    Case("a candidate toleration operator Kubernetes 1.34 does not have",
         "the candidate's pods would be refused (Lt is 1.35's, behind a gate)",
         lambda s: s["candidate"].update(
             tolerations=[{"key": "gpu", "operator": "Lt", "value": "3"}]),
         "spec.candidate.tolerations[0].operator"),
]  # fmt: skip


@table(INVALID_SPECS)
def test_invalid_spec_blocks_and_names_field(case: Case[Any, str]) -> None:
    s = spec()
    case.inputs(s)
    field = case.want
    with pytest.raises(SpecError) as e:
        parse_spec(s)
    assert e.value.field == field, case.reason
    x = xr("ModelExperiment", NAME, s)
    rsp = run(request(x, required={}))
    st = status(rsp)
    assert st["phase"] == "Blocked" and st["reason"] == "InvalidSpec"
    assert field in conditions(rsp)["Runnable"]["message"]
    assert not desired(rsp)


def test_xrd_rejects_what_the_function_rejects() -> None:
    base = spec()
    assert xr_cel_errors("ModelExperiment", base) == []
    models = spec()
    models["gauntlet"]["env"].append({"name": "MODELS", "value": "chat=vllm"})
    assert any("reserved" in e for e in xr_cel_errors("ModelExperiment", models))
    many = spec()
    many["gauntlet"]["env"] = [{"name": f"V{i}", "value": "x"} for i in range(33)]
    assert any("at most 32" in e for e in xr_cel_errors("ModelExperiment", many))
    assert any("1m" in e for e in xr_cel_errors("ModelExperiment", spec(repeatAfter="59s")))
    assert xr_cel_errors("ModelExperiment", spec(repeatAfter="1m", historyLimit=2)) == []
    assert xr_cel_errors("ModelExperiment", spec(repeatAfter="0")) == []
    assert any("historyLimit" in e for e in xr_cel_errors("ModelExperiment", spec(historyLimit=2)))
    assert any(
        "historyLimit" in e
        for e in xr_cel_errors("ModelExperiment", spec(repeatAfter="0", historyLimit=2))
    )


def test_invalid_spec_mid_run_keeps_children(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    before = copy.deepcopy(sim.observed)
    sim.validate = False  # this XR bypassed admission (the XRD rejects MODELS)
    sim.xr["spec"]["gauntlet"]["env"].append({"name": "MODELS", "value": "chat=vllm"})
    sim.reconcile()
    assert sim.phase == "Blocked" and sim.status["reason"] == "InvalidSpec"
    assert set(sim.observed) == set(before)
    for k in before:
        assert sim.observed[k]["spec"] == before[k]["spec"]
    assert sim.status["run"] == RUN1 and sim.status["gauntlet"]  # run state kept


@pytest.mark.parametrize("cel", ["0", "device.driver"])
def test_a_non_boolean_selector_mid_run_blocks_and_keeps_the_candidate(
    sim_factory, clock: Clock, cel: str
) -> None:
    """Found by a trial: a selector that compiles but is not a condition started a new
    run (deleting the running candidate) instead of blocking, as its deployment would
    refuse it (cel-go's type check: a DRA selector must return a boolean)."""
    sim = sim_factory()
    sim.to_evaluating()
    before = copy.deepcopy(sim.observed)
    member = sim.xr["spec"]["candidate"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"][0]["cel"] = cel
    sim.reconcile()
    assert sim.phase == "Blocked" and sim.status["reason"] == "InvalidSpec"
    msg = sim.conditions()["Runnable"]["message"]
    assert "spec.candidate.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel" in msg
    assert "not a boolean" in msg, msg
    assert set(sim.observed) == set(before)
    for k in before:
        assert sim.observed[k]["spec"] == before[k]["spec"]
    assert sim.status["run"] == RUN1


# ---- suspend, spec change -----------------------------------------------------------------


def test_suspend_and_resume(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    sim.update_spec(suspend=True)
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Suspended"
    assert not sim.observed
    assert sim.status["runNumber"] == 1 and "candidate" not in sim.status
    assert sim.conditions()["Runnable"]["reason"] == "Suspended"
    clock.advance(3600)
    sim.reconcile()
    assert sim.phase == "Suspended"
    sim.update_spec(suspend=False)
    sim.reconcile()
    assert sim.phase == "Deploying"
    assert sim.status["run"] == RUN1 and sim.status["runNumber"] == 1  # same run, no new hash
    assert sim.status["candidate"]["createdAt"] == "2026-11-29T10:01:00Z"


def test_suspend_keeps_history(sim_factory, clock: Clock) -> None:
    sim = sim_factory(spec(repeatAfter="10m"))
    sim.to_evaluating()
    sim.job_finished(True, clock.advance(60))
    sim.reconcile()
    clock.advance(600)
    sim.reconcile()  # run 2 starts
    assert sim.status["runNumber"] == 2 and len(sim.status["history"]) == 1
    sim.update_spec(suspend=True)
    sim.reconcile()
    assert sim.phase == "Suspended"
    assert len(sim.status["history"]) == 1
    assert xr_ready(sim.rsp) == "READY_TRUE"  # run 1 passed; suspension does not un-certify
    assert list(sim.observed) == ["gauntlet-r1"]  # evidence kept, run 2 released


def test_reordered_spec_is_no_change() -> None:
    a = spec()
    b = spec()
    b["gauntlet"]["env"] = list(reversed(b["gauntlet"]["env"]))
    b = dict(reversed(list(b.items())))
    b["timeout"] = "1800s"
    b["suspend"] = True
    assert definition_hash(parse_spec(a)) == definition_hash(parse_spec(b))
    c = spec()
    c["gauntlet"]["env"][0]["value"] = "arc_easy"
    assert definition_hash(parse_spec(a)) != definition_hash(parse_spec(c))


def test_crossplane_machinery_in_spec_is_no_change(sim_factory, clock: Clock) -> None:
    """Crossplane writes spec.crossplane (resourceRefs grow as children appear)."""
    sim = sim_factory()
    sim.xr["spec"]["crossplane"] = {"compositionRef": {"name": "modelexperiments.modelplane.ai"}}
    sim.reconcile()
    assert sim.phase == "Deploying"
    sim.xr["spec"]["crossplane"]["resourceRefs"] = [
        {"apiVersion": API_VERSION, "kind": "ModelDeployment", "name": RUN1}
    ]
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Deploying" and sim.status["runNumber"] == 1
    assert sim.status["candidate"]["createdAt"] == "2026-11-29T09:00:00Z"


def test_spec_change_mid_run_starts_fresh_run(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    sim.update_spec(
        gauntlet={
            "templateRef": {"name": "lm-eval"},
            "env": [{"name": "TASKS", "value": "arc_easy"}],
        }
    )
    clock.advance(60)
    sim.reconcile()
    assert sim.status["runNumber"] == 2 and sim.status["run"] == RUN2
    assert set(sim.observed) == {"candidate-r2"}  # run 1's children discarded
    assert sim.status["history"] == []  # run 1 had no verdict
    assert sim.status["candidate"]["createdAt"] == "2026-11-29T09:01:00Z"
    labels = sim.observed["candidate-r2"]["metadata"]["labels"]
    assert labels["modelplane.ai/run"] == "2" and labels["modelplane.ai/generation"] == "2"


def _forbidden_cronjob(name: str) -> dict[str, Any]:
    cj = cronjob()
    cj["metadata"]["name"] = name
    cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["hostPID"] = True
    return cj


# An edit mid-run that the edited spec cannot start with (found by a trial: a typo in
# templateRef deleted the running candidate and gauntlet Job, left no record of the run,
# and writing the name back started a third run): the run is held, its children kept.
HELD_EDITS = [
    ("a templateRef typo", lambda s, w: s["gauntlet"]["templateRef"].update(name="lm-evl"),
     "TemplateNotFound", "CronJob ml-team/lm-evl (spec.gauntlet.templateRef) not found"),
    ("a CronJob the shared namespace forbids",
     lambda s, w: (s["gauntlet"]["templateRef"].update(name="lm-eval-host"),
                   w.append(_forbidden_cronjob("lm-eval-host"))),
     "TemplateInvalid", "spec.jobTemplate.spec.template.spec.hostPID"),
    ("an artifact gate on a ModelCache that does not exist",
     lambda s, w: s.update(artifactGate={"modelCacheRef": {"name": "qwen-cahce"}}),
     "ArtifactCacheNotFound", "qwen-cahce"),
    ("a candidate ModelCache that does not exist (review 17n)",
     lambda s, w: s["candidate"]["modelCacheRef"].update(name="qwen-cach"),
     "CandidateCacheNotFound", "ModelCache ml-team/qwen-cach (spec.candidate.modelCacheRef)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "reason", "message"),
    [pytest.param(e, r, m, id=i) for i, e, r, m in HELD_EDITS],
)
def test_an_edit_the_new_spec_cannot_start_with_holds_the_running_run(
    sim_factory, clock: Clock, edit: Any, reason: str, message: str
) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    before = copy.deepcopy(sim.observed)
    original = copy.deepcopy(sim.xr["spec"])
    edited = copy.deepcopy(original)
    edit(edited, sim.world)
    sim.xr["spec"] = edited
    sim.xr["metadata"]["generation"] += 1
    clock.advance(60)
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Blocked", reason), sim.status
    runnable = sim.conditions()["Runnable"]
    assert runnable["reason"] == reason and message in runnable["message"], runnable
    assert "keeps its candidate and gauntlet Job" in runnable["message"]
    assert sim.status["run"] == RUN1 and sim.status["runNumber"] == 1
    assert [r.message for r in sim.rsp.results if r.severity == fnv1.SEVERITY_WARNING] != []
    assert set(sim.observed) == set(before)
    for k, obj in before.items():
        assert sim.observed[k]["spec"] == obj["spec"], k
    # Held on the next reconcile too, and one Warning event on entry only.
    clock.advance(30)
    sim.reconcile()
    assert sim.status["reason"] == reason and set(sim.observed) == set(before)
    assert [r.message for r in sim.rsp.results if r.severity == fnv1.SEVERITY_WARNING] == []
    # The spec written back: the same run goes on, nothing composed again.
    sim.xr["spec"] = original
    sim.xr["metadata"]["generation"] += 1
    clock.advance(30)
    sim.reconcile()
    assert (sim.phase, sim.status["run"]) == ("Evaluating", RUN1), sim.status
    for k, obj in before.items():
        assert sim.observed[k]["spec"] == obj["spec"], k


def _typo(sim: Sim) -> None:
    sim.xr["spec"] = copy.deepcopy(sim.xr["spec"])
    sim.xr["spec"]["gauntlet"]["templateRef"]["name"] = "lm-evl"
    sim.xr["metadata"]["generation"] += 1


def test_a_held_run_still_ends_at_its_deadline(sim_factory, clock: Clock) -> None:
    """Found by a trial: a run held while Deploying kept its candidate (its GPUs) a week
    past its 30-minute deadline. The deadline still decides: TimedOut, recorded in
    history, the candidate released; the edited spec's run is then Blocked."""
    sim = sim_factory()
    sim.reconcile()
    sim.reconcile()  # Deploying, the candidate seen
    _typo(sim)
    clock.advance(60)
    sim.reconcile()
    assert (sim.phase, sim.status["run"]) == ("Blocked", RUN1)
    assert "candidate-r1" in sim.observed
    clock.advance(7 * 24 * 3600)
    sim.reconcile()
    assert [h["reason"] for h in sim.status["history"]] == ["TimedOut"], sim.status
    # Where it stood: its candidate was never Ready (not "the gauntlet's CronJob could not
    # template its Job", which is for a Ready candidate held by its CronJob).
    assert "the candidate never became Ready" in sim.status["history"][0]["summary"]
    assert (sim.phase, sim.status["reason"], sim.status["run"]) == (
        "Blocked", "TemplateNotFound", RUN2,
    )  # fmt: skip
    assert "candidate-r1" not in sim.observed


def test_a_gauntlet_that_finishes_while_held_is_recorded(sim_factory, clock: Clock) -> None:
    """Found by a trial: the Job passed while its run was held, and a later edit dropped
    the result. It is the verdict now, in history, its Job kept as evidence."""
    sim = sim_factory()
    sim.to_evaluating()
    _typo(sim)
    clock.advance(60)
    sim.reconcile()
    assert (sim.phase, sim.status["run"]) == ("Blocked", RUN1)
    sim.job_finished(True, clock.advance(60))
    sim.reconcile()
    (record,) = sim.status["history"]
    assert (record["run"], record["reason"], record["pass"]) == (RUN1, PASSED, True), record
    assert sim.status["run"] == RUN2 and sim.status["reason"] == "TemplateNotFound"
    assert "gauntlet-r1" in sim.observed and "candidate-r1" not in sim.observed


def test_a_gauntlet_result_is_recorded_whatever_the_edit(sim_factory, clock: Clock) -> None:
    """Found by a trial: a Job that finished before an edit was recorded when the edit
    could not start (the run held) and dropped when it could. Recorded either way."""
    sim = sim_factory()
    sim.to_evaluating()
    sim.job_finished(True, clock.advance(60))
    sim.update_spec(gauntlet={"templateRef": {"name": "lm-eval"}, "env": []})
    clock.advance(60)
    sim.reconcile()
    (record,) = sim.status["history"]
    assert (record["run"], record["reason"]) == (RUN1, PASSED), record
    assert sim.status["run"] == RUN2 and "gauntlet-r1" in sim.observed


def test_a_held_run_times_out_under_its_own_timeout(sim_factory, clock: Clock) -> None:
    """Found by a trial: the verdict of a run held past its deadline quoted the edited
    spec's timeout ("within 6h", deadline 30 minutes after it started)."""
    sim = sim_factory()
    sim.reconcile()
    sim.reconcile()
    _typo(sim)
    sim.xr["spec"]["timeout"] = "6h"
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Blocked"
    clock.advance(3600)
    sim.reconcile()
    (record,) = sim.status["history"]
    assert record["reason"] == "TimedOut" and "6h" not in record["summary"], record
    assert "1800s" in record["summary"], record


def test_a_held_run_whose_candidate_is_lost_ends(sim_factory, clock: Clock) -> None:
    """Found by a trial: a held run whose candidate was deleted stayed Blocked saying it
    kept its candidate, and ended as TimedOut at its deadline."""
    sim = sim_factory()
    sim.to_evaluating()
    _typo(sim)
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Blocked"
    del sim.observed["candidate-r1"]
    clock.advance(60)
    sim.reconcile()
    (record,) = sim.status["history"]
    assert record["reason"] == CANDIDATE_LOST, record


def test_spec_change_after_verdict_keeps_history(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    sim.job_finished(False, clock.advance(60))
    sim.reconcile()
    assert sim.phase == "Failed"
    sim.update_spec(timeout="45m")
    sim.reconcile()
    assert sim.phase == "Deploying" and sim.status["runNumber"] == 2
    assert [h["reason"] for h in sim.status["history"]] == ["GauntletFailed"]
    assert sim.status["history"][0]["run"] == RUN1
    assert "verdict" not in sim.status
    assert set(sim.observed) == {"gauntlet-r1", "candidate-r2"}


# ---- recurrence ---------------------------------------------------------------------------


def pass_run(sim: Sim, clock: Clock, number: int) -> None:
    sim.to_evaluating(number)
    sim.job_finished(True, clock.advance(60), number)
    sim.reconcile()
    assert sim.phase == "Succeeded", sim.status


def test_recurrence_with_fenced_names(sim_factory, clock: Clock) -> None:
    sim = sim_factory(spec(repeatAfter="1h", historyLimit=5))
    pass_run(sim, clock, 1)
    assert sim.status["nextRunAt"] == "2026-11-29T10:01:00Z"
    assert 3500 <= sim.rsp.meta.ttl.seconds <= 3600
    assert sim.conditions()["Runnable"]["reason"] == "CoolingDown"
    clock.advance(1800)
    sim.reconcile()
    assert sim.status["runNumber"] == 1 and sim.phase == "Succeeded"
    clock.now = datetime.datetime(2026, 11, 29, 10, 1, tzinfo=datetime.UTC)
    sim.reconcile()
    assert sim.status["runNumber"] == 2
    assert sim.status["run"] == RUN2
    assert sim.phase == "Deploying"
    assert xr_ready(sim.rsp) == "READY_TRUE"  # the last verdict passed; no flapping
    assert sim.status["history"][0]["run"] == RUN1 and sim.status["history"][0]["pass"] is True
    assert "verdict" not in sim.status and "nextRunAt" not in sim.status
    cand = sim.observed["candidate-r2"]
    assert cand["metadata"]["name"] == RUN2
    assert cand["metadata"]["labels"]["modelplane.ai/run"] == "2"
    assert "gauntlet-r1" in sim.observed  # evidence of run 1
    sim.reconcile()
    sim.candidate_ready(2)
    sim.reconcile()
    job2 = sim.job(2)
    job1 = sim.job(1)
    assert job2["metadata"]["name"] != job1["metadata"]["name"]
    assert job2["metadata"]["labels"]["modelplane.ai/run"] == "2"
    main = job2["spec"]["template"]["spec"]["containers"][0]
    assert ("MODELS", f"{RUN2}=vllm") in env_of(main)
    # Evidence from run 1 can never satisfy run 2: a Job with run 1's labels does not count.
    sim.job_finished(True, clock.advance(60), 2, labels=job1["metadata"]["labels"])
    sim.reconcile()
    assert sim.phase == "Evaluating"
    sim.job_finished(True, clock.now, 2)
    sim.reconcile()
    assert sim.phase == "Succeeded" and sim.status["verdict"]["pass"] is True


def test_changed_cool_down_applies_at_once(sim_factory, clock: Clock) -> None:
    sim = sim_factory(spec(repeatAfter="24h"))
    pass_run(sim, clock, 1)
    assert sim.status["nextRunAt"] == "2026-11-30T09:01:00Z"
    clock.advance(2 * 3600)
    sim.update_spec(repeatAfter="1h")  # not part of the run's identity: no new run for it
    sim.reconcile()
    assert sim.status["runNumber"] == 2 and sim.phase == "Deploying"
    assert sim.status["history"][0]["run"] == RUN1


def test_history_pruning_deletes_oldest_evidence(sim_factory, clock: Clock) -> None:
    sim = sim_factory(spec(repeatAfter="1m", historyLimit=2))
    for n in range(1, 5):
        pass_run(sim, clock, n)
        clock.advance(60)
    sim.reconcile()  # run 5 starts; runs 1..4 are history, pruned to 2
    assert sim.status["runNumber"] == 5
    assert [h["number"] for h in sim.status["history"]] == [3, 4]
    assert set(k for k in sim.observed if k.startswith("gauntlet")) == {
        "gauntlet-r3",
        "gauntlet-r4",
    }
    assert any("left the history" in m for _, m in results(sim.rsp))
    # Lowering the limit prunes at once.
    sim.update_spec(historyLimit=1)
    sim.reconcile()
    assert [h["number"] for h in sim.status["history"]] == [4]
    assert sim.status["runNumber"] == 5  # historyLimit is not part of the run's identity


def test_finished_job_that_disappears_is_not_recreated(sim_factory, clock: Clock) -> None:
    sim = sim_factory(spec(repeatAfter="1h", historyLimit=2))
    pass_run(sim, clock, 1)
    del sim.observed["gauntlet-r1"]  # removed (by a TTL, or by hand)
    sim.reconcile()
    assert "gauntlet-r1" not in sim.observed
    assert sim.status["verdict"]["pass"] is True
    clock.advance(3600)
    sim.reconcile()  # run 2: run 1 goes to history, still without its Job
    assert sim.status["runNumber"] == 2 and "gauntlet-r1" not in sim.observed


# ---- unresolved, determinism, names --------------------------------------------------------


def test_unresolved_requirements_keep_children(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.reconcile()
    sim.reconcile()
    sim.candidate_ready()
    # One call with nothing resolved (the first call of a reconcile).
    rsp = sim.fn.call(request(sim.xr, observed=sim.observed))
    assert set(desired(rsp)) == {"candidate-r1"}
    assert status(rsp)["phase"] == "Deploying"
    assert conditions(rsp)["Runnable"]["status"] in ("True", "Unknown")


@pytest.mark.parametrize("stage", ["Deploying", "Evaluating", "Blocked"])
def test_status_does_not_churn_while_time_passes(sim_factory, clock: Clock, stage: str) -> None:
    """Nothing changed but the clock: the status and conditions stay byte-identical.

    A message with a countdown would rewrite the XR's status on every reconcile.
    """
    world = [inference_cluster(CLUSTER)] if stage == "Blocked" else None
    sim = sim_factory(spec(), world)
    if stage == "Evaluating":
        sim.to_evaluating()
    else:
        sim.reconcile()
        sim.reconcile()
    assert sim.phase == stage
    before = (copy.deepcopy(sim.status), conditions(sim.rsp))
    clock.advance(300)
    sim.reconcile()
    assert (sim.status, conditions(sim.rsp)) == before
    assert results(sim.rsp) == []


def test_deterministic_over_grpc(sim_factory) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    a = drive(sim.fn.call, sim.xr, sim.observed, World(sim.world))[0]
    b = drive(sim.fn.call, sim.xr, sim.observed, World(sim.world))[0]
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


SERVES = "ReplicasReady with a ready replica serves before the cache Usage reports ready"

CANDIDATE_READY: list[Case[dict[str, Any], bool]] = [
    Case("Ready", "Crossplane's Ready: every composed resource is ready",
         {"conditions": [cond("Ready")]}, True),
    Case("ReplicasReady, 1/1", SERVES,
         {"replicas": {"total": 1, "ready": 1}, "conditions": [cond("ReplicasReady")]}, True),
    Case("ReplicasReady, 0/1", "no replica is ready",
         {"replicas": {"total": 1, "ready": 0}, "conditions": [cond("ReplicasReady")]}, False),
    Case("ReplicasReady False", "the deployment says its replicas are not ready",
         {"replicas": {"total": 1, "ready": 1}, "conditions": [cond("ReplicasReady", "False")]},
         False),
    Case("Ready False", "Crossplane says not ready", {"conditions": [cond("Ready", "False")]},
         False),
    Case("no status", "nothing reported yet", {}, False),
]  # fmt: skip


@table(CANDIDATE_READY)
def test_candidate_ready(case: Case[dict[str, Any], bool]) -> None:
    from google.protobuf.struct_pb2 import Struct

    body = Struct()
    body.update({"status": case.inputs})
    assert exp.candidate_ready(body) is case.want, case.reason
    assert exp.candidate_ready(None) is False


def test_long_names_stay_valid() -> None:
    long = "qwen2-5-72b-instruct-awq-int4-weights-shared-canary-experiment-x"
    assert len(long) == 64
    for n in (1, 2, 17):
        name = exp.run_name(long, n)
        assert re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", name) and len(name) <= 63
        job = exp.gauntlet_job_name(NAMESPACE, name)
        assert len(job) <= 63
    assert exp.run_name(long, 2) != exp.run_name(long, 3)
    assert exp.run_name("short", 1) != "short" and exp.run_name("short", 2) != "short-r2"


def test_requirements_loop_settles(sim_factory) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    assert sim.calls <= 6


# ---- the example ---------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "modelexperiment"


def test_example_renders(grpc_function: GrpcFunction) -> None:
    (x,) = load_yaml([str(EXAMPLE / "xr.yaml")])
    validate_xr(x)
    world = load_yaml([str(EXAMPLE / "required")])
    for doc in world:
        if doc["kind"] == "CronJob":
            validate_k8s(doc)
        elif doc["apiVersion"] == API_VERSION:
            validate_xr(doc)
    # First reconcile: the gate opens and the candidate is composed.
    rsp, _ = grpc_function.drive(x, World(world))
    assert status(rsp)["phase"] == "Deploying", status(rsp)
    assert conditions(rsp)["ArtifactGate"]["status"] == "True"
    (cand,) = desired(rsp).values()
    if has_modeldeployment_xrd():
        validate_xr(cand)
    # With the candidate observed Ready: the gauntlet Job on the replica's cluster.
    observed = observed_by_name(load_yaml([str(EXAMPLE / "observed")]))
    rsp, calls = grpc_function.drive(x, World(world), observed)
    assert calls <= 6
    st = status(rsp)
    assert st["phase"] == "Evaluating", st
    assert st["gauntlet"]["cluster"] == "gpu-us-east"
    obj = desired(rsp)["gauntlet-r1"]
    validate_object(obj)
    job = obj["spec"]["forProvider"]["manifest"]
    validate_k8s(job)
    main = job["spec"]["template"]["spec"]["containers"][0]
    assert ("MODELS", f"{RUN1}=vllm") in env_of(main)
    x["status"] = st
    validate_xr(x)


# ---- the candidate's schema is the ModelDeployment's template.spec ------------------------

COMPOSITIONS = Path(__file__).resolve().parents[1] / "compositions"
EXPERIMENT_XRD = COMPOSITIONS / "modelexperiment" / "definition.yaml"
DEPLOYMENT_XRD = COMPOSITIONS / "modeldeployment" / "definition.yaml"
CANDIDATE_DESCRIPTION = (
    "The candidate: the shape of a ModelDeployment's template.spec plus backend. It is "
    "deployed as an owned ModelDeployment named after the run, with one replica and only "
    "the experiment's own labels (template and pod labels given here are replaced, so no "
    "Service that selects production pods can select the candidate). "
    "MODELPLANE_SERVED_MODEL_NAME is set to the candidate's name in every engine container."
)
BACKEND_SCHEMA = {
    "type": "string",
    "description": "The engine name the evaluation addresses, for example vllm or sglang. "
    "The gauntlet gets MODELS=<candidate>=<backend>.",
    "minLength": 1,
    "maxLength": 63,
    "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$",
}


def _version_schema(path: Path) -> dict[str, Any]:
    import yaml

    doc = yaml.safe_load(path.read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def candidate_schema_from_deployment() -> dict[str, Any]:
    """The ModelDeployment XRD's ``template.spec`` schema plus ``backend``."""
    dep = _version_schema(DEPLOYMENT_XRD)
    node = copy.deepcopy(dep["properties"]["spec"]["properties"]["template"]["properties"]["spec"])
    node["description"] = CANDIDATE_DESCRIPTION
    node["required"] = ["backend", *[r for r in node.get("required", []) if r != "backend"]]
    node["properties"] = {"backend": BACKEND_SCHEMA, **node["properties"]}
    return node


def sync_candidate_schema() -> None:
    """Rewrite spec.candidate of the ModelExperiment XRD from the ModelDeployment XRD."""
    import yaml

    doc = yaml.safe_load(EXPERIMENT_XRD.read_text())
    props = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    props["spec"]["properties"]["candidate"] = candidate_schema_from_deployment()
    EXPERIMENT_XRD.write_text(yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True))


@pytest.mark.skipif(not DEPLOYMENT_XRD.exists(), reason="the ModelDeployment XRD does not exist")
def test_candidate_schema_is_modeldeployment_template_spec() -> None:
    """An experiment admits exactly the candidates a ModelDeployment admits.

    After a change of the ModelDeployment XRD, run ``python -m tests.test_experiment``.
    """
    mine = _version_schema(EXPERIMENT_XRD)["properties"]["spec"]["properties"]["candidate"]
    assert mine == candidate_schema_from_deployment(), (
        "spec.candidate of compositions/modelexperiment/definition.yaml is out of date with "
        "the ModelDeployment XRD's template.spec; run python -m tests.test_experiment"
    )


if __name__ == "__main__":
    sync_candidate_schema()


# ---- the chain with the real ModelDeployment and ModelReplica composers --------------------


def _as_observed(rsp: Any) -> dict[str, Any]:
    """The XR status a response asks for, with its conditions, as Crossplane writes it."""
    st = status(rsp)
    st["conditions"] = [
        {"type": t, **c, "lastTransitionTime": "2026-11-29T09:00:00Z"}
        for t, c in conditions(rsp).items()
    ]
    if xr_ready(rsp) == "READY_TRUE":
        st["conditions"].append(cond("Ready", reason="Available"))
    return st


def test_chain_through_deployment_and_replica_composers(
    grpc_function: GrpcFunction, clock: Clock
) -> None:
    """The candidate this composer emits is placed, served and evaluated for real.

    The candidate goes through the ModelDeployment composer (placement), its
    ModelReplica through the ModelReplica composer (workload, Service, endpoint); what
    they report is what the experiment reads: the candidate's Ready, the replica's
    labels, ``spec.clusterName`` and ``status.endpoint``.
    """
    from tests.support import replica_fixtures as rf

    world = [cronjob(), rf.cluster(CLUSTER), rf.model_cache(), rf.hydration(CLUSTER, "Ready")]
    sim = Sim(grpc_function, clock, spec(), world)
    sim.reconcile()
    cand = copy.deepcopy(sim.observed["candidate-r1"])
    cand["metadata"].update(uid="uid-candidate", generation=1)

    placed, _ = grpc_function.drive(cand, World(sim.world))
    assert not fatal(placed), fatal(placed)
    (rep_key, rep), *_ = [(k, v) for k, v in desired(placed).items() if v["kind"] == "ModelReplica"]
    assert rep["metadata"]["labels"][LABEL_DEPLOYMENT] == RUN1
    assert rep["spec"]["clusterName"] == CLUSTER
    rep["metadata"].update(uid="uid-replica", generation=1)

    first, _ = grpc_function.drive(rep, World(sim.world))
    objects = desired(first)
    observed = {k: rf.observed_object(v, {}) for k, v in objects.items()}
    observed["workload-vllm"] = rf.observed_object(
        objects["workload-vllm"],
        {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1},
    )
    serving, _ = grpc_function.drive(rep, World(sim.world), observed)
    rep["status"] = _as_observed(serving)
    endpoint = rep["status"]["endpoint"]
    assert endpoint.startswith("http://")

    ready, _ = grpc_function.drive(cand, World(sim.world), {rep_key: rep})
    assert conditions(ready)["ReplicasReady"]["status"] == "True", conditions(ready)
    sim.observed["candidate-r1"]["status"] = _as_observed(ready)
    sim.world.append(rep)
    sim.reconcile()
    assert sim.phase == "Evaluating", sim.status
    obj = sim.observed["gauntlet-r1"]
    assert obj["spec"]["providerConfigRef"]["name"] == "gpu-a-kubeconfig"
    main = sim.job()["spec"]["template"]["spec"]["containers"][0]
    assert ("MODELPLANE_ENDPOINT", endpoint) in env_of(main)
    # The served model name the engine gets is the name MODELS addresses.
    workload = objects["workload-vllm"]["spec"]["forProvider"]["manifest"]
    engine = workload["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "MODELPLANE_SERVED_MODEL_NAME", "value": RUN1} in engine["env"]
    assert ("MODELS", f"{RUN1}=vllm") in env_of(main)
    # Isolation reaches the pods: no production label survives.
    assert "app" not in workload["spec"]["template"]["metadata"]["labels"]


def test_reserved_env_in_the_candidate_blocks_before_any_gpu_is_claimed() -> None:
    s = spec()
    container = s["candidate"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), {"name": "MODELPLANE_MODEL", "value": "/x"}]
    with pytest.raises(SpecError) as e:
        parse_spec(s)
    member = "spec.candidate.engines[0].members[0]"
    assert e.value.field == f"{member}.template.spec.containers[0].env[1].name"
    assert "MODELPLANE_MODEL" in str(e.value)
    rsp = run(request(xr("ModelExperiment", NAME, s), required={}))
    assert status(rsp)["phase"] == "Blocked" and status(rsp)["reason"] == "InvalidSpec"
    assert "MODELPLANE_MODEL" in conditions(rsp)["Runnable"]["message"]
    assert not desired(rsp)


# ---- issue 13: the candidate serves under the candidate's name ----------------------------

REF = "$(MODELPLANE_SERVED_MODEL_NAME)"
FORCE = "issue 13: the candidate serves under its own name, whatever the template says"


@dataclass(frozen=True)
class Served:
    """The args the candidate gets, and what the Runnable message says (None: nothing)."""

    args: list[str]
    note: str | None


# Inputs: the engine's args as written.
FORCED: list[Case[list[str], Served]] = [
    Case("already the candidate", "the flag already names the variable: nothing to say",
         ["--model=$(MODELPLANE_MODEL)", f"--served-model-name={REF}"],
         Served(["--model=$(MODELPLANE_MODEL)", f"--served-model-name={REF}"], None)),
    Case("--served-model-name=chat", FORCE,
         ["--model=$(MODELPLANE_MODEL)", "--served-model-name=chat"],
         Served(["--model=$(MODELPLANE_MODEL)", f"--served-model-name={REF}"],
                "args[1] served 'chat'")),
    Case("--served-model-name chat alias", f"{FORCE}; every alias goes too",
         ["--served-model-name", "chat", "alias", "--port=8000"],
         Served(["--served-model-name", REF, "alias", "--port=8000"], "args[1] served 'chat'")),
    Case("no flag", "the engine serves under MODELPLANE_SERVED_MODEL_NAME's default",
         ["--model=$(MODELPLANE_MODEL)"], Served(["--model=$(MODELPLANE_MODEL)"], None)),
]  # fmt: skip


def _with_args(args: list[str], key: str = "args") -> dict[str, Any]:
    s = spec()
    c = s["candidate"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    c.pop("args", None)
    c[key] = args
    return s


@table(FORCED)
def test_the_candidate_serves_under_its_own_name(
    sim_factory, case: Case[list[str], Served]
) -> None:
    sim = sim_factory(_with_args(case.inputs))
    sim.reconcile()
    assert sim.phase == "Deploying", sim.status
    cand = sim.observed["candidate-r1"]
    engine = cand["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"][
        "containers"
    ][0]
    assert engine["args"] == case.want.args, case.reason
    assert {"name": "MODELPLANE_SERVED_MODEL_NAME", "value": RUN1} in engine["env"]
    msg = sim.conditions()["Runnable"]["message"]
    if case.want.note:
        assert f"the candidate serves as {RUN1}" in msg and case.want.note in msg, msg
    else:
        assert "serves as" not in msg


SHELL = "a --served-model-name inside a shell string cannot be forced: the spec is blocked"

# Inputs: (the container field, its words); want: where the message points.
BLOCKED: list[Case[tuple[str, list[str]], str]] = [
    Case("shell string", SHELL,
         ("command", ["sh", "-c", "vllm serve --served-model-name chat"]), "command[2]"),
    Case("shell string with =", SHELL,
         ("args", ["-c", "vllm serve --served-model-name='chat'"]), "args[1]"),
]  # fmt: skip


@table(BLOCKED)
def test_a_served_name_that_cannot_be_forced_blocks_naming_the_field(
    grpc_function: GrpcFunction, case: Case[tuple[str, list[str]], str]
) -> None:
    key, words = case.inputs
    rsp = grpc_function.call(request(xr("ModelExperiment", NAME, _with_args(words, key))))
    st = status(rsp)
    assert (st["phase"], st["reason"]) == ("Blocked", "InvalidSpec"), case.reason
    msg = conditions(rsp)["Runnable"]["message"]
    assert f"engines[0].members[0].template.spec.containers[0].{case.want}" in msg, msg
    assert "'chat'" in msg and "--served-model-name=$(MODELPLANE_SERVED_MODEL_NAME)" in msg
    assert not desired(rsp)


def test_a_shell_string_that_uses_the_variable_is_fine(sim_factory) -> None:
    words = ["sh", "-c", 'vllm serve /m --served-model-name "$MODELPLANE_SERVED_MODEL_NAME"']
    sim = sim_factory(_with_args(words, "command"))
    sim.reconcile()
    assert sim.phase == "Deploying", sim.status


def test_gate_record_survives_a_malformed_generation(sim_factory) -> None:
    """Found by the fuzz test: a cache whose metadata.generation is not a number."""
    c = cache()
    c["metadata"]["generation"] = ["3"]
    gate = {"modelCacheRef": {"name": "qwen-cache"}}
    sim = sim_factory(spec(artifactGate=gate), [cronjob(), inference_cluster(CLUSTER), c])
    sim.validate = False
    sim.reconcile()
    assert sim.phase == "Deploying", sim.status
    assert sim.status["gate"]["generation"] == 0


# Inputs: the candidate member's nodeSelector; want: the field the Runnable message names.
CANDIDATE_DEVICES = "a candidate its ModelDeployment would refuse is not admitted"
BAD_DEVICES: list[Case[dict[str, Any], str]] = [
    Case("selector does not parse", CANDIDATE_DEVICES,
         {"devices": [{"name": "gpu", "selectors": [{"cel": "device.driver =="}]}]},
         "nodeSelector.devices[0].selectors[0].cel"),
    Case("unknown variable", CANDIDATE_DEVICES,
         {"devices": [{"name": "gpu", "selectors": [{"cel": 'node.driver == "x"'}]}]},
         "nodeSelector.devices[0].selectors[0].cel"),
    Case("selector returns an int", CANDIDATE_DEVICES,
         {"devices": [{"name": "gpu", "selectors": [{"cel": "0"}]}]},
         "nodeSelector.devices[0].selectors[0].cel"),
    Case("selector returns a string", CANDIDATE_DEVICES,
         {"devices": [{"name": "gpu", "selectors": [{"cel": "device.driver"}]}]},
         "nodeSelector.devices[0].selectors[0].cel"),
    Case("count written as a string", CANDIDATE_DEVICES,
         {"devices": [{"name": "gpu", "count": "1",
                       "selectors": [{"cel": 'device.driver == "gpu.nvidia.com"'}]}]},
         "nodeSelector.devices[0].count"),
    Case("no selectors", CANDIDATE_DEVICES, {"devices": [{"name": "gpu", "selectors": []}]},
         "nodeSelector.devices[0].selectors"),
]  # fmt: skip


@table(BAD_DEVICES)
def test_a_candidate_with_bad_devices_blocks_naming_the_field(
    case: Case[dict[str, Any], str],
) -> None:
    s = spec()
    s["candidate"]["engines"][0]["members"][0]["nodeSelector"] = case.inputs
    rsp = run(request(xr("ModelExperiment", NAME, s)))
    st = status(rsp)
    assert (st["phase"], st["reason"]) == ("Blocked", "InvalidSpec"), case.reason
    msg = conditions(rsp)["Runnable"]["message"]
    assert f"spec.candidate.engines[0].members[0].{case.want}" in msg, msg
    assert not desired(rsp)


# What the candidate's replicas would refuse in a member's pod template
# (POD_TEMPLATE_FAULTS), refused where it was written: the experiment blocks. A
# member's pod labels are the exception: the candidate carries the experiment's own
# instead (children.candidate_body), so none of the tenant's reaches a cluster.
_POD_LABELS = ("metadata", "labels")
CARRIED_FAULTS = [row for row in POD_TEMPLATE_FAULTS if row[1] != _POD_LABELS]
REPLACED_LABELS = [
    *[(i, v) for i, p, v, _ in POD_TEMPLATE_FAULTS if p == _POD_LABELS],
    ("a label value with a space", {"team": "ml platform"}),  # review 16f F2
    ("a label key with a space", {"my team": "ml"}),
]


@pytest.mark.parametrize("labels", [pytest.param(v, id=i) for i, v in REPLACED_LABELS])
def test_a_candidate_pod_label_is_replaced_not_refused(sim_factory, labels: dict) -> None:
    """Review 16f F2: labels the API server (or the tenancy policy) would refuse in a
    member's pod template were refused "(the workload cluster's API server refuses
    it)", though the candidate replaces them with the experiment's own and they never
    reach a cluster. They are accepted; the candidate carries only the experiment's."""
    s = spec()
    member = s["candidate"]["engines"][0]["members"][0]
    member["template"].setdefault("metadata", {})["labels"] = labels
    parse_spec(s)
    sim = sim_factory(s)
    sim.validate = False  # the XRD refuses some of these (modelplane.ai/, 64 characters)
    sim.reconcile()
    assert sim.phase == "Deploying", sim.status
    carried = sim.observed["candidate-r1"]["spec"]["template"]["spec"]["engines"][0]
    assert carried["members"][0]["template"]["metadata"]["labels"] == {
        "experiment.modelplane.ai/name": NAME,
        "experiment.modelplane.ai/run": "1",
        "experiment.modelplane.ai/generation": "1",
    }


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [pytest.param(p, v, f, id=i) for i, p, v, f in CARRIED_FAULTS],
)
def test_a_pod_template_fault_mid_run_blocks_naming_it_and_keeps_the_candidate(
    sim_factory, clock: Clock, path: tuple[Any, ...], value: Any, field: str
) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    before = copy.deepcopy(sim.observed)
    sim.validate = False  # past admission (the XRD types some of these)
    put_fault(sim.xr["spec"]["candidate"]["engines"][0]["members"][0]["template"], path, value)
    sim.reconcile()
    assert sim.phase == "Blocked" and sim.status["reason"] == "InvalidSpec"
    msg = sim.conditions()["Runnable"]["message"]
    assert f"spec.candidate.engines[0].members[0].{field}" in msg, msg
    assert set(sim.observed) == set(before)
    for k in before:
        assert sim.observed[k]["spec"] == before[k]["spec"]
    assert sim.status["run"] == RUN1


def _invalid_edit(sim: Any) -> None:
    """An edit only the function refuses (the XRD admits it): a selector that is no
    condition."""
    member = sim.xr["spec"]["candidate"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"][0]["cel"] = "0"


@pytest.mark.parametrize("how", ["job-passes", "deadline-passes"])
def test_a_run_under_an_invalid_edit_still_ends(sim_factory, clock: Clock, how: str) -> None:
    """Found by a review: a mid-run edit the function refuses (InvalidSpec) kept the run
    for ever: the gauntlet passed, the deadline went by 3 h, and the candidate (its GPU)
    stayed. A run is bounded whatever the edit: it ends by its Job or its deadline, the
    verdict is recorded, the candidate released; the gauntlet Job stays as evidence."""
    sim = sim_factory()
    sim.to_evaluating()
    _invalid_edit(sim)
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Blocked", "InvalidSpec")
    cand = sim.key("candidate")
    assert cand in sim.observed  # kept while the run is undecided
    if how == "job-passes":
        clock.advance(60)
        sim.job_finished(True, clock.now)
    else:
        clock.advance(3 * 3600)
    sim.reconcile()
    assert sim.phase == "Blocked" and sim.status["reason"] == "InvalidSpec"
    verdict = sim.status["verdict"]
    want = "GauntletPassed" if how == "job-passes" else "TimedOut"
    assert verdict["reason"] == want, verdict
    assert sim.conditions()["Verdict"]["reason"] == want
    assert cand not in sim.observed  # released
    assert sim.key("gauntlet") in sim.observed  # evidence


def test_a_resumed_run_does_not_take_the_previous_candidate_being_deleted(
    sim_factory, clock: Clock
) -> None:
    """Found by a review: suspended, then resumed while Crossplane still observed the
    previous candidate and Job being deleted (same names), the run took the terminating
    candidate as its own, started the gauntlet against it, and ended CandidateLost (a
    terminal failure for a model never evaluated) when it was gone."""
    sim = sim_factory()
    sim.to_evaluating()
    old = copy.deepcopy(sim.observed)
    sim.update_spec(suspend=True)
    clock.advance(20)
    sim.reconcile()
    assert sim.phase == "Suspended"
    for o in old.values():
        o["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:20Z"
    for r in sim.world:
        if r["kind"] == "ModelReplica":
            r["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:20Z"
    sim.observed = copy.deepcopy(old)
    sim.update_spec(suspend=False)
    clock.advance(20)
    sim.reconcile()
    assert sim.phase == "Deploying", (sim.phase, sim.status)
    assert not sim.status.get("gauntlet"), sim.status
    assert not sim.status.get("candidate", {}).get("seen")
    # The previous candidate finishes deleting: nothing was lost.
    sim.observed = {k: v for k, v in copy.deepcopy(old).items() if k != sim.key("candidate")}
    sim.world = [r for r in sim.world if r["kind"] != "ModelReplica"]
    clock.advance(10)
    sim.reconcile()
    assert not sim.status.get("verdict"), sim.status
    assert sim.phase == "Deploying"


def test_removing_the_gate_clears_its_condition(sim_factory, clock: Clock) -> None:
    """Found by review 13a: Crossplane keeps the last value of a condition type the
    function stops returning (``handleCommonCompositionResult`` sets only the types
    returned), so ``ArtifactGate=False`` stayed on the XR for ever after the gate was
    removed and the run started. Now every admission says the gate's state: without a
    gate, True ``NoArtifactGate``."""
    gate = {"modelCacheRef": {"name": "gated-cache"}}  # not the candidate's, which exists
    sim = sim_factory(spec(artifactGate=gate), [cronjob(), inference_cluster(CLUSTER), cache()])
    sim.reconcile()
    c = sim.conditions()["ArtifactGate"]
    assert (c["status"], c["reason"]) == ("False", "ArtifactCacheNotFound")
    del sim.xr["spec"]["artifactGate"]
    sim.xr["metadata"]["generation"] = 2
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Deploying"
    c = sim.conditions()["ArtifactGate"]
    assert (c["status"], c["reason"]) == ("True", "NoArtifactGate"), c
    assert "spec.artifactGate is not set" in c["message"]


def test_a_multi_node_candidate_engine_named_svc_blocks_naming_it(sim_factory) -> None:
    """Review 14a: the candidate's LeaderWorkerSet would take its replica's Service name;
    the XRD refuses it, and an XR that bypassed admission is Blocked naming the engine."""
    sim = sim_factory()
    sim.validate = False  # the XRD refuses it (checked below)
    gang = sim.xr["spec"]["candidate"]["engines"][0]
    gang["name"] = "svc"
    gang["members"] = [
        {**gang["members"][0], "role": "Leader"},
        {**gang["members"][0], "role": "Worker", "worker": {"nodes": 1}},
    ]
    sim.reconcile()
    assert sim.phase == "Blocked" and sim.status["reason"] == "InvalidSpec"
    msg = sim.conditions()["Runnable"]["message"]
    assert "spec.candidate.engines[0]" in msg and "'svc' is reserved" in msg, msg
    errors = xr_cel_errors("ModelExperiment", sim.xr["spec"])
    assert any("may not be named svc" in e for e in errors), errors


def test_a_gauntlet_may_request_an_extended_resource_but_claims_no_device(sim_factory) -> None:
    """Unlike a backfill's (GPURequestForbidden), a gauntlet's pod may request an
    accelerator as an extended resource (README, Lifecycle: nothing makes the evaluation
    CPU-side); a claim template, the only way to claim a device by name, is refused
    (review 14a: the only ones in the shared namespace are other replicas')."""
    cj = cronjob()
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    sim = sim_factory(spec(), [cj, inference_cluster(CLUSTER), cache()])
    sim.to_evaluating()
    limits = sim.job()["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 1}

    pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "chat-0-vllm-x"}]
    pod["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    sim = sim_factory(spec(), [cj, inference_cluster(CLUSTER), cache()])
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Blocked", "TemplateInvalid"), sim.status
    msg = sim.conditions()["Runnable"]["message"]
    assert "spec.jobTemplate.spec.template.spec.resourceClaims[0].resourceClaimTemplateName" in msg
    assert not sim.observed


# ---- an Indexed gauntlet fits its pods' hostnames (review 14a) ------------------------

INDEXED = "review 14a: an Indexed Job's last pod hostname <job>-<completions-1> fits 63"
STABLE = "stable names: a NonIndexed gauntlet Job keeps the name it always had"


@dataclass(frozen=True)
class JobMode:
    completion_mode: str | None
    completions: int | None


INDEXED_CASES: list[Case[JobMode, int]] = [
    Case("no-mode", STABLE, JobMode(None, None), 63),
    Case("non-indexed", STABLE, JobMode("NonIndexed", 4), 63),
    Case("indexed-4", INDEXED, JobMode("Indexed", 4), 52),
    Case("indexed-1", INDEXED, JobMode("Indexed", 1), 52),
    Case("indexed-100000", INDEXED, JobMode("Indexed", 100_000), 52),
]  # fmt: skip


@table(INDEXED_CASES)
def test_a_gauntlet_job_name_fits_its_completion_mode(
    sim_factory, case: Case[JobMode, int]
) -> None:
    cj = cronjob()
    js = cj["spec"]["jobTemplate"]["spec"]
    if case.inputs.completion_mode is not None:
        js["completionMode"] = case.inputs.completion_mode
    if case.inputs.completions is not None:
        js["completions"] = js["parallelism"] = case.inputs.completions
    sim = sim_factory(spec(), [cj, inference_cluster(CLUSTER), cache()])
    sim.to_evaluating()
    job = sim.job()
    name = job["metadata"]["name"]
    assert name == sim.status["gauntlet"]["job"] == sim.observed["gauntlet-r1"]["metadata"]["name"]
    assert len(name) == case.want, (name, case.reason)
    indexed = case.inputs.completion_mode == "Indexed"
    assert name == exp.gauntlet_job_name(NAMESPACE, RUN1, indexed=indexed)
    assert job["spec"].get("completionMode") == case.inputs.completion_mode
    if indexed:
        last = f"{name}-{case.inputs.completions - 1}"
        assert len(last) <= 63 and re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", last), last


def test_a_recorded_indexed_name_that_cannot_fit_is_not_composed(sim_factory, clock) -> None:
    """A run that recorded its 63-character name keeps it; an Indexed Job of that name
    could never be created, so the function does not compose one: the run is held
    (Blocked, naming completionMode, its candidate kept: review 15a #5), and its Job is
    composed again under a name that fits."""
    sim = sim_factory()
    sim.to_evaluating()
    old = sim.status["gauntlet"]["job"]
    assert len(old) == 63
    cj = cronjob()
    cj["spec"]["jobTemplate"]["spec"].update(completionMode="Indexed", completions=4)
    sim.world = [cj, inference_cluster(CLUSTER), *[r for r in sim.world if r["kind"] != "CronJob"]]
    del sim.observed["gauntlet-r1"]  # never created (or deleted): built again
    clock.advance(10)
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Blocked", "TemplateInvalid"), sim.status
    msg = sim.conditions()["Runnable"]["message"]
    assert "spec.jobTemplate.spec.completionMode" in msg and f"{old}-3" in msg, msg
    assert "candidate-r1" in sim.observed and "gauntlet-r1" not in sim.observed
    assert "gauntlet" not in sim.status  # no Job observed: its record goes
    clock.advance(10)
    sim.reconcile()
    assert sim.phase == "Evaluating", sim.status
    assert sim.job()["metadata"]["name"] == exp.gauntlet_job_name(NAMESPACE, RUN1, indexed=True)


# ---- a gauntlet Job the workload cluster refuses is said, once (review 14a) ----------

REFUSED = (
    'create failed: cannot create object: Job.batch "x" is forbidden: exceeded quota: '
    "jobs, requested: count/jobs.batch=1, used: count/jobs.batch=50, limited: count/jobs.batch=50"
)
SAID = "review 14a: a gauntlet Job provider-kubernetes cannot apply is said, with one Warning"


@dataclass(frozen=True)
class Sync:
    synced: str  # the Object's Synced status
    created: bool  # provider-kubernetes observed the remote Job (status.atProvider)


@dataclass(frozen=True)
class Said:
    reason: str
    fragment: str  # in the Verdict condition's message
    warned: bool  # one Warning event on entry


SYNC_CASES: list[Case[Sync, Said]] = [
    Case("not-created", SAID, Sync("False", False),
         Said("GauntletNotSynced", f"not created on {CLUSTER}: {REFUSED}", True)),
    Case("not-applied", SAID, Sync("False", True),
         Said("GauntletNotSynced", f"the Job is not applied: {REFUSED}", True)),
    Case("synced", "a Job applied is evaluating, nothing to warn about", Sync("True", True),
         Said("Evaluating", "gauntlet Job ", False)),
]  # fmt: skip


def _job_status(sim: Sim, sync: Sync) -> None:
    obj = sim.observed["gauntlet-r1"]
    obj["status"] = {"conditions": [cond("Synced", sync.synced, "ReconcileError", REFUSED)]}
    if sync.created:
        manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
        manifest["status"] = {"active": 1}
        obj["status"]["atProvider"] = {"manifest": manifest}


@table(SYNC_CASES)
def test_a_gauntlet_job_not_synced_is_said_with_one_warning(
    sim_factory, clock: Clock, case: Case[Sync, Said]
) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    _job_status(sim, case.inputs)
    clock.advance(10)
    sim.reconcile()
    want = case.want
    assert (sim.phase, sim.status["reason"]) == ("Evaluating", want.reason), sim.status
    verdict = sim.conditions()["Verdict"]
    assert (verdict["status"], verdict["reason"]) == ("Unknown", want.reason)
    assert want.fragment in verdict["message"], verdict["message"]
    warnings = [m for s_, m in results(sim.rsp) if s_ == "Warning"]
    assert len(warnings) == int(want.warned) and all(want.fragment in m for m in warnings)
    # Once: the next call, with the same report, says nothing new.
    clock.advance(10)
    sim.reconcile()
    assert sim.status["reason"] == want.reason and results(sim.rsp) == []
    assert "gauntlet-r1" in sim.observed  # kept as it is: once applied, it runs


def test_a_gauntlet_never_created_times_out_saying_why(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    _job_status(sim, Sync("False", False))
    sim.reconcile()
    clock.advance(30 * 60)
    sim.reconcile()
    v = sim.status["verdict"]
    assert v["reason"] == "TimedOut"
    assert f"gauntlet did not finish (gauntlet Job {sim.status['gauntlet']['job']} not created" in (
        v["summary"]
    )


def test_a_gauntlet_job_applied_after_all_is_evaluating_again(sim_factory, clock: Clock) -> None:
    sim = sim_factory()
    sim.to_evaluating()
    _job_status(sim, Sync("False", False))
    sim.reconcile()
    assert sim.status["reason"] == "GauntletNotSynced"
    _job_status(sim, Sync("True", True))
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Evaluating", "Evaluating")
    assert [s_ for s_, _ in results(sim.rsp)] == ["Normal"]


# ---- ArtifactGate on every path (review 16a F1, F2) -----------------------------------

GATE = {"modelCacheRef": {"name": "qwen-cache"}}
OWN_GATE = (
    "review 16a F2: the function returns ArtifactGate on every call, the gate the admitted "
    "run opened with (status.gate); one left out kept what a held edit wrote"
)
EVALUATED = "review 16a F1: a set gate is evaluated when the CronJob blocks, never 'not set'"


def _gated(sim_factory: Any, *, ready: bool = True, cronjob_: bool = True) -> Sim:
    phases = None if ready else {"gpu-a": "Ready", "gpu-b": "Hydrating"}
    world = [inference_cluster(CLUSTER), cache(phases)] + ([cronjob()] if cronjob_ else [])
    return sim_factory(spec(artifactGate=GATE), world)


def _gate_passed(sim: Sim, clock: Clock) -> None:
    sim.to_evaluating()
    sim.job_finished(True, NOW + datetime.timedelta(minutes=5))
    clock.advance(600)
    sim.reconcile()
    assert sim.phase == "Succeeded", sim.status


def _gate_held_then_resumed(sim: Sim, clock: Clock) -> None:
    sim.to_evaluating()
    original = copy.deepcopy(sim.xr["spec"])
    sim.xr["spec"] = copy.deepcopy(original)
    sim.xr["spec"]["artifactGate"] = {"modelCacheRef": {"name": "qwen-cahce"}}
    sim.xr["metadata"]["generation"] += 1
    clock.advance(30)
    sim.reconcile()
    assert sim.phase == "Blocked"
    assert sim.conditions()["ArtifactGate"]["status"] == "False"
    sim.xr["spec"] = original
    sim.xr["metadata"]["generation"] += 1
    clock.advance(30)
    sim.reconcile()
    assert sim.phase == "Evaluating", sim.status


def _gate_suspended(sim: Sim, clock: Clock) -> None:
    sim.to_evaluating()
    sim.update_spec(suspend=True)
    clock.advance(30)
    sim.reconcile()
    assert sim.phase == "Suspended"


def _gate_cronjob_removed(sim: Sim, clock: Clock) -> None:
    sim.reconcile()
    sim.reconcile()
    sim.candidate_ready()
    sim.remove("CronJob", "lm-eval")
    clock.advance(30)
    sim.reconcile()
    assert (sim.phase, sim.status["reason"]) == ("Blocked", "TemplateNotFound")


def _gate_invalid_mid_run(sim: Sim, clock: Clock) -> None:
    sim.to_evaluating()
    sim.validate = False  # this XR bypassed admission (the XRD rejects MODELS)
    sim.xr["spec"]["gauntlet"]["env"].append({"name": "MODELS", "value": "chat=vllm"})
    clock.advance(30)
    sim.reconcile()
    assert sim.status["reason"] == "InvalidSpec"


GATE_PATHS: list[Case[Any, tuple[str, str]]] = [
    Case("blocked-no-cronjob-cache-not-ready", EVALUATED,
         (lambda f: _gated(f, ready=False, cronjob_=False), lambda s, c: s.reconcile()),
         ("False", "ArtifactCacheNotReady")),
    Case("blocked-no-cronjob-cache-ready", EVALUATED,
         (lambda f: _gated(f, cronjob_=False), lambda s, c: s.reconcile()),
         ("True", "ArtifactGateOpen")),
    Case("blocked-cache-not-ready", "the gate as evaluated",
         (lambda f: _gated(f, ready=False), lambda s, c: s.reconcile()),
         ("False", "ArtifactCacheNotReady")),
    Case("deploying", OWN_GATE, (_gated, lambda s, c: (s.reconcile(), s.reconcile())),
         ("True", "ArtifactGateOpen")),
    Case("evaluating", OWN_GATE, (_gated, lambda s, c: s.to_evaluating()),
         ("True", "ArtifactGateOpen")),
    Case("passed", OWN_GATE, (_gated, _gate_passed), ("True", "ArtifactGateOpen")),
    Case("held-edit-reverted", OWN_GATE, (_gated, _gate_held_then_resumed),
         ("True", "ArtifactGateOpen")),
    Case("templateref-typo-held", EVALUATED + " (the hold path)",
         (_gated, lambda s, c: (s.to_evaluating(), _typo(s), s.reconcile())),
         ("True", "ArtifactGateOpen")),
    Case("cronjob-removed-after-admission", OWN_GATE, (_gated, _gate_cronjob_removed),
         ("True", "ArtifactGateOpen")),
    Case("invalid-spec-mid-run", OWN_GATE, (_gated, _gate_invalid_mid_run),
         ("True", "ArtifactGateOpen")),
    Case("suspended", "not evaluated while suspended, and says so",
         (_gated, _gate_suspended), ("Unknown", "ArtifactGateNotEvaluated")),
    Case("ungated-passed", "a run admitted without a gate says so to the end",
         (lambda f: f(), _gate_passed), ("True", "NoArtifactGate")),
]  # fmt: skip


@table(GATE_PATHS)
def test_artifact_gate_is_returned_on_every_path(
    sim_factory, clock: Clock, case: Case[Any, tuple[str, str]]
) -> None:
    make, steps = case.inputs
    sim = make(sim_factory)
    steps(sim, clock)
    c = sim.conditions().get("ArtifactGate")
    assert c is not None, (case.reason, sim.status.get("phase"))
    assert (c["status"], c["reason"]) == case.want, (case.reason, c)
    assert "not set" not in c["message"] or case.want[1] == "NoArtifactGate", c
    if case.want == ("True", "ArtifactGateOpen"):
        # The gated cache's, never an edit's since reverted.
        assert "ml-team/qwen-cache " in c["message"], c
    # A fixed point in an unchanged world.
    before = (copy.deepcopy(sim.status), sim.conditions())
    clock.advance(10)
    sim.reconcile()
    assert (sim.status, sim.conditions()) == before


# ---- status is not trusted (review 20b F1, F5) ------------------------------------------

# Crossplane v2.4's edit role grants <plural>/status: a tenant can write every status field.
# Each case forges status between the call that saw the candidate Ready's predecessor and
# the call that composes the gauntlet Job; the Job must still go where trusted inputs say.
VICTIM_JOB = exp.gauntlet_job_name("victim-team", exp.run_name("nightly-canary", 3))


def _forge_gauntlet(**over: Any) -> Callable[[Sim], None]:
    def forge(sim: Sim) -> None:
        g = {
            "job": exp.gauntlet_job_name(NAMESPACE, RUN1),
            "cluster": CLUSTER,
            "endpoint": ENDPOINT,
            "providerConfig": {"kind": "ClusterProviderConfig", "name": "default"},
            "activeDeadlineSeconds": 1500,
            "startedAt": "2026-11-29T09:03:00Z",
        }
        sim.status["gauntlet"] = {**g, **over}

    return forge


def _forge_candidate(**over: Any) -> Callable[[Sim], None]:
    def forge(sim: Sim) -> None:
        sim.status["candidate"].update(over)

    return forge


FORGED_STATUS = [
    Case(
        "providerConfig no InferenceCluster reports",
        "the Object's providerConfigRef is the candidate's InferenceCluster's",
        _forge_gauntlet(
            providerConfig={"kind": "ClusterProviderConfig", "name": "control-plane-admin"}
        ),
        "status.gauntlet.providerConfig",
    ),
    Case(
        "job name of another namespace's experiment",
        "the remote Job's name is derived from this run, never read from status",
        _forge_gauntlet(job=VICTIM_JOB),
        "status.gauntlet.job",
    ),
    Case(
        "cluster and endpoint of no replica of the candidate",
        "the cluster and endpoint are the serving replica's",
        _forge_gauntlet(cluster="gpu-other", endpoint="http://10.0.0.1:8000"),
        "status.gauntlet.cluster",
    ),
    Case(
        "activeDeadlineSeconds of 10^9",
        "the Job's deadline is at most spec.timeout",
        _forge_gauntlet(activeDeadlineSeconds=10**9),
        None,
    ),
    Case(
        "far-future deadline",
        "the deadline is at most spec.timeout after the run's start",
        _forge_candidate(deadline="2099-01-01T00:00:00Z"),
        "status.candidate.deadline",
    ),
    Case(
        "far-future start and deadline",
        "the start is at most the oldest child's creationTimestamp",
        _forge_candidate(createdAt="2099-01-01T00:00:00Z", deadline="2099-01-01T00:30:00Z"),
        "status.candidate.createdAt",
    ),
]


@table(FORGED_STATUS)
def test_a_forged_status_aims_the_gauntlet_nowhere_else(
    case: Case[Callable[[Sim], None], str | None], sim_factory, clock: Clock
) -> None:
    sim = sim_factory()
    sim.reconcile()
    clock.advance(60)
    sim.reconcile()  # the candidate is observed
    sim.candidate_ready()
    case.inputs(sim)
    clock.advance(60)
    sim.reconcile()
    assert sim.phase == "Evaluating", (case.reason, sim.status)
    obj = sim.observed["gauntlet-r1"]
    job = obj["spec"]["forProvider"]["manifest"]
    assert obj["spec"]["providerConfigRef"] == {
        "kind": "ClusterProviderConfig",
        "name": "default",
    }, case.reason
    assert job["metadata"]["name"] == exp.gauntlet_job_name(NAMESPACE, RUN1), case.reason
    assert job["spec"]["activeDeadlineSeconds"] <= 30 * 60, case.reason
    env = dict(env_of(job["spec"]["template"]["spec"]["containers"][0]))
    assert env["MODELPLANE_ENDPOINT"] == ENDPOINT, case.reason
    cand = sim.status["candidate"]
    assert cand["createdAt"] == "2026-11-29T09:00:00Z", (case.reason, cand)
    assert cand["deadline"] == "2026-11-29T09:30:00Z", (case.reason, cand)
    g = sim.status["gauntlet"]
    assert (g["cluster"], g["providerConfig"]["name"]) == (CLUSTER, "default"), case.reason
    warned = [m for s, m in results(sim.rsp) if s == "Warning" and "ignored" in m]
    if case.want is not None:
        assert any(m.startswith(case.want + " ") for m in warned), (case.reason, warned)
    # Bounded: the run ends at spec.timeout (30m from 09:00) whatever status said.
    clock.advance(30 * 60)
    sim.reconcile()
    assert sim.status["verdict"]["reason"] == "TimedOut", (case.reason, sim.status)
    assert "gauntlet-r1" in sim.observed  # kept as evidence, never deleted by the forgery


def test_a_forged_deadline_under_an_invalid_spec_is_bounded_by_the_children(
    sim_factory, clock: Clock
) -> None:
    """A start later than the candidate's creationTimestamp is not trusted, even while
    the spec is invalid (no spec.timeout to bound the deadline by)."""
    sim = sim_factory()
    sim.to_evaluating()
    sim.status["candidate"]["createdAt"] = "2099-01-01T00:00:00Z"
    sim.reconcile()
    assert sim.status["candidate"]["createdAt"] == "2026-11-29T09:00:00Z", sim.status
    warned = [m for s, m in results(sim.rsp) if s == "Warning"]
    assert any(m.startswith("status.candidate.createdAt '2099-") for m in warned), warned


def test_a_run_number_jump_deletes_no_child(sim_factory, clock: Clock) -> None:
    """status.runNumber rewritten mid-run: run 1's children stay (observed composed
    resources are what exists) and nothing is composed on a provider config of status."""
    sim = sim_factory()
    sim.to_evaluating()
    before = set(sim.observed)
    sim.status["runNumber"] = 500
    clock.advance(60)
    sim.reconcile()
    assert before <= set(sim.observed), (before, set(sim.observed))
    for body in sim.observed.values():
        if body["kind"] == "Object":
            assert body["spec"]["providerConfigRef"]["name"] == "default"
            name = body["spec"]["forProvider"]["manifest"]["metadata"]["name"]
            assert name == exp.gauntlet_job_name(NAMESPACE, RUN1), name


def test_a_forged_history_costs_one_event(sim_factory, clock: Clock) -> None:
    """Review 20b F5: 25,000 forged records made one response carry 24,993 RunPruned
    events. Only the last MAX_HISTORY_LIMIT records are read; one event counts the rest."""
    sim = sim_factory(spec(repeatAfter="1h", historyLimit=3))
    sim.reconcile()
    sim.status["history"] = [
        {
            "run": exp.run_name(NAME, 1000 + n),
            "number": 1000 + n,
            "pass": True,
            "reason": PASSED,
            "summary": "forged",
            "completedAt": "2026-11-29T08:00:00Z",
        }
        for n in range(25_000)
    ]
    clock.advance(60)
    sim.reconcile()
    pruned = [m for s, m in results(sim.rsp) if "left the history" in m]
    assert len(pruned) == 1, len(pruned)
    assert pruned[0].startswith("24997 runs ("), pruned[0]
    assert "24980 records of status.history past the 20" in pruned[0], pruned[0]
    assert len(sim.status["history"]) == 3
    assert "candidate-r1" in sim.observed  # the running run is untouched


def test_the_xrd_bounds_status_history_as_the_function_reads_it() -> None:
    """One owner: MAX_HISTORY_LIMIT (function.api.modelexperiment); the XRD's maxItems on
    status.history agrees, so a status write of more records is refused."""
    xrd = find_xrd(API_VERSION, "ModelExperiment")
    version = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    history = version["properties"]["status"]["properties"]["history"]
    assert history["maxItems"] == MAX_HISTORY_LIMIT
