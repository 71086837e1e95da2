"""``python -m function config``: the effective settings and where each came from.

Every field of :class:`~function.ops.settings.Settings` is listed with the environment
variable it reads, its effective value, its source and its description (one line with
the unit and the default, :func:`function.ops.settings.describe`, the text ``--help``
shows too). The source is ``flag`` when a command-line flag set it, ``environment``
when the variable is set in the process environment, ``default`` otherwise. Variables
are matched the way pydantic-settings matches them (case-insensitively), so the source
shown is the one the function actually used. Whole numbers of seconds are shown as
integers (``20``, as ``--help`` shows the default); a URL's userinfo (a collector's
``user:password@``) is shown as ``***@`` (:func:`function.ops.settings.mask_userinfo`).
A variable that no setting reads but whose name is one or two characters off a
setting's is listed under ``misspelt`` (:func:`function.ops.settings.unknown_variables`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

import yaml

from function.ops.settings import (
    URL_FIELDS,
    Settings,
    describe,
    mask_userinfo,
    unknown_text,
    unknown_variables,
)
from function.ops.settings import variable as variable

__all__ = ["report", "rows", "variable"]


def rows(
    settings: Settings,
    environ: Mapping[str, str] | None = None,
    flags: Collection[str] = (),
) -> list[dict[str, Any]]:
    """One row per setting: ``variable``, ``value``, ``source`` and ``description``.

    Args:
        settings: The effective settings.
        environ: The environment they were read from (default: the process's).
        flags: Field names set by a command-line flag.
    """
    env = os.environ if environ is None else environ
    present = {k.lower() for k in env}
    out = []
    for field in Settings.model_fields:
        var = variable(field)
        if field in flags:
            source = "flag"
        elif var.lower() in present:
            source = "environment"
        else:
            source = "default"
        value = getattr(settings, field)
        if field in URL_FIELDS and isinstance(value, str):
            value = mask_userinfo(value)  # a collector's password is not printed
        out.append(
            {
                "variable": var,
                "value": _shown(value),
                "source": source,
                "description": describe(field),
            }
        )
    return out


def _shown(value: Any) -> Any:
    """``20.0`` as ``20``: a float that holds a whole number is shown as an int."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def report(
    settings: Settings, environ: Mapping[str, str] | None = None, flags: Collection[str] = ()
) -> str:
    """Render every setting as YAML: variable, value, source and description."""
    doc: dict[str, Any] = {"settings": rows(settings, environ, flags)}
    unknown = unknown_variables(environ)
    if unknown:
        doc["misspelt"] = [unknown_text(name, setting) for name, setting in unknown]
    return yaml.safe_dump(doc, sort_keys=False)
