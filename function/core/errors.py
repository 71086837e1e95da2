"""Errors that composers raise for invalid input.

A ``SpecError`` names the offending field with its JSONPath-like location in
the XR (for example ``spec.clusterSelector.matchExpressions[0].operator``). The
runner turns it into a fatal result, which makes Crossplane stop the pipeline
for this reconcile without applying anything: existing composed resources are
left exactly as they are (Crossplane behaviour for ``SEVERITY_FATAL``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping


class SpecError(ValueError):
    """An invalid field in an XR's spec (or in a resource it references).

    Args:
        field: The field's path, for example ``spec.clusterSelector``.
        message: What is wrong with it, as a sentence fragment.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# pydantic error types that mean "the value has the wrong shape" -> what was expected.
_EXPECTED = {
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
}


# Tags pydantic puts in an error's location for a union member (``str``, ``int``,
# ``list[str]``, ``function-after[...]``, a model class name).
_UNION_TAG = re.compile(
    r"^(str|int|float|bool|none|(list|dict|tuple|set|function-\w+)\[.*\]|[A-Z]\w*)$"
)


def written_as(value: object) -> str:
    """What a YAML author wrote, in words: ``a string``, ``an object``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def _generic(path: str) -> str:
    """``spec.env[3].name`` -> ``spec.env[].name`` (the key of a shapes table)."""
    out, depth = [], 0
    for ch in path:
        if ch == "[":
            depth += 1
            out.append("[")
        elif ch == "]":
            depth -= 1
            out.append("]")
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def pydantic_errors(
    prefix: str, exc: Exception, shapes: Mapping[str, str] | None = None
) -> SpecError:
    """Convert a ``pydantic.ValidationError`` into a ``SpecError``.

    Args:
        prefix: The path of the validated object, for example ``spec``.
        exc: The ``pydantic.ValidationError``.
        shapes: What to write at a path, for paths whose value can have the wrong
            shape: ``{"spec.templateRef": "an object {name: <CronJob>}"}``; list
            indices are written ``[]`` (``spec.env[].name``).

    Returns:
        A SpecError whose field is the first failing location and whose message
        lists every error (at most five) as ``path: message``. A value of the wrong
        shape (an object where a string is due, a map where a list is due) reads
        ``path: expected <shape>, got <what was written>``, the shape from
        ``shapes`` or, without an entry, the bare type (``a list``).
    """
    errors = getattr(exc, "errors", None)
    if errors is None:
        return SpecError(prefix, str(exc))
    items = errors(include_url=False, include_input=True)
    parts: list[str] = []
    first = prefix
    shape_at: dict[str, int] = {}  # a wrong-shape path -> its index in parts
    for err in items:
        if len(parts) >= 5:
            break
        expected = _EXPECTED.get(str(err.get("type")))
        loc_parts = list(err.get("loc", ()))
        if expected is not None:
            # Each member of a union (``str | int``) reports under its own tag: one
            # message for the field, naming every accepted type.
            while loc_parts and isinstance(loc_parts[-1], str) and _UNION_TAG.match(loc_parts[-1]):
                loc_parts.pop()
        loc = prefix
        for part in loc_parts:
            loc = f"{loc}[{part}]" if isinstance(part, int) else f"{loc}.{part}"
        if not parts:
            first = loc
        if expected is None:
            parts.append(f"{loc}: {err.get('msg', 'invalid')}")
            continue
        got = written_as(err.get("input"))
        shape = (shapes or {}).get(_generic(loc))
        if loc in shape_at:
            if shape is None:
                i = shape_at[loc]
                head, _, tail = parts[i].rpartition(", got ")
                parts[i] = f"{head} or {expected}, got {tail}"
            continue
        shape_at[loc] = len(parts)
        parts.append(f"{loc}: expected {shape or expected}, got {got}")
    err = SpecError(first, "; ".join(parts))
    err.args = ("; ".join(parts),)
    return err
