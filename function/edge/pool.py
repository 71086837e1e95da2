"""Compute processes behind one gRPC acceptor.

Crossplane keeps one gRPC connection per function pod and sends many calls on it at
once. The acceptor (``function.edge.server``) does no composing: it takes each request as
bytes and hands it to one of ``processes`` compute processes (spawned, each with its own
:class:`~function.edge.runner.FunctionRunner`), which decodes, composes, encodes and sends the
response bytes back. So every core works for the one connection, and a slow call holds
one process, not the event loop.

Size classes: a request of :data:`LARGE_REQUEST_BYTES` or more (a 5,000-cluster
ModelCache) is a large call. One more process, at a CPU priority :data:`LARGE_CALL_NICE`
steps lower, composes only large calls; the ``processes`` processes take every call, a
large one only while another of them stays free. So small calls never queue behind a
large one, and while one composes the scheduler prefers everything else (a process
cannot raise its priority again, so the class belongs to the process, not the call).

Slow lane: where the container may use 2 whole CPUs or more, slow and large calls are
confined to :func:`slow_lane`, all but one whole CPU of them, so that the hogs never run
on that one: the large-call process always, and a regular process whose call has been
composing for :data:`SLOW_CALL_SECONDS` (wall time since it was handed over) until it
answers, as long as another live regular process stays outside the lane (the lane never
holds every process that takes small calls; a slow call that finds no room runs
unconfined and is confined when another leaves the lane). It is the CPU affinity of the
process's main thread, which composes; the acceptor sets and restores it, and the
process is kept. While slow calls compose there, they run on as many of the lane's CPUs
as there are of them, and every thread of the acceptor and of the other compute
processes on the CPUs left (``ComputePool._place``); when none composes, everything may
run anywhere again. A runaway selector and a 5,000-cluster ModelCache then share the
lane, and the small calls beside them, and the acceptor's threads that carry them, do
not take turns with either. The price: a large call in the lane beside a runaway gets
the share of its lower priority (about a tenth of the lane) until the runaway's deadline
ends it, and while slow calls compose, short calls do not use the CPUs they run on.

Routing: calls wait in one queue. Calls for the same XR (kind, namespace, name, read
from the request's first bytes without decoding the rest) have a home process, which
takes them first so its memos keep hitting; a free process takes a call whose home is
busy, so no call waits behind a slow one while a process is free. A call is handed to
a process the moment it is free, on the event loop (no thread in between).

Deadlines: each call carries its compute budget in seconds (the gRPC deadline capped by
``MODELPLANE_CALL_DEADLINE_SECONDS``). The compute process enforces it itself
(``function.core.deadline``), answers with a fatal result naming the XR and exits, and is
replaced. If it does not answer within the budget plus :data:`KILL_MARGIN_SECONDS` (a
loop in C code that never returns to Python), the acceptor kills it, answers with a
fatal result, and replaces it. A process that dies is replaced too; the call it held
gets a fatal result, and the calls queued behind it are served by the replacement. A
request that ran past its deadline is answered with the same fatal result, without
composing it again, for :data:`RUNAWAY_MEMO_SECONDS` (Crossplane retries it).

Accounting: the acceptor records every call in ``modelplane_function_run_seconds``,
once, from its arrival to its answer (the wait in the queue included), with the result
label the compute process sends in its answer's header (the response is not parsed
here), or the acceptor's own (``deadline``, ``error``, or ``cancelled`` when the caller
gave up, its gRPC deadline passed or it cancelled, while the call was queued or
composing: also a warning log line naming the XR; ``stopped`` for the calls the
function's own stop cut when its grace period ended, :meth:`ComputePool.grace_ended`,
logged as such). The wait before a compute process
took the call is in ``modelplane_function_queue_seconds``. The lines logged for a
process that died or was killed mid-call name the XR it was composing, its pid and how
it ended (its exit code or signal, read once it is reaped); with tracing on, the calls
the acceptor answers itself get their server span here.

Wire between acceptor and process: a Unix socket pair with
:data:`SOCKET_BUFFER_BYTES` buffers, read on the acceptor's event loop, and a shared
request region (an anonymous memory file, :data:`SHARED_REQUEST_BYTES`, passed over the
socket at start-up). The acceptor copies a request that fits into the region once and
sends a header (``_REQ``: length, budget, metadata length, where the request is) with
the pickled gRPC metadata; the process parses the request in place. Larger requests
follow the header on the socket. The process answers with ``_RSP`` (a flag: ``0`` keep
going, ``1`` this process exits now; the length) and the response bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import mmap
import multiprocessing
import os
import pickle
import signal
import socket
import struct
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.edge.codec import keep_conditions_of, peek, peek_composite, serialize, xr_label
from function.ops.metrics import RUN_RESULTS
from function.ops.settings import Settings

# How long past its budget the acceptor waits for a compute process before killing it.
KILL_MARGIN_SECONDS = 2.0
# How long a new compute process may take to import and start.
START_SECONDS = 60.0
# The socket between the acceptor and a compute process. A call: _REQ (request length,
# budget in seconds or NaN for none, metadata length, where the request is), the pickled
# metadata, and the request when it is _ON_SOCKET; _SHARED: at the start of the
# process's shared request region (SHARED_REQUEST_BYTES, a memory file mapped by both).
# An answer: _RSP (flag, result, response length), the response. Flags: _OK, _EXIT (the
# process passed its deadline and exits now), _READY (once, after start-up); result: the
# call's result label as its index in metrics.RUN_RESULTS (the acceptor times the call
# and records it without parsing the response).
_REQ = struct.Struct("<QdIB")
_RSP = struct.Struct("<BBQ")
_OK, _EXIT, _READY = 0, 1, 2
_ON_SOCKET, _SHARED = 0, 1
# Requests up to this size are handed over through shared memory: one copy by the
# acceptor, none by the kernel nor by the compute process (which parses it in place).
SHARED_REQUEST_BYTES = 8 * 1024 * 1024
# A request this large (a 5,000-cluster ModelCache is about 4 MiB; 1,000 clusters 0.8
# MiB) is a large call: it runs in the large-call process, whose CPU priority is
# LARGE_CALL_NICE steps lower, so small calls on the same connection keep their latency
# while it composes (a process cannot raise its priority again, so the class is per
# process, not per call).
LARGE_REQUEST_BYTES = 2 * 1024 * 1024
LARGE_CALL_NICE = 10
# A call still composing this long (wall time) after it was handed over is a slow call:
# its process moves to the slow lane (see slow_lane) until it answers. Above a steady
# call of most kinds at 1,000 clusters (a ModelCache composes in about 6 ms), far below a
# deadline: first calls at 5,000 clusters and the shards of very large footprints take
# longer and are meant to move, and on a loaded node (wall time) so may others.
SLOW_CALL_SECONDS = 0.05
# Socket buffers, each way: a 1,000-cluster request (0.9 MiB) goes in one write
# (the kernel caps this at net.core.wmem_max / rmem_max).
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
# How long the acceptor waits for a compute process whose socket closed to be reaped,
# so that its exit code (or the signal that ended it) is known.
REAP_SECONDS = 2.0
# At the pool's stop, how long an idle compute process may take to exit after its socket
# closed before it is killed (ComputePool.close).
STOP_SECONDS = 1.0
# How long, and for how many requests, a request that ran past its deadline is answered
# with the same fatal result without being composed again.
RUNAWAY_MEMO_SECONDS = 300.0
RUNAWAY_MEMO_ENTRIES = 1024
_log = structlog.get_logger("pool")
_FATAL = ("Fatal",)


def cpu_limit() -> float:
    """How many CPUs this process may use: the CPUs in its affinity mask, lowered to the
    cgroup CPU quota when there is one (what a Kubernetes CPU limit sets: cgroup v2's
    ``/sys/fs/cgroup/cpu.max``, else cgroup v1's ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``); a fraction under a fractional quota (``1.5``)."""
    cpus = float(
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    quota = _cgroup_quota()
    return min(cpus, quota) if quota is not None else cpus


def _cgroup_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """The cgroup CPU quota in CPUs, or None when there is none (or none is readable)."""
    try:
        with open(os.path.join(root, "cpu.max")) as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        pass
    for d in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):  # cgroup v1: -1 is no quota
        try:
            with open(os.path.join(root, d, "cpu.cfs_quota_us")) as f:
                q = int(f.read().strip())
            with open(os.path.join(root, d, "cpu.cfs_period_us")) as f:
                p = int(f.read().strip())
            return q / p if q > 0 and p > 0 else None
        except (OSError, ValueError):
            continue
    return None


def memory_limit_mib(root: str = "/sys/fs/cgroup") -> float | None:
    """The container's memory limit in MiB (what a Kubernetes memory limit sets: cgroup
    v2's ``memory.max``, else cgroup v1's ``memory/memory.limit_in_bytes``), or None
    when there is none (v2 ``max``, v1's near-2**63 "unlimited") or none is readable."""
    for name in ("memory.max", "memory/memory.limit_in_bytes"):
        try:
            with open(os.path.join(root, name)) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            limit = int(text)
        except ValueError:
            continue
        return limit / 2**20 if 0 < limit < 2**60 else None
    return None


def usable_cpus() -> int:
    """:func:`cpu_limit` rounded up (a process for each CPU or part of one), at least 1."""
    return max(1, math.ceil(cpu_limit()))


def slow_lane(affinity: Iterable[int], limit: float, offset: int = 0) -> tuple[int, ...]:
    """The CPUs that slow and large calls are confined to: all but one whole CPU of what
    the process may use, so that at least one always stays for short calls.

    Args:
        affinity: The CPU numbers in the acceptor's affinity mask
            (``os.sched_getaffinity``).
        limit: How many CPUs the process may use (:func:`cpu_limit`: the mask lowered to
            the cgroup CPU quota, possibly a fraction).
        offset: Where in the mask the lane ends (the pool passes a hash of the host name,
            in Kubernetes the pod's name, so that replicas of the function on one node
            tend to pick different CPUs: two pick the same ones with a chance of one in
            the number of CPUs, and pods on the host network share the node's name).

    Returns:
        ``floor(min(limit, len(affinity))) - 1`` CPU numbers of the mask, sorted: the
        ones before position ``offset`` of the sorted mask, cyclically (with offset 0,
        the last ones); empty (no lane: every call may run anywhere) when fewer than 2
        whole CPUs may be used. Under a CPU quota on a larger node (a 2.5-CPU limit on a
        64-CPU node: a lane of 1 CPU), confining slow calls also bounds the quota they
        can spend, so that short calls keep at least one CPU's worth of it (Linux's CFS
        bandwidth control throttles the whole cgroup once its quota is spent).
    """
    cpus = sorted(set(affinity))
    n = math.floor(min(limit, len(cpus))) - 1
    if n < 1:
        return ()
    k = offset % len(cpus)
    ring = cpus[k:] + cpus[:k]
    return tuple(sorted(ring[-n:]))


_PR_SET_PDEATHSIG = 1  # prctl(2), <linux/prctl.h>


def _die_with(acceptor: int) -> None:  # pragma: no cover - child
    """Have the kernel kill this process (SIGKILL) when the acceptor ``acceptor`` exits
    for any reason, SIGKILL included (prctl(2) ``PR_SET_PDEATHSIG``): a call composing
    in C code, or with a long deadline, would otherwise outlive it. The signal follows
    the thread that started this process, so the acceptor starts compute processes
    from its event loop's thread, which lives as long as it does. Where prctl is not
    available, the socket's end-of-file still ends an idle process. 0: nothing."""
    import ctypes

    if not acceptor:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != acceptor:  # it exited before the request took effect
        os._exit(1)


def _child(
    sock: socket.socket,
    debug: bool,
    nice: int,
    lane: tuple[int, ...],
    acceptor: int = 0,
    *,
    settings: Settings | None = None,
) -> None:  # pragma: no cover - child
    """Entry point of one compute process: serve requests from ``sock`` until it closes,
    ``nice`` steps below the acceptor's CPU priority and confined to the CPUs ``lane``
    (the large-call process; empty: no confinement); killed with the acceptor, pid
    ``acceptor`` (:func:`_die_with`; 0: not). ``settings``: the acceptor's, flags
    applied (None: read from the environment, as a test's pool does); never read
    again here, so a variable that a flag overrode is not validated twice."""
    _die_with(acceptor)
    _place_self(nice, lane)
    from function.edge.runner import FunctionRunner
    from function.ops import logs, tracing
    from function.ops.settings import load_settings

    logs.configure(debug=debug)
    if settings is None:
        settings = load_settings()
    from function.ops.metrics import RUN_RESULTS

    traces = tracing.configure(settings)
    # The acceptor times each call, from its arrival (the wait in its queue included).
    runner = FunctionRunner(settings=settings, tracing=traces, time_calls=False)
    code = {r: i for i, r in enumerate(RUN_RESULTS)}
    _warm()
    sock.setblocking(True)
    sock.sendall(_RSP.pack(_READY, 0, 0))
    # The request region the acceptor shares with this process (an anonymous memory file
    # passed over the socket): requests that fit are written there, not sent.
    _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if len(fds) != 1:
        return
    shared = mmap.mmap(fds[0], SHARED_REQUEST_BYTES)
    os.close(fds[0])
    head = bytearray(_REQ.size)
    # One receive buffer (metadata, and requests too large for the shared region),
    # reused: no allocation, zeroing or page faults per call (protobuf copies what it
    # keeps out of it while parsing).
    buf = bytearray(1 << 20)
    try:
        while True:
            if not _recv_into(sock, memoryview(head)):
                return
            size, budget, meta_size, where = _REQ.unpack(head)
            inline = size if where == _ON_SOCKET else 0
            # A request larger than the region comes on the socket, into a buffer of its
            # own (not kept: the next ones fit the usual one).
            into = buf if inline + meta_size <= len(buf) else bytearray(inline + meta_size)
            view = memoryview(into)[: meta_size + inline]
            if not _recv_into(sock, view):
                return
            metadata = pickle.loads(view[:meta_size]) if meta_size else {}
            seconds = None if math.isnan(budget) else budget
            # protobuf copies what it keeps while parsing: the region is free again
            # once this call answers (the acceptor writes the next request only then).
            data = view[meta_size:] if where == _ON_SOCKET else memoryview(shared)[:size]
            out = runner.run_bytes(data, metadata, seconds)
            flag = _EXIT if runner.replace_me else _OK
            sock.sendall(_RSP.pack(flag, code.get(runner.last_result, code["error"]), len(out)))
            sock.sendall(out)
            if runner.replace_me:
                return
    except OSError:
        return
    finally:
        traces.shutdown()


def _place_self(nice: int, lane: tuple[int, ...]) -> None:  # pragma: no cover - child
    """A compute process's CPU priority (``nice`` steps lower) and CPUs (``lane``; empty:
    any), and its signals: the acceptor owns them (it stops taking calls, lets these
    finish, then closes the socket, whose end-of-file ends the process)."""
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
    if lane:
        try:
            os.sched_setaffinity(0, lane)
        except OSError as e:  # a narrowed cpuset: runs unconfined, at its lower priority
            structlog.get_logger("pool").warning("not confined to the slow lane", error=str(e))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _recv_into(sock: socket.socket, view: memoryview) -> bool:  # pragma: no cover - child
    """Fill ``view`` from ``sock``; False at end-of-file."""
    while view:
        n = sock.recv_into(view)
        if not n:
            return False
        view = view[n:]
    return True


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
    with the XR's kind, namespace and name (read without decoding the whole request), and
    the observed XR's own conditions as they are (:func:`~function.edge.codec.keep_conditions`)."""
    (tag, kind, namespace, name), composite = peek_composite(data)
    rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=tag))
    rsp.results.add(
        severity=fnv1.SEVERITY_FATAL,
        message=f"{xr_label(kind, namespace, name)}: {message}",
    )
    keep_conditions_of(rsp, composite)
    return serialize(rsp)


@dataclass(eq=False)
class _Job:
    data: bytes
    metadata: dict[str, str]
    budget: float | None
    future: asyncio.Future[bytes]
    home: int
    digest: bytes
    large: bool
    # time.monotonic() at its arrival, and when a compute process took it (None: queued).
    started: float = field(default_factory=time.monotonic)
    taken: float | None = None
    # Its result label (metrics.RUN_RESULTS), set with its answer.
    result: str = "error"


class _Reader(asyncio.BufferedProtocol):
    """Reads a compute process's answers (``_RSP`` header, then the response bytes)
    straight into one buffer per answer, on the event loop (no thread, no extra copy)."""

    def __init__(self, pool: ComputePool, slot: _Slot) -> None:
        self.pool, self.slot = pool, slot
        self.transport: asyncio.BaseTransport | None = None
        self.head = bytearray(_RSP.size)
        self.flag = -1
        self.result = 0
        self.body: bytearray | None = None
        self.got = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    @property
    def current(self) -> bool:
        """Whether this is still the slot's connection (not one stopped and replaced)."""
        return self.transport is not None and self.slot.transport is self.transport

    def get_buffer(self, sizehint: int) -> memoryview:
        target = self.head if self.body is None else self.body
        return memoryview(target)[self.got :]

    def buffer_updated(self, nbytes: int) -> None:
        self.got += nbytes
        if self.body is None:
            if self.got < len(self.head):
                return
            self.flag, self.result, size = _RSP.unpack(self.head)
            self.body, self.got = bytearray(size), 0
            if size:
                return
        if self.got == len(self.body):
            flag, body = self.flag, bytes(self.body)
            self.body, self.got = None, 0
            if self.current:
                self.pool._answered(self.slot, flag, self.result, body)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self.current:
            self.pool._lost(self.slot)


@dataclass(eq=False)
class _Slot:
    index: int
    # Runs large calls, at a lower CPU priority (LARGE_CALL_NICE).
    large: bool = False
    proc: Any = None
    transport: asyncio.Transport | None = None
    shared: mmap.mmap | None = None
    job: _Job | None = None
    timer: asyncio.TimerHandle | None = None
    # Moves the call's process to the slow lane SLOW_CALL_SECONDS after it was handed over.
    lane_timer: asyncio.TimerHandle | None = None
    in_lane: bool = False
    # Its call is slow but was not confined (no other regular process would have stayed
    # outside the lane): confined when room is made.
    slow: bool = False
    # Being replaced (or stopped): takes no call, and its end-of-file is expected.
    retiring: bool = True

    @property
    def free(self) -> bool:
        return self.transport is not None and self.job is None and not self.retiring


class ComputePool:
    """``processes`` compute processes fed by the acceptor's event loop.

    Args:
        processes: How many compute processes (>= 1).
        debug: Debug-level logs in the processes.
        settings: The settings every process composes with (the acceptor's, flags
            applied); None: each reads the environment itself.

    Use ``await start()``, then ``await call(...)`` from the event loop, and
    ``await close()`` to let the processes finish their calls and exit.
    """

    def __init__(
        self,
        processes: int,
        *,
        debug: bool = False,
        lane: tuple[int, ...] | None = None,
        settings: Settings | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError("a compute pool needs at least 1 process")
        self.processes = processes
        self.debug = debug
        self.settings = settings
        self.replaced = 0
        self._ctx = multiprocessing.get_context("spawn")
        # Size classes: ``processes`` processes take every call; one more, at a lower CPU
        # priority, takes only large requests (they take a large one too, but only while
        # another of them stays free for small calls).
        self._slots = [_Slot(i, large=i == processes) for i in range(processes + 1)]
        self._pending: deque[_Job] = deque()
        # Requests that ran past their deadline, by digest: (expiry, the fatal response).
        self._runaways: OrderedDict[bytes, tuple[float, float, bytes]] = OrderedDict()
        self._closing = False
        # The server's grace period ended: the calls it cancels now are stopped, not
        # given up by their callers.
        self._grace_over = False
        self._idle: asyncio.Event | None = None
        self._replacing: set[asyncio.Task[None]] = set()
        self._cpus: tuple[int, ...] = ()
        if hasattr(os, "sched_getaffinity"):
            self._cpus = tuple(sorted(os.sched_getaffinity(0)))
        # The slow lane (see slow_lane); ``lane`` overrides it (tests).
        # Placed by the host name (in Kubernetes, the pod's name; its pid is 1 in every
        # pod), so replicas of the function on one node tend to pick different CPUs.
        offset = zlib.crc32(socket.gethostname().encode())
        self.lane = slow_lane(self._cpus, cpu_limit(), offset) if lane is None else lane
        # What _place last applied: the CPUs slow calls compose on, and the processes.
        self._placed: tuple[tuple[int, ...], tuple[tuple[int, bool], ...]] = ((), ())
        from function.ops import metrics, tracing

        # Every call is timed here (see the module's Accounting); the calls the acceptor
        # answers itself get their span here (DISABLED: no tracing, nothing built).
        self._metrics = metrics.default()
        self._tracing = tracing.configure(settings) if settings is not None else tracing.DISABLED

    def pids(self) -> list[int]:
        """The process ids of the compute processes now running."""
        return [s.proc.pid for s in self._slots if s.proc is not None and s.proc.pid]

    def _start(self, index: int) -> tuple[Any, socket.socket]:
        """Start process ``index`` (on the event loop's thread: see :func:`_die_with`);
        returns it and the acceptor's end of its socket."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for sock in (parent, child):
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                with contextlib.suppress(OSError):  # the kernel caps it; smaller works too
                    sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
        proc = self._ctx.Process(
            target=_child,
            args=(
                child,
                self.debug,
                LARGE_CALL_NICE if self._slots[index].large else 0,
                self.lane if self._slots[index].large else (),
                os.getpid(),
            ),
            kwargs={"settings": self.settings},
            name=f"compute-{index}",
            daemon=True,
        )
        try:
            proc.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        return proc, parent

    def _ready(
        self, index: int, proc: Any, parent: socket.socket
    ) -> tuple[Any, socket.socket, mmap.mmap]:
        """Wait (blocking) until process ``index`` is ready and hand it its shared request
        region; returns the process, the acceptor's end of its socket and the region."""
        parent.settimeout(START_SECONDS)
        try:
            head = parent.recv(_RSP.size, socket.MSG_WAITALL)
        except OSError:
            head = b""
        if len(head) != _RSP.size or _RSP.unpack(head)[0] != _READY:
            proc.kill()
            parent.close()
            raise RuntimeError(f"compute process {index} did not start")
        fd = os.memfd_create(f"modelplane-compute-{index}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, SHARED_REQUEST_BYTES)
            shared = mmap.mmap(fd, SHARED_REQUEST_BYTES)
            socket.send_fds(parent, [b"m"], [fd])
        finally:
            os.close(fd)
        parent.setblocking(False)
        return proc, parent, shared

    async def _attach(self, slot: _Slot) -> None:
        """(Re)start slot's process and connect its socket to the event loop."""
        loop = asyncio.get_running_loop()
        started = self._start(slot.index)
        proc, sock, shared = await loop.run_in_executor(None, self._ready, slot.index, *started)
        transport, _ = await loop.connect_accepted_socket(lambda: _Reader(self, slot), sock)
        slot.proc, slot.transport, slot.shared = proc, transport, shared  # type: ignore[assignment]
        slot.retiring = False
        if transport.is_closing():  # it died while being attached
            self._lost(slot)
        else:
            self._make_room()  # a process outside the lane again: a waiting slow call goes in

    async def start(self) -> None:
        """Start every process (in parallel)."""
        self._idle = asyncio.Event()
        self._idle.set()
        await asyncio.gather(*(self._attach(s) for s in self._slots))

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

        Raises:
            asyncio.CancelledError: when the caller's task is cancelled (the gRPC
                deadline passed, the caller cancelled, or the server's stop cut it); the
                call is counted ``cancelled`` (``stopped``) first (see the module's
                Accounting).
        """
        arrived = time.monotonic()
        (tag, kind, namespace, name), composite = peek_composite(data)
        # Identifies the request without hashing all of it (megabytes at fleet scale).
        # Crossplane's tag is the SHA-256 of the request marshalled deterministically
        # (xfn.Tag), so it names the same request however its maps were ordered on the
        # wire (grpc-go marshals them in random order: the bytes of a retry differ). With
        # it, the XR's name and the lengths (which no map order changes) guard against a
        # client that reuses a tag; without one, the XR as observed stands in for it.
        ident = b"%d\0%d\0%s\0%s/%s/%s\0" % (
            len(data),
            len(composite),
            tag.encode(),
            kind.encode(),
            namespace.encode(),
            name.encode(),
        )
        digest = hashlib.blake2b(ident if tag else ident + composite, digest_size=16).digest()
        known = self._runaways.get(digest)
        if known is not None:
            expiry, failed_budget, response = known
            if expiry <= arrived:
                del self._runaways[digest]
            elif budget is not None and budget <= failed_budget:
                # It would run past this smaller budget again.
                self._metrics.record_results(kind, _FATAL)
                self._metrics.record_time(kind, "deadline", time.monotonic() - arrived)
                if self._tracing.enabled:
                    self._span(data, metadata, response, arrived)
                return response
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        home = zlib.crc32(f"{kind}/{namespace}/{name}".encode())
        large = len(data) >= LARGE_REQUEST_BYTES
        home = self.processes if large else home % self.processes
        job = _Job(data, metadata, budget, fut, home, digest, large, arrived)
        self._pending.append(job)
        self._dispatch()
        try:
            response = await fut
        except asyncio.CancelledError:
            self._gave_up(job)
            raise
        self._metrics.record_time(kind, job.result, time.monotonic() - arrived)
        return response

    def grace_ended(self) -> None:
        """The server's stop is about to cancel every call it still holds (its grace
        period ended): from now on a call cut before its answer is counted ``stopped``
        and logged ``call stopped: the function is stopping``, not as its caller's."""
        self._grace_over = True

    def _gave_up(self, job: _Job) -> None:
        """The caller of ``job`` gave up (its gRPC deadline passed, or it cancelled)
        before its answer: counted as ``cancelled`` with the time it waited, its queue
        wait too if no process took it (it is dropped from the queue when its turn
        comes, :meth:`_take`), and a warning naming the XR. A process composing it
        finishes (its answer is dropped) or is stopped by the call's budget. Once the
        server's grace period ended (:meth:`grace_ended`) the cut is the function's own
        stop: ``stopped``, and the warning says so."""
        now = time.monotonic()
        tag, kind, namespace, name = peek(job.data)
        taken = now if job.taken is None else job.taken
        if job.taken is None:
            self._metrics.record_queue(now - job.started)
        stopped = self._grace_over
        self._metrics.record_time(kind, "stopped" if stopped else "cancelled", now - job.started)
        _log.warning(
            "call stopped: the function is stopping" if stopped else "call cancelled by its caller",
            tag=tag,
            xr_kind=kind,
            xr_namespace=namespace,
            xr_name=name,
            seconds=round(now - job.started, 6),
            queued_seconds=round(taken - job.started, 6),
            state="queued" if job.taken is None else "composing",
        )

    def _take(self, slot: _Slot) -> _Job | None:
        pending = self._pending
        while pending and pending[0].future.done():  # callers that went away
            pending.popleft()
        # The large-call process takes nothing else; a process for every call takes a
        # large one only if another of them stays free for small calls.
        spare = slot.large or any(s.free and not s.large and s is not slot for s in self._slots)
        chosen = None
        for job in pending:
            if job.home == slot.index and not job.future.done() and (spare or not job.large):
                chosen = job
                break
        if chosen is None and not slot.large:
            for job in pending:
                if (
                    not self._slots[job.home].free
                    and not job.future.done()
                    and (spare or not job.large)
                ):
                    chosen = job
                    break
        if chosen is not None:
            pending.remove(chosen)
        return chosen

    def _dispatch(self) -> None:
        """Give every free process a call (see :meth:`call`), now, on the event loop."""
        progressed = True
        while progressed and self._pending:
            progressed = False
            for slot in self._slots:
                if slot.free:
                    job = self._take(slot)
                    if job is not None:
                        self._send(slot, job)
                        progressed = True
        self._place()
        self._check_idle()

    def _send(self, slot: _Slot, job: _Job) -> None:
        assert slot.transport is not None
        slot.job = job
        job.taken = time.monotonic()
        self._metrics.record_queue(job.taken - job.started)
        meta = pickle.dumps(job.metadata) if job.metadata else b""
        budget = math.nan if job.budget is None else job.budget
        size = len(job.data)
        if slot.shared is not None and size <= SHARED_REQUEST_BYTES:
            slot.shared[:size] = job.data  # the process reads it after the header
            slot.transport.write(_REQ.pack(size, budget, len(meta), _SHARED) + meta)
        else:
            slot.transport.write(_REQ.pack(size, budget, len(meta), _ON_SOCKET) + meta)
            slot.transport.write(job.data)  # sent at once when the socket buffer holds it
        loop = asyncio.get_running_loop()
        if job.budget is not None:
            slot.timer = loop.call_later(job.budget + KILL_MARGIN_SECONDS, self._expired, slot, job)
        if self.lane and not slot.large:
            slot.lane_timer = loop.call_later(SLOW_CALL_SECONDS, self._to_lane, slot, job)

    def _to_lane(self, slot: _Slot, job: _Job) -> None:
        """Slot's call has been composing :data:`SLOW_CALL_SECONDS`: confine its process
        to the slow lane until it answers, unless no other live regular process would be
        left outside it; then it waits (``slow``) until one leaves the lane (an
        unprivileged process may widen its affinity again, unlike its CPU priority, so
        the process is kept)."""
        slot.lane_timer = None
        if slot.job is not job or slot.proc is None:
            return
        slot.slow = True
        if not any(s is not slot and not s.in_lane for s in self._live_regular()):
            return  # this one keeps what the lane leaves, until another leaves the lane
        try:
            os.sched_setaffinity(slot.proc.pid, self.lane)
        except OSError as e:  # it exited meanwhile (_lost or _answered follows), or refused
            _log.debug("slow call not moved to the slow lane", pid=slot.proc.pid, error=str(e))
            return
        slot.in_lane = True
        _log.debug("slow call moved to the slow lane", pid=slot.proc.pid, cpus=self.lane)
        self._place()

    def _place(self) -> None:
        """Keep everything else off the CPUs that slow calls compose on.

        While ``k`` calls compose in the lane (regular processes moved there, and the
        large-call process while it has a call), they run on the first ``min(k, lane
        size)`` CPUs of the lane (a process composes on one thread), and every thread of
        the acceptor and of the other live compute processes runs on the remaining
        CPUs; with none, everything may run anywhere again (the idle large-call process:
        anywhere in the lane). Otherwise a short call's process, the acceptor's gRPC
        threads or its event loop, woken where a hog runs at the same priority, waits
        for the hog's time slice (measured: a small call's p99 about 3x its idle p99
        beside one runaway, about 1x with this). Applied only when what composes in the
        lane, or a live process, changed (each thread's affinity is a system call).
        Nothing is touched while no slow call has composed, except a process started
        while one did (it inherits the narrowed mask of the thread that spawned it).
        Processes being replaced are left alone (their pid may be reused).
        """
        if not self.lane:
            return
        live = [s for s in self._slots if s.proc is not None and s.proc.pid and not s.retiring]
        hogs = [s for s in live if s.job is not None and (s.in_lane or s.large)]
        busy = self.lane[: min(len(hogs), len(self.lane))]
        roles = tuple((s.proc.pid, s in hogs) for s in live)
        last_busy, last_roles = self._placed
        if (busy, roles) == (last_busy, last_roles):
            return
        self._placed = (busy, roles)
        if not busy and not last_busy:
            # Nothing was kept off any CPU since the last restore: only a process that
            # came up meanwhile may need every CPU back.
            known = {pid for pid, _ in last_roles}
            for s in live:
                if s.proc.pid not in known and not s.large and _narrowed(s.proc.pid, self._cpus):
                    set_threads(s.proc.pid, self._cpus)
            return
        rest = tuple(c for c in self._cpus if c not in busy) or self._cpus
        set_threads(os.getpid(), rest)
        for s in live:
            if s in hogs:
                with contextlib.suppress(OSError):  # exiting meanwhile: nothing to place
                    os.sched_setaffinity(s.proc.pid, busy)
            elif s.large:  # idle: anywhere in the lane, as it started
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(s.proc.pid, self.lane)
            else:
                set_threads(s.proc.pid, rest)

    def _retire(self, slot: _Slot) -> None:
        """Slot's process is going (it died, passed its deadline, or is killed): it no
        longer counts as outside the lane; if no live regular process would be left
        outside, one in the lane is let out until a replacement is up (its call stays
        ``slow``: it goes back in then, by :meth:`_make_room`)."""
        slot.retiring = True
        if slot.large or slot.in_lane:
            return
        live = self._live_regular()
        if live and all(s.in_lane for s in live):
            self._unconfine(live[0])
            live[0].slow = True

    def _live_regular(self) -> list[_Slot]:
        """The regular processes that are up and not going (those that take small calls)."""
        return [s for s in self._slots if not s.large and s.proc is not None and not s.retiring]

    def _unconfine(self, slot: _Slot) -> None:
        """Give slot's process every CPU again (a process exiting meanwhile: nothing to undo)."""
        slot.in_lane = False
        if slot.proc is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(slot.proc.pid, self._cpus)

    def _make_room(self) -> None:
        """A process left the lane: confine a slow call that had to wait for room."""
        for s in self._slots:
            if s.slow and not s.in_lane and s.job is not None:
                self._to_lane(s, s.job)
                if s.in_lane:
                    return

    def _finish(self, slot: _Slot) -> _Job | None:
        job, slot.job = slot.job, None
        if slot.timer is not None:
            slot.timer.cancel()
            slot.timer = None
        if slot.lane_timer is not None:
            slot.lane_timer.cancel()
            slot.lane_timer = None
        slot.slow = False
        if slot.in_lane:
            self._unconfine(slot)
            self._make_room()
        return job

    @staticmethod
    def _resolve(job: _Job | None, response: bytes) -> None:
        if job is not None and not job.future.done():
            job.future.set_result(response)

    def _answered(self, slot: _Slot, flag: int, result: int, body: bytes) -> None:
        """Slot's process answered its call (called by its :class:`_Reader`) with
        ``result``, the index of its result label in ``metrics.RUN_RESULTS``."""
        if flag == _EXIT:  # past its deadline: the process exits and is replaced
            self._retire(slot)
        job = self._finish(slot)
        if job is not None:
            job.result = RUN_RESULTS[result] if result < len(RUN_RESULTS) else "error"
        if flag == _EXIT:
            if job is not None:
                self._resolve(job, self._remember(job, body))
            self._replace_soon(slot, kill=False)
        else:
            self._resolve(job, body)
        self._dispatch()

    def _lost(self, slot: _Slot) -> None:
        """Slot's socket closed: expected while it is replaced, else the process died.
        Its call is answered once the process is reaped (:meth:`_replace`), so that the
        log line and the fatal result say how it ended."""
        if slot.retiring:
            return
        self._retire(slot)
        job = self._finish(slot)
        self._replace_soon(slot, kill=True, died=True, job=job)
        self._dispatch()

    def _expired(self, slot: _Slot, job: _Job) -> None:
        """Slot's process did not answer within the call's budget plus the margin: the
        call is answered now, the process killed and replaced (and the line naming the
        XR logged once it is reaped, :meth:`_replace`)."""
        if slot.job is not job:
            return
        self._retire(slot)
        self._finish(slot)
        self._fail(
            job,
            "deadline",
            self._remember(
                job,
                fatal_for(
                    job.data,
                    f"composing ran past the call's compute deadline of {job.budget:g} s and "
                    "did not stop; its compute process was replaced and nothing was changed "
                    "this reconcile (simplify the spec; MODELPLANE_CALL_DEADLINE_SECONDS caps "
                    "the deadline)",
                ),
            ),
        )
        self._replace_soon(slot, kill=True, job=job)
        self._dispatch()

    def _fail(self, job: _Job, result: str, response: bytes) -> None:
        """Answer ``job`` with the acceptor's own fatal ``response`` (``result``: its
        label): its Fatal result counted, and its span when traced; nothing when its
        caller has gone (its call was counted ``cancelled``)."""
        if job.future.done():
            return
        job.result = result
        self._metrics.record_results(peek(job.data)[1], _FATAL)
        if self._tracing.enabled:
            self._span(job.data, job.metadata, response, job.started)
        self._resolve(job, response)

    def _span(self, data: bytes, metadata: dict[str, str], response: bytes, arrived: float) -> None:
        """The server span of a call answered here with the fatal ``response`` (only
        while tracing is on: :meth:`function.ops.tracing.Tracing.answered`)."""
        try:
            from function.core.inputs import XRRef

            tag, kind, namespace, name = peek(data)
            message = fnv1.RunFunctionResponse.FromString(response).results[0].message
            started_ns = time.time_ns() - int((time.monotonic() - arrived) * 1e9)
            ref = XRRef(api_version="", kind=kind, namespace=namespace, name=name)
            self._tracing.answered(ref, tag, metadata, message, started_ns)
        except Exception:  # tracing never fails serving
            _log.warning("span of a call answered by the acceptor not recorded", exc_info=True)

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

    def _replace_soon(
        self, slot: _Slot, *, kill: bool, died: bool = False, job: _Job | None = None
    ) -> None:
        slot.retiring = True
        task = asyncio.get_running_loop().create_task(
            self._replace(slot, kill=kill, died=died, job=job)
        )
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def _replace(
        self, slot: _Slot, *, kill: bool, died: bool = False, job: _Job | None = None
    ) -> None:
        """Stop slot's process and start another. ``died``: its socket closed unasked
        (the process died): it is reaped first (at most :data:`REAP_SECONDS`), then
        ``job``, the call it was composing, is answered with a fatal result saying how
        it ended. Otherwise a ``job``: the call it was killed for, past its deadline.
        Either way an error line names the XR, the pid and how the process ended."""
        pid = slot.proc.pid if slot.proc is not None else None
        fields = _call_fields(job)
        if died:
            loop = asyncio.get_running_loop()
            code = await loop.run_in_executor(None, _reaped, slot.proc, REAP_SECONDS)
            ended = how_it_ended(code)
            _log.error("compute process died", pid=pid, exitcode=code, ended=ended, **fields)
            if job is not None:
                self._fail(
                    job,
                    "error",
                    fatal_for(
                        job.data,
                        f"its compute process {ended} while composing; it was replaced and "
                        "nothing was changed this reconcile",
                    ),
                )
            await self._stop_slot(slot, kill=kill, wait=5)
        else:
            code = await self._stop_slot(slot, kill=kill, wait=5)
            if job is not None:
                _log.error(
                    "compute process killed past its deadline",
                    pid=pid,
                    seconds=job.budget,
                    exitcode=code,
                    ended=how_it_ended(code),
                    **fields,
                )
        self.replaced += 1
        while not self._closing:
            try:
                await self._attach(slot)
            except Exception:  # try again: the queued calls need a process
                _log.exception("compute process could not be replaced")
                await asyncio.sleep(1.0)
                continue
            break
        self._dispatch()

    async def _stop_slot(self, slot: _Slot, *, kill: bool, wait: float) -> int | None:
        """Close slot's socket (its process sees end-of-file and exits) and reap it;
        returns its exit code (``-N``: ended by signal N; None: none was running, or it
        could not be reaped)."""
        slot.retiring = True
        old, transport, shared = slot.proc, slot.transport, slot.shared
        slot.transport = slot.shared = None
        if kill and old is not None and old.is_alive():
            old.kill()
        if transport is not None:
            transport.close()
        if old is not None:
            await asyncio.get_running_loop().run_in_executor(None, old.join, wait)
            if old.is_alive():
                old.kill()
                await asyncio.get_running_loop().run_in_executor(None, old.join, 5)
            if not old.is_alive():  # it writes no more: its metric files are folded
                await asyncio.get_running_loop().run_in_executor(None, _fold_dead, old.pid)
        slot.proc = None
        if shared is not None:
            shared.close()
        return old.exitcode if old is not None else None

    def _check_idle(self) -> None:
        if self._idle is None:
            return
        if self._pending or any(s.job is not None for s in self._slots):
            self._idle.clear()
        else:
            self._idle.set()

    async def close(self) -> None:
        """Let queued and running calls finish, then stop every process.

        A call whose caller went away (the gRPC server cancels what is still running
        when its grace period ends, before this is called) is not waited for: its
        process is stopped at once, so the pod exits within its grace period however
        long the compute deadline is.
        """
        self._closing = True
        while True:
            for slot in self._slots:
                if slot.job is not None and slot.job.future.done() and not slot.retiring:
                    self._retire(slot)
                    self._finish(slot)
                    self._replace_soon(slot, kill=True)  # closing: stopped, not replaced
            self._dispatch()
            if self._idle is None or self._idle.is_set():
                if not self._replacing:
                    break
                await asyncio.gather(*self._replacing, return_exceptions=True)
                continue
            # Woken when the last call answers; and now and then, to stop the process of
            # a call whose caller has gone since.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), 0.5)
        # Every call has been answered or cancelled: a process that has not exited on
        # end-of-file within STOP_SECONDS is killed (it holds no call), so the pod exits
        # soon after its grace period however slowly an interpreter tears down on a busy
        # node (measured under 4 busy loops on 2 CPUs: 7-12 s with a 10 s wait).
        await asyncio.gather(
            *(self._stop_slot(s, kill=False, wait=STOP_SECONDS) for s in self._slots)
        )
        self._tracing.shutdown()  # the spans of the calls answered here (bounded)


def _narrowed(pid: int, cpus: tuple[int, ...]) -> bool:
    """Whether process ``pid`` may run on fewer CPUs than ``cpus`` (False once it is gone)."""
    try:
        return os.sched_getaffinity(pid) != set(cpus)
    except OSError:
        return False


def set_threads(pid: int, cpus: Iterable[int]) -> None:
    """Set the CPU affinity of every thread of process ``pid`` (``sched_setaffinity``
    sets one thread's); threads that exit meanwhile, or a process that is gone, are
    skipped."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        tids = [pid]
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


def _reaped(proc: Any, seconds: float) -> int | None:  # pragma: no cover - thread
    """Wait (blocking, at most ``seconds``) for ``proc`` to be reaped; its exit code
    (``-N``: ended by signal N), or None if it did not exit meanwhile. A process's
    socket closes before it can be reaped, so its exit code read at once is often
    None."""
    if proc is None:
        return None
    proc.join(seconds)
    return proc.exitcode  # type: ignore[no-any-return]


def how_it_ended(code: int | None) -> str:
    """How a compute process ended, as a message says it: ``exited with code 1``,
    ``was killed by signal 9 (SIGKILL: out of memory?)`` (the kernel's OOM killer sends
    SIGKILL), or ``did not exit`` (None: not reaped in time)."""
    if code is None:
        return "did not exit"
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "an unknown signal"
    hint = ": out of memory?" if -code == signal.SIGKILL else ""
    return f"was killed by signal {-code} ({name}{hint})"


def _call_fields(job: _Job | None) -> dict[str, str]:
    """The fields every per-call log line carries (``function.ops.logs.CALL``): tag and
    the XR's kind, namespace and name, read from ``job``'s request (none: no job)."""
    if job is None:
        return {}
    tag, kind, namespace, name = peek(job.data)
    return {"tag": tag, "xr_kind": kind, "xr_namespace": namespace, "xr_name": name}


def _fold_dead(pid: int | None) -> None:
    """Fold the metric files of the exited process ``pid`` into the multiprocess
    directory's archive (:func:`function.ops.metrics.fold_dead_process`), so replaced
    processes leave no files behind and every scrape reads a bounded number."""
    if pid is None or not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    try:
        from function.ops import metrics

        metrics.fold_dead_process(pid)
    except Exception:  # metrics never fail serving
        _log.warning("metric files of an exited compute process not folded", pid=pid)
