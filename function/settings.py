"""The function's effective settings, read once from its environment.

Every default the function reads from its environment lives here, typed and
validated at start-up with pydantic-settings: a bad value stops the function
with a message that names the variable. ``python -m function config`` prints the
effective values and where each came from.

Kubernetes quantities (``8Gi``) follow
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/.
Durations are seconds.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")


def _env(name: str, description: str | None = None) -> Any:
    return Field(validation_alias=AliasChoices(name), description=description)


# Host (name, IPv4, or [IPv6]) and port; an empty host listens on every interface.
ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]*):([0-9]{1,5})$")
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


class Settings(BaseSettings):
    """Effective settings. Each field's alias is the environment variable it reads."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    hydration_image: Annotated[str, _env("MODELPLANE_HYDRATION_IMAGE")] = (
        "xpkg.crossplane.io/modelplane/function-modelplane:v0.1.0"
    )
    hydration_backoff_limit: Annotated[int, _env("MODELPLANE_HYDRATION_BACKOFF_LIMIT")] = 3
    hydration_deadline_seconds: Annotated[int, _env("MODELPLANE_HYDRATION_DEADLINE_SECONDS")] = (
        6 * 3600
    )
    pvc_bind_timeout_seconds: Annotated[int, _env("MODELPLANE_PVC_BIND_TIMEOUT_SECONDS")] = 900
    poll_seconds: Annotated[int, _env("MODELPLANE_POLL_SECONDS")] = 30
    default_shm_size_limit: Annotated[str, _env("DEFAULT_SHM_SIZE_LIMIT")] = "8Gi"
    default_flash_loader_enabled: Annotated[bool, _env("DEFAULT_FLASH_LOADER_ENABLED")] = False
    default_flash_loader_image: Annotated[str, _env("DEFAULT_FLASH_LOADER_IMAGE")] = (
        "xpkg.crossplane.io/modelplane/function-modelplane:v0.1.0"
    )
    default_flash_loader_concurrency: Annotated[int, _env("DEFAULT_FLASH_LOADER_CONCURRENCY")] = 8
    default_flash_loader_tmpfs_size_limit: Annotated[
        str, _env("DEFAULT_FLASH_LOADER_TMPFS_SIZE_LIMIT")
    ] = "64Gi"
    otel_enabled: Annotated[bool, _env("MODELPLANE_OTEL_ENABLED")] = False

    # --- operability (issue 7) ---
    default_ttl_seconds: Annotated[
        int,
        _env(
            "MODELPLANE_DEFAULT_TTL_SECONDS",
            "response TTL (seconds) when a composer asks for no sooner call; 1 to 86400",
        ),
    ] = 60
    metrics_address: Annotated[
        str,
        _env(
            "METRICS_ADDRESS",
            "[host]:port serving Prometheus metrics (--metrics-address wins); empty: off",
        ),
    ] = ":8080"
    prometheus_multiproc_dir: Annotated[
        str | None,
        _env(
            "PROMETHEUS_MULTIPROC_DIR",
            "prometheus-client multiprocess directory (several worker processes); unset: off",
        ),
    ] = None
    # Standard OpenTelemetry variables. The SDK reads them itself; they are mirrored here to
    # be reported by `python -m function config` and, only while MODELPLANE_OTEL_ENABLED is
    # true, validated at start-up (while tracing is off they are never read).
    otel_exporter_otlp_endpoint: Annotated[
        str | None, _env("OTEL_EXPORTER_OTLP_ENDPOINT", "OTLP/HTTP base URL (/v1/traces added)")
    ] = None
    otel_exporter_otlp_traces_endpoint: Annotated[
        str | None, _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "full OTLP/HTTP traces URL")
    ] = None
    otel_exporter_otlp_protocol: Annotated[
        str | None, _env("OTEL_EXPORTER_OTLP_PROTOCOL", "only http/protobuf is supported")
    ] = None
    otel_service_name: Annotated[
        str | None, _env("OTEL_SERVICE_NAME", "service.name (default function-modelplane)")
    ] = None
    otel_resource_attributes: Annotated[
        str | None, _env("OTEL_RESOURCE_ATTRIBUTES", "key=value,... resource attributes")
    ] = None
    otel_traces_sampler: Annotated[
        str | None, _env("OTEL_TRACES_SAMPLER", "sampler (default parentbased_always_on)")
    ] = None
    otel_traces_sampler_arg: Annotated[
        str | None, _env("OTEL_TRACES_SAMPLER_ARG", "ratio 0..1 for *traceidratio samplers")
    ] = None

    @field_validator("default_ttl_seconds")
    @classmethod
    def _ttl(cls, v: int) -> int:
        if v < 1 or v > 86400:
            raise ValueError("must be between 1 and 86400 seconds")
        return v

    @field_validator("metrics_address")
    @classmethod
    def _address(cls, v: str) -> str:
        if v == "":
            return v
        m = ADDRESS.match(v)
        if not m or int(m.group(2)) > 65535:
            raise ValueError(f"{v!r} is not [host]:port such as :8080 (empty turns it off)")
        return v

    @field_validator("prometheus_multiproc_dir")
    @classmethod
    def _multiproc_dir(cls, v: str | None) -> str | None:
        if v and not (os.path.isdir(v) and os.access(v, os.W_OK)):
            raise ValueError(f"{v!r} is not a writable directory")
        return v or None

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
        name = info.field_name
        if name in ("otel_exporter_otlp_endpoint", "otel_exporter_otlp_traces_endpoint"):
            u = urlsplit(v)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(f"{v!r} is not an http(s) URL such as http://collector:4318")
        elif name == "otel_exporter_otlp_protocol":
            if v != "http/protobuf":
                raise ValueError(f"{v!r}: this function exports OTLP over HTTP (http/protobuf)")
        elif name == "otel_resource_attributes":
            for pair in v.split(","):
                key, sep, _ = pair.partition("=")
                if not sep or not key.strip():
                    raise ValueError(f"{pair!r} is not key=value")
        elif name == "otel_traces_sampler":
            if v.strip().lower() not in OTEL_SAMPLERS:
                raise ValueError(f"{v!r} is not one of {', '.join(sorted(OTEL_SAMPLERS))}")
        elif name == "otel_traces_sampler_arg":
            try:
                ratio = float(v)
            except ValueError:
                raise ValueError(f"{v!r} is not a number") from None
            if not 0.0 <= ratio <= 1.0:
                raise ValueError(f"{v!r} is not between 0 and 1")
        return v

    @field_validator(
        "hydration_backoff_limit",
        "hydration_deadline_seconds",
        "pvc_bind_timeout_seconds",
        "poll_seconds",
        "default_flash_loader_concurrency",
    )
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 0 or v > 10**7:
            raise ValueError("must be between 0 and 10000000")
        return v

    @field_validator("default_shm_size_limit", "default_flash_loader_tmpfs_size_limit")
    @classmethod
    def _quantity(cls, v: str) -> str:
        if not QUANTITY.match(v):
            raise ValueError(f"{v!r} is not a Kubernetes quantity such as 8Gi")
        return v


class SettingsError(Exception):
    """A variable of the environment holds an invalid value; names the variable."""


def load_settings() -> Settings:
    """Read and validate the settings from the process environment.

    Raises:
        SettingsError: naming every invalid variable and why.
    """
    try:
        return Settings()
    except ValidationError as e:
        msgs = []
        for err in e.errors(include_url=False):
            field = str(err["loc"][0]) if err.get("loc") else "?"
            info = Settings.model_fields.get(field)
            alias = info.validation_alias if info else None
            var = alias.choices[0] if isinstance(alias, AliasChoices) else field
            msg = str(err["msg"]).removeprefix("Value error, ")
            msgs.append(f"{var}: {msg}")
        raise SettingsError("invalid environment: " + "; ".join(msgs)) from None


@lru_cache(maxsize=1)
def default_settings() -> Settings:
    """Settings with every default and no environment (for tests and tools)."""
    return Settings.model_construct()
