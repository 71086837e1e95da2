"""ModelExperiment conditions over many reconciles, through Crossplane's own engine
(review 16a, F1-F3).

Crossplane keeps the last value of a condition type the function stops returning, and
the status :class:`tests.e2e.lifecycle.XR` feeds back is the one the core binary writes,
so these tests see what a user would: a condition left behind, or one that says the
opposite of the world.

- F1: a set artifact gate is never reported "not set" while the gauntlet CronJob is
  missing or invalid: the gate is evaluated anyway (closed when its cache is not ready).
- F2: a held edit's ``ArtifactGate=False`` does not outlive the edit: the resumed run,
  and its verdict, say the gate the run opened with.
- F3: every InferenceCluster of the candidate's selector briefly absent is a wait
  (``NoMatchingClusters``), not a terminal ``CandidateFailed``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from function.naming import hydration_name
from function.render import load_yaml
from tests.e2e.lifecycle import XR
from tests.e2e.test_lifecycles import EXPERIMENT, Experiment, cond, experiment_to_evaluating
from tests.support import world
from tests.support.table import Case, table


def _example() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (xr,) = load_yaml([str(EXPERIMENT / "xr.yaml")])
    base = [d for d in load_yaml([str(EXPERIMENT / "required")]) if d["kind"] != "ModelReplica"]
    return xr, base


def _hydrating(cache: dict[str, Any]) -> dict[str, Any]:
    """The example's ModelCache with one of its two clusters still hydrating."""
    c = copy.deepcopy(cache)
    c["status"]["conditions"][0].update(
        status="False", reason="Hydrating", message="1/2 clusters ready"
    )
    c["status"]["summary"]["ready"] = "1/2"
    return c


def _no_containers(cronjob: dict[str, Any]) -> dict[str, Any]:
    c = copy.deepcopy(cronjob)
    c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"] = []
    return c


@dataclass(frozen=True)
class Blocked:
    """The world of a fresh experiment: its ModelCache ready, its CronJob missing or
    invalid (``cronjob``: ``missing``, ``invalid``), and whether the spec has a gate."""

    cache_ready: bool
    cronjob: str
    gated: bool = True


@dataclass(frozen=True)
class Says:
    runnable: str
    gate: tuple[str, str]


NOT_SET = "review 16a F1: a set gate was reported True NoArtifactGate ('not set')"
CLOSED = NOT_SET + ", a closed gate reported open"

BLOCKED: list[Case[Blocked, Says]] = [
    Case("missing-cronjob-cache-not-ready", CLOSED, Blocked(False, "missing"),
         Says("TemplateNotFound", ("False", "ArtifactCacheNotReady"))),
    Case("missing-cronjob-cache-ready", NOT_SET, Blocked(True, "missing"),
         Says("TemplateNotFound", ("True", "ArtifactGateOpen"))),
    Case("invalid-cronjob-cache-not-ready", CLOSED, Blocked(False, "invalid"),
         Says("TemplateInvalid", ("False", "ArtifactCacheNotReady"))),
    Case("invalid-cronjob-cache-ready", NOT_SET, Blocked(True, "invalid"),
         Says("TemplateInvalid", ("True", "ArtifactGateOpen"))),
    Case("missing-cronjob-no-gate", "without spec.artifactGate the gate is not set",
         Blocked(True, "missing", gated=False),
         Says("TemplateNotFound", ("True", "NoArtifactGate"))),
]  # fmt: skip


@table(BLOCKED)
def test_a_blocked_cronjob_never_reports_a_set_gate_as_unset(
    render, case: Case[Blocked, Says]
) -> None:
    w, want = case.inputs, case.want
    xr, base = _example()
    if not w.gated:
        del xr["spec"]["artifactGate"]
    required = []
    for d in base:
        if d["kind"] == "ModelCache" and not w.cache_ready:
            d = _hydrating(d)
        if d["kind"] == "CronJob":
            if w.cronjob == "missing":
                continue
            d = _no_containers(d)
        required.append(d)
    e = XR(render, xr, required)
    out = e.reconcile()
    assert cond(out, "Runnable") == ("False", want.runnable), case.reason
    gate = out.condition("ArtifactGate") or {}
    assert (gate.get("status"), gate.get("reason")) == want.gate, (case.reason, gate)
    if w.gated:
        assert "not set" not in gate.get("message", ""), gate
    # A fixed point in an unchanged world.
    status = copy.deepcopy(e.status)
    e.reconcile()
    assert e.status == status


def test_a_closed_gate_then_a_deleted_cronjob_keeps_saying_the_gate(render) -> None:
    """The review's sequence: the gate closed (cache hydrating), then the cache ready and
    the CronJob deleted: the gate opens (it is evaluated), never "not set"."""
    xr, base = _example()
    cache = next(d for d in base if d["kind"] == "ModelCache")
    e = XR(render, xr, [d for d in base if d["kind"] != "ModelCache"] + [_hydrating(cache)])
    out = e.reconcile()
    assert cond(out, "ArtifactGate") == ("False", "ArtifactCacheNotReady")
    e.required = [d for d in base if d["kind"] != "CronJob"]
    out = e.reconcile()
    assert cond(out, "Runnable") == ("False", "TemplateNotFound")
    assert cond(out, "ArtifactGate") == ("True", "ArtifactGateOpen"), out.condition("ArtifactGate")


@dataclass(frozen=True)
class Edit:
    """A mid-run edit that holds run 1 (``field``: ``templateRef`` or ``cache``)."""

    field: str


@dataclass(frozen=True)
class Held:
    gate: tuple[str, str]


STALE = "review 16a F2: the held edit's ArtifactGate outlived it into a passed, Ready run"

HELD_EDITS: list[Case[Edit, Held]] = [
    Case("cache-typo", STALE, Edit("cache"), Held(("False", "ArtifactSourceMismatch"))),
    Case("templateref-typo", "review 16a F1 (hold path): the held edit's gate is evaluated, "
         "never reported 'not set'", Edit("templateRef"), Held(("True", "ArtifactGateOpen"))),
]  # fmt: skip


@table(HELD_EDITS)
def test_a_held_edit_reverted_leaves_the_runs_own_gate(render, case: Case[Edit, Held]) -> None:
    e = Experiment(render)
    experiment_to_evaluating(e)
    assert cond(e.exp.last, "ArtifactGate") == ("True", "ArtifactGateOpen")
    spec = copy.deepcopy(e.exp.xr["spec"])

    if case.inputs.field == "cache":
        e.exp.xr["spec"]["artifactGate"]["modelCacheRef"]["name"] = "qwen-cahce"
    else:
        e.exp.xr["spec"]["gauntlet"]["templateRef"]["name"] = "lm-evl"
    e.exp.xr["metadata"]["generation"] = 2
    out = e.exp.reconcile()
    assert e.exp.status["phase"] == "Blocked"
    assert cond(out, "ArtifactGate") == case.want.gate, out.condition("ArtifactGate")
    assert "not set" not in (out.condition("ArtifactGate") or {}).get("message", "")

    # The edit reverted: run 1 resumes under its own spec, its gate the one it opened with.
    e.exp.xr["spec"] = spec
    e.exp.xr["metadata"]["generation"] = 3
    out = e.exp.reconcile()
    assert e.exp.status["phase"] == "Evaluating"
    assert cond(out, "Runnable") == ("True", "Admitted")
    gate = out.condition("ArtifactGate") or {}
    assert (gate.get("status"), gate.get("reason")) == ("True", "ArtifactGateOpen"), (
        case.reason,
        gate,
    )
    assert "qwen-cahce" not in gate.get("message", "") and "qwen-cache" in gate["message"]

    e.job(world.job_complete(e.started()), finished=True)
    out = e.exp.reconcile()
    assert cond(out, "Verdict") == ("True", "GauntletPassed")
    assert out.is_ready()
    assert cond(out, "ArtifactGate") == ("True", "ArtifactGateOpen"), out.condition("ArtifactGate")
    assert "qwen-cahce" not in (out.condition("ArtifactGate") or {}).get("message", "")
    # A fixed point once the released candidate is gone.
    e.drop_deleted()
    e.exp.reconcile()
    status = copy.deepcopy(e.exp.status)
    e.exp.reconcile()
    assert e.exp.status == status


def _hydrations() -> list[dict[str, Any]]:
    """The example cache's hydrations, Ready on both clusters (the candidate's footprint)."""
    return [
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelCacheHydration",
            "metadata": {
                "name": hydration_name("ml-team", "qwen-cache", c),
                "namespace": "ml-team",
                "labels": {
                    "modelplane.ai/cache": "qwen-cache",
                    "modelplane.ai/cluster": c,
                    "app.kubernetes.io/managed-by": "function-modelplane",
                },
            },
            "spec": {
                "clusterName": c,
                "cacheName": "qwen-cache",
                "source": "HuggingFace",
                "huggingFace": {
                    "repo": "Qwen/Qwen2.5-0.5B-Instruct",
                    "revision": "main",
                    "sizeGiB": 2,
                },
            },
            "status": {
                "phase": "Ready",
                "source": {
                    "repo": "Qwen/Qwen2.5-0.5B-Instruct",
                    "revision": "main",
                    "identity": "b91df569bcd7",
                },
            },
        }
        for c in ("gpu-us-east", "gpu-us-west")
    ]


def test_clusters_briefly_absent_while_the_candidate_deploys_is_a_wait(render) -> None:
    """Review 16a F3: every InferenceCluster of the candidate's selector absent (deleted
    and re-created) made the candidate report NoClusterInCacheFootprint, which the
    experiment read as final: the run Failed (CandidateFailed) for good."""
    xr, base = _example()
    e = XR(render, xr, base)
    out = e.reconcile()
    cand = out.composed["candidate-r1"]

    # The candidate ModelDeployment, rendered through the engine, without the clusters.
    gone = [d for d in base if d["kind"] != "InferenceCluster"] + _hydrations()
    c = XR(render, cand, gone)
    cout = c.reconcile()
    sched = cout.condition("ReplicasScheduled") or {}
    assert (sched.get("status"), sched.get("reason")) == ("False", "NoMatchingClusters"), sched
    e.observed["candidate-r1"] = world.observed_xr(cand, cout.xr)
    e.required = gone
    out = e.reconcile()
    assert e.status["phase"] == "Deploying", (e.status["phase"], out.condition("Verdict"))
    assert "candidate-r1" in out.composed

    # The clusters are back: the run goes on (the same run, its clock unchanged).
    created = e.status["candidate"]["createdAt"]
    c.required = base + _hydrations()
    cout = c.reconcile()
    e.observed["candidate-r1"] = world.observed_xr(cand, cout.xr)
    e.required = base + _hydrations()
    out = e.reconcile()
    assert e.status["phase"] == "Deploying", (e.status["phase"], out.condition("Verdict"))
    assert e.status["candidate"]["createdAt"] == created and "verdict" not in e.status
