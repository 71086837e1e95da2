"""Serving manifests of a ModelReplica: Deployment, LeaderWorkerSet, Service, device claims.

Each builder returns a plain manifest (dict) that the composer wraps in a
provider-kubernetes Object (``function.manifests.objects.remote_object``).

Kubernetes and LWS facts they follow:

- A Standalone engine is an ``apps/v1`` Deployment with ``replicas`` = the engine's
  copies; its selector is the per-workload label only (a Deployment's selector is
  immutable, and two engines of one replica must not select each other's pods).
- A Leader plus Workers engine is a ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet
  (kubernetes-sigs/lws v0.10 CRD): ``replicas`` = copies (groups),
  ``leaderWorkerTemplate.size`` = 1 leader + worker nodes, ``leaderTemplate`` and
  ``workerTemplate`` from the two members, ``restartPolicy:
  RecreateGroupOnPodRestart`` so a gang restarts as a whole.
- The Service selects the serving pods (Standalone pods and LWS leaders, never
  workers) by ``modelplane.ai/serving``; the in-cluster URL is
  ``http://<service>.<namespace>.svc.cluster.local:<port>``.
- Devices bind through Dynamic Resource Allocation: one ``resource.k8s.io/v1``
  ResourceClaimTemplate per claiming member, referenced by the pod's
  ``resourceClaims`` and the engine container's ``resources.claims``
  (https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/).
- ``/dev/shm`` is a memory-backed ``emptyDir`` with a ``sizeLimit``
  (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir); the flash
  loader's copy is another one, written by an init container.
- Neither a Deployment nor a LeaderWorkerSet has a ``Ready`` condition, so the
  Objects use ``DeriveFromCelQuery`` (:data:`DEPLOYMENT_READY_CEL`,
  :data:`LWS_READY_CEL`); :func:`deployment_serving` and :func:`lws_serving` are
  the same rules in Python for the composer's own view of the observed state.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from function.core import structs
from function.core.errors import SpecError
from function.manifests.podrules import check_pod_rules
from function.manifests.tenancy import check_pod_access
from function.naming import LABEL_SERVING, LABEL_WORKLOAD
from function.serving.env import (
    ENV_MODEL,
    SHM_MOUNT_PATH,
    check_reserved,
    gang_env,
    model_env,
    set_by_name,
    set_env,
)
from function.serving.flashloader import FlashLoader
from jobs.contract import (
    CACHE_MOUNT_PATH,
    FLASH_MOUNT_PATH,
    FLASHLOAD_COMMAND,
    IDENTITY_PATTERN,
    identity_dir,
)

ENGINE_CONTAINER = "engine"
DEFAULT_ENGINE_PORT = 8000

# GPU node groups carry this taint so that pods without GPUs stay off them. The
# ExtendedResourceToleration admission plugin adds the toleration only to pods that
# request the ``nvidia.com/gpu`` extended resource, which pods claiming GPUs through
# DRA do not, so every engine pod (all run on a GPU pool) tolerates it explicitly
# (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#extendedresourcetoleration).
GPU_TOLERATION: dict[str, Any] = {
    "key": "nvidia.com/gpu",
    "operator": "Exists",
    "effect": "NoSchedule",
}

VOLUME_SHM = "modelplane-dshm"
VOLUME_CACHE = "modelplane-model-cache"
VOLUME_FLASH = "modelplane-flash-models"
FLASH_CONTAINER = "modelplane-flash-loader"
POD_CLAIM = "modelplane-devices"
_OWN_VOLUMES = (VOLUME_SHM, VOLUME_CACHE, VOLUME_FLASH)
_OWN_PATHS = (SHM_MOUNT_PATH, CACHE_MOUNT_PATH, FLASH_MOUNT_PATH)

# A workload's rolling update never takes a serving pod down before its replacement is
# available (``maxUnavailable: 0``, one surge pod): a source identity change rolls
# make-before-break
# (https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#rolling-update-deployment).
ROLLING_UPDATE: dict[str, Any] = {
    "type": "RollingUpdate",
    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
}

DEPLOYMENT_READY_CEL = (
    "has(object.status) && has(object.status.observedGeneration) && "
    "object.status.observedGeneration == object.metadata.generation && "
    "has(object.status.updatedReplicas) && "
    "object.status.updatedReplicas >= object.spec.replicas && "
    "has(object.status.availableReplicas) && "
    "object.status.availableReplicas >= object.spec.replicas"
)
LWS_READY_CEL = (
    "has(object.status) && has(object.status.readyReplicas) && "
    "object.status.readyReplicas >= object.spec.replicas && has(object.status.conditions) && "
    'object.status.conditions.exists(c, c.type == "Available" && c.status == "True")'
)


@dataclass
class PodPlan:
    """What the function adds to one member's pod template.

    Attributes:
        labels: Pod labels of ours (replica, deployment, workload), over the user's.
        serving: The Service's selector value for serving pods (Standalone and
            Leader); None for LWS workers.
        node_selector: The pool's node selector.
        tolerations: The deployment's tolerations (added after the user's, then
            :data:`GPU_TOLERATION`).
        claim_template: The member's ResourceClaimTemplate name, or None.
        cache_pvc: The cache PVC to mount read-only, or None (no cache).
        cache_identity: The source identity the pod serves (with ``cache_pvc``):
            ``MODELPLANE_MODEL`` and the flash loader's source are that identity's
            directory on the PVC (:func:`jobs.contract.identity_dir`).
        shm_size_limit: ``sizeLimit`` of ``/dev/shm``.
        flash: The flash loader when enabled (needs a cache), else None.
        gang: Whether the pod is part of a LeaderWorkerSet (leader or worker).
    """

    labels: dict[str, str]
    serving: str | None
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    claim_template: str | None = None
    cache_pvc: str | None = None
    cache_identity: str = ""
    shm_size_limit: str = "8Gi"
    flash: FlashLoader | None = None
    gang: bool = False


def engine_index(template: dict[str, Any], field_path: str) -> int:
    """Index of the container named ``engine`` in a member's pod template.

    Raises:
        SpecError: naming ``<field>.spec.containers`` when there is none.
    """
    containers = structs.get(template, "spec", "containers")
    if isinstance(containers, list):
        for i, c in enumerate(containers):
            if isinstance(c, dict) and c.get("name") == ENGINE_CONTAINER:
                return i
    raise SpecError(f"{field_path}.spec.containers", "must include a container named 'engine'")


def engine_port(template: dict[str, Any], field_path: str) -> int:
    """The engine's serving port: its port named ``http``, else its first, else 8000."""
    c = template["spec"]["containers"][engine_index(template, field_path)]
    ports = [p for p in c.get("ports") or [] if isinstance(p, dict) and "containerPort" in p]
    for p in ports:
        if p.get("name") == "http":
            return int(p["containerPort"])
    return int(ports[0]["containerPort"]) if ports else DEFAULT_ENGINE_PORT


def cache_source(identity: str) -> str:
    """Where the weights of ``identity`` are read on the cache PVC: its directory
    (:func:`jobs.contract.identity_dir`), or the PVC root for ``""``: the layout of the
    release before side-by-side revisions, kept for a replica that serves from it until
    its cluster's hydration stores the identity in its own directory.

    Raises:
        ValueError: ``identity`` is neither ``""`` nor a source identity.
    """
    return identity_dir(CACHE_MOUNT_PATH, identity) if identity else CACHE_MOUNT_PATH


def model_path(plan: PodPlan) -> str | None:
    """What ``MODELPLANE_MODEL`` points at: the flash copy, the directory of the source
    identity the pod serves on the cache PVC (:func:`cache_source`), or nothing (no
    cache).

    Raises:
        ValueError: a malformed identity (the composer passes a valid one or ``""``).
    """
    if plan.cache_pvc is None:
        return None
    source = cache_source(plan.cache_identity)
    return FLASH_MOUNT_PATH if plan.flash is not None else source


def _check_shapes(t: dict[str, Any], engine: dict[str, Any], field_path: str, cpath: str) -> None:
    """Raise a SpecError naming the first field of the template that the function merges
    into and that has the wrong type (an object where a list is due, ...)."""
    meta = t.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise SpecError(f"{field_path}.metadata", "must be an object")
    for key in ("labels", "annotations"):
        v = (meta or {}).get(key)
        if v is not None and not isinstance(v, dict):
            raise SpecError(f"{field_path}.metadata.{key}", "must be an object")
    spec = t["spec"]
    for key, typ in (("nodeSelector", dict), ("tolerations", list), ("volumes", list)):
        v = spec.get(key)
        if v is not None and not isinstance(v, typ):
            raise SpecError(f"{field_path}.spec.{key}", f"must be {_A[typ]}")
    for key, typ in (("env", list), ("volumeMounts", list), ("resources", dict)):
        v = engine.get(key)
        if v is not None and not isinstance(v, typ):
            raise SpecError(f"{cpath}.{key}", f"must be {_A[typ]}")


_A = {dict: "an object", list: "a list"}


def _slot(parent: dict[str, Any], key: str, empty: Any) -> Any:
    """``parent[key]``, set to ``empty`` when absent or null (the API server prunes a
    null field, so null means absent)."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = empty
    return value


def pod_template(template: dict[str, Any], plan: PodPlan, field_path: str) -> dict[str, Any]:
    """The member's pod template with what the function adds; the user's parts unchanged.

    Adds: labels; the pool's node selector; the deployment's tolerations and
    :data:`GPU_TOLERATION`; the
    device claim; ``/dev/shm``; with a cache the PVC mounted read-only at
    ``/mnt/models`` and ``MODELPLANE_MODEL`` (first in env); the flash loader init
    container and its ``emptyDir``; on a gang ``MODELPLANE_LEADER_ADDRESS`` and
    ``MODELPLANE_RANK``; on serving pods without ports or readiness probe, port
    8000 named ``http`` and an HTTP ``/health`` readiness probe. The user's env
    entries, command and args are copied as they are.

    Args:
        template: The member's ``template`` (``metadata``, ``spec``) as the user wrote it.
        plan: What to add.
        field_path: The template's path in the XR, for errors.

    Raises:
        SpecError: a missing ``engine`` container, a user env entry that sets a
            reserved name, a user volume or mount that collides with ours, or what the
            workload cluster's API server refuses in the template
            (:func:`function.manifests.podrules.check_pod_rules`).
    """
    idx = engine_index(template, field_path)
    t = clone(template)
    spec = t["spec"]
    engine = spec["containers"][idx]
    cpath = f"{field_path}.spec.containers[{idx}]"
    _check_user_parts(t, engine, field_path, cpath)
    check_pod_rules(t, field_path, _OWN_VOLUMES)
    _add_labels(t, plan)
    _add_scheduling(spec, plan)
    _add_volumes(spec, engine, plan)
    if plan.serving is not None:
        _add_serving_defaults(t, engine, field_path)
    if plan.claim_template is not None:
        set_by_name(
            _slot(spec, "resourceClaims", []),
            {"name": POD_CLAIM, "resourceClaimTemplateName": plan.claim_template},
        )
        set_by_name(_slot(_slot(engine, "resources", {}), "claims", []), {"name": POD_CLAIM})
    return t


def check_template(template: dict[str, Any], field_path: str) -> None:
    """Refuse what :func:`pod_template` would refuse in a member's pod template: no
    ``engine`` container, a part it merges into of the wrong type, a volume or mount of
    the function's own, a reserved env name in any container (init containers too), and
    what the workload cluster's API server refuses in it
    (:func:`function.manifests.podrules.check_pod_rules`: names, label keys and values,
    duplicate volumes or mount paths).
    For the kinds that write member templates (ModelDeployment, ModelExperiment's
    candidate), so the error names the field where the user wrote it instead of failing
    every replica composed from it.

    Args:
        template: The member's ``template`` as written (a dict; not changed).
        field_path: Its path in the XR (``spec.template.spec.engines[0].members[0].template``).

    Raises:
        SpecError: naming the field and what to write.
    """
    idx = engine_index(template, field_path)
    pod = template["spec"]
    engine = pod["containers"][idx]
    _check_user_parts(template, engine, field_path, f"{field_path}.spec.containers[{idx}]")
    for group in ("initContainers", "containers"):
        containers = pod.get(group)
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(c, dict) and c is not engine:  # the engine's: checked above
                check_reserved(c.get("env"), f"{field_path}.spec.{group}[{i}].env")
    check_pod_rules(template, field_path, _OWN_VOLUMES)


def _check_user_parts(
    t: dict[str, Any], engine: dict[str, Any], field_path: str, cpath: str
) -> None:
    """Shapes, reserved env names, and volumes or mounts that collide with ours."""
    _check_shapes(t, engine, field_path, cpath)
    meta = t.get("metadata")
    check_pod_access(t["spec"], f"{field_path}.spec", meta)
    check_reserved(engine.get("env"), f"{cpath}.env")
    for i, v in enumerate(t["spec"].get("volumes") or []):
        if isinstance(v, dict) and v.get("name") in _OWN_VOLUMES:
            raise SpecError(
                f"{field_path}.spec.volumes[{i}].name",
                f"{v.get('name')} is the name of a volume the function adds (its names: "
                f"{', '.join(_OWN_VOLUMES)}): name yours differently",
            )
    for i, m in enumerate(engine.get("volumeMounts") or []):
        path = m.get("mountPath") if isinstance(m, dict) else None
        if isinstance(path, str) and posixpath.normpath(path) in _OWN_PATHS:
            raise SpecError(
                f"{cpath}.volumeMounts[{i}].mountPath",
                f"{m.get('mountPath')} is mounted by the function "
                f"(size /dev/shm with spec.shmSizeLimit)",
            )


def _add_labels(t: dict[str, Any], plan: PodPlan) -> None:
    meta = t.get("metadata")
    if meta is None:
        meta = t["metadata"] = {}
    meta["labels"] = {**(meta.get("labels") or {}), **plan.labels}
    if plan.serving is not None:
        meta["labels"][LABEL_SERVING] = plan.serving


def _add_scheduling(spec: dict[str, Any], plan: PodPlan) -> None:
    """The pool's node selector, the deployment's tolerations and the GPU toleration."""
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **plan.node_selector}
    tolerations = list(spec.get("tolerations") or [])
    for tol in [*plan.tolerations, GPU_TOLERATION]:
        if tol not in tolerations:
            tolerations.append(tol)
    if tolerations:
        spec["tolerations"] = tolerations


def _add_volumes(spec: dict[str, Any], engine: dict[str, Any], plan: PodPlan) -> None:
    """``/dev/shm``; with a cache its PVC, ``MODELPLANE_MODEL`` and the flash loader; on
    a gang its env (ours first in the engine's env)."""
    volumes: list[dict[str, Any]] = _slot(spec, "volumes", [])
    mounts: list[dict[str, Any]] = _slot(engine, "volumeMounts", [])
    set_by_name(
        volumes,
        {"name": VOLUME_SHM, "emptyDir": {"medium": "Memory", "sizeLimit": plan.shm_size_limit}},
    )
    set_by_name(mounts, {"name": VOLUME_SHM, "mountPath": SHM_MOUNT_PATH})

    injected: list[dict[str, Any]] = []
    path = model_path(plan)
    if plan.cache_pvc is not None and path is not None:
        set_by_name(
            volumes,
            {
                "name": VOLUME_CACHE,
                "persistentVolumeClaim": {"claimName": plan.cache_pvc, "readOnly": True},
            },
        )
        cache_mount = {"name": VOLUME_CACHE, "mountPath": CACHE_MOUNT_PATH, "readOnly": True}
        set_by_name(mounts, cache_mount)
        if plan.flash is not None:
            _add_flash_loader(spec, mounts, plan.flash, plan.cache_identity)
        injected.append(model_env(path))
    if plan.gang:
        injected.extend(gang_env())
    set_env(engine, injected, first=True)


def _add_flash_loader(
    spec: dict[str, Any], mounts: list[dict[str, Any]], fl: FlashLoader, identity: str
) -> None:
    """The flash loader's memory volume, its mount, and its init container first."""
    set_by_name(
        spec["volumes"],
        {
            "name": VOLUME_FLASH,
            "emptyDir": {"medium": "Memory", "sizeLimit": fl.tmpfs_size_limit},
        },
    )
    set_by_name(mounts, {"name": VOLUME_FLASH, "mountPath": FLASH_MOUNT_PATH})
    init = [
        c
        for c in spec.get("initContainers") or []
        if not (isinstance(c, dict) and c.get("name") == FLASH_CONTAINER)
    ]
    spec["initContainers"] = [flash_container(fl, identity), *init]


def _add_serving_defaults(t: dict[str, Any], engine: dict[str, Any], field_path: str) -> None:
    """Port 8000 named ``http`` and an HTTP ``/health`` readiness probe, where the user
    set none."""
    if not engine.get("ports"):
        engine["ports"] = [
            {"name": "http", "containerPort": DEFAULT_ENGINE_PORT, "protocol": "TCP"}
        ]
    if "readinessProbe" not in engine:
        engine["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": engine_port(t, field_path)},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        }


def clone(v: Any) -> Any:
    """A deep copy of plain JSON data (dicts, lists, scalars); several times faster
    than ``copy.deepcopy``, which matters on the hot path."""
    if isinstance(v, dict):
        return {k: clone(x) for k, x in v.items()}
    if isinstance(v, list):
        return [clone(x) for x in v]
    return v


def flash_container(fl: FlashLoader, identity: str) -> dict[str, Any]:
    """The init container that copies the weights of source ``identity`` (its directory
    on the cache PVC, :func:`jobs.contract.identity_dir`) to node-local memory.

    It runs ``python -m jobs.flashload`` (the function's own image has it,
    :mod:`jobs.contract`); a custom ``image`` must accept the same command line.
    """
    return {
        "name": FLASH_CONTAINER,
        "image": fl.image,
        "command": list(FLASHLOAD_COMMAND),
        "args": [
            f"--source={cache_source(identity)}",
            f"--dest={FLASH_MOUNT_PATH}",
            f"--concurrency={fl.concurrency}",
        ],
        "volumeMounts": [
            {"name": VOLUME_CACHE, "mountPath": CACHE_MOUNT_PATH, "readOnly": True},
            {"name": VOLUME_FLASH, "mountPath": FLASH_MOUNT_PATH},
        ],
    }


def _meta(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def deployment(
    name: str, namespace: str, replicas: int, template: dict[str, Any], labels: dict[str, str]
) -> dict[str, Any]:
    """An ``apps/v1`` Deployment of a Standalone engine (``replicas`` = copies).

    The pod template (which the Deployment takes over, not copied: pass the
    result of :func:`pod_template`) gets ``modelplane.ai/workload: <name>``, the selector.
    """
    tmpl = template
    tmpl.setdefault("metadata", {}).setdefault("labels", {})[LABEL_WORKLOAD] = name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": {LABEL_WORKLOAD: name}},
            # Make-before-break: a changed pod template (a new source identity) starts a
            # new pod and removes an old one only once the new one is available.
            "strategy": clone(ROLLING_UPDATE),
            "template": tmpl,
        },
    }


@dataclass(frozen=True)
class Group:
    """One LeaderWorkerSet group: ``size`` pods (1 + worker nodes) from two pod
    templates, taken over, not copied (pass results of :func:`pod_template`)."""

    size: int
    leader: dict[str, Any]
    worker: dict[str, Any]


def leader_worker_set(
    name: str, namespace: str, replicas: int, group: Group, labels: dict[str, str]
) -> dict[str, Any]:
    """A ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet of ``replicas`` groups."""
    size, leader, worker = group.size, group.leader, group.worker
    for t in (leader, worker):
        t.setdefault("metadata", {}).setdefault("labels", {})[LABEL_WORKLOAD] = name
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "replicas": int(replicas),
            # Make-before-break, as for a Deployment (LWS v0.10 rolloutStrategy).
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "leaderWorkerTemplate": {
                "size": int(size),
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }


def service(
    name: str, namespace: str, serving: str, port: int, labels: dict[str, str]
) -> dict[str, Any]:
    """A ClusterIP Service on ``port`` in front of the pods labelled ``modelplane.ai/serving``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_SERVING: serving},
            "ports": [
                {"name": "http", "port": int(port), "targetPort": int(port), "protocol": "TCP"}
            ],
        },
    }


def service_url(name: str, namespace: str, port: int) -> str:
    """The in-cluster URL of a Service (cluster DNS, ``cluster.local`` domain)."""
    return f"http://{name}.{namespace}.svc.cluster.local:{port}"


def resource_claim_template(
    name: str, namespace: str, requests: list[dict[str, Any]], labels: dict[str, str]
) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaimTemplate with ``requests`` (DeviceRequests)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": _meta(name, namespace, labels),
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def device_request(
    name: str, device_class: str, count: int, selectors: list[str]
) -> dict[str, Any]:
    """One DRA DeviceRequest: ``count`` devices of ``device_class`` matching every CEL selector."""
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": int(count),
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def _num(node: Any, *path: str) -> float | None:
    v = structs.get(node, *path)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def deployment_serving(manifest: Any) -> bool:
    """:data:`DEPLOYMENT_READY_CEL` in Python, over the observed Deployment (Struct or dict)."""
    want = _num(manifest, "spec", "replicas")
    gen = _num(manifest, "metadata", "generation")
    seen = _num(manifest, "status", "observedGeneration")
    updated = _num(manifest, "status", "updatedReplicas")
    available = _num(manifest, "status", "availableReplicas")
    if None in (want, gen, seen, updated, available):
        return False
    return seen == gen and updated >= want and available >= want  # type: ignore[operator]


def lws_serving(manifest: Any) -> bool:
    """:data:`LWS_READY_CEL` in Python, over the observed LeaderWorkerSet (Struct or dict)."""
    want = _num(manifest, "spec", "replicas")
    ready = _num(manifest, "status", "readyReplicas")
    if want is None or ready is None or ready < want:
        return False
    return structs.condition_is(manifest, "Available", "True")


# ---- what an observed workload's pods read, and whether they all run its template ----

ROOT_SOURCE = ""
"""What :func:`template_sources` reports for a pod template that reads the PVC root."""


def pod_templates(manifest: Any, kind: str) -> list[Any]:
    """The pod templates of an observed workload manifest (Struct or dict): a
    Deployment's ``spec.template``; a LeaderWorkerSet's leader and worker templates."""
    if kind == "LeaderWorkerSet":
        lwt = structs.get(manifest, "spec", "leaderWorkerTemplate")
        found = [structs.get(lwt, "leaderTemplate"), structs.get(lwt, "workerTemplate")]
    else:
        found = [structs.get(manifest, "spec", "template")]
    return [t for t in found if t is not None]


def template_sources(manifest: Any, kind: str) -> set[str]:
    """The cache sources the pod templates of an observed workload read: each source
    identity whose directory ``MODELPLANE_MODEL`` or the flash loader's ``--source``
    names, and :data:`ROOT_SOURCE` for the PVC root (the release before side-by-side
    revisions). Empty when the templates read no cache (or are not observed)."""
    found: set[str] = set()
    for t in pod_templates(manifest, kind):
        spec = structs.get(t, "spec")
        for c in [*structs.items(spec, "initContainers"), *structs.items(spec, "containers")]:
            for path in _container_paths(c):
                source = _source_of(path)
                if source is not None:
                    found.add(source)
    return found


def template_claims(manifest: Any, kind: str) -> set[str]:
    """The ResourceClaimTemplates the pod templates of an observed workload claim their
    devices from (``spec.resourceClaims[]`` entry :data:`POD_CLAIM`'s
    ``resourceClaimTemplateName``). Empty when they claim none (or are not observed)."""
    found: set[str] = set()
    for t in pod_templates(manifest, kind):
        for rc in structs.items(structs.get(t, "spec"), "resourceClaims"):
            name = structs.get(rc, "resourceClaimTemplateName")
            if structs.get(rc, "name") == POD_CLAIM and isinstance(name, str):
                found.add(name)
    return found


def _container_paths(c: Any) -> list[Any]:
    """The paths a container is told to read the weights from: its ``MODELPLANE_MODEL``
    and, for the flash loader, its ``--source``."""
    env = structs.items(c, "env")
    paths = [structs.get(e, "value") for e in env if structs.get(e, "name") == ENV_MODEL]
    if structs.get(c, "name") == FLASH_CONTAINER:
        flag = "--source="
        args = [a for a in structs.items(c, "args") if isinstance(a, str)]
        paths += [a[len(flag) :] for a in args if a.startswith(flag)]
    return paths


def _source_of(path: Any) -> str | None:
    """The identity whose directory ``path`` is, :data:`ROOT_SOURCE` for the PVC root,
    None for anything else."""
    if path == CACHE_MOUNT_PATH:
        return ROOT_SOURCE
    prefix = CACHE_MOUNT_PATH + "/"
    if isinstance(path, str) and path.startswith(prefix):
        ident = path[len(prefix) :]
        if IDENTITY_PATTERN.fullmatch(ident):
            return ident
    return None


def rollout_complete(manifest: Any, kind: str) -> bool | None:
    """Whether every pod of an observed workload runs its current template and is
    available, with none of an older template left (``kubectl rollout status``).

    A Deployment: ``status.observedGeneration >= metadata.generation``,
    ``updatedReplicas`` and ``availableReplicas`` at least ``spec.replicas``, and no pod
    of an older template (``status.replicas == updatedReplicas``; a scale-down's surplus
    pods are updated ones)
    (https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#complete-deployment).
    ``status.terminatingReplicas`` (Kubernetes 1.33+) is not read: it counts every
    terminating pod of any template (an eviction, a node drain, a pod stuck Terminating
    on a lost node), and a terminating pod has already loaded its weights; it reads no
    files.
    A LeaderWorkerSet (kubernetes-sigs/lws ``LeaderWorkerSetStatus``):
    ``observedGeneration >= generation``, ``updatedReplicas == replicas >=
    spec.replicas``, ``readyReplicas >= spec.replicas`` and no ``UpdateInProgress=True``.

    Returns:
        True when complete; False when a reported field shows it is not (an older
        generation, fewer updated or available pods than wanted, pods of an older
        template, an update in progress); None when not known (a field it needs is
        not reported: Kubernetes omits zero counts; an LWS release without
        ``status.observedGeneration``).
    """
    want = _num(manifest, "spec", "replicas")
    gen = _num(manifest, "metadata", "generation")
    seen = _num(manifest, "status", "observedGeneration")
    updated = _num(manifest, "status", "updatedReplicas")
    total = _num(manifest, "status", "replicas")
    lws = kind == "LeaderWorkerSet"
    up = _num(manifest, "status", "readyReplicas" if lws else "availableReplicas")
    behind = (
        (lws and structs.condition_is(manifest, "UpdateInProgress", "True"))
        or (seen is not None and gen is not None and seen < gen)
        or (want is not None and any(v is not None and v < want for v in (updated, up)))
        # pods (groups) of an older template still run
        or (updated is not None and total is not None and total > updated)
    )
    if behind:
        return False
    if None in (want, seen, gen, updated, up, total):
        return None
    return True


PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
"""A Deployment's ``Progressing=False`` reason once ``spec.progressDeadlineSeconds``
(default 600) passed without progress
(https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#failed-deployment)."""


def rollout_stalled(manifest: Any, kind: str) -> str | None:
    """Why an observed workload's rollout stopped progressing, or None.

    A Deployment: its ``Progressing`` condition is ``False`` with reason
    :data:`PROGRESS_DEADLINE_EXCEEDED` (a surge pod that never schedules: no free GPU
    slot; an image that does not pull; a pod that never becomes ready). Kubernetes
    keeps the old pods running; it does not roll back.

    A LeaderWorkerSet reports no equivalent (kubernetes-sigs/lws has no progress
    deadline: its ``Progressing`` and ``UpdateInProgress`` conditions stay True while a
    surge group waits), so this is always None for one; a stuck LWS roll reads as a
    replica ``Starting`` with the groups it waits for.

    Returns:
        ``"Progressing=False, ProgressDeadlineExceeded"`` followed by the condition's
        message in parentheses when it has one; None otherwise.
    """
    if kind == "LeaderWorkerSet":
        return None
    for c in structs.items(manifest, "status", "conditions"):
        if (
            structs.get(c, "type") == "Progressing"
            and structs.get(c, "status") == "False"
            and structs.get(c, "reason") == PROGRESS_DEADLINE_EXCEEDED
        ):
            msg = structs.get(c, "message")
            why = f"Progressing=False, {PROGRESS_DEADLINE_EXCEEDED}"
            return f"{why} ({msg})" if isinstance(msg, str) and msg else why
    return None
