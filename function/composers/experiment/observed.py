"""ModelExperiment's reading of observed state: the gauntlet Job's result, the
candidate's readiness or failure, and the replica it serves from.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

from function.api.modeldeployment import (
    FATAL_SCHEDULING,
    HYDRATION_FAILED,
    REPLICAS_READY,
    SCHEDULED,
)
from function.api.modelreplica import MODEL_READY, REASON_HYDRATION_FAILED
from function.composers.experiment.state import RunState, whole_count
from function.core import structs
from function.core.inputs import Resolved
from function.core.timeutil import parse_time
from function.manifests.objects import observed_manifest
from function.naming import LABEL_DEPLOYMENT, LABEL_EXPERIMENT, LABEL_RUN, label_value


@dataclass(frozen=True)
class JobResult:
    """A finished gauntlet Job: passed or not, when, and what it said."""

    passed: bool
    finished_at: datetime.datetime | None
    summary: str


def job_result(obj: Any, experiment: str, st: RunState) -> JobResult | None:
    """The result of the observed gauntlet Object, or None while it has none.

    Only a Job whose labels name this experiment and this run counts (fencing).
    ``Complete=True`` passes (at ``status.completionTime``); ``Failed=True`` fails
    (at the condition's ``lastTransitionTime``, with its reason and message).
    """
    job = observed_manifest(obj)
    if job is None:
        return None
    labels = structs.get_map(job, "metadata", "labels")
    if labels.get(LABEL_RUN) != str(st.number) or labels.get(LABEL_EXPERIMENT) != label_value(
        experiment
    ):
        return None
    conds = structs.conditions(job)
    name = structs.get_str(job, "metadata", "name")
    done = conds.get("Complete")
    if done is not None and structs.get(done, "status") == "True":
        at = parse_time(structs.get(job, "status", "completionTime")) or parse_time(
            structs.get(done, "lastTransitionTime")
        )
        n = whole_count(structs.get(job, "status", "succeeded"))
        return JobResult(True, at, f"gauntlet Job {name} completed ({n} pod(s) succeeded)")
    failed = conds.get("Failed")
    if failed is not None and structs.get(failed, "status") == "True":
        at = parse_time(structs.get(failed, "lastTransitionTime"))
        reason = structs.get_str(failed, "reason") or "Failed"
        msg = structs.get_str(failed, "message")
        return JobResult(
            False, at, f"gauntlet Job {name} failed: {reason}" + (f": {msg}" if msg else "")
        )
    return None


# The candidate ModelDeployment's fields under its template's spec, as its messages name
# them: in the experiment they are spec.candidate's (the candidate spec is copied
# verbatim into spec.template.spec). A field path the function writes starts a token (at
# the start, after a space or "(") and goes on with a field (".x" or "[i]"); what the user
# wrote is quoted (function.core.errors.quoted: a Python literal, opened after a non-word
# character, so an apostrophe in "candidate's" opens none) or a name ("ml-team/<name>"),
# and is matched as a whole so that it is left as written.
_QUOTED = r"""(?<!\w)(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
_REWRITE = re.compile(rf"(?P<quoted>{_QUOTED})|(?<![^\s(])spec\.template\.spec(?=\.[A-Za-z]|\[)")


def _rename(m: re.Match[str]) -> str:
    quoted = m.group("quoted")
    return quoted if quoted is not None else "spec.candidate"


def in_experiment_terms(message: str) -> str:
    """``message`` of the candidate ModelDeployment with the fields it names under
    ``spec.template.spec`` named as the experiment's ``spec.candidate`` (found by review
    17n: the experiment's messages sent the user to a field of a child they never wrote,
    ``spec.template.spec.modelCacheRef``, for ``spec.candidate.modelCacheRef``). Text
    the message quotes from the spec (a CEL selector) and names are left as written
    (review 17h: a string literal ``"spec.template.spec"`` in a selector was rewritten).
    Never longer than ``message``."""
    return _REWRITE.sub(_rename, message)


def candidate_ready(cand: Any) -> bool:
    """The candidate serves: Crossplane's ``Ready``, or ``ReplicasReady`` with a ready replica.

    The second form does not wait for composed resources that do not serve (the
    deployment's cache Usage) to report ready; the gauntlet still starts only once
    the replica reports an endpoint.
    """
    if cand is None:
        return False
    if structs.condition_is(cand, "Ready"):
        return True
    ready = whole_count(structs.get(cand, "status", "replicas", "ready"))
    return ready >= 1 and structs.condition_is(cand, REPLICAS_READY)


def candidate_failure(cand: Any, replicas: Any) -> str | None:
    """Why the candidate can never become ready, or None.

    HydrationFailed on the deployment (``ReplicasReady``) or on any of its replicas
    (``ModelReady``), or a ``ReplicasScheduled`` reason that waiting cannot fix.
    """
    conds = structs.conditions(cand)
    rr = conds.get(REPLICAS_READY)
    if rr is not None and structs.get_str(rr, "reason") == HYDRATION_FAILED:
        return "hydration failed: " + in_experiment_terms(
            structs.get_str(rr, "message") or HYDRATION_FAILED
        )
    if isinstance(replicas, Resolved):
        for r in replicas.items:
            c = structs.conditions(r).get(MODEL_READY)
            if c is not None and structs.get_str(c, "reason") == REASON_HYDRATION_FAILED:
                cluster = structs.get_str(r, "spec", "clusterName")
                return f"hydration failed on {cluster}: " + (
                    structs.get_str(c, "message") or REASON_HYDRATION_FAILED
                )
    rs = conds.get(SCHEDULED)
    if (
        rs is not None
        and structs.get(rs, "status") == "False"
        and structs.get_str(rs, "reason") in FATAL_SCHEDULING
    ):
        return (
            f"cannot be scheduled: {structs.get_str(rs, 'reason')}: "
            f"{in_experiment_terms(structs.get_str(rs, 'message'))}"
        )
    return None


def candidate_progress(cand: Any) -> str:
    """What the candidate ModelDeployment (``cand``, None before Crossplane reports it)
    reports while it is not Ready: ``<ready>/<total> replicas ready``, then ``<type>:
    <reason> <message>`` of each of its ``Synced``, ``ReplicasScheduled`` and
    ``ReplicasReady`` conditions that is not True (fields named as the experiment's,
    :func:`in_experiment_terms`)."""
    if cand is None:
        return "created; waiting for Crossplane to report it"
    ready = whole_count(structs.get(cand, "status", "replicas", "ready"))
    total = whole_count(structs.get(cand, "status", "replicas", "total"))
    parts = [f"{ready}/{total or 1} replicas ready"]
    for typ in ("Synced", SCHEDULED, REPLICAS_READY):
        c = structs.conditions(cand).get(typ)
        if c is not None and structs.get(c, "status") != "True":
            msg = in_experiment_terms(structs.get_str(c, "message"))
            parts.append(f"{typ}: {structs.get_str(c, 'reason')} {msg}")
    return "; ".join(p.strip() for p in parts)


def candidate_report(cand: Any) -> str:
    """Where a candidate that never became Ready stood, for a ``TimedOut`` summary: "the
    candidate last reported: " and :func:`candidate_progress`, or that it was never
    observed (``cand`` None)."""
    if cand is None:
        return "the candidate was not observed at the deadline"
    return f"the candidate last reported: {candidate_progress(cand)}"


def serving_replica(replicas: Resolved, candidate: str) -> tuple[str, str] | None:
    """``(cluster, endpoint)`` of the candidate's replica that serves, or None."""
    for r in sorted(replicas.items, key=lambda r: structs.get_str(r, "metadata", "name")):
        if structs.get_map(r, "metadata", "labels").get(LABEL_DEPLOYMENT) != label_value(candidate):
            continue
        endpoint = structs.get_str(r, "status", "endpoint")
        cluster = structs.get_str(r, "spec", "clusterName")
        if endpoint and cluster:
            return cluster, endpoint
    return None
