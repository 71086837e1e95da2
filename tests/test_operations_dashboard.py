"""The Grafana dashboard (issue 16): importable as is, and built only on exported metrics.

No Grafana dashboard linter installs from PyPI or npm (Grafana's ``dashboard-linter`` is a
Go program), so this is the structural check the issue asks for instead: the JSON is a
dashboard Grafana imports as is (no ``__inputs`` to fill, the data source a template
variable), a row per concern, panels on the 24-column grid without overlaps, and every
query, legend and variable checked against ``function.ops.metrics.CATALOGUE``. The panels
that count lifecycle events are also evaluated with ``promtool`` (Debian's ``prometheus``
package; skipped without it) on series born at 1, as the function creates them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

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


# ---- A series' first event counts -------------------------------------------------------
#
# The function creates a counter series (and a histogram child's buckets) on its first
# increment, at 1 (or at 0 and 1), so increase() over a window where the series is born has
# no earlier sample and reads 0: one failed hydration, one verdict or one completion would
# show as nothing. Panels outside "Function health" (whose per-second call rates are fed
# continuously by Crossplane's polling) count each series as operations/prometheus/rules.yaml
# does: its increase if it had a sample in the window before, its value if it was born in
# the window. Below, promtool evaluates every such panel query on series born at 1.

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not found: apt-get install prometheus"
)
TIME_RANGE = "6h"  # the dashboard's $__range in these tests
_WINDOW = re.compile(r"\b(increase|rate)\(([^()\[]+)\[([^\]]+)\]\)")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

BORN = 780  # minutes; after two 6 h windows, so older series have a window before
MINUTES = 900
NEW = f"_x{BORN} 1x{MINUTES - BORN}"  # born at 780m at 1
NEW_LATER = f"_x{BORN + 5} 1x{MINUTES - BORN - 5}"  # born at 785m at 1
NEW_ZERO = f"_x{BORN} 0x{MINUTES - BORN}"  # a histogram bucket below the first observation
NEW_1800 = f"_x{BORN} 1800x{MINUTES - BORN}"  # a first run of 30 minutes
# An older series with no event since: it was counted long ago. Its scrapes failed for
# 15 minutes at 6 h and at 1 h before 790m, so no sample is there one window before.
OLD = "1x420 _x15 1x284 _x15 1x164"
OLD_600 = OLD.replace("1x", "600x")


def _series(metric: str, labels: str, values: str) -> tuple[str, str]:
    return f"modelplane_{metric}{{{labels}}}", values


_ML, _OPS = 'namespace="ml"', 'namespace="ops"'  # new series in ml, older ones in ops
_B, _OLDB = f'backfill="b",{_ML},model="chat"', f'backfill="old",{_OPS},model="chat"'
SERIES: list[tuple[str, str]] = [
    _series("cache_hydration_transitions_total", f'{_ML},cache="c",phase="Hydrating"', NEW),
    _series("cache_hydration_transitions_total", f'{_ML},cache="c",phase="Ready"', NEW_LATER),
    _series("cache_hydration_transitions_total", f'{_OPS},cache="old",phase="Ready"', OLD),
    _series(
        "cache_hydration_failures_total",
        f'{_ML},cache="c",cluster="gpu-1",reason="BackoffLimitExceeded"',
        NEW,
    ),
    _series(
        "cache_hydration_failures_total",
        f'{_OPS},cache="old",cluster="gpu-9",reason="DeadlineExceeded"',
        OLD,
    ),
    _series(
        "model_experiment_verdicts_total", f'{_ML},experiment="e",reason="GauntletPassed"', NEW
    ),
    _series(
        "model_experiment_verdicts_total", f'{_OPS},experiment="old",reason="GauntletFailed"', OLD
    ),
    _series("model_backfill_starts_total", _B, NEW),
    _series("model_backfill_starts_total", _OLDB, OLD),
    _series("model_backfill_completions_total", f'{_B},result="succeeded"', NEW),
    _series("model_backfill_completions_total", f'{_OLDB},result="failed"', OLD),
    _series("model_backfill_preemptions_total", f'{_B},reason="foreground"', NEW),
    _series("model_backfill_preemptions_total", f'{_B},reason="not_ready"', NEW_LATER),
    _series("model_backfill_preemptions_total", f'{_OLDB},reason="foreground"', OLD),
    _series("model_backfill_useful_running_seconds_total", _B, NEW_1800),
    _series("model_backfill_useful_running_seconds_total", _OLDB, OLD_600),
]
# One observation of 100 s (between the 60 s and 120 s bounds) per histogram.
for _metric, _labels in [
    ("cache_hydration_duration_seconds_bucket", f'{_ML},cache="c"'),
    (
        "model_cold_start_duration_seconds_bucket",
        f'{_ML},model="chat",engine_kind="Deployment",cache="qwen"',
    ),
    ("replica_replacement_duration_seconds_bucket", f'{_ML},model="chat"'),
]:
    SERIES += [
        _series(_metric, f'{_labels},le="60.0"', NEW_ZERO),
        _series(_metric, f'{_labels},le="120.0"', NEW),
        _series(_metric, f'{_labels},le="+Inf"', NEW),
    ]

# A same-named cache in another namespace, one observation of 30 s (below the 60 s
# bound): its quantiles are its own, never merged with ml/c's.
SERIES += [
    _series("cache_hydration_duration_seconds_bucket", f'namespace="ml-b",cache="c",le="{le}"', NEW)
    for le in ("60.0", "120.0", "+Inf")
]

Samples = dict[str, float]  # '{label="value",...}' -> the value promtool must see
_PHASES: Samples = {'{phase="Hydrating"}': 1, '{phase="Ready"}': 1}  # the older Ready adds 0
_FAILED: Samples = {
    '{namespace="ml",cache="c",cluster="gpu-1",reason="BackoffLimitExceeded"}': 1
}  # the older failure is not in the table (> 0)
_VERDICTS_HOUR: Samples = {
    '{namespace="ml",experiment="e",reason="GauntletPassed"}': 1,
    '{namespace="ops",experiment="old",reason="GauntletFailed"}': 0,
}
_STARTS: Samples = {'{namespace="ml",backfill="b"}': 1, '{namespace="ops",backfill="old"}': 0}
_COMPLETIONS: Samples = {
    '{namespace="ml",backfill="b",result="succeeded"}': 1,
    '{namespace="ops",backfill="old",result="failed"}': 0,
}
_PREEMPTIONS: Samples = {
    '{namespace="ml",backfill="b",reason="foreground"}': 1,
    '{namespace="ml",backfill="b",reason="not_ready"}': 1,
    '{namespace="ops",backfill="old",reason="foreground"}': 0,
}
# 60 + (120 - 60) * 0.5 and 0 + 60 * 0.5 (p50); 60 + 60 * 0.9 and 60 * 0.9 (p90)
_P50: Samples = {'{namespace="ml",cache="c"}': 90, '{namespace="ml-b",cache="c"}': 30}
_P90: Samples = {'{namespace="ml",cache="c"}': 114, '{namespace="ml-b",cache="c"}': 54}
_MODEL = '{namespace="ml",model="chat"}'


def _zero(expected: Samples) -> Samples:
    return {labels: 0 for labels in expected}


# (panel title, refId) -> {eval minute: {labels: value}}: at 790m the new series are 10
# minutes old; at 850m they are older than the 1 h windows (but not the 6 h ones).
FIRST_EVENTS: dict[tuple[str, str], dict[int, Samples]] = {
    ("Hydration phases entered in the time range", "A"): {790: _PHASES, 850: _PHASES},
    ("Hydration phase changes per hour, by phase", "A"): {790: _PHASES, 850: _zero(_PHASES)},
    ("Hydration duration p50 and p90, by cache (6 h window)", "A"): {790: _P50, 850: _P50},
    ("Hydration duration p50 and p90, by cache (6 h window)", "B"): {790: _P90, 850: _P90},
    ("Failed clusters in the time range", "A"): {790: _FAILED, 850: _FAILED},
    ("Cold start p50 and p90, by model (6 h window)", "A"): {790: {_MODEL: 90}},
    ("Cold start p50 and p90, by model (6 h window)", "B"): {790: {_MODEL: 114}},
    ("Replica re-placement p90, by model (6 h window)", "A"): {790: {_MODEL: 114}},
    ("Verdicts in the time range, by reason", "A"): {
        790: {'{reason="GauntletPassed"}': 1, '{reason="GauntletFailed"}': 0}
    },
    ("Verdicts per hour, by experiment and reason", "A"): {
        790: _VERDICTS_HOUR,
        850: _zero(_VERDICTS_HOUR),
    },
    ("Backfill Job starts per hour", "A"): {790: _STARTS, 850: _zero(_STARTS)},
    ("Backfill completions per hour, by result", "A"): {
        790: _COMPLETIONS,
        850: _zero(_COMPLETIONS),
    },
    ("Backfill preemptions per hour, by reason", "A"): {
        790: _PREEMPTIONS,
        850: _zero(_PREEMPTIONS),
    },
    ("Backfill useful running time (share of wall clock)", "A"): {  # 1800 s in 3600 s
        790: {'{namespace="ml",backfill="b"}': 0.5, '{namespace="ops",backfill="old"}': 0},
        850: {'{namespace="ml",backfill="b"}': 0, '{namespace="ops",backfill="old"}': 0},
    },
}


def _row_of(dash: dict[str, Any]) -> dict[int, str]:
    row, out = "", {}
    for p in dash["panels"]:
        if p["type"] == "row":
            row = p["title"]
        else:
            out[p["id"]] = row
    return out


def _counting_targets(dash: dict[str, Any]) -> dict[tuple[str, str], str]:
    """Every query outside "Function health" that takes increase() or rate() of a window."""
    rows = _row_of(dash)
    return {
        (p["title"], t["refId"]): t["expr"]
        for p in _panels(dash)
        if rows[p["id"]] != "Function health"
        for t in p["targets"]
        if _WINDOW.search(t["expr"])
    }


def test_every_counting_panel_counts_a_series_born_in_its_window(dash):
    """Each increase()/rate() of a window has its two branches, and promtool checks them."""
    targets = _counting_targets(dash)
    assert set(targets) == set(FIRST_EVENTS)
    for where, expr in targets.items():
        for fn, selector, window in _WINDOW.findall(expr):
            before = f"present_over_time({selector}[{window}] offset {window})"
            assert f" and {before}" in expr, where
            born = f"max_over_time({selector}[{window}])"
            if fn == "rate":  # per second: the born series' value over the window's seconds
                born += f" / {int(window[:-1]) * _SECONDS[window[-1]]}"
            assert born in expr, where
            assert f" unless {before}" in expr, where


def _panel_expr(expr: str) -> str:
    """The query as Grafana sends it: every namespace, the test's time range."""
    return expr.replace("$namespace", ".*").replace("$__range", TIME_RANGE)


def _first_event_tests(dash: dict[str, Any]) -> dict[str, Any]:
    targets = _counting_targets(dash)
    cases = [
        {
            "expr": _panel_expr(targets[key]),
            "eval_time": f"{minute}m",
            "exp_samples": [{"labels": lbl, "value": v} for lbl, v in samples.items()],
        }
        for key, by_minute in FIRST_EVENTS.items()
        for minute, samples in by_minute.items()
    ]
    return {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "a series born at 1 counts its first event",
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in SERIES],
                "promql_expr_test": cases,
            }
        ],
    }


def _promtool_test(tests: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    (tmp_path / "dashboard_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return subprocess.run(
        [PROMTOOL, "test", "rules", "dashboard_test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@needs_promtool
def test_promtool_one_event_counts_as_one(dash, tmp_path):
    proc = _promtool_test(_first_event_tests(dash), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


_BEFORE = re.compile(r"present_over_time\(([^()\[]+)\[([^\]]+)\] offset ([^)]+)\)")
_COUNTED = re.compile(
    r"\((increase|rate)\(([^()\[]+)\[([^\]]+)\]\) and present_over_time\([^)]*\)\) or "
    r"\(\(?max_over_time\([^)]*\)(?: / \d+\))? unless present_over_time\([^)]*\)\)"
)


@needs_promtool
@pytest.mark.parametrize(
    ("mutation", "rewrite"),
    [
        # increase() alone, as before: a series born at 1 reads 0
        ("increase alone", lambda e: _COUNTED.sub(r"\1(\2[\3])", e)),
        # "existed a window ago" as one instant (`X offset W`): the older series, whose
        # scrapes failed then, count their whole history
        ("instant offset", lambda e: _BEFORE.sub(r"\1 offset \3", e)),
    ],
)
def test_promtool_catches_a_panel_that_does_not_count_so(dash, tmp_path, mutation, rewrite):
    """Mutations: the promtool test fails on the queries it is there to reject."""
    mutated = json.loads(json.dumps(dash))
    for p in _panels(mutated):
        for t in p["targets"]:
            new = rewrite(t["expr"])
            if (p["title"], t["refId"]) in FIRST_EVENTS:
                assert new != t["expr"], (mutation, p["title"])
            t["expr"] = new
    proc = _promtool_test(_first_event_tests(mutated), tmp_path)
    assert proc.returncode != 0, mutation
    assert "FAILED" in proc.stdout + proc.stderr
