"""Inputs of the ModelReplica tests and examples: clusters with GPU pools, caches, hydrations."""

from __future__ import annotations

import copy
from typing import Any

from function import API_VERSION
from function.naming import hydration_name, replica_name, source_identity
from jobs.contract import CACHE_MOUNT_PATH, identity_dir
from tests.support import fixtures
from tests.support.harness import NAMESPACE, xr

DEPLOYMENT = "chat"
CACHE = "qwen-cache"
POOL = "h100-pool"
DRIVER = "gpu.nvidia.com"
GPU_SELECTOR = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0'

H100_POOL: dict[str, Any] = {
    "name": POOL,
    "nodes": 4,
    "devices": [
        {
            "name": "gpu",
            "claim": "DRA",
            "driver": DRIVER,
            "deviceClassName": DRIVER,
            "count": 8,
            "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}},
            "capacity": {"memory": {"value": "80Gi"}},
        },
        {"name": "efa", "claim": "Synthetic", "driver": "efa.amazonaws.com", "count": 4},
    ],
}
GPU_REQUEST: dict[str, Any] = {"name": "gpu", "count": 8, "selectors": [{"cel": GPU_SELECTOR}]}
TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
]
# Args and env that exercise Kubernetes' $(VAR) expansion and $$ escapes: they must
# reach the pod byte for byte.
USER_ARGS = [
    "--model=$(MODELPLANE_MODEL)",
    "--served-model-name=qwen",
    "--download-dir=$$(HOME)/not-expanded",
    "--port=8000",
]
USER_ENV: list[dict[str, Any]] = [
    {"name": "HF_HOME", "value": "$(MODELPLANE_MODEL)/.hf"},
    {"name": "LITERAL", "value": "$$(MODELPLANE_MODEL) stays $$ literal"},
    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}},
]


def cluster(
    name: str = "gpu-a",
    *,
    pools: list[dict[str, Any]] | None = None,
    provider_config: str | None = "gpu-a-kubeconfig",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An InferenceCluster with one H100 pool."""
    return fixtures.inference_cluster(
        name,
        labels or {"gpu": "h100"},
        provider_config=provider_config,
        extra_status={"gpuPools": copy.deepcopy(pools if pools is not None else [H100_POOL])},
    )


def engine_template(
    *,
    args: list[str] | None = None,
    env: list[dict[str, Any]] | None = None,
    command: list[str] | None = None,
    image: str = "vllm/vllm-openai:v0.11.0",
) -> dict[str, Any]:
    """A member pod template whose only container is ``engine``."""
    c: dict[str, Any] = {"name": "engine", "image": image}
    if command is not None:
        c["command"] = list(command)
    c["args"] = list(USER_ARGS if args is None else args)
    if env is not None or args is None:
        c["env"] = copy.deepcopy(USER_ENV if env is None else env)
    return {"metadata": {"labels": {"team": "chat"}}, "spec": {"containers": [c]}}


def single_spec(*, cache: bool = True, copies: int = 1, **extra: Any) -> dict[str, Any]:
    """A replica of one Standalone vLLM engine on gpu-a."""
    spec: dict[str, Any] = {
        "deploymentName": DEPLOYMENT,
        "index": 0,
        "clusterName": extra.pop("cluster_name", "gpu-a"),
        "tolerations": copy.deepcopy(TOLERATIONS),
        "serving": {"mode": "Unified"},
        "engines": [
            {
                "name": "vllm",
                "copies": copies,
                "members": [
                    {
                        "role": "Standalone",
                        "pool": POOL,
                        "nodeSelector": {"devices": [copy.deepcopy(GPU_REQUEST)]},
                        "template": extra.pop("template", engine_template()),
                    }
                ],
            }
        ],
    }
    if cache:
        spec["modelCacheRef"] = {"name": CACHE}
    spec.update(extra)
    return spec


MULTI_COMMAND = [
    "sh",
    "-c",
    "vllm serve $(MODELPLANE_MODEL) --tensor-parallel-size 8 --pipeline-parallel-size 3 "
    "--nnodes 3 --node-rank $(MODELPLANE_RANK) --master-addr $(MODELPLANE_LEADER_ADDRESS)",
]


def multi_spec(
    *, cache: bool = True, nodes: int = 2, copies: int = 1, **extra: Any
) -> dict[str, Any]:
    """A replica of one Leader + Workers engine (1 + ``nodes`` pods per copy) on gpu-a."""
    tmpl = engine_template(command=MULTI_COMMAND, args=[], env=copy.deepcopy(USER_ENV))
    spec: dict[str, Any] = {
        "deploymentName": DEPLOYMENT,
        "index": 0,
        "clusterName": extra.pop("cluster_name", "gpu-a"),
        "tolerations": copy.deepcopy(TOLERATIONS),
        "engines": [
            {
                "name": "kimi",
                "copies": copies,
                "members": [
                    {
                        "role": "Leader",
                        "pool": POOL,
                        "nodeSelector": {"devices": [copy.deepcopy(GPU_REQUEST)]},
                        "template": copy.deepcopy(tmpl),
                    },
                    {
                        "role": "Worker",
                        "worker": {"nodes": nodes},
                        "pool": POOL,
                        "nodeSelector": {"devices": [copy.deepcopy(GPU_REQUEST)]},
                        "template": copy.deepcopy(tmpl),
                    },
                ],
            }
        ],
    }
    if cache:
        spec["modelCacheRef"] = {"name": CACHE}
    spec.update(extra)
    return spec


def replica(spec: dict[str, Any], *, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ModelReplica XR as the deployment composes it."""
    return xr(
        "ModelReplica",
        replica_name(NAMESPACE, spec["deploymentName"], spec["index"]),
        spec,
        labels={
            "modelplane.ai/deployment": spec["deploymentName"],
            "modelplane.ai/cluster": spec.get("clusterName", ""),
            "modelplane.ai/replica-index": str(spec["index"]),
        },
        status=status,
    )


def model_cache(flash_loader: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ModelCache ``qwen-cache`` (optionally with ``spec.flashLoader``)."""
    spec = fixtures.cache_spec({"matchLabels": {"gpu": "h100"}})
    if flash_loader is not None:
        spec["flashLoader"] = dict(flash_loader)
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelCache",
        "metadata": {"name": CACHE, "namespace": NAMESPACE},
        "spec": spec,
    }


# The source identity of the fixture cache (fixtures.cache_spec) and its directory on
# the PVC: what MODELPLANE_MODEL points at.
IDENTITY = source_identity("Qwen/Qwen2.5-0.5B-Instruct", "main")
MODEL_DIR = identity_dir(CACHE_MOUNT_PATH, IDENTITY)


def hydration(cluster_name: str, phase: str, message: str = "") -> dict[str, Any]:
    """The ModelCacheHydration of ``qwen-cache`` on ``cluster_name`` in ``phase``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelCacheHydration",
        "metadata": {
            "name": hydration_name(NAMESPACE, CACHE, cluster_name),
            "namespace": NAMESPACE,
            "labels": {"modelplane.ai/cache": CACHE, "modelplane.ai/cluster": cluster_name},
        },
        "spec": {
            "clusterName": cluster_name,
            "cacheName": CACHE,
            **fixtures.cache_spec(None),
        },
        "status": {"phase": phase, "message": message or f"hydration is {phase}"},
    }


def required(
    *,
    cluster_items: list[dict[str, Any]] | None = None,
    cache_items: list[dict[str, Any]] | None = None,
    hydration_items: list[dict[str, Any]] | None = None,
) -> dict[str, list[dict[str, Any]] | None]:
    """The ``required`` map of a request (None: not resolved yet)."""
    return {"cluster": cluster_items, "cache": cache_items, "hydration": hydration_items}


def ready_required(phase: str = "Ready", cluster_name: str = "gpu-a", **kw: Any) -> dict[str, Any]:
    """Everything resolved: the cluster, the cache and its hydration in ``phase``."""
    return required(
        cluster_items=[cluster(cluster_name)],
        cache_items=[model_cache(kw.get("flash_loader"))],
        hydration_items=[hydration(cluster_name, phase, kw.get("message", ""))],
    )


def observed_object(desired: dict[str, Any], remote_status: dict[str, Any]) -> dict[str, Any]:
    """An observed Object: the desired body plus provider-kubernetes' view of the remote object."""
    body = copy.deepcopy(desired)
    manifest = copy.deepcopy(body["spec"]["forProvider"]["manifest"])
    manifest.setdefault("metadata", {})["generation"] = 1
    manifest["status"] = dict(remote_status)
    body["status"] = {
        "atProvider": {"manifest": manifest},
        "conditions": [{"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}],
    }
    return body


def claim_of(keys: Any, engine: str, role: str) -> str:
    """The one composition-resource name among ``keys`` of the ResourceClaimTemplate of
    ``engine``'s member in ``role`` (``claim-<engine>-<role>-<digest of its requests>``;
    or the release-before's ``claim-<engine>-<role>``); "" when there is none.

    Raises:
        AssertionError: more than one.
    """
    base = f"claim-{engine}-{role.lower()}"
    found = [
        k
        for k in keys
        if k == base or (k.startswith(f"{base}-") and _is_digest(k[len(base) + 1 :]))
    ]
    assert len(found) <= 1, found
    return found[0] if found else ""


def _is_digest(s: str) -> bool:
    from function.naming import CLAIM_HASH_LEN

    return len(s) == CLAIM_HASH_LEN and all(ch in "0123456789abcdef" for ch in s)
