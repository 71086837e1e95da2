"""Fleet scale through Crossplane: what a reconcile costs when the fleet is large.

    python -m benchmarks.fleet [--sizes 100,1000,10000] [--deployments 1000]
                               [--replicas-per-deployment 2] [--scale 10:20]
                               [--vary-replicas 1,8] [--vary-at N]
                               [--scenarios ModelCache,ModelDeployment]
                               [--timeout 300] [--json benchmarks/results/fleet.json]
                               [--scenarios ModelCache,ModelDeployment]

For each fleet size N it generates N InferenceClusters (names of 19 characters,
``gpu-us-east-1-00042``) and drives XRs through the real engine: ``crossplane render``
with the pinned core binary (``scripts/crossplane-tools``), which runs Crossplane's
composite reconciler and its requirements loop, calling ``python -m function --insecure``
on 127.0.0.1 through a transparent gRPC proxy (:class:`Proxy`, also on 127.0.0.1) that
forwards raw bytes and records every call's request, response and latency.

Scenarios, each reconcile rendered once and fed back the way a control plane would
(the XR's status as Crossplane wrote it, composed resources observed with the status
their owners wrote):

- ``ModelCache`` selecting all N clusters, the whole tree through the engine:
  ``create`` (the cache composes its ModelCacheShards; each shard, rendered as its own
  XR, composes its hydrations), ``pending`` (every hydration observed, no status yet:
  the shards, then the cache reading them), ``ready`` (every hydration observed Ready
  with its evidence: the status one hydration reached when it was rendered through the
  engine to Ready, copied per cluster rather than rendering N hydrations) and
  ``steady`` (the same again). A ``ModelCacheShard`` row sums a step's shard renders.
- ``ModelDeployment`` with a cache, in a fleet holding ``--deployments`` other
  deployments' ModelReplicas (``--replicas-per-deployment`` each, spread over 50
  namespaces and the fleet): ``create`` at the lower replica count of ``--scale``,
  ``scale-up`` to the upper count (the lower count observed serving), ``settle``
  (every replica serving), ``steady``. Its requirements resolve from the N clusters,
  the ModelCache, the cache's N hydrations (Ready, with evidence) and the ModelReplicas
  (the fleet's, the other deployments' and its own) that its per-cluster capacity
  requirements select (``function.composers.deployment.capacity``). With
  ``--vary-replicas K1,K2`` the scenario runs again at ``--vary-at`` clusters (default:
  the largest size) with K ModelReplicas per other deployment, to show what a reconcile
  fetches as the fleet's replicas grow at a fixed fleet (:func:`deployment_markdown`).

Per reconcile it reports: function calls, of which unresolved (sent with no required
resources), objects and MiB Crossplane sent as required resources (summed over the
calls), the largest request and response, function time (the calls' latencies at the
proxy, summed), the render's wall time, the XR as Crossplane would write it, and the
outcome. A response over 4 MiB never reaches Crossplane: the function's own guard
turns it into a fatal result (``would be X MiB``), which ``crossplane render`` reports
with exit code 3; the table shows that size.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.render import COMPOSITION_RESOURCE_NAME, load_yaml, split_documents, start_function

MIB = 1024 * 1024
CROSSPLANE_LIMIT = 4 * MIB
BUDGET = 2 * MIB
NAMESPACE = "ml-team"
CACHE = "qwen-cache"
DEPLOYMENT = "qwen-chat"
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-east-1")
TEAMS = 50
NOW = "2026-12-01T10:00:00Z"
ROOT = Path(__file__).resolve().parent.parent
LOOP_NOTE = (
    "crossplane render (CLI v2.5.0) runs core v2.4.0's composite reconciler "
    "(`crossplane internal render`) with its requirements loop, "
    "internal/xfn/required_resources.go: call the function, fetch what its requirements "
    "select, call again, stop when the requirements repeat (or, on the first call, when "
    "the pre-populated resources already match them); at most 6 calls. Render starts every "
    "step with the Composition's bootstrap requirements only (the shipped Compositions "
    "declare none) and a NopTracker: nothing is seeded from a previous reconcile, so each "
    "render is a reconcile after a Crossplane restart. (The v2.4.0 controller itself "
    "seeds a step with the requirements it returned last reconcile, from memory: "
    "composition_functions.go; v2.3.0 and earlier do not.)"
)

# ---- the proxy -----------------------------------------------------------------------


@dataclass
class Call:
    """One RunFunction call as the proxy saw it."""

    method: str
    request: bytes
    response: bytes | None
    seconds: float
    error: str | None = None


class Proxy:
    """A transparent gRPC proxy on 127.0.0.1: every unary call is forwarded as raw bytes.

    ``crossplane render`` calls the proxy; the proxy calls the function with the same
    method and bytes and returns the function's bytes (or its gRPC error). Nothing is
    decoded on the way; the calls are recorded for :meth:`take`.
    """

    _OPTS = [
        ("grpc.max_receive_message_length", 1024 * MIB),
        ("grpc.max_send_message_length", 1024 * MIB),
    ]

    def __init__(self, target: str, timeout: float = 600) -> None:
        self.target = target
        self.timeout = timeout
        self._calls: list[Call] = []
        self._lock = threading.Lock()
        self._channel = grpc.insecure_channel(target, options=self._OPTS)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=self._OPTS)
        self._server.add_generic_rpc_handlers((_Forward(self),))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self._server.start()

    def forward(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        stub = self._channel.unary_unary(method)
        started = time.perf_counter()
        try:
            response = stub(request, timeout=self.timeout)
        except grpc.RpcError as e:
            seconds = time.perf_counter() - started
            code = e.code()  # type: ignore[attr-defined]
            details = e.details()  # type: ignore[attr-defined]
            self._record(Call(method, request, None, seconds, f"{code}: {details}"))
            context.abort(code, details)
        seconds = time.perf_counter() - started
        self._record(Call(method, request, response, seconds))
        return bytes(response)

    def _record(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)

    def take(self) -> list[Call]:
        """The calls recorded since the last take."""
        with self._lock:
            out, self._calls = self._calls, []
        return out

    def stop(self) -> None:
        self._server.stop(grace=5).wait()
        self._channel.close()


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method  # type: ignore[attr-defined]

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            return self.proxy.forward(method, request, context)

        # No (de)serializers: the handler sees and returns raw bytes.
        return grpc.unary_unary_rpc_method_handler(handle)


_WOULD_BE = re.compile(r"would be ([0-9.]+) MiB")


def call_stats(calls: list[Call]) -> dict[str, Any]:
    """What one reconcile's calls cost: counts, required objects and bytes, sizes, time."""
    out: dict[str, Any] = {
        "calls": len(calls),
        "unresolved_calls": 0,
        "required_objects": 0,
        "required_bytes": 0,
        "largest_request_bytes": 0,
        "largest_response_bytes": 0,
        "function_seconds": 0.0,
        "fatal": None,
        "would_be_mib": None,
        "grpc_errors": [],
        "per_call": [],
    }
    for c in calls:
        req = fnv1.RunFunctionRequest.FromString(c.request)
        resources = list(req.required_resources.values()) + list(
            req.extra_resources.values()  # deprecated field, counted if ever used
        )
        objects = sum(len(r.items) for r in resources)
        nbytes = sum(r.ByteSize() for r in resources)
        rsp_len = len(c.response) if c.response is not None else 0
        row: dict[str, Any] = {
            "request_bytes": len(c.request),
            "response_bytes": rsp_len,
            "required_objects": objects,
            "required_bytes": nbytes,
            "required_names": sorted(req.required_resources),
            # Per requirement: [objects, bytes].
            "required_by_name": {
                k: [len(v.items), v.ByteSize()] for k, v in sorted(req.required_resources.items())
            },
            "ms": round(c.seconds * 1e3, 1),
        }
        if not req.required_resources and not req.extra_resources:
            out["unresolved_calls"] += 1
        out["required_objects"] += objects
        out["required_bytes"] += nbytes
        out["largest_request_bytes"] = max(out["largest_request_bytes"], len(c.request))
        out["largest_response_bytes"] = max(out["largest_response_bytes"], rsp_len)
        out["function_seconds"] += c.seconds
        if c.error is not None:
            out["grpc_errors"].append(c.error)
            row["error"] = c.error
        if c.response is not None:
            rsp = fnv1.RunFunctionResponse.FromString(c.response)
            row["desired_resources"] = len(rsp.desired.resources)
            row["requirements"] = sorted(rsp.requirements.resources)
            for r in rsp.results:
                if r.severity == fnv1.SEVERITY_FATAL:
                    row["fatal"] = r.message
                    out["fatal"] = r.message
                    m = _WOULD_BE.search(r.message)
                    if m:
                        mib = float(m.group(1))
                        row["would_be_mib"] = mib
                        out["would_be_mib"] = max(out["would_be_mib"] or 0.0, mib)
        out["per_call"].append(row)
    out["function_seconds"] = round(out["function_seconds"], 3)
    return out


# ---- the engine ----------------------------------------------------------------------


@dataclass
class Output:
    """What ``crossplane render`` printed."""

    exit_code: int
    xr: dict[str, Any]
    composed: dict[str, dict[str, Any]]
    stderr: str
    seconds: float
    xr_bytes: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)

    def ready(self) -> bool:
        for c in (self.xr.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                return bool(c.get("status") == "True")
        return False

    def error(self) -> str:
        lines = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else ""


def _write_docs(path: Path, docs: Iterable[Mapping[str, Any]]) -> None:
    # JSON documents are YAML, and far quicker to write than YAML at fleet scale.
    with path.open("w") as f:
        for d in docs:
            f.write("---\n")
            f.write(json.dumps(d, separators=(",", ":")))
            f.write("\n")


class Engine:
    """``crossplane render --crossplane-binary`` against a function at ``address``."""

    def __init__(self, cli: Path, core: Path, address: str, timeout: float) -> None:
        self.cli, self.core, self.address, self.timeout = cli, core, address, timeout

    def render(
        self,
        xr: Mapping[str, Any],
        observed: Iterable[Mapping[str, Any]] = (),
        required: Iterable[Mapping[str, Any]] = (),
    ) -> Output:
        from tests.support.engine import composition_for, functions_yaml, xrd_for

        kind = str(xr["kind"])
        with tempfile.TemporaryDirectory(prefix="fleet-render-") as tmp:
            d = Path(tmp)
            _write_docs(d / "xr.yaml", [xr])
            _write_docs(d / "functions.yaml", [functions_yaml(self.address)])
            args = [
                str(self.cli),
                "render",
                str(d / "xr.yaml"),
                str(composition_for(kind)),
                str(d / "functions.yaml"),
                f"--crossplane-binary={self.core}",
                f"--xrd={xrd_for(kind)}",
                "--include-full-xr",
                "--include-function-results",
                f"--timeout={int(self.timeout)}s",
            ]
            for flag, docs in (("observed", observed), ("required", required)):
                (d / flag).mkdir()
                _write_docs(d / flag / "docs.yaml", docs)
                args.append(f"--{flag}-resources={d / flag}")
            started = time.perf_counter()
            try:
                proc = subprocess.run(
                    args, capture_output=True, text=True, timeout=self.timeout + 60
                )
                code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
            except subprocess.TimeoutExpired as e:
                code, stdout = -1, ""
                raw = e.stderr or b""
                err = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
                stderr = err + f"\nrender timed out after {self.timeout + 60:.0f}s"
            seconds = time.perf_counter() - started
        return parse_output(code, stdout, stderr, seconds)


def parse_output(code: int, stdout: str, stderr: str, seconds: float) -> Output:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = [d for d in yaml.load_all(stdout, Loader=loader) if isinstance(d, dict)]
    xr, composed, results = split_documents(docs)
    xr_bytes = len(json.dumps(xr, separators=(",", ":"))) if xr else 0
    return Output(code, xr, composed, stderr, seconds, xr_bytes, results)


# ---- the fleet -----------------------------------------------------------------------


def cluster_name(i: int) -> str:
    """``gpu-us-east-1-00042``: 19 characters, like the issue's fleet."""
    return f"gpu-{REGIONS[i % len(REGIONS)]}-{i:05d}"


def inference_cluster(i: int) -> dict[str, Any]:
    """A Ready bring-your-own InferenceCluster with one 32-node H100 pool (DRA devices)."""
    name = cluster_name(i)
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {
            "name": name,
            "labels": {
                "modelplane.ai/gpu": "h100",
                "modelplane.ai/tier": "prod",
                "topology.kubernetes.io/region": REGIONS[i % len(REGIONS)],
            },
        },
        "spec": {
            "cluster": {"source": "Existing", "existing": {"secretRef": {"name": f"{name}-kc"}}},
            "nodePools": [{"name": "h100", "className": "h100-8x", "nodeCount": 32}],
        },
        "status": {
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": name},
            "cache": {"storageClassName": "rwx"},
            "gpuPools": [
                {
                    "name": "h100",
                    "nodes": 32,
                    "devices": [
                        {
                            "name": "gpu",
                            "claim": "DRA",
                            "driver": "gpu.nvidia.com",
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 8,
                            "attributes": {
                                "architecture": {"string": "Hopper"},
                                "cudaComputeCapability": {"version": "9.0.0"},
                            },
                            "capacity": {"memory": {"value": "81559Mi"}},
                        }
                    ],
                }
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Available",
                    "lastTransitionTime": "2026-01-05T09:00:00Z",
                }
            ],
        },
    }


def cache_xr() -> dict[str, Any]:
    """A ModelCache selecting every cluster of the fleet (``modelplane.ai/tier: prod``)."""
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {
            "name": CACHE,
            "namespace": NAMESPACE,
            "uid": "6f1c2b7e-0d5a-4c1e-9a55-2f6f0e7c1a01",
            "generation": 1,
        },
        "spec": {
            "source": "HuggingFace",
            "huggingFace": {
                "repo": "Qwen/Qwen2.5-7B-Instruct",
                "revision": "main",
                "sizeGiB": 20,
            },
            "clusterSelector": {"matchLabels": {"modelplane.ai/tier": "prod"}},
        },
    }


def deployment_xr(replicas: int) -> dict[str, Any]:
    """The bundled example's ModelDeployment (H100 in two of the four regions), on the cache."""
    (xr,) = load_yaml([str(ROOT / "examples" / "modeldeployment" / "xr.yaml")])
    xr["metadata"]["name"] = DEPLOYMENT
    xr["metadata"]["namespace"] = NAMESPACE
    xr["spec"]["replicas"] = replicas
    xr["spec"]["template"]["spec"]["modelCacheRef"] = {"name": CACHE}
    return xr


def _uid(name: str) -> str:
    import hashlib

    h = hashlib.sha256(name.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def observed(desired: Mapping[str, Any], status: Mapping[str, Any] | None) -> dict[str, Any]:
    """A composed resource as Crossplane would observe it: the applied body with a uid and
    the status its owner wrote."""
    obj = copy.deepcopy(dict(desired))
    obj["metadata"].setdefault("uid", _uid(obj["metadata"]["name"]))
    if status is not None:
        obj["status"] = copy.deepcopy(dict(status))
    return obj


SERVING = {
    "conditions": [
        {
            "type": "Synced",
            "status": "True",
            "reason": "ReconcileSuccess",
            "lastTransitionTime": NOW,
        },
        {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": NOW},
        {
            "type": "ModelReady",
            "status": "True",
            "reason": "Serving",
            "message": "serving",
            "lastTransitionTime": NOW,
        },
    ]
}
USAGE_READY = {
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": NOW}
    ]
}


@dataclass
class Templates:
    """Bodies taken from small renders through the engine, copied per cluster at scale."""

    cluster: str  # the template cluster's name, replaced in the copies
    hydration: dict[str, Any]  # a composed ModelCacheHydration (as the cache's render printed)
    hydration_ready: dict[str, Any]  # its status once rendered to Ready (with evidence)
    replica: dict[str, Any]  # a composed ModelReplica (as the deployment's render printed)

    def ready_status_for(self, cluster: str) -> dict[str, Any]:
        return dict(json.loads(json.dumps(self.hydration_ready).replace(self.cluster, cluster)))

    def other_replica(self, team: int, dep: int, index: int, cluster: str) -> dict[str, Any]:
        """Another team's ModelReplica (the same shape as this deployment's), serving."""
        r = copy.deepcopy(self.replica)
        meta = r["metadata"]
        ns, dname = f"team-{team:02d}", f"svc-{dep:04d}"
        meta["namespace"] = ns
        meta["name"] = f"modelreplica-{ns}-{dname}-{index}"
        meta.pop("ownerReferences", None)
        meta["annotations"] = {COMPOSITION_RESOURCE_NAME: f"replica-{index}"}
        meta["uid"] = _uid(f"{ns}/{meta['name']}")
        labels = meta.setdefault("labels", {})
        labels["modelplane.ai/deployment"] = dname
        labels["modelplane.ai/cluster"] = cluster
        labels["modelplane.ai/replica-index"] = str(index)
        labels["crossplane.io/composite"] = dname
        spec = r["spec"]
        spec["deploymentName"] = dname
        spec["index"] = index
        spec["clusterName"] = cluster
        if "modelCacheRef" in spec:
            spec["modelCacheRef"] = {"name": f"cache-{dep:04d}"}
        r["status"] = copy.deepcopy(SERVING)
        return r


def make_templates(engine: Engine) -> Templates:
    """Render a one-cluster ModelCache, drive one hydration to Ready and place one replica,
    all through the engine (not measured), for the bodies copied at fleet scale."""
    from tests.e2e.lifecycle import Hydration

    c0 = inference_cluster(0)
    name0 = c0["metadata"]["name"]
    out = engine.render(cache_xr(), (), [c0])
    assert out.exit_code == 0, out.stderr
    (shard,) = out.composed.values()
    shard_out = engine.render(as_xr(shard), (), [c0])
    assert shard_out.exit_code == 0, shard_out.stderr
    (hyd,) = shard_out.composed.values()

    def render(xr: dict[str, Any], **kw: Any) -> Any:
        o = engine.render(xr, kw.get("observed", ()), kw.get("required", ()))
        return _Rendered(o)

    h = Hydration(render, copy.deepcopy(hyd), [c0])
    for _ in range(5):
        h.settle(pvc="Bound", job="complete", result=True)
        if h.status.get("phase") == "Ready" and h.status.get("evidence"):
            break
    assert h.status.get("phase") == "Ready", h.status
    assert h.last is not None
    ready_status = copy.deepcopy(h.last.xr.get("status") or {})

    hyd_obs = observed(hyd, ready_status)
    cache_obj = observed(out.xr, None)
    dep = engine.render(deployment_xr(1), (), [c0, hyd_obs, cache_obj])
    assert dep.exit_code == 0, dep.stderr
    replicas = [d for d in dep.composed.values() if d.get("kind") == "ModelReplica"]
    assert replicas, dep.composed.keys()
    return Templates(name0, hyd, ready_status, replicas[0])


class _Rendered:
    """Adapts :class:`Output` to what ``tests.e2e.lifecycle`` expects of a render."""

    def __init__(self, o: Output) -> None:
        self.exit_code, self.xr, self.composed = o.exit_code, o.xr, o.composed
        self.stdout, self.stderr = "", o.stderr

    def check(self) -> _Rendered:
        assert self.exit_code == 0, self.stderr
        return self


# ---- scenarios -----------------------------------------------------------------------


def _row(n: int, scenario: str, step: str, calls: list[Call], out: Output, **extra: Any) -> dict:
    st = call_stats(calls)
    row = {
        "clusters": n,
        "scenario": scenario,
        "step": step,
        **st,
        "render_seconds": round(out.seconds, 2),
        "exit_code": out.exit_code,
        "xr_ready": out.ready(),
        "composed": len(out.composed),
        "xr_bytes": out.xr_bytes,
        "render_error": out.error() if out.exit_code != 0 else None,
        **extra,
    }
    row["over_2mib"] = max(row["largest_response_bytes"], (row["would_be_mib"] or 0) * MIB) > BUDGET
    row["over_4mib"] = (
        row["largest_response_bytes"] > CROSSPLANE_LIMIT or row["would_be_mib"] is not None
    )
    print(_line(row), flush=True)
    return row


def as_xr(desired: Mapping[str, Any]) -> dict[str, Any]:
    """A composed XR (a ModelCacheShard as its cache's render printed it) as an XR to render:
    a uid, no owner references or composite label."""
    xr = copy.deepcopy(dict(desired))
    meta = xr["metadata"]
    meta.pop("ownerReferences", None)
    meta.pop("generateName", None)
    meta["uid"] = _uid(f"{meta.get('namespace')}/{meta['name']}")
    meta.setdefault("generation", 1)
    return xr


def _tree_row(
    n: int, step: str, per_shard: list[tuple[list[Call], Output]], **extra: Any
) -> dict[str, Any]:
    """One row for every ModelCacheShard's reconcile of one step: calls and unresolved
    calls per shard reconcile (the most of any shard), required objects, bytes and
    function time summed over the shards, the largest request and response of any."""
    stats = [call_stats(c) for c, _ in per_shard]
    outs = [o for _, o in per_shard]
    for st in stats:  # unresolved: the function asked for something it was not sent
        st["unresolved_calls"] = sum(
            1 for c in st["per_call"] if set(c.get("requirements", ())) - set(c["required_names"])
        )
    worst = max(stats, key=lambda s: (s["calls"], s["unresolved_calls"]))
    row: dict[str, Any] = {
        **worst,
        "clusters": n,
        "scenario": "ModelCacheShard",
        "step": step,
        "renders": len(per_shard),
        "calls_total": sum(s["calls"] for s in stats),
        "required_objects": sum(s["required_objects"] for s in stats),
        "required_bytes": sum(s["required_bytes"] for s in stats),
        "largest_request_bytes": max((s["largest_request_bytes"] for s in stats), default=0),
        "largest_response_bytes": max((s["largest_response_bytes"] for s in stats), default=0),
        "function_seconds": round(sum(s["function_seconds"] for s in stats), 3),
        "fatal": next((s["fatal"] for s in stats if s["fatal"]), None),
        "would_be_mib": max((s["would_be_mib"] or 0 for s in stats), default=0) or None,
        "grpc_errors": [e for s in stats for e in s["grpc_errors"]],
        "per_call": [],
        "render_seconds": round(sum(o.seconds for o in outs), 2),
        "exit_code": max((o.exit_code for o in outs), default=0),
        "xr_ready": all(o.ready() for o in outs),
        "ready_shards": sum(o.ready() for o in outs),
        "composed": sum(len(o.composed) for o in outs),
        "xr_bytes": max((o.xr_bytes for o in outs), default=0),
        "render_error": next((o.error() for o in outs if o.exit_code != 0), None),
        **extra,
    }
    largest = max(row["largest_response_bytes"], (row["would_be_mib"] or 0) * MIB)
    row["over_2mib"] = largest > BUDGET
    row["over_4mib"] = largest > CROSSPLANE_LIMIT
    print(_line(row), flush=True)
    return row


def run_cache(
    engine: Engine, proxy: Proxy, t: Templates, n: int, clusters: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """ModelCache -> ModelCacheShards -> ModelCacheHydrations from nothing to Ready, then
    steady, every XR of the tree rendered through the engine (the hydrations' status is
    the template's, copied per cluster). Returns the rows, the cache as a required
    resource for the deployment, and its hydrations (Ready) likewise."""
    xr = cache_xr()
    rows: list[dict[str, Any]] = []
    shards: dict[str, dict[str, Any]] = {}  # composition-resource name -> shard XR
    shard_status: dict[str, dict[str, Any]] = {}
    hydrations: dict[str, dict[str, Any]] = {}  # hydration name -> composed body

    def cache_step(name: str) -> Output:
        obs = [observed(s, shard_status.get(k)) for k, s in shards.items()]
        proxy.take()
        out = engine.render(xr, obs, clusters)
        rows.append(_row(n, "ModelCache", name, proxy.take(), out, synthesized=False))
        if out.exit_code == 0:
            xr["status"] = copy.deepcopy(out.xr.get("status") or {})
            for k, doc in out.composed.items():
                if doc.get("kind") == "ModelCacheShard":
                    shards[k] = doc
        return out

    def shard_step(name: str, hydration_status: str | None) -> None:
        per: list[tuple[list[Call], Output]] = []
        for k, doc in sorted(shards.items()):
            sxr = as_xr(doc)
            if k in shard_status:
                sxr["status"] = copy.deepcopy(shard_status[k])
            mine = [h for h in hydrations.values() if h["_shard"] == k]
            obs = [
                observed(
                    {kk: v for kk, v in h.items() if kk != "_shard"},
                    t.ready_status_for(h["spec"]["clusterName"])
                    if hydration_status == "Ready"
                    else None,
                )
                for h in mine
            ]
            proxy.take()
            out = engine.render(sxr, obs, clusters[:0])
            per.append((proxy.take(), out))
            if out.exit_code == 0:
                shard_status[k] = copy.deepcopy(out.xr.get("status") or {})
                for doc2 in out.composed.values():
                    if doc2.get("kind") == "ModelCacheHydration":
                        hydrations[doc2["metadata"]["name"]] = {**doc2, "_shard": k}
        rows.append(_tree_row(n, name, per))

    # From nothing: the cache composes its shards; each shard composes its hydrations.
    cache_step("create")
    shard_step("create", None)
    # Every hydration observed, no status yet (Pending); the cache reads the shards.
    shard_step("pending", None)
    cache_step("pending")
    # Every hydration Ready with its evidence.
    shard_step("ready", "Ready")
    cache_step("ready")
    shard_step("steady", "Ready")
    cache_step("steady")
    cache_obj = observed({**cache_xr(), "status": xr.get("status") or {}}, None)
    ready = [
        observed(
            {k: v for k, v in h.items() if k != "_shard"},
            t.ready_status_for(h["spec"]["clusterName"]),
        )
        for h in hydrations.values()
    ]
    return rows, cache_obj, ready


def other_replicas(t: Templates, n: int, deployments: int, per: int) -> list[dict[str, Any]]:
    """``deployments`` other deployments' ModelReplicas, ``per`` each, round the fleet."""
    out = []
    k = 0
    for dep in range(deployments):
        for index in range(per):
            # Stride 7 spreads one deployment's replicas over clusters in every region.
            out.append(t.other_replica(dep % TEAMS, dep, index, cluster_name((k * 7) % n)))
            k += 1
    return out


def run_deployment(
    engine: Engine,
    proxy: Proxy,
    n: int,
    clusters: list[dict[str, Any]],
    cache_obj: dict[str, Any],
    hydrations: list[dict[str, Any]],
    others: list[dict[str, Any]],
    scale: tuple[int, int],
) -> list[dict[str, Any]]:
    """ModelDeployment: create at scale[0], scale up to scale[1], settle, steady."""
    xr = deployment_xr(scale[0])
    rows = []
    obs: dict[str, dict[str, Any]] = {}
    world_base = [*clusters, cache_obj, *hydrations, *others]

    def step(name: str) -> Output:
        own = [copy.deepcopy(o) for o in obs.values() if o.get("kind") == "ModelReplica"]
        proxy.take()
        out = engine.render(xr, list(obs.values()), world_base + own)
        rows.append(
            _row(
                n,
                "ModelDeployment",
                name,
                proxy.take(),
                out,
                replicas=xr["spec"]["replicas"],
                fleet_replicas=len(others) + len(own),
            )
        )
        if out.exit_code == 0:
            xr["status"] = copy.deepcopy(out.xr.get("status") or {})
            obs.clear()
            for key, doc in out.composed.items():
                status = USAGE_READY if doc.get("kind") == "Usage" else SERVING
                obs[key] = observed(doc, status)
        return out

    step("create")
    xr["spec"]["replicas"] = scale[1]
    step("scale-up")
    step("settle")
    step("steady")
    return rows


# ---- report --------------------------------------------------------------------------


def _kib(b: float) -> str:
    return f"{b / 1024:,.1f}" if b < 10 * 1024 else f"{b / 1024:,.0f}"


def _outcome(row: dict[str, Any]) -> str:
    if row["exit_code"] == 0 and "renders" in row:
        s = f"{row['ready_shards']}/{row['renders']} Ready"
    elif row["exit_code"] == 0:
        s = "Ready" if row["xr_ready"] else "not Ready"
    else:
        s = f"exit {row['exit_code']}"
        if row["fatal"]:
            s += ": fatal"
    if row.get("synthesized"):
        s += " (synthesized)"
    return s


def _line(row: dict[str, Any]) -> str:
    s = (
        f"{row['scenario']:<15} n={row['clusters']:<6} {row['step']:<9} "
        f"calls={row['calls']} (unresolved {row['unresolved_calls']}) "
        f"required={row['required_objects']} objs/{row['required_bytes'] / MIB:.2f}MiB "
        f"max_req={_kib(row['largest_request_bytes'])}KiB "
        f"max_rsp={_kib(row['largest_response_bytes'])}KiB "
        f"fn={row['function_seconds'] * 1e3:.0f}ms render={row['render_seconds']}s "
        f"{_outcome(row)}"
    )
    if row["would_be_mib"]:
        s += f" would_be={row['would_be_mib']}MiB"
    if row["render_error"]:
        s += f" | {row['render_error'][:200]}"
    return s


def markdown(report: dict[str, Any]) -> str:
    head = (
        "| N | scenario | reconcile | calls (unresolved) | required objects | required MiB "
        "| largest request KiB | largest response KiB | > 2 / 4 MiB | function ms "
        "| render s | XR KiB | outcome |\n"
        "|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|\n"
    )
    lines = []
    for r in report["rows"]:
        rsp = _kib(r["largest_response_bytes"])
        if r["would_be_mib"]:
            rsp += f" (would be {r['would_be_mib']} MiB)"
        flags = f"{'yes' if r['over_2mib'] else 'no'} / {'yes' if r['over_4mib'] else 'no'}"
        scenario = r["scenario"] + (f" x{r['renders']}" if "renders" in r else "")
        lines.append(
            f"| {r['clusters']:,} | {scenario} | {r['step']} "
            f"| {r['calls']} ({r['unresolved_calls']}) | {r['required_objects']:,} "
            f"| {r['required_bytes'] / MIB:.2f} | {_kib(r['largest_request_bytes'])} "
            f"| {rsp} | {flags} | {r['function_seconds'] * 1e3:,.0f} "
            f"| {r['render_seconds']:.1f} | {_kib(r['xr_bytes']) if r['xr_bytes'] else '-'} "
            f"| {_outcome(r)} |"
        )
    errors = sorted(
        {
            f"- N={r['clusters']:,} {r['scenario']} {r['step']}: {r['render_error']}"
            for r in report["rows"]
            if r["render_error"]
        }
    )
    tail = "\n\ncrossplane render's errors:\n" + "\n".join(errors) if errors else ""
    cfg = report["config"]
    intro = (
        f"Fleet of N InferenceClusters (19-character names); ModelDeployment scale-up "
        f"{cfg['scale'][0]} -> {cfg['scale'][1]} replicas among {cfg['deployments']:,} other "
        f"deployments x {cfg['replicas_per_deployment']} ModelReplicas. Required objects and "
        f"MiB are summed over the reconcile's calls; function ms is the calls' latency at "
        f"the proxy, summed.\n\n{LOOP_NOTE}\n\n"
    )
    return intro + head + "\n".join(lines) + tail + "\n"


def _replica_reads(row: dict[str, Any]) -> tuple[int, int]:
    """ModelReplicas Crossplane sent for a reconcile (objects, bytes), summed over its calls:
    the per-cluster requirements (``replicas-on-<cluster>``) and the fleet-wide one."""
    objs = nbytes = 0
    for call in row["per_call"]:
        for name, (n, b) in call["required_by_name"].items():
            if name == "replicas" or name.startswith("replicas-on-"):
                objs += n
                nbytes += b
    return objs, nbytes


def deployment_markdown(report: dict[str, Any]) -> str:
    """The ModelDeployment rows: what a reconcile fetched, and how much of it ModelReplicas."""
    head = (
        "| N | fleet ModelReplicas | reconcile | calls (unresolved) | required objects "
        "| required MiB | of which ModelReplicas | largest request KiB "
        "| largest response KiB | function ms | outcome |\n"
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    lines = []
    for r in report["rows"]:
        if r["scenario"] != "ModelDeployment":
            continue
        objs, nbytes = _replica_reads(r)
        lines.append(
            f"| {r['clusters']:,} | {r['fleet_replicas']:,} | {r['step']} "
            f"| {r['calls']} ({r['unresolved_calls']}) | {r['required_objects']:,} "
            f"| {r['required_bytes'] / MIB:.2f} | {objs:,} ({_kib(nbytes)} KiB) "
            f"| {_kib(r['largest_request_bytes'])} | {_kib(r['largest_response_bytes'])} "
            f"| {r['function_seconds'] * 1e3:,.0f} | {_outcome(r)} |"
        )
    return head + "\n".join(lines) + "\n"


def run(
    sizes: list[int],
    deployments: int,
    per: int,
    scale: tuple[int, int],
    timeout: float,
    scenarios: tuple[str, ...] = ("ModelCache", "ModelDeployment"),
    vary: tuple[int, ...] = (),
    vary_at: int | None = None,
) -> dict[str, Any]:
    """Run the fleet benchmark; returns the report.

    ``vary``: more ModelDeployment runs at ``vary_at`` clusters (default: the largest
    size), one per number of ModelReplicas per other deployment, so the table shows
    what a reconcile fetches as the fleet's replicas grow at a fixed fleet.
    """
    from tests.support import crossplane

    tools = crossplane.find()
    if tools is None:
        raise RuntimeError(crossplane.HOW_TO_GET)
    proc, address = start_function({"PYTHONHASHSEED": "0"})
    proxy = Proxy(address, timeout)
    report: dict[str, Any] = {
        "config": {
            "sizes": sizes,
            "deployments": deployments,
            "replicas_per_deployment": per,
            "scale": list(scale),
            "vary_replicas_per_deployment": list(vary),
            "vary_at": vary_at,
            "timeout_seconds": timeout,
            "crossplane_cli": str(tools.cli),
            "crossplane_core": str(tools.core),
            "cpus": os.cpu_count(),
        },
        "loop": LOOP_NOTE,
        "rows": [],
    }
    try:
        direct = Engine(tools.cli, tools.core, address, timeout)
        templates = make_templates(direct)
        engine = Engine(tools.cli, tools.core, proxy.address, timeout)
        for n in sizes:
            clusters = [inference_cluster(i) for i in range(n)]
            cache_rows, cache_obj, hydrations = run_cache(engine, proxy, templates, n, clusters)
            if "ModelCache" in scenarios:
                report["rows"] += cache_rows
            if "ModelDeployment" in scenarios:
                others = other_replicas(templates, n, deployments, per)
                report["rows"] += run_deployment(
                    engine, proxy, n, clusters, cache_obj, hydrations, others, scale
                )
                at = vary_at if vary_at is not None else max(sizes)
                for k in vary if n == at else ():
                    more = other_replicas(templates, n, deployments, k)
                    report["rows"] += run_deployment(
                        engine, proxy, n, clusters, cache_obj, hydrations, more, scale
                    )
    finally:
        proxy.stop()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    rows = report["rows"]
    report["summary"] = {
        "largest_response_bytes": max((r["largest_response_bytes"] for r in rows), default=0),
        "any_over_2mib": any(r["over_2mib"] for r in rows),
        "any_over_4mib": any(r["over_4mib"] for r in rows),
        "largest_would_be_mib": max((r["would_be_mib"] or 0 for r in rows), default=0),
    }
    return report


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--sizes", default="100,1000,10000")
    p.add_argument("--deployments", type=int, default=1000)
    p.add_argument("--replicas-per-deployment", type=int, default=2)
    p.add_argument("--scale", default="10:20", help="ModelDeployment replicas FROM:TO")
    p.add_argument(
        "--vary-replicas",
        default="",
        help="ModelDeployment again with K ModelReplicas per other deployment, e.g. 1,8",
    )
    p.add_argument("--vary-at", type=int, help="the fleet size for --vary-replicas")
    p.add_argument("--scenarios", default="ModelCache,ModelDeployment", help="rows to report")
    p.add_argument("--timeout", type=float, default=300, help="seconds per render")
    p.add_argument("--json", default="benchmarks/results/fleet.json")
    p.add_argument("--from-json", help="print the table of an earlier run's JSON and exit")
    p.add_argument("--scenarios", default="ModelCache,ModelDeployment")
    args = p.parse_args(argv)
    if args.from_json:
        earlier = json.loads(Path(args.from_json).read_text())
        print(markdown(earlier))
        if any(r["scenario"] == "ModelDeployment" for r in earlier["rows"]):
            print(deployment_markdown(earlier))
        return 0
    sizes = [int(x) for x in args.sizes.split(",") if x]
    lo, _, hi = args.scale.partition(":")
    report = run(
        sizes,
        args.deployments,
        args.replicas_per_deployment,
        (int(lo), int(hi)),
        args.timeout,
        tuple(x for x in args.scenarios.split(",") if x),
        tuple(int(x) for x in args.vary_replicas.split(",") if x),
        args.vary_at,
    )
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, sort_keys=True))
    print()
    print(markdown(report))
    if any(r["scenario"] == "ModelDeployment" for r in report["rows"]):
        print(deployment_markdown(report))
    s = report["summary"]
    print(
        f"largest response: {_kib(s['largest_response_bytes'])} KiB; any over 2 MiB: "
        f"{s['any_over_2mib']}; any over 4 MiB: {s['any_over_4mib']}"
        + (f" (largest refused: {s['largest_would_be_mib']} MiB)" if s["any_over_4mib"] else "")
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
