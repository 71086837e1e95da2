"""Opt-in OpenTelemetry tracing, exported to a real OTLP/HTTP receiver (issue 7).

The receiver is an ``http.server`` on 127.0.0.1 that decodes what the function's
OTLP/HTTP exporter sends (``ExportTraceServiceRequest`` protobuf, from
opentelemetry-proto). Calls go over a real gRPC channel, with the W3C
``traceparent`` in the call's metadata as Crossplane sends it.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import os
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from prometheus_client import CollectorRegistry

from function import composers
from function.edge.runner import FunctionRunner
from function.ops import tracing
from function.ops.metrics import Metrics
from function.ops.settings import Settings, load_settings
from tests.support.fixtures import cache_spec, inference_cluster
from tests.support.harness import NAMESPACE, Clock, GrpcFunction, request, xr

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
SPAN_KIND_SERVER = 2
STATUS_ERROR = 2


class Receiver:
    """A minimal OTLP/HTTP traces endpoint that keeps every decoded export request."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                msg = trace_service_pb2.ExportTraceServiceRequest()
                msg.ParseFromString(body)
                receiver.requests.append(msg)
                receiver.paths.append(self.path)
                receiver.content_types.append(self.headers.get("Content-Type", ""))
                out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every received span with its resource attributes."""
        out = []
        for req in self.requests:
            for rs in req.resource_spans:
                resource = attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    out.extend((resource, s) for s in ss.spans)
        return out


def _value(v: common_pb2.AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


OTEL_VARS = [
    v
    for f, info in Settings.model_fields.items()
    for v in info.validation_alias.choices  # type: ignore[union-attr]
    if v.startswith(("OTEL_", "MODELPLANE_OTEL"))
]


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch, receiver: Receiver) -> pytest.MonkeyPatch:
    for k in list(os.environ):
        if k.upper().startswith("OTEL_") or k.upper() in OTEL_VARS:
            monkeypatch.delenv(k)
    monkeypatch.setenv("MODELPLANE_OTEL_ENABLED", "true")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "function-modelplane-test")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,team=ml")
    return monkeypatch


def cache_request(tag: str = "tag-1") -> fnv1.RunFunctionRequest:
    return request(
        xr("ModelCache", "qwen-cache", cache_spec({"matchLabels": {"gpu": "h100"}})),
        required={"clusters": [inference_cluster("gpu-a", {"gpu": "h100"})], "replicas": []},
        tag=tag,
    )


def serve_and_call(
    reqs: list[tuple[fnv1.RunFunctionRequest, tuple[tuple[str, str], ...]]],
) -> tuple[tracing.Tracing, list[fnv1.RunFunctionResponse]]:
    """Serve a runner built from the environment's settings; call it; flush the spans."""
    settings = load_settings()
    traces = tracing.configure(settings)
    fn = GrpcFunction()
    fn.runner = FunctionRunner(
        settings, Clock(), tracing=traces, metrics=Metrics(CollectorRegistry())
    )
    with fn:
        assert fn.stub is not None
        rsps = [fn.stub.RunFunction(r, metadata=md, timeout=30) for r, md in reqs]
    traces.shutdown()  # exports what the batch processor holds
    return traces, rsps


def by_name(spans: list[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    out = {}
    for _, s in spans:
        assert s.name not in out, f"two spans named {s.name}"
        out[s.name] = s
    return out


def test_span_tree_attributes_and_parent_from_grpc_metadata(otel_env, receiver):
    _, (rsp,) = serve_and_call([(cache_request(), (("traceparent", TRACEPARENT),))])
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    assert set(receiver.content_types) == {"application/x-protobuf"}
    spans = receiver.spans()
    named = by_name(spans)
    assert set(named) == {"ModelCache", "decode", "compose", "encode"}

    root = named["ModelCache"]
    assert root.trace_id.hex() == TRACE_ID
    assert root.parent_span_id.hex() == PARENT_ID  # Crossplane's span is the parent
    assert root.kind == SPAN_KIND_SERVER
    assert root.status.code != STATUS_ERROR
    a = attrs(root.attributes)
    assert a["modelplane.xr.kind"] == "ModelCache"
    assert a["modelplane.xr.api_version"] == "modelplane.ai/v1alpha1"
    assert a["modelplane.xr.namespace"] == NAMESPACE
    assert a["modelplane.xr.name"] == "qwen-cache"
    assert a["modelplane.request.tag"] == "tag-1"
    assert a["modelplane.result.severities"] == [
        {fnv1.SEVERITY_NORMAL: "Normal", fnv1.SEVERITY_WARNING: "Warning"}[r.severity]
        for r in rsp.results
    ]
    assert a["rpc.system"] == "grpc"
    assert a["rpc.method"] == "RunFunction"

    for name in ("decode", "compose", "encode"):
        child = named[name]
        assert child.trace_id == root.trace_id
        assert child.parent_span_id == root.span_id, name
        assert root.start_time_unix_nano <= child.start_time_unix_nano
        assert child.end_time_unix_nano <= root.end_time_unix_nano
    assert (
        named["decode"].end_time_unix_nano
        <= named["compose"].start_time_unix_nano
        <= named["compose"].end_time_unix_nano
        <= named["encode"].start_time_unix_nano
    )

    resource = spans[0][0]
    assert resource["service.name"] == "function-modelplane-test"
    assert resource["deployment.environment"] == "test"
    assert resource["team"] == "ml"


def test_without_traceparent_a_new_trace_starts(otel_env, receiver):
    serve_and_call([(cache_request(), ())])
    root = by_name(receiver.spans())["ModelCache"]
    assert root.parent_span_id == b""
    assert root.trace_id.hex() != TRACE_ID


def test_default_service_name(otel_env, receiver):
    otel_env.delenv("OTEL_SERVICE_NAME")
    serve_and_call([(cache_request(), ())])
    assert {r["service.name"] for r, _ in receiver.spans()} == {"function-modelplane"}


def test_exception_recorded_with_error_status(otel_env, receiver, monkeypatch):
    def broken(inputs):
        raise KeyError("boom")

    monkeypatch.setitem(composers._loaded, "ModelCache", broken)
    _, (rsp,) = serve_and_call([(cache_request(), (("traceparent", TRACEPARENT),))])
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    named = by_name(receiver.spans())
    assert set(named) == {"ModelCache", "decode", "compose"}
    root, compose = named["ModelCache"], named["compose"]
    assert root.status.code == STATUS_ERROR
    assert "internal error composing ModelCache" in root.status.message
    assert attrs(root.attributes)["modelplane.result.severities"] == ["Fatal"]
    (event,) = [e for e in root.events if e.name == "exception"]
    assert attrs(event.attributes)["exception.type"] == "KeyError"
    assert compose.status.code == STATUS_ERROR
    assert any(e.name == "exception" for e in compose.events)


def test_invalid_spec_and_unknown_kind_are_errors(otel_env, receiver):
    bad = request(xr("ModelCache", "bad", {"source": "HuggingFace"}), tag="bad")
    pizza = request(xr("Pizza", "margherita", {}), tag="pizza")
    serve_and_call([(bad, ()), (pizza, ())])
    roots = {attrs(s.attributes)["modelplane.request.tag"]: s for _, s in receiver.spans()
             if s.kind == SPAN_KIND_SERVER}  # fmt: skip
    assert roots["bad"].name == "ModelCache"
    assert roots["bad"].status.code == STATUS_ERROR
    assert "spec.clusterSelector" in roots["bad"].status.message
    assert roots["pizza"].name == "Pizza"
    assert roots["pizza"].status.code == STATUS_ERROR
    assert "does not serve Pizza" in roots["pizza"].status.message


def test_sampler_from_environment_is_honoured(otel_env, receiver):
    otel_env.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    unsampled_parent = f"00-{TRACE_ID}-{PARENT_ID}-00"
    serve_and_call(
        [(cache_request(), ()), (cache_request("t2"), (("traceparent", unsampled_parent),))]
    )
    assert receiver.spans() == []


def test_parentbased_sampler_follows_an_unsampled_parent(otel_env, receiver):
    otel_env.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    unsampled_parent = f"00-{TRACE_ID}-{PARENT_ID}-00"
    serve_and_call(
        [
            (cache_request("dropped"), (("traceparent", unsampled_parent),)),
            (cache_request("kept"), (("traceparent", TRACEPARENT),)),
        ]
    )
    tags = {attrs(s.attributes).get("modelplane.request.tag") for _, s in receiver.spans()}
    assert tags == {"kept", None}  # None: the children, which carry no tag


# ---- disabled ---------------------------------------------------------------------------


def test_disabled_builds_nothing_even_with_invalid_exporter_variables(
    otel_env, receiver, monkeypatch
):
    otel_env.setenv("MODELPLANE_OTEL_ENABLED", "false")
    otel_env.setenv("OTEL_TRACES_SAMPLER", "sometimes")
    otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    otel_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "not-a-pair")

    import opentelemetry.exporter.otlp.proto.http.trace_exporter as exporter_mod
    import opentelemetry.sdk.trace as sdk_trace

    def forbidden(*a: Any, **kw: Any) -> None:
        raise AssertionError("tracing is off: nothing may be built")

    monkeypatch.setattr(exporter_mod.OTLPSpanExporter, "__init__", forbidden)
    monkeypatch.setattr(sdk_trace.TracerProvider, "__init__", forbidden)
    monkeypatch.setattr(sdk_trace.Tracer, "start_span", forbidden)

    seen: list[bool] = []
    real = composers.composer_for("modelplane.ai/v1alpha1", "ModelCache")

    def spy(inputs):
        seen.append(trace.get_current_span().get_span_context().is_valid)
        return real(inputs)

    monkeypatch.setitem(composers._loaded, "ModelCache", spy)
    traces, (rsp,) = serve_and_call([(cache_request(), (("traceparent", TRACEPARENT),))])
    assert traces is tracing.DISABLED
    assert traces.provider is None and not traces.enabled
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert seen == [False]  # no span was current while composing
    assert receiver.requests == []
    # The runner built from settings alone is disabled too.
    assert FunctionRunner(load_settings()).tracing is tracing.DISABLED


def test_enabled_current_span_while_composing(otel_env, receiver, monkeypatch):
    seen: list[str] = []
    real = composers.composer_for("modelplane.ai/v1alpha1", "ModelCache")

    def spy(inputs):
        ctx = trace.get_current_span().get_span_context()
        seen.append(format(ctx.trace_id, "032x"))
        return real(inputs)

    monkeypatch.setitem(composers._loaded, "ModelCache", spy)
    serve_and_call([(cache_request(), (("traceparent", TRACEPARENT),))])
    assert seen == [TRACE_ID]


def test_an_unreachable_collector_does_not_hold_the_exit_past_the_grace_period(
    tmp_path: Any,
) -> None:
    """Found by a trial: with tracing on and a collector that accepts connections but
    never answers, the compute processes waited for the exporter's retries (10 s) after
    SIGTERM, beyond the grace period. Spans still unsent are dropped instead."""
    import signal
    import socket
    import subprocess
    import time

    import grpc
    from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

    from tests.support.reliability import start_process

    with socket.socket() as hole:  # accepts (the backlog), never answers
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        env = {
            "MODELPLANE_OTEL_ENABLED": "true",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{hole.getsockname()[1]}",
            "OTEL_BSP_SCHEDULE_DELAY": "60000",  # the spans wait in the buffer for the exit
        }
        proc, address = start_process(
            tmp_path / "stderr", "--processes", "1", "--grace-seconds", "3",
            "--metrics-address=", env=env,
        )  # fmt: skip
        try:
            with grpc.insecure_channel(address) as ch:
                stub = grpcv1.FunctionRunnerServiceStub(ch)
                for i in range(5):
                    stub.RunFunction(cache_request(f"t-{i}"), timeout=30)
            stopped = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
            took = time.monotonic() - stopped
            assert took < 3 + tracing.SHUTDOWN_SECONDS + 2, took
        finally:
            if proc.poll() is None:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)


def test_a_deadline_on_compose_sets_its_span_to_error(otel_env, receiver):
    """Found by review 16d: the compute deadline (``CallDeadline``, a BaseException,
    which OpenTelemetry does not record) left the ``compose`` span UNSET, without an
    event; only the call's span said so."""
    import uuid

    from function.core.deadline import can_arm
    from function.scheduling import devices
    from tests.test_serving import RUNAWAY, runaway_request

    assert can_arm(), "the deadline's SIGALRM reaches the main thread only"
    otel_env.setenv("MODELPLANE_SELECTOR_COST_LIMIT", "1000000000")
    req = runaway_request("late", selector=f'{RUNAWAY} && "{uuid.uuid4()}" != ""')
    traces = tracing.configure(load_settings())
    runner = FunctionRunner(load_settings(), tracing=traces, metrics=Metrics(CollectorRegistry()))
    try:
        md = {"traceparent": TRACEPARENT}
        out = runner.run_bytes(req.SerializeToString(), md, deadline_seconds=0.3)
    finally:
        devices.set_cost_limit(Settings.model_construct().selector_cost_limit)
        traces.shutdown()
    rsp = fnv1.RunFunctionResponse.FromString(out)
    assert "compute deadline" in rsp.results[0].message
    named = by_name(receiver.spans())
    root, compose = named["ModelDeployment"], named["compose"]
    assert root.status.code == STATUS_ERROR
    assert compose.status.code == STATUS_ERROR
    assert "CallDeadline" in compose.status.message
    (event,) = [e for e in compose.events if e.name == "exception"]
    assert attrs(event.attributes)["exception.type"].endswith("CallDeadline")


def test_calls_the_acceptor_answers_and_undecodable_requests_get_a_span(tmp_path, receiver):
    """Found by review 16d: of 8 traced calls, the 3 the acceptor answered itself (a
    runaway answered from memory, a compute process SIGKILLed mid-call, one killed past
    its deadline) and an undecodable request had no span: the traced calls that fail
    were exactly the ones missing from Crossplane's trace."""
    import signal

    import grpc

    from tests.support.harness import fatal
    from tests.test_acceptor import Server, _fresh_runaway
    from tests.test_serving import _nested_request, _stub, runaway_request

    server = Server(
        tmp_path,
        {"MODELPLANE_OTEL_ENABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
         "OTEL_BSP_SCHEDULE_DELAY": "100"},
    )  # fmt: skip
    md = (("traceparent", TRACEPARENT),)
    try:
        with grpc.insecure_channel(server.address) as ch:
            call = _stub(ch)
            assert fatal(call(_nested_request(150), metadata=md, timeout=60))  # undecodable
            runaway = runaway_request("memo")
            assert fatal(call(runaway, metadata=md, timeout=60))  # its process's deadline
            assert fatal(call(runaway, metadata=md, timeout=60))  # from the acceptor's memory
            server.settle()
            killed = call.future(_fresh_runaway("oom"), metadata=md, timeout=60)
            os.kill(server.busy_compute(), signal.SIGKILL)
            assert "SIGKILL" in fatal(killed.result())[0]
            server.settle()
            stuck = call.future(_fresh_runaway("stuck"), metadata=md, timeout=60)
            os.kill(server.busy_compute(), signal.SIGSTOP)
            assert "did not stop" in fatal(stuck.result())[0]
    finally:
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 0
    roots = [s for _, s in receiver.spans() if s.kind == SPAN_KIND_SERVER]
    tags = sorted(attrs(s.attributes)["modelplane.request.tag"] for s in roots)
    assert tags == ["deep", "memo", "memo", "oom", "stuck"], tags
    for s in roots:
        a = attrs(s.attributes)
        assert s.trace_id.hex() == TRACE_ID and s.parent_span_id.hex() == PARENT_ID
        assert s.status.code == STATUS_ERROR and s.status.message, a
        assert a["modelplane.result.severities"] == ["Fatal"], a
        assert s.name == a["modelplane.xr.kind"] and a["modelplane.xr.name"], a
        assert a["rpc.method"] == "RunFunction"
        assert s.start_time_unix_nano < s.end_time_unix_nano
    deep = next(s for s in roots if attrs(s.attributes)["modelplane.request.tag"] == "deep")
    assert "could not be parsed" in deep.status.message
    (event,) = [e for e in deep.events if e.name == "exception"]
    assert attrs(event.attributes)["exception.type"], event
