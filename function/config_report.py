"""``python -m function config``: the effective settings and where each came from.

Every field of :class:`~function.settings.Settings` is listed with the environment
variable it reads, its effective value and its source: ``environment`` when the
variable is set in the process environment, ``default`` otherwise. Variables are
matched the way pydantic-settings matches them (case-insensitively), so the source
shown is the one the function actually used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import AliasChoices

from function.settings import Settings


def variable(field: str) -> str:
    """The environment variable that field ``field`` of Settings reads."""
    alias = Settings.model_fields[field].validation_alias
    return alias.choices[0] if isinstance(alias, AliasChoices) else field.upper()  # type: ignore[return-value]


def rows(settings: Settings, environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per setting: ``variable``, ``value``, ``source`` and, if any, ``description``."""
    env = os.environ if environ is None else environ
    present = {k.lower() for k in env}
    out = []
    for field, info in Settings.model_fields.items():
        var = variable(field)
        row: dict[str, Any] = {
            "variable": var,
            "value": getattr(settings, field),
            "source": "environment" if var.lower() in present else "default",
        }
        if info.description:
            row["description"] = info.description
        out.append(row)
    return out


def report(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    """Render every setting as YAML: variable, value, and source (default or environment)."""
    return yaml.safe_dump({"settings": rows(settings, environ)}, sort_keys=False)
