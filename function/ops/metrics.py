"""Prometheus metrics of the function (prometheus-client), with bounded labels.

Two families:

- **Per call**: ``modelplane_function_run_seconds{kind,result}`` (the time Crossplane
  waits for a RunFunction call, from its arrival to its answer: recorded by the
  acceptor, ``function.edge.pool``, for every call, those whose caller gave up
  included; by the runner when it composes in the serving process),
  ``modelplane_function_queue_seconds`` (the wait in the acceptor's queue before a
  compute process took the call) and ``modelplane_function_results_total{kind,severity}``
  (recorded where the results are written): every
  result returned, in every call of Crossplane's requirements loop (only the applied
  call's Normal and Warning results become events; the earlier calls' are counted and
  never emitted), and the Fatal results the acceptor answers itself
  (``function.edge.pool``).
- **Lifecycle**, recorded from :attr:`Outcome.observations <function.core.outcome.Outcome>`:
  cold start, cache hydration and replica replacement durations, cache hydration phase
  transitions and failures, ModelExperiment verdicts and the ModelBackfill counters.
- **Levels** (gauges), set on every successful call from the state that call saw:
  ``modelplane_model_deployment_replicas{namespace,model,state}`` (requested, placed,
  ready). A gauge keeps the value the most recent call set, so it is idempotent and
  needs no transition record; with several worker processes the most recent write of
  any process wins (``multiprocess_mode="mostrecent"``), across pods take ``max``. A
  deleted XR's series is dropped once no call has set it for the stale time
  (:func:`series_stale_seconds`), never shown at its last value as if live.

Counting lifecycle transitions in a stateless function
-----------------------------------------------------
The function keeps nothing in memory between calls and may run as several replicas
or worker processes. A composer therefore observes a transition only in the call
where it *records* that transition in the XR's status (for example it writes
``status.hydration.readyAt`` and, in the same outcome, observes the hydration
duration computed from timestamps already in status). Later calls see the recorded
timestamp and observe nothing. Consequences, by design:

- If Crossplane fails to write the XR's status after the call (a conflict, an API
  server error), the next call sees no record, records the transition again and
  **counts the sample a second time**. Rare, and bounded by one extra sample per
  failed write.
- The runner applies observations only when the call succeeded (no Fatal result:
  Crossplane applies nothing then) and when the response asks for no requirement
  that the request did not already carry, each holding only items its selector
  selects (``RequiredView.resolved_for``). Crossplane calls a function again, with
  the same observed XR, while its requirements change (at most a few times per
  reconcile); only the last, stable call is counted. Crossplane v2.4 seeds the first
  call with last reconcile's requirements under the same names (and keeps a
  Composition's bootstrap requirements), so after a selector change a name present
  may hold what the old selector resolved: detected when it holds an item the new
  selector does not select, **not** when the old selector resolved to nothing or to a
  subset of the new one's; then the first call and the applied one both count.
- A sample is counted by the process that served the call. Across function pods,
  sum the series (``sum by (...)``); within a pod with several worker processes,
  use prometheus-client's multiprocess mode (below).

Labels are bounded: object names (namespace, model, cache, experiment, backfill) and
fixed vocabularies only, never run numbers, Job names or timestamps. Labels with a
fixed vocabulary (:attr:`MetricSpec.values`) map anything else to ``other``. Object
names bound each value's length, not how many series there are: the families labelled
with them (:data:`TENANT_FAMILIES`) are kept by ``function.ops.series``, at most
``MODELPLANE_METRIC_SERIES_LIMIT`` label sets per family and process (the least
recently updated dropped past it), and counted in
``modelplane_metric_series_dropped_total{metric,reason}`` when dropped.

Several worker processes
------------------------
With ``PROMETHEUS_MULTIPROC_DIR`` set (to a writable directory, an ``emptyDir`` in
the pod) before the process starts, prometheus-client keeps every value in
memory-mapped files in that directory and :func:`serve` exposes the sum over all
processes (``MultiProcessCollector``). Only one process serves the metrics address;
it calls :func:`resume_multiprocess_dir` once at start, before workers start (the
counters and histograms a previous run of the container left there continue).
``python -m function`` does this (its calls are composed in compute processes,
``function.edge.pool``), creating a temporary directory when the variable is unset;
:func:`exposition_registry` lists every catalogue family from start-up.
Process metrics (``process_*``) are not available in that mode.
See https://prometheus.github.io/client_python/multiprocess/.
"""

from __future__ import annotations

import math
import os
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import structlog
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from function.api.modelcachehydration import PHASES, REASON_PVC_BIND_TIMEOUT
from function.api.modelexperiment import VERDICT_REASONS
from function.composers import KINDS
from function.ops import series

PREFIX = "modelplane_"
OTHER = "other"

# Served XR kinds, owned by function.composers.KINDS; any other kind is "unknown".
_KINDS = frozenset(KINDS)
UNKNOWN_KIND = "unknown"
# Results of a RunFunction call. The order is the wire code a compute process sends the
# acceptor in its answer's header (function.edge.pool): append only. ``cancelled``: the
# caller gave up (its gRPC deadline passed, or it cancelled) before the answer;
# ``stopped``: the function's own stop cut the call (its grace period ended first).
RUN_RESULTS: tuple[str, ...] = ("success", "fatal", "error", "deadline", "cancelled", "stopped")
SEVERITIES = frozenset({"Normal", "Warning", "Fatal"})
BACKFILL_RESULTS = frozenset({"succeeded", "failed"})
PREEMPTION_REASONS = frozenset({"foreground", "not_ready", "suspended", "spec_changed", "other"})
HYDRATION_PHASES = frozenset(PHASES)
# Why a hydration failed: the Job's Failed condition reason, or the PVC bind timeout.
HYDRATION_FAILURE_REASONS = frozenset(
    {"BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy", REASON_PVC_BIND_TIMEOUT}
)
DEPLOYMENT_REPLICA_STATES = frozenset({"requested", "placed", "ready"})

# RunFunction takes about a millisecond for a small XR and tens of milliseconds for a
# 1,000-cluster ModelCache (see the README, Performance); 10 s is far past any healthy call.
RUN_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
)  # fmt: skip
# Cold start: image pull plus weight loading, from tens of seconds to an hour or two.
COLD_START_BUCKETS: tuple[float, ...] = (
    5, 10, 20, 30, 60, 90, 120, 180, 300, 450, 600, 900, 1200, 1800, 2700, 3600, 7200,
)  # fmt: skip
# Hydration: a small model in seconds, a 1 TB checkpoint over a slow link in many hours
# (the default Job deadline is 6 h).
HYDRATION_BUCKETS: tuple[float, ...] = (
    10, 30, 60, 120, 300, 600, 900, 1800, 2700, 3600, 5400, 7200, 10800, 14400, 21600,
    43200, 86400,
)  # fmt: skip
# Replacement: a new replica placed and cold-started elsewhere, minutes to hours.
REPLACEMENT_BUCKETS: tuple[float, ...] = (
    10, 30, 60, 120, 180, 300, 600, 900, 1800, 3600, 7200, 14400,
)  # fmt: skip

_LABEL_VALUE_MAX = 253  # a Kubernetes object name is at most 253 characters
_NOT_BOUNDED = re.compile(r"\d{4}-\d{2}-\d{2}T")  # an RFC 3339 timestamp is not a label

MetricType = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the catalogue.

    Attributes:
        name: Full exposition name (counters end in ``_total``).
        type: ``counter``, ``histogram`` or ``gauge`` (a level: the value is set).
        labels: Label names, in order.
        help: The HELP text.
        buckets: Histogram upper bounds in seconds (``+Inf`` is implied).
        values: For labels with a fixed vocabulary, the allowed values; others map to
            ``other``.
    """

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()
    values: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @property
    def short(self) -> str:
        """The name composers use: the full name without the ``modelplane_`` prefix."""
        return self.name.removeprefix(PREFIX)


CATALOGUE: tuple[MetricSpec, ...] = (
    MetricSpec(
        "modelplane_function_run_seconds",
        "histogram",
        ("kind", "result"),
        "Time Crossplane waits for one RunFunction call, from its arrival to its answer "
        "(the wait in the acceptor's queue included), by XR kind and result (success, "
        "fatal, error, deadline, cancelled: the caller gave up first, stopped: the function "
        "stopped first, its grace period over).",
        RUN_BUCKETS,
        {"kind": _KINDS | {UNKNOWN_KIND}, "result": frozenset(RUN_RESULTS)},
    ),
    MetricSpec(
        "modelplane_function_queue_seconds",
        "histogram",
        (),
        "Time a RunFunction call waited in the acceptor's queue before a compute process "
        "took it (or its caller gave up).",
        RUN_BUCKETS,
    ),
    MetricSpec(
        "modelplane_function_results_total",
        "counter",
        ("kind", "severity"),
        "Results returned, in every call of Crossplane's requirements loop (only the applied "
        "call's Normal and Warning ones become events), by XR kind and severity.",
        values={"kind": _KINDS | {UNKNOWN_KIND}, "severity": SEVERITIES},
    ),
    MetricSpec(
        "modelplane_model_cold_start_duration_seconds",
        "histogram",
        ("namespace", "model", "engine_kind", "cache"),
        "From a ModelReplica's creation (or its cache hydration becoming Ready when it was "
        "gated) to serving. cache is the ModelCache name, 'none' without a cache.",
        COLD_START_BUCKETS,
    ),
    MetricSpec(
        "modelplane_cache_hydration_duration_seconds",
        "histogram",
        ("namespace", "cache"),
        "From a ModelCacheHydration's start to Ready.",
        HYDRATION_BUCKETS,
    ),
    MetricSpec(
        "modelplane_cache_hydration_transitions_total",
        "counter",
        ("namespace", "cache", "phase"),
        "ModelCacheHydration phase changes recorded, by the phase entered "
        "(Pending, Hydrating, Ready, Failed).",
        values={"phase": HYDRATION_PHASES},
    ),
    MetricSpec(
        "modelplane_cache_hydration_failures_total",
        "counter",
        ("namespace", "cache", "cluster", "reason"),
        "ModelCacheHydrations that became Failed, by cluster and reason (the Job's "
        "failure reason or PVCBindTimeout).",
        values={"reason": HYDRATION_FAILURE_REASONS},
    ),
    MetricSpec(
        "modelplane_model_deployment_replicas",
        "gauge",
        ("namespace", "model", "state"),
        "A ModelDeployment's replicas as its last reconcile saw them: requested "
        "(spec.replicas), placed (ModelReplicas composed) and ready.",
        values={"state": DEPLOYMENT_REPLICA_STATES},
    ),
    MetricSpec(
        "modelplane_replica_replacement_duration_seconds",
        "histogram",
        ("namespace", "model"),
        "From a replica displaced from a cluster that stopped being eligible to its "
        "replacement serving (how long the fleet ran short).",
        REPLACEMENT_BUCKETS,
    ),
    MetricSpec(
        "modelplane_model_experiment_verdicts_total",
        "counter",
        ("namespace", "experiment", "reason"),
        "ModelExperiment verdicts recorded, by reason.",
        values={"reason": VERDICT_REASONS},
    ),
    MetricSpec(
        "modelplane_model_backfill_starts_total",
        "counter",
        ("backfill", "namespace", "model"),
        "ModelBackfill Jobs started.",
    ),
    MetricSpec(
        "modelplane_model_backfill_completions_total",
        "counter",
        ("backfill", "namespace", "model", "result"),
        "ModelBackfill Jobs finished, by result (succeeded, failed).",
        values={"result": BACKFILL_RESULTS},
    ),
    MetricSpec(
        "modelplane_model_backfill_preemptions_total",
        "counter",
        ("backfill", "namespace", "model", "reason"),
        "ModelBackfill Jobs cancelled before finishing, by reason "
        "(foreground, not_ready, suspended, spec_changed, other).",
        values={"reason": PREEMPTION_REASONS},
    ),
    MetricSpec(
        "modelplane_model_backfill_useful_running_seconds_total",
        "counter",
        ("backfill", "namespace", "model"),
        "Seconds ModelBackfill Jobs spent running (waiting excluded).",
    ),
)
# The families labelled with values tenants choose (series.tenant_labels): capped.
TENANT_FAMILIES = frozenset(s.name for s in CATALOGUE if series.tenant_labels(s))
CATALOGUE += (
    MetricSpec(
        "modelplane_metric_series_dropped_total",
        "counter",
        ("metric", "reason"),
        "Label sets of tenant-labelled families dropped by a process: past "
        "MODELPLANE_METRIC_SERIES_LIMIT (limit; the least recently updated) or a gauge no "
        "call set for the stale time (stale).",
        values={"metric": TENANT_FAMILIES, "reason": series.DROP_REASONS},
    ),
)

SPECS: dict[str, MetricSpec] = {s.short: s for s in CATALOGUE}
# Recorded by this module, never observed by composers.
_RECORDED_HERE = frozenset({"metric_series_dropped_total"})


class ObservationLike(Protocol):
    """What :func:`apply` reads from an observation (see ``function.core.outcome.Observation``)."""

    @property
    def metric(self) -> str: ...
    @property
    def labels(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def value(self) -> float: ...


def spec_for(metric: str) -> MetricSpec:
    """The spec of ``metric`` given by short or full name.

    Raises:
        ValueError: for a metric not in :data:`CATALOGUE`, or a per-call metric (those
            are recorded by the runner, never by composers).
    """
    spec = SPECS.get(metric.removeprefix(PREFIX))
    if spec is None or spec.short.startswith("function_") or spec.short in _RECORDED_HERE:
        known = ", ".join(
            s.short
            for s in CATALOGUE
            if not s.short.startswith("function_") and s.short not in _RECORDED_HERE
        )
        raise ValueError(f"unknown lifecycle metric {metric!r}; known: {known}")
    return spec


class UnboundedLabel(ValueError):
    """A label value that is not bounded: longer than a Kubernetes name, or a timestamp.

    Label values come from object names that users write; such a sample is dropped, never
    allowed to fail a call (see ``Outcome.observe``).
    """


def check(metric: str, labels: Mapping[str, str], value: float) -> tuple[tuple[str, str], ...]:
    """Validate one observation and return its labels as sorted, bounded pairs.

    Raises:
        UnboundedLabel: a label value that is not bounded (longer than a Kubernetes name,
            or a timestamp).
        ValueError: unknown metric, missing or extra labels, or a negative or non-finite
            value.
    """
    spec = spec_for(metric)
    if set(labels) != set(spec.labels):
        raise ValueError(f"{spec.name} takes labels {sorted(spec.labels)}, got {sorted(labels)}")
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{spec.name}: value {value!r} is not a finite number >= 0")
    pairs = []
    for k in sorted(labels):
        v = str(labels[k])
        if len(v) > _LABEL_VALUE_MAX or _NOT_BOUNDED.search(v):
            raise UnboundedLabel(f"{spec.name}: label {k}={v!r} is not a bounded value")
        pairs.append((k, v))
    return tuple(pairs)


def _build(spec: MetricSpec, registry: CollectorRegistry) -> Any:
    if spec.type == "histogram":
        return Histogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=registry)
    if spec.type == "gauge":
        return Gauge(
            spec.name, spec.help, spec.labels, registry=registry, multiprocess_mode="mostrecent"
        )
    return Counter(spec.name.removesuffix("_total"), spec.help, spec.labels, registry=registry)


def default_series_limit() -> int:
    """``MODELPLANE_METRIC_SERIES_LIMIT``'s default (``function.ops.settings`` owns it)."""
    from function.ops.settings import Settings

    return int(Settings.model_fields["metric_series_limit"].default)


def series_stale_seconds(default_ttl_seconds: float, poll_seconds: float) -> float:
    """How long a tenant gauge may go unset before it is dropped, seconds: ten times the
    longest a served XR waits for its next call (every response asks to be called again
    within ``MODELPLANE_DEFAULT_TTL_SECONDS``, sooner while in progress:
    ``MODELPLANE_POLL_SECONDS``), at least 10 minutes."""
    return max(600.0, 10.0 * max(default_ttl_seconds, poll_seconds))


def _default_stale_seconds() -> float:
    from function.ops.settings import Settings

    fields = Settings.model_fields
    return series_stale_seconds(
        fields["default_ttl_seconds"].default, fields["poll_seconds"].default
    )


# Until configure_series: from the settings' defaults.
_series_limit = default_series_limit()
_series_stale_seconds = _default_stale_seconds()


def configure_series(limit: int, stale_seconds: float) -> None:
    """Set the cap and stale time of the tenant-labelled series of this process: for
    :func:`default`'s store, and for what the acceptor exposes and folds."""
    global _series_limit, _series_stale_seconds
    _series_limit, _series_stale_seconds = max(1, limit), stale_seconds
    if _default is not None:
        _default.series.configure(_series_limit, _series_stale_seconds)


class Metrics:
    """The prometheus-client collectors of :data:`CATALOGUE` in one registry; the
    tenant-labelled families are kept in a :class:`~function.ops.series.SeriesStore`
    (capped, stale gauges dropped) and exposed by its collector on the same registry.

    Args:
        registry: Where to register (the process-wide default registry in production;
            tests pass a fresh one).
        clock: Seconds since the epoch, for the store (tests pass their own).
    """

    def __init__(
        self, registry: CollectorRegistry = REGISTRY, clock: Callable[[], float] = time.time
    ) -> None:
        self.registry = registry
        self.collectors: dict[str, Any] = {
            s.short: _build(s, registry) for s in CATALOGUE if s.name not in TENANT_FAMILIES
        }
        # In multiprocess mode the store mirrors itself into the directory
        # (the acceptor exposes every process's file); read at creation, as
        # prometheus-client reads it.
        multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        self.series = series.SeriesStore(
            CATALOGUE,
            _series_limit,
            stale_seconds=_series_stale_seconds,
            file=series.filename(multiproc_dir, os.getpid()) if multiproc_dir else None,
            clock=clock,
            on_drop=self._dropped,
        )
        registry.register(
            series.Collector(
                CATALOGUE,
                store=self.series,
                settings=lambda: (self.series.limit, self.series.stale_seconds),
                clock=clock,
            )
        )
        self._run = self.collectors["function_run_seconds"]
        self._results = self.collectors["function_results_total"]
        self._queue = self.collectors["function_queue_seconds"]
        # Children of the per-call metrics by label values: the label sets are small
        # and fixed, and a dict lookup is several times cheaper than ``labels()``.
        self._run_children: dict[tuple[str, str], Any] = {}
        self._result_children: dict[tuple[str, str], Any] = {}
        self._log = structlog.get_logger("metrics")

    def configure_series(self, limit: int, stale_seconds: float) -> None:
        """Set the cap and stale time of this process's tenant-labelled series (the
        runner does, from ``MODELPLANE_METRIC_SERIES_LIMIT`` and
        :func:`series_stale_seconds`)."""
        self.series.configure(limit, stale_seconds)
        configure_series(limit, stale_seconds)

    def _dropped(self, short: str, reason: str, n: int) -> None:
        self.collectors["metric_series_dropped_total"].labels(SPECS[short].name, reason).inc(n)

    @staticmethod
    def bound(spec: MetricSpec, label: str, value: str) -> str:
        """``value`` if the label has no fixed vocabulary or it is in it, else ``other``."""
        allowed = spec.values.get(label)
        return value if allowed is None or value in allowed else OTHER

    def record_run(self, kind: str, result: str, seconds: float, severities: Iterable[str]) -> None:
        """Record one RunFunction call: its time and the severity of each result."""
        self.record_time(kind, result, seconds)
        self.record_results(kind, severities)

    def record_time(self, kind: str, result: str, seconds: float) -> None:
        """Record one RunFunction call's time in ``modelplane_function_run_seconds``:
        ``kind`` the XR's (any other: ``unknown``), ``result`` one of
        :data:`RUN_RESULTS` (any other: ``other``), ``seconds`` from its arrival to its
        answer."""
        key = (kind if kind in _KINDS else UNKNOWN_KIND, result if result in RUN_RESULTS else OTHER)
        child = self._run_children.get(key)
        if child is None:
            child = self._run_children[key] = self._run.labels(*key)
        child.observe(seconds)

    def record_queue(self, seconds: float) -> None:
        """Record how long a call waited in the acceptor's queue (seconds) in
        ``modelplane_function_queue_seconds``."""
        self._queue.observe(seconds)

    def record_results(self, kind: str, severities: Iterable[str]) -> None:
        """Count one call's results by severity (``Normal``, ``Warning``, ``Fatal``; any
        other: ``other``) in ``modelplane_function_results_total``."""
        k = kind if kind in _KINDS else UNKNOWN_KIND
        for sev in severities:
            rkey = (k, sev if sev in SEVERITIES else OTHER)
            counter = self._result_children.get(rkey)
            if counter is None:
                counter = self._result_children[rkey] = self._results.labels(*rkey)
            counter.inc()

    def apply(self, observations: Iterable[ObservationLike]) -> int:
        """Record lifecycle observations (histogram samples, counter increments, gauge values).

        An invalid observation is logged and skipped: metrics never fail a call.

        Returns:
            How many were recorded.
        """
        n = 0
        for o in observations:
            try:
                spec = spec_for(o.metric)
                labels = dict(o.labels)
                check(spec.short, labels, o.value)
                values = [self.bound(spec, k, labels[k]) for k in spec.labels]
                if spec.short in self.series:
                    self.series.record(spec.short, values, o.value)
                    n += 1
                    continue
                child = self.collectors[spec.short].labels(*values)
                if spec.type == "histogram":
                    child.observe(o.value)
                elif spec.type == "gauge":
                    child.set(o.value)
                else:
                    child.inc(o.value)
                n += 1
            except ValueError as e:
                self._log.error("metric observation skipped", error=str(e))
        return n


_default: Metrics | None = None


def default() -> Metrics:
    """The process-wide :class:`Metrics` on prometheus-client's default registry."""
    global _default
    if _default is None:
        _default = Metrics()
    return _default


def parse_address(address: str) -> tuple[str, int] | None:
    """Split ``[host]:port`` into (host, port); an empty host ("") means every interface,
    IPv6 and IPv4 (see :func:`serve`).

    Returns:
        None for ``""`` (serving is off).

    Raises:
        ValueError: when the address is not ``[host]:port``.
    """
    if address == "":
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{address!r} is not [host]:port such as :8080")
    return host.strip("[]"), int(port)


def exposition_registry(multiproc_dir: str | None = None) -> CollectorRegistry:
    """The registry to expose: the default one, or a multiprocess aggregate over
    ``multiproc_dir`` (default ``PROMETHEUS_MULTIPROC_DIR``) when that is set."""
    path = multiproc_dir or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        return REGISTRY
    registry = CollectorRegistry()
    tenant = series.Collector(
        CATALOGUE, path=path, settings=lambda: (_series_limit, _series_stale_seconds)
    )
    registry.register(_Catalogue(MultiProcessCollector(None, path=path), tenant))
    return registry


class _Catalogue:
    """The multiprocess aggregate, plus every :data:`CATALOGUE` family that no process
    has written a sample of yet (HELP and TYPE, no samples): every family is listed
    from start-up, as a single process's registry lists them."""

    def __init__(self, inner: Any, tenant: Any = None) -> None:
        self.inner = inner
        self.tenant = tenant

    def collect(self) -> Iterable[Any]:
        from prometheus_client.metrics_core import Metric

        seen = set()
        with _FOLD_LOCK:
            families = list(self.inner.collect())
            if self.tenant is not None:  # the capped tenant-labelled families
                families += self.tenant.collect()
        for family in families:
            seen.add(family.name)
            yield family
        for spec in CATALOGUE:
            name = spec.name.removesuffix("_total") if spec.type == "counter" else spec.name
            if name not in seen:
                yield Metric(name, spec.help, spec.type)


def use_multiprocess_dir(path: str) -> None:
    """Make this process write its metric values into ``path``, as the compute
    processes do (they are spawned with ``PROMETHEUS_MULTIPROC_DIR`` set).

    prometheus-client picks where values live when it is imported
    (``prometheus_client.values.ValueClass``, from the environment variable), and the
    acceptor imported it before the directory existed; metrics created after this call
    write to the directory, so the calls the acceptor answers itself are counted on the
    one endpoint too.
    """
    from prometheus_client import values

    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    values.ValueClass = values.get_value_class()


# Scrapes (``_Catalogue.collect``) and folds (:func:`fold_dead_process`) both run in the
# process that serves metrics; one at a time, so a scrape never sees a value twice (in
# the archive and in the dead process's file) or not at all.
_FOLD_LOCK = threading.Lock()

ARCHIVE = "archive"
"""The process identifier of the files exited processes are folded into
(``counter_archive.db``, ``histogram_archive.db``, ``gauge_mostrecent_archive.db``)."""


def fold_dead_process(pid: int, path: str | None = None) -> int:
    """Fold the metric files of the exited process ``pid`` into the directory's archive
    files, then remove them; returns how many files were removed.

    prometheus-client's multiprocess mode keeps a file per process and metric type
    (``counter_<pid>.db``, ...) and sums them on every scrape; ``mark_process_dead``
    removes only live gauges' files, so each compute process the pool replaced (a call
    past its deadline, a crash) would leave its files for the pod's life and every
    scrape would read more of them. Folded, the values are kept (counters, histograms,
    summaries and ``sum`` gauges added; ``mostrecent`` gauges by latest timestamp;
    ``live*`` gauges dropped, as ``mark_process_dead`` does) and the directory holds one
    archive file per type. Gauges of other modes (``all``, labelled by pid; ``min``,
    ``max``; none of the function's) are left as they are. Call only once ``pid`` has
    exited (it writes no more), in the process that serves ``/metrics``. A tenant
    series file that cannot be read (the archive, or the process's) is removed with a
    warning ``metric file dropped`` naming it, so the other is folded (or kept).
    """
    path = path or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        return 0
    suffix = f"_{pid}.db"
    removed = 0
    with _FOLD_LOCK:
        for entry in os.scandir(path):
            if not entry.name.endswith(suffix):
                continue
            prefix = entry.name[: -len(suffix)]
            mode = prefix.partition("_")[2]
            if mode in ("all", "min", "max"):
                continue
            if not mode.startswith("live"):
                _fold_into(os.path.join(path, f"{prefix}_{ARCHIVE}.db"), entry.path, mode)
            os.unlink(entry.path)
            removed += 1
        # The tenant-labelled series (function.ops.series): the archive keeps the cap.
        tenant = series.filename(path, pid)
        if os.path.exists(tenant):
            log = structlog.get_logger("metrics")
            _drop_unreadable(series.filename(path, series.ARCHIVE), log, "metric file dropped")
            left_out = {}
            if not _drop_unreadable(tenant, log, "metric file dropped"):
                left_out = series.fold(
                    CATALOGUE,
                    path,
                    str(pid),
                    limit=_series_limit,
                    stale_seconds=_series_stale_seconds,
                )
            removed += 1
            for short, n in left_out.items():
                default()._dropped(short, series.REASON_LIMIT, n)
    return removed


def _drop_unreadable(name: str, log: Any, event: str) -> bool:
    """Remove the tenant series file ``name`` if it cannot be read whole (a warning
    ``event`` naming it); whether it was removed (False: readable, or absent)."""
    try:
        series.read_rows(name)
    except series.UNREADABLE as e:
        log.warning(event, file=os.path.basename(name), error=str(e))
        os.unlink(name)
        return True
    return False


def _fold_into(archive_path: str, dead_path: str, mode: str) -> None:
    """Add (or, for ``mostrecent`` gauges, take the later of) each value of the file
    ``dead_path`` into the file ``archive_path``: written whole to a new file that
    replaces the archive (``os.replace``), so a fold that fails part way changes
    nothing and the dead process's values are counted once."""
    merged: dict[str, tuple[float, float]] = {}
    if os.path.exists(archive_path):
        for k, v, t, _ in MmapedDict.read_all_values_from_file(archive_path):
            merged[k] = (v, t)
    for key, value, stamp, _ in MmapedDict.read_all_values_from_file(dead_path):
        if key in merged:
            old, old_stamp = merged[key]
            if mode == "mostrecent":
                value, stamp = (value, stamp) if stamp >= old_stamp else (old, old_stamp)
            else:
                value += old
        merged[key] = (value, stamp)
    fresh = archive_path[: -len(".db")] + ".new"  # not *.db: scrapes do not read it
    if os.path.exists(fresh):
        os.unlink(fresh)
    archive = MmapedDict(fresh)
    try:
        for key, (value, stamp) in merged.items():
            archive.write_value(key, value, stamp)
    finally:
        archive.close()
    os.replace(fresh, archive_path)


# The file types whose values continue across a restart of the container: event counts.
_CONTINUED = frozenset({"counter", "histogram", "summary"})


def resume_multiprocess_dir(path: str) -> tuple[int, int]:
    """Prepare the multiprocess directory a previous run of the container left: its
    counters and histograms continue, everything else goes.

    An ``emptyDir`` outlives its container, so after an in-place restart (an OOM kill, a
    failed liveness probe) the directory holds the files of the previous run's
    processes. Each ``counter_<pid>.db``, ``histogram_<pid>.db`` (and ``summary``) file
    is folded into the archive of its type, as :func:`fold_dead_process` does, and the
    archives are kept: every counter continues from its value. Cleared instead, a
    per-object event counter (a cache's hydration failures on a cluster) would come
    back at 1 on its next event, no lower than before: a reset Prometheus cannot see,
    so ``increase()`` and the alerts built on it would miss that event. Gauge files (of
    any mode, archive too) are removed, as are files a fold left unfinished
    (``*_archive.new``, ``tenant_*.tdb.new``) and any metric file that cannot be read
    (logged as a warning with the file's name; its values are lost, a reset Prometheus
    sees as a decrease). The tenant-labelled series' files (``tenant_<pid>.tdb``,
    :mod:`function.ops.series`) are folded into ``tenant_archive.tdb`` the same way:
    counters continue, the previous run's gauges are left out (the archive's too), and
    the label sets the archive cannot keep for the cap are counted in
    ``modelplane_metric_series_dropped_total{reason="limit"}``. Files that are not
    metric files are left alone. A new pod starts with an empty ``emptyDir``, and a
    directory made at start (the variable unset) is empty: both start from zero.

    Call once, in the process that serves metrics, before any other process starts (a
    new process may reuse a pid of the previous run).

    Returns:
        ``(folded, removed)``: per-process files folded into an archive, and files
        removed without folding.
    """
    log = structlog.get_logger("metrics")
    folded = removed = 0
    with _FOLD_LOCK:
        # Archives first: one that cannot be read is removed before others fold into it.
        entries = sorted(
            (e for e in os.scandir(path) if e.is_file()),
            key=lambda e: (not e.name.endswith(f"_{ARCHIVE}.db"), e.name),
        )
        for entry in entries:
            stem, dot, ext = entry.name.rpartition(".")
            prefix, _, ident = stem.rpartition("_")
            # A tenant file's compaction or fold left unfinished: tenant_<ident>.tdb.new.
            tenant_new = stem.startswith(series.FILE_PREFIX) and stem.endswith(series.SUFFIX)
            if (
                not dot
                or ext not in ("db", "new")
                or (ext == "new" and ident != ARCHIVE and not tenant_new)
            ):
                continue
            if ext == "db" and prefix in _CONTINUED:
                try:
                    if ident == ARCHIVE:
                        # Read whole (the reader is lazy): a truncated archive fails here.
                        deque(MmapedDict.read_all_values_from_file(entry.path), maxlen=0)
                        continue
                    _fold_into(os.path.join(path, f"{prefix}_{ARCHIVE}.db"), entry.path, "")
                    folded += 1
                    os.unlink(entry.path)
                    continue
                except (RuntimeError, ValueError, struct.error) as e:
                    log.warning("metric file of the previous run dropped",
                                file=entry.name, error=str(e))  # fmt: skip
            os.unlink(entry.path)
            removed += 1
        tenant_folded, tenant_removed, left_out = _resume_tenant(path, log)
    folded += tenant_folded
    removed += tenant_removed
    # Label sets the archive could not keep for the cap are counted, as when a
    # replaced process is folded (fold_dead_process).
    for short, n in left_out.items():
        default()._dropped(short, series.REASON_LIMIT, n)
    return folded, removed


def _resume_tenant(path: str, log: Any) -> tuple[int, int, dict[str, int]]:
    """The tenant part of :func:`resume_multiprocess_dir` (under ``_FOLD_LOCK``):
    (files folded, files removed, label sets left out for the cap per family)."""
    folded = removed = 0
    # The tenant-labelled series (function.ops.series), one file per process: folded
    # into the tenant archive like a replaced process's, counters continuing; every
    # gauge of the previous run (stale after 0 s) is dropped, the archive's too. An
    # archive that cannot be read is removed before any file folds into it; a
    # process's file that cannot be read is removed, not folded.
    left_out: dict[str, int] = {}
    archive = series.filename(path, series.ARCHIVE)
    dropped = "metric file of the previous run dropped"
    if _drop_unreadable(archive, log, dropped):
        removed += 1
    else:
        left_out = series.prune_archive(CATALOGUE, path, limit=_series_limit, stale_seconds=0.0)
    for name in series.files(path):
        ident = os.path.basename(name)[len(series.FILE_PREFIX) : -len(series.SUFFIX)]
        if ident == series.ARCHIVE:
            continue
        if _drop_unreadable(name, log, dropped):
            removed += 1
            continue
        more = series.fold(CATALOGUE, path, ident, limit=_series_limit, stale_seconds=0.0)
        for short, n in more.items():
            left_out[short] = left_out.get(short, 0) + n
        folded += 1
    return folded, removed, left_out


def serve(address: str, multiproc_dir: str | None = None) -> Any:
    """Serve ``/metrics`` on ``address`` from a daemon thread.

    Returns:
        The WSGI server (``server_port`` gives the bound port, ``shutdown()`` stops it),
        or None when ``address`` is empty (off).

    Raises:
        ValueError: a malformed address. OSError: the port cannot be bound.
    """
    parsed = parse_address(address)
    if parsed is None:
        return None
    host, port = parsed
    registry = exposition_registry(multiproc_dir)
    if not host:
        # Every interface, IPv6 too: "::" takes IPv4 as well on a dual-stack host (Linux's
        # default); a host without IPv6 refuses it, then IPv4 alone. A host written out
        # (0.0.0.0, ::) is bound as written.
        try:
            server, _thread = start_http_server(port, addr="::", registry=registry)
            return server
        except OSError:
            host = "0.0.0.0"
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
