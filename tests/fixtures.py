"""Builders of the resources tests feed the function (InferenceClusters, hydrations, ...)."""

from __future__ import annotations

from typing import Any

from function import API_VERSION


def inference_cluster(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    ready: bool = True,
    provider_config: str | None = "default",
    storage_class: str | None = "rwx-fast",
    extra_status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A cluster-scoped InferenceCluster as Modelplane reports it."""
    status: dict[str, Any] = {
        "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "reason": "Available"}
        ]
    }
    if provider_config:
        status["providerConfigRef"] = {"name": provider_config, "kind": "ClusterProviderConfig"}
    if storage_class:
        status["cache"] = {"storageClassName": storage_class}
    status.update(extra_status or {})
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceCluster",
        "metadata": meta,
        "status": status,
    }


def observed_hydration(
    hydration: dict[str, Any], phase: str, message: str = "", **status: Any
) -> dict[str, Any]:
    """An observed ModelCacheHydration: the desired body plus a status with ``phase``."""
    body = {k: v for k, v in hydration.items()}
    body["status"] = {"phase": phase, "message": message or f"hydration is {phase}", **status}
    return body


def cache_spec(selector: dict[str, Any] | None, **hf: Any) -> dict[str, Any]:
    """A ModelCache spec for Qwen/Qwen2.5-0.5B-Instruct with ``selector`` (None: omitted)."""
    spec: dict[str, Any] = {
        "source": "HuggingFace",
        "huggingFace": {
            "repo": "Qwen/Qwen2.5-0.5B-Instruct",
            "revision": "main",
            "sizeGiB": 2,
            **hf,
        },
    }
    if selector is not None:
        spec["clusterSelector"] = selector
    return spec
