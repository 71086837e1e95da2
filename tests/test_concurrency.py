"""No shared state: 200 concurrent RunFunction calls of mixed kinds (issue 9).

Every request of every kind whose composer exists (first and second reconciles
of each seed, see ``tests/support/reliability.py``) is first sent sequentially over a real
gRPC channel to one server; then :data:`CONCURRENT_CALLS` calls cycling through
the same requests are put in flight at once against the same server. Every call
must succeed and its response must equal, byte for byte, the sequential response
to the same request. The server's clock is fixed, so only shared state could
make them differ.

A second test does the same against a ``python -m function`` process (its own
event loop and thread pool, the wall clock), comparing calls made in the same
second.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from tests.support.harness import GrpcFunction
from tests.support.reliability import available_kinds, evolve, seeds, settle, start_process
from tests.support.secret_guard import leaks

CONCURRENT_CALLS = 200
METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"


def mixed_requests() -> list[fnv1.RunFunctionRequest]:
    """First and second reconciles of every seed of every kind, each with its own tag."""
    out = []
    for kind in available_kinds():
        for seed in seeds(kind):
            req, rsp = settle(seed)
            req2, _ = settle(seed, observed=evolve(rsp))
            for r in (req, req2):
                r.meta.tag = f"{seed.id}#{len(out)}"
                out.append(r)
    return out


def _raw(channel: grpc.Channel) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(
        METHOD,
        request_serializer=lambda r: r.SerializeToString(deterministic=True),
        response_deserializer=None,
    )


def test_200_concurrent_calls_equal_their_sequential_responses() -> None:
    reqs = mixed_requests()
    assert len({r.observed.composite.resource["kind"] for r in reqs}) == len(available_kinds())
    with GrpcFunction() as fn:
        assert fn.channel is not None
        call = _raw(fn.channel)
        sequential = [call(r, timeout=60) for r in reqs]
        order = [i % len(reqs) for i in range(CONCURRENT_CALLS)]
        futures = [call.future(reqs[i], timeout=120) for i in order]
        results = [f.result() for f in futures]
    assert len(results) == CONCURRENT_CALLS
    for n, (i, got) in enumerate(zip(order, results, strict=True)):
        assert got == sequential[i], f"concurrent call {n} ({reqs[i].meta.tag}) differs"
    # Mixed means mixed: every kind was in flight.
    kinds = {reqs[i].observed.composite.resource["kind"] for i in order}
    assert kinds == set(available_kinds())


def test_200_concurrent_calls_against_a_function_process(tmp_path: Path) -> None:
    reqs = mixed_requests()
    log = tmp_path / "stderr"
    proc, address = start_process(log)
    try:
        with grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        ) as ch:
            call = _raw(ch)
            for _ in range(10):
                start = time.time()
                if start % 1 > 0.3:
                    time.sleep(1 - start % 1 + 0.01)
                    start = time.time()
                sequential = [call(r, timeout=60) for r in reqs]
                order = [i % len(reqs) for i in range(CONCURRENT_CALLS)]
                futures = [call.future(reqs[i], timeout=120) for i in order]
                results = [f.result() for f in futures]
                if int(time.time()) == int(start):
                    break
            else:  # pragma: no cover - a very slow machine
                pytest.skip("this machine cannot fit 200 calls in one wall-clock second")
        for n, (i, got) in enumerate(zip(order, results, strict=True)):
            assert got == sequential[i], f"concurrent call {n} ({reqs[i].meta.tag}) differs"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()[-2000:]
    assert not leaks(log.read_bytes())
