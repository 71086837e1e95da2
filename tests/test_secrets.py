"""Secrets sealed: the fake token never leaves the function (issue 9).

The suite-wide part lives in ``tests/support/secret_guard.py`` (every test of the suite
fails when a FunctionRunner response or captured output holds the token). This
module proves that guard can fail, and pushes the token at every kind:

- the auth Secret resolved with the token in ``data`` (base64) and in
  ``stringData`` (raw), under the referenced key and under other keys;
- observed Objects echoing a remote Secret *with* its data in
  ``status.atProvider.manifest`` and in ``spec.forProvider.manifest`` (what
  provider-kubernetes may report after ``patchesFrom``);
- over a real ``python -m function --debug`` process, whose every log line is read.

No response byte (desired resources, status, conditions, results/events) and no
log line may hold the token, raw or base64.
"""

from __future__ import annotations

import base64
import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.composers import KINDS
from function.render import World, drive
from tests.support.fixtures import FAKE_TOKEN, auth_secret
from tests.support.harness import run
from tests.support.reliability import ROOT, Seed, evolve, missing_reason, seeds, settle
from tests.support.secret_guard import leaks, token_forms

B64 = base64.b64encode(FAKE_TOKEN.encode()).decode()


# ---- the detector ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "x", "xy", "xyz", '{"auths":'])
def test_detector_finds_the_token_raw_and_base64_at_any_alignment(prefix: str) -> None:
    blob = (prefix + FAKE_TOKEN + "tail").encode()
    assert leaks(blob) == ["raw"]
    assert "base64" in leaks(base64.b64encode(blob))
    assert "base64url" in leaks(base64.urlsafe_b64encode(blob)) or "base64" in leaks(
        base64.urlsafe_b64encode(blob)
    )


def test_detector_is_quiet_on_clean_data() -> None:
    assert leaks(b"hf-token HF_TOKEN secretKeyRef patchesFrom data.HF_TOKEN") == []
    assert leaks(FAKE_TOKEN[:-1]) == []
    assert all(len(f) >= 36 for f in token_forms().values())


GUARDED = textwrap.dedent(
    """
    import base64, logging, sys
    import structlog
    from function.composers import _loaded
    from function.core.outcome import Outcome
    from tests.support.fixtures import FAKE_TOKEN, cache_spec
    from tests.support.harness import request, run, xr

    def test_clean():
        run(request(xr("ModelCache", "c", cache_spec({}))))

    def test_print_raw():
        print("token is", FAKE_TOKEN)

    def test_log_base64():
        logging.getLogger("x").warning("data %s", base64.b64encode(FAKE_TOKEN.encode()).decode())

    def test_structlog_line():
        structlog.get_logger().info("leak", value=FAKE_TOKEN)

    def test_stderr():
        sys.stderr.write("x" + FAKE_TOKEN + "\\n")

    def test_response(monkeypatch):
        def leaky(inputs):
            out = Outcome()
            out.status["oops"] = base64.b64encode(b"k" + FAKE_TOKEN.encode()).decode()
            return out
        monkeypatch.setitem(_loaded, "ModelCache", leaky)
        run(request(xr("ModelCache", "c", cache_spec({}))))
    """
)


def test_guard_fails_tests_that_leak(tmp_path: Path) -> None:
    """The guard, run as a plugin on tests that leak, fails exactly those tests."""
    (tmp_path / "test_leaky.py").write_text(GUARDED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.secret_guard",
         "-p", "no:cacheprovider", "-q", "-rA",
         "--rootdir", str(tmp_path), str(tmp_path / "test_leaky.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = proc.stdout
    assert "PASSED test_leaky.py::test_clean" in out, out[-3000:]
    for name in ("print_raw", "log_base64", "structlog_line", "stderr", "response"):
        assert f"FAILED test_leaky.py::test_{name}" in out, out[-3000:]
    assert "secret guard: the fake token leaked" in out
    assert "ERROR" not in out, out[-3000:]  # each leak fails its test once, not its teardown


# ---- the token pushed at every kind -----------------------------------------------------


def _with_token_everywhere(seed: Seed) -> list[dict[str, Any]]:
    """The seed's world with every Secret holding the token (data and stringData)."""
    world = []
    for doc in seed.world:
        doc = copy.deepcopy(doc)
        if doc.get("kind") == "Secret":
            keys = set(doc.get("data") or {}) | set(doc.get("stringData") or {})
            keys |= {"HF_TOKEN", "token", "other"}
            doc["data"] = {k: B64 for k in sorted(keys)}
            doc["stringData"] = {k: FAKE_TOKEN for k in sorted(keys)}
        world.append(doc)
    if not any(d.get("kind") == "Secret" for d in world):
        world.append(auth_secret(namespace=seed.xr["metadata"].get("namespace", "ml-team")))
    return world


def _echo_secrets(observed: dict[str, Any]) -> dict[str, Any]:
    """Observed Objects whose manifests (spec and status) carry the token in data."""
    out = copy.deepcopy(observed)
    for obs in out.values():
        if obs.get("kind") != "Object":
            continue
        manifest = ((obs.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}
        at = ((obs.get("status") or {}).get("atProvider") or {}).get("manifest")
        for m in (manifest, at):
            if isinstance(m, dict) and m.get("kind") == "Secret":
                m["data"] = {"HF_TOKEN": B64}
                m["stringData"] = {"HF_TOKEN": FAKE_TOKEN}
        # Any remote object may echo an env value that was patched in.
        obs.setdefault("status", {}).setdefault("atProvider", {}).setdefault("manifest", {})
        obs["status"]["atProvider"]["manifest"]["leakedEnv"] = [
            {"name": "HF_TOKEN", "value": FAKE_TOKEN}
        ]
    return out


def _responses(seed: Seed, call: Any = None) -> list[Any]:
    world = _with_token_everywhere(seed)
    s = Seed(seed.kind, seed.label, seed.xr, world, seed.observed)
    got: list[Any] = []

    def recording(req: Any) -> Any:
        rsp = (call or run)(req)
        got.append(rsp)
        return rsp

    drive(recording, seed.xr, seed.observed, World(world))
    _, first = settle(s)
    observed = _echo_secrets(evolve(first))
    drive(recording, seed.xr, observed, World(world))
    return got


@pytest.mark.parametrize("kind", list(KINDS))
def test_token_never_in_a_response(kind: str) -> None:
    if missing_reason(kind):
        pytest.skip(missing_reason(kind))
    n = 0
    for seed in seeds(kind):
        for rsp in _responses(seed):
            n += 1
            assert not leaks(rsp.SerializeToString()), f"{seed.id}: response holds the token"
    assert n


def test_token_never_in_a_response_or_log_line_of_a_function_process(tmp_path: Path) -> None:
    """Every kind over gRPC against ``python -m function --debug``; its stderr is read."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    log = tmp_path / "stderr"
    env = {k: v for k, v in os.environ.items() if k != "TLS_SERVER_CERTS_DIR"}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "function", "--insecure", "--debug", "--address", address,
             "--metrics-address", ""],
            env=env, stdout=err, stderr=subprocess.STDOUT,
        )  # fmt: skip
    calls = 0
    try:
        with grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        ) as ch:
            grpc.channel_ready_future(ch).result(timeout=20)
            raw = ch.unary_unary(
                "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction",
                request_serializer=lambda r: r.SerializeToString(),
                response_deserializer=None,
            )
            stub = grpcv1.FunctionRunnerServiceStub(ch)
            for kind in KINDS:
                if missing_reason(kind):
                    continue
                for seed in seeds(kind):
                    for rsp in _responses(seed, call=lambda r: stub.RunFunction(r, timeout=30)):
                        calls += 1
                        assert not leaks(rsp.SerializeToString()), seed.id
                    req, _ = settle(seed)
                    wire = raw(req, timeout=30)
                    calls += 1
                    assert not leaks(wire), seed.id
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        time.sleep(0)
    text = log.read_bytes()
    assert calls > 0
    assert b"composed" in text or b"invalid input" in text, "the debug log is empty"
    assert not leaks(text), "a log line of the function process holds the token"
