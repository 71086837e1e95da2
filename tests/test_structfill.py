"""function.core.structfill: the same Struct as ``Struct.update``, for every JSON shape."""

from __future__ import annotations

import enum
from collections import OrderedDict
from typing import Any

import pytest
from google.protobuf.struct_pb2 import Struct

from function.core.structfill import fill, struct_from


class Color(enum.StrEnum):
    RED = "red"


def reference(data: dict[str, Any]) -> Struct:
    s = Struct()
    s.update(data)
    return s


CASES: list[dict[str, Any]] = [
    {},
    {"a": "x", "b": 1, "c": 1.5, "d": True, "e": False, "f": None},
    {"empty_map": {}, "empty_list": [], "nested": {"l": [{}, [], [1, "2", None, True]]}},
    {"tuple": (1, 2), "deep": {"a": {"b": {"c": [{"d": [[]]}]}}}},
    {"big": 2**53, "neg": -3, "zero": 0, "unicode": "grüße ✓"},
    {"enum": Color.RED, "list_of_enums": [Color.RED]},
    {"ordered": OrderedDict(b=1, a={"x": [OrderedDict()]}), "in_list": [OrderedDict(z=None)]},
]


@pytest.mark.parametrize("data", CASES)
def test_same_struct_as_update(data: dict[str, Any]) -> None:
    got = struct_from(data)
    assert got == reference(data)
    assert got.SerializeToString(deterministic=True) == reference(data).SerializeToString(
        deterministic=True
    )


def test_fill_replaces_existing_keys_like_update() -> None:
    base = {"m": {"old": 1, "keep": 2}, "l": [1, 2, 3], "s": {"x": 1}, "o": {"y": 1}}
    patch = {"m": {"new": 3}, "l": [4], "s": "now a string", "o": OrderedDict(z=2)}
    got = struct_from(base)
    fill(got.fields, patch)
    want = reference(base)
    want.update(patch)
    assert got == want
    assert dict(got["m"]) == {"new": 3.0}


def test_rejects_what_a_struct_cannot_hold() -> None:
    with pytest.raises(TypeError):
        struct_from({"x": object()})
    with pytest.raises(TypeError):
        struct_from({"x": [b"bytes"]})
    with pytest.raises(ValueError):
        struct_from({1: "x"})  # type: ignore[dict-item]
