"""The ModelBackfill composer: one call's decisions (see the package docstring)."""

from __future__ import annotations

from function import API_VERSION
from function.api.modelbackfill import Parsed
from function.composers.backfill.admit import admit
from function.composers.backfill.attempt import active, cancelling, require_job_object
from function.composers.backfill.call import Call
from function.composers.backfill.children import settle_policies
from function.composers.backfill.observed import (
    KIND,
    REQ_BACKFILLS,
    REQ_DEPLOYMENT,
    REQ_REPLICAS,
    REQ_TEMPLATE,
    Required,
)
from function.composers.backfill.status import (
    ACTIVE,
    BLOCKED,
    CANCELLING,
    CONDITION,
    FAILED,
    SPEC_CONDITION,
    WAITING,
)
from function.core import events
from function.core.inputs import Inputs
from function.core.outcome import Outcome
from function.naming import LABEL_DEPLOYMENT, label_value


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelBackfill (see the package docstring for the rules).

    Args:
        inputs: The request's view; requirements used: ``deployment`` (ModelDeployment
            by name), ``template`` (CronJob by name), ``replicas`` (ModelReplicas labelled
            ``modelplane.ai/deployment``), ``backfills`` (every ModelBackfill of the
            namespace), ``cluster`` (the InferenceCluster a Job goes to) and, while
            cancelling, ``job-object`` (the attempt's Object by name).

    Returns:
        The outcome: at most two Objects (the active attempt's Job and, once its Object
        reported the Job, the Job's Observe-only observer), the status fields
        ``phase, reason, message, model, cluster, replica, replicaUID, job, idleSince,
        startedAt, runningSince, attempts, preemptions, completionTime, nextRunTime,
        lastResult, resultMessage, notIdleBefore, specHash``, the conditions
        ``Backfilling`` and ``SpecValid``, and lifecycle metric observations for the
        transitions recorded.
    """
    c = Call(inputs)
    out = pending(c) if not decide(c) or not c.out.final_iteration(c.inputs) else finish(c)
    settle_policies(out, inputs.observed)
    return out


def decide(c: Call) -> bool:
    """Run the state machine once.

    Returns:
        False when a requirement is not resolved yet: decide nothing in this call.
    """
    p = c.parsed
    require_base(c, p)
    phase = c.prior.phase or ""
    if phase == CANCELLING:
        require_job_object(c)
    req = Required.read(c.inputs, c.model)
    if req is None or not c.resolved():
        return False
    if phase in ACTIVE:
        return active(c, p, req, phase)
    if phase == CANCELLING:
        return cancelling(c, p, req)
    return admit(c, p, req)


def require_base(c: Call, p: Parsed) -> None:
    """The CronJob, the ModelDeployment, its ModelReplicas and every ModelBackfill of the
    namespace (to find the replicas other backfills hold)."""
    ns, out = c.inputs.namespace, c.out
    out.require(
        REQ_TEMPLATE, "batch/v1", "CronJob", match_name=p.spec.templateRef.name, namespace=ns
    )
    out.require(REQ_DEPLOYMENT, API_VERSION, "ModelDeployment", match_name=c.model, namespace=ns)
    out.require(
        REQ_REPLICAS,
        API_VERSION,
        "ModelReplica",
        match_labels={LABEL_DEPLOYMENT: label_value(c.model)},
        namespace=ns,
    )
    out.require(REQ_BACKFILLS, API_VERSION, KIND, match_labels={}, namespace=ns)


def finish(c: Call) -> Outcome:
    """The decided outcome: status, conditions, readiness and the transition's event."""
    out, st = c.out, c.st
    phase = st.phase or WAITING
    st.phase = phase
    if not st.message:
        st.message = phase
    if not st.reason:
        st.reason = phase
    c.note_model_wait()
    out.status.update(st.to_status())
    out.condition(CONDITION, "True" if phase in ACTIVE else "False", st.reason, st.message)
    # An invalid spec never gets here (a SpecError: a fatal result; Crossplane applies
    # nothing, Synced=False carries the message naming the field, and the runner sends
    # this condition False, InvalidSpec, with it: function.edge.codec.keep_conditions),
    # so here it says True.
    out.condition(SPEC_CONDITION, "True", "Valid", "the spec is valid")
    out.ready = phase not in (BLOCKED, FAILED)
    old = c.prior.phase
    if old != phase or (phase == BLOCKED and c.prior.reason != st.reason):
        events.transition(
            out,
            old if old != phase else None,
            phase,
            st.message,
            reason=f"Backfill{phase}" if phase != BLOCKED else st.reason,
        )
    return out


def pending(c: Call) -> Outcome:
    """Decide nothing: keep what exists, repeat the last status, ask for requirements."""
    out = Outcome(requirements=dict(c.out.requirements))
    out.keep_observed(c.inputs, ready=True)
    out.status.update(c.prior.to_status())
    out.requeue_after(c.poll)
    return out
