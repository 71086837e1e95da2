"""Settings from the environment: typed, validated at start-up, inspectable (issue 7)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from function.ops.config_report import report, rows, variable
from function.ops.settings import (
    Settings,
    SettingsError,
    describe,
    load_settings,
    unknown_variables,
)
from tests.support.validation import load_documents, validate_manifest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "examples" / "runtime"
PROVIDER = ROOT / "examples" / "provider"
VARIABLES = [variable(f) for f in Settings.model_fields]


def clean_environ() -> dict[str, str]:
    """The process environment without any variable the settings read."""
    drop = {v.lower() for v in VARIABLES}
    return {k: v for k, v in os.environ.items() if k.lower() not in drop}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for k in list(os.environ):
        if k.lower() in {v.lower() for v in VARIABLES}:
            monkeypatch.delenv(k)
    return monkeypatch


def test_every_field_reads_exactly_one_distinct_variable():
    assert len(VARIABLES) == len(set(VARIABLES)) == len(Settings.model_fields)
    for field in Settings.model_fields:
        alias = Settings.model_fields[field].validation_alias
        assert len(alias.choices) == 1, field


def test_defaults_without_environment(env):
    s = load_settings()
    assert s == Settings.model_construct()
    assert s.default_ttl_seconds == 60
    assert s.metrics_address == ":8080"
    assert s.otel_enabled is False
    assert s.default_shm_size_limit == "8Gi"


@pytest.mark.parametrize(
    ("var", "value", "field", "expected"),
    [
        ("MODELPLANE_DEFAULT_TTL_SECONDS", "15", "default_ttl_seconds", 15),
        ("MODELPLANE_PVC_BIND_TIMEOUT_SECONDS", "120", "pvc_bind_timeout_seconds", 120),
        ("MODELPLANE_HYDRATION_DEADLINE_SECONDS", "3600", "hydration_deadline_seconds", 3600),
        ("METRICS_ADDRESS", "127.0.0.1:9102", "metrics_address", "127.0.0.1:9102"),
        ("METRICS_ADDRESS", "[::]:8080", "metrics_address", "[::]:8080"),
        ("METRICS_ADDRESS", "", "metrics_address", ""),
        ("MODELPLANE_OTEL_ENABLED", "true", "otel_enabled", True),
        ("DEFAULT_SHM_SIZE_LIMIT", "16Gi", "default_shm_size_limit", "16Gi"),
        ("DEFAULT_FLASH_LOADER_ENABLED", "1", "default_flash_loader_enabled", True),
        ("OTEL_SERVICE_NAME", "fm", "otel_service_name", "fm"),
    ],
)
def test_variable_sets_field(env, var, value, field, expected):
    env.setenv(var, value)
    assert getattr(load_settings(), field) == expected


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("MODELPLANE_DEFAULT_TTL_SECONDS", "0"),
        ("MODELPLANE_DEFAULT_TTL_SECONDS", "90000"),
        ("MODELPLANE_DEFAULT_TTL_SECONDS", "1m"),
        ("MODELPLANE_PVC_BIND_TIMEOUT_SECONDS", "-5"),
        ("MODELPLANE_HYDRATION_BACKOFF_LIMIT", "three"),
        ("METRICS_ADDRESS", "8080"),
        ("METRICS_ADDRESS", ":99999"),
        # 2048 MiB is 2^31 bytes: one past gRPC's int option (the server died at start).
        ("MAX_RECV_MESSAGE_SIZE", "2048"),
        ("MAX_RECV_MESSAGE_SIZE", "0"),
        ("MODELPLANE_OTEL_ENABLED", "maybe"),
        ("DEFAULT_SHM_SIZE_LIMIT", "8 GB"),
        ("DEFAULT_FLASH_LOADER_TMPFS_SIZE_LIMIT", "lots"),
        ("PROMETHEUS_MULTIPROC_DIR", "/nonexistent/metrics"),
    ],
)
def test_bad_value_names_the_variable(env, var, value):
    env.setenv(var, value)
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert f"{var}: " in str(e.value)


OTEL_BAD = [
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector/v1/traces"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ("OTEL_RESOURCE_ATTRIBUTES", "team"),
    ("OTEL_TRACES_SAMPLER", "sometimes"),
    ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
    ("OTEL_TRACES_SAMPLER_ARG", "half"),
]


@pytest.mark.parametrize(("var", "value"), OTEL_BAD)
def test_otel_variables_validated_only_when_tracing_is_on(env, var, value):
    env.setenv(var, value)
    assert load_settings().otel_enabled is False  # off: never read, so never an error
    env.setenv("MODELPLANE_OTEL_ENABLED", "true")
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert f"{var}: " in str(e.value)


def test_every_problem_is_reported_at_once(env):
    env.setenv("MODELPLANE_POLL_SECONDS", "x")
    env.setenv("DEFAULT_SHM_SIZE_LIMIT", "y")
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert "MODELPLANE_POLL_SECONDS: " in str(e.value)
    assert "DEFAULT_SHM_SIZE_LIMIT: " in str(e.value)


def test_report_rows_name_source(env):
    env.setenv("MODELPLANE_DEFAULT_TTL_SECONDS", "20")
    env.setenv("default_shm_size_limit", "4Gi")  # pydantic-settings matches case-insensitively
    out = {r["variable"]: r for r in rows(load_settings())}
    assert set(out) == set(VARIABLES)
    assert out["MODELPLANE_DEFAULT_TTL_SECONDS"] == {
        "variable": "MODELPLANE_DEFAULT_TTL_SECONDS",
        "value": 20,
        "source": "environment",
        "description": describe("default_ttl_seconds"),
    }
    assert out["DEFAULT_SHM_SIZE_LIMIT"]["value"] == "4Gi"
    assert out["DEFAULT_SHM_SIZE_LIMIT"]["source"] == "environment"
    assert out["MODELPLANE_POLL_SECONDS"]["source"] == "default"
    assert yaml.safe_load(report(load_settings()))["settings"][0]["variable"] == VARIABLES[0]


# ---- the command line, as a real process ------------------------------------------


def _python(args: list[str], extra: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "function", *args],
        cwd=ROOT,
        env={**clean_environ(), **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_config_command_prints_every_setting_and_its_source():
    proc = _python(
        ["config"],
        {"MODELPLANE_PVC_BIND_TIMEOUT_SECONDS": "300", "OTEL_SERVICE_NAME": "fm-prod"},
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    listed = yaml.safe_load(out)["settings"]
    assert [r["variable"] for r in listed] == VARIABLES
    by_var = {r["variable"]: r for r in listed}
    assert by_var["MODELPLANE_PVC_BIND_TIMEOUT_SECONDS"]["value"] == 300
    assert by_var["MODELPLANE_PVC_BIND_TIMEOUT_SECONDS"]["source"] == "environment"
    assert by_var["OTEL_SERVICE_NAME"]["value"] == "fm-prod"
    assert by_var["OTEL_SERVICE_NAME"]["source"] == "environment"
    others = [r for v, r in by_var.items() if v not in ("MODELPLANE_PVC_BIND_TIMEOUT_SECONDS",
                                                        "OTEL_SERVICE_NAME")]  # fmt: skip
    assert all(r["source"] == "default" for r in others)
    defaults = Settings.model_construct()
    assert by_var["MODELPLANE_DEFAULT_TTL_SECONDS"]["value"] == defaults.default_ttl_seconds
    # A whole number of seconds reads as --help shows its default: 20, not 20.0.
    assert by_var["MODELPLANE_GRACE_SECONDS"]["value"] == 20
    assert "value: 20\n" in out
    assert "misspelt" not in yaml.safe_load(out)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("MODELPLANE_GRACE_SECOND", "MODELPLANE_GRACE_SECONDS"),  # one letter short
        ("modelplane_poll_second", "MODELPLANE_POLL_SECONDS"),  # case-insensitive, as read
        ("DEFAULT_SHM_SIZE_LIMT", "DEFAULT_SHM_SIZE_LIMIT"),
        ("DEFAULT_FLASHLOADER_IMAGE", "DEFAULT_FLASH_LOADER_IMAGE"),
        ("MODELPLANE_MODEL", None),  # the pods' variable, not a setting's misspelling
        ("MODELPLANE_REQUIRE_E2E", None),  # the tests' own
        ("MODELPLANE_GRACE_SECONDS", None),  # a setting
        ("GRACE_SECOND", None),  # not one of the settings' prefixes
    ],
)
def test_misspelt_setting_is_named_with_the_setting_it_resembles(name, want):
    got = unknown_variables({name: "s3cr3t-value"})
    assert got == ([(name, want)] if want else [])


def test_misspelt_setting_is_reported_by_config_and_logged_at_start():
    proc = _python(["config"], {"MODELPLANE_GRACE_SECOND": "s3cr3t-value"})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # listed, and a CI step running config fails
    doc = yaml.safe_load(out)
    assert doc["misspelt"] == [
        "MODELPLANE_GRACE_SECOND is not a setting (did you mean MODELPLANE_GRACE_SECONDS?);"
        " it is ignored"
    ]
    assert {r["variable"]: r for r in doc["settings"]}["MODELPLANE_GRACE_SECONDS"][
        "source"
    ] == "default"
    assert "s3cr3t-value" not in out + err
    server = _python(
        ["--insecure", "--address", "127.0.0.1:0", "--processes", "1"],
        {"MODELPLANE_GRACE_SECOND": "s3cr3t-value"},
    )
    try:
        deadline = time.monotonic() + 60
        seen = ""
        assert server.stderr is not None
        while time.monotonic() < deadline and "did you mean" not in seen:
            line = server.stderr.readline()
            if not line:
                break
            seen += line
        assert "MODELPLANE_GRACE_SECOND is not a setting" in seen
        assert "MODELPLANE_GRACE_SECONDS" in seen
        assert "s3cr3t-value" not in seen
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("MODELPLANE_DEFAULT_TTL_SECONDS", "soon"),
        ("DEFAULT_SHM_SIZE_LIMIT", "8 gigs"),
        ("METRICS_ADDRESS", "localhost"),
        ("MAX_RECV_MESSAGE_SIZE", "2048"),
    ],
)
@pytest.mark.parametrize("command", [["--insecure", "--address", "127.0.0.1:0"], ["config"]])
def test_bad_value_stops_the_process_at_start_up(var, value, command):
    proc = _python(command, {var: value})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"{var}: " in err
    assert "serving" not in out + err


def test_tracing_variables_stop_start_up_only_when_tracing_is_on():
    proc = _python(
        ["--insecure", "--address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0"],
        {"MODELPLANE_OTEL_ENABLED": "true", "OTEL_TRACES_SAMPLER": "sometimes"},
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "OTEL_TRACES_SAMPLER: " in err


def test_serves_while_tracing_is_off_even_with_invalid_exporter_variables():
    proc = _python(
        ["--insecure", "--address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0"],
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "::not a url::", "OTEL_TRACES_SAMPLER": "sometimes"},
    )
    try:
        deadline = time.monotonic() + 60
        line = ""
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if '"serving"' in line or not line:
                break
        assert '"serving"' in line, line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_metrics_flag_names_the_flag():
    proc = _python(["--insecure", "--metrics-address", "nope"], {})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "--metrics-address" in err


def test_largest_max_recv_message_size_is_one_grpc_accepts():
    assert load_settings({"max_recv_message_size": 2047}).max_recv_message_size == 2047
    # --help and config show the bound.
    assert "1 to 2047" in Settings.model_fields["max_recv_message_size"].description


def test_max_recv_message_size_past_grpc_int_is_refused_naming_the_flag():
    proc = _python(
        ["--insecure", "--address", "127.0.0.1:0", "--metrics-address=",
         "--max-recv-message-size", "2048"],
        {},
    )  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err[-2000:]
    assert "--max-recv-message-size: " in err and "2047" in err
    assert "Traceback" not in err and "serving" not in out + err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("address", "metrics", "clash"),
    [
        ("127.0.0.1:9443", "127.0.0.1:9443", True),
        ("0.0.0.0:9443", ":9443", True),
        ("0.0.0.0:9443", "127.0.0.1:9443", True),
        ("127.0.0.1:9443", ":9443", True),
        ("[::]:9443", "127.0.0.1:9443", True),
        ("[::1]:9443", "[::1]:9443", True),
        ("0.0.0.0:8080", ":8080", True),
        ("127.0.0.1:9443", "127.0.0.1:9444", False),
        ("127.0.0.1:9443", "127.0.0.2:9443", False),
        ("[::1]:9443", "0.0.0.0:9443", False),
        ("127.0.0.1:0", "127.0.0.1:0", False),
        ("127.0.0.1:9443", "", False),
    ],
)
def test_metrics_address_on_the_grpc_port_is_refused_naming_both(env, address, metrics, clash):
    argv = ["--address", address, "--metrics-address", metrics]
    flags = {"address": address, "metrics_address": metrics}
    if not clash:
        assert load_settings(flags, argv).metrics_address == metrics
        return
    with pytest.raises(SettingsError) as e:
        load_settings(flags, argv)
    assert "--metrics-address: " in str(e.value) and "--address" in str(e.value)


def test_default_metrics_address_on_the_grpc_port_is_refused(env):
    env.setenv("ADDRESS", ":8080")  # the metrics endpoint's default port
    with pytest.raises(SettingsError, match=r"METRICS_ADDRESS: ':8080' .*ADDRESS"):
        load_settings()


@pytest.mark.parametrize("how", ["flags", "variables"])
def test_metrics_address_equal_to_address_exits_2_naming_both(how):
    address = f"127.0.0.1:{_free_port()}"
    if how == "flags":
        args, extra = ["--address", address, "--metrics-address", address], {}
        names = ("--metrics-address", "--address")
    else:
        args, extra = [], {"ADDRESS": address, "METRICS_ADDRESS": address}
        names = ("METRICS_ADDRESS", "ADDRESS")
    proc = _python(["--insecure", *args], extra)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err[-2000:]
    assert len(err.strip().splitlines()) == 1, err
    assert all(n in err for n in names), err
    assert "Traceback" not in err and "serving" not in out + err


def test_metrics_port_in_use_exits_2_naming_the_flag():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        proc = _python(
            ["--insecure", "--address", f"127.0.0.1:{_free_port()}", "--metrics-address", taken],
            {},
        )
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err[-2000:]
    assert f"--metrics-address (METRICS_ADDRESS) {taken}: " in err
    assert "Traceback" not in err and "serving" not in out + err


def test_grpc_port_taken_by_the_metrics_endpoint_exits_2_without_traceback():
    # Different host spellings of one listener pass the settings check: the metrics
    # endpoint binds first, then gRPC cannot.
    port = _free_port()
    first = socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)[0]
    if first[4][0] != "127.0.0.1":
        pytest.skip(f"localhost resolves to {first[4][0]} first")
    proc = _python(
        ["--insecure", "--address", f"127.0.0.1:{port}", "--metrics-address", f"localhost:{port}",
         "--processes", "1"],
        {},
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, err[-2000:]
    assert f"--address (ADDRESS) 127.0.0.1:{port}: " in err and "--metrics-address" in err
    assert "Traceback" not in err and '"serving"' not in out + err


# ---- examples/runtime ---------------------------------------------------------------


def _runtime_env() -> dict[str, str]:
    (drc,) = load_documents(RUNTIME / "runtime-config.yaml")
    (container,) = [
        c
        for c in drc["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
        if c["name"] == "package-runtime"
    ]
    return {e["name"]: e["value"] for e in container["env"]}


def test_runtime_examples_validate_against_crossplane_crds():
    docs = [d for p in sorted(RUNTIME.glob("*.yaml")) for d in load_documents(p)]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole", "ClusterRole", "ClusterRole", "DeploymentRuntimeConfig", "Function"
    ]  # fmt: skip
    for d in docs:
        validate_manifest(d)
    (fn,) = [d for d in docs if d["kind"] == "Function"]
    (drc,) = [d for d in docs if d["kind"] == "DeploymentRuntimeConfig"]
    assert fn["spec"]["runtimeConfigRef"] == {
        "apiVersion": "pkg.crossplane.io/v1beta1",
        "kind": "DeploymentRuntimeConfig",
        "name": drc["metadata"]["name"],
    }


def test_provider_kubernetes_example_redacts_secret_data_from_object_status():
    """Review 19d F1: provider-kubernetes copies the remote Secret's ``data`` (the
    Hugging Face token) into the token-secret Object's ``status.atProvider.manifest``
    unless it runs with ``--sanitize-secrets`` (v1.3.1, off by default). The Provider
    the install steps apply runs with it, validates against Crossplane's CRDs, is the
    package the Configuration depends on, at a version its constraint accepts."""
    from packaging.specifiers import SpecifierSet

    docs = load_documents(PROVIDER / "provider-kubernetes.yaml")
    assert sorted(d["kind"] for d in docs) == ["DeploymentRuntimeConfig", "Provider"]
    for d in docs:
        validate_manifest(d)
    (provider,) = [d for d in docs if d["kind"] == "Provider"]
    (drc,) = [d for d in docs if d["kind"] == "DeploymentRuntimeConfig"]
    assert provider["spec"]["runtimeConfigRef"] == {
        "apiVersion": "pkg.crossplane.io/v1beta1",
        "kind": "DeploymentRuntimeConfig",
        "name": drc["metadata"]["name"],
    }
    (config,) = load_documents(ROOT / "configuration" / "crossplane.yaml")
    (dep,) = [d for d in config["spec"]["dependsOn"] if d["kind"] == "Provider"]
    package, version = provider["spec"]["package"].rsplit(":", 1)
    assert package == dep["package"]
    assert version.lstrip("v") in SpecifierSet(dep["version"].replace("v", ""))
    pod = drc["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "package-runtime"]
    assert "--sanitize-secrets" in container["args"]


def test_tenant_role_writes_only_authored_kinds_and_names_real_resources():
    """Tenants write the kinds they author, never a composed one (a trial: a hand-written
    ModelCacheShard composed 3,000 hydrations for clusters that do not exist)."""
    plural = {}
    for xrd in sorted((ROOT / "compositions").glob("*/definition.yaml")):
        (d,) = load_documents(xrd)
        plural[d["spec"]["names"]["plural"]] = (d["spec"]["names"]["kind"], d["spec"]["scope"])
    roles = {
        d["metadata"]["name"]: d["rules"]
        for d in load_documents(RUNTIME / "tenant-rbac.yaml")
        if d["kind"] == "ClusterRole"
    }
    composed = {"ModelCacheShard", "ModelCacheHydration", "ModelReplica"}
    authored = {"ModelCache", "ModelDeployment", "ModelExperiment", "ModelBackfill"}
    written, read = set(), set()
    for rule in roles["modelplane-tenant"]:
        assert rule["apiGroups"] == ["modelplane.ai"]
        for res in rule["resources"]:
            base = res.split("/")[0]
            kind, scope = plural[base]
            assert scope == "Namespaced", res
            if "create" in rule["verbs"]:
                written.add(kind)
            read.add(kind)
    assert written == authored and not written & composed
    assert read == authored | composed
    (fleet,) = roles["modelplane-fleet-reader"]
    assert {plural[r][0] for r in fleet["resources"]} == {"InferenceCluster", "InferenceClass"}
    assert set(fleet["verbs"]) == {"get", "list", "watch"}


def test_runtime_example_sets_only_known_valid_settings(env, tmp_path):
    values = _runtime_env()
    assert set(values) <= set(VARIABLES), set(values) - set(VARIABLES)
    # The metrics directory is a path in the pod: the example mounts a volume there.
    (drc,) = load_documents(RUNTIME / "runtime-config.yaml")
    pod = drc["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "package-runtime"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = mounts[values["PROMETHEUS_MULTIPROC_DIR"]]
    assert {"name": volume, "emptyDir": {}} in pod["volumes"]
    values["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    for k, v in values.items():
        env.setenv(k, v)
    s = load_settings()  # valid with tracing on, so the OTEL values are checked too
    assert s.otel_enabled is True
    assert s.default_shm_size_limit == values["DEFAULT_SHM_SIZE_LIMIT"]


def test_readme_operations_covers_every_setting():
    text = (ROOT / "README.md").read_text()  # its Operations section
    missing = [v for v in VARIABLES if f"`{v}`" not in text]
    assert not missing, missing


# A URL's userinfo (user:password@) is a credential the OTLP/HTTP exporter sends as basic
# auth: `config` (meant for CI logs) and the start-up error line (what `kubectl logs`
# shows of a crash-looping pod) mask it (review 16d F6).
@pytest.mark.parametrize(
    ("var", "value", "shown"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://user:SECRETPW456@127.0.0.1:9/", "http://***@127.0.0.1:9/"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://SECRETPW456@c:4318/v1/traces", "https://***@c:4318/v1/traces"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318", "http://collector:4318"),
        # a slash in the password (not percent-encoded): everything up to the last @
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://us/er:SECRETPW456@collector:4318", "http://***@collector:4318"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces?k=v#f", "http://c:4318/v1/traces?k=v#f"),
    ],
)  # fmt: skip
def test_config_masks_otlp_endpoint_userinfo(var, value, shown):
    proc = _python(["config"], {"MODELPLANE_OTEL_ENABLED": "true", var: value})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "SECRETPW456" not in out + err
    by_var = {r["variable"]: r for r in yaml.safe_load(out)["settings"]}
    assert by_var[var]["value"] == shown


@pytest.mark.parametrize(
    ("var", "value", "shown"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "htp://user:SECRETPW456@collector:4318", "'htp://***@collector:4318'"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "u:SECRETPW456@c:4318", "'***@c:4318'"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", [["config"], ["--insecure", "--address", "127.0.0.1:0"]])
def test_settings_error_masks_otlp_endpoint_userinfo(var, value, shown, command):
    proc = _python(command, {"MODELPLANE_OTEL_ENABLED": "true", var: value})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "SECRETPW456" not in out + err
    assert f"{var}: {shown} is not an http(s) URL" in err
