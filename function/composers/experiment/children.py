"""ModelExperiment's composed resources: the candidate ModelDeployment, the gauntlet
Job Object and the evidence Jobs of earlier runs.

Builders only: what to compose is decided in :mod:`.compose`; these turn the run
state into bodies that are the same on every call.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.modelexperiment import (
    ENGINE_CONTAINER,
    ENV_ENDPOINT,
    ENV_MODELS,
    SERVED_NAME_ENV,
    SERVED_NAME_REF,
    ExperimentSpec,
    candidate_template,
    drop_nulls,
    engine_words,
    force_served_name,
)
from function.composers.experiment.state import RunState, whole_count
from function.core import structs
from function.core.errors import quoted
from function.core.inputs import Inputs
from function.manifests.jobs import JOB_FINISHED_CEL, job_from_cronjob
from function.manifests.objects import OBSERVE_DELETE_POLICIES, remote_object
from function.naming import (
    ANNOTATION_EXPERIMENT,
    ANNOTATION_GATE_CACHE,
    ANNOTATION_GATE_CACHE_GENERATION,
    ANNOTATION_GATE_CACHE_UID,
    ANNOTATION_GATE_COMMIT,
    ANNOTATION_GATE_DIGEST,
    EXPERIMENT_TEMPLATE_LABEL_PREFIX,
    LABEL_COMPONENT,
    LABEL_EXPERIMENT,
    LABEL_GENERATION,
    LABEL_RUN,
    REMOTE_NAMESPACE,
    labels_with_full,
)
from function.serving.env import literal_env, set_env

ENV_SERVED_MODEL_NAME = SERVED_NAME_ENV


def child_labels(experiment: str, st: RunState) -> tuple[dict[str, str], dict[str, str]]:
    """Labels every child of the current run carries, and annotations for long values."""
    return labels_with_full(
        {
            LABEL_EXPERIMENT: experiment,
            LABEL_RUN: str(st.number),
            LABEL_GENERATION: str(st.generation),
        }
    )


def template_labels(experiment: str, st: RunState) -> dict[str, str]:
    """The only labels the candidate's replica and pod templates carry."""
    labels, _ = labels_with_full(
        {
            EXPERIMENT_TEMPLATE_LABEL_PREFIX + "name": experiment,
            EXPERIMENT_TEMPLATE_LABEL_PREFIX + "run": str(st.number),
            EXPERIMENT_TEMPLATE_LABEL_PREFIX + "generation": str(st.generation),
        }
    )
    return labels


def served_name_overrides(spec_dict: dict[str, Any]) -> list[str]:
    """What :func:`candidate_body` forces: ``<field>: --served-model-name <old> replaced``."""
    out = []
    cand = spec_dict.get("candidate") if isinstance(spec_dict, dict) else None
    engines = cand.get("engines") if isinstance(cand, dict) else None
    for ei, engine in enumerate(engines if isinstance(engines, list) else []):
        members = engine.get("members") if isinstance(engine, dict) else None
        for mi, member in enumerate(members if isinstance(members, list) else []):
            if not isinstance(member, dict):
                continue
            where = f"spec.candidate.engines[{ei}].members[{mi}]"
            for path, words in engine_words(member.get("template"), where):
                for i, old in force_served_name(list(words)):
                    out.append(f"{path}[{i}] served {quoted(old)}, forced to {SERVED_NAME_REF}")
    return out


def candidate_body(inputs: Inputs, spec_dict: dict[str, Any], st: RunState) -> dict[str, Any]:
    """The candidate ModelDeployment of the current run.

    The candidate spec passes through verbatim except: ``backend`` is dropped,
    ``replicas`` is 1, ``template.metadata.labels`` and every member's pod
    template labels are only the experiment's own, :func:`template_labels`
    (isolation: no Service that selects production pods can select the candidate), and
    ``MODELPLANE_SERVED_MODEL_NAME`` is set in every engine container, and a
    ``--served-model-name`` in an engine's ``command`` or ``args`` is forced to
    ``$(MODELPLANE_SERVED_MODEL_NAME)`` (``experiment_model.force_served_name``).
    """
    labels, ann = child_labels(inputs.name, st)
    tlabels = template_labels(inputs.name, st)
    cand = drop_nulls(spec_dict.get("candidate") or {})  # a copy: every dict and list is new
    cand.pop("backend", None)
    # The spec was validated (engines and members are lists of objects, a member has a
    # template object); anything deeper is the ModelDeployment's to judge, so odd
    # shapes there are passed through, never trusted.
    for engine in cand.get("engines") or ():
        for member in engine.get("members") or ():
            tmpl = member["template"] = candidate_template(member["template"], tlabels)
            pod = tmpl.get("spec")
            containers = pod.get("containers") if isinstance(pod, dict) else None
            if not isinstance(containers, list):
                continue
            containers = [c for c in containers if isinstance(c, dict)]
            engines = [c for c in containers if c.get("name") == ENGINE_CONTAINER] or containers
            for c in engines:
                set_env(c, literal_env([(ENV_SERVED_MODEL_NAME, st.name)]), first=True)
            # The candidate serves under its own name: a --served-model-name in the
            # engine's command or args is forced to it (one inside a shell string
            # blocks at parse time: experiment_model.Candidate).
            for _path, words in engine_words(tmpl, ""):
                force_served_name(words)
    annotations = {**ann, ANNOTATION_EXPERIMENT: f"{inputs.namespace}/{inputs.name}"}
    if st.gate:
        annotations[ANNOTATION_GATE_CACHE] = str(st.gate.get("cache", ""))
        annotations[ANNOTATION_GATE_CACHE_UID] = str(st.gate.get("uid", ""))
        annotations[ANNOTATION_GATE_CACHE_GENERATION] = str(st.gate.get("generation", ""))
        if st.gate.get("commit"):
            annotations[ANNOTATION_GATE_COMMIT] = str(st.gate["commit"])
        if st.gate.get("digest"):
            annotations[ANNOTATION_GATE_DIGEST] = str(st.gate["digest"])
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelDeployment",
        "metadata": {
            "name": st.name,
            "namespace": inputs.namespace,
            "labels": {**labels, LABEL_COMPONENT: "candidate"},
            "annotations": annotations,
        },
        "spec": {
            "replicas": 1,
            "template": {"metadata": {"labels": dict(tlabels)}, "spec": cand},
        },
    }


def gauntlet_object(
    inputs: Inputs,
    spec: ExperimentSpec,
    st: RunState,
    cronjob: Any,
) -> dict[str, Any]:
    """The provider-kubernetes Object of the current run's gauntlet Job.

    Reads ``st.gauntlet`` (``job``, ``endpoint``, ``providerConfig``,
    ``activeDeadlineSeconds``) so that the body is the same on every call.

    Raises:
        ValueError: when the CronJob has no containers.
    """
    g = st.gauntlet
    labels, ann = child_labels(inputs.name, st)
    forced = [(ENV_MODELS, f"{st.name}={spec.candidate.backend}"), (ENV_ENDPOINT, g["endpoint"])]
    job = job_from_cronjob(
        cronjob,
        name=g["job"],
        namespace=REMOTE_NAMESPACE,
        labels={**labels, LABEL_COMPONENT: "gauntlet"},
        env=spec.gauntlet.sorted_env(),
        env_field="spec.gauntlet.env",
        annotations={**ann, ANNOTATION_EXPERIMENT: f"{inputs.namespace}/{inputs.name}"},
    )
    js = job["spec"]
    js.pop("ttlSecondsAfterFinished", None)
    js.pop("suspend", None)
    cap = int(g["activeDeadlineSeconds"])
    own = whole_count(js.get("activeDeadlineSeconds"))
    js["activeDeadlineSeconds"] = min(cap, own) if own > 0 else cap
    pod = js["template"].get("spec") or {}
    for group in ("initContainers", "containers"):
        for c in pod.get(group) or ():
            if isinstance(c, dict):
                set_env(c, literal_env(forced), first=True)
    return remote_object(
        g["job"],
        inputs.namespace,
        g["providerConfig"],
        job,
        labels={**labels, LABEL_COMPONENT: "gauntlet"},
        annotations=ann or None,
        readiness_cel=JOB_FINISHED_CEL,
        # Deleting the Object (suspend, a spec change, a run leaving the history)
        # deletes the Job's pods too.
        deletion_policy="Background",
    )


def evidence_body(obs: Struct) -> Struct:
    """An observed Job Object re-desired as evidence: observed and deleted, never re-created."""
    body = Struct()
    for key in ("apiVersion", "kind", "spec"):
        if key in obs:
            body[key] = obs[key]
    meta = structs.get(obs, "metadata")
    if isinstance(meta, Struct):
        out = body.get_or_create_struct("metadata")
        for key in ("name", "namespace", "labels", "annotations"):
            if key in meta:
                out[key] = meta[key]
    if isinstance(structs.get(body, "spec"), Struct) or "spec" not in body:
        body.get_or_create_struct("spec")["managementPolicies"] = OBSERVE_DELETE_POLICIES
    return body
