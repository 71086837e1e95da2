"""Seeds and helpers shared by the reliability tests (issue 9).

Kinds are discovered, not listed: every kind of ``function.composers.KINDS`` is
covered once its module exists (:func:`missing_reason` says why a kind is skipped
before then). Each kind gets *seeds*, realistic reconciles to start from:

- one per XR found in ``examples/<dir>/`` (top-level files), with the resources of
  ``examples/<dir>/required/`` as the world Crossplane resolves requirements from
  and ``examples/<dir>/observed/`` as observed composed resources (indexed by the
  ``crossplane.io/composition-resource-name`` annotation), so a kind whose helper
  ships an example is seeded automatically;
- builders for the kinds whose shape these tests know (ModelCache,
  ModelCacheHydration), with the auth Secret holding :data:`FAKE_TOKEN`.

:func:`settle` runs a seed through Crossplane's requirements loop and returns the
final request and response; :func:`evolve` turns the desired children of a
response into observed ones, the way Crossplane and provider-kubernetes report
them (``status.atProvider.manifest``, ``Synced``/``Ready`` conditions);
:func:`start_process` starts ``python -m function`` with its log in a file.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import API_VERSION
from function.composers import KINDS
from function.render import COMPOSITION_RESOURCE_NAME, World, drive, load_yaml, wait_serving
from tests.support.fixtures import FAKE_TOKEN, auth_secret, cache_spec, inference_cluster
from tests.support.harness import NAMESPACE, desired, request, run, xr

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

Call = Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse]


def missing_reason(kind: str) -> str | None:
    """Why ``kind`` cannot be tested yet (its composer module does not exist), or None."""
    module = KINDS[kind]
    if importlib.util.find_spec(f"function.composers.{module}") is None:
        return f"function/composers/{module}.py does not exist yet ({kind} not implemented)"
    return None


def available_kinds() -> list[str]:
    """The kinds whose composer exists, in KINDS order."""
    return [k for k in KINDS if missing_reason(k) is None]


@dataclass
class Seed:
    """A reconcile to start from: the XR, what Crossplane can resolve, what is observed."""

    kind: str
    label: str
    xr: dict[str, Any]
    world: list[dict[str, Any]] = field(default_factory=list)
    observed: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.label}"


def _observed_by_name(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for d in docs:
        name = ((d.get("metadata") or {}).get("annotations") or {}).get(COMPOSITION_RESOURCE_NAME)
        if name:
            out[name] = d
    return out


@functools.cache
def _example_seeds() -> tuple[Seed, ...]:
    seeds: list[Seed] = []
    if not EXAMPLES.is_dir():
        return ()
    for d in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        top = sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        try:
            docs = load_yaml([str(p) for p in top])
            world = load_yaml([str(d / "required")]) if (d / "required").is_dir() else []
            obs = load_yaml([str(d / "observed")]) if (d / "observed").is_dir() else []
        except Exception:  # an example being written right now: not a seed yet
            continue
        for i, doc in enumerate(docs):
            if doc.get("apiVersion") != API_VERSION or doc.get("kind") not in KINDS:
                continue
            meta = doc.setdefault("metadata", {})
            meta.setdefault("namespace", NAMESPACE)
            label = f"example-{d.name}-{meta.get('name', i)}"
            seeds.append(Seed(doc["kind"], label, doc, world, _observed_by_name(obs)))
            seeds.append(Seed(doc["kind"], label + "-fresh", doc, world, {}))
    return tuple(seeds)


CLUSTERS = [
    inference_cluster("gpu-a", {"modelplane.ai/gpu": "h100", "region": "us-east"}),
    inference_cluster("gpu-b", {"modelplane.ai/gpu": "h100", "region": "us-west"}),
    inference_cluster("gpu-c", {"modelplane.ai/gpu": "a100", "region": "eu"}),
    inference_cluster("gpu-d", {"modelplane.ai/gpu": "h100"}, ready=False),
    inference_cluster("gpu-e", {"modelplane.ai/gpu": "h100"}, provider_config=None),
]
AUTH = {"name": "hf-token", "key": "HF_TOKEN"}


def _builder_seeds() -> list[Seed]:
    world = [*CLUSTERS, auth_secret(), auth_secret("other-token", namespace="other-team")]
    sel = {
        "matchLabels": {"modelplane.ai/gpu": "h100"},
        "matchExpressions": [{"key": "region", "operator": "Exists"}],
    }
    seeds = [
        Seed("ModelCache", "builder-selector", xr("ModelCache", "qwen", cache_spec(sel)), world),
        Seed(
            "ModelCache",
            "builder-all-auth",
            xr("ModelCache", "gated", cache_spec({}, authSecret=dict(AUTH))),
            world,
        ),
    ]
    hyd_spec = {
        "clusterName": "gpu-a",
        "cacheName": "gated",
        **cache_spec(None, authSecret=dict(AUTH)),
    }
    seeds.append(
        Seed(
            "ModelCacheHydration",
            "builder-auth",
            xr("ModelCacheHydration", "modelcache-ml-team-gated-gpu-a-00000", hyd_spec),
            world,
        )
    )
    seeds.append(
        Seed(
            "ModelCacheHydration",
            "builder-public",
            xr(
                "ModelCacheHydration",
                "modelcache-ml-team-qwen-gpu-b-00000",
                {"clusterName": "gpu-b", "cacheName": "qwen", **cache_spec(None)},
            ),
            world,
        )
    )
    return seeds


def seeds(kind: str) -> list[Seed]:
    """Every seed of ``kind`` (examples first, then builders)."""
    out = [s for s in _example_seeds() if s.kind == kind]
    out += [s for s in _builder_seeds() if s.kind == kind]
    if not out:  # a kind with a composer but no example yet: an empty spec to start from
        out.append(Seed(kind, "empty", xr(kind, "fuzz", {}), [auth_secret()]))
    return out


def resolve(rsp: fnv1.RunFunctionResponse, world: World) -> dict[str, list[dict[str, Any]]]:
    """Answer every requirement of ``rsp`` from ``world`` (as Crossplane would)."""
    return {
        name: [copy.deepcopy(r) for r in world.resolve(sel)]
        for name, sel in sorted(rsp.requirements.resources.items())
    }


def settle(
    seed: Seed, call: Call | None = None, observed: Mapping[str, Any] | None = None
) -> tuple[fnv1.RunFunctionRequest, fnv1.RunFunctionResponse]:
    """Run ``seed`` through the requirements loop; the last request and its response."""
    call = call or run
    world = World(seed.world)
    obs = seed.observed if observed is None else observed
    last: list[fnv1.RunFunctionRequest] = []

    def recording(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        last[:] = [req]
        return call(req)

    rsp, _ = drive(recording, seed.xr, obs, world)
    return last[0], rsp


def evolve(
    rsp: fnv1.RunFunctionResponse, remote_status: Callable[[str, dict[str, Any]], Any] | None = None
) -> dict[str, dict[str, Any]]:
    """The desired children of ``rsp`` as observed children a reconcile later.

    provider-kubernetes Objects echo their manifest under ``status.atProvider``
    (with ``remote_status(name, manifest)`` as the remote object's status, when
    given) and report ``Synced``/``Ready``; other children get ``Synced``.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, body in desired(rsp).items():
        obs = copy.deepcopy(body)
        conds = [{"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}]
        if body.get("kind") == "Object":
            manifest = copy.deepcopy(
                ((body.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}
            )
            if remote_status is not None:
                st = remote_status(name, manifest)
                if st is not None:
                    manifest["status"] = st
            obs["status"] = {"atProvider": {"manifest": manifest}, "conditions": conds}
        else:
            obs["status"] = {"conditions": conds}
        out[name] = obs
    return out


def request_for(seed: Seed, observed: Mapping[str, Any] | None = None) -> fnv1.RunFunctionRequest:
    """The settled request of ``seed`` (every requirement resolved from its world)."""
    return settle(seed, observed=observed)[0]


__all__ = [
    "AUTH",
    "CLUSTERS",
    "FAKE_TOKEN",
    "Seed",
    "available_kinds",
    "evolve",
    "missing_reason",
    "request",
    "request_for",
    "resolve",
    "seeds",
    "settle",
    "start_process",
]


def start_process(log: Path, *args: str, env: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """Start ``python -m function --insecure`` on a free 127.0.0.1 port, stderr to ``log``.

    Unlike ``function.render.start_function`` (stderr to an anonymous temporary file),
    the log goes to a file the caller names and can read (and check for the fake
    token); extra arguments and environment are passed on. Waits until the health
    service says SERVING (``function.render.wait_serving``).

    Returns:
        The process and its ``host:port``.
    """
    import os
    import socket
    import subprocess
    import sys


    def free() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    address = f"127.0.0.1:{free()}"
    full_env = {k: v for k, v in os.environ.items() if k != "TLS_SERVER_CERTS_DIR"}
    full_env.update(env or {})
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "function", "--insecure", "--address", address,
             "--metrics-address", f"127.0.0.1:{free()}", *args],
            env=full_env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    wait_serving(proc, address, 30, lambda: log.read_text()[-2000:])
    return proc, address
