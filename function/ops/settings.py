"""The function's effective settings: every flag and environment variable, in one place.

Every setting the function reads, from its command line or its environment, is a
field of :class:`Settings` here: its environment variable (the field's alias), its
type, its default, its unit, its one-line description and its rule (bounds or a
validator). The command line (``--help``), ``python -m function config`` and the
start-up check all read these definitions, and the composers that use a value
validate it with the same rule functions (:func:`image_rule`,
:func:`flash_loader_concurrency_rule`, :func:`positive_quantity_rule`), so a value that
passes start-up cannot fail a call later.

Kubernetes quantities (``8Gi``) follow
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/.
Durations are seconds.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from function.core.k8svalidation import go_parse_quantity
from function.core.memo import memo

QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\Z")
# The flash loader copies at most this many files at once (one thread each).
MAX_FLASH_LOADER_CONCURRENCY = 256
_IMAGE = re.compile(r"^\S+\Z")
# Largest --max-recv-message-size, in MiB: gRPC's message size options are C ints, so
# 2048 MiB (2^31 bytes) is one byte too many.
MAX_RECV_MESSAGE_MIB = 2047


# ---- rules shared by the start-up check and the composers that use the values ---------


def positive_quantity(value: Any) -> str | None:
    """``value`` as a quantity string when it is a Kubernetes quantity > 0, else None.

    The spelling is :data:`QUANTITY`'s (the XRDs' pattern of ``shmSizeLimit`` and
    ``tmpfsSizeLimit``; each such string is one ``resource.ParseQuantity`` takes); the
    value is Go's (:func:`function.core.k8svalidation.go_parse_quantity`). Integers (and
    floats with an integral value) are accepted as plain numbers of bytes.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value == int(value):
        value = str(int(value))
    if not isinstance(value, str) or not QUANTITY.match(value):
        return None
    return value if go_parse_quantity(value) > 0 else None


def positive_quantity_rule(value: Any, example: str = "64Gi") -> str:
    """The rule of every size limit: a Kubernetes quantity greater than zero.

    Returns:
        The quantity as a string.

    Raises:
        ValueError: ``must be a Kubernetes quantity greater than zero such as <example>,
            not <value>``.
    """
    q = positive_quantity(value)
    if q is None:
        raise ValueError(
            f"must be a Kubernetes quantity greater than zero such as {example}, not {value!r}"
        )
    return q


def image_rule(value: Any) -> str:
    """The rule of every image setting: a non-empty image reference without whitespace.

    Raises:
        ValueError: naming the value.
    """
    if isinstance(value, str) and _IMAGE.match(value):
        return value
    raise ValueError(f"must be a non-empty image reference without spaces, not {value!r}")


def flash_loader_concurrency_rule(value: Any) -> int:
    """The rule of the flash loader's concurrency: a whole number from 1 to 256.

    Raises:
        ValueError: naming the value.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and value == int(value) and 1 <= int(value) <= MAX_FLASH_LOADER_CONCURRENCY:
        return int(value)
    raise ValueError(
        f"must be a whole number from 1 to {MAX_FLASH_LOADER_CONCURRENCY}, not {value!r}"
    )


# ---- the settings ---------------------------------------------------------------------


def _env(name: str, description: str, unit: str, **bounds: Any) -> Any:
    """A field read from environment variable ``name``.

    ``description`` is one line saying what the setting does (no default: that is
    rendered from the field's default by :func:`describe`); ``unit`` is the unit or form
    of its value (``seconds``, ``MiB``, ``quantity``, ``boolean``, ...); ``bounds`` are
    pydantic's numeric constraints (``ge``, ``le``).
    """
    return Field(
        validation_alias=AliasChoices(name),
        description=description,
        json_schema_extra={"unit": unit},
        **bounds,
    )


# Host (name, IPv4, or [IPv6]) and port; an empty host listens on every interface.
ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]*):([0-9]{1,5})\Z")
# Samplers the OpenTelemetry SDK knows (OTEL_TRACES_SAMPLER, OpenTelemetry SDK environment
# variable specification); the SDK itself only warns about others and falls back.
OTEL_SAMPLERS = frozenset(
    {
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    }
)
_DAY = 86400
_BIG = 10**7  # seconds: about 115 days, past any sensible deadline


class Settings(BaseSettings):
    """Effective settings. Each field's alias is the environment variable it reads.

    The first fields are those of Crossplane's function runtime, which a flag can also
    set (:data:`FLAGS`); the flag wins over the variable.
    """

    model_config = SettingsConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    # --- serving (Crossplane's function-runtime flags and their variables) ---
    address: Annotated[
        str, _env("ADDRESS", "[host]:port the gRPC server listens on", "[host]:port")
    ] = "0.0.0.0:9443"
    tls_server_certs_dir: Annotated[
        str | None,
        _env(
            "TLS_SERVER_CERTS_DIR",
            "directory with tls.crt, tls.key and ca.crt for mTLS; unset: give --insecure",
            "path",
        ),
    ] = None
    insecure: Annotated[
        bool, _env("INSECURE", "serve plaintext gRPC only (no TLS listener)", "boolean")
    ] = False
    debug: Annotated[
        bool, _env("DEBUG", "readable console logs at debug level instead of JSON", "boolean")
    ] = False
    max_recv_message_size: Annotated[
        int,
        _env(
            "MAX_RECV_MESSAGE_SIZE",
            f"largest RunFunction request accepted, 1 to {MAX_RECV_MESSAGE_MIB} (a "
            "5,000-cluster request is about 5 MiB)",
            "MiB",
            ge=1,
            le=MAX_RECV_MESSAGE_MIB,
        ),
    ] = 256
    workers: Annotated[
        int | None,
        _env(
            "WORKERS",
            "compute processes behind the one gRPC acceptor, plus one at a lower CPU "
            "priority that composes only requests of 2 MiB and more; unset: the CPUs the "
            "container may use, at most 8, and as many as its memory limit holds (512 MiB "
            "without one: 2 with the default cache budget)",
            "processes",
            ge=1,
            le=64,
        ),
    ] = None
    grace_seconds: Annotated[
        float,
        _env(
            "MODELPLANE_GRACE_SECONDS",
            "how long in-flight calls may finish after SIGTERM",
            "seconds",
            ge=0,
            le=3600,
        ),
    ] = 20.0
    # --- serving under load (issue 14) ---
    call_deadline_seconds: Annotated[
        float,
        _env(
            "MODELPLANE_CALL_DEADLINE_SECONDS",
            "compute deadline of one RunFunction call (its gRPC deadline, capped by this); "
            "past it: a fatal result naming the XR, and the compute process is replaced",
            "seconds",
            gt=0,
            le=3600,
        ),
    ] = 10.0
    selector_cost_limit: Annotated[
        int,
        _env(
            "MODELPLANE_SELECTOR_COST_LIMIT",
            "largest estimated cost of one device selector (20000: about 0.2 s of CPU); "
            "a costlier selector is refused by its path",
            "evaluation steps",
            ge=1,
            le=10**9,
        ),
    ] = 20_000
    cache_budget_mib: Annotated[
        int,
        _env(
            "MODELPLANE_CACHE_BUDGET_MIB",
            "byte budget of the memos of each compute process (64 keeps a pod with 2 "
            "processes and the large-call one under 512 MiB; the default process count "
            "fits the memory limit with it); least recently used entries are evicted past it",
            "MiB",
            ge=1,
            le=65536,
        ),
    ] = 64
    metric_series_limit: Annotated[
        int,
        _env(
            "MODELPLANE_METRIC_SERIES_LIMIT",
            "label sets each process keeps per metric family labelled with tenants' object "
            "names (a ModelDeployment's replicas gauge, a backfill's counters); the least "
            "recently updated is dropped past it, and counted. A label set takes at most "
            "about 15 KiB (a histogram's, with 253-character names): 200 keeps a pod with 2 "
            "processes and the large-call one under 512 MiB at 20,000 distinct ModelDeployments",
            "label sets",
            ge=1,
            le=1_000_000,
        ),
    ] = 200
    trust_resource_versions: Annotated[
        bool,
        _env(
            "MODELPLANE_TRUST_RESOURCE_VERSIONS",
            "read an object once per uid and resourceVersion (the API server changes "
            "resourceVersion on every write); false: read every object on every call, "
            "for crossplane render of hand-edited files with a long-running function",
            "boolean",
        ),
    ] = True
    metrics_address: Annotated[
        str,
        _env(
            "METRICS_ADDRESS",
            "[host]:port serving Prometheus metrics at /metrics; empty: off",
            "[host]:port",
            validate_default=True,  # the default :8080 must not be --address's port either
        ),
    ] = ":8080"

    # --- what the composers use ---
    hydration_image: Annotated[
        str,
        _env(
            "MODELPLANE_HYDRATION_IMAGE",
            "image of the hydration Job (python -m jobs.hydrate)",
            "image",
        ),
    ] = "xpkg.crossplane.io/modelplane/function-modelplane:v0.1.0"
    hydration_backoff_limit: Annotated[
        int,
        _env(
            "MODELPLANE_HYDRATION_BACKOFF_LIMIT",
            "backoffLimit of hydration Jobs (retries before Failed)",
            "retries",
            ge=0,
            le=_BIG,
        ),
    ] = 3
    hydration_deadline_seconds: Annotated[
        int,
        _env(
            "MODELPLANE_HYDRATION_DEADLINE_SECONDS",
            "activeDeadlineSeconds of hydration Jobs",
            "seconds",
            ge=1,
            le=_BIG,
        ),
    ] = 6 * 3600
    pvc_bind_timeout_seconds: Annotated[
        int,
        _env(
            "MODELPLANE_PVC_BIND_TIMEOUT_SECONDS",
            "how long a cache PVC may stay unbound before its hydration fails; 0: no limit",
            "seconds",
            ge=0,
            le=_BIG,
        ),
    ] = 900
    poll_seconds: Annotated[
        int,
        _env(
            "MODELPLANE_POLL_SECONDS",
            "how soon to be called again while something is in progress",
            "seconds",
            ge=0,
            le=_DAY,
        ),
    ] = 30
    default_shm_size_limit: Annotated[
        str,
        _env(
            "DEFAULT_SHM_SIZE_LIMIT",
            "sizeLimit of /dev/shm in engine pods whose deployment sets no shmSizeLimit",
            "quantity",
        ),
    ] = "8Gi"
    default_flash_loader_enabled: Annotated[
        bool,
        _env(
            "DEFAULT_FLASH_LOADER_ENABLED",
            "flash loader on by default (the ModelCache and the deployment override it)",
            "boolean",
        ),
    ] = False
    default_flash_loader_image: Annotated[
        str,
        _env("DEFAULT_FLASH_LOADER_IMAGE", "image of the flash loader init container", "image"),
    ] = "xpkg.crossplane.io/modelplane/function-modelplane:v0.1.0"
    default_flash_loader_concurrency: Annotated[
        int,
        _env(
            "DEFAULT_FLASH_LOADER_CONCURRENCY",
            f"files the flash loader copies at once, 1 to {MAX_FLASH_LOADER_CONCURRENCY}",
            "files",
        ),
    ] = 8
    default_flash_loader_tmpfs_size_limit: Annotated[
        str,
        _env(
            "DEFAULT_FLASH_LOADER_TMPFS_SIZE_LIMIT",
            "sizeLimit of the flash loader's node-local memory copy of the weights",
            "quantity",
        ),
    ] = "64Gi"
    default_ttl_seconds: Annotated[
        int,
        _env(
            "MODELPLANE_DEFAULT_TTL_SECONDS",
            "response TTL when a composer asks for no sooner call",
            "seconds",
            ge=1,
            le=_DAY,
        ),
    ] = 60
    prometheus_multiproc_dir: Annotated[
        str | None,
        _env(
            "PROMETHEUS_MULTIPROC_DIR",
            "prometheus-client multiprocess directory (the compute processes); unset: a "
            "temporary one",
            "path",
        ),
    ] = None
    # --- tracing ---
    otel_enabled: Annotated[
        bool, _env("MODELPLANE_OTEL_ENABLED", "export OpenTelemetry traces (OTLP/HTTP)", "boolean")
    ] = False
    # Standard OpenTelemetry variables. The SDK reads them itself; they are mirrored here to
    # be reported by `python -m function config` and, only while MODELPLANE_OTEL_ENABLED is
    # true, validated at start-up (while tracing is off they are never read).
    otel_exporter_otlp_endpoint: Annotated[
        str | None,
        _env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTLP/HTTP base URL (/v1/traces added); unset: http://localhost:4318",
            "URL",
        ),
    ] = None
    otel_exporter_otlp_traces_endpoint: Annotated[
        str | None,
        _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "full OTLP/HTTP traces URL", "URL"),
    ] = None
    otel_exporter_otlp_protocol: Annotated[
        str | None,
        _env("OTEL_EXPORTER_OTLP_PROTOCOL", "only http/protobuf is supported", "protocol"),
    ] = None
    otel_service_name: Annotated[
        str | None,
        _env("OTEL_SERVICE_NAME", "service.name of spans; unset: function-modelplane", "name"),
    ] = None
    otel_resource_attributes: Annotated[
        str | None,
        _env("OTEL_RESOURCE_ATTRIBUTES", "resource attributes of spans", "key=value,..."),
    ] = None
    otel_traces_sampler: Annotated[
        str | None,
        _env("OTEL_TRACES_SAMPLER", "sampler; unset: parentbased_always_on", "sampler name"),
    ] = None
    otel_traces_sampler_arg: Annotated[
        str | None,
        _env("OTEL_TRACES_SAMPLER_ARG", "sampling ratio of the *traceidratio samplers", "0..1"),
    ] = None

    @field_validator("tls_server_certs_dir", "workers", "prometheus_multiproc_dir", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: Any) -> Any:
        return None if v == "" else v

    @field_validator("insecure", "debug", mode="before")
    @classmethod
    def _empty_is_false(cls, v: Any) -> Any:
        return False if v == "" else v

    @field_validator("address")
    @classmethod
    def _listen_address(cls, v: str) -> str:
        m = ADDRESS.match(v)
        if not m or int(m.group(2)) > 65535:
            raise ValueError(f"{v!r} is not [host]:port such as 0.0.0.0:9443")
        return v

    @field_validator("metrics_address")
    @classmethod
    def _address(cls, v: str, info: ValidationInfo) -> str:
        if v == "":
            return v
        m = ADDRESS.match(v)
        if not m or int(m.group(2)) > 65535:
            raise ValueError(f"{v!r} is not [host]:port such as :8080 (empty turns it off)")
        # address is declared, so validated, first (absent when it is invalid).
        grpc_address = info.data.get("address")
        if grpc_address and same_listener(v, grpc_address):
            raise ValueError(
                f"{v!r} is the port the gRPC server listens on (--address / ADDRESS "
                f"{grpc_address}); give the metrics endpoint another port, or an empty "
                "value to turn it off"
            )
        return v

    @field_validator("prometheus_multiproc_dir")
    @classmethod
    def _multiproc_dir(cls, v: str | None) -> str | None:
        if v and not (os.path.isdir(v) and os.access(v, os.W_OK)):
            raise ValueError(f"{v!r} is not a writable directory")
        return v or None

    @field_validator("hydration_image", "default_flash_loader_image")
    @classmethod
    def _image(cls, v: str) -> str:
        return image_rule(v)

    @field_validator("default_flash_loader_concurrency")
    @classmethod
    def _concurrency(cls, v: int) -> int:
        return flash_loader_concurrency_rule(v)

    @field_validator("default_shm_size_limit")
    @classmethod
    def _shm(cls, v: str) -> str:
        return positive_quantity_rule(v, "8Gi")

    @field_validator("default_flash_loader_tmpfs_size_limit")
    @classmethod
    def _tmpfs(cls, v: str) -> str:
        return positive_quantity_rule(v, "64Gi")

    @field_validator(
        "otel_exporter_otlp_endpoint",
        "otel_exporter_otlp_traces_endpoint",
        "otel_exporter_otlp_protocol",
        "otel_resource_attributes",
        "otel_traces_sampler",
        "otel_traces_sampler_arg",
    )
    @classmethod
    def _otel(cls, v: str | None, info: ValidationInfo) -> str | None:
        # Validated only when tracing is on (otel_enabled is declared, so validated, first).
        if not v or not info.data.get("otel_enabled"):
            return v
        rule = _OTEL_RULES.get(info.field_name or "")
        if rule is not None:
            rule(v)
        return v


# Hosts that listen on every interface: "" and "::" (IPv6, and IPv4 on a dual-stack host).
_EVERY_INTERFACE = frozenset({"", "::"})


def same_listener(a: str, b: str) -> bool:
    """Whether ``[host]:port`` addresses ``a`` and ``b`` cannot both be listened on: the
    same port (not 0) and the same host, or one of them on every interface (``0.0.0.0``
    takes every IPv4 host's port, ``::`` and an empty host every host's)."""
    ma, mb = ADDRESS.match(a), ADDRESS.match(b)
    if not ma or not mb or int(ma.group(2)) != int(mb.group(2)) or int(ma.group(2)) == 0:
        return False
    ha, hb = (m.group(1).strip("[]").lower() for m in (ma, mb))
    if ha == hb or ha in _EVERY_INTERFACE or hb in _EVERY_INTERFACE:
        return True
    if "0.0.0.0" in (ha, hb):
        other = hb if ha == "0.0.0.0" else ha
        return ":" not in other  # an IPv4 address or a host name
    return False


def _otlp_url(v: str) -> None:
    u = urlsplit(v)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(
            f"{mask_userinfo(v)!r} is not an http(s) URL such as http://collector:4318"
        )


# Settings whose value is a URL that may carry a credential as its userinfo: shown (by
# ``config``, in errors) through mask_userinfo.
URL_FIELDS = frozenset({"otel_exporter_otlp_endpoint", "otel_exporter_otlp_traces_endpoint"})


def mask_userinfo(url: str) -> str:
    """``url`` with its userinfo (``user:password@``, which the OTLP/HTTP exporter sends
    as basic auth) replaced by ``***@``: ``http://u:pw@c:4318/`` -> ``http://***@c:4318/``.

    Everything before the last ``@`` ahead of the query or fragment is masked (after the
    ``scheme://``, when there is one), so a password holding a ``/`` or no scheme at all
    (a value that fails validation) is masked too. A URL without ``@`` is returned as it
    is."""
    scheme, sep, rest = url.partition("//")
    if not sep:
        scheme, rest = "", url
    else:
        scheme += sep
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    _, at, after = rest[:cut].rpartition("@")
    if not at:
        return url
    return f"{scheme}***@{after}{rest[cut:]}"


def _otlp_protocol(v: str) -> None:
    if v != "http/protobuf":
        raise ValueError(f"{v!r}: this function exports OTLP over HTTP (http/protobuf)")


def _resource_attributes(v: str) -> None:
    for pair in v.split(","):
        key, sep, _ = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{pair!r} is not key=value")


def _sampler(v: str) -> None:
    if v.strip().lower() not in OTEL_SAMPLERS:
        raise ValueError(f"{v!r} is not one of {', '.join(sorted(OTEL_SAMPLERS))}")


def _sampler_arg(v: str) -> None:
    try:
        ratio = float(v)
    except ValueError:
        raise ValueError(f"{v!r} is not a number") from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"{v!r} is not between 0 and 1")


# The OpenTelemetry SDK's variables (checked only when tracing is on): field -> rule,
# each raising ValueError with the value and what is expected.
_OTEL_RULES: dict[str, Callable[[str], None]] = {
    "otel_exporter_otlp_endpoint": _otlp_url,
    "otel_exporter_otlp_traces_endpoint": _otlp_url,
    "otel_exporter_otlp_protocol": _otlp_protocol,
    "otel_resource_attributes": _resource_attributes,
    "otel_traces_sampler": _sampler,
    "otel_traces_sampler_arg": _sampler_arg,
}


# Command-line flags and the field each sets (a flag wins over the field's variable).
# The first name is the one --help shows; the others are aliases.
FLAGS: dict[str, tuple[str, ...]] = {
    "address": ("--address",),
    "tls_server_certs_dir": ("--tls-certs-dir", "--tls-server-certs-dir"),
    "insecure": ("--insecure",),
    "debug": ("--debug", "-d"),
    "max_recv_message_size": ("--max-recv-message-size",),
    "workers": ("--processes", "--workers"),
    "grace_seconds": ("--grace-seconds",),
    "metrics_address": ("--metrics-address",),
}


def variable(field: str) -> str:
    """The environment variable that field ``field`` of :class:`Settings` reads.

    Raises:
        KeyError: for a name that is not a field.
    """
    alias = Settings.model_fields[field].validation_alias
    return alias.choices[0] if isinstance(alias, AliasChoices) else field.upper()  # type: ignore[return-value]


def unit(field: str) -> str:
    """The unit or form of field ``field``'s value (``seconds``, ``MiB``, ``quantity``, ...)."""
    extra = Settings.model_fields[field].json_schema_extra
    return str(extra["unit"]) if isinstance(extra, dict) else ""


def default_text(field: str) -> str:
    """Field ``field``'s default as shown to a person: the value, ``unset`` or ``empty``."""
    value = Settings.model_fields[field].default
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value)


def describe(field: str) -> str:
    """One line for ``--help`` and ``config``: what it does, its unit and its default.

    For example ``largest RunFunction request accepted (...) (MiB, default 256)``.
    """
    info = Settings.model_fields[field]
    return f"{info.description} ({unit(field)}, default {default_text(field)})"


class SettingsError(Exception):
    """A setting holds an invalid value; names the variable (or the flag that set it)."""


def flag_spelling(field: str, argv: list[str]) -> str:
    """The spelling of ``field``'s flag that ``argv`` used (an alias too); the first if none."""
    names = FLAGS[field]
    for token in argv:
        name = token.split("=", 1)[0]
        if name in names:
            return name
    return names[0]


def load_settings(
    flags: Mapping[str, Any] | None = None, argv: list[str] | None = None
) -> Settings:
    """Read and validate the settings from the process environment and the flags.

    Args:
        flags: Field name to value for the settings given on the command line
            (they win over the environment); None or empty: the environment only.
        argv: the command line the flags came from, so an error names the flag as the
            user spelled it (``--workers`` or ``--processes``).

    Raises:
        SettingsError: naming every invalid variable (or flag) as it was written, the
            value it holds and why.
    """
    given = dict(flags or {})
    try:
        return Settings(**given)
    except ValidationError as e:
        msgs = []
        for err in e.errors(include_url=False):
            field = str(err["loc"][0]) if err.get("loc") else "?"
            if field in given and field in FLAGS:
                name = flag_spelling(field, argv or [])
            else:
                name = variable(field) if field in Settings.model_fields else field
            msg = str(err["msg"]).removeprefix("Value error, ")
            value = err.get("input")
            if URL_FIELDS & {field, field.lower()} and isinstance(
                value, str
            ):  # loc: field or variable
                value = mask_userinfo(value)  # a collector's password is not printed
            scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
            if scalar and repr(value) not in msg:
                msg += f" (got {value!r})"
            msgs.append(f"{name}: {msg}")
        raise SettingsError("invalid settings: " + "; ".join(msgs)) from None


@memo(1)
def default_settings() -> Settings:
    """Settings with every default and no environment (for tests and tools)."""
    return Settings.model_construct()


# Prefixes of the variables this function's settings use. Other programs of the project
# use them too (the pods' MODELPLANE_MODEL, the tests' MODELPLANE_REQUIRE_E2E), so only a
# name close to a setting's is taken for a misspelling.
OWN_PREFIXES = ("MODELPLANE_", "DEFAULT_")
_CLOSE = 0.9  # difflib ratio: one or two characters off in a name of 20 or more


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Misspelt settings: variables of :data:`OWN_PREFIXES` that no setting reads but whose
    name is within one or two characters of one that does.

    Names are compared case-insensitively, as pydantic-settings reads them.

    Args:
        environ: The environment to check (default: the process's).

    Returns:
        ``(name, setting)`` per misspelt variable, sorted by name, with the variable of the
        setting it resembles (``difflib`` ratio at least 0.9). Values are never read, so a
        secret set under a misspelt name is never shown.
    """
    env = os.environ if environ is None else environ
    known = [variable(f) for f in Settings.model_fields]
    lower = {k.lower() for k in known}
    out: list[tuple[str, str]] = []
    for name in sorted(env):
        if not name.upper().startswith(OWN_PREFIXES) or name.lower() in lower:
            continue
        close = difflib.get_close_matches(name.upper(), known, n=1, cutoff=_CLOSE)
        if close:
            out.append((name, close[0]))
    return out


def unknown_text(name: str, setting: str) -> str:
    """One line about a misspelt variable: ``MODELPLANE_GRACE_SECOND is not a setting
    (did you mean MODELPLANE_GRACE_SECONDS?); it is ignored``."""
    return f"{name} is not a setting (did you mean {setting}?); it is ignored"
