"""Review 16b F2: series labelled with tenant-chosen values (an XR's name) were not bounded.

Every distinct ModelDeployment added three ``modelplane_model_deployment_replicas``
series for the pod's life (the backfill, experiment and cache families likewise): in
prometheus-client's multiprocess mode a child's entry stays in the process's file, and
its value object in memory, even after ``remove()``. 20,000 ModelDeployments took 60,000
series, +103 MiB in one process and a 20 MB scrape. Now each tenant-labelled family
holds at most ``MODELPLANE_METRIC_SERIES_LIMIT`` label sets per process (the least
recently updated dropped, and counted), and a gauge no call set for the stale time is
dropped rather than shown at its last value (``function.ops.series``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from function.core.outcome import Observation
from function.ops import metrics
from tests.support.table import Case, table
from tests.test_metrics import EXPECTED, EXPECTED_BUCKETS, SAMPLE_LABELS

ROOT = Path(__file__).resolve().parent.parent
DROPPED = "modelplane_metric_series_dropped_total"

# A compute process as the pool starts one: settings from the environment, a runner,
# then lifecycle observations for N distinct XRs of one family (argv: family, N, name
# length, labels as JSON with {i} for the XR's number, the value).
CHILD = """
import json, sys
from function.edge.runner import FunctionRunner
from function.ops.settings import load_settings
from function.core.outcome import Observation
family, n, length, labels = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
value = float(sys.argv[5])
runner = FunctionRunner(settings=load_settings())
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
before = rss()
for i in range(n):
    name = (f"d{i:06d}-" + "x" * length)[:length]
    obs = json.loads(labels.replace("{i}", name))
    runner.metrics.apply([Observation(family, tuple(sorted(o.items())), value) for o in obs])
print(json.dumps({"grew_mib": rss() - before}))
"""
EXPOSE = """
from prometheus_client import generate_latest
from function.ops import metrics
print(generate_latest(metrics.exposition_registry()).decode())
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", **extra}


def _child(env: dict[str, str], family: str, n: int, labels: list[dict], value: float = 1.0,
           length: int = 20) -> dict:  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", CHILD, family, str(n), str(length), json.dumps(labels), str(value)],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    return json.loads(out.splitlines()[-1])


def _exposed(env: dict[str, str]) -> dict[str, list]:
    out = subprocess.run(
        [sys.executable, "-c", EXPOSE], cwd=ROOT, env=env, check=True, capture_output=True,
        text=True, timeout=300,
    ).stdout  # fmt: skip
    fams: dict[str, list] = {}
    for f in text_string_to_metric_families(out):
        fams.setdefault(f.name, []).extend(f.samples)
    return fams


DEPLOYMENT = [{"namespace": "ml", "model": "{i}", "state": s}
              for s in ("requested", "placed", "ready")]  # fmt: skip
BACKFILL = [{"backfill": "{i}", "namespace": "ml", "model": "qwen"}]
COLD_START = [{"namespace": "ml", "model": "{i}", "engine_kind": "Deployment", "cache": "none"}]
FAILURES = [{"namespace": "ml", "cache": "c", "cluster": "{i}", "reason": "DeadlineExceeded"}]


CAPPED = [
    Case("gauge past the cap", "a deployment's three states are one label set",
         dict(family="model_deployment_replicas", labels=DEPLOYMENT, xrs=300, limit=50), 50),
    Case("counter past the cap", "a ModelBackfill's name is a tenant label",
         dict(family="model_backfill_starts_total", labels=BACKFILL, xrs=300, limit=50), 50),
    Case("histogram past the cap", "every bucket of a label set goes with it",
         dict(family="model_cold_start_duration_seconds", labels=COLD_START, xrs=300,
              limit=50), 50),
    Case("cluster label past the cap", "an InferenceCluster's name is a tenant label too",
         dict(family="cache_hydration_failures_total", labels=FAILURES, xrs=300, limit=50),
         50),
    Case("gauge within the cap", "nothing is dropped under the cap",
         dict(family="model_deployment_replicas", labels=DEPLOYMENT, xrs=40, limit=50), 40),
]  # fmt: skip


@table(CAPPED)
def test_label_sets_per_family_are_capped_through_the_multiprocess_collector(
    tmp_path, case: Case[dict, int]
) -> None:
    """Distinct XRs past ``MODELPLANE_METRIC_SERIES_LIMIT`` in one compute process: the
    endpoint shows the ``limit`` label sets updated last (each whole: a deployment's three
    states together), and the dropped ones are counted under the family's name."""
    family, labels, xrs, limit = (case.inputs[k] for k in ("family", "labels", "xrs", "limit"))
    kept = case.want
    env = _env(tmp_path, MODELPLANE_METRIC_SERIES_LIMIT=str(limit))
    _child(env, family, xrs, labels, value=7.0)
    fams = _exposed(env)
    spec = metrics.spec_for(family)
    name = spec.name.removesuffix("_total") if spec.type == "counter" else spec.name
    tenant = [k for k in spec.labels if k not in spec.values]
    samples = fams.get(name, [])
    sets = {tuple(s.labels[k] for k in tenant) for s in samples}
    assert len(sets) == kept
    # the most recent ones, every sample of each
    newest = {f"d{i:06d}-" for i in range(xrs - kept, xrs)}
    assert {next(v for v in t if v.startswith("d0"))[:8] for t in sets} == newest
    whole = [s for s in samples if s.name in (spec.name, name + "_count")]
    assert len(whole) == kept * len(labels)
    dropped = {
        (s.labels["metric"], s.labels["reason"]): s.value
        for s in fams.get("modelplane_metric_series_dropped", [])
        if s.name == DROPPED
    }
    assert dropped == ({(spec.name, "limit"): xrs - kept} if xrs > kept else {})


def test_twenty_thousand_deployments_fit_the_memory_budget_by_default(tmp_path):
    """The review's measure: 20,000 ModelDeployments with 253-character names grew one
    process by 103 MiB and the directory every scrape reads by 32 MiB. With the default
    cap both stay small, and the scrape shows the cap's label sets."""
    env = _env(tmp_path)
    got = _child(env, "model_deployment_replicas", 20_000, DEPLOYMENT, length=253)
    assert got["grew_mib"] < 16, got
    limit = metrics.default_series_limit()
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert size < 8 * 2**20, size
    fams = _exposed(env)
    assert len(fams["modelplane_model_deployment_replicas"]) == 3 * limit


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_gauge_no_call_sets_is_dropped_when_stale_and_counters_stay():
    """A deleted ModelDeployment's gauge is not shown at its last value once no call has
    set it for the stale time; a counter keeps its count (dropped only by the cap)."""
    clock = _Clock(1_000_000.0)
    m = metrics.Metrics(CollectorRegistry(), clock=clock)
    m.configure_series(limit=100, stale_seconds=600)
    gone = (("model", "gone"), ("namespace", "ml"), ("state", "ready"))
    live = (("model", "live"), ("namespace", "ml"), ("state", "ready"))
    starts = (("backfill", "evals"), ("model", "qwen"), ("namespace", "ml"))
    assert m.apply([Observation("model_deployment_replicas", gone, 2.0),
                    Observation("model_deployment_replicas", live, 1.0),
                    Observation("model_backfill_starts_total", starts, 1.0)]) == 3  # fmt: skip
    clock.now += 400
    m.apply([Observation("model_deployment_replicas", live, 3.0)])
    g = "modelplane_model_deployment_replicas"
    assert m.registry.get_sample_value(g, dict(gone)) == 2.0
    clock.now += 300  # "gone" last set 700 s ago, "live" 300 s ago
    assert m.registry.get_sample_value(g, dict(gone)) is None
    assert m.registry.get_sample_value(g, dict(live)) == 3.0
    assert m.registry.get_sample_value("modelplane_model_backfill_starts_total", dict(starts)) == 1
    assert m.registry.get_sample_value(DROPPED, {"metric": g, "reason": "stale"}) == 1.0


def test_an_idle_process_stale_gauge_is_not_exposed(tmp_path):
    """A process that gets no call cannot drop its own stale gauge: the endpoint leaves
    out every gauge label set written longer ago than the stale time."""
    from function.ops import series

    specs = metrics.CATALOGUE
    old = series.SeriesStore(
        specs, 10, stale_seconds=600, file=series.filename(str(tmp_path), 1), clock=lambda: 1e3
    )
    old.record("model_deployment_replicas", ("ml", "gone", "ready"), 2.0)
    old.record("model_backfill_starts_total", ("evals", "ml", "qwen"), 1.0)
    fresh = series.SeriesStore(specs, 10, stale_seconds=600, file=series.filename(str(tmp_path), 2))
    fresh.record("model_deployment_replicas", ("ml", "live", "ready"), 1.0)
    registry = metrics.exposition_registry(str(tmp_path))
    text = generate_latest(registry).decode()
    assert 'model="live"' in text
    assert 'model="gone"' not in text
    assert 'modelplane_model_backfill_starts_total{backfill="evals"' in text


def test_folded_archive_keeps_the_most_recently_updated_label_sets(tmp_path):
    """Processes the pool replaced fold into one archive, which holds at most the cap
    per family (the label sets updated last), not the union of every process's."""
    from function.ops import series

    specs = metrics.CATALOGUE
    for ident, start in (("11", 0), ("12", 30)):
        store = series.SeriesStore(specs, 50, stale_seconds=600, clock=_Clock(1e12),
                                   file=series.filename(str(tmp_path), ident))  # fmt: skip
        for i in range(start, start + 50):
            store.clock.now = 1e12 + i  # type: ignore[attr-defined]
            store.record("model_backfill_starts_total", (f"b{i:03d}", "ml", "qwen"), 1.0)
    assert (
        series.fold(specs, str(tmp_path), "11", limit=50, stale_seconds=600, clock=lambda: 1e12)
        == {}
    )
    assert series.fold(
        specs, str(tmp_path), "12", limit=50, stale_seconds=600, clock=lambda: 1e12
    ) == {"model_backfill_starts_total": 30}
    assert [p.name for p in tmp_path.iterdir()] == ["tenant_archive.tdb"]
    text = generate_latest(metrics.exposition_registry(str(tmp_path))).decode()
    kept = {line.split('backfill="')[1][:4] for line in text.splitlines()
            if line.startswith("modelplane_model_backfill_starts_total{")}  # fmt: skip
    assert kept == {f"b{i:03d}" for i in range(30, 80)}


def test_a_process_file_is_rewritten_once_dropped_entries_outnumber_live_ones(tmp_path):
    """Dropped label sets leave their entries in the file until they outnumber the live
    ones; then the file is written anew, so its size stays bounded by the cap."""
    from function.ops import series

    store = series.SeriesStore(
        metrics.CATALOGUE, 100, stale_seconds=600, file=series.filename(str(tmp_path), 7)
    )
    sizes = []
    for i in range(20_000):
        store.record("model_deployment_replicas", ("ml", f"m{i:05d}" + "x" * 240, "ready"), 1.0)
        if i % 1000 == 999:
            sizes.append(store.file_bytes())
    assert max(sizes) < 4 * 2**20, sizes
    rows = list(series.read_rows(str(tmp_path / "tenant_7.tdb")))
    assert len({k for k, _v, _t in rows}) <= 100 + 2 * series._COMPACT_MIN


@pytest.fixture
def multiprocess_samples(tmp_path):
    """Every catalogue family written by a compute process (SAMPLE_LABELS), as the
    endpoint shows them."""
    obs = [{"family": k, "labels": v} for k, v in SAMPLE_LABELS.items()]
    code = (
        "import json, sys\n"
        "from function.ops import metrics\n"
        "from function.core.outcome import Observation\n"
        "m = metrics.default()\n"
        "m.record_run('ModelCache', 'success', 0.002, ['Normal'])\n"
        "obs = json.loads(sys.argv[1])\n"
        "assert m.apply([Observation(o['family'], tuple(sorted(o['labels'].items())), 30.0)"
        " for o in obs]) == len(obs)\n"
    )
    env = _env(tmp_path)
    subprocess.run([sys.executable, "-c", code, json.dumps(obs)], cwd=ROOT, env=env, check=True)
    return _exposed(env)


def test_series_within_the_cap_expose_what_the_dashboard_and_alerts_read(
    multiprocess_samples,
):
    """Under the cap nothing changes for ``operations/``: through the real multiprocess
    collector every family has the names, types, labels and buckets the dashboard and
    alert tests check their queries against (``tests/test_metrics.py`` EXPECTED), and the
    values written."""
    exposed = {}
    for fam, samples in multiprocess_samples.items():
        if not fam.startswith("modelplane_") or fam == "modelplane_metric_series_dropped":
            continue
        for s in samples:
            labels = {k for k in s.labels if k != "le"}
            name = s.name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
            exposed.setdefault(name, set()).update(labels)
    want = {n: labels for n, (_t, labels) in EXPECTED.items() if n != DROPPED}  # fmt: skip
    assert exposed == want
    for name, bounds in EXPECTED_BUCKETS.items():
        got = sorted(
            float(s.labels["le"]) for s in multiprocess_samples[name] if s.name.endswith("_bucket")
        )
        assert got == [*map(float, bounds), math.inf], name
    replicas = multiprocess_samples["modelplane_model_deployment_replicas"]
    assert [s.value for s in replicas] == [30.0]
    (count,) = [s for s in multiprocess_samples["modelplane_model_cold_start_duration_seconds"]
                if s.name.endswith("_count")]  # fmt: skip
    assert count.value == 1.0


def test_series_limit_is_a_setting_reported_by_config():
    out = subprocess.run(
        [sys.executable, "-m", "function", "config"], cwd=ROOT, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "MODELPLANE_METRIC_SERIES_LIMIT": "300"},
    ).stdout  # fmt: skip
    assert "MODELPLANE_METRIC_SERIES_LIMIT" in out
    row = out.split("variable: MODELPLANE_METRIC_SERIES_LIMIT", 1)[1].splitlines()
    assert row[1:3] == ["  value: 300", "  source: environment"]


def test_env_parsing_refuses_a_zero_limit():
    out = subprocess.run(
        [sys.executable, "-m", "function", "config"], cwd=ROOT, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "MODELPLANE_METRIC_SERIES_LIMIT": "0"},
    )  # fmt: skip
    assert out.returncode == 2
    assert "MODELPLANE_METRIC_SERIES_LIMIT" in out.stderr


# --- Review 16e: the tenant files across a container restart, and unreadable files ---

RESTART = """
from function import __main__ as main
from function.ops.settings import load_settings
main._metrics_server(load_settings({}, []))
"""
STARTS = "model_backfill_starts_total"
REPLICAS = "model_deployment_replicas"


def _store(path: Path, ident: str | int, rows: list[tuple[str, tuple[str, ...], float]]) -> None:
    """A process's (or the archive's) tenant file holding ``rows`` (family, values, value),
    written now by a real SeriesStore."""
    from function.ops import series

    store = series.SeriesStore(metrics.CATALOGUE, 200, stale_seconds=600,
                               file=series.filename(str(path), ident))  # fmt: skip
    for family, values, value in rows:
        store.record(family, values, value)
    store._file.close()  # type: ignore[union-attr]


def _torn(path: Path, name: str) -> None:
    """The file ``name`` cut short of the bytes its header says it holds, as a container
    killed mid-write (a torn write) leaves it."""
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: int.from_bytes(data[:4], "little") - 10])


def _archive_torn_process_readable(path: Path) -> None:
    _store(path, "archive", [(STARTS, ("old", "ml", "qwen"), 4.0)])
    _torn(path, "tenant_archive.tdb")
    _store(path, 99999, [(STARTS, ("b0", "ml", "qwen"), 5.0)])


def _process_torn_archive_readable(path: Path) -> None:
    _store(path, "archive", [(STARTS, ("b0", "ml", "qwen"), 4.0)])
    _store(path, 41, [(STARTS, ("b1", "ml", "qwen"), 5.0)])
    _torn(path, "tenant_41.tdb")


def _archive_gauges(path: Path) -> None:
    _store(path, "archive", [(REPLICAS, ("ml", "gone-xr", "ready"), 1.0),
                             (STARTS, ("b0", "ml", "qwen"), 5.0)])  # fmt: skip
    # no process file left: every process of the previous run was folded while it ran


def _over_the_cap(path: Path) -> None:
    # limit 3: two processes of the previous run with three backfills each
    _store(path, 7, [(STARTS, (f"a{i}", "ml", "qwen"), 5.0) for i in range(3)])
    _store(path, 8, [(STARTS, (f"b{i}", "ml", "qwen"), 5.0) for i in range(3)])


def _unfinished(path: Path) -> None:
    from prometheus_client.mmap_dict import MmapedDict

    _store(path, "archive", [(STARTS, ("b0", "ml", "qwen"), 5.0)])
    for name in ("tenant_7.tdb.new", "tenant_archive.tdb.new"):
        d = MmapedDict(str(path / name))
        d.write_value("k", 1.0, 1.0)
        d.close()


# want: (files left, {backfill: starts} exposed, deployments exposed, dropped for the
# limit, a file named in a warning)
TENANT_RESTARTS = [
    Case("unreadable-archive", "F1: the torn archive is removed (logged) before the "
         "readable process file folds into it; /metrics serves",
         (_archive_torn_process_readable, {}),
         (["tenant_archive.tdb"], {"b0": 5.0}, set(), None, "tenant_archive.tdb")),
    Case("unreadable-process-file", "F1: a torn process file is removed, the archive kept",
         (_process_torn_archive_readable, {}),
         (["tenant_archive.tdb"], {"b0": 4.0}, set(), None, "tenant_41.tdb")),
    Case("archive-gauges", "F2: every gauge of the previous run goes, the archive's too; "
         "counters continue",
         (_archive_gauges, {}),
         (["tenant_archive.tdb"], {"b0": 5.0}, set(), None, None)),
    Case("over-the-cap", "F4: label sets the archive cannot keep are counted as dropped",
         (_over_the_cap, {"MODELPLANE_METRIC_SERIES_LIMIT": "3"}),
         (["tenant_archive.tdb"], 3, set(), 3.0, None)),
    Case("unfinished-rewrites", "F5: a compaction's or fold's leftover .new files go",
         (_unfinished, {}),
         (["tenant_archive.tdb"], {"b0": 5.0}, set(), None, None)),
]  # fmt: skip


@table(TENANT_RESTARTS)
def test_a_container_restart_folds_the_tenant_files(tmp_path, case) -> None:
    """Review 16e F1, F2, F4, F5: ``python -m function``'s start on the directory a
    previous run left (a real process), then a scrape in another one."""
    setup, extra = case.inputs
    files, starts, deployments, dropped, warned = case.want
    setup(tmp_path)
    env = _env(tmp_path, METRICS_ADDRESS="", **extra)
    out = subprocess.run([sys.executable, "-c", RESTART], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir() if "tenant" in p.name) == files
    warnings = [line for line in (out.stdout + out.stderr).splitlines() if "dropped" in line]
    assert [w for w in warnings if warned and warned in w] == warnings
    assert len(warnings) == (1 if warned else 0), warnings
    fams = _exposed(env)
    got = {s.labels["backfill"]: s.value for s in fams["modelplane_model_backfill_starts"]
           if s.name.endswith("_total")}  # fmt: skip
    if isinstance(starts, int):  # how many label sets, each 5
        assert (len(got), set(got.values())) == (starts, {5.0})
    else:
        assert got == starts
    assert {s.labels["model"] for s in fams["modelplane_model_deployment_replicas"]} == (
        deployments
    )
    limit = [s.value for s in fams.get("modelplane_metric_series_dropped", [])
             if s.name == DROPPED and s.labels["reason"] == "limit"]  # fmt: skip
    assert limit == ([dropped] if dropped is not None else [])


UNREADABLE_AT_SCRAPE = [
    Case("archive", "a torn archive is left out whole (its first entry reads, its last "
         "does not), the processes' files are shown",
         "tenant_archive.tdb", {"b1": 5.0}),
    Case("process-file", "a torn process file is skipped, the archive is shown",
         "tenant_41.tdb", {"b0": 4.0, "b9": 4.0}),
]  # fmt: skip


@table(UNREADABLE_AT_SCRAPE)
def test_a_scrape_skips_a_tenant_file_it_cannot_read(tmp_path, case) -> None:
    """Review 16e F1: one unreadable tenant file made every scrape fail (HTTP 500, no
    metric of the pod). Now it is left out, with one warning naming it, not one per
    scrape; prometheus-client's own metrics are still served."""
    from structlog.testing import capture_logs

    _store(tmp_path, "archive", [(STARTS, ("b0", "ml", "qwen"), 4.0),
                                 (STARTS, ("b9", "ml", "qwen"), 4.0)])  # fmt: skip
    _store(tmp_path, 41, [(STARTS, ("b1", "ml", "qwen"), 5.0)])
    _torn(tmp_path, case.inputs)
    registry = metrics.exposition_registry(str(tmp_path))
    with capture_logs() as logs:
        texts = [generate_latest(registry).decode() for _ in range(3)]
    assert len(set(texts)) == 1
    fams = {f.name: f for f in text_string_to_metric_families(texts[0])}
    got = {s.labels["backfill"]: s.value for s in fams["modelplane_model_backfill_starts"].samples
           if s.name.endswith("_total")}  # fmt: skip
    assert got == case.want
    assert "modelplane_function_run_seconds" in fams
    assert [(e["log_level"], e["file"]) for e in logs] == [("warning", case.inputs)]
