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
- One acceptor (this process's event loop) that decodes nothing: request bytes go
  to compute processes (``function.edge.pool``) or, in-process, to a worker thread, and
  their response bytes are sent as they are.
- SIGTERM (and SIGINT) stop accepting calls and connections at once and let
  in-flight calls finish within ``grace_seconds``; the process then exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from crossplane.function import runtime as sdk_runtime
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from function.edge.runner import FunctionRunner
from function.ops.settings import Settings

DEFAULT_ADDRESS = "0.0.0.0:9443"
DEFAULT_MAX_RECV_MB = 256
# gRPC's message size options are C ints: 2 GiB is one byte too many.
_MAX_GRPC_BYTES = 2**31 - 1


class BindError(RuntimeError):
    """The gRPC listener cannot be opened on its address (in use, or not this host's)."""


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
        deadline_cap_seconds: Largest compute budget of one call, in seconds (the
            call's gRPC deadline caps it further).
    """

    address: str = DEFAULT_ADDRESS
    tls_certs_dir: str | None = None
    insecure: bool = False
    max_recv_mb: int = DEFAULT_MAX_RECV_MB
    max_send_mb: int = 16
    grace_seconds: float = 20.0
    deadline_cap_seconds: float = 10.0


Compute = Callable[[bytes, dict[str, str], float | None], Awaitable[bytes]]


def in_process(runner: FunctionRunner) -> Compute:
    """Compose in this process, on one worker thread (tests and tools).

    The event loop stays free to accept and match calls while a call composes; the
    compute deadline is not enforced off the main thread (``function.core.deadline``).
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compose")

    async def compute(data: bytes, metadata: dict[str, str], budget: float | None) -> bytes:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, runner.run_bytes, data, metadata, budget)

    return compute


def _handler(compute: Compute, cap_seconds: float) -> Any:
    """The RunFunction handler: request bytes in, response bytes out, nothing decoded.

    The compute budget is the call's gRPC deadline (what is left of it), capped by
    ``cap_seconds``.
    """

    async def run_function(data: bytes, context: Any) -> bytes:
        remaining = context.time_remaining()
        budget = cap_seconds if remaining is None else max(0.001, min(cap_seconds, remaining))
        metadata = {
            k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)
        }
        return await compute(data, metadata, budget)

    return run_function


def _add_runner(server: grpc.aio.Server, service: str, method: Any) -> None:
    """Register RunFunction like the generated ``add_..._to_server``, but with neither a
    request deserializer nor a response serializer: the handler takes the request's
    bytes and returns the response's (encoded deterministically by the runner: the same
    request gives the same bytes in every process). v1 and v1beta1 share one wire
    format, so one handler serves both."""
    handlers = {
        "RunFunction": grpc.unary_unary_rpc_method_handler(
            method, request_deserializer=None, response_serializer=None
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


def build_server(
    runner: FunctionRunner | Compute, cfg: ServerConfig
) -> tuple[grpc.aio.Server, int]:
    """Create (not start) the aio server with its services and one listener.

    Args:
        runner: A :class:`FunctionRunner` (composes in this process, see
            :func:`in_process`) or a compute callable such as
            :meth:`function.edge.pool.ComputePool.call`.
        cfg: Listener settings.

    Returns:
        The server and the bound port (useful with port 0).

    Raises:
        ValueError: when neither ``insecure`` nor ``tls_certs_dir`` is given.
        OSError: when a certificate file cannot be read.
        BindError: when gRPC cannot listen on ``cfg.address``.
    """
    options = [
        ("grpc.max_receive_message_length", min(cfg.max_recv_mb * 1024 * 1024, _MAX_GRPC_BYTES)),
        ("grpc.max_send_message_length", min(cfg.max_send_mb * 1024 * 1024, _MAX_GRPC_BYTES)),
        # One acceptor per pod: no second process may share the port.
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.aio.server(options=options)
    compute = in_process(runner) if isinstance(runner, FunctionRunner) else runner
    handler = _handler(compute, cfg.deadline_cap_seconds)
    for service in (
        "apiextensions.fn.proto.v1.FunctionRunnerService",
        "apiextensions.fn.proto.v1beta1.FunctionRunnerService",
    ):
        _add_runner(server, service, handler)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (*sdk_runtime.SERVICE_NAMES, health.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    credentials = None
    if not cfg.insecure:
        if not cfg.tls_certs_dir:
            raise ValueError(
                "no TLS certificates directory given: use --tls-certs-dir or --insecure"
            )
        credentials = sdk_runtime.load_credentials(cfg.tls_certs_dir)
    try:
        if credentials is None:
            port = server.add_insecure_port(cfg.address)
        else:
            port = server.add_secure_port(cfg.address, credentials)
    except RuntimeError as e:  # grpc's "Failed to bind to address ..."
        raise BindError(
            f"--address (ADDRESS) {cfg.address}: cannot listen there (is the port in use, "
            "by another process or by --metrics-address?)"
        ) from e
    server._modelplane_health = health_servicer  # type: ignore[attr-defined]
    return server, port


def _log(log: Any, event: str, **fields: Any) -> None:
    """Log ``event`` at info level; a line that cannot be written (standard error closed
    or a pipe whose reader has gone: ``BrokenPipeError``) is dropped, so serving and
    stopping never depend on the log stream."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: a closed file
        log.info(event, **fields)


async def serve_async(
    runner: FunctionRunner | None,
    cfg: ServerConfig,
    *,
    processes: int = 0,
    debug: bool = False,
    settings: Settings | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then stop.

    Args:
        runner: Composes in this process when ``processes`` is 0.
        cfg: Listener settings.
        processes: Compute processes (``function.edge.pool``); 0 composes in this process.
        debug: Debug-level logs in the compute processes.
        settings: What the compute processes compose with (``python -m function``'s,
            flags applied); None: each reads the environment.

    On the signal the server stops at once: the listener closes, new calls and
    connections are refused (Crossplane's client moves to another pod), the health
    service reports NOT_SERVING; calls in flight get ``grace_seconds`` to finish, and
    are cancelled after that (counted ``stopped``, ``ComputePool.grace_ended``). Then
    the compute processes exit. A log line that cannot be written (standard error gone)
    never keeps the process from stopping.
    """
    log = structlog.get_logger("server")
    # Handlers first: a signal while the compute processes start stops cleanly too.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    pool = None
    if processes > 0:
        from function.edge.pool import ComputePool

        # The listener first: a port or certificate gRPC refuses raises here, before
        # any compute process exists to outlive it.
        pool = ComputePool(processes, debug=debug, settings=settings)
        server, port = build_server(pool.call, cfg)
        try:
            await pool.start()
        except BaseException:
            await pool.close()
            raise
    else:
        assert runner is not None
        server, port = build_server(runner, cfg)
    hs: health.aio.HealthServicer = server._modelplane_health  # type: ignore[attr-defined]
    try:
        await server.start()
        for svc in ("", *sdk_runtime.SERVICE_NAMES[1:]):
            await hs.set(svc, health_pb2.HealthCheckResponse.SERVING)
        _log(
            log,
            "serving",
            address=cfg.address,
            port=port,
            tls=not cfg.insecure,
            processes=processes,
            slow_lane_cpus=list(pool.lane) if pool is not None else [],
        )
        await stop.wait()
        _log(log, "stopping", grace_seconds=cfg.grace_seconds)
    finally:
        # Whatever ended serving (the signal, or an error), stop: the listener, then
        # the calls in flight within the grace period, then the compute processes.
        try:
            if pool is not None:
                # Before the server's own timer (registered next, due no sooner): the
                # calls it cancels when the grace period ends are the stop's, not their
                # callers' (counted ``stopped``).
                if cfg.grace_seconds > 0:
                    loop.call_later(cfg.grace_seconds, pool.grace_ended)
                else:
                    pool.grace_ended()
            stopped = asyncio.ensure_future(server.stop(grace=cfg.grace_seconds))
            await hs.enter_graceful_shutdown()
            await stopped
        finally:
            if pool is not None:
                await pool.close()
    _log(log, "stopped")


def serve(
    runner: FunctionRunner | None,
    cfg: ServerConfig,
    *,
    processes: int = 0,
    debug: bool = False,
    settings: Settings | None = None,
) -> None:
    """Blocking wrapper around :func:`serve_async`."""
    asyncio.run(serve_async(runner, cfg, processes=processes, debug=debug, settings=settings))


def check_serving_config(cfg: ServerConfig) -> str | None:
    """Why ``cfg`` cannot serve, as one sentence, or None when it can.

    Checks that the TLS files are readable PEM, that ``tls.key`` is the key of
    ``tls.crt`` (loaded as Python's ``ssl`` module loads a server's chain) and
    ``ca.crt`` holds certificates, and that the address is free (bound with
    ``SO_REUSEADDR``, as gRPC binds: a port left in ``TIME_WAIT`` by a stopped
    instance is free, one another process listens on is not).
    """
    if not cfg.insecure and cfg.tls_certs_dir:
        problem = _tls_problem(cfg.tls_certs_dir)
        if problem:
            return problem
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
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(addr)
            except OSError as e:
                return f"--address {cfg.address}: {e.strerror or e} (is another instance running?)"
    return None


def _tls_problem(certs_dir: str) -> str | None:
    """Why the mTLS files in ``certs_dir`` cannot serve, or None."""
    where = f"--tls-certs-dir (TLS_SERVER_CERTS_DIR) {certs_dir}"
    paths = {f: os.path.join(certs_dir, f) for f in ("tls.crt", "tls.key", "ca.crt")}
    for f, path in paths.items():
        if not os.access(path, os.R_OK):
            return f"{where}: cannot read {f}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # Whether the files parse and the key is the certificate's, not OpenSSL's policy on
    # key sizes and digests (gRPC serves with BoringSSL, which has its own).
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    try:
        ctx.load_cert_chain(paths["tls.crt"], paths["tls.key"], password=lambda: b"")
    except (ssl.SSLError, OSError) as e:
        return (
            f"{where}: tls.crt and tls.key are not a PEM certificate and its private key "
            f"({getattr(e, 'reason', None) or e})"
        )
    try:
        ctx.load_verify_locations(cafile=paths["ca.crt"])
    except (ssl.SSLError, OSError) as e:
        return f"{where}: ca.crt holds no PEM CA certificate ({getattr(e, 'reason', None) or e})"
    return None


# Resident memory of one started process of the pod (the acceptor or a compute process,
# its imports and warm-up, before any memo fills), MiB: 279 MiB for the acceptor, 2
# compute processes and the large-call one, measured in session 15.
PROCESS_BASE_MIB = 72
# The memory a pod without a memory limit is sized for by default, MiB (issue 14).
POD_MEMORY_TARGET_MIB = 512


def default_processes(cache_budget_mib: int = 64, memory_mib: float | None = None) -> int:
    """Compute processes to run by default: the CPUs this process may use, a fraction
    rounded up (:func:`function.edge.pool.usable_cpus`: the affinity mask lowered to the
    cgroup CPU quota), at most 8, and no more than the pod's memory holds.

    The pod is the acceptor, the large-call process and ``n`` compute processes, each
    :data:`PROCESS_BASE_MIB` plus, for each composing process, its memos' full budget
    (``cache_budget_mib``, ``MODELPLANE_CACHE_BUDGET_MIB``). It must fit the container's
    memory limit (:func:`function.edge.pool.memory_limit_mib`; ``memory_mib`` overrides
    it, tests), else :data:`POD_MEMORY_TARGET_MIB`: with the defaults, 2 processes
    without a limit (found by a review: 8 on a 16-CPU node took 672 MiB at start and
    1,165 MiB after 20,000 distinct XRs), 6 with 1 GiB, 8 with the example's 2 GiB.
    At least 1, whatever the memory."""
    from function.edge.pool import memory_limit_mib, usable_cpus

    memory = memory_mib if memory_mib is not None else memory_limit_mib()
    room = (memory or POD_MEMORY_TARGET_MIB) - 2 * PROCESS_BASE_MIB - cache_budget_mib
    fits = int(room // (PROCESS_BASE_MIB + cache_budget_mib))
    return max(1, min(usable_cpus(), 8, fits))
