"""Deterministic output: the same request gives the same bytes, in every call and process.

For every kind whose composer exists, two requests (a first reconcile with every
requirement resolved, and the reconcile after it, with the children observed as
provider-kubernetes reports them) are sent

- twice in-process: ``SerializeToString(deterministic=True)`` must be equal;
- to two ``python -m function`` processes started with different
  ``PYTHONHASHSEED`` values (so set and dict-order leaks show up), through a
  channel whose response deserializer is the identity, so the raw wire bytes are
  compared -- and compared with the in-process bytes at the same clock second.

The servers read the wall clock (whole seconds), so a pair of calls counts only
when it started and ended within one second; it is retried otherwise.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.composers import KINDS
from function.edge.runner import FunctionRunner
from tests.support.harness import Clock, run
from tests.support.reliability import evolve, missing_reason, seeds, settle, start_process
from tests.support.secret_guard import leaks

METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"


def requests_for(kind: str) -> list[fnv1.RunFunctionRequest]:
    """A first and a second reconcile of every seed of ``kind``."""
    out = []
    for seed in seeds(kind):
        req, rsp = settle(seed)
        out.append(req)
        req2, _ = settle(seed, observed=evolve(rsp))
        out.append(req2)
    return out


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[tuple[str, grpc.UnaryUnaryMultiCallable]]]:
    """Two function processes with different hash seeds, and raw-bytes callers."""
    procs = []
    callers = []
    channels = []
    logs = []
    try:
        for seed in ("1", "2"):
            log = tmp_path_factory.mktemp("fn") / "stderr"
            logs.append(log)
            proc, address = start_process(log, env={"PYTHONHASHSEED": seed})
            procs.append(proc)
            ch = grpc.insecure_channel(
                address, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
            )
            channels.append(ch)
            raw = ch.unary_unary(
                METHOD,
                request_serializer=lambda r: r.SerializeToString(deterministic=True),
                response_deserializer=None,  # identity: the raw response bytes
            )
            callers.append((address, raw))
        yield callers
    finally:
        for ch in channels:
            ch.close()
        for proc in procs:
            proc.terminate()
        for proc, log in zip(procs, logs, strict=False):
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
                continue
            assert proc.returncode == 0, log.read_text()[-2000:]
            assert not leaks(log.read_bytes()), "a function process logged the fake token"


@pytest.mark.parametrize("kind", list(KINDS))
def test_same_request_same_bytes_in_process(kind: str) -> None:
    if missing_reason(kind):
        pytest.skip(missing_reason(kind))
    for req in requests_for(kind):
        a = run(req).SerializeToString(deterministic=True)
        b = run(req).SerializeToString(deterministic=True)
        assert a == b


def _pair(
    servers: list[tuple[str, grpc.UnaryUnaryMultiCallable]], req: fnv1.RunFunctionRequest
) -> tuple[list[bytes], datetime.datetime]:
    """Send ``req`` to each server twice within one wall-clock second."""
    for _ in range(10):
        start = time.time()
        if start % 1 > 0.7:  # too close to the next second: wait for it
            time.sleep(1 - start % 1 + 0.01)
            start = time.time()
        got = [call(req, timeout=30) for _, call in servers for _ in range(2)]
        if int(time.time()) == int(start):
            second = datetime.datetime.fromtimestamp(int(start), datetime.UTC)
            return got, second
    raise AssertionError("could not fit the calls in one wall-clock second")


@pytest.mark.parametrize("kind", list(KINDS))
def test_same_request_same_bytes_across_processes(
    kind: str, servers: list[tuple[str, grpc.UnaryUnaryMultiCallable]]
) -> None:
    if missing_reason(kind):
        pytest.skip(missing_reason(kind))
    for i, req in enumerate(requests_for(kind)):
        got, second = _pair(servers, req)
        assert all(isinstance(g, bytes) and g for g in got)
        assert len(set(got)) == 1, (
            f"{kind} request {i}: responses differ between calls or processes "
            f"({[len(g) for g in got]} bytes)"
        )
        # The in-process equivalent of the server: what RunFunction's handler sends.
        local = FunctionRunner(clock=Clock(second)).run_wire(req)
        assert got[0] == local, f"{kind} request {i}: wire bytes differ from in-process bytes"
        parsed = fnv1.RunFunctionResponse.FromString(got[0])
        assert parsed.meta.tag == req.meta.tag
