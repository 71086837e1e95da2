"""structlog output: JSON at info, console with --debug, and every line of a call
carries the request tag and the XR's kind, namespace and name (issue 7)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog

from function import composers
from function.edge.runner import FunctionRunner
from function.ops import logs
from function.ops.settings import default_settings
from tests.support.fixtures import cache_spec, inference_cluster
from tests.support.harness import NAMESPACE, Clock, request, xr

BOUND = {"tag", "xr_kind", "xr_namespace", "xr_name"}


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    yield buf
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def json_lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def cache_request(name="qwen-cache", tag="tag-7", spec=None):
    return request(
        xr("ModelCache", name, spec or cache_spec({"matchLabels": {"gpu": "h100"}})),
        required={"clusters": [inference_cluster("gpu-a", {"gpu": "h100"})], "replicas": []},
        tag=tag,
    )


def runner() -> FunctionRunner:
    return FunctionRunner(default_settings(), Clock())


def test_json_lines_at_info_carry_tag_and_xr(stream):
    logs.configure(debug=False, stream=stream)
    runner().run(cache_request(name="bad", spec={"source": "HuggingFace"}, tag="tag-bad"))
    runner().run(cache_request())  # succeeds: only a debug line, filtered at info
    lines = json_lines(stream)
    assert [line["event"] for line in lines] == ["invalid input"]
    (line,) = lines
    assert line["level"] == "info"
    assert line["tag"] == "tag-bad"
    assert line["xr_kind"] == "ModelCache"
    assert line["xr_namespace"] == NAMESPACE
    assert line["xr_name"] == "bad"
    assert "spec.clusterSelector" in line["error"]
    assert line["timestamp"].endswith("Z")


def test_composer_lines_and_errors_carry_the_call_context(stream, monkeypatch):
    logs.configure(debug=False, stream=stream)
    real = composers.composer_for("modelplane.ai/v1alpha1", "ModelCache")

    def chatty(inputs):
        structlog.get_logger("composer").info("placing", cluster="gpu-a")
        if inputs.name == "broken":
            raise RuntimeError("no luck")
        return real(inputs)

    monkeypatch.setitem(composers._loaded, "ModelCache", chatty)
    runner().run(cache_request(tag="a"))
    runner().run(cache_request(name="broken", tag="b"))
    structlog.get_logger("after").info("between calls")
    lines = json_lines(stream)
    assert [(line["event"], line.get("tag")) for line in lines] == [
        ("placing", "a"),
        ("placing", "b"),
        ("composer failed", "b"),
        ("between calls", None),
    ]
    for line in lines[:3]:
        assert set(line) >= BOUND, line
        assert line["xr_kind"] == "ModelCache"
    assert lines[2]["level"] == "error"
    assert "RuntimeError: no luck" in lines[2]["exception"]
    assert not BOUND & set(lines[3])  # the binding ends with the call


def test_debug_is_readable_console_output(stream):
    logs.configure(debug=True, stream=stream)
    runner().run(cache_request(tag="tag-dbg"))
    text = stream.getvalue()
    (line,) = [ln for ln in text.splitlines() if "composed" in ln]
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)
    assert "debug" in line
    for part in ("tag=tag-dbg", "xr_kind=ModelCache", f"xr_namespace={NAMESPACE}",
                 "xr_name=qwen-cache", "seconds="):  # fmt: skip
        assert part in line, part


def test_standard_library_lines_are_json_too(stream):
    """Found by a trial: a misspelt setting's warning (and libraries' lines, such as the
    OTLP exporter's) came as plain text among the JSON lines."""
    import logging

    logs.configure(debug=False, stream=stream)
    logging.getLogger("opentelemetry.exporter").warning("Transient error %s", "x")
    (line,) = [ln for ln in stream.getvalue().splitlines() if ln.strip()]
    doc = json.loads(line)
    assert doc["event"] == "Transient error x" and doc["level"] == "warning", doc
    assert doc["logger"] == "opentelemetry.exporter" and "timestamp" in doc
