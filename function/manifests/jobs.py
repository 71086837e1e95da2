"""One-shot Jobs copied from a CronJob's job template, with env applied.

A CronJob's ``spec.jobTemplate`` is a ``JobTemplateSpec``
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/cron-job-v1/):
its ``metadata`` and ``spec`` become the Job's. Env entries are set by name in
every regular container (init containers keep theirs): an existing entry of that
name (literal ``value`` or ``valueFrom``) is replaced in place, a missing one is
appended. The user's other entries, command and args pass through unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, TypedDict, Unpack

from google.protobuf.struct_pb2 import Struct

from function.core import structs, versioned
from function.core.errors import SpecError
from function.core.outcome import refuse_copies
from function.manifests.tenancy import check_pod_access
from function.naming import MAX_LABEL, REMOTE_NAMESPACE, indexed_job_fits
from function.serving.env import literal_env, set_env

# Job finished: the terminal conditions of a batch/v1 Job
# (https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions),
# as the ``DeriveFromCelQuery`` readiness of the Object that carries it
# (:func:`function.manifests.objects.remote_object`): not Ready while the Job runs, so
# provider-kubernetes observes it every 30 s (a Ready Object only every ``--poll``,
# 10 min by default) and its outcome reaches the function within about 30 s. Used by the
# experiment's gauntlet Job and the ModelBackfill's Job.
JOB_FINISHED_CEL = (
    "has(object.status) && has(object.status.conditions) && "
    'object.status.conditions.exists(c, (c.type == "Complete" || c.type == "Failed") '
    '&& c.status == "True")'
)


def _obj(value: Any, field: str) -> dict[str, Any]:
    """``value`` when it is an object, ``{}`` when absent (null); else a SpecError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(field, f"must be an object, not {type(value).__name__}")
    return value


def check_pod_spec(pod_spec: dict[str, Any], field: str) -> None:
    """Check the container lists of a pod template's ``spec`` that a Job is built from.

    ``containers`` must be a non-empty list of objects, ``initContainers`` a list of
    objects (or absent), and each container's ``env`` a list (or absent) of objects whose
    ``name`` is a string.

    Raises:
        SpecError: naming the first field (``<field>.containers[0].env[1].name``) that
            is not so.
    """
    for group in ("containers", "initContainers"):
        items = pod_spec.get(group)
        if items is None and group == "initContainers":
            continue
        if not isinstance(items, list) or (group == "containers" and not items):
            raise SpecError(f"{field}.{group}", "must be a non-empty list of containers")
        for i, c in enumerate(items):
            if not isinstance(c, dict):
                raise SpecError(f"{field}.{group}[{i}]", "must be a container object")
            env = c.get("env")
            if env is None:
                continue
            if not isinstance(env, list):
                raise SpecError(f"{field}.{group}[{i}].env", "must be a list")
            for j, e in enumerate(env):
                if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                    raise SpecError(
                        f"{field}.{group}[{i}].env[{j}]", "must be an object with a string name"
                    )


class JobOptions(TypedDict, total=False):
    """The optional parts of a Job built from a CronJob (:func:`job_from_cronjob`).

    Attributes:
        env: Literal env entries set in every regular container, in order.
        env_field: Where ``env`` is in the XR (``spec.env``): the field a refusal names.
        active_deadline_seconds: Overrides ``spec.activeDeadlineSeconds`` when given.
        annotations: Annotations added to the Job.
    """

    env: Sequence[tuple[str, str]]
    env_field: str
    active_deadline_seconds: int | None
    annotations: dict[str, str] | None


def job_from_cronjob(
    cronjob: Any,
    *,
    name: str,
    namespace: str,
    labels: dict[str, str],
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    """Build a batch/v1 Job from a CronJob's ``spec.jobTemplate``.

    Args:
        cronjob: The CronJob (Struct or dict) as read from the control plane.
        name: The Job's name.
        namespace: The Job's namespace on the target cluster.
        labels: Labels added to the Job and its pod template (over the template's).
        options: :class:`JobOptions`, by keyword.

    Returns:
        The Job manifest (dict). Server-set fields (selector, controller-uid labels)
        are not copied.

    Raises:
        SpecError: (a ``ValueError``) when the CronJob has no
            ``spec.jobTemplate.spec.template.spec.containers``, or a field on that path
            (or the template's ``metadata``/``labels``/``annotations``) is not an
            object; the field is named relative to the CronJob. The API server never
            stores such a CronJob, but a composer must not crash on one. Also what a
            tenant's pod spec may not hold on the shared workload cluster
            (:func:`function.manifests.tenancy.check_pod_access`). Also, at
            ``env_field``, an ``env`` that every container would copy past Crossplane's
            4 MiB response (:func:`function.core.outcome.refuse_copies`), before any
            copy is made.
    """
    raw = structs.get(cronjob, "spec", "jobTemplate")
    tmpl = _obj(structs.to_py(raw), "spec.jobTemplate")
    spec = _obj(tmpl.get("spec"), "spec.jobTemplate.spec")
    if not isinstance(raw, Struct):  # to_py converted nothing: the caller's dict
        spec = copy.deepcopy(spec)
    pod = _obj(spec.get("template"), "spec.jobTemplate.spec.template")
    pod_spec = _obj(pod.get("spec"), "spec.jobTemplate.spec.template.spec")
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise SpecError("spec.jobTemplate.spec.template.spec.containers", "is empty")
    check_pod_spec(pod_spec, "spec.jobTemplate.spec.template.spec")
    pod_meta = _obj(pod.get("metadata"), "spec.jobTemplate.spec.template.metadata")
    check_pod_access(pod_spec, "spec.jobTemplate.spec.template.spec", pod_meta)
    tmeta = _obj(tmpl.get("metadata"), "spec.jobTemplate.metadata")
    for key in ("labels", "annotations"):
        _obj(tmeta.get(key), f"spec.jobTemplate.metadata.{key}")
    pod["metadata"] = pod_meta
    _obj(pod_meta.get("labels"), "spec.jobTemplate.spec.template.metadata.labels")
    spec.pop("selector", None)
    spec.pop("manualSelector", None)
    job_labels = {**(tmeta.get("labels") or {}), **labels}
    pod_labels = {
        k: v
        for k, v in (pod_meta.get("labels") or {}).items()
        if k not in ("controller-uid", "batch.kubernetes.io/controller-uid")
    }
    pod_meta["labels"] = {**pod_labels, **labels}
    env = options.get("env", ())
    _refuse_env_copies(len(containers), env, options.get("env_field", "env"))
    for c in containers:
        if isinstance(c, dict):
            set_env(c, literal_env(env))
    deadline = options.get("active_deadline_seconds")
    if deadline is not None:
        spec["activeDeadlineSeconds"] = int(deadline)
    _check_indexed(spec, name)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": job_labels}
    ann = {**(tmeta.get("annotations") or {}), **(options.get("annotations") or {})}
    if ann:
        meta["annotations"] = ann
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def _refuse_env_copies(containers: int, env: Sequence[tuple[str, str]], field: str) -> None:
    """Every entry of ``env`` goes into each of ``containers``: refuse, at ``field``, what
    would pass Crossplane's 4 MiB response before the copies are built (review 16b F1;
    :func:`function.core.outcome.refuse_copies`)."""
    if env:
        refuse_copies(
            field,
            containers,
            sum(len(n) + len(v) for n, v in env),
            "containers in the CronJob's spec.jobTemplate.spec.template.spec.containers, "
            "each given every env entry",
            "set fewer or shorter env values (a large one belongs in a ConfigMap the "
            "CronJob's containers read with envFrom), or give the CronJob fewer containers",
        )


def env_copies_problem(cronjob: Any, env: Sequence[tuple[str, str]], field: str) -> str:
    """Why ``env`` (at ``field`` of the XR) cannot be set in every container of
    ``cronjob``'s Job: the copies would pass Crossplane's 4 MiB response (the
    ``SpecError`` :func:`job_from_cronjob` raises, said before anything is started, as
    :func:`cronjob_problem`), or ``""``. Counts, builds nothing."""
    path = ("spec", "jobTemplate", "spec", "template", "spec", "containers")
    count = len(structs.items(cronjob, *path))
    try:
        _refuse_env_copies(count, env, field)
    except SpecError as e:
        return str(e)
    return ""


def is_indexed(cronjob: Any) -> bool:
    """Whether a CronJob's ``spec.jobTemplate.spec.completionMode`` is ``Indexed`` (its
    Job's pods are hostnamed ``<job>-<index>``: ``naming.MAX_INDEXED_JOB_NAME``)."""
    return structs.get(cronjob, "spec", "jobTemplate", "spec", "completionMode") == "Indexed"


def _check_indexed(spec: dict[str, Any], name: str) -> None:
    """An Indexed Job whose last pod's hostname ``<name>-<completions - 1>`` is no DNS
    label is refused by the API server: refuse it here, naming the template's field."""
    completions = spec.get("completions")
    if (
        spec.get("completionMode") == "Indexed"
        and isinstance(completions, int | float)
        and not isinstance(completions, bool)
        and completions >= 1
        and not indexed_job_fits(name, int(completions))
    ):
        raise SpecError(
            "spec.jobTemplate.spec.completionMode",
            f"Indexed with completions {int(completions)}: the last pod's hostname "
            f"{name}-{int(completions) - 1} is no DNS label of at most {MAX_LABEL} "
            "characters, so the workload cluster would refuse the Job",
        )


@versioned.reading(1024)
def cronjob_problem(cronjob: Struct) -> str:
    """Why no Job can be built from ``cronjob`` (the ``SpecError`` of
    :func:`job_from_cronjob`, naming the CronJob's field: a malformed part, or what a
    tenant's pod spec may not hold on the shared workload cluster), or ``""``.

    For the kinds that build Jobs from a tenant's CronJob (ModelBackfill, a
    ModelExperiment's gauntlet), to refuse it before anything is started. Kept by the
    CronJob's uid and resourceVersion (:func:`function.core.versioned.reading`).
    """
    try:
        job_from_cronjob(cronjob, name="check", namespace=REMOTE_NAMESPACE, labels={})
    except SpecError as e:
        return str(e)
    return ""
