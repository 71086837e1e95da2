"""A tiny probe function (not function-modelplane) to hold the stand-in requirements loop
(``function.render.drive``) against Crossplane's own (``crossplane render``, core
v2.4.0): each shape asks for requirements in a way a real function might, and writes
what it saw to ``status.probe``. Served over gRPC on 127.0.0.1; it counts its calls.

Shapes (every answer is a function of the request only, as Crossplane assumes):

- ``none``: asks for nothing.
- ``one``: always asks for ConfigMap ``cm`` as ``x``.
- ``missing``: always asks for ConfigMap ``missing`` (there is none) as ``x``.
- ``chain``: asks for ``x``; once ``x`` is there, also for the ConfigMap its
  ``data.next`` names, as ``y``.
- ``drop-once-read``: asks for ``x`` only while it does not have it (Crossplane calls
  again without it, and the loop never settles).
- ``never-repeat``: asks for one more requirement on every call.

``status.probe`` lists each requirement the request carried, ``name=<ConfigMap names>``
(``name=-`` for an empty entry), sorted, or ``nothing``.
"""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

NAMESPACE = "default"
SHAPES = ("none", "one", "missing", "chain", "drop-once-read", "never-repeat")


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": dict(data),
    }


WORLD = [configmap("cm", next="cm-2"), configmap("cm-2"), configmap("old")]


def selector(name: str) -> fnv1.ResourceSelector:
    """ConfigMap ``name`` of the probe's namespace, by name."""
    return fnv1.ResourceSelector(
        api_version="v1", kind="ConfigMap", match_name=name, namespace=NAMESPACE
    )


def _names(res: fnv1.Resources) -> str:
    names = [i.resource["metadata"]["name"] for i in res.items]
    return ",".join(names) or "-"


def answer(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """The probe's response: the shape is the XR's ``spec.shape``."""
    shape = req.observed.composite.resource["spec"]["shape"]
    have = req.required_resources
    rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=req.meta.tag))
    rsp.desired.CopyFrom(req.desired)
    asks: dict[str, str] = {}
    if shape in ("one", "chain") or (shape == "drop-once-read" and "x" not in have):
        asks["x"] = "cm"
    if shape == "missing":
        asks["x"] = "missing"
    if shape == "chain" and "x" in have and have["x"].items:
        asks["y"] = have["x"].items[0].resource["data"]["next"]
    if shape == "never-repeat":
        asks = {f"r{i}": "cm" for i in range(len(have) + 1)}
    for name, cm in asks.items():
        rsp.requirements.resources[name].CopyFrom(selector(cm))
    seen = sorted(f"{n}={_names(r)}" for n, r in have.items())
    rsp.desired.composite.resource.update({"status": {"probe": " ".join(seen) or "nothing"}})
    return rsp


@dataclass
class Probe:
    """The probe served at ``address``; ``calls`` counts the calls since :meth:`reset`."""

    address: str
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.calls = 0

    def call(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        with self.lock:
            self.calls += 1
        return answer(req)


class _Service(grpcv1.FunctionRunnerServiceServicer):
    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def RunFunction(self, request: Any, context: Any) -> Any:
        return self.probe.call(request)


@contextmanager
def serving() -> Iterator[Probe]:
    """The probe serving (insecure) on a free port of 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    probe = Probe(f"127.0.0.1:{port}")
    server = grpc.server(futures.ThreadPoolExecutor(2))
    grpcv1.add_FunctionRunnerServiceServicer_to_server(_Service(probe), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(probe.address)
    server.start()
    try:
        yield probe
    finally:
        server.stop(0)


def xr(shape: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.org/v1",
        "kind": "Probe",
        "metadata": {"name": "p", "namespace": NAMESPACE},
        "spec": {"shape": shape},
    }


XRD = {
    "apiVersion": "apiextensions.crossplane.io/v2",
    "kind": "CompositeResourceDefinition",
    "metadata": {"name": "probes.example.org"},
    "spec": {
        "group": "example.org",
        "names": {"kind": "Probe", "plural": "probes"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "referenceable": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"shape": {"type": "string"}},
                            },
                            "status": {
                                "type": "object",
                                "properties": {"probe": {"type": "string"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


def composition(bootstrap: Mapping[str, str]) -> dict[str, Any]:
    """The probe's Composition; ``bootstrap`` maps a requirement name to the ConfigMap
    its step's bootstrap ``requirements.requiredResources`` select by name."""
    step: dict[str, Any] = {"step": "probe", "functionRef": {"name": "probe"}}
    if bootstrap:
        step["requirements"] = {
            "requiredResources": [
                {
                    "requirementName": n,
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": cm,
                    "namespace": NAMESPACE,
                }
                for n, cm in bootstrap.items()
            ]
        }
    return {
        "apiVersion": "apiextensions.crossplane.io/v1",
        "kind": "Composition",
        "metadata": {"name": "probe"},
        "spec": {
            "compositeTypeRef": {"apiVersion": "example.org/v1", "kind": "Probe"},
            "mode": "Pipeline",
            "pipeline": [step],
        },
    }


def function(address: str) -> dict[str, Any]:
    return {
        "apiVersion": "pkg.crossplane.io/v1",
        "kind": "Function",
        "metadata": {
            "name": "probe",
            "annotations": {
                "render.crossplane.io/runtime": "Development",
                "render.crossplane.io/runtime-development-target": address,
            },
        },
        "spec": {"package": "xpkg.example.org/probe:v0.0.1"},
    }


@dataclass(frozen=True)
class Outcome:
    """What a loop ended with: ``status.probe`` of the applied response (None when the
    loop failed), the error (None when it did not), and the number of calls."""

    probe: str | None
    error: str | None
    calls: int


def render_real(
    tools: Any, probe: Probe, shape: str, bootstrap: Mapping[str, str]
) -> tuple[Outcome, int, str]:
    """``crossplane render --crossplane-binary`` of the probe: the outcome, the exit
    code and stderr."""
    import subprocess

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        files = {
            "xr.yaml": xr(shape),
            "xrd.yaml": XRD,
            "comp.yaml": composition(bootstrap),
            "fn.yaml": function(probe.address),
        }
        for name, doc in files.items():
            (root / name).write_text(yaml.safe_dump(doc))
        (root / "req").mkdir()
        for cm in WORLD:
            (root / "req" / f"{cm['metadata']['name']}.yaml").write_text(yaml.safe_dump(cm))
        probe.reset()
        p = subprocess.run(
            [
                str(tools.cli),
                "render",
                str(root / "xr.yaml"),
                str(root / "comp.yaml"),
                str(root / "fn.yaml"),
                f"--crossplane-binary={tools.core}",
                f"--xrd={root / 'xrd.yaml'}",
                f"--required-resources={root / 'req'}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    seen = None
    for doc in yaml.safe_load_all(p.stdout or ""):
        if isinstance(doc, dict) and doc.get("kind") == "Probe":
            seen = (doc.get("status") or {}).get("probe")
    error = None
    if p.returncode != 0:
        error = p.stderr.strip() or f"exit {p.returncode}"
    return Outcome(seen, error, probe.calls), p.returncode, p.stderr
