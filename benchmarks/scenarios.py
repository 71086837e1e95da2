"""Requests for benchmarks: a fleet of N InferenceClusters and the XRs that read it.

Each scenario returns ``(first, steady)`` serialized RunFunctionRequests: the first call
after the requirements resolved (no children observed yet) and the steady state (every
child observed and ready), both with every requirement resolved.
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.edge.runner import FunctionRunner
from function.naming import hydration_name, source_identity
from function.render import World, build_request, drive, load_yaml, observed_by_name

NAMESPACE = "ml-team"
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-south-1")


def fleet(n: int) -> list[dict[str, Any]]:
    """N Ready InferenceClusters with region and GPU labels, provider config and storage class."""
    out = []
    for i in range(n):
        out.append(
            {
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": "InferenceCluster",
                # The API server gives every object a uid and a resourceVersion (only these two of
                # the fields it sets are here: the request is no larger than it must be).
                "metadata": {
                    "name": f"gpu-{i:05d}",
                    "uid": str(uuid.UUID(int=i + 1)),
                    "resourceVersion": str(100_000 + i),
                    "labels": {
                        "modelplane.ai/gpu": "h100" if i % 5 else "a100",
                        "topology.kubernetes.io/region": REGIONS[i % len(REGIONS)],
                        "modelplane.ai/tier": "prod",
                    },
                },
                "status": {
                    "providerConfigRef": {"kind": "ClusterProviderConfig", "name": f"gpu-{i:05d}"},
                    "cache": {"storageClassName": "rwx"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
                    "gpuPools": [
                        {
                            "name": "h100-pool",
                            "nodes": 8,
                            "devices": [
                                {
                                    "name": "gpu",
                                    "count": 8,
                                    "attributes": {"productName": "NVIDIA-H100-80GB-HBM3"},
                                    "capacity": {"memory": "80Gi"},
                                }
                            ],
                        }
                    ],
                },
            }
        )
    return out


SOURCE: dict[str, Any] = {
    "source": "HuggingFace",
    "huggingFace": {
        "repo": "Qwen/Qwen2.5-0.5B-Instruct",
        "revision": "main",
        "sizeGiB": 2,
        "authSecret": {"name": "hf-token", "key": "HF_TOKEN"},
    },
}


def modelcache(n: int) -> tuple[bytes, bytes]:
    """A ModelCache selecting ``{}`` (every cluster) over a fleet of ``n``."""
    xr = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": "qwen-cache", "namespace": NAMESPACE, "uid": "u1", "generation": 1},
        "spec": {
            **SOURCE,
            "clusterSelector": {
                "matchLabels": {"modelplane.ai/tier": "prod"},
                "matchExpressions": [
                    {
                        "key": "topology.kubernetes.io/region",
                        "operator": "NotIn",
                        "values": ["none"],
                    }
                ],
            },
        },
    }
    required = {"clusters": fleet(n)}
    first = build_request(xr, {}, required, tag="bench")
    rsp = FunctionRunner().run(first)
    # Each shard observed with the status it writes once its hydrations are all Ready.
    observed = {}
    for name, res in rsp.desired.resources.items():
        body = _to_dict(res.resource)
        body["status"] = _ready_shard_status(body)
        observed[name] = _stored(body)
    return first.SerializeToString(), _settle(xr, observed, required)


def _ready_shard_status(shard: dict[str, Any]) -> dict[str, Any]:
    """The status a ModelCacheShard writes when every hydration it composed is Ready."""
    runner = FunctionRunner()
    xr = {**shard, "metadata": {**shard["metadata"], "uid": "u-" + shard["metadata"]["name"]}}
    rsp = runner.run(build_request(xr, {}, {}, tag="bench"))
    hf = shard["spec"]["huggingFace"]
    src = {
        "repo": hf["repo"],
        "revision": hf["revision"],
        "identity": source_identity(hf["repo"], hf["revision"]),
    }
    observed = {}
    for name, res in rsp.desired.resources.items():
        body = _to_dict(res.resource)
        body["status"] = {"phase": "Ready", "message": "weights ready", "source": src}
        observed[name] = body
    settled = runner.run(build_request(xr, observed, {}, tag="bench"))
    return dict(_to_dict(settled.desired.composite.resource).get("status", {}))


def modelcacheshard(n: int) -> tuple[bytes, bytes]:
    """A ModelCacheShard holding ``n`` clusters: the per-cluster fan-out (one hydration and
    one status row per cluster) that the ModelCache did itself before issue 17. A shard of
    a 64n-cluster footprint holds about n."""
    from function.naming import cache_shard

    names: list[str] = []
    i = 0
    while len(names) < n:
        name = f"gpu-{i:06d}"
        if cache_shard(name) == 0:
            names.append(name)
        i += 1
    xr = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCacheShard",
        "metadata": {"name": "qwen-cache-0", "namespace": NAMESPACE, "uid": "u2", "generation": 1},
        "spec": {
            "cacheName": "qwen-cache",
            "shard": 0,
            **SOURCE,
            "clusters": [{"name": c} for c in names],
        },
    }
    first = build_request(xr, {}, {}, tag="bench")
    rsp = FunctionRunner().run(first)
    identity = {
        "repo": "Qwen/Qwen2.5-0.5B-Instruct",
        "revision": "main",
        "identity": source_identity("Qwen/Qwen2.5-0.5B-Instruct", "main"),
    }
    observed = {}
    for name, res in rsp.desired.resources.items():
        body = _to_dict(res.resource)
        body["status"] = {
            "phase": "Ready",
            "message": "weights ready",
            "source": identity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
        }
        observed[name] = _stored(body)
    return first.SerializeToString(), _settle(xr, observed, {})


def _settle(xr: dict[str, Any], observed: dict[str, Any], required: dict[str, Any]) -> bytes:
    """The steady-state request: the XR carries the status the function wrote for ``observed``."""
    runner = FunctionRunner()
    body = dict(xr)
    for _ in range(2):
        rsp = runner.run(build_request(body, observed, required, tag="bench"))
        body = {**xr, "status": _to_dict(rsp.desired.composite.resource).get("status", {})}
    return build_request(body, observed, required, tag="bench").SerializeToString()


def _stored(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the API server returns it: a ``metadata.uid`` per object (kind,
    namespace, name) and a ``metadata.resourceVersion`` that changes whenever its
    content does (a hash of it), as Crossplane sends required and observed objects."""
    meta = body.setdefault("metadata", {})
    meta.pop("resourceVersion", None)
    key = f"{body.get('kind')}/{meta.get('namespace', '')}/{meta.get('name', '')}"
    meta.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, key)))
    content = json.dumps(body, sort_keys=True).encode()
    meta["resourceVersion"] = str(int(hashlib.sha256(content).hexdigest()[:12], 16))
    return body


def _to_dict(s: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(s)


def _observe_all(
    rsp: fnv1.RunFunctionResponse, status_for: Callable[[str, dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """Observed children built from desired ones, each given the status ``status_for`` returns."""
    observed = {}
    for name, res in rsp.desired.resources.items():
        body = _to_dict(res.resource)
        body["status"] = status_for(name, body)
        body = _stored(body)
        observed[name] = body
    return observed


def hydration(n: int) -> tuple[bytes, bytes]:
    """A ModelCacheHydration on one cluster; its request does not grow with the fleet size n."""
    cluster = fleet(1)[0]
    xr = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCacheHydration",
        "metadata": {
            "name": "modelcache-ml-team-qwen-cache-gpu-00000-abcde",
            "namespace": NAMESPACE,
            "uid": "u2",
            "generation": 1,
        },
        "spec": {
            "clusterName": cluster["metadata"]["name"],
            "cacheName": "qwen-cache",
            **SOURCE,
        },
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf-token", "namespace": NAMESPACE},
        "data": {"HF_TOKEN": "eA=="},
    }
    required = {"cluster": [cluster], "auth-secret": [secret]}
    first = build_request(xr, {}, required, tag="bench")
    rsp = FunctionRunner().run(first)

    def status_for(name: str, body: dict[str, Any]) -> dict[str, Any]:
        manifest = dict(body["spec"]["forProvider"]["manifest"])
        kind = manifest.get("kind")
        if kind == "PersistentVolumeClaim":
            manifest["status"] = {"phase": "Bound"}
        elif kind == "Job":
            manifest["status"] = {"active": 1, "startTime": "2026-11-29T08:00:00Z"}
        return {
            "atProvider": {"manifest": manifest},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Available"},
                {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
            ],
        }

    observed = _observe_all(rsp, status_for)
    return first.SerializeToString(), _settle(xr, observed, required)


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _synthetic_fleet(
    n: int, like: dict[str, Any], docs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``n`` copies of the InferenceCluster ``like`` (``fleet-00000``...), each with copies of
    the ModelCacheHydrations ``like`` has in ``docs`` (so a cache footprint grows too)."""
    template = like["metadata"]["name"]
    hydrations = [
        d
        for d in docs
        if d.get("kind") == "ModelCacheHydration"
        and d.get("spec", {}).get("clusterName") == template
    ]
    out = []
    for i in range(n):
        name = f"fleet-{i:05d}"
        c = copy.deepcopy(like)
        c["metadata"]["name"] = name
        c["metadata"].pop("uid", None)  # another object: its own uid (_stored)
        c["status"]["providerConfigRef"] = {"kind": "ClusterProviderConfig", "name": name}
        out.append(c)
        for h in hydrations:
            h2 = copy.deepcopy(h)
            ns, cache = h2["metadata"].get("namespace", NAMESPACE), h2["spec"]["cacheName"]
            h2["metadata"]["name"] = hydration_name(ns, cache, name)
            h2["metadata"].pop("uid", None)
            h2["metadata"].setdefault("labels", {})["modelplane.ai/cluster"] = name
            h2["spec"]["clusterName"] = name
            out.append(h2)
    return out


def _example_docs(
    example: str,
    n: int,
    grow_fleet: bool = True,
    world: Callable[[list[dict[str, Any]], int], None] | None = None,
) -> list[dict[str, Any]]:
    """The resources Crossplane resolves ``examples/<example>``'s requirements from, the
    fleet grown to ``n`` InferenceClusters when ``grow_fleet`` (see :func:`from_example`)."""
    docs = load_yaml([str(EXAMPLES / example / "required")])
    clusters = [d for d in docs if d.get("kind") == "InferenceCluster"]
    if grow_fleet and clusters and n > len(clusters):
        docs += _synthetic_fleet(n - len(clusters), clusters[0], docs)
    if world is not None:
        world(docs, n)
    # As the API server returns them: a uid and a resourceVersion on every object.
    return [_stored(d) for d in docs]


def from_example(
    example: str,
    xr_file: str = "xr.yaml",
    *,
    observed: str | None = "observed",
    grow_fleet: bool = True,
    patch: Callable[[dict[str, Any], int], None] | None = None,
    world: Callable[[list[dict[str, Any]], int], None] | None = None,
    status_for: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[[int], tuple[bytes, bytes]]:
    """A scenario built from ``examples/<example>``: its XR, required and observed resources.

    The fleet grows to ``n`` InferenceClusters (copies of the example's first cluster)
    when ``grow_fleet``; ``patch(xr, n)`` may scale the XR itself (for example replicas)
    and ``world(docs, n)`` the resources Crossplane resolves requirements from.
    Requirements are resolved the way Crossplane does (``function.render.drive``).
    Without ``observed``, the steady state observes every child the first call composes,
    with the status ``status_for(name, body)`` (default: Ready and Synced).
    """

    def scenario(n: int) -> tuple[bytes, bytes]:
        base = EXAMPLES / example
        xr = load_yaml([str(base / xr_file)])[0]
        if patch is not None:
            patch(xr, n)
        resolver = World(_example_docs(example, n, grow_fleet, world))
        seen = (
            {k: _stored(v) for k, v in observed_by_name(load_yaml([str(base / observed)])).items()}
            if observed and (base / observed).exists()
            else {}
        )
        runner = FunctionRunner()
        rsp, _ = drive(runner.run, xr, seen, resolver)
        required = {k: resolver.resolve(sel) for k, sel in rsp.requirements.resources.items()}
        first = build_request(xr, {}, required, tag="bench")
        if not seen:
            seen = _observe_all(runner.run(first), status_for or _ready_synced)
        return first.SerializeToString(), _settle(xr, seen, required)

    return scenario


def _ready_synced(_name: str, _body: dict[str, Any]) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available"},
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
        ]
    }


def _serving(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Ready and Synced, and a ModelReplica also serving (``ModelReady=True``)."""
    st = _ready_synced(name, body)
    if body.get("kind") == "ModelReplica":
        st["conditions"].append(
            {"type": "ModelReady", "status": "True", "reason": "Serving", "message": "serving"}
        )
    return st


def _scale_deployment(xr: dict[str, Any], n: int) -> None:
    """100 replicas from 100 clusters up (issue 8), so growth 100 -> 1,000 measures the
    fleet alone; one replica per cluster below."""
    xr["spec"]["replicas"] = 100 if n >= 100 else n


def _deployment_world(docs: list[dict[str, Any]], n: int) -> None:
    """The fleet as a busy one looks: every tenth synthetic cluster's hydration still
    Hydrating, and one replica of another team's deployment per ten clusters (one node
    each), labelled with their cluster as the deployment composer labels them (the
    capacity ledger reads them per cluster)."""
    synthetic = [
        d
        for d in docs
        if d.get("kind") == "InferenceCluster" and d["metadata"]["name"].startswith("fleet-")
    ]
    for d in docs:
        name = d.get("spec", {}).get("clusterName", "")
        hydration = d.get("kind") == "ModelCacheHydration" and name.startswith("fleet-")
        if hydration and int(name.rsplit("-", 1)[1]) % 10 == 9:
            d.setdefault("status", {})["phase"] = "Hydrating"
    for j, c in enumerate(synthetic[::10]):
        cluster = c["metadata"]["name"]
        pool = c["status"]["gpuPools"][0]["name"]
        docs.append(
            {
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": "ModelReplica",
                "metadata": {
                    "name": f"modelreplica-other-team-embed-{j}",
                    "namespace": "other-team",
                    "labels": {"modelplane.ai/cluster": cluster},
                },
                "spec": {
                    "deploymentName": f"embed-{j % 7}",
                    "index": j,
                    "clusterName": cluster,
                    "engines": [
                        {
                            "name": "tei",
                            "copies": 1,
                            "members": [{"role": "Standalone", "pool": pool}],
                        }
                    ],
                },
            }
        )


def _half_deployment(xr: dict[str, Any], n: int) -> None:
    xr["spec"]["replicas"] = max(1, (100 if n >= 100 else n) // 2)


_DEPLOYMENT_HALF = from_example(
    "modeldeployment",
    observed=None,
    patch=_half_deployment,
    world=_deployment_world,
    status_for=_serving,
)


def deployment_scale_up(n: int) -> tuple[bytes, bytes]:
    """ModelDeployment right after a scale-up from 50 to 100 replicas (``first``: half the
    replicas observed and serving, the other half to place), then its steady state."""
    _, half = _DEPLOYMENT_HALF(n)
    req = fnv1.RunFunctionRequest.FromString(half)
    xr = _to_dict(req.observed.composite.resource)
    xr["spec"]["replicas"] = 100 if n >= 100 else n
    observed = {k: _to_dict(v.resource) for k, v in req.observed.resources.items()}
    # The reconcile's last call, as Crossplane's loop resolves it: the capacity of the
    # clusters the half's status.nextClusters names is asked for up front, and of any
    # further cluster the walk reads on the way.
    resolver = World(_example_docs("modeldeployment", n, True, _deployment_world))
    rsp, _ = drive(FunctionRunner().run, xr, observed, resolver)
    required = {k: resolver.resolve(sel) for k, sel in rsp.requirements.resources.items()}
    first = build_request(xr, observed, required, tag="bench")
    return first.SerializeToString(), SCENARIOS["ModelDeployment"](n)[1]


def inferencecluster(_n: int = 0) -> tuple[bytes, bytes]:
    """A bring-your-own InferenceCluster (``spec.cluster.source: Existing``) with one node
    pool per InferenceClass of the modeldeployment example: the call with its classes
    resolved and nothing observed, and the steady call (its ProviderConfig observed and
    ready). Its request does not grow with the fleet; not in :data:`SCENARIOS` (no
    per-kind row), a base of the gRPC fuzz (``benchmarks.fuzz``)."""
    from function.composers.inferencecluster import PROVIDER_CONFIG_KEY, class_requirement

    root = Path(__file__).resolve().parent.parent / "examples" / "modeldeployment" / "required"
    classes = [_stored(d) for d in load_yaml([str(root / "inferenceclasses.yaml")])]
    xr = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "byo-fleet", "uid": "u-byo-fleet", "generation": 1},
        "spec": {
            "cluster": {
                "source": "Existing",
                "existing": {
                    "secretRef": {"name": "byo-kubeconfig"},
                    "identitySecretRef": {"name": "byo-identity", "key": "private_key"},
                    "cache": {"storageClassName": "efs-rwx"},
                },
            },
            "gateway": {"hostname": "byo.example.com"},
            "nodePools": [
                {"name": f"pool-{i}", "className": c["metadata"]["name"], "nodeCount": 2}
                for i, c in enumerate(classes)
            ],
        },
    }
    required = {class_requirement(c["metadata"]["name"]): [c] for c in classes}
    first = build_request(xr, {}, required, tag="bench")
    rsp = FunctionRunner().run(first)
    observed = _observe_all(rsp, _ready_synced)
    assert PROVIDER_CONFIG_KEY in observed, rsp
    return first.SerializeToString(), _settle(xr, observed, required)


SCENARIOS: dict[str, Callable[[int], tuple[bytes, bytes]]] = {
    "ModelCache": modelcache,
    "ModelCacheShard": modelcacheshard,
    "ModelCacheHydration": hydration,
    # Steady state: every replica the first call places observed and serving (the
    # example's observed/ holds only the first reconcile's replicas).
    "ModelDeployment": from_example(
        "modeldeployment",
        observed=None,
        patch=_scale_deployment,
        world=_deployment_world,
        status_for=_serving,
    ),
    # "first" is the call right after spec.replicas went from 50 to 100.
    "ModelDeploymentScaleUp": deployment_scale_up,
    "ModelReplica": from_example(
        "modelreplica", "serving/xr.yaml", observed="serving/observed", grow_fleet=False
    ),
    "ModelExperiment": from_example("modelexperiment"),
    "ModelBackfill": from_example("modelbackfill"),
}


def parse(data: bytes) -> fnv1.RunFunctionRequest:
    """Parse a serialized request."""
    return fnv1.RunFunctionRequest.FromString(data)
