"""Compute processes behind one gRPC acceptor.

Crossplane keeps one gRPC connection per function pod and sends many calls on it at
once. The acceptor (``function.edge.server``) does no composing: it takes each request as
bytes and hands it to one of ``processes`` compute processes (spawned, each with its own
:class:`~function.edge.runner.FunctionRunner`), which decodes, composes, encodes and sends the
response bytes back over a pipe. So every core works for the one connection, and a slow
call holds one process, not the event loop.

Routing: calls wait in one queue. Calls for the same XR (kind, namespace, name, read
from the request's first bytes without decoding the rest) have a home process, which
takes them first so its memos keep hitting; a free process takes a call whose home is
busy, so no call waits behind a slow one while a process is free.

Deadlines: each call carries its compute budget in seconds (the gRPC deadline capped by
``MODELPLANE_CALL_DEADLINE_SECONDS``). The compute process enforces it itself
(``function.edge.deadline``), answers with a fatal result naming the XR and exits, and is
replaced. If it does not answer within the budget plus :data:`KILL_MARGIN_SECONDS` (a
loop in C code that never returns to Python), the acceptor kills it, answers with a
fatal result, and replaces it. A process that dies is replaced too; the call it held
gets a fatal result, and the calls queued behind it are served by the replacement. A
request that ran past its deadline is answered with the same fatal result, without
composing it again, for :data:`RUNAWAY_MEMO_SECONDS` (Crossplane retries it).

Wire between acceptor and process (``multiprocessing`` pipe): the acceptor sends
``(budget_seconds, metadata)`` and then the request bytes; the process answers with one byte
(``0``: keep going, ``1``: this process exits now) followed by the response bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import os
import signal
import time
import zlib
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.edge.codec import peek, peek_composite, serialize

# How long past its budget the acceptor waits for a compute process before killing it.
KILL_MARGIN_SECONDS = 2.0
# How long a new compute process may take to import and start.
START_SECONDS = 60.0
_READY = b"ready"
# How long, and for how many requests, a request that ran past its deadline is answered
# with the same fatal result without being composed again.
RUNAWAY_MEMO_SECONDS = 300.0
RUNAWAY_MEMO_ENTRIES = 1024
_log = structlog.get_logger("pool")


def _child(conn: Any, debug: bool) -> None:  # pragma: no cover - runs in a child process
    """Entry point of one compute process: serve requests from ``conn`` until it closes."""
    # The acceptor owns signals: it stops taking calls, lets these finish, then closes
    # the pipe (EOF ends this loop).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from function.edge.runner import FunctionRunner
    from function.ops import logs, tracing
    from function.ops.settings import load_settings

    logs.configure(debug=debug)
    settings = load_settings()
    traces = tracing.configure(settings)
    runner = FunctionRunner(settings=settings, tracing=traces)
    _warm()
    conn.send_bytes(_READY)
    try:
        while True:
            try:
                budget, metadata = conn.recv()
                data = conn.recv_bytes()
            except (EOFError, OSError):
                return
            out = runner.run_bytes(data, metadata, budget)
            conn.send_bytes((b"\x01" if runner.replace_me else b"\x00") + out)
            if runner.replace_me:
                return
    finally:
        traces.shutdown()


def _warm() -> None:  # pragma: no cover - runs in a child process
    """Import every composer and build the CEL parser before taking calls: the first
    call must not spend its compute budget on start-up (nor be interrupted half-way
    through an import)."""
    from function import API_VERSION
    from function.composers import KINDS, composer_for
    from function.scheduling import devices

    for kind in KINDS:
        composer_for(API_VERSION, kind)
    devices.compile_selector('device.driver == "warm"')


def fatal_for(data: bytes, message: str) -> bytes:
    """A response to the request ``data`` whose only result is fatal: ``message``, prefixed
    with the XR's kind, namespace and name (read without decoding the whole request)."""
    tag, kind, namespace, name = peek(data)
    rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=tag))
    rsp.results.add(
        severity=fnv1.SEVERITY_FATAL,
        message=f"{kind or 'XR'} {namespace}/{name}: {message}",
    )
    return serialize(rsp)


@dataclass
class _Job:
    data: bytes
    metadata: dict[str, str]
    budget: float | None
    future: asyncio.Future[bytes]
    home: int
    digest: bytes


@dataclass
class _Slot:
    index: int
    busy: bool = False
    proc: Any = None
    conn: Any = None
    io: ThreadPoolExecutor | None = None
    task: asyncio.Task[None] | None = None


class ComputePool:
    """``processes`` compute processes fed by the acceptor's event loop.

    Args:
        processes: How many compute processes (>= 1).
        debug: Debug-level logs in the processes.

    Use ``await start()``, then ``await call(...)`` from the event loop, and
    ``await close()`` to let the processes finish their calls and exit.
    """

    def __init__(self, processes: int, *, debug: bool = False) -> None:
        if processes < 1:
            raise ValueError("a compute pool needs at least 1 process")
        self.processes = processes
        self.debug = debug
        self.replaced = 0
        self._ctx = multiprocessing.get_context("spawn")
        self._slots = [_Slot(i) for i in range(processes)]
        self._pending: deque[_Job] = deque()
        # Requests that ran past their deadline, by digest: (expiry, the fatal response).
        self._runaways: OrderedDict[bytes, tuple[float, float, bytes]] = OrderedDict()
        self._ready = asyncio.Condition()
        self._closing = False

    def pids(self) -> list[int]:
        """The process ids of the compute processes now running."""
        return [s.proc.pid for s in self._slots if s.proc is not None and s.proc.pid]

    def _spawn(self, slot: _Slot) -> None:
        """Start slot's process and wait (blocking) until it is ready."""
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_child, args=(child, self.debug), name=f"compute-{slot.index}", daemon=True
        )
        proc.start()
        child.close()
        if not parent.poll(START_SECONDS) or parent.recv_bytes() != _READY:
            proc.kill()
            raise RuntimeError(f"compute process {slot.index} did not start")
        slot.proc, slot.conn = proc, parent
        slot.io = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"compute-{slot.index}")

    async def start(self) -> None:
        """Start every process (in parallel) and the tasks that feed them."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, self._spawn, s) for s in self._slots))
        for s in self._slots:
            s.task = asyncio.create_task(self._feed(s))

    async def call(self, data: bytes, metadata: dict[str, str], budget: float | None) -> bytes:
        """Compose the serialized request ``data`` in a compute process.

        Calls wait in one queue. A process that is free takes the first call whose XR
        is at home there (same XR, same process: its memos hit), else the first call
        whose home process is busy; so a call never waits behind a slow call while
        another process is free.

        Args:
            data: A serialized RunFunctionRequest.
            metadata: The call's gRPC metadata (lower-case keys), for trace context.
            budget: Compute deadline in seconds (None: none).

        Returns:
            The serialized response (a fatal result when the process passed its
            deadline, or died, while composing it).
        """
        (tag, kind, namespace, name), composite = peek_composite(data)
        # Identifies the request without hashing all of it (megabytes at fleet scale):
        # Crossplane's tag, the XR as observed, and the request's length.
        digest = hashlib.blake2b(
            b"%d\0%s\0" % (len(data), tag.encode()) + composite, digest_size=16
        ).digest()
        known = self._runaways.get(digest)
        if known is not None:
            expiry, failed_budget, response = known
            if expiry <= time.monotonic():
                del self._runaways[digest]
            elif budget is not None and budget <= failed_budget:
                return response  # it would run past this smaller budget again
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        home = zlib.crc32(f"{kind}/{namespace}/{name}".encode()) % self.processes
        self._pending.append(_Job(data, metadata, budget, fut, home, digest))
        async with self._ready:
            self._ready.notify_all()
        return await fut

    def _take(self, slot: _Slot) -> _Job | None:
        pending = self._pending
        chosen = None
        for job in pending:
            if job.home == slot.index:
                chosen = job
                break
        if chosen is None:
            for job in pending:
                if self._slots[job.home].busy:
                    chosen = job
                    break
        if chosen is not None:
            pending.remove(chosen)
        return chosen

    async def _feed(self, slot: _Slot) -> None:
        loop = asyncio.get_running_loop()
        while True:
            async with self._ready:
                job = None
                while job is None:
                    job = self._take(slot)
                    if job is None:
                        if self._closing and not self._pending:
                            return
                        await self._ready.wait()
                slot.busy = True
            try:
                if job.future.done():  # the caller went away while queued
                    continue
                out = await self._one(loop, slot, job)
                if not job.future.done():
                    job.future.set_result(out)
            except Exception as e:  # never leave a caller waiting
                _log.exception("compute pool failed a call")
                if not job.future.done():
                    job.future.set_result(fatal_for(job.data, f"internal error: {e}"))
            finally:
                slot.busy = False
                async with self._ready:
                    self._ready.notify_all()

    async def _one(self, loop: asyncio.AbstractEventLoop, slot: _Slot, job: _Job) -> bytes:
        conn, io = slot.conn, slot.io
        wait = None if job.budget is None else job.budget + KILL_MARGIN_SECONDS
        try:
            await loop.run_in_executor(io, _send, conn, job)
            out = await asyncio.wait_for(loop.run_in_executor(io, conn.recv_bytes), wait)
        except TimeoutError:
            pid = slot.proc.pid
            await self._replace(slot, kill=True)
            _log.error("compute process killed past its deadline", pid=pid, seconds=job.budget)
            return self._remember(
                job,
                fatal_for(
                    job.data,
                    f"composing ran past the call's compute deadline of {job.budget:g} s and did "
                    "not stop; its compute process was replaced and nothing was changed this "
                    "reconcile (simplify the spec; MODELPLANE_CALL_DEADLINE_SECONDS caps the "
                    "deadline)",
                ),
            )
        except (EOFError, OSError) as e:
            code = slot.proc.exitcode if slot.proc is not None else None
            await self._replace(slot, kill=True)
            _log.error("compute process died", exitcode=code, error=str(e))
            return fatal_for(
                job.data,
                f"its compute process exited (code {code}) while composing; it was replaced "
                "and nothing was changed this reconcile",
            )
        if out[:1] == b"\x01":  # past its deadline: the process exits and is replaced
            await self._replace(slot, kill=False)
            return self._remember(job, out[1:])
        return out[1:]

    def _remember(self, job: _Job, response: bytes) -> bytes:
        """Answer the same request with ``response`` for :data:`RUNAWAY_MEMO_SECONDS`
        without composing it again, when its budget is no larger than the one it ran
        past (Crossplane retries a fatal result; identical requests, tag included, are
        identical work)."""
        if job.budget is None:
            return response
        expiry = time.monotonic() + RUNAWAY_MEMO_SECONDS
        self._runaways[job.digest] = (expiry, job.budget, response)
        while len(self._runaways) > RUNAWAY_MEMO_ENTRIES:
            self._runaways.popitem(last=False)
        return response

    async def _replace(self, slot: _Slot, *, kill: bool) -> None:
        old, conn, io = slot.proc, slot.conn, slot.io
        if kill and old is not None and old.is_alive():
            old.kill()
        loop = asyncio.get_running_loop()
        if old is not None:
            await loop.run_in_executor(None, old.join, 5)
            _mark_dead(old.pid)
        # Closed only once the process is gone: a thread still blocked reading from it
        # has then had its end-of-file.
        if conn is not None:
            conn.close()
        if io is not None:
            io.shutdown(wait=False)
        self.replaced += 1
        if not self._closing:
            await loop.run_in_executor(None, self._spawn, slot)

    async def close(self) -> None:
        """Let queued and running calls finish, then stop every process."""
        self._closing = True
        async with self._ready:
            self._ready.notify_all()
        await asyncio.gather(*(s.task for s in self._slots if s.task is not None))
        loop = asyncio.get_running_loop()
        for s in self._slots:
            if s.conn is not None:
                s.conn.close()
            if s.proc is not None:
                await loop.run_in_executor(None, s.proc.join, 10)
                if s.proc.is_alive():
                    s.proc.kill()
                _mark_dead(s.proc.pid)
            if s.io is not None:
                s.io.shutdown(wait=False)


def _send(conn: Any, job: _Job) -> None:
    conn.send((job.budget, job.metadata))
    conn.send_bytes(job.data)


def _mark_dead(pid: int | None) -> None:
    """Tell prometheus-client's multiprocess mode that ``pid`` is gone (live gauges)."""
    if pid is None or not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
    except Exception:  # metrics never fail serving
        pass
