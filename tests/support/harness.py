"""Shared test harness: build requests, run the function in-process or over gRPC, read responses.

- :func:`xr` / :func:`request` build XRs and RunFunctionRequests (``required=None``
  entries are left out = "not resolved yet"; ``[]`` = "resolved, nothing matched").
- :class:`Clock` is a controllable clock for the runner.
- :func:`run` calls ``FunctionRunner.run`` in-process.
- :class:`GrpcFunction` serves a real FunctionRunner on 127.0.0.1 in a background
  thread (a real gRPC channel, the same server code as ``python -m function``).
- :func:`desired`, :func:`status`, :func:`conditions`, :func:`results`,
  :func:`requirements` read responses as plain Python.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections.abc import Mapping
from typing import Any

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import json_format

from function import API_VERSION
from function.edge.runner import FunctionRunner
from function.edge.server import ServerConfig, build_server
from function.ops.settings import Settings, default_settings
from function.render import World, build_request, drive

NOW = datetime.datetime(2026, 11, 29, 9, 0, 0, tzinfo=datetime.UTC)
NAMESPACE = "ml-team"

__all__ = [
    "API_VERSION",
    "NAMESPACE",
    "NOW",
    "Clock",
    "GrpcFunction",
    "World",
    "conditions",
    "desired",
    "desired_ready",
    "drive",
    "fatal",
    "request",
    "requirements",
    "results",
    "run",
    "status",
    "xr",
    "xr_ready",
]


class Clock:
    """A controllable UTC clock: ``clock()`` returns ``now``; ``advance(seconds)`` moves it."""

    def __init__(self, now: datetime.datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> datetime.datetime:
        """Move the clock forward by ``seconds``; returns the new time."""
        self.now = self.now + datetime.timedelta(seconds=seconds)
        return self.now


def xr(
    kind: str,
    name: str,
    spec: Mapping[str, Any],
    *,
    namespace: str = NAMESPACE,
    status: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    uid: str | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    """An observed ``modelplane.ai/v1alpha1`` XR."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{kind.lower()}-{name}",
        "generation": generation,
    }
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": meta,
        "spec": dict(spec),
    }
    if status is not None:
        body["status"] = dict(status)
    return body


def request(
    composite: Mapping[str, Any],
    *,
    observed: Mapping[str, Mapping[str, Any]] | None = None,
    required: Mapping[str, list[Mapping[str, Any]] | None] | None = None,
    tag: str = "test",
) -> fnv1.RunFunctionRequest:
    """A RunFunctionRequest; ``required`` values of None are omitted (unresolved)."""
    req_map = {k: v for k, v in (required or {}).items() if v is not None}
    return build_request(composite, observed, req_map, tag=tag)


def run(
    req: fnv1.RunFunctionRequest,
    *,
    now: datetime.datetime | Clock = NOW,
    settings: Settings | None = None,
) -> fnv1.RunFunctionResponse:
    """Run the function in-process at time ``now``."""
    clock = now if isinstance(now, Clock) else Clock(now)
    return FunctionRunner(settings=settings or default_settings(), clock=clock).run(req)


def _dict(msg: Any) -> Any:
    return json_format.MessageToDict(msg, preserving_proto_field_name=False)


def desired(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, Any]]:
    """Desired composed resources by name (bodies only)."""
    return {k: _dict(v.resource) for k, v in rsp.desired.resources.items()}


def desired_ready(rsp: fnv1.RunFunctionResponse) -> dict[str, str]:
    """Readiness of desired composed resources by name (``READY_TRUE`` ...)."""
    return {k: fnv1.Ready.Name(v.ready) for k, v in rsp.desired.resources.items()}


def xr_ready(rsp: fnv1.RunFunctionResponse) -> str:
    """The desired XR readiness (``READY_TRUE``, ``READY_FALSE``, ``READY_UNSPECIFIED``)."""
    return fnv1.Ready.Name(rsp.desired.composite.ready)


def status(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    """The desired XR status."""
    res = rsp.desired.composite.resource
    return _dict(res["status"]) if "status" in res else {}


def conditions(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, str]]:
    """Conditions by type: ``{type: {status: True|False|Unknown, reason, message}}``."""
    names = {
        fnv1.STATUS_CONDITION_TRUE: "True",
        fnv1.STATUS_CONDITION_FALSE: "False",
        fnv1.STATUS_CONDITION_UNKNOWN: "Unknown",
    }
    return {
        c.type: {"status": names.get(c.status, "Unknown"), "reason": c.reason, "message": c.message}
        for c in rsp.conditions
    }


def results(rsp: fnv1.RunFunctionResponse) -> list[tuple[str, str]]:
    """Results as ``(severity, message)`` with severity Normal/Warning/Fatal."""
    names = {
        fnv1.SEVERITY_NORMAL: "Normal",
        fnv1.SEVERITY_WARNING: "Warning",
        fnv1.SEVERITY_FATAL: "Fatal",
    }
    return [(names.get(r.severity, "?"), r.message) for r in rsp.results]


def fatal(rsp: fnv1.RunFunctionResponse) -> list[str]:
    """Messages of fatal results."""
    return [m for s, m in results(rsp) if s == "Fatal"]


def requirements(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, Any]]:
    """Required-resource selectors by requirement name."""
    return {k: _dict(v) for k, v in rsp.requirements.resources.items()}


class GrpcFunction:
    """A FunctionRunner served over a real gRPC channel on 127.0.0.1 (insecure).

    Use as a context manager; :meth:`call` sends a RunFunctionRequest over the
    channel, :meth:`drive` runs Crossplane's requirements loop over it.
    """

    def __init__(self, clock: Clock | None = None, settings: Settings | None = None) -> None:
        self.clock = clock or Clock()
        self.runner = FunctionRunner(settings=settings or default_settings(), clock=self.clock)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: grpc.aio.Server | None = None
        self.address = ""
        self.channel: grpc.Channel | None = None
        self.stub: grpcv1.FunctionRunnerServiceStub | None = None

    def __enter__(self) -> GrpcFunction:
        self._thread.start()

        async def start() -> int:
            server, port = build_server(
                self.runner, ServerConfig(address="127.0.0.1:0", insecure=True)
            )
            self._server = server
            await server.start()
            return port

        port = asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=10)
        self.address = f"127.0.0.1:{port}"
        self.channel = grpc.insecure_channel(
            self.address, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        )
        self.stub = grpcv1.FunctionRunnerServiceStub(self.channel)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.channel is not None:
            self.channel.close()
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(0), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def call(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        """Send one request over the channel."""
        assert self.stub is not None
        return self.stub.RunFunction(req, timeout=30)

    def drive(
        self,
        composite: Mapping[str, Any],
        world: World,
        observed: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> tuple[fnv1.RunFunctionResponse, int]:
        """Crossplane's requirements loop over the channel (see ``function.render.drive``)."""
        return drive(self.call, composite, observed, world)
