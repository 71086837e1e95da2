"""Whole numbers in protobuf Structs: the one rule every reader and spec model uses.

A ``google.protobuf.Struct`` holds every number as a double
(https://protobuf.dev/reference/protobuf/google.protobuf/#value), so an XR's
``replicas: 3`` reaches the function as ``3.0``. A field the XRD types ``integer``
therefore accepts an ``int`` or a finite, integral ``float``, and nothing else:
not ``3.5``, not ``"3"``, not ``true`` (Python's ``bool`` is an ``int``), not
``inf`` or ``nan``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeGuard

from google.protobuf.struct_pb2 import Value
from pydantic import BeforeValidator


def is_whole(v: object) -> TypeGuard[int | float]:
    """True when ``v`` is an ``int`` (not a ``bool``) or a finite float with no fraction."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and math.isfinite(v) and v.is_integer()


def finite_int(v: Any) -> int | None:
    """A finite number as an ``int`` (truncated toward zero), else None ("not known").

    Args:
        v: A number read from a Struct (a float; an ``int`` too) or a protobuf ``Value``.

    Returns:
        ``int(v)`` for a finite number; None for ``NaN``, ``±Infinity`` (valid doubles in
        a protobuf ``Struct``, which ``int()`` refuses), a ``bool``, a string, None, or a
        ``Value`` holding anything but a number.
    """
    if isinstance(v, Value):
        if v.WhichOneof("kind") != "number_value":
            return None
        v = v.number_value
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return int(v)


def ascii_digits(s: str) -> bool:
    """True when ``s`` is one or more ASCII digits ``0-9``: what ``int(s)`` parses as a
    plain decimal (``str.isdigit`` is also True for ``"²"``, which ``int`` refuses)."""
    return s.isascii() and s.isdigit()


def whole_number(v: Any) -> int:
    """``v`` as an ``int`` when :func:`is_whole`; the pydantic validator of :data:`WholeInt`.

    Raises:
        ValueError: ``must be an integer`` (not a number, or a bool) or ``must be a
            whole number`` (a fraction, ``inf`` or ``nan``).
    """
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("must be an integer")
    if not is_whole(v):
        raise ValueError("must be a whole number")
    return int(v)


# An ``integer`` field of an XRD, as a pydantic type.
WholeInt = Annotated[int, BeforeValidator(whole_number)]


def ints_from_doubles(value: Any) -> Any:
    """``value`` (plain Python from a Struct) with every whole float turned back into an int.

    Recurses into dicts and lists; other values are returned as they are. So ``3`` and
    ``3.0`` serialize (and hash) alike.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: ints_from_doubles(v) for k, v in value.items()}
    if isinstance(value, list):
        return [ints_from_doubles(v) for v in value]
    return value
