"""Session 11's trial finding through Crossplane's own engine: a tenant's template may
not reach another namespace's objects on the shared workload namespace.

A tenant wrote, in its own CronJob and member templates, references to another
namespace's token Secret and cache PVC (whose names follow the README's name contract)
and a ``hostPath`` of ``/``; the function composed them unchanged into namespace
``default`` of the workload cluster, where every namespace's token Secrets live. Now:

- a ModelDeployment with such a member template gets a fatal result naming the field:
  ``crossplane render`` exits non-zero, so Crossplane applies nothing;
- a ModelBackfill whose CronJob holds it is ``Blocked`` (``InvalidTemplate``, the
  CronJob's field named) and composes no Job; a Job already running is kept when the
  spec changes to one that would need the forbidden template.

And a ModelExperiment whose ``templateRef`` gets a typo mid-evaluation holds its run
(its candidate and Job kept) instead of deleting them.
"""

from __future__ import annotations

import copy
from typing import Any

from function import naming
from tests.e2e.test_lifecycles import (
    Backfill,
    Experiment,
    backfill_to_running,
    cond,
    experiment_to_evaluating,
)
from tests.e2e.test_member_templates_and_cel import _steady

OTHERS_TOKEN = naming.cache_secret_name("other-team", "qwen-cache")
OTHERS_PVC = naming.cache_pvc_name("other-team", "qwen-cache")


def test_a_member_template_naming_another_namespaces_token_is_refused(render):
    d = _steady(render)
    xr = copy.deepcopy(d.dep.xr)
    member = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["template"]["spec"]["containers"][0]["env"] = [
        {"name": "STOLEN", "valueFrom": {"secretKeyRef": {"name": OTHERS_TOKEN, "key": "token"}}}
    ]
    out = render(xr, observed=list(d.dep.observed.values()), required=d.required)
    assert out.exit_code != 0, out.stdout
    field = (
        "spec.template.spec.engines[0].members[0].template.spec.containers[0]"
        ".env[0].valueFrom.secretKeyRef.name"
    )
    assert field in out.stderr and OTHERS_TOKEN in out.stderr, out.stderr


def _poison(b: Backfill) -> dict[str, Any]:
    """The backfill's CronJob with another namespace's token, cache PVC and the node's /."""
    cj = next(d for d in b.bf.required if d["kind"] == "CronJob")
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod["containers"][0].setdefault("env", []).append(
        {"name": "STOLEN", "valueFrom": {"secretKeyRef": {"name": OTHERS_TOKEN, "key": "token"}}}
    )
    pod.setdefault("volumes", []).extend(
        [
            {"name": "cache", "persistentVolumeClaim": {"claimName": OTHERS_PVC}},
            {"name": "root", "hostPath": {"path": "/"}},
        ]
    )
    return cj


def test_a_backfill_cronjob_naming_another_namespaces_token_is_blocked(render):
    b = Backfill(render)
    _poison(b)
    out = b.bf.reconcile()
    st = b.bf.status
    assert (st["phase"], st["reason"]) == ("Blocked", "InvalidTemplate"), st
    # The first field refused: the volumes come before the containers.
    assert "volumes[1].persistentVolumeClaim.claimName" in st["message"], st["message"]
    assert OTHERS_PVC in st["message"]
    assert cond(out, "Backfilling")[0] == "False"
    assert out.composed == {}


def test_a_running_backfill_keeps_its_job_when_the_new_spec_needs_a_forbidden_template(render):
    b = Backfill(render)
    backfill_to_running(b)
    job = copy.deepcopy(b.bf.last.composed["job-1"])
    _poison(b)
    b.bf.xr["spec"]["env"] = [{"name": "LIMIT", "value": "50"}]
    out = b.bf.reconcile()
    assert b.bf.status["reason"] == "InvalidTemplate", b.bf.status
    assert out.deleted(b.bf.observed.values()) == set()
    assert out.composed["job-1"]["spec"] == job["spec"]


def test_a_templateref_typo_mid_evaluation_holds_the_run(render):
    """Session 11's trial: a typo in ``spec.gauntlet.templateRef`` while run 1 evaluates
    deleted its candidate and Job; through Crossplane, nothing is deleted now, and the
    name written back resumes run 1."""
    e = Experiment(render)
    experiment_to_evaluating(e)
    run1, composed = e.exp.status["run"], copy.deepcopy(e.exp.last.composed)
    e.exp.xr["spec"]["gauntlet"]["templateRef"]["name"] = "lm-evl"
    e.exp.xr["metadata"]["generation"] = 2
    out = e.exp.reconcile()
    st = e.exp.status
    assert (st["phase"], st["reason"], st["run"]) == ("Blocked", "TemplateNotFound", run1), st
    assert out.deleted(e.exp.observed.values()) == set()
    assert {k: v["spec"] for k, v in out.composed.items()} == {
        k: v["spec"] for k, v in composed.items()
    }
    assert cond(out, "Runnable") == ("False", "TemplateNotFound")
    e.exp.xr["spec"]["gauntlet"]["templateRef"]["name"] = "lm-eval"
    e.exp.xr["metadata"]["generation"] = 3
    out = e.exp.reconcile()
    assert (e.exp.status["phase"], e.exp.status["run"]) == ("Evaluating", run1)
    assert out.deleted(e.exp.observed.values()) == set()
