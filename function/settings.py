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

import re
from functools import lru_cache
from typing import Annotated, Any

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")


def _env(name: str) -> Any:
    return Field(validation_alias=AliasChoices(name))


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
            msgs.append(f"{var}: {err['msg']}")
        raise SettingsError("invalid environment: " + "; ".join(msgs)) from None


@lru_cache(maxsize=1)
def default_settings() -> Settings:
    """Settings with every default and no environment (for tests and tools)."""
    return Settings.model_construct()
