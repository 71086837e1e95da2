"""Resolve the engine pod's flash-loader and ``/dev/shm`` settings from their levels.

A pure function of its inputs (no I/O): the composer passes the function's
settings, the ModelCache's ``spec.flashLoader`` and the replica's own
``spec.flashLoader`` (copied from the ModelDeployment).

Precedence, lowest first; a field unset (absent or null) at a level inherits
from the level below it, so an omitted ``enabled`` never means ``false``:

=====  ===========================================  ===============================
level  flash loader                                 /dev/shm size limit
=====  ===========================================  ===============================
1      ``DEFAULT_FLASH_LOADER_ENABLED``, ``_IMAGE``, ``DEFAULT_SHM_SIZE_LIMIT`` (8Gi)
       ``_CONCURRENCY``, ``_TMPFS_SIZE_LIMIT``
2      the ModelCache's ``spec.flashLoader``         (none)
3      the deployment's ``spec.flashLoader``         the deployment's ``spec.shmSizeLimit``
=====  ===========================================  ===============================

Valid values: ``enabled`` a boolean; ``image`` a non-empty image reference
without whitespace; ``concurrency`` a whole number from 1 to
:data:`MAX_CONCURRENCY`; size limits a Kubernetes quantity greater than zero
(https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/).
Each rule is defined once, in :mod:`function.ops.settings` (:func:`image_rule`,
:func:`flash_loader_concurrency_rule`, :func:`positive_quantity_rule`), and applies at
every level: the function's own defaults are checked by the same rule at start-up, so
only the ModelCache's and the deployment's levels can fail here. An invalid value
raises :class:`~function.core.errors.SpecError` naming the field and its level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.core.errors import SpecError, quoted
from function.ops.settings import (
    MAX_FLASH_LOADER_CONCURRENCY,
    Settings,
    flash_loader_concurrency_rule,
    image_rule,
    positive_quantity_rule,
)

MAX_CONCURRENCY = MAX_FLASH_LOADER_CONCURRENCY

# field -> (Settings attribute, environment variable)
_FIELDS: dict[str, tuple[str, str]] = {
    "enabled": ("default_flash_loader_enabled", "DEFAULT_FLASH_LOADER_ENABLED"),
    "image": ("default_flash_loader_image", "DEFAULT_FLASH_LOADER_IMAGE"),
    "concurrency": ("default_flash_loader_concurrency", "DEFAULT_FLASH_LOADER_CONCURRENCY"),
    "tmpfsSizeLimit": (
        "default_flash_loader_tmpfs_size_limit",
        "DEFAULT_FLASH_LOADER_TMPFS_SIZE_LIMIT",
    ),
}
# Every Settings attribute the resolvers here read (a cache key for their results).
SETTINGS_ATTRS: tuple[str, ...] = (
    "default_shm_size_limit",
    *(attr for attr, _ in _FIELDS.values()),
)


@dataclass(frozen=True, slots=True)
class FlashLoader:
    """The effective flash-loader settings of a replica.

    Attributes:
        enabled: Whether engine pods copy the weights to node-local memory first.
        image: The init container's image.
        concurrency: Files copied in parallel.
        tmpfs_size_limit: ``sizeLimit`` of the memory-backed ``emptyDir`` (a quantity).
        sources: For each field, the level it came from (for status and events).
    """

    enabled: bool
    image: str
    concurrency: int
    tmpfs_size_limit: str
    sources: tuple[tuple[str, str], ...] = ()


def _check(field: str, value: Any) -> tuple[Any, str | None]:
    """Validate one field's value: ``(normalized, None)`` or ``(None, why)``."""
    if field == "enabled":
        if isinstance(value, bool):
            return value, None
        return None, f"must be true or false, not {quoted(value)}"
    rule = _RULES[field]
    try:
        return rule(value), None
    except ValueError as e:
        return None, str(e)


_RULES: dict[str, Any] = {
    "image": image_rule,
    "concurrency": flash_loader_concurrency_rule,
    "tmpfsSizeLimit": positive_quantity_rule,
}


def resolve_flash_loader(
    settings: Settings,
    cache: Mapping[str, Any] | None,
    deployment: Mapping[str, Any] | None,
    *,
    cache_level: str = "ModelCache spec.flashLoader",
    deployment_field: str = "spec.flashLoader",
) -> FlashLoader:
    """Resolve the flash-loader settings (see the module docstring for the order).

    Args:
        settings: The function's settings (level 1, ``DEFAULT_FLASH_LOADER_*``).
        cache: The ModelCache's ``spec.flashLoader`` (level 2), or None.
        deployment: The replica's ``spec.flashLoader`` (level 3), or None.
        cache_level: How to name level 2 in errors, for example
            ``ModelCache ml-team/qwen-cache spec.flashLoader``.
        deployment_field: The field path of level 3 in the replica.

    Returns:
        The effective :class:`FlashLoader`.

    Raises:
        SpecError: for an invalid value at any level; the field is
            ``<level path>.<field>`` and the message names the level.
    """
    out: dict[str, Any] = {}
    sources: list[tuple[str, str]] = []
    for field, (attr, env) in _FIELDS.items():
        candidates = [
            (getattr(settings, attr, None), env, f"function default {env}"),
            ((cache or {}).get(field), f"{cache_level}.{field}", cache_level),
            ((deployment or {}).get(field), f"{deployment_field}.{field}", "the deployment"),
        ]
        chosen: Any = None
        source = ""
        for value, path, level in candidates:
            if value is None:
                continue
            norm, why = _check(field, value)
            if why is not None:
                raise SpecError(path, f"{why} (set at level: {level})")
            chosen, source = norm, level
        if chosen is None:  # only with settings built without defaults
            raise SpecError(env, "has no value at any level")
        out[field] = chosen
        sources.append((field, source))
    return FlashLoader(
        enabled=out["enabled"],
        image=out["image"],
        concurrency=out["concurrency"],
        tmpfs_size_limit=out["tmpfsSizeLimit"],
        sources=tuple(sources),
    )


def resolve_shm(
    settings: Settings, deployment: Any, *, deployment_field: str = "spec.shmSizeLimit"
) -> str:
    """The ``sizeLimit`` of an engine pod's memory-backed ``/dev/shm``.

    Args:
        settings: The function's settings (``DEFAULT_SHM_SIZE_LIMIT``, 8Gi unless set).
        deployment: The deployment's ``shmSizeLimit`` or None (inherit).
        deployment_field: The field path of the override in errors.

    Raises:
        SpecError: when a level holds something that is not a quantity > 0.
    """
    value = settings.default_shm_size_limit
    try:
        value = positive_quantity_rule(value, "8Gi")
    except ValueError as e:  # only with settings built without validation
        raise SpecError(
            "DEFAULT_SHM_SIZE_LIMIT", f"{e} (set at level: function default DEFAULT_SHM_SIZE_LIMIT)"
        ) from None
    if deployment is None:
        return value
    try:
        return positive_quantity_rule(deployment, "16Gi")
    except ValueError as e:
        raise SpecError(deployment_field, f"{e} (set at level: the deployment)") from None


def check_level(flash_loader: Mapping[str, Any] | None, shm: Any, field: str) -> None:
    """Refuse, where a deployment's spec is written, what every replica composed from it
    would refuse: each field its ``flashLoader`` sets and its ``shmSizeLimit``, by the
    rules :func:`resolve_flash_loader` and :func:`resolve_shm` apply (what depends on the
    ModelCache is left to the replica).

    Args:
        flash_loader: The level's ``flashLoader`` (plain values; None: unset).
        shm: Its ``shmSizeLimit`` (None: unset).
        field: The path of the spec that holds them (``spec.template.spec``).

    Raises:
        SpecError: naming ``<field>.flashLoader.<name>`` or ``<field>.shmSizeLimit``.
    """
    flash_loader = flash_loader or {}
    for name in sorted(flash_loader):  # the first wrong one whatever the map's order
        value = flash_loader[name]
        if value is None or name not in _FIELDS:
            continue
        _, why = _check(name, value)
        if why is not None:
            raise SpecError(f"{field}.flashLoader.{name}", why)
    if shm is not None:
        try:
            positive_quantity_rule(shm, "16Gi")
        except ValueError as e:
            raise SpecError(f"{field}.shmSizeLimit", str(e)) from None
