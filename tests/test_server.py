"""The server process: workers sharing a port, health, size guard, unknown kinds."""

from __future__ import annotations

import asyncio
import signal
import socket

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from grpc_health.v1 import health_pb2, health_pb2_grpc

from function.edge import runner as runner_mod
from function.edge.server import ServerConfig, build_server, default_processes
from function.render import start_function
from tests.support.cache_tree import shard_request
from tests.support.harness import fatal, request, results, run


def _cache_request(n: int) -> fnv1.RunFunctionRequest:
    # The per-cluster fan-out: a ModelCacheShard holding n clusters (n hydrations).
    return shard_request(n)


def test_default_processes_is_bounded():
    assert 1 <= default_processes() <= 8


@pytest.mark.parametrize(
    ("cpus", "memory", "budget", "want"),
    [
        (16, None, 64, 2),  # no memory limit: sized for 512 MiB (found by a review: 8)
        (16, 2048.0, 64, 8),  # the example runtime config's 2 GiB: the CPUs, at most 8
        (16, 1024.0, 64, 6),
        (4, 2048.0, 64, 4),  # the CPUs bound it
        (16, 512.0, 8, 4),  # a smaller budget leaves room for more
        (16, 100.0, 64, 1),  # at least 1, whatever the memory
        (1, None, 64, 1),
    ],
)  # fmt: skip
def test_default_processes_fit_the_memory(monkeypatch, cpus, memory, budget, want):
    from function.edge import pool

    monkeypatch.setattr(pool, "usable_cpus", lambda: cpus)
    assert default_processes(budget, memory) == want


@pytest.mark.parametrize(
    ("files", "want"),
    [
        ({"memory.max": "536870912\n"}, 512.0),  # cgroup v2
        ({"memory.max": "max\n"}, None),
        ({"memory/memory.limit_in_bytes": "1073741824\n"}, 1024.0),  # cgroup v1
        ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1 unlimited
        ({"memory.max": "junk\n"}, None),
        ({}, None),
    ],
)  # fmt: skip
def test_the_cgroup_memory_limit_v2_or_v1(tmp_path, files, want):
    from function.edge.pool import memory_limit_mib

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert memory_limit_mib(str(tmp_path)) == want


def test_two_workers_share_the_port_and_stop_cleanly_on_sigterm():
    proc, address = start_function(workers=2)
    try:
        with grpc.insecure_channel(address) as ch:
            health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""))
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            rsp = grpcv1.FunctionRunnerServiceStub(ch).RunFunction(_cache_request(3), timeout=30)
            assert len(rsp.desired.resources) == 3
            # v1beta1 is served too, with the same answer.
            beta_req = fnv1beta1.RunFunctionRequest.FromString(
                _cache_request(3).SerializeToString()
            )
            beta = grpcv1beta1.FunctionRunnerServiceStub(ch).RunFunction(beta_req, timeout=30)
            assert beta.SerializeToString(deterministic=True) == rsp.SerializeToString(
                deterministic=True
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0


def test_unknown_kind_is_a_fatal_result_not_a_crash():
    req = request({"apiVersion": "example.org/v1", "kind": "XBucket", "metadata": {"name": "b"}})
    (msg,) = fatal(run(req))
    assert "does not serve XBucket (example.org/v1)" in msg


def test_response_over_4mib_is_a_fatal_result_that_says_what_to_do(monkeypatch):
    monkeypatch.setattr(runner_mod, "MAX_RESPONSE_BYTES", 64 * 1024)
    rsp = run(_cache_request(300))
    (msg,) = fatal(rsp)
    assert "MiB" in msg and "4 MiB" in msg and "split the XR" in msg
    # It names the children and the largest, not a cause it cannot know (review 16b F1).
    assert "300 composed resources, the largest 'hydration-gpu-" in msg and "KiB" in msg, msg
    assert not rsp.desired.resources


@pytest.mark.parametrize("n", [1000])
def test_a_large_fleet_fits_in_crossplane_limits(n):
    rsp = run(_cache_request(n))
    assert not fatal(rsp), results(rsp)
    assert rsp.ByteSize() < runner_mod.MAX_RESPONSE_BYTES


def test_spliced_wire_entries_equal_copied_bodies():
    """The runner's two ways of encoding a desired child give the same response."""
    import datetime

    from function.core.outcome import Desired, Outcome
    from function.edge.codec import state_entry
    from function.edge.runner import FunctionRunner

    out_a, out_b, out_c = Outcome(), Outcome(), Outcome()
    for i in range(3):
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}}
        from google.protobuf.struct_pb2 import Struct

        s = Struct()
        s.update(body)
        out_a.resources[f"cm-{i}"] = Desired(s, i % 2 == 0)
        out_b.resources[f"cm-{i}"] = Desired(s, i % 2 == 0, state_entry(f"cm-{i}", s, i % 2 == 0))
        out_c.resources[f"cm-{i}"] = Desired(s.SerializeToString(deterministic=True), i % 2 == 0)
    req = _cache_request(1)
    runner = FunctionRunner(clock=lambda: datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    a = runner.encode(req, out_a).SerializeToString(deterministic=True)
    b = runner.encode(req, out_b).SerializeToString(deterministic=True)
    c = runner.encode(req, out_c).SerializeToString(deterministic=True)
    assert a == b == c


@pytest.mark.parametrize("how", ["struct", "bytes", "wire"])
def test_an_earlier_steps_connection_details_survive_every_way_of_encoding(how):
    """A child an earlier pipeline step desired keeps what that step set besides the body
    (``connection_details``), whichever way the composer hands its body over."""
    import datetime

    from google.protobuf.struct_pb2 import Struct

    from function.core.outcome import Desired, Outcome
    from function.edge.codec import state_entry
    from function.edge.runner import FunctionRunner

    req = _cache_request(1)
    req.desired.resources["cm"].connection_details["prior"] = b"from-an-earlier-step"
    req.desired.resources["cm"].resource.update({"kind": "Old", "stale": True})
    body = Struct()
    body.update({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}})
    d = {
        "struct": Desired(body, True),
        "bytes": Desired(body.SerializeToString(deterministic=True), True),
        "wire": Desired(body, True, state_entry("cm", body, True)),
    }[how]
    out = Outcome()
    out.resources["cm"] = d
    runner = FunctionRunner(clock=lambda: datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    got = runner.encode(req, out).desired.resources["cm"]
    assert dict(got.connection_details) == {"prior": b"from-an-earlier-step"}
    assert got.resource == body
    assert got.ready == fnv1.READY_TRUE


@pytest.mark.parametrize("ready", [True, False, None])
@pytest.mark.parametrize(
    "body",
    [
        {},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
        {"data": {"k": "v" * 300}, "n": [1.5, True, None, {"x": []}]},  # multi-byte lengths
    ],
)
def test_resource_entry_equals_state_entry(body, ready):
    """A serialized body spliced by concatenation gives the bytes protobuf itself writes."""
    from google.protobuf.struct_pb2 import Struct

    from function.edge.codec import resource_entry, state_entry

    s = Struct()
    s.update(body)
    name = "child-" + "n" * 130  # a key longer than one varint byte
    got = resource_entry(name, s.SerializeToString(deterministic=True), ready)
    assert got == state_entry(name, s, ready)


def test_wire_bytes_parse_to_the_same_response_as_the_message():
    """run_wire appends pre-encoded children as a second ``desired`` field; a protobuf
    parser (Crossplane's included) merges it: the same response as run()."""
    from function.edge import codec
    from function.edge import runner as r

    req = _cache_request(50)
    fn = r.FunctionRunner()
    data = fn.run_wire(req)
    rsp = fn.run(req)
    assert fnv1.RunFunctionResponse.FromString(data) == rsp
    assert len(rsp.desired.resources) == 50
    assert fn.run_wire(req) == data  # deterministic
    assert codec.desired_suffix([]) == b""


def test_max_recv_of_2_gib_is_capped_to_what_grpc_accepts():
    # 2048 MiB is 2^31 bytes, one past gRPC's C int: the option is capped, not overflowed.
    cfg = ServerConfig(address="127.0.0.1:0", insecure=True, max_recv_mb=2048)

    async def serve_once() -> bytes:
        server, port = build_server(runner_mod.FunctionRunner(), cfg)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                rsp = await grpcv1.FunctionRunnerServiceStub(ch).RunFunction(
                    _cache_request(2), timeout=30
                )
                return rsp.SerializeToString()
        finally:
            await server.stop(None)

    rsp = fnv1.RunFunctionResponse.FromString(asyncio.run(serve_once()))
    assert len(rsp.desired.resources) == 2


def test_grpc_port_in_use_is_an_error_naming_the_flag():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"

        async def bind() -> None:
            build_server(runner_mod.FunctionRunner(), ServerConfig(address=address, insecure=True))

        with pytest.raises(RuntimeError) as e:  # BindError, a RuntimeError as gRPC raises
            asyncio.run(bind())
    assert f"--address (ADDRESS) {address}: " in str(e.value)
