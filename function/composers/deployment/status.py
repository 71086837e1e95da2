"""Status: ``replicas``, ``placement[]``, ``ReplicasReady`` and ``status.displaced[]``
(the replacement-duration metric)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeGuard

from google.protobuf.struct_pb2 import ListValue, Struct

from function.api.modelcachehydration import FAILED, READY
from function.api.modelreplica import REASON_HYDRATING
from function.composers.deployment.terms import (
    DISPLACED,
    HYDRATION_FAILED,
    MAX_DISPLACED,
    MODEL_READY,
    MOVING,
    READY_COND,
    REPLACEMENT_METRIC,
    WAITING_FOR_CACHE,
)
from function.core import structs, versioned
from function.core.inputs import Inputs
from function.core.memo import memo
from function.core.numbers import is_whole
from function.core.outcome import Outcome
from function.core.timeutil import elapsed, format_time, parse_time
from function.scheduling.placement import Moving, Placed, Placement

if TYPE_CHECKING:
    from function.composers.deployment.fleet import _Observed

_CREATING = (False, "Creating", "not created yet")


def _replica_state(obj: Struct | None) -> tuple[bool, str, str]:
    """(ready, reason, message) of an observed ModelReplica from its ModelReady condition
    (:data:`_CREATING` for None)."""
    if obj is None:
        return _CREATING
    return _state_of(obj)


@versioned.reading(16384, weight=2)
def _state_of(obj: Struct) -> tuple[bool, str, str]:
    """:func:`_replica_state` of an object, read once per uid and resourceVersion: scans
    ``status.conditions`` through the field maps."""
    conds = structs.fields_of(obj, "status").get("conditions")
    if conds is not None:
        for cv in conds.list_value.values:
            c = cv.struct_value.fields
            if "type" in c and c["type"].string_value == MODEL_READY:
                stale = _stale(obj, c)
                if stale:
                    return False, "Updating", stale
                return (
                    "status" in c and c["status"].string_value == "True",
                    c["reason"].string_value if "reason" in c else "",
                    c["message"].string_value if "message" in c else "",
                )
    return False, "Pending", "reports no ModelReady condition yet"


def _stale(obj: Struct, cond: Any) -> str:
    """Why a ModelReady condition describes an older spec of the replica ('' when not):
    Crossplane stamps each condition with the ``metadata.generation`` it was written
    for (``observedGeneration``); one below the current generation predates the
    deployment's last change (review 14d: a stale ``True`` dropped a Usage while pods
    still read the old cache). Either field absent: not known to be stale."""
    og = cond.get("observedGeneration")
    gen = structs.fields_of(obj, "metadata").get("generation")
    if og is None or gen is None:
        return ""
    if og.WhichOneof("kind") != "number_value" or gen.WhichOneof("kind") != "number_value":
        return ""
    if og.number_value >= gen.number_value:
        return ""
    return (
        f"its ModelReady is for generation {og.number_value:.0f}, its spec is at "
        f"generation {gen.number_value:.0f} (not reconciled since the last change)"
    )


Row = tuple[int, str, Struct | None, str | None]
"""(index, cluster, observed replica or None, hydration phase or None)."""


@dataclass(slots=True)
class _Tally:
    """The replicas of one call by state, for ``status.replicas`` and ``ReplicasReady``."""

    total: int = 0
    ready: int = 0
    failed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def add(self, row: Row, cache: str | None) -> tuple[bool, str]:
        """Count one replica; returns whether it serves and the reason its row shows."""
        index, cluster, obj, phase = row
        ok, reason, message = _replica_state(obj)
        if obj is not None:
            self.total += 1
        if ok:
            self.ready += 1
            return ok, reason
        # A replica whose spec.clusterName was removed is named without one (review 19a F4).
        where = f"replica {index} " + (f"on {cluster}" if cluster else "(no spec.clusterName)")
        if reason == HYDRATION_FAILED or phase == FAILED:
            self.failed.append(
                f"{where}: " + (message or f"hydration of {_cache_name(cache)} on {cluster} Failed")
            )
            reason = HYDRATION_FAILED
        elif reason == REASON_HYDRATING or (phase is not None and phase != READY):
            self.waiting.append(f"{where} ({phase or 'Hydrating'})")
            reason = reason or WAITING_FOR_CACHE
        else:
            self.other.append(f"{where}: {reason or 'not ready'}")
        return ok, reason


def _cache_name(cache: str | None) -> str:
    """The cache a message names: ``ModelCache <name>``, or, when the spec no longer
    references one while replicas still report on it, the one they were composed with."""
    return f"ModelCache {cache}" if cache else "the ModelCache they were composed with"


def _ready_condition(
    out: Outcome,
    tally: _Tally,
    wanted: int,
    any_rows: bool,
    cache: str | None,
    *,
    moving: Sequence[Moving] = (),
) -> bool:
    """Set ``ReplicasReady``; returns True only when the work is done, or when as many
    replicas as wanted serve while serving ones move make-before-break (``moving``)
    and only their replacements are not ready yet (reason :data:`MOVING`)."""
    summary = f"{tally.ready}/{wanted} replicas ready"
    failed, waiting, other = tally.failed, tally.waiting, tally.other
    if failed:
        out.condition(READY_COND, "False", HYDRATION_FAILED, f"{summary}; " + "; ".join(failed[:5]))
        return False
    if wanted > 0 and tally.ready >= wanted and not other and not waiting:
        out.condition(READY_COND, "True", "Ready", summary)
        return True
    if moving and wanted > 0 and tally.ready >= wanted and len(other) + len(waiting) <= len(moving):
        moves = "; ".join(f"replica {m.index} on {m.cluster} ({m.why})" for m in moving[:5])
        waits = "; ".join((other + waiting)[:5])
        out.condition(
            READY_COND,
            "True",
            MOVING,
            f"{summary}; moving make-before-break, each serving until a replacement "
            f"serves: {moves}; replacements: {waits}",
        )
        return True
    if wanted == 0 and not any_rows:
        out.condition(READY_COND, "True", "ScaledToZero", "0 replicas wanted")
        return True
    if waiting and not other:
        out.condition(
            READY_COND,
            "False",
            WAITING_FOR_CACHE,
            f"{summary}; waiting for {_cache_name(cache)}: " + ", ".join(waiting[:5]),
        )
        return False
    detail = "; ".join((other + waiting)[:5]) or "replicas not placed"
    out.condition(READY_COND, "False", "ReplicasNotReady", f"{summary}; {detail}")
    return False


def _status_from(
    inputs: Inputs,
    out: Outcome,
    wanted: int,
    rows: Sequence[Row],
    cache: str | None,
    *,
    moving: Sequence[Moving] = (),
) -> bool:
    """Status and ReplicasReady from (index, cluster, observed replica, hydration phase).

    ``status.replicas.total`` counts every observed replica, a moving one and its
    replacement both (as a Deployment's ``status.replicas`` counts its surge pods).

    Returns:
        True when the work is done: every one of the ``wanted`` replicas is placed and
        serving (``ReplicasReady=True``), or serving replicas move make-before-break
        (``moving``) and only their replacements are not ready yet. A partial
        placement, a replica waiting on its cache or any other replica not serving is
        False.
    """
    tally = _Tally()
    entries = []
    for row in sorted(rows, key=lambda r: r[0]):
        ok, reason = tally.add(row, cache)
        entries.append((row[0], row[1], ok, reason))
    out.status["replicas"] = {"total": tally.total, "ready": tally.ready}
    out.status["placement"] = _placement(tuple(entries))
    # Levels, set on every call (a gauge: idempotent, no transition record needed).
    labels = {"namespace": inputs.namespace, "model": inputs.name}
    for state, n in (("requested", wanted), ("placed", len(rows)), ("ready", tally.ready)):
        out.observe("model_deployment_replicas", {**labels, "state": state}, n)
    done = _ready_condition(out, tally, wanted, bool(rows), cache, moving=moving)
    # Crossplane derives the XR's readiness from its composed resources unless the
    # function states it; "every placed replica ready" is not "the work is done".
    out.ready = done
    return done


@memo(256, weight=2)
def _placement(entries: tuple[tuple[int, str, bool, str], ...]) -> ListValue:
    """``status.placement`` of ``(index, cluster, ready, reason)`` rows (reason "": not
    written), built in place (100s of rows, no dict-to-Struct round trip) and memoized:
    a steady deployment writes the same rows on every reconcile. Shared between calls:
    read it, never change it."""
    placement = ListValue()
    for index, cluster, ok, reason in entries:
        item = placement.values.add().struct_value.fields
        item["index"].number_value = index
        item["cluster"].string_value = cluster
        item["ready"].bool_value = ok
        if reason:
            item["reason"].string_value = reason
    return placement


# ---- displaced replicas: the replacement-duration metric ---------------------------


@dataclass(slots=True)
class _Displaced:
    """One ``status.displaced[]`` record: a replica displaced from its cluster at ``at``.

    ``replacement`` is the index of the replica placed in its stead (None until one is
    placed) and ``to_cluster`` that replica's cluster.
    """

    index: int
    from_cluster: str
    at: str
    since: datetime.datetime
    replacement: int | None = None
    to_cluster: str = ""

    def to_status(self) -> dict[str, Any]:
        row: dict[str, Any] = {"index": self.index, "fromCluster": self.from_cluster, "at": self.at}
        if self.replacement is not None:
            row["replacement"] = self.replacement
            row["toCluster"] = self.to_cluster
        return row


def _displaced_status(inputs: Inputs) -> ListValue | None:
    """The observed XR's ``status.displaced`` (one field lookup), or None; only its last
    :data:`MAX_DISPLACED` records (the newest: what the function keeps when it writes
    it). A longer list is not the function's (a tenant may write its XR's status,
    review 20b F4): the records before those are ignored, so reading status costs the
    same whatever was written there."""
    v = structs.fields_of(inputs.xr, "status").get(DISPLACED)
    if v is None or v.WhichOneof("kind") != "list_value":
        return None
    if len(v.list_value.values) <= MAX_DISPLACED:
        return v.list_value
    newest = ListValue()
    newest.values.extend(v.list_value.values[-MAX_DISPLACED:])
    return newest


def _carry_displaced(inputs: Inputs, out: Outcome) -> None:
    """Keep ``status.displaced`` as it is in a call that does not place replicas.

    Crossplane applies the XR status a function returns, so a record left out would be
    lost, and with it the start of the replacement it measures.
    """
    prev = _displaced_status(inputs)
    if prev is not None and prev.values:
        out.status[DISPLACED] = prev


def _whole(v: object) -> TypeGuard[float]:
    """Whether ``v`` (a Struct number, a double) is a whole number >= 0."""
    return is_whole(v) and v >= 0


def _read_displaced(prev: ListValue | None) -> list[_Displaced]:
    """The well-formed records of ``status.displaced``; a malformed one is skipped."""
    out: list[_Displaced] = []
    for item in structs.to_py(prev) if prev is not None else ():
        if not isinstance(item, dict):
            continue
        index, cluster, at = item.get("index"), item.get("fromCluster"), item.get("at")
        since = parse_time(at)
        if not _whole(index) or not isinstance(cluster, str) or since is None:
            continue
        rec = _Displaced(int(index), cluster, str(at), since)
        repl, to = item.get("replacement"), item.get("toCluster")
        if _whole(repl) and isinstance(to, str):
            rec.replacement, rec.to_cluster = int(repl), to
        out.append(rec)
    return out


def _track_displaced(
    inputs: Inputs,
    out: Outcome,
    placement: Placement,
    by_index: Mapping[int, _Observed],
    recorded: Sequence[_Displaced],
) -> None:
    """Record displaced replicas in ``status.displaced`` and observe each replacement once.

    Issue 7's ``modelplane_replica_replacement_duration_seconds{namespace,model}``: from a
    replica being displaced (removed by placement because its cluster stopped being
    eligible, or moved off a cluster that is not Ready or whose hydration Failed; never a
    scale-down; a replica that serves and moves make-before-break, ``Placement.moving``,
    from the call that keeps it beside its replacement) to its replacement serving (its
    ``ModelReady`` condition True, what ``status.replicas.ready`` counts). The function
    is stateless, so the start is written in status (``at``, ``inputs.now``) in the call
    that displaces the replica, and the sample is observed in the call that removes the
    record (see ``function.ops.metrics``).

    Per record, oldest first:

    - a replica placed new in this call (lowest index first) becomes its replacement
      when it has none; a replacement that is no longer placed on the cluster recorded
      is forgotten, and the next new replica takes its place;
    - when its replacement is observed serving: observe ``now - at``, drop the record;
    - without a replacement while every wanted replica is placed (scaled down since,
      or the displaced replica was one too many), the fleet is not short: drop it
      without a sample.

    ``recorded``: the records of the observed ``status.displaced``
    (:func:`_read_displaced`, read once per call by the caller); they are copied, not
    changed. At most :data:`MAX_DISPLACED` records are kept (the newest). Cost:
    O(records) plus, only while a record exists, one pass over the placed replicas.
    """
    records = [replace(d) for d in recorded]  # the caller's stay as read
    now = format_time(inputs.now)
    since = parse_time(now) or inputs.now  # what later calls read back from ``at``
    known = {(d.index, d.from_cluster) for d in records}
    # A replica moving make-before-break is displaced from the call that places its
    # replacement (it is removed once that serves: the record is already there).
    moves = [(m.index, m.cluster) for m in placement.moving]
    moves += [(r.index, r.cluster) for r in placement.removed if not r.scaled_down]
    for index, cluster in moves:
        if (index, cluster) not in known:
            known.add((index, cluster))
            records.append(_Displaced(index, cluster, now, since))
    records.sort(key=lambda d: (d.since, d.index, d.from_cluster))
    placed = {p.index: p for p in placement.replicas}
    taken = _confirm_replacements(records, placed)
    fresh = iter([p for p in placement.replicas if not p.existing and p.index not in taken])
    keep: list[_Displaced] = []
    for rec in records:
        if rec.replacement is None:
            nxt = next(fresh, None)
            if nxt is not None:
                rec.replacement, rec.to_cluster = nxt.index, nxt.cluster
            elif placement.reason is None:
                continue  # nothing is short: no replacement to wait for
        elif _serves(rec, placed, by_index):
            out.observe(
                REPLACEMENT_METRIC,
                {"namespace": inputs.namespace, "model": inputs.name},
                elapsed(rec.since, inputs.now),
            )
            continue
        keep.append(rec)
    if keep:
        out.status[DISPLACED] = [rec.to_status() for rec in keep[-MAX_DISPLACED:]]


def _confirm_replacements(records: list[_Displaced], placed: Mapping[int, Placed]) -> set[int]:
    """Forget a recorded replacement no longer placed on the cluster recorded (or taken
    by an older record); returns the replacements still held."""
    taken: set[int] = set()
    for rec in records:
        if rec.replacement is None:
            continue
        p = placed.get(rec.replacement)
        if p is None or p.cluster != rec.to_cluster or rec.replacement in taken:
            rec.replacement, rec.to_cluster = None, ""
        else:
            taken.add(rec.replacement)
    return taken


def _serves(
    rec: _Displaced, placed: Mapping[int, Placed], by_index: Mapping[int, _Observed]
) -> bool:
    """The record's replacement existed before this call and is observed serving on the
    cluster recorded."""
    assert rec.replacement is not None
    if not placed[rec.replacement].existing:
        return False
    view = by_index.get(rec.replacement)
    return view is not None and view.cluster == rec.to_cluster and view.state[0]
