"""ModelDeployment RunFunction time: 100 replicas over 10, 100 and 1,000 clusters.

    python -m benchmarks.bench_deployment [--sizes 10,100,1000] [--repeat 15] [--json PATH]

Cases per fleet size n (every requirement resolved, as on Crossplane's last call):

- ``steady``: ``replicas: 100``, all 100 ModelReplicas observed and ready, the
  XR carrying the status the function wrote (the reconcile that runs every minute);
- ``scale-up``: 50 replicas observed, ``replicas`` raised to 100 (50 new placements);
- ``first``: nothing observed, 100 replicas to place.

The fleet: n Ready H100 clusters (one 24-node pool each), the cache hydrated on
all of them (every tenth still Hydrating), and 100 replicas of other teams'
deployments in the fleet-wide ModelReplica requirement. The measurement is
``benchmarks.run.measure_case``: parse + run + deterministic serialize, against
the protocol floor (parse the request, serialize a response of the same size)
measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from function.naming import hydration_name
from function.render import build_request
from function.runner import FunctionRunner

NS = "ml-team"
CACHE = "qwen-cache"
SEL = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
H100 = {
    "name": "gpu",
    "claim": "DRA",
    "driver": "gpu.nvidia.com",
    "deviceClassName": "gpu.nvidia.com",
    "count": 8,
    "attributes": {"architecture": {"string": "Hopper"}},
    "capacity": {"memory": {"value": "81559Mi"}},
}


def _engine(pool: str | None = None) -> dict[str, Any]:
    member: dict[str, Any] = {
        "role": "Standalone",
        "nodeSelector": {"devices": [{"name": "gpu", "count": 1, "selectors": [{"cel": SEL}]}]},
        "template": {
            "spec": {
                "containers": [
                    {"name": "engine", "image": "vllm/vllm-openai:v0.9.2", "args": ["--model=x"]}
                ]
            }
        },
    }
    if pool:
        member["pool"] = pool
    return {"name": "vllm", "copies": 1, "members": [member]}


def world(n: int) -> dict[str, list[dict[str, Any]]]:
    """The resolved requirements of the deployment for a fleet of ``n`` clusters."""
    clusters, hydrations, others = [], [], []
    for i in range(n):
        name = f"gpu-{i:05d}"
        clusters.append(
            {
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": "InferenceCluster",
                "metadata": {"name": name, "labels": {"gpu": "h100", "region": f"r{i % 4}"}},
                "spec": {"cluster": {"source": "Existing"}},
                "status": {
                    "providerConfigRef": {"name": name},
                    "gpuPools": [{"name": "h100", "nodes": 24, "devices": [H100]}],
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
                },
            }
        )
        hydrations.append(
            {
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": "ModelCacheHydration",
                "metadata": {
                    "name": hydration_name(NS, CACHE, name),
                    "namespace": NS,
                    "labels": {"modelplane.ai/cache": CACHE, "modelplane.ai/cluster": name},
                },
                "spec": {"clusterName": name, "cacheName": CACHE},
                "status": {"phase": "Hydrating" if i % 10 == 9 else "Ready"},
            }
        )
    for j in range(100):
        others.append(
            {
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": "ModelReplica",
                "metadata": {"name": f"other-{j}", "namespace": "other-team"},
                "spec": {
                    "deploymentName": f"other-{j % 7}",
                    "index": j,
                    "clusterName": f"gpu-{(j * 7) % n:05d}",
                    "engines": [_engine("h100")],
                },
            }
        )
    cache = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": CACHE, "namespace": NS},
        "spec": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
    }
    return {
        "clusters": clusters,
        "replicas": others,
        "cache": [cache],
        "hydrations": hydrations,
    }


def xr(replicas: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "chat", "namespace": NS, "uid": "uid-chat", "generation": 1},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "clusterSelector": {"matchLabels": {"gpu": "h100"}},
                    "modelCacheRef": {"name": CACHE},
                    "engines": [_engine()],
                }
            },
        },
    }
    if status:
        body["status"] = status
    return body


def _observed(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    out = {}
    for k, v in rsp.desired.resources.items():
        body = json_format.MessageToDict(v.resource)
        cond = {"type": "ModelReady", "status": "True", "reason": "Serving", "message": "ok"}
        if body.get("kind") == "Usage":
            cond = {"type": "Ready", "status": "True", "reason": "Available"}
        body["status"] = {"conditions": [cond]}
        out[k] = body
    return out


def scenarios(n: int) -> dict[str, bytes]:
    """Serialized requests ``first``, ``scale-up`` and ``steady`` for a fleet of ``n``."""
    runner = FunctionRunner()
    req = world(n)
    first = build_request(xr(100), None, req, tag="bench")
    half = runner.run(build_request(xr(50), None, req, tag="bench"))
    scale_up = build_request(xr(100), _observed(half), req, tag="bench")
    full = runner.run(first)
    observed = _observed(full)
    settled = runner.run(build_request(xr(100), observed, req, tag="bench"))
    status = json_format.MessageToDict(settled.desired.composite.resource).get("status", {})
    steady = build_request(xr(100, status), observed, req, tag="bench")
    return {
        "first": first.SerializeToString(),
        "scale-up": scale_up.SerializeToString(),
        "steady": steady.SerializeToString(),
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import _quiet, measure_case

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_deployment", description=__doc__)
    p.add_argument("--sizes", default="10,100,1000")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    _quiet()
    runner = FunctionRunner()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for case, data in scenarios(n).items():
            row = measure_case(runner, data, args.repeat, "ModelDeployment", None)
            row.update(kind="ModelDeployment", clusters=n, replicas=100, case=case)
            rows.append(row)
            print(
                f"ModelDeployment n={n:5d} {case:8s} req={row['request_kib']:8.1f}KiB "
                f"children={row['children']:4d} median={row['in_process']['median_ms']:8.2f}ms "
                f"floor={row['floor']['median_ms']:7.2f}ms ratio={row['ratio']:6.2f}"
                + (f" FATAL {row['fatal']}" if row["fatal"] else ""),
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
