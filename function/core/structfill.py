"""Build protobuf ``Struct`` values from plain JSON data, faster than ``Struct.update``.

``Struct.update`` (protobuf's ``well_known_types``) walks every value through a chain
of ``isinstance`` checks and clears each field before setting it; for the manifests a
composer builds (a few hundred fields each) that is most of the cost of emitting them.
:func:`fill` dispatches on the exact type once per value and writes straight into the
upb map and list containers. The result equals what ``Struct.update`` gives (same
fields, numbers as doubles, ``None`` as JSON null).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.struct_pb2 import Struct


def struct_from(data: Mapping[str, Any]) -> Struct:
    """A new Struct holding ``data`` (dicts, lists, str, int, float, bool, None).

    Raises:
        TypeError: for a value of any other type (as ``Struct.update`` does), or
            ValueError for a key that is not a string.
    """
    out = Struct()
    _fill_new(out.fields, data)
    return out


def fill(fields: Any, data: Mapping[str, Any]) -> None:
    """Set every key of ``data`` in a Struct's ``fields`` map (existing keys are replaced)."""
    for k, v in data.items():
        t = type(v)
        if t is dict or t is list or t is tuple:
            if not isinstance(k, str):
                raise ValueError(f"Struct keys must be strings, not {type(k).__name__}")
            fields[k].Clear()  # an existing object or list is replaced, not merged
        _fill_new(fields, {k: v})


def _fill_new(fields: Any, data: Mapping[str, Any]) -> None:
    """:func:`fill` for a map none of whose keys is set yet (no clearing needed)."""
    for k, v in data.items():
        if not isinstance(k, str):
            raise ValueError(f"Struct keys must be strings, not {type(k).__name__}")
        _set(fields[k], v)


def extend(values: Any, items: Any) -> None:
    """Append every element of ``items`` to a ListValue's ``values``."""
    for v in items:
        _set(values.add(), v)


def _set(target: Any, v: Any) -> None:
    """Write ``v`` into the new protobuf ``Value`` ``target``, dispatching on its exact type
    once (subclasses of the JSON types go through :func:`_other`)."""
    t = type(v)
    if t is str:
        target.string_value = v
    elif t is dict:
        if v:
            _fill_new(target.struct_value.fields, v)
        else:
            target.struct_value.SetInParent()
    elif t is list or t is tuple:
        if v:
            extend(target.list_value.values, v)
        else:
            target.list_value.SetInParent()
    elif t is bool:
        target.bool_value = v
    elif t is int or t is float:
        target.number_value = v
    elif v is None:
        target.null_value = 0
    else:
        _other(target, v)


def _other(target: Any, v: Any) -> None:
    """Subclasses of the JSON types (str/int/float/dict/list enums and the like)."""
    if isinstance(v, bool):
        target.bool_value = v
    elif isinstance(v, str):
        target.string_value = v
    elif isinstance(v, (int, float)):
        target.number_value = v
    elif isinstance(v, Mapping):
        target.Clear()
        target.struct_value.SetInParent()
        _fill_new(target.struct_value.fields, v)
    elif isinstance(v, (list, tuple)):
        target.Clear()
        target.list_value.SetInParent()
        extend(target.list_value.values, v)
    else:
        raise TypeError(f"cannot put a {type(v).__name__} in a Struct")
