"""The gRPC server Crossplane calls.

Serves ``apiextensions.fn.proto.v1.FunctionRunnerService`` and its v1beta1 twin
(through the SDK's ``BetaFunctionRunner``), the standard gRPC health service and
reflection, on one address:

- mTLS with ``tls.crt``, ``tls.key`` and ``ca.crt`` from the certificates
  directory (Crossplane's function runtime mounts them and sets
  ``TLS_SERVER_CERTS_DIR``); clients must present a certificate from that CA.
- ``insecure``: plaintext only. Unlike the SDK's ``runtime.serve``, which opens
  both a TLS and a plaintext listener when given both, only one listener is ever
  opened here.
- SIGTERM (and SIGINT) stop accepting calls and let in-flight calls finish
  within ``grace_seconds``; the process then exits 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import multiprocessing
import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from crossplane.function import runtime as sdk_runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from function.runner import FunctionRunner, serialize

DEFAULT_ADDRESS = "0.0.0.0:9443"
DEFAULT_MAX_RECV_MB = 256


@dataclass(frozen=True)
class ServerConfig:
    """How to serve.

    Attributes:
        address: ``host:port`` to listen on.
        tls_certs_dir: Directory with tls.crt, tls.key, ca.crt (mTLS); None for none.
        insecure: Serve plaintext only (ignores ``tls_certs_dir``).
        max_recv_mb: Largest request accepted, in MiB (Crossplane sends up to 2 GiB;
            a 5,000-cluster ModelCache request is about 5 MiB).
        max_send_mb: Largest response sent, in MiB (Crossplane receives 4 MiB; the
            runner replaces larger responses with a fatal result first).
        grace_seconds: How long in-flight calls may run after SIGTERM.
    """

    address: str = DEFAULT_ADDRESS
    tls_certs_dir: str | None = None
    insecure: bool = False
    max_recv_mb: int = DEFAULT_MAX_RECV_MB
    max_send_mb: int = 16
    grace_seconds: float = 20.0


def _wire(data: Any) -> bytes:
    """Response serializer: the handlers return the response already encoded."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, fnv1.RunFunctionResponse):
        return serialize(data)
    return bytes(data.SerializeToString(deterministic=True))


# How long no RunFunction call may have run before a stopping server counts as drained.
DRAIN_QUIET_SECONDS = 0.25


class CallTracker:
    """Counts RunFunction calls in progress and when one last started or ended.

    ``grpc.aio.Server.stop(grace)`` lets *running* handlers finish but cancels calls
    that arrived and still wait to be matched to a handler. A composer runs on the
    event loop, so while one call computes, the others that already arrived wait
    exactly there: stopping at once would cancel them (found by
    tests/test_graceful_stop.py). :func:`drain` waits for them first.
    """

    def __init__(self) -> None:
        self.in_progress = 0
        self.last_activity = time.monotonic()

    def wrap(self, method: Any) -> Any:
        """``method`` (an async RunFunction) counted by this tracker."""

        async def counted(req: Any, context: Any) -> Any:
            self.in_progress += 1
            self.last_activity = time.monotonic()
            try:
                return await method(req, context)
            finally:
                self.in_progress -= 1
                self.last_activity = time.monotonic()

        return counted


async def drain(tracker: CallTracker, deadline: float, quiet: float = DRAIN_QUIET_SECONDS) -> None:
    """Wait (until ``deadline``, a ``time.monotonic()`` value) for the calls that
    arrived to run: until none is in progress and none started for ``quiet`` seconds."""
    while time.monotonic() < deadline:
        if tracker.in_progress == 0 and time.monotonic() - tracker.last_activity >= quiet:
            return
        await asyncio.sleep(0.02)


def _add_runner(server: grpc.aio.Server, service: str, method: Any, pb: Any) -> None:
    """Register RunFunction like the generated ``add_..._to_server``, but the handler
    returns the response already encoded by the runner (deterministically: the same
    request gives the same bytes in every process, whatever protobuf's per-process
    map-hash seed), and the serializer passes those bytes through."""
    handlers = {
        "RunFunction": grpc.unary_unary_rpc_method_handler(
            method,
            request_deserializer=pb.RunFunctionRequest.FromString,
            response_serializer=_wire,
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


def build_server(runner: FunctionRunner, cfg: ServerConfig) -> tuple[grpc.aio.Server, int]:
    """Create (not start) the aio server with its services and one listener.

    Returns:
        The server and the bound port (useful with port 0).

    Raises:
        ValueError: when neither ``insecure`` nor ``tls_certs_dir`` is given.
        OSError: when a certificate file cannot be read.
    """
    options = [
        ("grpc.max_receive_message_length", cfg.max_recv_mb * 1024 * 1024),
        ("grpc.max_send_message_length", cfg.max_send_mb * 1024 * 1024),
        ("grpc.so_reuseport", 1),
    ]
    server = grpc.aio.server(options=options)
    calls = CallTracker()
    _add_runner(
        server,
        "apiextensions.fn.proto.v1.FunctionRunnerService",
        calls.wrap(runner.run_function_wire),
        fnv1,
    )

    async def beta(req: fnv1beta1.RunFunctionRequest, context: Any) -> bytes:
        # v1beta1 and v1 are the same messages on the wire (as the SDK's
        # BetaFunctionRunner relies on): convert the request, send v1's bytes.
        v1req = fnv1.RunFunctionRequest.FromString(req.SerializeToString())
        return await runner.run_function_wire(v1req, context)

    _add_runner(
        server,
        "apiextensions.fn.proto.v1beta1.FunctionRunnerService",
        calls.wrap(beta),
        fnv1beta1,
    )
    server._modelplane_calls = calls  # type: ignore[attr-defined]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (*sdk_runtime.SERVICE_NAMES, health.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    if cfg.insecure:
        port = server.add_insecure_port(cfg.address)
    elif cfg.tls_certs_dir:
        port = server.add_secure_port(cfg.address, sdk_runtime.load_credentials(cfg.tls_certs_dir))
    else:
        raise ValueError("no TLS certificates directory given: use --tls-certs-dir or --insecure")
    server._modelplane_health = health_servicer  # type: ignore[attr-defined]
    return server, port


async def serve_async(runner: FunctionRunner, cfg: ServerConfig) -> None:
    """Serve until SIGTERM/SIGINT, then drain in-flight calls and return."""
    log = structlog.get_logger("server")
    server, port = build_server(runner, cfg)
    await server.start()
    hs: health.aio.HealthServicer = server._modelplane_health  # type: ignore[attr-defined]
    for svc in ("", *sdk_runtime.SERVICE_NAMES[1:]):
        await hs.set(svc, health_pb2.HealthCheckResponse.SERVING)
    log.info("serving", address=cfg.address, port=port, tls=not cfg.insecure)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping", grace_seconds=cfg.grace_seconds)
    await hs.enter_graceful_shutdown()
    deadline = time.monotonic() + cfg.grace_seconds
    await drain(server._modelplane_calls, deadline)  # type: ignore[attr-defined]
    await server.stop(grace=max(0.0, deadline - time.monotonic()))
    log.info("stopped")


def serve(runner: FunctionRunner, cfg: ServerConfig) -> None:
    """Blocking wrapper around :func:`serve_async`."""
    asyncio.run(serve_async(runner, cfg))


def check_serving_config(cfg: ServerConfig) -> str | None:
    """Why ``cfg`` cannot serve, as one sentence, or None when it can.

    Checks that the TLS files are readable and that the address is free. The port
    check binds without SO_REUSEPORT: the gRPC listener sets that option (so that
    worker processes can share the port), which would otherwise let a second
    instance silently share the port with a first one.
    """
    if not cfg.insecure and cfg.tls_certs_dir:
        for f in ("tls.crt", "tls.key", "ca.crt"):
            path = os.path.join(cfg.tls_certs_dir, f)
            if not os.access(path, os.R_OK):
                return f"--tls-certs-dir {cfg.tls_certs_dir}: cannot read {f}"
    host, sep, port = cfg.address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        return f"--address {cfg.address!r}: want host:port"
    if port == "0":
        return None
    host = host.strip("[]") or "0.0.0.0"
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except OSError as e:
        return f"--address {cfg.address}: {e}"
    for family, kind, proto, _, addr in infos[:1]:
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.bind(addr)
            except OSError as e:
                return f"--address {cfg.address}: {e.strerror or e} (is another instance running?)"
    return None


def default_workers() -> int:
    """Worker processes to run by default: the CPUs this process may use, at most 8.

    Counts the CPUs in the affinity mask, lowered to the cgroup v2 CPU quota
    (``/sys/fs/cgroup/cpu.max``, what a Kubernetes CPU limit sets) when there is one.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, min(cpus, 8))


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _worker(cfg: ServerConfig, debug: bool) -> None:  # pragma: no cover - runs in a child
    """Entry point of one worker process (spawned): its own runner, server and event loop."""
    from function import logs, tracing
    from function.settings import load_settings

    logs.configure(debug=debug)
    settings = load_settings()
    traces = tracing.configure(settings)
    try:
        serve(FunctionRunner(settings=settings, tracing=traces), cfg)
    finally:
        traces.shutdown()


def serve_workers(cfg: ServerConfig, workers: int, debug: bool = False) -> int:
    """Serve with ``workers`` processes sharing one port through SO_REUSEPORT.

    The SDK's server runs one asyncio loop, so CPU work serializes on one core; the
    kernel spreads connections across processes bound to the same port instead
    (Linux ``SO_REUSEPORT``, which gRPC sets by default through ``grpc.so_reuseport``).
    SIGTERM/SIGINT are forwarded to every worker, which drains its calls in flight.

    Args:
        cfg: Listener settings; a port of 0 is replaced by one free port shared by all.
        workers: Number of processes (>= 1).
        debug: Console logs at debug level.

    Returns:
        0 when every worker exited cleanly, else 1 (the others are stopped too).
    """
    log = structlog.get_logger("server")
    host, _, port = cfg.address.rpartition(":")
    if port == "0":
        cfg = dataclasses.replace(
            cfg, address=f"{host}:{_free_port(host.strip('[]') or '0.0.0.0')}"
        )
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_worker, args=(cfg, debug), name=f"worker-{i}") for i in range(workers)
    ]
    for p in procs:
        p.start()
    log.info("workers started", workers=workers, address=cfg.address)
    stopping = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 0
    while any(p.is_alive() for p in procs):
        for p in procs:
            p.join(timeout=0.2)
            if not p.is_alive() and p.exitcode not in (0, None) and not stopping:
                log.error("worker died; stopping the others", worker=p.name, exitcode=p.exitcode)
                code = 1
                forward(signal.SIGTERM, None)
    # A worker stopped by the forwarded SIGTERM before it had installed its own handler
    # (still starting) exits with -SIGTERM: that is a clean stop too.
    clean = (0, -signal.SIGTERM) if stopping else (0,)
    if any(p.exitcode not in clean for p in procs):
        code = 1
    log.info("workers stopped", exitcode=code)
    return code
