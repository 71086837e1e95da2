"""Builders of the resources tests feed the function (InferenceClusters, hydrations, ...)."""

from __future__ import annotations

from typing import Any

from function import API_VERSION, naming
from function.composers.hydration.wire import rbac_name, result_configmap_name
from function.naming import source_identity


def inference_cluster(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    ready: bool = True,
    provider_config: str | None = "default",
    storage_class: str | None = "rwx-fast",
    extra_status: dict[str, Any] | None = None,
    kubeconfig: str | tuple[str, str | None] | None = None,
    created: str | None = None,
) -> dict[str, Any]:
    """A cluster-scoped InferenceCluster as Modelplane reports it.

    ``kubeconfig``: a bring-your-own cluster (``spec.cluster.source: Existing``) whose
    ``spec.cluster.existing.secretRef`` is this Secret name, or ``(name, key)`` (key None:
    left out, as before the XRD's default applies);
    ``created``: its ``metadata.creationTimestamp``.
    """
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
    if created:
        meta["creationTimestamp"] = created
    out: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "InferenceCluster",
        "metadata": meta,
        "status": status,
    }
    if kubeconfig is not None:
        ref_name, key = (kubeconfig, "kubeconfig") if isinstance(kubeconfig, str) else kubeconfig
        ref = {"name": ref_name, "key": key} if key is not None else {"name": ref_name}
        out["spec"] = {"cluster": {"source": "Existing", "existing": {"secretRef": ref}}}
    return out


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


# What a pod spec a tenant writes may not hold on the workload cluster's shared
# namespace (function.manifests.tenancy), in POD_TEMPLATE_FAULTS' shape. Found by a
# trial: a tenant's template named another namespace's token Secret, cache PVC and the
# node's root (hostPath, privileged) and the function composed it unchanged. The names
# are the ones the function gives another namespace's ModelCache (ml-team/qwen-cache).
_OTHERS_TOKEN = naming.cache_secret_name("ml-team", "qwen-cache")
_OTHERS_PVC = naming.cache_pvc_name("ml-team", "qwen-cache")
_OTHERS_RESULT = result_configmap_name("ml-team", "qwen-cache")
_OTHERS_ACCOUNT = rbac_name("ml-team", "qwen-cache")
POD_ACCESS_FAULTS = [
    ("another namespace's token Secret in env", ("containers", 0, "env"),
     [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": _OTHERS_TOKEN, "key": "token"}}}],
     "template.spec.containers[0].env[0].valueFrom.secretKeyRef.name"),
    ("another namespace's token Secret in envFrom", ("containers", 0, "envFrom"),
     [{"secretRef": {"name": _OTHERS_TOKEN}}],
     "template.spec.containers[0].envFrom[0].secretRef.name"),
    ("another namespace's token Secret as a volume", ("volumes",),
     [{"name": "t", "secret": {"secretName": _OTHERS_TOKEN}}],
     "template.spec.volumes[0].secret.secretName"),
    ("another namespace's cache PVC", ("volumes",),
     [{"name": "c", "persistentVolumeClaim": {"claimName": _OTHERS_PVC}}],
     "template.spec.volumes[0].persistentVolumeClaim.claimName"),
    ("another namespace's result ConfigMap, projected", ("volumes",),
     [{"name": "r", "projected": {"sources": [{"configMap": {"name": _OTHERS_RESULT}}]}}],
     "template.spec.volumes[0].projected.sources[0].configMap.name"),
    ("the hydration ServiceAccount", ("serviceAccountName",), _OTHERS_ACCOUNT,
     "template.spec.serviceAccountName"),
    ("an existing ResourceClaim", ("resourceClaims",), [{"name": "x", "resourceClaimName": "y"}],
     "template.spec.resourceClaims[0].resourceClaimName"),
    # A review (14a): a gauntlet allocated devices through another tenant's replica's
    # claim template (its name is public: <workload name>-<role>).
    ("another replica's ResourceClaimTemplate", ("resourceClaims",),
     [{"name": "x", "resourceClaimTemplateName": "qwen-chat-0-vllm-f021aa74f62a-standalone"}],
     "template.spec.resourceClaims[0].resourceClaimTemplateName"),
    ("the node's PID namespace", ("hostPID",), True, "template.spec.hostPID"),
    ("a hostPath volume", ("volumes",), [{"name": "root", "hostPath": {"path": "/"}}],
     "template.spec.volumes[0].hostPath"),
    ("a privileged container", ("containers", 0, "securityContext"), {"privileged": True},
     "template.spec.containers[0].securityContext.privileged"),
    ("SYS_ADMIN", ("containers", 0, "securityContext"),
     {"capabilities": {"add": ["CHOWN", "SYS_ADMIN"]}},
     "template.spec.containers[0].securityContext.capabilities.add[1]"),
    ("a host port", ("containers", 0, "ports"), [{"containerPort": 8000, "hostPort": 8000}],
     "template.spec.containers[0].ports[0].hostPort"),
    ("an unsafe sysctl", ("securityContext",),
     {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
     "template.spec.securityContext.sysctls[0].name"),
    ("seccomp Unconfined in an init container", ("initContainers",),
     [{"name": "init", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}],
     "template.spec.initContainers[0].securityContext.seccompProfile.type"),
    # A trial: a pod labelled with another replica's Service selector (the name is
    # public) took that replica's traffic.
    ("another replica's Service selector as a pod label", ("metadata", "labels"),
     {"app": "x", "modelplane.ai/serving": "kimi-0-svc-dfa3051bff16"},
     "template.metadata.labels[modelplane.ai/serving]"),
    # A review: a backfill pod could ask for system-node-critical and evict serving pods.
    ("a priority class", ("priorityClassName",), "system-node-critical",
     "template.spec.priorityClassName"),
    ("a LeaderWorkerSet label", ("metadata", "labels"),
     {"leaderworkerset.sigs.k8s.io/name": "kimi-0-e0"},
     "template.metadata.labels[leaderworkerset.sigs.k8s.io/name]"),
]  # fmt: skip


def put_fault(pod_template: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    """Write a fault row's ``value`` at ``path`` in a pod template (in place): inside its
    ``spec``, or, for a path starting ``metadata``, in the template itself. A row that
    writes several fields has a tuple of paths and a tuple of values, written in order."""
    if path and isinstance(path[0], tuple):
        for one, v in zip(path, value, strict=True):
            put_fault(pod_template, one, v)
        return
    target: Any = pod_template if path[0] == "metadata" else pod_template["spec"]
    for key in path[:-1]:
        if isinstance(key, str) and key not in target:
            target[key] = {}
        target = target[key]
    target[path[-1]] = value


# What every ModelReplica would refuse in a member's pod template, so what the kinds that
# write member templates (ModelDeployment, ModelExperiment's candidate) refuse where it
# was written: (case, path inside the template's ``spec``, or from its ``metadata``,
# value, the field named, from the member; ``put_fault`` writes it). Found by a trial:
# ``resources.claims: "gpu"`` passed the deployment and failed every replica as an
# internal error; a volume or mount of the function's own
# passed and failed every replica.
# What the workload cluster's API server refuses in a member's pod template
# (function.manifests.podrules; k8s.io/kubernetes/pkg/apis/core/validation, Kubernetes
# 1.34), in POD_TEMPLATE_FAULTS' shape. Found by a review (16b F4): each passed the
# ModelDeployment and its ModelReplica, and the replica sat in Starting until
# provider-kubernetes reported the remote apply error, naming no field.
_LONG = "a" * 5000
_VOL = ("volumes",)
_MOUNTS = ("containers", 0, "volumeMounts")
POD_API_FAULTS = [
    ("a volume name that is no DNS label", (_VOL, _MOUNTS),
     ([{"name": "Bad_Name", "emptyDir": {}}], [{"name": "Bad_Name", "mountPath": "/x"}]),
     "template.spec.volumes[0].name"),
    ("a volume name of 64 characters", _VOL, [{"name": "v" * 64, "emptyDir": {}}],
     "template.spec.volumes[0].name"),
    ("a volume name of 5,000 characters", (_VOL, _MOUNTS),
     ([{"name": _LONG, "emptyDir": {}}], [{"name": _LONG, "mountPath": "/x"}]),
     "template.spec.volumes[0].name"),
    ("two volumes of one name", _VOL,
     [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}],
     "template.spec.volumes[1].name"),
    ("a volume without a source", _VOL, [{"name": "v"}], "template.spec.volumes[0]"),
    ("a mount of no volume", _MOUNTS, [{"name": "nowhere", "mountPath": "/x"}],
     "template.spec.containers[0].volumeMounts[0].name"),
    ("two mounts at one path", (_VOL, _MOUNTS),
     ([{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}],
      [{"name": "v", "mountPath": "/x"}, {"name": "w", "mountPath": "/x"}]),
     "template.spec.containers[0].volumeMounts[1].mountPath"),
    ("a serviceAccountName of 5,000 characters", ("serviceAccountName",), _LONG,
     "template.spec.serviceAccountName"),
    ("a serviceAccountName with capitals", ("serviceAccountName",), "Runner",
     "template.spec.serviceAccountName"),
    ("a toleration key that is no qualified name", ("tolerations",),
     [{"key": "bad key!", "operator": "Exists"}], "template.spec.tolerations[0].key"),
    ("a toleration key of 5,000 characters", ("tolerations",),
     [{"key": _LONG, "operator": "Exists"}], "template.spec.tolerations[0].key"),
    ("a toleration of no key with Equal", ("tolerations",), [{"operator": "Equal", "value": "x"}],
     "template.spec.tolerations[0].operator"),
    ("tolerationSeconds without NoExecute", ("tolerations",),
     [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}],
     "template.spec.tolerations[0].effect"),
    ("a toleration value that is no label value", ("tolerations",),
     [{"key": "k", "operator": "Equal", "value": "a b"}], "template.spec.tolerations[0].value"),
    ("an init container name that is no DNS label", ("initContainers",),
     [{"name": "Init", "image": "busybox"}], "template.spec.initContainers[0].name"),
    ("an init container named like the engine", ("initContainers",),
     [{"name": "engine", "image": "busybox"}], "template.spec.initContainers[0].name"),
    ("an init container without an image", ("initContainers",), [{"name": "init"}],
     "template.spec.initContainers[0].image"),
    ("an image with a trailing space", ("containers", 0, "image"), "vllm/vllm-openai:v0.9.2 ",
     "template.spec.containers[0].image"),
    ("an env name with '='", ("containers", 0, "env"), [{"name": "A=B", "value": "1"}],
     "template.spec.containers[0].env[0].name"),
    ("an env name outside ASCII", ("containers", 0, "env"), [{"name": "MODÈLE", "value": "1"}],
     "template.spec.containers[0].env[0].name"),
    ("an envFrom prefix with '='", ("containers", 0, "envFrom"),
     [{"prefix": "A=", "configMapRef": {"name": "c"}}],
     "template.spec.containers[0].envFrom[0].prefix"),
    ("a port name with capitals", ("containers", 0, "ports"),
     [{"name": "HTTP", "containerPort": 80}],
     "template.spec.containers[0].ports[0].name"),
    ("a port name of 16 characters", ("containers", 0, "ports"),
     [{"name": "p" * 16, "containerPort": 80}], "template.spec.containers[0].ports[0].name"),
    ("a port name of digits only", ("containers", 0, "ports"),
     [{"name": "8080", "containerPort": 80}],
     "template.spec.containers[0].ports[0].name"),
    ("a port name with '--'", ("containers", 0, "ports"), [{"name": "a--b", "containerPort": 80}],
     "template.spec.containers[0].ports[0].name"),
    ("two ports of one name", ("containers", 0, "ports"),
     [{"name": "http", "containerPort": 80}, {"name": "http", "containerPort": 81}],
     "template.spec.containers[0].ports[1].name"),
    ("a pod label key that is no qualified name", ("metadata", "labels"), {"bad key!": "x"},
     "template.metadata.labels[bad key!]"),
    ("a pod label value of 64 characters", ("metadata", "labels"), {"team": "t" * 64},
     "template.metadata.labels[team]"),
    ("an annotation key that is no qualified name", ("metadata", "annotations"), {"a/b/c": "x"},
     "template.metadata.annotations[a/b/c]"),
    ("annotations past 256 KiB", ("metadata", "annotations"),
     {f"k{i}": "v" * 8192 for i in range(32)}, "template.metadata.annotations"),
    ("a nodeSelector key that is no qualified name", ("nodeSelector",), {"-gpu": "h100"},
     "template.spec.nodeSelector[-gpu]"),
    ("a hostname that is no DNS label", ("hostname",), "Host_1", "template.spec.hostname"),
    # Review 19a F1: resources, probes, a volume's quantity and mount paths.
    ("a memory limit in gb", ("containers", 0, "resources"), {"limits": {"memory": "16gb"}},
     "template.spec.containers[0].resources.limits[memory]"),
    ("a memory request over its limit", ("containers", 0, "resources"),
     {"requests": {"memory": "32Gi"}, "limits": {"memory": "16Gi"}},
     "template.spec.containers[0].resources.requests[memory]"),
    ("a readiness probe without a handler", ("containers", 0, "readinessProbe"),
     {"path": "/health", "port": 8000}, "template.spec.containers[0].readinessProbe"),
    ("an emptyDir sizeLimit in gb", (_VOL, _MOUNTS),
     ([{"name": "v", "emptyDir": {"sizeLimit": "10gb"}}], [{"name": "v", "mountPath": "/x"}]),
     "template.spec.volumes[0].emptyDir.sizeLimit"),
    ("a mount subPath out of its volume", (_VOL, _MOUNTS),
     ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/x", "subPath": "../y"}]),
     "template.spec.containers[0].volumeMounts[0].subPath"),
]  # fmt: skip


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
    *POD_ACCESS_FAULTS,
    *POD_API_FAULTS,
]  # fmt: skip
