"""Tenant-labelled metric series, capped per family and dropped when stale.

A family whose labels include one without a fixed vocabulary (an XR's name, a
namespace, a cluster: :func:`tenant_labels`) gets a series for every object a tenant
creates. prometheus-client cannot bound those: in multiprocess mode a child keeps its
entry in the process's memory-mapped file, and its value object in a module list,
until the process exits, even after ``remove()``; the acceptor reads every entry on
each scrape. So these families are kept here instead, one :class:`SeriesStore` per
process:

- **Cap.** At most ``limit`` *label sets* per family and process, a label set being the
  values of the family's tenant labels (one ModelDeployment's ``namespace, model``,
  with all its ``state`` series). Past it, the label set updated least recently is
  dropped whole, and counted in ``modelplane_metric_series_dropped_total{metric,
  reason="limit"}``.
- **Stale gauges.** A gauge label set that no call has set for ``stale_seconds`` is
  dropped (``reason="stale"``): the XR was deleted, or its calls fail. It is never
  shown at its last value as if it were live; the acceptor applies the same rule to
  every process's file when it exposes them, so an idle process's stale gauge is not
  shown either. Counters and histograms hold counts that stay true; they are dropped
  only by the cap.

In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) each process mirrors its store into
``tenant_<pid>.tdb`` in that directory, a prometheus-client ``MmapedDict`` (the
library's file format; the suffix keeps ``MultiProcessCollector``, which reads
``*.db``, away from it). Each entry's key is ``[family, sample suffix, label values,
le]`` (JSON), its value the sample's and its timestamp the label set's last update.
A dropped label set's entries are marked dropped at once (their timestamp set to
:data:`DROPPED`) and stay in the file until their count passes the live ones; then the file
is written anew and replaces the old one (``os.replace``: a scrape reads the old or the
new one, whole). :class:`Collector` merges the files (:func:`merge`: counters and
histograms summed, a gauge's most recent write kept, stale gauges left out) for the
acceptor's endpoint, and :func:`fold` folds an exited
process's file into ``tenant_archive.tdb``, keeping the ``limit`` label sets of each
family updated most recently.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.utils import floatToGoString

SUFFIX = ".tdb"
FILE_PREFIX = "tenant_"
ARCHIVE = "archive"
# Rewrite a process's file once it holds this many dropped entries and more dropped
# entries than live ones (amortised: a rewrite per as many drops as the file holds).
_COMPACT_MIN = 4096

# The timestamp of an entry whose label set was dropped (a file keeps its entries until
# it is rewritten); readers skip it.
DROPPED = -1.0

REASON_LIMIT = "limit"
REASON_STALE = "stale"
DROP_REASONS = frozenset({REASON_LIMIT, REASON_STALE})

# What reading a file that cannot be read raises (a torn or truncated write, a
# container killed mid-write): :func:`read_rows`.
UNREADABLE = (RuntimeError, ValueError, struct.error)


class SpecLike(Protocol):
    """What this module reads of a ``function.ops.metrics.MetricSpec``."""

    @property
    def name(self) -> str: ...
    @property
    def short(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def labels(self) -> tuple[str, ...]: ...
    @property
    def help(self) -> str: ...
    @property
    def buckets(self) -> tuple[float, ...]: ...
    @property
    def values(self) -> Mapping[str, frozenset[str]]: ...


def tenant_labels(spec: SpecLike) -> tuple[str, ...]:
    """The labels of ``spec`` without a fixed vocabulary (their values come from objects
    tenants create); empty for a family whose series are bounded by its vocabularies."""
    return tuple(label for label in spec.labels if label not in spec.values)


@dataclass
class _Set:
    """One label set: its samples (JSON key -> value) and when it was last updated."""

    updated: float
    samples: dict[str, float] = field(default_factory=dict)
    # (suffix, le, label values) -> JSON key: made once, a gauge is set on every call
    keys: dict[tuple[str, str | None, tuple[str, ...]], str] = field(default_factory=dict)

    def key(self, short: str, suffix: str, values: tuple[str, ...], le: str | None) -> str:
        """The JSON key of one sample of this label set."""
        k = self.keys.get((suffix, le, values))
        if k is None:
            k = self.keys[suffix, le, values] = _key(short, suffix, values, le)
        return k


def _key(short: str, suffix: str, values: Sequence[str], le: str | None) -> str:
    return json.dumps([short, suffix, list(values), le], separators=(",", ":"))


class SeriesStore:
    """The tenant-labelled series of one process (see the module docstring).

    Args:
        specs: The catalogue's specs; those with :func:`tenant_labels` are kept here.
        limit: Label sets per family, at least 1 (``MODELPLANE_METRIC_SERIES_LIMIT``).
        stale_seconds: A gauge label set not set for this long is dropped.
        file: Where to mirror the store (:func:`filename`), or None (memory only).
        clock: Seconds since the epoch (``time.time``; tests pass their own).
        on_drop: Called with (family short name, reason, label sets dropped).
    """

    def __init__(
        self,
        specs: Iterable[SpecLike],
        limit: int,
        *,
        stale_seconds: float,
        file: str | None = None,
        clock: Callable[[], float] = time.time,
        on_drop: Callable[[str, str, int], None] | None = None,
    ) -> None:
        self.specs = {s.short: s for s in specs if tenant_labels(s)}
        self.limit = limit
        self.stale_seconds = stale_seconds
        self.clock = clock
        self.on_drop = on_drop
        self._sets: dict[str, OrderedDict[tuple[str, ...], _Set]] = {
            short: OrderedDict() for short in self.specs
        }
        self._tenant_index = {
            short: tuple(s.labels.index(label) for label in tenant_labels(s))
            for short, s in self.specs.items()
        }
        self._lock = threading.Lock()
        self._file: MmapedDict | None = None
        self._filename = file
        self._dead = 0  # entries in the file that belong to dropped label sets
        self._live = 0  # entries of the label sets held

    def configure(self, limit: int, stale_seconds: float) -> None:
        """Set the cap and the stale time (the runner does, from the settings)."""
        with self._lock:
            self.limit = max(1, limit)
            self.stale_seconds = stale_seconds
            now = self.clock()
            for short in self._sets:
                self._trim(short, now)

    def __contains__(self, short: str) -> bool:
        return short in self.specs

    def record(self, short: str, values: Sequence[str], value: float) -> None:
        """Record one observation of the tenant-labelled family ``short``: a histogram
        sample, a counter increment or a gauge value; ``values`` in the spec's label order
        (already checked and bounded by the caller)."""
        spec = self.specs[short]
        values = tuple(values)
        tenant = tuple(values[i] for i in self._tenant_index[short])
        with self._lock:
            now = self.clock()
            sets = self._sets[short]
            entry = sets.get(tenant)
            if entry is None:
                entry = sets[tenant] = _Set(now)
            else:
                entry.updated = now
                sets.move_to_end(tenant)
            if spec.type == "histogram":
                for bound in spec.buckets:  # every bucket, as prometheus-client shows them
                    le = floatToGoString(bound)
                    self._add(entry, entry.key(short, "_bucket", values, le), value <= bound)
                self._add(entry, entry.key(short, "_bucket", values, "+Inf"), 1)
                self._add(entry, entry.key(short, "_count", values, None), 1)
                self._add(entry, entry.key(short, "_sum", values, None), value)
            elif spec.type == "gauge":
                k = entry.key(short, "", values, None)
                self._live += k not in entry.samples
                entry.samples[k] = value
                self._write(k, value, now)
            else:
                self._add(entry, entry.key(short, "_total", values, None), value)
            if spec.type != "gauge":
                # The label set's time is on every entry (fold and collect read it).
                for k, v in entry.samples.items():
                    self._write(k, v, now)
            self._trim(short, now)

    def _add(self, entry: _Set, key: str, amount: float) -> None:
        old = entry.samples.get(key)
        if old is None:
            self._live += 1
            old = 0.0
        entry.samples[key] = old + amount

    def _pop(self, sets: OrderedDict[tuple[str, ...], _Set]) -> None:
        samples = sets.popitem(last=False)[1].samples
        if self._file is not None:
            for k in samples:  # marked dropped at once: no scrape shows it again
                self._file.write_value(k, 0.0, DROPPED)
        self._dead += len(samples)
        self._live -= len(samples)

    def _trim(self, short: str, now: float) -> None:
        sets = self._sets[short]
        stale = 0
        if self.specs[short].type == "gauge":
            horizon = now - self.stale_seconds
            while sets:
                first = next(iter(sets.values()))
                if first.updated >= horizon:
                    break
                self._pop(sets)
                stale += 1
        over = 0
        while len(sets) > self.limit:
            self._pop(sets)
            over += 1
        if self.on_drop is not None:
            if stale:
                self.on_drop(short, REASON_STALE, stale)
            if over:
                self.on_drop(short, REASON_LIMIT, over)
        if self._file is not None and self._dead > _COMPACT_MIN and self._dead > self._live:
            self._compact()

    def expire(self) -> None:
        """Drop the stale gauge label sets now (a scrape in a single process does)."""
        with self._lock:
            now = self.clock()
            for short in self._sets:
                self._trim(short, now)

    def rows(self) -> Iterator[tuple[str, float, float]]:
        """Every live sample as (key, value, updated), as :func:`read_rows` reads a file."""
        with self._lock:
            snapshot = [
                (k, v, e.updated)
                for sets in self._sets.values()
                for e in sets.values()
                for k, v in e.samples.items()
            ]
        return iter(snapshot)

    # --- the file (multiprocess mode) ---

    def _write(self, key: str, value: float, stamp: float) -> None:
        if self._filename is None:
            return
        if self._file is None:
            self._file = MmapedDict(self._filename)
        self._file.write_value(key, value, stamp)

    def _compact(self) -> None:
        assert self._file is not None and self._filename is not None
        fresh = self._filename + ".new"
        if os.path.exists(fresh):
            os.unlink(fresh)
        new = MmapedDict(fresh)
        for sets in self._sets.values():
            for e in sets.values():
                for k, v in e.samples.items():
                    new.write_value(k, v, e.updated)
        os.replace(fresh, self._filename)
        self._file.close()
        self._file = new
        self._dead = 0

    def file_bytes(self) -> int:
        """The size of this process's file (0 in a single process)."""
        return os.path.getsize(self._filename) if self._filename and self._file else 0


def filename(path: str, ident: int | str) -> str:
    """The file of process ``ident`` (a pid, or :data:`ARCHIVE`) in the directory ``path``."""
    return os.path.join(path, f"{FILE_PREFIX}{ident}{SUFFIX}")


def files(path: str) -> list[str]:
    """The tenant series files in the multiprocess directory ``path``."""
    return sorted(
        os.path.join(path, n)
        for n in os.listdir(path)
        if n.startswith(FILE_PREFIX) and n.endswith(SUFFIX)
    )


def read_rows(filename: str) -> Iterator[tuple[str, float, float]]:
    """(key, value, updated) of every entry of one file; a file removed meanwhile (folded)
    reads as empty.

    The file is read through once before its rows are returned, so a file that cannot
    be read whole fails here, not part way through a merge.

    Raises:
        RuntimeError, ValueError, struct.error (:data:`UNREADABLE`): the file cannot be
            read (its header claims more than it holds, an entry runs past its end).
    """
    try:
        for _ in MmapedDict.read_all_values_from_file(filename):
            pass
        entries = MmapedDict.read_all_values_from_file(filename)
    except FileNotFoundError:
        return iter(())
    return ((k, v, t) for k, v, t, _ in entries)


# Per tenant label set: when it was last updated, and its samples' values by
# (suffix, label values, le).
_Merged = dict[tuple[str, ...], tuple[float, dict[tuple[str, tuple[str, ...], str | None], float]]]


def merge(
    specs: Mapping[str, SpecLike],
    sources: Iterable[Iterable[tuple[str, float, float]]],
    now: float,
    limit: int,
    stale_seconds: float,
) -> dict[str, _Merged]:
    """Merge the rows (key, value, updated) of several processes' files or stores.

    Returns:
        Per family short name: tenant label values -> (last update, samples); counters
        and histograms summed over the sources, a gauge's most recent write kept, entries
        marked :data:`DROPPED` and gauges written more than ``stale_seconds`` before
        ``now`` left out, and at most ``limit`` label sets per family (those updated most
        recently).
    """
    index = {
        short: tuple(s.labels.index(label) for label in tenant_labels(s))
        for short, s in specs.items()
    }
    out: dict[str, _Merged] = {short: {} for short in specs}
    # One tuple per distinct label values (a histogram's buckets share it).
    interned: dict[tuple[str, ...], tuple[str, ...]] = {}
    stamps: dict[tuple[str, str, tuple[str, ...], str | None], float] = {}
    for rows in sources:
        for key, value, updated in rows:
            if updated < 0:  # DROPPED
                continue
            short, suffix, values, le = json.loads(key)
            spec = specs.get(short)
            if spec is None or len(values) != len(spec.labels):
                continue  # a family this version does not have
            values = tuple(values)
            values = interned.setdefault(values, values)
            gauge = spec.type == "gauge"
            if gauge and updated < now - stale_seconds:
                continue
            tenant = tuple(values[i] for i in index[short])
            fam = out[short]
            seen, samples = fam.get(tenant, (0.0, {}))
            sample = (suffix, values, le)
            if gauge:
                if updated >= stamps.get((short, *sample), -1.0):
                    stamps[(short, *sample)] = updated
                    samples[sample] = value
            else:
                samples[sample] = samples.get(sample, 0.0) + value
            fam[tenant] = (max(seen, updated), samples)
    for short, fam in out.items():
        if len(fam) > limit:
            keep = sorted(fam.items(), key=lambda kv: kv[1][0], reverse=True)[:limit]
            out[short] = dict(keep)
    return out


def families(specs: Mapping[str, SpecLike], merged: Mapping[str, _Merged]) -> Iterator[Metric]:
    """The merged series as prometheus-client metric families (every family, even empty),
    named as prometheus-client names them (a counter without ``_total``)."""
    for short, spec in specs.items():
        name = spec.name.removesuffix("_total") if spec.type == "counter" else spec.name
        metric = Metric(name, spec.help, spec.type)
        for _tenant, (_updated, samples) in sorted(merged.get(short, {}).items()):
            for (suffix, values, le), value in samples.items():
                labels = dict(zip(spec.labels, values, strict=True))
                if le is not None:
                    labels["le"] = le
                metric.add_sample(name + suffix, labels, value)
        yield metric


class Collector:
    """A prometheus-client collector of the tenant series: from a :class:`SeriesStore`
    (single process), or from every ``*.tdb`` file of a multiprocess directory.

    Args:
        specs: The catalogue's specs (only tenant-labelled ones are read).
        store: The store to expose, or None.
        path: The multiprocess directory, or None.
        settings: Returns (limit, stale_seconds) at each scrape.
        clock: Seconds since the epoch.
    """

    def __init__(
        self,
        specs: Iterable[SpecLike],
        *,
        store: SeriesStore | None = None,
        path: str | None = None,
        settings: Callable[[], tuple[int, float]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.specs = {s.short: s for s in specs if tenant_labels(s)}
        self.store = store
        self.path = path
        self.settings = settings
        self.clock = clock
        self._unreadable: set[str] = set()  # files logged as unreadable (once each)

    def _merged_files(self, path: str, limit: int, stale: float) -> dict[str, _Merged]:
        """Every file of ``path`` merged; a file that cannot be read is left out (the
        merge is done again without it: rare, so a scrape reads each file once), with
        a warning naming it the first time (until it reads again)."""
        names = files(path)
        while True:
            bad: dict[str, Exception] = {}
            sources = [_guarded(name, bad) for name in names]
            # every process holds up to limit label sets: the exposition shows their union
            merged = merge(self.specs, sources, self.clock(), limit * max(1, len(names)), stale)
            for name, e in bad.items():
                if name not in self._unreadable:
                    self._unreadable.add(name)
                    structlog.get_logger("metrics").warning(
                        "metric file cannot be read, left out of /metrics",
                        file=os.path.basename(name),
                        error=str(e),
                    )
            if not bad:
                self._unreadable -= set(names)  # read whole this time
                return merged
            names = [n for n in names if n not in bad]

    def collect(self) -> Iterator[Any]:
        limit, stale = self.settings()
        if self.store is not None:
            self.store.expire()
            # a store holds at most limit label sets per family
            merged = merge(self.specs, [self.store.rows()], self.clock(), limit, stale)
        else:
            assert self.path is not None
            merged = self._merged_files(self.path, limit, stale)
        return families(self.specs, merged)


def _guarded(name: str, bad: dict[str, Exception]) -> Iterator[tuple[str, float, float]]:
    """The rows of the file ``name`` as they are read (once); if it cannot be read,
    the error is put in ``bad`` and the rows stop."""
    try:
        for k, v, t, _ in MmapedDict.read_all_values_from_file(name):
            yield k, v, t
    except FileNotFoundError:
        return
    except UNREADABLE as e:
        bad[name] = e


def fold(
    specs: Iterable[SpecLike],
    path: str,
    ident: str,
    *,
    limit: int,
    stale_seconds: float,
    clock: Callable[[], float] = time.time,
) -> dict[str, int]:
    """Fold the file of the exited process ``ident`` into ``tenant_archive.tdb`` (written
    whole to a new file that replaces it) and remove it. The archive keeps, per family,
    the ``limit`` label sets updated most recently and no stale gauge.

    Returns:
        Per family, how many label sets were left out of the archive for the cap (stale
        gauges are not counted: the process that held them counted them when it could).
        Empty when the process left no file.

    Raises:
        :data:`UNREADABLE`: the archive or the process's file cannot be read (nothing
            is changed).
    """
    dead = filename(path, ident)
    if not os.path.exists(dead):
        return {}
    dropped = _rewrite_archive(
        specs, path, [dead], limit=limit, stale_seconds=stale_seconds, now=clock()
    )
    os.unlink(dead)
    return dropped


def prune_archive(
    specs: Iterable[SpecLike],
    path: str,
    *,
    limit: int,
    stale_seconds: float,
    clock: Callable[[], float] = time.time,
) -> dict[str, int]:
    """Rewrite ``tenant_archive.tdb`` without its gauges written more than
    ``stale_seconds`` before now (0: every gauge; a restart drops the previous run's)
    and with at most ``limit`` label sets per family.

    Returns:
        Per family, how many label sets were left out for the cap (as :func:`fold`).
        Empty when there is no archive.

    Raises:
        :data:`UNREADABLE`: the archive cannot be read (it is left as it is).
    """
    if not os.path.exists(filename(path, ARCHIVE)):
        return {}
    return _rewrite_archive(specs, path, [], limit=limit, stale_seconds=stale_seconds, now=clock())


def _rewrite_archive(
    specs: Iterable[SpecLike],
    path: str,
    extra: Sequence[str],
    *,
    limit: int,
    stale_seconds: float,
    now: float,
) -> dict[str, int]:
    """Merge the archive with the files ``extra`` and write it anew; per family, the
    label sets left out for the cap."""
    spec_map = {s.short: s for s in specs if tenant_labels(s)}
    archive = filename(path, ARCHIVE)
    sources = [read_rows(archive), *(read_rows(f) for f in extra)]
    unlimited = merge(spec_map, sources, now, 2**62, stale_seconds)
    merged = merge(spec_map, [], now, limit, stale_seconds)  # empty, one dict per family
    dropped: dict[str, int] = {}
    for short, fam in unlimited.items():
        keep = sorted(fam.items(), key=lambda kv: kv[1][0], reverse=True)
        merged[short] = dict(keep[:limit])
        if len(keep) > limit:
            dropped[short] = len(keep) - limit
    fresh = archive + ".new"
    if os.path.exists(fresh):
        os.unlink(fresh)
    out = MmapedDict(fresh)
    try:
        for short, fam in merged.items():
            for _tenant, (updated, samples) in fam.items():
                for (suffix, values, le), value in samples.items():
                    out.write_value(_key(short, suffix, values, le), value, updated)
    finally:
        out.close()
    os.replace(fresh, archive)
    return dropped
