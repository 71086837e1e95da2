"""Graceful stop: SIGTERM under load loses no call in flight (issue 9).

A ``python -m function`` process gets :data:`IN_FLIGHT` slow calls at once (a
ModelCacheShard of :data:`CLUSTERS` clusters, each call a few hundred
milliseconds of work, so most are still queued or running when the signal
arrives). SIGTERM is sent as soon as the first response is back. Then:

- every call sent before the signal completes with a full, correct response;
- a call sent after the signal is either still served in full (the server drains
  the calls that arrive while Kubernetes removes its endpoint) or refused cleanly
  (UNAVAILABLE), never cut off half-way;
- the process exits 0 within the grace period it was given.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tests.support.cache_tree import shard_request
from tests.support.harness import fatal
from tests.support.secret_guard import leaks

CLUSTERS = 3_000
IN_FLIGHT = 16
GRACE_SECONDS = 30.0


def slow_request(i: int) -> fnv1.RunFunctionRequest:
    # The per-cluster fan-out (a ModelCacheShard of CLUSTERS hydrations): slow enough.
    return shard_request(CLUSTERS, tag=f"load-{i}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_under_load_completes_calls_in_flight_and_exits_0(tmp_path: Path) -> None:
    address = f"127.0.0.1:{_free_port()}"
    log = tmp_path / "stderr"
    env = {k: v for k, v in os.environ.items() if k != "TLS_SERVER_CERTS_DIR"}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "function", "--insecure", "--address", address,
             "--grace-seconds", str(GRACE_SECONDS),
             "--metrics-address", f"127.0.0.1:{_free_port()}"],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        with grpc.insecure_channel(address, options=options) as ch:
            grpc.channel_ready_future(ch).result(timeout=20)
            stub = grpcv1.FunctionRunnerServiceStub(ch)
            reqs = [slow_request(i) for i in range(IN_FLIGHT)]
            started = time.monotonic()
            futures = [stub.RunFunction.future(r, timeout=120) for r in reqs]
            first = next(iter(grpc_futures_done(futures)))
            assert first.exception() is None, first.exception()
            done_before = sum(f.done() for f in futures)
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            responses = [f.result(timeout=GRACE_SECONDS + 30) for f in futures]
            # A call after the signal: served in full while draining, or refused cleanly.
            late_ok = False
            with grpc.insecure_channel(address, options=options) as late:
                try:
                    rsp = grpcv1.FunctionRunnerServiceStub(late).RunFunction(reqs[0], timeout=30)
                    late_ok = not fatal(rsp) and len(rsp.desired.resources) == CLUSTERS
                except grpc.RpcError as e:
                    late_ok = e.code() == grpc.StatusCode.UNAVAILABLE
        rc = proc.wait(timeout=GRACE_SECONDS + 30)
        exited = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert done_before < IN_FLIGHT, "the load finished before SIGTERM; make the calls slower"
    assert len(responses) == IN_FLIGHT
    for r, rsp in zip(reqs, responses, strict=True):
        assert rsp.meta.tag == r.meta.tag
        assert not fatal(rsp)
        assert len(rsp.desired.resources) == CLUSTERS
    assert late_ok, "a call after SIGTERM was cut off or answered wrongly"
    assert exited - signalled <= GRACE_SECONDS + 5, (
        f"exited {exited - signalled:.1f}s after SIGTERM (grace {GRACE_SECONDS}s)"
    )
    assert not leaks(text)
    print(
        f"graceful stop: {IN_FLIGHT} calls in flight ({IN_FLIGHT - done_before} unfinished at "
        f"SIGTERM, {signalled - started:.2f}s after the first), all completed; exit 0 "
        f"{exited - signalled:.2f}s after the signal"
    )


def grpc_futures_done(futures: list[grpc.Future]) -> list[grpc.Future]:
    """Block until at least one of ``futures`` is done; the done ones."""
    while True:
        done = [f for f in futures if f.done()]
        if done:
            return done
        time.sleep(0.005)


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        out += [int(c) for c in task.read_text().split()]
    return out


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_sigterm_stops_the_process_when_stderr_is_a_closed_pipe() -> None:
    # The "stopping" log line cannot be written (the pipe's reader has gone): the
    # process stops all the same, its compute processes too, within the grace period.
    grace = 2.0
    env = {k: v for k, v in os.environ.items() if k != "TLS_SERVER_CERTS_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "function", "--insecure",
         "--address", f"127.0.0.1:{_free_port()}", "--metrics-address=",
         "--processes", "1", "--grace-seconds", str(grace)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if '"serving"' in line or not line:
                break
        assert '"serving"' in line, line
        children = _children(proc.pid)
        assert children, "no compute process"
        proc.stderr.close()  # the reader goes: the next line written is a BrokenPipeError
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        try:
            rc = proc.wait(timeout=grace + 5)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"running {grace + 5}s after SIGTERM (grace {grace}s)") from None
        assert rc == 0, rc
        assert time.monotonic() - signalled <= grace + 5
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(_gone(c) for c in children):
            time.sleep(0.05)
        assert all(_gone(c) for c in children), "a compute process outlived the server"
    finally:
        if proc.poll() is None:
            kids = _children(proc.pid)
            proc.kill()
            proc.wait()
            for c in kids:
                with contextlib.suppress(OSError):
                    os.kill(c, signal.SIGKILL)
