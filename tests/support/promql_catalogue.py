"""Check PromQL queries against the function's metric catalogue (``function.ops.metrics``).

Used by the dashboard and alert-rule tests (issue 16): every metric a query selects must be
one the function exports, under its exposition name (a histogram as ``_bucket``, ``_sum``
or ``_count``; a counter with ``_total``; a gauge as is), and every label a query names (in
a matcher, ``by``/``without``, ``on``/``ignoring``/``group_*``, or a legend) must be one of
that metric's labels (``le`` only on ``_bucket``). Values matched against a label with a
fixed vocabulary must be in that vocabulary. Queries are parsed with ``promql-parser``
(the Rust ``promql-parser`` crate's Python binding), not with regular expressions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import promql_parser as pp

from function.ops.metrics import CATALOGUE, OTHER, MetricSpec

# Grafana's built-in range variables, replaced by a duration before parsing.
_GRAFANA_RANGES = re.compile(
    r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}"
)
_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_LABEL_VALUES = re.compile(
    r"^\s*label_values\((?:(.*),)?\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", re.S
)
_WORD = re.compile(r"^[A-Za-z0-9_.\-]+$")


def exposition_names() -> dict[str, tuple[MetricSpec, str]]:
    """Every series name the function exposes, with its spec and suffix (``""`` if none)."""
    out: dict[str, tuple[MetricSpec, str]] = {}
    for spec in CATALOGUE:
        if spec.type == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                out[spec.name + suffix] = (spec, suffix)
        else:
            out[spec.name] = (spec, "")
    return out


NAMES = exposition_names()


@dataclass
class Checked:
    """What a query uses and what is wrong with it."""

    metrics: set[str] = field(default_factory=set)  # catalogue names (MetricSpec.name)
    labels: set[str] = field(default_factory=set)  # labels of the selected series
    # The labels of the result when the outermost aggregation keeps only some (by ...)
    kept: set[str] | None = None
    problems: list[str] = field(default_factory=list)


def _allowed(spec: MetricSpec, suffix: str) -> set[str]:
    return set(spec.labels) | ({"le"} if suffix == "_bucket" else set())


def _check_values(spec: MetricSpec, m: pp.Matcher, where: str, problems: list[str]) -> None:
    vocab = spec.values.get(m.name)
    if vocab is None or "$" in m.value:  # no fixed vocabulary, or a template variable
        return
    known = set(vocab) | {OTHER}
    if m.op in (pp.MatchOp.Equal, pp.MatchOp.NotEqual):
        values = [m.value]
    else:
        values = m.value.split("|")
        if not all(_WORD.match(v) for v in values):
            return  # a real regular expression: nothing literal to check
    for v in values:
        if v not in known:
            problems.append(f"{where}: {spec.name} has no {m.name}={v!r} ({sorted(known)})")


def check_expr(expr: str, where: str = "query") -> Checked:
    """Parse ``expr`` (Grafana range variables allowed) and check it against the catalogue."""
    out = Checked()
    text = _GRAFANA_RANGES.sub("5m", expr)
    try:
        ast = pp.parse(text)
    except ValueError as e:
        out.problems.append(f"{where}: does not parse: {e}")
        return out
    named: list[tuple[str, list[str]]] = []  # (what, label names) for by/on/... clauses

    def pre(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            matchers = list(node.matchers.matchers)
            names: list[str] = []
            if node.name:
                names = [node.name]
            for m in matchers:
                if m.name == "__name__":
                    if m.op == pp.MatchOp.Equal:
                        names = [m.value]
                    elif m.op == pp.MatchOp.Re:
                        rx = re.compile(f"^(?:{m.value})$")
                        names = [n for n in NAMES if rx.match(n)]
            if not names:
                out.problems.append(f"{where}: selector {node} matches no exported metric")
                return
            allowed: set[str] = set()
            for name in names:
                if name not in NAMES:
                    out.problems.append(f"{where}: {name} is not a metric the function exports")
                    continue
                spec, suffix = NAMES[name]
                out.metrics.add(spec.name)
                allowed |= _allowed(spec, suffix)
                for m in matchers:
                    if m.name != "__name__":
                        _check_values(spec, m, where, out.problems)
            for m in matchers:
                if m.name != "__name__" and m.name not in allowed:
                    out.problems.append(f"{where}: {names[0]} has no label {m.name!r}")
            out.labels |= allowed
        elif isinstance(node, pp.AggregateExpr) and node.modifier is not None:
            named.append((f"{node.op} by/without", list(node.modifier.labels)))
            if out.kept is None and node.modifier.type == pp.AggModifierType.By:
                out.kept = set(node.modifier.labels) - {"le"}  # the outermost one
        elif isinstance(node, pp.BinaryExpr) and node.modifier is not None:
            mod = node.modifier
            if mod.matching is not None:
                named.append(("on/ignoring", list(mod.matching.labels)))
            named.append(("group_left/right", list(mod.group_labels or [])))

    pp.walk(ast, pre)
    for what, labels in named:
        for label in labels:
            if label not in out.labels:
                out.problems.append(f"{where}: {what} ({label}) is no label of the metrics used")
    return out


def check_legend(legend: str, checked: Checked, where: str) -> None:
    """Every ``{{label}}`` of a Grafana legend must be a label of the query's metrics."""
    for label in _LEGEND.findall(legend or ""):
        if label not in checked.labels:
            checked.problems.append(f"{where}: legend names {label!r}, not a label of the query")
        elif checked.kept is not None and label not in checked.kept:
            checked.problems.append(f"{where}: legend names {label!r}, aggregated away")


def check_label_values(query: str, where: str) -> Checked:
    """A Grafana ``label_values([selector,] label)`` variable query."""
    m = _LABEL_VALUES.match(query)
    if m is None:
        out = Checked()
        out.problems.append(f"{where}: {query!r} is not label_values(selector, label)")
        return out
    selector, label = m.group(1), m.group(2)
    if not selector:
        out = Checked()
        out.problems.append(f"{where}: label_values without a selector reads every metric")
        return out
    out = check_expr(selector, where)
    if label not in out.labels:
        out.problems.append(f"{where}: {label!r} is no label of {selector}")
    return out
