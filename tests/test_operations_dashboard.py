"""The Grafana dashboard (issue 16): importable as is, and built only on exported metrics.

No Grafana dashboard linter installs from PyPI or npm (Grafana's ``dashboard-linter`` is a
Go program), so this is the structural check the issue asks for instead: the JSON is a
dashboard Grafana imports as is (no ``__inputs`` to fill, the data source a template
variable), a row per concern, panels on the 24-column grid without overlaps, and every
query, legend and variable checked against ``function.ops.metrics.CATALOGUE``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from function.ops.metrics import CATALOGUE
from tests.support.promql_catalogue import check_expr, check_label_values, check_legend

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "operations" / "grafana" / "modelplane.json"
ROWS = ["Function health", "Caches", "Serving", "Experiments", "Backfill"]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(scope="module")
def dash() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dash["panels"] if p["type"] != "row"]


def _queries(dash: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"panel {p['title']!r} {t['refId']}", t) for p in _panels(dash) for t in p["targets"]]


def test_importable_as_is(dash):
    assert "__inputs" not in dash and "__requires" not in dash  # nothing to fill in on import
    assert dash["uid"] and len(dash["uid"]) <= 40
    assert dash["title"] and isinstance(dash["schemaVersion"], int)
    assert dash.get("id") is None  # Grafana assigns it
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables["datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in _panels(dash):
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["title"] and p.get("description"), p["id"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE, p["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == DATASOURCE, v["name"]


def test_a_row_per_concern_and_a_grid_without_overlaps(dash):
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == ROWS
    # every row has panels under it
    current = None
    per_row: dict[str, int] = {}
    for p in dash["panels"]:
        if p["type"] == "row":
            current = p["title"]
            per_row[current] = 0
        else:
            assert current is not None, f"panel {p['title']!r} above the first row"
            per_row[current] += 1
    assert all(per_row.values()), per_row
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] >= 1, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine


def test_every_query_uses_only_exported_metrics_and_labels(dash):
    problems: list[str] = []
    used: set[str] = set()
    for where, target in _queries(dash):
        checked = check_expr(target["expr"], where)
        check_legend(target.get("legendFormat", ""), checked, where)
        problems += checked.problems
        used |= checked.metrics
        assert checked.metrics, f"{where} selects no metric"
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            assert v.get("definition", query) == query, v["name"]
            checked = check_label_values(query, f"variable {v['name']}")
            problems += checked.problems
    assert not problems, "\n".join(problems)
    # and the dashboard shows every metric the function exports
    assert used == {s.name for s in CATALOGUE}, {s.name for s in CATALOGUE} - used


def test_variables_used_by_queries_are_defined(dash):
    names = {v["name"] for v in dash["templating"]["list"]}
    for where, target in _queries(dash):
        for var in ("namespace", "kind", "datasource"):
            if f"${var}" in target["expr"]:
                assert var in names, where


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("rate(modelplane_function_run_seconds_total[5m])", "is not a metric the function exports"),
        ('modelplane_model_deployment_replicas{cluster="a"}', "has no label 'cluster'"),
        ("sum by (pod) (modelplane_model_deployment_replicas)", "(pod) is no label"),
        ('modelplane_function_results_total{severity="Error"}', "has no severity='Error'"),
        ('modelplane_function_results_total{severity=~"Fatal|Oops"}', "has no severity='Oops'"),
        ('modelplane_cache_hydration_duration_seconds_count{le="1"}', "has no label 'le'"),
        ('{__name__=~"kube_.+"}', "matches no exported metric"),
        ("sum(rate(x[5m]", "does not parse"),
    ],
)
def test_the_checker_catches_what_a_dashboard_could_get_wrong(expr, expected):
    problems = check_expr(expr).problems
    assert any(expected in p for p in problems), problems


def test_the_checker_catches_a_wrong_legend():
    checked = check_expr("sum by (kind) (rate(modelplane_function_run_seconds_count[5m]))")
    assert not checked.problems
    check_legend("{{kind}} {{cluster}}", checked, "panel")
    assert checked.problems == ["panel: legend names 'cluster', not a label of the query"]
    kept = check_expr("sum by (kind) (rate(modelplane_function_results_total[5m]))")
    check_legend("{{severity}}", kept, "panel")
    assert kept.problems == ["panel: legend names 'severity', aggregated away"]
