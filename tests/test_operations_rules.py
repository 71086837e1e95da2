"""The Prometheus alert rules (issue 16): checked, unit-tested with promtool, and kept
identical in the plain rule file and the PrometheusRule manifest.

``promtool`` comes from Debian's ``prometheus`` package (``.ci/run`` installs it); without
it the promtool tests are skipped with that hint, and everything else still runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.promql_catalogue import check_expr

ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = ROOT / "operations" / "prometheus"
RULES = RULES_DIR / "rules.yaml"
RULES_TEST = RULES_DIR / "rules_test.yaml"
PROMETHEUS_RULE = RULES_DIR / "prometheusrule.yaml"
README = ROOT / "README.md"
REPO = "https://github.com/modelplaneai/function-modelplane/blob/main/README.md"
ALERTS = {
    "ModelplaneFatalResultsRising",
    "ModelplaneFunctionSlowCalls",
    "ModelplaneHydrationsFailing",
    "ModelplaneColdStartSlow",
    "ModelplaneExperimentFailures",
    "ModelplaneBackfillAlwaysPreempted",
}
# The alerts that count events of a counter the function creates at 1 on its first increment
# (see the header of rules.yaml); ModelplaneColdStartSlow compares an hour with a week of
# the same histogram and the others are per-second rates of calls.
COUNTING = {
    "ModelplaneHydrationsFailing",
    "ModelplaneExperimentFailures",
    "ModelplaneBackfillAlwaysPreempted",
}
_INCREASE = re.compile(r"\bincrease\(([^()\[]+)\[([^\]]+)\]\)")
# One series counted as the header says: its increase, or its value when born in the window.
_COUNTED = re.compile(
    r"\(increase\(([^()\[]+)\[([^\]]+)\]\)\s+and present_over_time\(\1\[\2\] offset \2\)\)"
    r"\s+or\s+"
    r"\(max_over_time\(\1\[\2\]\)\s+unless present_over_time\(\1\[\2\] offset \2\)\)"
)
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not found: apt-get install prometheus"
)


def _rules(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in doc["groups"] for r in g["rules"]]


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    return _rules(yaml.safe_load(RULES.read_text()))


def test_prometheus_rule_holds_the_same_groups():
    plain = yaml.safe_load(RULES.read_text())
    (manifest,) = list(yaml.safe_load_all(PROMETHEUS_RULE.read_text()))
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", manifest["metadata"]["name"])
    assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}
    assert manifest["spec"] == {"groups": plain["groups"]}


def test_every_alert_is_there_with_a_severity_and_a_runbook(rules):
    assert {r["alert"] for r in rules} == ALERTS
    for r in rules:
        assert r["labels"]["severity"] in {"critical", "warning", "info"}, r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


def _github_anchors(markdown: str) -> set[str]:
    """Heading anchors as GitHub makes them: lower case, punctuation dropped, spaces to -."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_runbooks_point_at_troubleshooting_sections_of_the_readme(rules):
    text = README.read_text()
    anchors = _github_anchors(text)
    troubleshooting = text[text.index("\n## Troubleshooting") :]
    troubleshooting = troubleshooting[: troubleshooting.find("\n## ", 1) % len(troubleshooting)]
    for r in rules:
        url = r["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == REPO, url
        assert anchor in anchors, f"{r['alert']}: no heading for #{anchor}"
        assert anchor.startswith("troubleshooting"), url
        assert f"`{r['alert']}`" in troubleshooting, f"{r['alert']} is not in the alert table"


def test_every_rule_uses_only_exported_metrics_and_labels(rules):
    problems: list[str] = []
    for r in rules:
        checked = check_expr(r["expr"], r["alert"])
        problems += checked.problems
        assert checked.metrics, r["alert"]
        # labels that annotations name must come out of the expression
        for text in r["annotations"].values():
            for label in re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text):
                assert checked.kept is None or label in checked.kept, (r["alert"], label)
                assert label in checked.labels, (r["alert"], label)
    assert not problems, "\n".join(problems)


def test_unit_tests_cover_every_alert_firing_and_quiet():
    doc = yaml.safe_load(RULES_TEST.read_text())
    assert doc["rule_files"] == [RULES.name]
    fired: dict[str, int] = {}
    cases: dict[str, int] = {}
    for test in doc["tests"]:
        for case in test["alert_rule_test"]:
            name = case["alertname"]
            cases[name] = cases.get(name, 0) + 1
            fired[name] = fired.get(name, 0) + len(case.get("exp_alerts") or [])
            for alert in case.get("exp_alerts") or []:
                assert alert.get("exp_annotations"), name  # annotations are rendered and compared
    assert set(cases) == ALERTS
    assert all(fired[a] >= 1 for a in ALERTS), fired
    # "one that does not fire": each test has more series (by their identifying labels)
    # than alerts it expects, so promtool's exact comparison proves the others stay quiet.
    for test in doc["tests"]:
        series = {re.sub(r',?le="[^"]*"', "", s["series"]) for s in test["input_series"]}
        expected = max(len(c.get("exp_alerts") or []) for c in test["alert_rule_test"])
        assert len(series) > expected, test["name"]


def _promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@needs_promtool
def test_promtool_check_rules():
    proc = _promtool("check", "rules", RULES.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


@needs_promtool
def test_promtool_test_rules():
    proc = _promtool("test", "rules", RULES_TEST.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@needs_promtool
@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_promtool_tests_fail_when_a_rule_never_fires(alert, tmp_path):
    """Mutation: a rule that never fires must fail its unit test (the tests can fail)."""
    def never(expr: str) -> str:
        return "vector(1) > 2"

    _mutation_fails(alert, never, tmp_path)


def _mutation_fails(alert: str, mutate: Any, tmp_path: Any) -> None:
    """Run ``alert``'s own unit tests with its expression changed by ``mutate``: promtool
    must report that alert failing (the tests can fail)."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                rule["expr"] = mutate(rule["expr"])
    (tmp_path / RULES.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    tests = yaml.safe_load(RULES_TEST.read_text())
    tests["tests"] = [  # only this alert's tests: a week of cold starts takes a while
        t for t in tests["tests"] if any(c["alertname"] == alert for c in t["alert_rule_test"])
    ]
    (tmp_path / RULES_TEST.name).write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = _promtool("test", "rules", RULES_TEST.name, cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout
    assert f"alertname: {alert}," in proc.stdout + proc.stderr


def test_counting_rules_count_a_series_born_in_their_window(rules):
    """Every increase() of a counting alert is one half of the header's two-branch form."""
    for r in rules:
        expr = r["expr"]
        counted = _COUNTED.findall(expr)
        if r["alert"] in COUNTING:
            assert counted, r["alert"]
            assert len(counted) == len(_INCREASE.findall(expr)), r["alert"]
        else:
            assert not counted, r["alert"]
        for selector, _window in _INCREASE.findall(expr):
            if r["alert"] not in COUNTING:
                assert "_total" not in selector or "modelplane_function_" in selector, r["alert"]


@needs_promtool
@pytest.mark.parametrize("alert", sorted(COUNTING))
def test_promtool_tests_fail_when_a_rule_misses_first_events(alert, tmp_path):
    """Mutation: increase() alone (the fault this form fixes) must fail the alert's tests."""

    def plain(expr: str) -> str:
        expr = _COUNTED.sub(r"increase(\1[\2])", expr)
        if alert == "ModelplaneBackfillAlwaysPreempted":  # as it was
            expr = expr.replace(") >= 3", ") > 2")
        assert "present_over_time" not in expr, expr
        return expr

    _mutation_fails(alert, plain, tmp_path)
