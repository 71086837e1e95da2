"""Builders of the resources tests feed the function (InferenceClusters, hydrations, ...)."""

from __future__ import annotations

from typing import Any

from function import API_VERSION
from function.naming import source_identity


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
    """An observed ModelCacheHydration: the desired body plus a status with ``phase``.

    Like the hydration composer, the status names the source it describes
    (``status.source {repo, revision, identity}``, from the body's spec) unless
    ``status`` passes its own ``source``.
    """
    body = {k: v for k, v in hydration.items()}
    hf = (body.get("spec") or {}).get("huggingFace") or {}
    src: dict[str, Any] = {}
    if hf.get("repo"):
        rev = hf.get("revision") or "main"
        src = {
            "source": {
                "repo": hf["repo"],
                "revision": rev,
                "identity": source_identity(hf["repo"], rev),
            }
        }
    body["status"] = {
        "phase": phase,
        "message": message or f"hydration is {phase}",
        **src,
        **status,
    }
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


# The canonical fake Hugging Face token of the test suite and the examples
# (examples/modelcache/required/hf-token.yaml). tests/support/secret_guard.py fails any
# test whose function response or captured output contains it, raw or base64.
FAKE_TOKEN = "hf_FAKEfakeFAKEfakeFAKEfakeFAKEfake00"


def auth_secret(
    name: str = "hf-token",
    namespace: str = "ml-team",
    key: str = "HF_TOKEN",
    token: str = FAKE_TOKEN,
    *,
    string_data: bool = False,
) -> dict[str, Any]:
    """A control-plane auth Secret holding ``token`` under ``key`` (base64 in ``data``)."""
    import base64

    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
    }
    if string_data:
        body["stringData"] = {key: token}
    else:
        body["data"] = {key: base64.b64encode(token.encode()).decode()}
    return body


# What every ModelReplica would refuse in a member's pod template, so what the kinds that
# write member templates (ModelDeployment, ModelExperiment's candidate) refuse where it
# was written: (case, path inside the template's ``spec``, value, the field named, from
# the member). Found by a trial: ``resources.claims: "gpu"`` passed the deployment and
# failed every replica as an internal error; a volume or mount of the function's own
# passed and failed every replica.
POD_TEMPLATE_FAULTS = [
    ("claims a string", ("containers", 0, "resources"), {"claims": "gpu"},
     "template.spec.containers[0].resources.claims"),
    ("claims of strings", ("containers", 0, "resources"), {"claims": ["gpu"]},
     "template.spec.containers[0].resources.claims[0]"),
    ("ports an object", ("containers", 0, "ports"), {}, "template.spec.containers[0].ports"),
    ("volumes an object", ("volumes",), {"name": "x"}, "template.spec.volumes"),
    ("the function's volume", ("volumes",), [{"name": "modelplane-dshm", "emptyDir": {}}],
     "template.spec.volumes[0].name"),
    ("the function's mount", ("containers", 0, "volumeMounts"),
     [{"name": "x", "mountPath": "/dev/shm"}],
     "template.spec.containers[0].volumeMounts[0].mountPath"),
    ("the function's mount, written with a slash", ("containers", 0, "volumeMounts"),
     [{"name": "x", "mountPath": "/dev/shm/"}],
     "template.spec.containers[0].volumeMounts[0].mountPath"),
    ("reserved env in an init container", ("initContainers",),
     [{"name": "init", "env": [{"name": "MODELPLANE_MODEL", "value": "x"}]}],
     "template.spec.initContainers[0].env[0].name"),
    ("no engine container", ("containers", 0, "name"), "server", "template.spec.containers"),
]  # fmt: skip
