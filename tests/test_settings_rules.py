"""One definition per setting (issues 13 and 16): the rule that starts the function is the
rule that uses the value, and ``--help``/``config`` describe every setting from it.

Before, ``DEFAULT_FLASH_LOADER_CONCURRENCY=0`` (or ``1000``), ``DEFAULT_SHM_SIZE_LIMIT=0``
and ``DEFAULT_FLASH_LOADER_TMPFS_SIZE_LIMIT=0`` passed start-up and ``config``, then failed
every cached replica with a fatal result.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from function.__main__ import parser
from function.core.errors import SpecError
from function.ops.settings import (
    FLAGS,
    Settings,
    SettingsError,
    default_text,
    describe,
    load_settings,
    unit,
    variable,
)
from function.serving.flashloader import resolve_flash_loader, resolve_shm
from tests.test_settings import clean_environ, env  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parent.parent

# Values the composers refuse, which start-up used to accept.
REFUSED_LATER = [
    ("DEFAULT_FLASH_LOADER_CONCURRENCY", "0"),
    ("DEFAULT_FLASH_LOADER_CONCURRENCY", "1000"),
    ("DEFAULT_SHM_SIZE_LIMIT", "0"),
    ("DEFAULT_FLASH_LOADER_TMPFS_SIZE_LIMIT", "0"),
    ("DEFAULT_FLASH_LOADER_TMPFS_SIZE_LIMIT", "0Gi"),
    ("DEFAULT_FLASH_LOADER_IMAGE", "registry.example/flash loader:1"),
    ("MODELPLANE_HYDRATION_IMAGE", ""),
    ("MODELPLANE_HYDRATION_DEADLINE_SECONDS", "0"),  # activeDeadlineSeconds must be > 0
]


@pytest.mark.parametrize(("var", "value"), REFUSED_LATER)
def test_value_a_composer_refuses_is_refused_at_start_up(env, var, value):  # noqa: F811
    env.setenv(var, value)
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert f"{var}: " in str(e.value)


def _run(args: list[str], extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "function", *args],
        cwd=ROOT,
        env={**clean_environ(), **extra},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(("var", "value"), REFUSED_LATER[:4])
@pytest.mark.parametrize("command", [["--insecure", "--address", "127.0.0.1:0"], ["config"]])
def test_server_and_config_refuse_it_naming_the_variable(var, value, command):
    proc = _run(command, {var: value})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("function-modelplane: invalid settings: ")
    assert f"{var}: " in line
    assert "serving" not in proc.stdout + proc.stderr


# ---- the same rule in both places ----------------------------------------------------

_QUANTITIES = st.one_of(
    st.from_regex(r"\A-?[0-9]{1,4}(\.[0-9]{1,2})?(Ki|Mi|Gi|Ti|k|M|G|m)?\Z"),
    st.sampled_from(["", "lots", "8 GB", "0", "0.0Gi", "1e3", "0.5Gi"]),
)
_COUNTS = st.one_of(st.integers(-5, 600).map(str), st.sampled_from(["1.5", "x", "", "08"]))


@hsettings(max_examples=300, deadline=None)
@given(concurrency=_COUNTS, shm=_QUANTITIES, tmpfs=_QUANTITIES)
def test_settings_accept_exactly_what_the_composer_accepts(concurrency, shm, tmpfs):
    """For any environment: start-up passes iff the replica composer accepts the defaults."""
    values = {
        "default_flash_loader_concurrency": concurrency,
        "default_shm_size_limit": shm,
        "default_flash_loader_tmpfs_size_limit": tmpfs,
    }
    with pytest.MonkeyPatch.context() as mp:  # only these values, none from the environment
        for var in {variable(f) for f in Settings.model_fields}:
            mp.delenv(var, raising=False)
        try:
            s = Settings(**values)
        except Exception:
            s = None
    if s is not None:  # accepted at start-up: the composer never refuses it
        fl = resolve_flash_loader(s, None, None)
        assert fl.concurrency == s.default_flash_loader_concurrency
        assert resolve_shm(s, None) == s.default_shm_size_limit
        return
    # refused at start-up: the composer refuses the same value set by a deployment (as
    # the number it reads as; a string that is no number is refused at both levels)
    conc: object = concurrency
    if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", concurrency):
        conc = float(concurrency) if "." in concurrency else int(concurrency)
    refused = []
    for field, value in (("concurrency", conc), ("tmpfsSizeLimit", tmpfs)):
        try:
            resolve_flash_loader(Settings.model_construct(), None, {field: value})
        except SpecError:
            refused.append(field)
    try:
        resolve_shm(Settings.model_construct(), shm)
    except SpecError:
        refused.append("shm")
    assert refused, values


# ---- --help and config describe every setting from its definition ---------------------


def test_every_setting_has_a_description_a_unit_and_a_default():
    for field, info in Settings.model_fields.items():
        assert info.description and "\n" not in info.description, field
        assert unit(field), field
        line = describe(field)
        assert line.startswith(info.description), field
        assert f"({unit(field)}, default {default_text(field)})" in line, field
    assert describe("max_recv_message_size").endswith("(MiB, default 256)")
    assert describe("default_ttl_seconds").endswith("(seconds, default 60)")


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_help_describes_every_flag_from_the_settings():
    proc = _run(["--help"], {})
    assert proc.returncode == 0, proc.stderr
    text = _squash(proc.stdout)
    for field, names in FLAGS.items():
        for name in names:
            assert name in text, name
        assert _squash(f"{describe(field)}; env {variable(field)}") in text, field
    # the parser takes its flags from FLAGS and nothing else
    flags = {o for a in parser()._actions for o in a.option_strings} - {"-h", "--help"}
    assert flags == {n for names in FLAGS.values() for n in names}


def test_config_describes_every_setting_and_names_a_flag_as_its_source():
    proc = _run(["config", "--max-recv-message-size", "64"], {"WORKERS": "2"})
    assert proc.returncode == 0, proc.stderr
    by_var = {r["variable"]: r for r in yaml.safe_load(proc.stdout)["settings"]}
    assert set(by_var) == {variable(f) for f in Settings.model_fields}
    for field in Settings.model_fields:
        assert by_var[variable(field)]["description"] == describe(field)
    assert by_var["MAX_RECV_MESSAGE_SIZE"] == {
        "variable": "MAX_RECV_MESSAGE_SIZE",
        "value": 64,
        "source": "flag",
        "description": describe("max_recv_message_size"),
    }
    assert by_var["WORKERS"]["value"] == 2 and by_var["WORKERS"]["source"] == "environment"


@pytest.mark.parametrize(
    ("args", "extra", "named"),
    [
        (["--max-recv-message-size", "0"], {}, "--max-recv-message-size: "),
        (["--max-recv-message-size", "4096"], {}, "--max-recv-message-size: "),
        ([], {"MAX_RECV_MESSAGE_SIZE": "0"}, "MAX_RECV_MESSAGE_SIZE: "),
        ([], {"MAX_RECV_MESSAGE_SIZE": "abc"}, "(got 'abc')"),
        (["--workers", "0"], {}, "--workers: Input should be greater than or equal to 1 (got 0)"),
        (["--processes=0"], {}, "--processes: "),
        (["--grace-seconds", "-1"], {}, "--grace-seconds: "),
        (["--address", "nowhere"], {}, "--address: "),
        ([], {"INSECURE": "perhaps"}, "INSECURE: "),
    ],
)
def test_flags_are_checked_by_their_setting_rule(args, extra, named):
    proc = _run(["--metrics-address", "", *args], {"INSECURE": "true", **extra})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr


def test_flag_wins_over_its_variable(env):  # noqa: F811
    env.setenv("MAX_RECV_MESSAGE_SIZE", "32")
    env.setenv("INSECURE", "")
    s = load_settings({"max_recv_message_size": 512})
    assert s.max_recv_message_size == 512
    assert s.insecure is False
    assert load_settings().max_recv_message_size == 32


@pytest.mark.parametrize(
    ("extra", "flags"),
    [
        # The variable is invalid, the flag overrides it: the flag wins in the acceptor
        # AND in every compute process (they read the acceptor's settings, not the
        # environment again), so the server starts as `config` says it would.
        # ADDRESS on the default metrics port (:8080): refused alone, overridden here.
        ({"ADDRESS": "127.0.0.1:8080"}, []),
        ({"WORKERS": "abc"}, ["--workers", "1"]),
        ({"MODELPLANE_GRACE_SECONDS": "-1"}, ["--grace-seconds", "1"]),
    ],
)
def test_a_flag_that_overrides_an_invalid_variable_starts_every_process(extra, flags):
    import socket

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    grpc_port, metrics = ports
    fill = {"metrics": metrics}
    environ = {**clean_environ(), **{k: v.format(**fill) for k, v in extra.items()}}
    args = ["--insecure", "--address", f"127.0.0.1:{grpc_port}", "--metrics-address",
            f"127.0.0.1:{metrics}", *[f.format(**fill) for f in flags]]  # fmt: skip
    assert _run(["config", *args[1:]], environ).returncode == 0  # the pre-flight check passes
    proc = subprocess.Popen(
        [sys.executable, "-m", "function", *args],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            grpc.channel_ready_future(ch).result(timeout=60)
            got = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=60)
        assert got.status == health_pb2.HealthCheckResponse.SERVING
        assert proc.poll() is None
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "did not start" not in out, out
