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
from typing import Any

from function import structs


def set_env(container: dict[str, Any], env: Sequence[tuple[str, str]]) -> None:
    """Set literal env entries on ``container`` in place (replace by name, else append).

    Args:
        container: A Kubernetes container (dict); ``env`` is created when absent.
        env: ``(name, value)`` pairs, applied in the given order.
    """
    entries: list[dict[str, Any]] = container.setdefault("env", [])
    index = {e.get("name"): i for i, e in enumerate(entries) if isinstance(e, dict)}
    for name, value in env:
        entry = {"name": name, "value": value}
        if name in index:
            entries[index[name]] = entry
        else:
            index[name] = len(entries)
            entries.append(entry)


def job_from_cronjob(
    cronjob: Any,
    *,
    name: str,
    namespace: str,
    labels: dict[str, str],
    env: Sequence[tuple[str, str]] = (),
    active_deadline_seconds: int | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Build a batch/v1 Job from a CronJob's ``spec.jobTemplate``.

    Args:
        cronjob: The CronJob (Struct or dict) as read from the control plane.
        name: The Job's name.
        namespace: The Job's namespace on the target cluster.
        labels: Labels added to the Job and its pod template (over the template's).
        env: Literal env entries set in every regular container, in order.
        active_deadline_seconds: Overrides ``spec.activeDeadlineSeconds`` when given.
        annotations: Annotations added to the Job.

    Returns:
        The Job manifest (dict). Server-set fields (selector, controller-uid labels)
        are not copied.

    Raises:
        ValueError: when the CronJob has no ``spec.jobTemplate.spec.template.spec.containers``.
    """
    tmpl = structs.to_py(structs.get(cronjob, "spec", "jobTemplate")) or {}
    spec = copy.deepcopy(tmpl.get("spec") or {})
    pod = spec.get("template") or {}
    pod_spec = pod.get("spec") or {}
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ValueError("spec.jobTemplate.spec.template.spec.containers is empty")
    spec.pop("selector", None)
    spec.pop("manualSelector", None)
    tmeta = tmpl.get("metadata") or {}
    job_labels = {**(tmeta.get("labels") or {}), **labels}
    pod_meta = pod.setdefault("metadata", {})
    pod_labels = {
        k: v
        for k, v in (pod_meta.get("labels") or {}).items()
        if k not in ("controller-uid", "batch.kubernetes.io/controller-uid")
    }
    pod_meta["labels"] = {**pod_labels, **labels}
    for c in containers:
        if isinstance(c, dict):
            set_env(c, env)
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = int(active_deadline_seconds)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": job_labels}
    ann = {**(tmeta.get("annotations") or {}), **(annotations or {})}
    if ann:
        meta["annotations"] = ann
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
