"""A small simulation of Crossplane and provider-kubernetes around one or more ModelBackfills.

Each :meth:`Sim.step` drives Crossplane's requirements loop over a real gRPC channel
(``GrpcFunction.drive``) for one ModelBackfill, then applies the final response the way
Crossplane does: the desired status becomes the XR's status, desired composed resources
become the observed ones (validated against the Object CRD and Kubernetes' schemas), and
observed ones that are no longer desired are deleted. provider-kubernetes is modelled by
``Sim.remote``: the state of each remote Job by its name on the cluster, echoed under
``status.atProvider.manifest`` of every Object that names it. An Object whose management
policies allow Create creates its Job when it is missing; one that allows Delete deletes
it with itself; an Observe-only Object does neither. A Job deleted on the cluster
(:meth:`Sim.delete_job`) is reported as provider-kubernetes and crossplane-runtime report
it (:func:`tests.support.world.remote_gone`: each Object keeps its last observation; an
Observe-only one turns ``Synced=False``). ``Sim.lingering`` keeps deleted Objects that are
still terminating (a Job deleted with Foreground propagation until its pods are gone).
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

from function.core.timeutil import format_time
from function.naming import (
    ANNOTATION_LAST_FOREGROUND,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_REPLICA_INDEX,
    label_value,
    replica_name,
)
from tests.support import fixtures, world
from tests.support.harness import NAMESPACE, Clock, GrpcFunction, World, desired, fatal, status, xr
from tests.support.validation import validate_object, validate_xr

DEPLOYMENT = "chat"
TEMPLATE = "chat-eval"
BACKFILL = "chat-nightly-eval"


def eval_cronjob(
    name: str = TEMPLATE,
    *,
    resources: dict[str, Any] | None = None,
    init_resources: dict[str, Any] | None = None,
    pod_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A realistic evaluation CronJob: lm-evaluation-harness against an OpenAI-style endpoint."""
    eval_container: dict[str, Any] = {
        "name": "eval",
        "image": "ghcr.io/modelplane-examples/lm-eval:0.4.8",
        "command": ["lm_eval"],
        "args": [
            "--model=local-completions",
            "--model_args=base_url=$(MODELPLANE_ENDPOINT)/v1/completions,model=qwen,"
            "num_concurrent=2,tokenized_requests=False",
            "--tasks=$(SUITE)",
            "--limit=$(LIMIT)",
            "--output_path=/results",
        ],
        "env": [
            {"name": "SUITE", "value": "gsm8k"},
            {"name": "LIMIT", "value": "200"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-read", "key": "t"}}},
        ],
        "resources": resources or {"requests": {"cpu": "1", "memory": "2Gi"}},
        "volumeMounts": [{"name": "results", "mountPath": "/results"}],
    }
    init: dict[str, Any] = {
        "name": "wait-for-endpoint",
        "image": "curlimages/curl:8.10.1",
        "command": ["sh", "-c", "until curl -sf $(MODELPLANE_ENDPOINT)/health; do sleep 2; done"],
    }
    if init_resources is not None:
        init["resources"] = init_resources
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "initContainers": [init],
        "containers": [eval_container],
        "volumes": [{"name": "results", "emptyDir": {"sizeLimit": "1Gi"}}],
        **(pod_extra or {}),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedule": "0 3 * * *",
            "suspend": True,
            "jobTemplate": {
                "metadata": {"labels": {"app.kubernetes.io/name": "chat-eval"}},
                "spec": {
                    "backoffLimit": 1,
                    "ttlSecondsAfterFinished": 3600,
                    "template": {
                        "metadata": {"labels": {"app.kubernetes.io/name": "chat-eval"}},
                        "spec": pod_spec,
                    },
                },
            },
        },
    }


def deployment(
    *,
    name: str = DEPLOYMENT,
    ready: bool = True,
    foreground: str | None = None,
    ready_since: datetime.datetime | None = None,
) -> dict[str, Any]:
    """An observed ModelDeployment with the foreground-signal annotation."""
    cond: dict[str, Any] = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "Available" if ready else "Creating",
    }
    if ready_since is not None:
        cond["lastTransitionTime"] = format_time(ready_since)
    body = xr(
        "ModelDeployment",
        name,
        {"replicas": 2},
        annotations={ANNOTATION_LAST_FOREGROUND: foreground} if foreground is not None else None,
        status={
            "replicas": {"total": 2, "ready": 2 if ready else 0},
            "conditions": [
                cond,
                {"type": "ReplicasReady", "status": "True" if ready else "False", "reason": "x"},
            ],
        },
    )
    return body


def replica(index: int, cluster: str, *, ready: bool = True, dep: str = DEPLOYMENT) -> dict:
    """An observed ModelReplica of ``dep`` on ``cluster``, labelled as the deployment
    composer labels it (``modelplane.ai/deployment: label_value(dep)``)."""
    name = replica_name(NAMESPACE, dep, index)
    st = "True" if ready else "False"
    return xr(
        "ModelReplica",
        name,
        {"deploymentName": dep, "index": index, "clusterName": cluster},
        labels={
            LABEL_DEPLOYMENT: label_value(dep),
            LABEL_CLUSTER: cluster,
            LABEL_REPLICA_INDEX: str(index),
        },
        status={
            "endpoint": f"http://{dep}-{index}.default.svc.cluster.local:8000",
            "conditions": [
                {"type": "Ready", "status": st, "reason": "Available"},
                {"type": "ModelReady", "status": st, "reason": "Serving"},
            ],
        },
    )


def job_status(state: str, at: datetime.datetime) -> dict[str, Any]:
    """The status of a remote Job: ``pending``, ``active``, ``complete``, ``failed`` or
    ``deadline`` (failed at its ``activeDeadlineSeconds``)."""
    t = format_time(at)
    if state == "pending":
        return {}
    if state == "deadline":
        return world.job_failed(
            "DeadlineExceeded", "Job was active longer than specified deadline", t
        )
    if state == "active":
        return world.job_running(t)
    if state == "complete":
        return world.job_complete(t)
    if state == "failed":
        return {
            "failed": 2,
            "startTime": t,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": t,
                }
            ],
        }
    raise ValueError(state)


def remote_name(obj: dict[str, Any]) -> str:
    """The name of the remote Job an Object names (``spec.forProvider.manifest``)."""
    return str(obj["spec"]["forProvider"]["manifest"]["metadata"]["name"])


class Sim:
    """The world around the ModelBackfills: see the module docstring."""

    def __init__(self, fn: GrpcFunction, clock: Clock) -> None:
        self.fn = fn
        self.clock = clock
        self.deployment = deployment(foreground=format_time(clock.now))
        self.replicas = [replica(0, "gpu-a"), replica(1, "gpu-b")]
        self.cronjobs = [eval_cronjob()]
        self.clusters = [
            fixtures.inference_cluster("gpu-a", provider_config="gpu-a"),
            fixtures.inference_cluster("gpu-b", provider_config="gpu-b"),
        ]
        self.backfills: dict[str, dict[str, Any]] = {}
        self.observed: dict[str, dict[str, dict[str, Any]]] = {}
        self.remote: dict[str, str] = {}  # remote Job name -> Job state
        self.jobs: dict[str, dict[str, Any]] = {}  # remote Job name -> manifest it was created from
        self.seen: dict[str, dict[str, Any]] = {}  # Object name -> status it last reported
        self.forced: dict[str, dict[str, Any]] = {}  # Object name -> status it reports instead
        self.lingering: dict[str, dict[str, Any]] = {}  # Object name -> Object being deleted
        self.linger = False  # deleted Objects stay (terminating) until released
        self.last: Any = None
        self.calls = 0

    def add(self, spec: dict[str, Any], name: str = BACKFILL) -> dict[str, Any]:
        """Create a ModelBackfill (validated against our XRD)."""
        body = xr("ModelBackfill", name, spec)
        validate_xr(body)
        self.backfills[name] = body
        self.observed[name] = {}
        return body

    def foreground(self, at: datetime.datetime | None = None, raw: str | None = None) -> None:
        """Record a foreground request (or set the annotation to ``raw``)."""
        ann = self.deployment["metadata"].setdefault("annotations", {})
        ann[ANNOTATION_LAST_FOREGROUND] = (
            raw if raw is not None else format_time(at or self.clock.now)
        )

    def world(self) -> World:
        return World(
            [
                self.deployment,
                *self.replicas,
                *self.cronjobs,
                *self.clusters,
                *self.backfills.values(),
                *self.lingering.values(),
                *(o for obs in self.observed.values() for o in obs.values()),
            ]
        )

    def _observed_view(self, name: str) -> dict[str, dict[str, Any]]:
        out = {}
        for key, body in self.observed[name].items():
            obj = copy.deepcopy(body)
            oname = obj["metadata"]["name"]
            job = remote_name(obj)
            state = self.remote.get(job)
            if state == "refused":  # provider-kubernetes cannot create it: no remote Job
                obj["status"] = {
                    "conditions": [
                        {"type": "Synced", "status": "False", "reason": "ReconcileError",
                         "message": "exceeded quota: q, requested: count/jobs.batch=1"}
                    ]
                }  # fmt: skip
            elif state is not None:
                created = self.jobs.get(job) or obj["spec"]["forProvider"]["manifest"]
                manifest = copy.deepcopy(created)
                manifest["metadata"]["uid"] = f"uid-{job}"
                manifest["status"] = job_status(state, self.clock.now)
                obj["status"] = {
                    "atProvider": {"manifest": manifest},
                    "conditions": [
                        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}
                    ],
                }
                self.seen[oname] = copy.deepcopy(obj["status"])
            elif oname in self.seen or world.policies(obj) == {"Observe"}:
                # The Job is gone on the cluster (or never existed, for an observer).
                obj["status"] = copy.deepcopy(self.seen.get(oname) or {})
                obj = world.remote_gone(obj)
            if oname in self.forced:
                obj["status"] = copy.deepcopy(self.forced[oname])
            out[key] = obj
        return out

    def step(self, name: str = BACKFILL) -> dict[str, Any]:
        """One reconcile of ModelBackfill ``name``; returns its new status."""
        xr_body = self.backfills[name]
        rsp, calls = self.fn.drive(xr_body, self.world(), self._observed_view(name))
        assert not fatal(rsp), fatal(rsp)
        self.last = rsp
        self.calls = calls
        xr_body["status"] = status(rsp)
        want = desired(rsp)
        for key, body in list(self.observed[name].items()):
            if key not in want:
                oname = body["metadata"]["name"]
                if self.linger:
                    self.lingering[oname] = body
                if world.deletes(body):
                    self.remote.pop(remote_name(body), None)
                self.seen.pop(oname, None)
        new: dict[str, dict[str, Any]] = {}
        for key, body in want.items():
            validate_object(body)
            job = remote_name(body)
            if world.creates(body) and job not in self.remote:
                self.remote[job] = "pending"
                self.jobs[job] = copy.deepcopy(body["spec"]["forProvider"]["manifest"])
            new[key] = body
        self.observed[name] = new
        return xr_body["status"]

    def job(self, name: str = BACKFILL) -> dict[str, Any]:
        """The only desired Job Object (``job-<N>``) of ModelBackfill ``name``."""
        objs = [o for k, o in self.observed[name].items() if k.startswith("job-")]
        assert len(objs) == 1, objs
        return objs[0]

    def set_job(self, state: str, name: str = BACKFILL) -> None:
        """Move the remote Job of ``name`` to ``state`` (``refused``: the cluster never
        created it, its Object reports Synced=False)."""
        self.remote[remote_name(self.job(name))] = state

    def delete_job(self, name: str = BACKFILL) -> None:
        """Delete the remote Job of ``name`` on its cluster (``kubectl delete job``): its
        Objects stay."""
        self.remote.pop(remote_name(self.job(name)))

    def release(self) -> None:
        """Terminating Objects finish deleting."""
        self.lingering.clear()
