"""Read fields straight from protobuf ``Struct`` values.

Crossplane sends every resource as a ``google.protobuf.Struct``. Converting a
whole request to dicts (``MessageToDict``) costs 5-10x the cost of parsing it
(see ``shared/design/performance.md``), so the hot path reads only the fields it
needs with these helpers and converts only small subtrees (an XR's ``spec``).

Bracket access on a Struct never inserts keys (only ``get_or_create_*`` does),
but it raises ``KeyError`` for a missing key; these helpers return a default
instead. Numbers in a Struct are doubles: ``3`` comes back as ``3.0``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.struct_pb2 import ListValue, Struct

_MISSING: Any = object()


def get(node: Any, *path: str | int, default: Any = None) -> Any:
    """Walk ``path`` from ``node`` and return what is there.

    Args:
        node: A Struct, ListValue, dict, list, or None.
        path: Keys (str) for objects and indexes (int) for lists.
        default: Returned when any step is missing or of the wrong type.

    Returns:
        A scalar (str, float, bool, None), a Struct, a ListValue (or dict/list
        when ``node`` was plain Python), or ``default``.
    """
    cur = node
    for step in path:
        if cur is None:
            return default
        if isinstance(step, int):
            if not isinstance(cur, (ListValue, list)) or not -len(cur) <= step < len(cur):
                return default
            cur = cur[step]
            continue
        if isinstance(cur, (Struct, dict)):
            if step not in cur:
                return default
            cur = cur[step]
        else:
            return default
    return default if cur is None else cur


def get_str(node: Any, *path: str | int, default: str = "") -> str:
    """Like :func:`get`, but returns ``default`` unless the value is a string."""
    v = get(node, *path)
    return v if isinstance(v, str) else default


def get_map(node: Any, *path: str | int) -> dict[str, str]:
    """Return a string-to-string map (labels, annotations) at ``path``.

    Non-string values are skipped. Returns a new dict, empty when absent.
    """
    v = get(node, *path)
    if isinstance(v, (Struct, dict)):
        return {k: val for k, val in v.items() if isinstance(val, str)}
    return {}


def to_py(value: Any) -> Any:
    """Convert a Struct/ListValue subtree into plain dicts and lists.

    Whole numbers stay floats (protobuf has only doubles); callers validate
    with pydantic, which coerces ``3.0`` to ``int`` where an int is declared.
    """
    if isinstance(value, Struct):
        return {k: to_py(v) for k, v in value.items()}
    if isinstance(value, ListValue):
        return [to_py(v) for v in value]
    return value


def conditions(node: Any) -> dict[str, Any]:
    """Index ``status.conditions`` of a resource by condition type.

    Returns:
        ``{type: condition}`` where each condition is a Struct or dict.
    """
    out: dict[str, Any] = {}
    conds = get(node, "status", "conditions")
    if conds is None:
        return out
    for c in conds:
        t = get(c, "type")
        if isinstance(t, str):
            out[t] = c
    return out


def condition_is(node: Any, typ: str, status: str = "True") -> bool:
    """True when the resource has condition ``typ`` with the given status."""
    c = conditions(node).get(typ)
    return c is not None and get(c, "status") == status
