"""The project's benchmark: RunFunction time per XR kind and fleet size, against the protocol floor.

    python -m benchmarks.run [--sizes 10,100,1000,5000] [--kinds ModelCache,...]
                             [--repeat 15] [--json benchmarks/results/latest.json]
                             [--no-grpc] [--throughput] [--soak]

For every kind and fleet size it builds two requests (``benchmarks.scenarios``): the
first call after Crossplane resolved the requirements, and the steady state (every
child observed and ready). It reports, per case:

- ``in-process``: parse the request, run the function, serialize the response
  deterministically (what the gRPC server does), median and p90 in milliseconds;
- ``floor``: parse the same request and serialize a response of the same size, measured
  in the same run; ``ratio`` = median / floor median;
- ``sdk``: for per-cluster kinds, a minimal Crossplane-SDK function that returns the same
  composed resources (``response.to`` + ``resource.update`` from dicts); ``vs_sdk`` = ratio;
- ``grpc``: the same request sent as bytes over gRPC to ``python -m function`` on 127.0.0.1;
- ``growth``: median at 1,000 clusters / median at 100;
- ``peak_rss_mib``: the server's peak resident memory after the case (the acceptor's
  plus each compute process's).

``--throughput`` measures calls per second of 16 concurrent gRPC clients (mixed kinds,
steady state at 1,000 clusters)
against one worker and against ``--workers`` (default: CPU count) worker processes
sharing the port (SO_REUSEPORT). ``--soak`` runs 10,000 calls in-process and reports
resident memory every 1,000 calls. Absolute times on shared machines are noisy; the
ratios of one run are what count.

``--serving`` measures issue 14's figures over ONE channel (:func:`serving`), with the
load clients of ``--clients``: ``python`` (grpcio) and ``go`` (``benchmarks/grpcload``, a
grpc-go client with one ClientConn and raw bytes, as Crossplane calls; built with the
Go toolchain into the tools cache, skipped with a line saying why when Go is absent).
Throughput is reported with the CPU time each process spent per call (acceptor,
compute processes, client), which bounds the scaling on a machine the client shares
(``scaling_bounds``), and with the scaling of the compute alone (``compute_alone``: no
gRPC, no client). Isolation is measured with the load client anywhere on the machine and
kept off the slow lane's CPUs (``--latency-calls`` small calls each, 1,000 by default).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import itertools
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import structlog
from crossplane.function import resource as sdk_resource
from crossplane.function import response as sdk_response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from benchmarks.scenarios import SCENARIOS, parse
from function.edge.pool import cpu_limit, set_threads, slow_lane
from function.edge.runner import FunctionRunner
from function.render import start_function

METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
PER_CLUSTER_KINDS = ("ModelCacheShard", "ModelCacheHydration", "ModelReplica")


def _quiet() -> None:
    # Warnings and errors only; loggers bound once, as function.ops.logs configures them.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        cache_logger_on_first_use=True,
    )


def _times(fn: Callable[[], Any], repeat: int) -> list[float]:
    fn()  # warm up
    out = []
    for _ in range(repeat):
        gc.disable()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
        gc.enable()
    return out


def _stats(ts: list[float]) -> dict[str, float]:
    ts = sorted(ts)
    p90 = ts[min(len(ts) - 1, round(0.9 * (len(ts) - 1)))]
    return {"median_ms": statistics.median(ts) * 1e3, "p90_ms": p90 * 1e3}


def _sdk_baseline(data: bytes, rsp: fnv1.RunFunctionResponse) -> Callable[[], bytes]:
    """A minimal SDK function returning the same composed resources as ``rsp``."""
    bodies = {k: json_format.MessageToDict(v.resource) for k, v in rsp.desired.resources.items()}

    def call() -> bytes:
        req = fnv1.RunFunctionRequest.FromString(data)
        out = sdk_response.to(req)
        for name, body in bodies.items():
            sdk_resource.update(out.desired.resources[name], body)
        return bytes(out.SerializeToString(deterministic=True))

    return call


def _rss_hwm_mib(pid: int) -> float:
    """Peak resident memory of ``pid`` plus that of each of its descendants, MiB (the
    acceptor and its compute processes: an upper bound of the tree's peak)."""
    return _tree_mib(pid, "VmHWM:")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def measure_case(
    runner: FunctionRunner,
    data: bytes,
    repeat: int,
    kind: str,
    stub: Any | None,
) -> dict[str, Any]:
    """Measure one request: in-process, floor, SDK baseline and gRPC."""
    req = parse(data)
    rsp = runner.run(req)

    def inproc() -> bytes:
        # What the gRPC server does: parse, run, encode (FunctionRunner.run_wire).
        return runner.run_wire(fnv1.RunFunctionRequest.FromString(data))

    def floor() -> bytes:
        fnv1.RunFunctionRequest.FromString(data)
        return bytes(rsp.SerializeToString())

    row: dict[str, Any] = {
        "request_kib": round(len(data) / 1024, 1),
        "response_kib": round(rsp.ByteSize() / 1024, 1),
        "children": len(rsp.desired.resources),
        "fatal": [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL],
    }
    # Interleave to share the machine's noise fairly between the measured and the floor.
    a: list[float] = []
    b: list[float] = []
    for _ in range(3):
        a += _times(inproc, max(1, repeat // 3))
        b += _times(floor, max(1, repeat // 3))
    row["in_process"] = _stats(a)
    row["floor"] = _stats(b)
    row["ratio"] = round(row["in_process"]["median_ms"] / row["floor"]["median_ms"], 2)
    if kind in PER_CLUSTER_KINDS:
        sdk = _times(_sdk_baseline(data, rsp), repeat)
        row["sdk"] = _stats(sdk)
        row["vs_sdk"] = round(row["in_process"]["median_ms"] / row["sdk"]["median_ms"], 2)
    if stub is not None:
        row["grpc"] = _stats(_times(lambda: stub(data, timeout=60), repeat))
    return row


def run_benchmark(
    sizes: list[int], kinds: list[str], repeat: int, use_grpc: bool
) -> dict[str, Any]:
    """Run every (kind, size, call) case; returns the report as a dict."""
    _quiet()
    runner = FunctionRunner()
    proc = None
    stub = None
    channel = None
    if use_grpc:
        proc, address = start_function({"PYTHONHASHSEED": "0"})
        channel = grpc.insecure_channel(
            address,
            options=[
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                ("grpc.max_send_message_length", 256 * 1024 * 1024),
            ],
        )
        stub = channel.unary_unary(METHOD)
    report: dict[str, Any] = {"sizes": sizes, "repeat": repeat, "cases": []}
    try:
        for kind in kinds:
            medians: dict[tuple[int, str], float] = {}
            floors: dict[tuple[int, str], float] = {}
            for n in sizes:
                first, steady = SCENARIOS[kind](n)
                for call, data in (("first", first), ("steady", steady)):
                    row = measure_case(runner, data, repeat, kind, stub)
                    row.update(kind=kind, clusters=n, call=call)
                    if proc is not None:
                        row["peak_rss_mib"] = round(_rss_hwm_mib(proc.pid), 1)
                    medians[(n, call)] = row["in_process"]["median_ms"]
                    floors[(n, call)] = row["floor"]["median_ms"]
                    report["cases"].append(row)
                    print(_line(row), flush=True)
            for call in ("first", "steady"):
                if (100, call) in medians and (1000, call) in medians:
                    g = medians[(1000, call)] / medians[(100, call)]
                    fg = floors[(1000, call)] / floors[(100, call)]
                    report.setdefault("growth", {})[f"{kind}/{call}"] = round(g, 2)
                    report.setdefault("floor_growth", {})[f"{kind}/{call}"] = round(fg, 2)
                    print(
                        f"  growth {kind} {call} 100->1000: {g:.2f}x (floor: {fg:.2f}x)",
                        flush=True,
                    )
    finally:
        if channel is not None:
            channel.close()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    return report


def _line(row: dict[str, Any]) -> str:
    s = (
        f"{row['kind']:<20} n={row['clusters']:<5} {row['call']:<6} "
        f"req={row['request_kib']:>8}KiB rsp={row['response_kib']:>7}KiB "
        f"med={row['in_process']['median_ms']:8.2f}ms p90={row['in_process']['p90_ms']:8.2f}ms "
        f"floor={row['floor']['median_ms']:7.2f}ms ratio={row['ratio']:5.2f}"
    )
    if "vs_sdk" in row:
        s += f" sdk={row['sdk']['median_ms']:.2f}ms vs_sdk={row['vs_sdk']:.2f}"
    if "grpc" in row:
        s += f" grpc={row['grpc']['median_ms']:.2f}ms"
    if "peak_rss_mib" in row:
        s += f" rss={row['peak_rss_mib']}MiB"
    if row["fatal"]:
        s += f" FATAL={row['fatal'][0][:80]}"
    return s


def throughput(workers: int, seconds: float, clients: int = 16) -> dict[str, Any]:
    """Calls per second of ``clients`` concurrent gRPC clients (mixed kinds), 1 vs ``workers``."""
    _quiet()
    # Steady-state requests at 1,000 clusters: the server's work, not the Python load
    # generator sharing these cores, is what is measured.
    payloads = [SCENARIOS[k](1000)[1] for k in SCENARIOS]
    out: dict[str, Any] = {"clients": clients, "seconds": seconds}
    for w in sorted({1, workers}):
        proc, address = start_function({"PYTHONHASHSEED": "0"}, workers=w)
        try:
            count = [0] * clients
            stop = time.monotonic() + seconds

            def client(
                i: int, address: str = address, stop: float = stop, count: list[int] = count
            ) -> None:
                # One channel per client: separate TCP connections spread over workers.
                with grpc.insecure_channel(
                    address,
                    options=[
                        ("grpc.max_receive_message_length", 64 << 20),
                        ("grpc.use_local_subchannel_pool", 1),
                    ],
                ) as ch:
                    call = ch.unary_unary(METHOD)
                    j = i
                    while time.monotonic() < stop:
                        call(payloads[j % len(payloads)], timeout=60)
                        count[i] += 1
                        j += 1

            threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out[f"workers_{w}_calls_per_second"] = round(sum(count) / seconds, 1)
            print(
                f"throughput workers={w}: {out[f'workers_{w}_calls_per_second']} calls/s",
                flush=True,
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if workers > 1:
        out["scaling"] = round(
            out[f"workers_{workers}_calls_per_second"] / out["workers_1_calls_per_second"], 2
        )
        print(f"throughput scaling 1 -> {workers} workers: {out['scaling']}x", flush=True)
    return out


# ---- serving over ONE channel, as Crossplane calls (issue 14) ------------------------

RUNAWAY = (
    "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10]"
    ".all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, a+b+c+d+e > 0)))))"
)
_BIG = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


GRPCLOAD = Path(__file__).parent / "grpcload"


def go_client() -> tuple[str | None, str]:
    """Build the Go load client (``benchmarks/grpcload``: one grpc-go ClientConn, raw
    bytes, as Crossplane calls) once per source into the tools cache, like
    ``scripts/crossplane-tools`` builds the pinned Crossplane binaries.

    Returns:
        (path of the binary, "") or (None, why it is not available: no Go, or the build
        failed), so the benchmark falls back to the Python client with that line.
    """
    go = shutil.which("go")
    if go is None:
        return None, "Go is not installed: the Go client (benchmarks/grpcload) is skipped"
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((GRPCLOAD / name).read_bytes())
    from tests.support.crossplane import cache_dir

    out = cache_dir() / f"grpcload-{digest.hexdigest()[:12]}" / "grpcload"
    if out.exists():
        return str(out), ""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    # -mod=readonly: the pinned go.mod and go.sum, modules from the Go module proxy.
    build = subprocess.run(
        [go, "build", "-mod=readonly", "-trimpath", "-o", str(tmp), "."],
        cwd=GRPCLOAD,
        env={**os.environ, "CGO_ENABLED": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    if build.returncode != 0:
        return None, f"the Go client did not build (the Python client only): {build.stderr[-500:]}"
    tmp.rename(out)
    return str(out), ""


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far, seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_pids(pid: int) -> list[int]:
    """``pid`` (the acceptor) and its child processes (the compute processes and
    multiprocessing's resource tracker)."""
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _go(binary: str, address: str, *args: str) -> dict[str, Any]:
    """Run the Go client once; its JSON report."""
    done = subprocess.run(
        [binary, "-addr", address, *args], capture_output=True, text=True, check=False, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"grpcload {args[0]} failed: {done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _go_timed(binary: str, address: str, *args: str) -> tuple[dict[str, Any], float]:
    """:func:`_go`, and the CPU seconds the Go client spent (warm-up included)."""
    before = os.times()
    report = _go(binary, address, *args)
    after = os.times()
    return report, (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )


def _tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and every descendant, MiB."""
    return _tree_mib(pid, "VmRSS:")


def _tree_mib(pid: int, field: str) -> float:
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(field):
                        total += int(line.split()[1]) / 1024
            for task in os.listdir(f"/proc/{p}/task"):  # children of every thread
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return round(total, 1)


def _in_flight(call: Any, payloads: list[bytes], seconds: float, depth: int) -> int:
    """Calls completed in ``seconds`` with ``depth`` calls always in flight on ``call``'s
    channel (one thread per slot, one shared channel)."""
    done = [0] * depth
    stop = time.monotonic() + seconds

    def slot(i: int) -> None:
        j = i
        while time.monotonic() < stop:
            call(payloads[j % len(payloads)], timeout=120)
            done[i] += 1
            j += 1

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(depth)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done)


@contextlib.contextmanager
def _client_on(cpus: tuple[int, ...] | None) -> Iterator[None]:
    """Run this process (every thread: the gRPC client's too, and the Go client it
    starts, which inherits the mask) on ``cpus`` meanwhile; None: where it was."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    set_threads(os.getpid(), cpus)
    try:
        yield
    finally:
        set_threads(os.getpid(), before)


def _p(ts: list[float], q: float) -> float:
    ts = sorted(ts)
    return round(ts[min(len(ts) - 1, round(q * (len(ts) - 1)))] * 1e3, 2)


def _loaded_latencies(
    call: Any, small: bytes, background: tuple[bytes, ...], n: int
) -> tuple[list[float], list[float]]:
    """Latencies of ``n`` small calls on an idle server, then while each ``background``
    request is kept in flight (one call at a time each) on the same channel."""
    idle = _times(lambda c=call: c(small, timeout=60), n)
    stop = threading.Event()

    def loop(data: bytes, c: Any = call, stop: threading.Event = stop) -> None:
        while not stop.is_set():
            c(data, timeout=120)

    bg = [threading.Thread(target=loop, args=(d,)) for d in background]
    for t in bg:
        t.start()
    time.sleep(0.5)
    loaded = _times(lambda c=call: c(small, timeout=120), n)
    stop.set()
    for t in bg:
        t.join()
    return idle, loaded


def _runaway_request() -> bytes:
    req = parse(SCENARIOS["ModelDeployment"](10)[1])
    spec = req.observed.composite.resource["spec"]
    member = spec["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"][0]["cel"] = RUNAWAY
    return req.SerializeToString()


def _distinct_replica(base: fnv1.RunFunctionRequest, i: int) -> bytes:
    """The steady ModelReplica request as a distinct XR whose pod template carries 64 KiB."""
    req = fnv1.RunFunctionRequest()
    req.CopyFrom(base)
    xr = req.observed.composite.resource
    xr["metadata"]["name"] = f"replica-{i:06d}"
    template = xr["spec"]["engines"][0]["members"][0]["template"]
    template["metadata"].get_or_create_struct("annotations")["blob"] = f"{i:06d}" + "x" * 65536
    return req.SerializeToString()


def serving(
    processes: int,
    seconds: float,
    distinct: int,
    fuzz_cases: int,
    clients: tuple[str, ...] = ("python", "go"),
    latency_calls: int = 1000,
) -> dict[str, Any]:
    """The issue-14 figures, every call over ONE gRPC channel to ``python -m function``.

    - ``throughput``: steady 1,000-cluster ModelCache calls with 8 in flight, with 1 and
      with ``processes`` compute processes; ``scaling`` is the ratio.
    - ``handoff``: gRPC median (1 process) minus in-process median, for a small
      ModelReplica and the 1,000-cluster ModelCache: what the acceptor and the socket cost.
    - ``isolation``: p99 of small ModelReplica calls on an idle server and while a
      5,000-cluster ModelCache call and a runaway selector call are kept in flight (the
      runaway with the default cost limit, and with the limit lifted so that only the
      compute deadline, the default 10 s, stops it), ``latency_calls`` small calls each
      (1,000: the p99 is then the 10th slowest, not the 2nd of 200).
    - ``memory``: RSS of the whole process tree after ``distinct`` calls of distinct
      ModelReplicas with 64 KiB pod templates.
    - ``fuzz``: ``fuzz_cases`` mutated requests (``benchmarks.fuzz``): deaths, gRPC
      errors, "internal error" results, and invalid inputs whose response drops
      observed children.

    Throughput and isolation are measured with each client of ``clients``: ``python``
    (grpcio, one channel, a thread per call in flight) and ``go`` (``benchmarks/grpcload``:
    one grpc-go ClientConn, as Crossplane calls; skipped with a line saying why when Go
    is absent). Both send the same request bytes to the same server. Each client's
    figures are under its name; the top-level ``scaling`` and ``isolation`` are the
    Python client's, as before.
    """
    _quiet()
    out: dict[str, Any] = {"processes": processes, "load_average_at_start": os.getloadavg()}
    cache_steady = SCENARIOS["ModelCache"](1000)[1]
    small = SCENARIOS["ModelReplica"](10)[1]
    big = SCENARIOS["ModelCache"](5000)[1]
    runaway = _runaway_request()
    runner = FunctionRunner()
    go_binary = None
    if "go" in clients:
        go_binary, why = go_client()
        if go_binary is None:
            print(f"serving: {why}", flush=True)
            out["go_client"] = why
    tmp = tempfile.TemporaryDirectory(prefix="modelplane-serving-")
    files = {}
    bodies = {"cache": cache_steady, "small": small, "big": big, "runaway": runaway}
    for label, data in bodies.items():
        files[label] = os.path.join(tmp.name, f"{label}.bin")
        Path(files[label]).write_bytes(data)
    used = [c for c in clients if c == "python" or (c == "go" and go_binary is not None)]

    # Throughput and hand-off. Both servers run from the start and are measured in
    # turns (segments of THROUGHPUT_SEGMENT_SECONDS, the order swapped every round): the
    # host's speed drifts by up to 2x within minutes, and measuring one server after the
    # other put that drift into the ratio (2.05x and 1.07x, one run each, on the same code).
    servers = {
        w: start_function({"PYTHONHASHSEED": "0"}, workers=w) for w in sorted({1, processes})
    }
    try:
        channels = {
            w: grpc.insecure_channel(address, options=_BIG) for w, (_, address) in servers.items()
        }
        calls_of = {w: ch.unary_unary(METHOD) for w, ch in channels.items()}
        for w in servers:
            _in_flight(calls_of[w], [cache_steady], 1.0, 8)  # warm every process
        for client in used:
            totals = _throughput_in_turns(
                client, servers, calls_of, go_binary, files["cache"], seconds
            )
            for w, t in totals.items():
                calls = max(1, t["calls"])
                cpu = {
                    "acceptor": round(t["acceptor"] * 1e3 / calls, 2),
                    "compute": round(t["compute"] * 1e3 / calls, 2),
                    "client": round(t["client"] * 1e3 / calls, 2),
                }
                rate = t["calls"] / t["seconds"]
                out.setdefault(client, {})[f"cpu_ms_per_call_{w}"] = cpu
                out.setdefault(client, {})[f"calls_per_second_{w}"] = round(rate, 1)
                out[client][f"calls_per_second_{w}_by_round"] = t["by_round"]
                if client == "python":
                    out[f"calls_per_second_{w}"] = round(rate, 1)
                print(f"serving: {client} client, {w} process(es), 8 in flight: "
                      f"{rate:.1f} calls/s (rounds {t['by_round']}), CPU ms per call {cpu} "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
        call = calls_of[1]
        cases = (("ModelReplica small", small), ("ModelCache 1000", cache_steady))
        for label, data in cases:
            g = statistics.median(_times(lambda d=data, c=call: c(d, timeout=60), 31))
            local = statistics.median(_times(lambda d=data: runner.run_bytes(d), 31))
            out.setdefault("handoff_ms", {})[label] = {
                "grpc_ms": round(g * 1e3, 2),
                "in_process_ms": round(local * 1e3, 2),
                "handoff_ms": round((g - local) * 1e3, 2),
            }
            print(f"serving: hand-off {label}: {out['handoff_ms'][label]}")
        for ch in channels.values():
            ch.close()
    finally:
        for proc, _ in servers.values():
            proc.terminate()
        for proc, _ in servers.values():
            proc.wait(timeout=60)
    if processes > 1:
        for client in used:
            got = out[client]
            got["scaling"] = round(
                got[f"calls_per_second_{processes}"] / got["calls_per_second_1"], 2
            )
            got["scaling_bounds"] = scaling_bounds(
                processes, got["cpu_ms_per_call_1"], got[f"cpu_ms_per_call_{processes}"]
            )
            print(f"serving: {client} client, throughput scaling 1 -> {processes}: "
                  f"{got['scaling']}x, bounds {got['scaling_bounds']}", flush=True)  # fmt: skip
        out["scaling"] = out["python"]["scaling"] if "python" in out else None
        out["compute_alone"] = compute_alone(processes, seconds, cache_steady)
        print(f"serving: compute alone (no gRPC): {out['compute_alone']}", flush=True)

    # Isolation: small calls while a 5,000-cluster call and a runaway are in flight, with
    # the load client anywhere, then kept off the slow lane's CPUs (where Crossplane's
    # client, on another node, never waits behind the function's slow calls).
    lane = slow_lane(
        os.sched_getaffinity(0), cpu_limit(), zlib.crc32(socket.gethostname().encode())
    )
    off_lane = tuple(c for c in sorted(os.sched_getaffinity(0)) if c not in lane)
    placements = [("", None)] + ([(", client off the lane", off_lane)] if lane else [])
    for (label, env), (where, cpus) in itertools.product(
        (
            ("cost limit", {}),
            # The default compute deadline (10 s) outlasts the measure (0.5 s, then the
            # small calls: about 2 s for 1,000), so the runaway is in flight throughout.
            ("deadline only", {"MODELPLANE_SELECTOR_COST_LIMIT": "1000000000"}),
        ),
        placements,
    ):  # fmt: skip
        # A fresh server per client: a runaway that ran past its deadline is answered
        # from memory for 5 minutes (function.edge.pool), which would favour the second.
        for client in used:
            proc, address = start_function({"PYTHONHASHSEED": "0", **env}, workers=processes)
            try:
                with grpc.insecure_channel(address, options=_BIG) as ch, _client_on(cpus):
                    call = ch.unary_unary(METHOD)
                    if client == "python":
                        idle, loaded = _loaded_latencies(call, small, (big, runaway), latency_calls)
                    else:
                        assert go_binary is not None
                        bg = f"{files['big']},{files['runaway']}"
                        r = _go(go_binary, address, "latency", "-n", str(latency_calls),
                                "-bg", bg, files["small"])  # fmt: skip
                        idle = [x / 1e3 for x in r["idle_ms"]]
                        loaded = [x / 1e3 for x in r["loaded_ms"]]
                    row = {"idle_p99_ms": _p(idle, 0.99), "loaded_p99_ms": _p(loaded, 0.99)}
                    row["ratio"] = round(row["loaded_p99_ms"] / row["idle_p99_ms"], 2)
                    out.setdefault(client, {}).setdefault("isolation", {})[label + where] = row
                    if client == "python":
                        out.setdefault("isolation", {})[label + where] = row
                    print(f"serving: {client} client, small ModelReplica p99 ({label}{where}): "
                          f"{row} (load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    tmp.cleanup()

    # Memory after many distinct XRs with 64 KiB pod templates.
    if distinct:
        base = parse(small)
        proc, address = start_function({"PYTHONHASHSEED": "0"}, workers=processes)
        try:
            with grpc.insecure_channel(address, options=_BIG) as ch:
                call = ch.unary_unary(METHOD)
                start = _tree_rss_mib(proc.pid)
                samples = []
                futures: list[Any] = []
                for i in range(distinct):
                    futures.append(call.future(_distinct_replica(base, i), timeout=300))
                    if len(futures) >= 8:
                        futures.pop(0).result()
                    if i % 5000 == 4999:
                        samples.append(_tree_rss_mib(proc.pid))
                for f in futures:
                    f.result()
                end = _tree_rss_mib(proc.pid)
                out["memory"] = {
                    "calls": distinct,
                    "rss_start_mib": start,
                    "rss_every_5000_mib": samples,
                    "rss_end_mib": end,
                }
                print(f"serving: process tree RSS over {distinct} distinct XRs: {out['memory']}")
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    if fuzz_cases:
        from benchmarks.fuzz import fuzz

        out["fuzz"] = fuzz(fuzz_cases, processes)
        print(f"serving: fuzz {out['fuzz']}")
    # The machine is shared: how busy it was says how far the figures can be trusted.
    out["load_average_at_end"] = os.getloadavg()
    print(f"serving: load average {out['load_average_at_start']} -> {out['load_average_at_end']}")
    return out


# One turn of the interleaved throughput measure, seconds.
THROUGHPUT_SEGMENT_SECONDS = 1.0


def _throughput_in_turns(
    client: str,
    servers: dict[int, tuple[Any, str]],
    calls_of: dict[int, Any],
    go_binary: str | None,
    request_file: str,
    seconds: float,
) -> dict[int, dict[str, Any]]:
    """Steady calls with 8 in flight on one channel to each server of ``servers``
    (compute processes -> (acceptor process, address)), ``seconds`` per server in
    segments of :data:`THROUGHPUT_SEGMENT_SECONDS` taken in turns, the order reversed
    every round, so that a drift of the shared host's speed falls on every server alike.

    Returns, per server: ``calls``, ``seconds`` (measured), CPU seconds spent by its
    ``acceptor``, its ``compute`` processes and the ``client``, and ``by_round`` (calls
    per second of each segment, to show the drift).
    """
    rounds = max(1, round(seconds / THROUGHPUT_SEGMENT_SECONDS))
    order = sorted(servers)
    totals: dict[int, dict[str, Any]] = {
        w: {"calls": 0, "seconds": 0.0, "acceptor": 0.0, "compute": 0.0, "client": 0.0,
            "by_round": []}
        for w in order
    }  # fmt: skip
    data = Path(request_file).read_bytes()
    for r in range(rounds):
        for w in order if r % 2 == 0 else reversed(order):
            proc, address = servers[w]
            pids = _server_pids(proc.pid)
            before = {p: _cpu_seconds(p) for p in pids}
            if client == "python":
                mine = time.process_time()
                calls = _in_flight(calls_of[w], [data], THROUGHPUT_SEGMENT_SECONDS, 8)
                client_cpu, took = time.process_time() - mine, THROUGHPUT_SEGMENT_SECONDS
            else:
                assert go_binary is not None
                args = ("-inflight", "8", "-warm", "0", "-seconds", str(THROUGHPUT_SEGMENT_SECONDS))
                report, client_cpu = _go_timed(go_binary, address, "throughput", *args,
                                               request_file)  # fmt: skip
                calls, took = report["calls"], report["seconds"]
            used = {p: _cpu_seconds(p) - t for p, t in before.items()}
            t = totals[w]
            t["calls"] += calls
            t["seconds"] += took
            t["acceptor"] += used[proc.pid]
            t["compute"] += sum(v for p, v in used.items() if p != proc.pid)
            t["client"] += client_cpu
            t["by_round"].append(round(calls / took, 1))
    return totals


def scaling_bounds(
    processes: int, one: dict[str, float], many: dict[str, float]
) -> dict[str, float]:
    """The most the throughput can scale, from the CPU each process spent per call
    (``cpu_ms_per_call_*`` of :func:`serving`: ``compute``, ``acceptor``, ``client``).

    With 1 compute process the call's own CPU ``T`` (``one["compute"]``) bounds the
    rate, 1/T calls per second, while the acceptor and the client use the other cores.
    With ``processes`` processes on as many cores, shared with the acceptor and the
    client, the rate is at most cores / (CPU of every process per call). So:

    - ``from_cpu``: processes x T / (compute + acceptor + client, all with ``processes``);
    - ``no_acceptor_no_slowdown``: processes x T / (T + client with ``processes``): an
      acceptor that cost nothing and a call that ran as fast with every core busy as
      alone; the ceiling of any server on a machine that its load client shares.
    """
    t = one["compute"]
    spent = many["compute"] + many["acceptor"] + many["client"]
    return {
        "from_cpu": round(processes * t / spent, 2) if spent else 0.0,
        "no_acceptor_no_slowdown": round(processes * t / (t + many["client"]), 2) if t else 0.0,
    }


def _compose_loop(data: bytes, orders: Any, results: Any) -> None:
    """One process of :func:`compute_alone`: compose ``data`` for each number of seconds
    read from ``orders`` (None: stop), answering (calls, wall seconds, CPU seconds)."""
    _quiet()
    runner = FunctionRunner()
    for _ in range(50):
        runner.run_bytes(data)
    results.put(None)
    while (seconds := orders.get()) is not None:
        calls, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < seconds:
            runner.run_bytes(data)
            calls += 1
        results.put((calls, time.perf_counter() - t0, time.process_time() - c0))


def compute_alone(processes: int, seconds: float, data: bytes) -> dict[str, Any]:
    """Calls per second of ``processes`` processes that each compose ``data`` in a loop,
    against one: no gRPC, no acceptor, no client. What the machine gives the compute
    itself when every core composes (the scaling :func:`serving` measures cannot be more,
    and the acceptor and the client take their CPU from it). Measured in turns, as
    :func:`_throughput_in_turns` measures the servers."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    workers = [(ctx.Queue(), ctx.Queue()) for _ in range(processes)]
    procs = [ctx.Process(target=_compose_loop, args=(data, o, r)) for o, r in workers]
    for p in procs:
        p.start()
    totals = {n: [0, 0.0, 0.0] for n in sorted({1, processes})}  # calls, calls/s, CPU
    try:
        for _, r in workers:
            r.get(timeout=120)
        rounds = max(1, round(seconds / THROUGHPUT_SEGMENT_SECONDS))
        for i in range(rounds):
            for n in sorted(totals) if i % 2 == 0 else sorted(totals, reverse=True):
                for o, _ in workers[:n]:
                    o.put(THROUGHPUT_SEGMENT_SECONDS)
                got = [r.get(timeout=120) for _, r in workers[:n]]
                totals[n][0] += sum(c for c, _, _ in got)
                totals[n][1] += sum(c / w for c, w, _ in got) / rounds
                totals[n][2] += sum(u for _, _, u in got)
    finally:
        for o, _ in workers:
            o.put(None)
        for p in procs:
            p.join(timeout=60)
    out: dict[str, Any] = {}
    for n, (calls, rate, cpu) in totals.items():
        out[f"calls_per_second_{n}"] = round(rate, 1)
        out[f"cpu_ms_per_call_{n}"] = round(cpu * 1e3 / max(1, calls), 2)
    if processes > 1:
        out["scaling"] = round(out[f"calls_per_second_{processes}"] / out["calls_per_second_1"], 2)
    return out


def soak(calls: int = 10_000, n: int = 100) -> dict[str, Any]:
    """Resident memory every 1,000 of ``calls`` in-process calls (ModelCache, n clusters)."""
    _quiet()
    runner = FunctionRunner()
    data = SCENARIOS["ModelCache"](n)[1]
    samples = []
    for i in range(calls):
        runner.run(fnv1.RunFunctionRequest.FromString(data)).SerializeToString(deterministic=True)
        if i % 1000 == 999:
            gc.collect()
            samples.append(round(_rss_mib(), 1))
    growth = samples[-1] - samples[0]
    print(f"soak {calls} calls: RSS MiB every 1000 calls {samples}; growth {growth:.1f} MiB")
    return {"calls": calls, "rss_mib": samples, "growth_mib": round(growth, 1)}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--sizes", default="10,100,1000,5000")
    p.add_argument("--kinds", default=",".join(SCENARIOS))
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--json", default="benchmarks/results/latest.json")
    p.add_argument("--no-grpc", action="store_true")
    p.add_argument("--throughput", action="store_true")
    p.add_argument("--throughput-seconds", type=float, default=5.0)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--soak", action="store_true")
    p.add_argument(
        "--serving",
        action="store_true",
        help="the issue-14 figures over ONE channel (throughput 1 vs --workers processes, "
        "hand-off, isolation, memory, fuzz)",
    )
    p.add_argument("--distinct", type=int, default=20_000)
    p.add_argument(
        "--latency-calls",
        type=int,
        default=1000,
        help="small calls measured idle and loaded for --serving's isolation p99",
    )
    p.add_argument("--fuzz", type=int, default=10_000)
    p.add_argument(
        "--clients",
        default="python,go",
        help="load clients for --serving: python (grpcio) and/or go (benchmarks/grpcload, "
        "built with the Go toolchain; skipped with a line when Go is absent)",
    )
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in SCENARIOS]
    if unknown:
        print(f"unknown kinds: {unknown}; known: {list(SCENARIOS)}", file=sys.stderr)
        return 2
    report = run_benchmark(sizes, kinds, args.repeat, not args.no_grpc) if sizes else {}
    if args.serving:
        report["serving"] = serving(
            args.workers,
            args.throughput_seconds,
            args.distinct,
            args.fuzz,
            tuple(c for c in args.clients.split(",") if c),
            args.latency_calls,
        )
    if args.throughput:
        report["throughput"] = throughput(args.workers, args.throughput_seconds)
    if args.soak:
        report["soak"] = soak()
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, sort_keys=True))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
