"""Kubernetes label selectors with their full semantics.

Implements ``metav1.LabelSelector`` matching as specified in
https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#resources-that-support-set-based-requirements
and apimachinery's ``LabelSelectorAsSelector``:

- ``matchLabels`` and every ``matchExpressions`` entry are ANDed.
- ``In``: the key exists and its value is in ``values``.
- ``NotIn``: the key is absent, or its value is not in ``values``.
- ``Exists`` / ``DoesNotExist``: only the key matters; ``values`` must be empty.
- ``In`` / ``NotIn`` need a non-empty ``values``.
- An empty selector (``{}``) matches everything.

Crossplane's required-resource selectors only express a name or equality
``matchLabels``; :meth:`LabelSelector.requirement_labels` gives that part, and
:meth:`LabelSelector.matches` applies the whole selector locally.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.core.errors import SpecError, excerpt, quoted, written_as
from function.core.k8svalidation import label_value_problem, qualified_name_problem

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _check_key(key: Any, field: str) -> str:
    """Validate a qualified label key (``[prefix/]name``), per Kubernetes rules
    (:func:`function.core.k8svalidation.qualified_name_problem`)."""
    if not isinstance(key, str) or not key:
        raise SpecError(field, "label key must be a non-empty string")
    problem = qualified_name_problem(key)
    if problem is not None:
        raise SpecError(field, f"invalid label key {quoted(key)}: it {problem}")
    return key


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` entry."""

    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfies this requirement."""
        return self.matches_value(labels.get(self.key))

    def matches_value(self, value: str | None) -> bool:
        """True when a label whose value is ``value`` (None: no such label) satisfies this
        requirement (Kubernetes ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``)."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        return value is None


def _match_labels(ml: Any, field: str) -> tuple[tuple[str, str], ...]:
    """``matchLabels`` at ``field``, validated, sorted by key."""
    if not isinstance(ml, Mapping):
        raise SpecError(field, "must be a map of strings")
    labels: list[tuple[str, str]] = []
    for k in sorted(ml):
        v = ml[k]
        # A valid key (at most 317 characters) is named whole in the path; an invalid
        # one as its excerpt (review 16b F3).
        _check_key(k, f"{field}.{excerpt(k) if isinstance(k, str) else k}")
        if not isinstance(v, str):
            raise SpecError(f"{field}.{k}", f"must be a string, got {written_as(v)}")
        if label_value_problem(v) is not None:
            raise SpecError(f"{field}.{k}", f"invalid label value {quoted(v)}")
        labels.append((k, v))
    return tuple(labels)


def _expression(e: Any, f: str) -> Requirement:
    """One ``matchExpressions`` entry at path ``f``, validated."""
    if not isinstance(e, Mapping):
        raise SpecError(f, "must be an object with key, operator and values")
    key = _check_key(e.get("key"), f"{f}.key")
    op = e.get("operator")
    if op not in _OPERATORS:
        raise SpecError(
            f"{f}.operator",
            f"unknown operator {quoted(op)} (want one of {', '.join(_OPERATORS)})",
        )
    values = e.get("values")
    values = [] if values is None else values
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SpecError(f"{f}.values", "must be a list of strings")
    if op in ("In", "NotIn") and not values:
        raise SpecError(f"{f}.values", f"must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise SpecError(f"{f}.values", f"must be empty for operator {op}")
    for j, v in enumerate(values):
        if label_value_problem(v) is not None:
            raise SpecError(f"{f}.values[{j}]", f"invalid label value {quoted(v)}")
    return Requirement(key, op, frozenset(values))


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed, validated Kubernetes LabelSelector."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, raw: Any, field: str) -> LabelSelector:
        """Parse and validate a LabelSelector.

        Args:
            raw: The selector as a dict (``matchLabels``, ``matchExpressions``).
            field: Its path in the XR, for error messages (``spec.clusterSelector``).

        Returns:
            The parsed selector.

        Raises:
            SpecError: naming the exact field, for a missing selector (``None``),
                an unknown operator, ``In``/``NotIn`` without values,
                ``Exists``/``DoesNotExist`` with values, or an invalid key or value.
        """
        if raw is None:
            raise SpecError(field, "is required (use {} to select every cluster)")
        if not isinstance(raw, Mapping):
            raise SpecError(field, "must be an object with matchLabels and/or matchExpressions")
        unknown = set(raw) - {"matchLabels", "matchExpressions"}
        if unknown:
            raise SpecError(f"{field}.{sorted(unknown)[0]}", "unknown field")
        # Only an absent (or null) field is empty: a falsy value of another type ([], "",
        # 0, false) is refused like any other value of that type.
        ml = raw.get("matchLabels")
        labels = _match_labels({} if ml is None else ml, f"{field}.matchLabels")
        me = raw.get("matchExpressions")
        me = [] if me is None else me
        if not isinstance(me, list):
            raise SpecError(f"{field}.matchExpressions", "must be a list")
        reqs = [_expression(e, f"{field}.matchExpressions[{i}]") for i, e in enumerate(me)]
        return cls(labels, tuple(reqs))

    def requirement_labels(self) -> dict[str, str]:
        """The equality part Crossplane can resolve server-side (``matchLabels``)."""
        return dict(self.match_labels)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfies every part of the selector."""
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        # A loop, not all() over a generator: measured faster on this hot path.
        for r in self.expressions:  # noqa: SIM110
            if not r.matches_value(labels.get(r.key)):
                return False
        return True

    def is_empty(self) -> bool:
        """True for ``{}``, which selects everything."""
        return not self.match_labels and not self.expressions
