"""Kubernetes manifests that stage model weights on a cluster: PVC, token Secret, Job.

These are the remote objects of a ModelCacheHydration. Each builder returns a
plain manifest (dict) that ``function.manifests.objects.remote_object`` wraps in
a provider-kubernetes Object. Names come from ``function.naming`` (the contract
with the serving side, which mounts the cache PVC by name).

Kubernetes rules they follow (Kubernetes 1.30 API):

- PVC: ``accessModes: [ReadWriteMany]`` so every serving pod of the cluster can
  mount it; ``resources.requests.storage`` is a quantity such as ``140Gi``
  (https://kubernetes.io/docs/concepts/storage/persistent-volumes/).
- Secret: carries no data here. The token reaches it through the Object's
  ``spec.references[].patchesFrom`` (provider-kubernetes copies
  ``patchesFrom.fieldPath`` of a control-plane object to ``toFieldPath`` of the
  manifest at apply time), so the function never handles the token.
- Job: ``restartPolicy: Never`` with a finite ``backoffLimit`` and
  ``activeDeadlineSeconds``, so a broken download ends in the Job condition
  ``Failed=True`` (reason ``BackoffLimitExceeded`` or ``DeadlineExceeded``)
  instead of retrying forever
  (https://kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup).
  The pod runs ``python -m jobs.hydrate`` from the function's own image, which
  installs the ``jobs`` extra (``huggingface_hub`` and the ``kubernetes`` client it
  reports its result with; no package install at run time). Command, mount path,
  marker, exit codes and environment are the contract in :mod:`jobs.contract`.
"""

from __future__ import annotations

import re
from typing import Any, NotRequired, TypedDict, Unpack

from jobs.contract import (
    CACHE_MOUNT_PATH,
    ENV_HF_TOKEN,
    ENV_POD_NAMESPACE,
    ENV_RESULT_CONFIGMAP,
    EXIT_PERMANENT,
    HYDRATE_COMMAND,
    PRUNE_KEEP_FLAG,
    prune_keep_arg,
)

# Key of the token in the remote Secret (whatever the control-plane key is).
REMOTE_TOKEN_KEY = "HF_TOKEN"
# Non-root user of the hydration pod; ``fsGroup`` makes the PVC writable for it.
HYDRATION_UID = 65532

PVC_BOUND_CEL = 'has(object.status) && has(object.status.phase) && object.status.phase == "Bound"'
JOB_COMPLETE_CEL = (
    "has(object.status) && has(object.status.conditions) && "
    'object.status.conditions.exists(c, c.type == "Complete" && c.status == "True")'
)

_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_]+\Z")


def _metadata(
    name: str, namespace: str, labels: dict[str, str], annotations: dict[str, str] | None
) -> dict[str, Any]:
    """``metadata`` of a remote object: name, namespace, a copy of the labels and, when
    any, of the annotations."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def secret_field_path(key: str) -> str:
    """The Crossplane field path of ``data[key]`` in a Secret.

    Crossplane field paths (``crossplane-runtime/pkg/fieldpath``) take
    ``data.KEY`` for simple keys and need the bracket form ``data[KEY]`` for keys
    with ``.`` or ``-`` (valid Secret keys match ``[-._a-zA-Z0-9]+``).
    """
    return f"data.{key}" if _SIMPLE_KEY.match(key) else f"data[{key}]"


def cache_pvc(
    name: str,
    namespace: str,
    *,
    size: str,
    storage_class: str | None,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ReadWriteMany PersistentVolumeClaim for the model weights.

    Args:
        name: The PVC name (``naming.cache_pvc_name``).
        namespace: Its namespace on the target cluster.
        size: Requested size as a Kubernetes quantity (``"16Gi"``, see
            ``CacheSource.size_quantity``).
        storage_class: ``spec.storageClassName``: for a new PVC a storage class that
            supports ReadWriteMany (the InferenceCluster's
            ``status.cache.storageClassName``); for an existing one the class it has
            (a PVC's spec is immutable after creation except the request of a bound
            claim). None leaves the field out (an existing PVC without one).
        labels: Labels of the PVC.
        annotations: Annotations of the PVC (optional).

    Returns:
        A ``v1`` PersistentVolumeClaim manifest.
    """
    meta = _metadata(name, namespace, labels, annotations)
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"]}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    spec["volumeMode"] = "Filesystem"
    spec["resources"] = {"requests": {"storage": size}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
    }


def token_placeholder() -> dict[str, str]:
    """``data`` of the remote token Secret as the function declares it:
    ``{REMOTE_TOKEN_KEY: ""}``, the key :func:`token_reference` patches, empty.

    provider-kubernetes v1.3.1 writes the token into the Object's
    ``spec.forProvider.manifest`` in memory (``Observe``, ``patchesFrom``), and
    crossplane-runtime v2.4.0 persists that object with ``Update`` around a create (the
    external-create annotations, the finalizer), so the token lands in the Object's
    ``spec`` (crossplane-contrib/provider-kubernetes#223). Declaring the key makes it
    a field of the XR's field manager: Crossplane applies composed resources with
    forced server-side apply, which sets it back to ``""`` on the next reconcile of
    the XR (a write of a composed resource triggers one). provider-kubernetes patches
    the token over the placeholder in memory before it compares and applies, so the
    remote Secret gets the token and the placeholder causes no update of it.

    Returns:
        A new ``{REMOTE_TOKEN_KEY: ""}``.
    """
    return {REMOTE_TOKEN_KEY: ""}


def token_secret(
    name: str,
    namespace: str,
    *,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An Opaque Secret with the token's key empty; the token is patched in by
    provider-kubernetes.

    Args:
        name: The Secret name (``naming.cache_secret_name``).
        namespace: Its namespace on the target cluster.
        labels: Labels of the Secret.
        annotations: Annotations of the Secret (optional).

    Returns:
        A ``v1`` Secret manifest whose ``data`` is :func:`token_placeholder` (no
        ``stringData``); pair it with :func:`token_reference` in the Object's
        ``spec.references``.
    """
    meta = _metadata(name, namespace, labels, annotations)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": token_placeholder(),
    }


def token_reference(secret_name: str, secret_namespace: str, key: str) -> dict[str, Any]:
    """The Object ``spec.references[]`` entry that copies the token into the remote Secret.

    provider-kubernetes (``kubernetes.m.crossplane.io/v1alpha1`` Object) reads the
    control-plane object named by ``patchesFrom`` at every reconcile and sets
    ``toFieldPath`` of ``spec.forProvider.manifest`` to the value at
    ``patchesFrom.fieldPath``. Secret ``data`` values are base64 and stay base64,
    which is what the remote Secret's ``data`` expects.

    Args:
        secret_name: The control-plane Secret (``spec.huggingFace.authSecret.name``).
        secret_namespace: Its namespace (the XR's own namespace).
        key: The key of the token in it (``authSecret.key``).

    Returns:
        ``{"patchesFrom": {...}, "toFieldPath": "data.HF_TOKEN"}``.
    """
    return {
        "patchesFrom": {
            "apiVersion": "v1",
            "kind": "Secret",
            "name": secret_name,
            "namespace": secret_namespace,
            "fieldPath": secret_field_path(key),
        },
        "toFieldPath": secret_field_path(REMOTE_TOKEN_KEY),
    }


class HydrationJob(TypedDict):
    """What the download Job is made of (keyword arguments of :func:`hydration_job`).

    Attributes:
        image: An image with this package and ``huggingface_hub`` installed.
        repo: Hugging Face repo id (``org/name``).
        revision: Branch, tag or commit.
        identity: The source identity (``naming.source_identity``); the program
            skips when the marker at the PVC's root records it.
        pvc_name: The cache PVC, mounted at :data:`CACHE_MOUNT_PATH`.
        token_secret_name: The remote Secret holding ``HF_TOKEN``; None for a
            public model (no token env).
        backoff_limit: Pod retries before the Job fails (``BackoffLimitExceeded``).
        active_deadline_seconds: Wall-clock limit of the Job (``DeadlineExceeded``).
        labels: Labels of the Job and its pods.
        annotations: Annotations of the Job (optional).
        result_configmap: The ConfigMap (:func:`result_configmap`) the program
            patches with its result; needs ``service_account`` (:func:`result_rbac`).
            None: no report, and no service account token in the pod.
        service_account: The ServiceAccount allowed to patch ``result_configmap``.
    """

    image: str
    repo: str
    revision: str
    identity: str
    pvc_name: str
    token_secret_name: str | None
    backoff_limit: int
    active_deadline_seconds: int
    labels: dict[str, str]
    annotations: NotRequired[dict[str, str] | None]
    result_configmap: NotRequired[str | None]
    service_account: NotRequired[str | None]


def hydration_job(name: str, namespace: str, **job: Unpack[HydrationJob]) -> dict[str, Any]:
    """The download Job: ``python -m jobs.hydrate`` writing into the cache PVC.

    Args:
        name: The Job name (``naming.hydration_job_name``; carries the source identity).
        namespace: Its namespace on the target cluster (the PVC's).
        job: :class:`HydrationJob`, by keyword.

    Returns:
        A ``batch/v1`` Job manifest.
    """
    labels, annotations = job["labels"], job.get("annotations")
    # The pod gets an API token only when it reports to the result ConfigMap.
    service_account = job.get("service_account")
    reports = bool(job.get("result_configmap") and service_account)
    identity_fields: dict[str, Any] = (
        {"serviceAccountName": service_account, "automountServiceAccountToken": True}
        if reports
        else {"automountServiceAccountToken": False}
    )
    meta = _metadata(name, namespace, labels, annotations)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": int(job["backoff_limit"]),
            "activeDeadlineSeconds": int(job["active_deadline_seconds"]),
            # Exit code 3 of the program is a permanent failure (repo or revision not
            # found, access denied): fail the Job at once instead of retrying. Pod
            # disruptions (preemption, eviction) do not count against backoffLimit.
            # https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": "hydrate",
                            "operator": "In",
                            "values": [EXIT_PERMANENT],
                        },
                    },
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            },
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "Never",
                    **identity_fields,
                    "securityContext": _pod_security(),
                    "containers": [_hydrate_container(job)],
                    "volumes": [
                        {"name": "cache", "persistentVolumeClaim": {"claimName": job["pvc_name"]}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    }


def _pod_security() -> dict[str, Any]:
    """The pod security context of both Jobs on the cache PVC (download and prune): a
    non-root user whose group owns the volume (``fsGroup``), the runtime's seccomp
    profile. https://kubernetes.io/docs/tasks/configure-pod-container/security-context/"""
    return {
        "runAsNonRoot": True,
        "runAsUser": HYDRATION_UID,
        "runAsGroup": HYDRATION_UID,
        "fsGroup": HYDRATION_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _container_security() -> dict[str, Any]:
    """The container security context of both Jobs: no privilege escalation, a read-only
    root filesystem (writes go to the PVC and ``/tmp``), no capabilities."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


class PruneJob(TypedDict):
    """What the prune Job is made of (keyword arguments of :func:`prune_job`).

    Attributes:
        image: The function's image (``python -m jobs.hydrate``).
        pvc_name: The cache PVC, mounted read-write at :data:`CACHE_MOUNT_PATH`.
        keep: The source identities to keep (every other identity directory goes).
        labels: Labels of the Job and its pods.
        annotations: Annotations of the Job (optional).
    """

    image: str
    pvc_name: str
    keep: tuple[str, ...]
    labels: dict[str, str]
    annotations: NotRequired[dict[str, str] | None]


# The prune Job removes directories: bounded retries and time.
PRUNE_BACKOFF_LIMIT = 3
PRUNE_DEADLINE_SECONDS = 900
# A keep-list whose prune Job failed (or could not be created) is not composed again
# before this many seconds after the failure was recorded (``status.prune.failedAt``),
# unless the keep-list changes: a failing prune is not retried in a loop.
PRUNE_RETRY_SECONDS = 3600


def prune_job(name: str, namespace: str, **job: Unpack[PruneJob]) -> dict[str, Any]:
    """The prune Job: ``python -m jobs.hydrate --prune-keep <identities>`` on the cache PVC.

    Removes every identity directory the keep-list does not name (the current identity
    and those live replicas on the cluster serve); no token, no API access.

    Args:
        name: The Job name (carries a hash of the keep-list: a Job's pod template is
            immutable, so another keep-list is another Job).
        namespace: Its namespace on the target cluster (the PVC's).
        job: :class:`PruneJob`, by keyword.

    Returns:
        A ``batch/v1`` Job manifest.
    """
    labels, annotations = job["labels"], job.get("annotations")
    meta = _metadata(name, namespace, labels, annotations)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": PRUNE_BACKOFF_LIMIT,
            "activeDeadlineSeconds": PRUNE_DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": _pod_security(),
                    "containers": [
                        {
                            "name": "prune",
                            "image": job["image"],
                            "command": list(HYDRATE_COMMAND),
                            "args": [
                                "--target",
                                CACHE_MOUNT_PATH,
                                PRUNE_KEEP_FLAG,
                                prune_keep_arg(job["keep"]),
                            ],
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "128Mi"},
                                "limits": {"memory": "512Mi"},
                            },
                            "securityContext": _container_security(),
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT_PATH}],
                        }
                    ],
                    "volumes": [
                        {"name": "cache", "persistentVolumeClaim": {"claimName": job["pvc_name"]}}
                    ],
                },
            },
        },
    }


def _hydrate_env(job: HydrationJob) -> list[dict[str, Any]]:
    """The program's env: Hugging Face settings, the token, where to report."""
    env: list[dict[str, Any]] = [
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},
        {"name": "HF_HOME", "value": "/tmp/hf-home"},
        {"name": "HOME", "value": "/tmp"},
        # hf_xet keeps a chunk cache (10 GB by default) under HF_HOME; the weights go
        # straight to the PVC, so the cache would only fill the small /tmp emptyDir.
        {"name": "HF_XET_CHUNK_CACHE_SIZE_BYTES", "value": "0"},
    ]
    token_secret_name = job["token_secret_name"]
    if token_secret_name:
        env.append(
            {
                "name": ENV_HF_TOKEN,
                "valueFrom": {"secretKeyRef": {"name": token_secret_name, "key": REMOTE_TOKEN_KEY}},
            }
        )
    result_configmap = job.get("result_configmap")
    if result_configmap and job.get("service_account"):  # see ``reports`` in the Job
        env.append({"name": ENV_RESULT_CONFIGMAP, "value": result_configmap})
        env.append(
            {
                "name": ENV_POD_NAMESPACE,
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            }
        )
    return env


def _hydrate_container(job: HydrationJob) -> dict[str, Any]:
    """The ``hydrate`` container: the program, its env, the cache and ``/tmp`` mounts."""
    return {
        "name": "hydrate",
        "image": job["image"],
        "command": list(HYDRATE_COMMAND),
        "args": [
            "--repo",
            job["repo"],
            "--revision",
            job["revision"],
            "--identity",
            job["identity"],
            "--target",
            CACHE_MOUNT_PATH,
        ],
        "env": _hydrate_env(job),
        "resources": {
            "requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"memory": "8Gi"},
        },
        "securityContext": _container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "cache", "mountPath": CACHE_MOUNT_PATH},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def result_configmap(
    name: str, namespace: str, *, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """An empty ConfigMap the download program fills with its result.

    The program merge-patches ``data.result`` (the marker JSON: commit, digest,
    validatedAt, identity, ...). The function composes the ConfigMap without
    ``data``; provider-kubernetes applies only what the manifest holds, so the
    program's key survives and comes back under ``status.atProvider.manifest``.

    Returns:
        A ``v1`` ConfigMap manifest without ``data``.
    """
    meta = _metadata(name, namespace, labels, annotations)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def result_rbac(
    name: str,
    namespace: str,
    configmap: str,
    *,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The least RBAC that lets the download Job report its result.

    A ServiceAccount, a Role allowing only ``get`` and ``patch`` of the one
    ConfigMap named ``configmap`` (``resourceNames``; ``create`` cannot be limited
    by name, so the function creates the ConfigMap itself), and the RoleBinding
    (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources).

    Returns:
        ``(ServiceAccount, Role, RoleBinding)`` manifests, all named ``name``.
    """
    meta = _metadata(name, namespace, labels, annotations)
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": dict(meta),
        "automountServiceAccountToken": False,
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": dict(meta),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [configmap],
                "verbs": ["get", "patch"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": dict(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    return sa, role, binding
