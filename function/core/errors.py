"""Errors that composers raise for invalid input.

A ``SpecError`` names the offending field with its JSONPath-like location in
the XR (for example ``spec.clusterSelector.matchExpressions[0].operator``). The
runner turns it into a fatal result, which makes Crossplane stop the pipeline
for this reconcile without applying anything: existing composed resources are
left exactly as they are (Crossplane behaviour for ``SEVERITY_FATAL``), ``Synced=False``
carries the message, and the XR's other conditions keep their values (the runner sends
the observed ones back: :func:`function.edge.codec.keep_conditions`).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping
from typing import Any


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


# How much of a tenant's string a message quotes (characters): a label key, a value, a
# name can be as long as the XR (etcd's 1.5 MiB), and a fatal message is copied into the
# XR's Synced condition, an event and an info log line on every reconcile (review 16b F3).
EXCERPT_CHARS = 64


def quoted(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A tenant's ``value`` as a message quotes it: the one way to put a string the spec
    wrote into a SpecError, a condition, a result or a log line.

    A string: its ``repr`` when it has at most ``limit`` characters, else the ``repr``
    of its first ``limit`` characters followed by ``...`` and its length
    (``'AAAA'... (200001 characters)``); at most about ``10 * limit + 40`` characters
    (``repr`` escapes a character in at most 10). ``None``, a boolean or a number: its
    ``repr`` (short unless a huge integer, cut the same way). Anything else (an object,
    a list): what it is in words (:func:`written_as`), never its contents.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value)} characters)"
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, int):
        text = str(value) if value.bit_length() <= 4 * limit else ""
        return text if text and len(text) <= limit else f"a number of {value.bit_length()} bits"
    return written_as(value)


def quoted_ends(text: str, limit: int) -> str:
    """``text`` (a message another component wrote: an API server's error, which puts
    the refused value in the middle and the rule at the end, "...: field is immutable")
    quoted like :func:`quoted`, keeping both ends: its ``repr`` when it has at most
    ``limit`` characters, else the ``repr`` of its first and of its last ``limit // 2``
    characters around ``...`` and its length (``'update failed: ...' ... ': field is
    immutable' (2417 characters)``); at most about ``10 * limit + 60`` characters."""
    if len(text) <= limit:
        return repr(text)
    half = max(limit // 2, 1)
    return f"{text[:half]!r} ... {text[-half:]!r} ({len(text)} characters)"


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` unquoted, for a message that puts it into a path (a map key in
    ``spec.labels.<key>``): whole when at most ``limit`` characters, else its first
    ``limit`` characters, ``...`` and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


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


# The words for what a YAML author wrote, by Python type (bool before int: a bool is one).
_WRITTEN: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (type(None), "null"),
    (bool, "a boolean"),
    ((int, float), "a number"),
    (str, "a string"),
    (dict, "an object"),
    ((list, tuple), "a list"),
)


def written_as(value: object) -> str:
    """What a YAML author wrote, in words: ``a string``, ``an object``, ..."""
    for types, words in _WRITTEN:
        if isinstance(value, types):
            return words
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


def _location(prefix: str, loc_parts: list[Any], *, union: bool) -> str:
    """A pydantic error location as a spec path: ``spec.env[3].name``.

    For a wrong-type error (``union``), each member of a union (``str | int``) reports
    under its own tag: the tags are dropped, so the union gets one message naming every
    accepted type.
    """
    if union:
        while loc_parts and isinstance(loc_parts[-1], str) and _UNION_TAG.match(loc_parts[-1]):
            loc_parts.pop()
    loc = prefix
    for part in loc_parts:
        loc = f"{loc}[{part}]" if isinstance(part, int) else f"{loc}.{part}"
    return loc


def _order(err: Mapping[str, Any]) -> tuple[Any, ...]:
    """Where a pydantic error sorts: by its location as :func:`_location` writes it
    (list indices as numbers), then, for a wrong-shape error, by what was written.

    pydantic reports a map's errors in the map's iteration order, which for a map read
    from a protobuf Struct follows the order its entries arrived in (Crossplane's gRPC
    client marshals maps in a random order): sorted, the same spec gives the same
    message in every call and process (review 19b F2). The members of one union (one
    location but for their tags, one input) keep pydantic's order (a stable sort).
    """
    parts = list(err.get("loc", ()))
    shape = _EXPECTED.get(str(err.get("type"))) is not None
    if shape:
        while parts and isinstance(parts[-1], str) and _UNION_TAG.match(parts[-1]):
            parts.pop()
    at = tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in parts)
    # One location holds one input, so among its errors a wrong-shape one sorts after
    # a validator's own (what was written is the same for all of them).
    return (at, shape)


def _plain_order(err: Mapping[str, Any]) -> tuple[Any, ...]:
    """:func:`_order` without building a key per location element: the location tuple
    itself. Two locations first differ under one parent, which is a list (indices) or
    an object (names) for both, so they compare as :func:`_order` compares them; where
    they would not (an int against a str), ``TypeError`` says so."""
    loc = err["loc"]
    shape = err["type"] in _EXPECTED
    if shape:
        while loc and isinstance(loc[-1], str) and _UNION_TAG.match(loc[-1]):
            loc = loc[:-1]
    return (loc, shape)


def _smallest(errors: list[Any], count: int) -> list[Any]:
    """The ``count`` errors :func:`_order` puts first, in that order (``heapq.nsmallest``:
    O(n log count) with one cheap key per error; stable, as ``sorted`` is)."""
    for key in (_plain_order, _order):
        try:
            if len(errors) <= count:
                return sorted(errors, key=key)
            return heapq.nsmallest(count, errors, key=key)
        except TypeError:  # an int and a str met: the full key orders them
            continue
    raise AssertionError("unreachable: _order orders every pair")


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
        lists every error (the first five) as ``path: message``, in the order of
        their locations (list indices as numbers, map keys and field names as
        strings), so the same input gives the same message whatever order its maps
        arrived in. A value of the wrong
        shape (an object where a string is due, a map where a list is due) reads
        ``path: expected <shape>, got <what was written>``, the shape from
        ``shapes`` or, without an entry, the bare type (``a list``).
    """
    errors = getattr(exc, "errors", None)
    if errors is None:
        return SpecError(prefix, str(exc))
    found = errors(include_url=False, include_input=True)
    # Only the first five messages are written, and the members of a union merge into
    # one: the few smallest errors are enough (more are taken only when unions used
    # them all), so a spec with 400,000 wrong items costs one pass, not a sort.
    wanted = _SHOWN * 4
    while True:
        parts, first = _messages(_smallest(found, wanted), prefix, shapes)
        if len(parts) >= _SHOWN or wanted >= len(found):
            break
        wanted *= 4
    err = SpecError(first, "; ".join(parts))
    err.args = ("; ".join(parts),)
    return err


_SHOWN = 5  # the errors a SpecError's message lists


def _messages(
    errors: list[Any], prefix: str, shapes: Mapping[str, str] | None
) -> tuple[list[str], str]:
    """The first :data:`_SHOWN` messages of ``errors`` (in :func:`_order`'s order) and the
    path of the first, for :func:`pydantic_errors`."""
    parts: list[str] = []
    first = prefix
    shape_at: dict[str, int] = {}  # a wrong-shape path -> its index in parts
    for err in errors:
        if len(parts) >= _SHOWN:
            break
        expected = _EXPECTED.get(str(err.get("type")))
        loc = _location(prefix, list(err.get("loc", ())), union=expected is not None)
        if not parts:
            first = loc
        if expected is None:
            # A validator's own message, without pydantic's "Value error, " in front.
            msg = str(err.get("msg", "invalid"))
            for noise in ("Value error, ", "Assertion failed, "):
                msg = msg.removeprefix(noise)
            parts.append(f"{loc}: {msg}")
        elif loc not in shape_at:
            shape_at[loc] = len(parts)
            shape = (shapes or {}).get(_generic(loc))
            parts.append(f"{loc}: expected {shape or expected}, got {written_as(err.get('input'))}")
        elif (shapes or {}).get(_generic(loc)) is None:
            # Another member of the same union: name it beside the others.
            i = shape_at[loc]
            head, _, tail = parts[i].rpartition(", got ")
            parts[i] = f"{head} or {expected}, got {tail}"
    return parts, first


_ROLE = re.compile(r":(?:class|func|mod|data|meth|attr):`~?([^`]+)`")


def plain_text(doc: str | None) -> str:
    """A docstring as a terminal shows it: reST roles and double backquotes dropped
    (``:class:`World``` -> ``World``), for ``--help`` texts built from module docstrings."""
    return _ROLE.sub(r"\1", doc or "").replace("``", "")
