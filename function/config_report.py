"""``python -m function config``: the effective settings and where each came from."""

from __future__ import annotations

import os

import yaml
from pydantic import AliasChoices

from function.settings import Settings


def report(settings: Settings) -> str:
    """Render every setting as YAML: variable, value, and source (default or environment)."""
    rows = []
    for field, info in Settings.model_fields.items():
        alias = info.validation_alias
        var = alias.choices[0] if isinstance(alias, AliasChoices) else field
        source = "environment" if var in os.environ else "default"
        rows.append({"variable": var, "value": getattr(settings, field), "source": source})
    return yaml.safe_dump({"settings": rows}, sort_keys=False)
