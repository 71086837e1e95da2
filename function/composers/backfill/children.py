"""ModelBackfill's composed resources: one attempt's Job, as a provider-kubernetes Object,
and, once that Object reported the Job, its Observe-only observer
(:func:`observer_object`, ``observer-N``), which reports the Job deleted on its cluster.

Attempt N has its own Object (composition-resource name ``job-N``) and remote Job name.
The Job is the CronJob's ``jobTemplate`` with ``spec.env`` set, ``activeDeadlineSeconds``
from ``maxRunDuration``, no ``ttlSecondsAfterFinished`` or ``suspend``, and the
background workload class, the replica's endpoint and no visible GPU forced first into
every container. The Object's readiness is the Job's terminal conditions
(:data:`function.manifests.jobs.JOB_FINISHED_CEL`): provider-kubernetes observes an
Object that is not Ready every 30 s, a Ready one only every ``--poll`` (10 min by
default), so a running Job's outcome reaches the function well within
``OVERDUE_GRACE_SECONDS``. The function states every child ready itself, so the XR's
readiness does not follow the Object's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import Struct

from function.api.modelbackfill import ENDPOINT_ENV, Parsed
from function.core import structs
from function.core.memo import memo
from function.core.outcome import Outcome
from function.core.structfill import struct_from
from function.manifests.jobs import JOB_FINISHED_CEL, job_from_cronjob
from function.manifests.objects import (
    OBSERVE_DELETE_POLICIES,
    OBSERVE_ONLY_POLICIES,
    cel_readiness,
    remote_object,
)
from function.naming import (
    LABEL_BACKFILL,
    LABEL_CLUSTER,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_RUN,
    LABEL_WORKLOAD_CLASS,
    REMOTE_NAMESPACE,
    WORKLOAD_CLASS_BACKGROUND,
    WORKLOAD_CLASS_ENV,
    backfill_job_name,
    backfill_object_name,
    backfill_observer_name,
    labels_with_full,
)
from function.serving.env import set_env

JOB_PREFIX = "job-"
# What versions before session 19 wrote instead, once the Job existed; provider-kubernetes
# refuses it (settle_policies rewrites it). Not to be confused with the Object CRD's
# default ['*'], which the API server stores on an Object composed without a set: that
# is the function's own, and allows Create (review 19e).
EARLIER_POLICIES = frozenset({"Observe", "Update", "LateInitialize", "Delete"})


def job_key(attempt: int) -> str:
    """Composition-resource name of attempt ``attempt``'s Job Object: ``job-<N>``."""
    return f"{JOB_PREFIX}{attempt}"


OBSERVER_PREFIX = "observer-"
# The observer's LABEL_COMPONENT: told apart from the Job's Object ("backfill") by a
# selector, and selected with it by modelplane.ai/backfill=<name>.
OBSERVER_COMPONENT = "backfill-observer"


def observer_key(attempt: int) -> str:
    """Composition-resource name of the Observe-only Object that watches attempt
    ``attempt``'s Job (:func:`observer_object`): ``observer-<N>``."""
    return f"{OBSERVER_PREFIX}{attempt}"


@dataclass(frozen=True)
class Attempt:
    """One attempt of backfill ``backfill`` (in ``namespace``) on a replica of ``model``."""

    backfill: str
    namespace: str
    model: str
    number: int
    replica: Struct
    provider_config: Mapping[str, str]


def job_object(a: Attempt, p: Parsed, cronjob: Struct) -> tuple[str, dict[str, Any]]:
    """The remote Job's name and the Object that creates it on the replica's cluster."""
    job_name = backfill_job_name(a.namespace, a.backfill, a.number)
    cluster = structs.get_str(a.replica, "spec", "clusterName")
    endpoint = structs.get_str(a.replica, "status", "endpoint")
    labels, ann = labels_with_full(
        {
            LABEL_BACKFILL: a.backfill,
            LABEL_DEPLOYMENT: a.model,
            LABEL_COMPONENT: "backfill",
            LABEL_RUN: str(a.number),
            LABEL_WORKLOAD_CLASS: WORKLOAD_CLASS_BACKGROUND,
        }
    )
    job = job_from_cronjob(
        cronjob,
        name=job_name,
        namespace=REMOTE_NAMESPACE,
        labels=labels,
        env=p.env,
        env_field="spec.env",
        active_deadline_seconds=p.max_run_seconds,
        annotations=ann or None,
    )
    job["spec"].pop("ttlSecondsAfterFinished", None)
    job["spec"].pop("suspend", None)
    # First in every container (init and regular), so that the template's own
    # entries can use $(MODELPLANE_ENDPOINT): Kubernetes expands $(VAR) in an env
    # value only from entries defined earlier.
    injected = [
        {"name": WORKLOAD_CLASS_ENV, "value": WORKLOAD_CLASS_BACKGROUND},
        {"name": ENDPOINT_ENV, "value": endpoint},
        # Hide every GPU from the NVIDIA container runtime even where a node's default
        # runtime would expose them to a pod without a device request.
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    ]
    pod_spec = job["spec"]["template"]["spec"]
    for group in ("initContainers", "containers"):
        for c in pod_spec.get(group) or []:
            if isinstance(c, dict):
                set_env(c, injected, first=True)
    obj_labels, obj_ann = labels_with_full(
        {
            LABEL_BACKFILL: a.backfill,
            LABEL_DEPLOYMENT: a.model,
            LABEL_CLUSTER: cluster,
            LABEL_COMPONENT: "backfill",
        }
    )
    obj = remote_object(
        backfill_object_name(a.backfill, a.number),
        a.namespace,
        dict(a.provider_config),
        job,
        labels=obj_labels,
        annotations=obj_ann or None,
        readiness_cel=JOB_FINISHED_CEL,
        deletion_policy="Foreground",
    )
    return job_name, obj


def settle_policies(out: Outcome, observed: Mapping[str, Any]) -> None:
    """Every observed Job Object that carries :data:`EARLIER_POLICIES` (an earlier
    version's set, which provider-kubernetes refuses) gets :data:`OBSERVE_DELETE_POLICIES`:
    where this outcome keeps it, in the kept body; where it drops it, by keeping it one
    call more with the set rewritten (review 19c F4). Any other set is left as it is:
    the CRD's default ``['*']`` of an Object whose Job is not created yet must keep
    Create (review 19e).
    crossplane-runtime checks the set before it handles a deletion, so an Object
    deleted with a refused set would keep its finalizer and its remote Job for ever;
    the next call drops it with a set the provider deletes it under.

    ``observed``: composition-resource name to the observed composed resource (its
    ``resource`` Struct), as :attr:`function.core.inputs.Inputs.observed`.
    """
    for key, child in observed.items():
        if not key.startswith(JOB_PREFIX):
            continue
        spec = structs.fields_of(child.resource, "spec")
        have = spec.get("managementPolicies")
        if have is None or {v.string_value for v in have.list_value.values} != EARLIER_POLICIES:
            continue
        if key not in out.resources:
            out.keep(key, child.resource, ready=True)
        body = out.resources[key].body
        assert isinstance(body, Struct)
        body.get_or_create_struct("spec")["managementPolicies"] = OBSERVE_DELETE_POLICIES


def keep_job(out: Outcome, key: str, obs: Struct, *, created: bool) -> None:
    """Keep the observed Job Object; once the Job exists (``created``), its Object no
    longer allows Create (a Job deleted behind the function's back is not re-created).
    An earlier set is rewritten by :func:`settle_policies`. Its readiness is
    :data:`JOB_FINISHED_CEL`, also on an Object an earlier version created without one
    (Ready at once, and so observed only every 10 min: review 19d F6)."""
    out.keep(key, obs, ready=True)
    body = out.resources[key].body
    assert isinstance(body, Struct)
    body.get_or_create_struct("spec")["readiness"] = cel_readiness(JOB_FINISHED_CEL)
    if created:
        body.get_or_create_struct("spec")["managementPolicies"] = OBSERVE_DELETE_POLICIES


class Watched(NamedTuple):
    """The attempt an observer watches: backfill ``backfill`` in ``namespace``, of
    ``model``, its Job on ``cluster``, attempt ``number``."""

    backfill: str
    namespace: str
    model: str
    cluster: str
    number: int


def observer_object(job_obj: Struct, a: Watched) -> bytes | None:
    """The Observe-only Object (:data:`OBSERVE_ONLY_POLICIES`) that watches the remote Job
    of the attempt ``a`` whose Object is ``job_obj`` (as observed): the same Job (name and
    namespace of its ``spec.forProvider.manifest``) on the same cluster (its
    ``spec.providerConfigRef``), beside it, labelled as the Job's Object is but for
    ``modelplane.ai/component: backfill-observer``.

    Why: the Job's Object has :data:`OBSERVE_DELETE_POLICIES` once the Job exists, under
    which provider-kubernetes reports nothing when the Job is deleted on the cluster (its
    last ``status.atProvider`` stays: a running Job). An Observe-only Object is the one
    that crossplane-runtime marks ``Synced=False`` with
    :data:`function.manifests.objects.MESSAGE_REMOTE_NOT_FOUND` then
    (:func:`function.manifests.objects.remote_not_found`). It never creates, changes or
    deletes the Job; deleting it only removes its finalizer, so the Job's own Object
    still deletes the Job on a cancel or an XR deletion.

    Its manifest names the Job only (an Observe-only Object applies nothing; with
    server-side apply provider-kubernetes dry-runs it on every observation, which a
    name-only apply of an existing Job passes). Its readiness is
    :data:`JOB_FINISHED_CEL`, as the Job's Object's: not Ready while the Job runs, so
    provider-kubernetes observes it every 30 s (a Ready one only every ``--poll``).

    Returns:
        The Object as a deterministically serialized Struct (for
        :meth:`function.core.outcome.Outcome.add`), memoized: the same on every call of
        a running attempt. None when ``job_obj`` names no Job (a manifest without a
        string ``metadata.name``, which the function never writes): provider-kubernetes
        would default the name to the observer's own and report that Job missing.
    """
    # Hot path (every call of a running attempt): Struct accessors only.
    spec = structs.sub(job_obj, "spec")
    manifest = structs.sub(structs.sub(spec, "forProvider"), "manifest")
    remote = structs.fields_of(manifest, "metadata")
    name, ns = remote.get("name"), remote.get("namespace")
    if name is None or not name.string_value:
        return None
    pc = structs.fields_of(spec, "providerConfigRef")
    return _observer_body(
        a,
        name.string_value,
        ns.string_value if ns is not None and ns.string_value else REMOTE_NAMESPACE,
        tuple(sorted((k, v.string_value) for k, v in pc.items())),
    )


@memo(1024, weight=1)
def _observer_body(
    a: Watched, job: str, job_namespace: str, provider_config: tuple[tuple[str, str], ...]
) -> bytes:
    labels, ann = labels_with_full(
        {
            LABEL_BACKFILL: a.backfill,
            LABEL_DEPLOYMENT: a.model,
            LABEL_CLUSTER: a.cluster,
            LABEL_COMPONENT: OBSERVER_COMPONENT,
        }
    )
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job, "namespace": job_namespace},
    }
    obj = remote_object(
        backfill_observer_name(a.backfill, a.number),
        a.namespace,
        dict(provider_config),
        manifest,
        labels=labels,
        annotations=ann or None,
        readiness_cel=JOB_FINISHED_CEL,
        management_policies=OBSERVE_ONLY_POLICIES,
    )
    return struct_from(obj).SerializeToString(deterministic=True)
