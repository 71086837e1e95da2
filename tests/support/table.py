"""Table-driven tests: one :class:`Case` per row, ``@table(CASES)`` runs a test per row.

A row says what it checks in words (``reason``: the rule, and where it comes from when
that is not obvious), what goes in (``inputs``) and what must come out (``want``), by
name rather than by position. The test id is the row's ``name``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pytest

I = TypeVar("I")  # noqa: E741 - the inputs' type
W = TypeVar("W")


@dataclass(frozen=True)
class Case(Generic[I, W]):
    """One row of a table: its id, the rule it checks, what goes in, what must come out."""

    name: str
    reason: str
    inputs: I
    want: W


def table(cases: Sequence[Case[Any, Any]]) -> pytest.MarkDecorator:
    """Parametrize a test with ``case``, one test per row, named after the row.

    Raises:
        ValueError: two rows share a name (pytest would only suffix the second id).
    """
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate case names in {names}")
    return pytest.mark.parametrize("case", cases, ids=names)
