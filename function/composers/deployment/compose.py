"""The ModelDeployment composer: requirements, placement, children, conditions.

:func:`compose` reads as its steps: parse, ask for the fleet lists, read the observed
replicas, wait for the lists (or stop on a missing cache), place with the capacity known
so far, then write children, conditions and status. A step that cannot go on returns
the finished :class:`Outcome` (every existing child kept exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, replace
from dataclasses import field as dc_field
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.modelcache import cluster_selector
from function.api.modelreplica import REASON_HYDRATION_FAILED
from function.composers.deployment import capacity
from function.composers.deployment.children import (
    Slot,
    _keep_all,
    _observed_replicas,
    _replica_body,
    _replica_size,
    _template_key,
    _usage,
)
from function.composers.deployment.fleet import (
    _Fleet,
    _Footprint,
    _Observed,
    _Retained,
)
from function.composers.deployment.spec import (
    Parsed,
    _compiled,
    _parse,
    _selector_fields,
)
from function.composers.deployment.status import (
    _carry_displaced,
    _Displaced,
    _displaced_status,
    _read_displaced,
    _status_from,
    _track_displaced,
)
from function.composers.deployment.terms import (
    CACHE_IDENTITIES,
    CACHE_NOT_FOUND,
    CACHE_ROLLOUT,
    HELD_USAGE_PREFIX,
    INVALID_DEVICE_SELECTOR,
    MAX_DISPLACED,
    MAX_NEXT_CLUSTERS,
    MIN_NEXT_CLUSTERS,
    MOVES_DEFERRED,
    NEXT_CLUSTERS,
    READY_COND,
    REPLICA_PREFIX,
    REQ_CACHE,
    REQ_CLUSTERS,
    REQ_HYDRATIONS,
    SCHEDULED,
    SERVING_PREVIOUS_IDENTITY,
    UNKNOWN_REPLICA,
    USAGE_KEY,
)
from function.composers.modelcache import retained_clusters
from function.core import structs
from function.core.errors import SpecError, quoted
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.numbers import ascii_digits
from function.core.outcome import (
    MAX_RESPONSE_BYTES,
    Outcome,
    Result,
    refuse_copies,
    result_bytes,
)
from function.naming import (
    LABEL_CACHE,
    label_value,
)
from function.scheduling.devices import (
    SelectorEvaluationError,
    note_paths,
)
from function.scheduling.placement import (
    Engine,
    Existing,
    Placement,
    Request,
    next_clusters,
    place,
)
from function.scheduling.placement.report import MAX_NAMED
from function.scheduling.selectors import LabelSelector


@dataclass(frozen=True)
class _Call:
    """What the steps of one call share.

    Attributes:
        replicas: ``spec.replicas``.
        rows: Status rows of the observed replicas (used when nothing is placed).
        cache: The ModelCache's name, or None.
        ahead: Clusters whose capacity is asked for up front; ``fleet_ahead``: whether
            the fleet-wide fallback is (:func:`capacity.upfront`).
        placed: Observed replicas that have an index and a cluster.
    """

    inputs: Inputs
    out: Outcome
    replicas: int
    rows: list[Any]
    cache: str | None
    ahead: frozenset[str]
    fleet_ahead: bool
    placed: list[_Observed]
    unknown: str = ""
    """Observed ModelReplicas the function cannot account for (:func:`_unknown_replicas`)."""
    displaced: tuple[_Displaced, ...] = ()
    """The well-formed records of the observed ``status.displaced``, read once per call
    (:func:`~function.composers.deployment.status._read_displaced`; at most
    :data:`MAX_DISPLACED` as written). Shared by every placement of the call: never
    changed (:func:`~function.composers.deployment.status._track_displaced` works on
    copies)."""
    unsaid: list[Result] = dc_field(default_factory=list)
    """The Warnings this call leaves out because an earlier call emitted them (a move
    that started, the deferred moves, a replica that cannot move): :func:`_fit_surge`
    counts them as if sent, so the surge does not depend on what was said before (the
    same in the call that starts the moves and in the next: a fixed point)."""

    @property
    def own_clusters(self) -> frozenset[str]:
        return frozenset(v.cluster for v in self.placed)

    def require_upfront(self) -> None:
        """Ask for the up-front capacity only (a call that places nothing)."""
        capacity.require(self.out, self.ahead, self.fleet_ahead)


@dataclass(frozen=True)
class _Lists:
    """The resolved fleet lists: clusters, and with a cache its footprint, the clusters
    its status retains and its ``spec.clusterSelector`` (None when invalid)."""

    clusters: Resolved
    footprint: _Footprint | None = None
    retained: frozenset[str] = frozenset()
    cache_selector: LabelSelector | None = None


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelDeployment (see the package docstring).

    Requirements: the fleet lists (``clusters``; with a cache ``cache`` and
    ``hydrations``) and the ModelReplicas of the clusters whose capacity placement
    reads (:mod:`function.composers.deployment.capacity`). Nothing is placed or removed
    in a call where any of them, or the capacity of a cluster placement read, is not
    resolved.

    Raises:
        SpecError: for an invalid spec (the runner returns a fatal result naming the field).
    """
    out = Outcome()
    parsed = _parse(inputs)
    spec = parsed.spec
    ts = spec.template.spec
    cache = ts.modelCacheRef.name if ts.modelCacheRef else None
    _require_lists(inputs, out, parsed.selector, cache)
    call = _observe(inputs, out, spec.replicas, cache)
    if call.unknown:
        call.require_upfront()
        return _frozen(call, UNKNOWN_REPLICA, call.unknown)

    engines, bad, paths = _compiled(parsed.key)
    note_paths(paths)  # compiled in an earlier call: a deadline message still names them
    if bad:
        call.require_upfront()
        return _invalid_selector(call, "; ".join(bad[:3]))
    lists = _resolve_lists(call)
    if isinstance(lists, Outcome):
        return lists
    room = _Room.of(inputs, spec.replicas)
    placed = _placed(call, parsed, engines, lists, room)
    if isinstance(placed, Outcome):
        return placed
    if room.surge is None or placed <= spec.replicas:
        return out  # nothing composed beside the replicas it replaces: nothing to measure

    def again(surge: int) -> Outcome | _Call:
        fresh = replace(call, out=Outcome(), unsaid=[])
        _require_lists(inputs, fresh.out, parsed.selector, cache)
        got = _placed(fresh, parsed, engines, lists, room.at(surge))
        return got if isinstance(got, Outcome) else fresh

    return _fit_surge(call, room, again)


def _placed(
    call: _Call, parsed: Parsed, engines: tuple[Engine, ...], lists: _Lists, room: _Room
) -> Outcome | int:
    """Place with ``room.surge`` and write the children, conditions and status into
    ``call.out``; returns how many ModelReplicas it composes, or the outcome of a call
    that places nothing (capacity not resolved, a selector failing).

    Raises:
        SpecError: ``spec.replicas`` alone does not fit (:func:`_refuse_oversized`).
    """
    replicas = parsed.spec.replicas
    request = _request(call, parsed, engines, lists, room.surge)
    placement = _place(call, request, parsed.raw_engines)
    if isinstance(placement, Outcome):
        return placement
    _refuse_oversized(call.inputs, len(placement.replicas), replicas, room)
    nxt = _next_clusters(request, placement, replicas)
    rows, serving = _children(call, placement, lists.footprint)
    _report(call, placement, rows, room)
    if serving is not None:
        _rollout_status(call.out, serving)
        held = set(placement.held)
        _held_report(call, [s for s in serving if s.replica in held])
    if nxt:
        call.out.status[NEXT_CLUSTERS] = nxt
    return len(placement.replicas)


_INTERPOLATIONS = 3
"""Steps of :func:`_fit_surge` that interpolate the response's size before it halves the
range instead (the size is close to linear in the surge: a few steps at most)."""


def _fit_surge(call: _Call, room: _Room, again: Callable[[int], Outcome | _Call]) -> Outcome:
    """The outcome of the largest surge whose response fits, measured.

    ``call.out`` composed ``room.surge`` replacements beside the replicas they replace
    (an upper bound: copies of ``spec.template`` alone, :class:`_Room`). When its
    response (:func:`_measured`: every body as built, with its index, cluster, labels
    and pools, the status rows, conditions and results) fits
    :data:`MAX_RESPONSE_BYTES`, it is the answer. Else the call places again
    (``again(surge)``: a fresh call, or the outcome of one that places nothing,
    returned as it is) with fewer, searching the largest surge that fits: the size is
    interpolated from the sizes measured, then the range halved; it ends with surge
    ``s`` fitting and ``s + 1`` measured over the limit, so the ``at most N fit`` the
    condition states (:func:`_deferred`: ``room.at(s).most``) is what is composed and
    measured. Only a failover past the limit takes this path (the steady one returns
    before measuring). Deterministic: the same inputs give the same sizes, the same
    surge, the same response.

    Raises:
        SpecError: at ``spec.replicas`` when even surge 0 (every move deferred) does
            not fit: ``spec.replicas`` alone does not, with the measured size
            (:func:`_refuse_measured`).
    """
    size = _measured(call)
    if size <= MAX_RESPONSE_BYTES:
        return call.out
    assert room.surge is not None
    replicas = room.replicas
    hi, hi_size = room.surge, size
    lo, lo_size, lo_out = -1, 0, call.out
    steps = 0
    while hi - lo > 1:
        if lo < 0:
            # From one measure: the mean bytes per ModelReplica, the rest of the
            # response included (more than one costs, so fewer than fit).
            per = max(1, hi_size // (replicas + hi))
            s = hi - -(-(hi_size - MAX_RESPONSE_BYTES) // per)
        elif steps < _INTERPOLATIONS:
            s = lo + (MAX_RESPONSE_BYTES - lo_size) * (hi - lo) // (hi_size - lo_size)
        else:
            s = (lo + hi) // 2
        s = max(lo + 1, min(hi - 1, s))
        steps += 1
        got = again(s)
        if isinstance(got, Outcome):
            return got  # places nothing this call (it keeps every child as it is)
        size = _measured(got)
        if size > MAX_RESPONSE_BYTES:
            hi, hi_size = s, size
        else:
            lo, lo_size, lo_out = s, size, got.out
    if lo < 0:
        _refuse_measured(call.inputs, replicas, hi_size - call.inputs.frame_bytes)
    return lo_out


def _measured(call: _Call) -> int:
    """The size of ``call.out``'s response, bytes at most
    (:meth:`~function.core.outcome.Outcome.response_bytes`), with the Warnings it leaves
    out because an earlier call emitted them (``call.unsaid``) counted as sent."""
    size = call.out.response_bytes(call.inputs.frame_bytes)
    return size + sum(result_bytes(r) for r in call.unsaid)


class _Room(NamedTuple):
    """How many ModelReplicas fit in the response Crossplane accepts.

    Attributes:
        each: A lower bound of one ModelReplica's serialized size, bytes (a copy of
            ``spec.template``: :func:`function.composers.deployment.children._replica_size`).
        fit: How many such lower bounds fit in :data:`MAX_RESPONSE_BYTES` (the
            refusal's bound before anything is built: :func:`_refuse_oversized`).
        replicas: ``spec.replicas``.
        surge: ``Request.surge``: how many replicas may be kept beside their
            replacements, or None when ``spec.replicas`` alone does not fit (then the
            call is refused). :meth:`of` gives ``fit - spec.replicas``, an upper bound;
            :func:`_fit_surge` lowers it (:meth:`at`) to what the measured response
            holds.
    """

    each: int
    fit: int
    replicas: int
    surge: int | None

    @classmethod
    def of(cls, inputs: Inputs, replicas: int) -> _Room:
        each = _replica_size(inputs.namespace, inputs.name, _template_key(inputs))
        fit = MAX_RESPONSE_BYTES // each
        return cls(each, fit, replicas, fit - replicas if replicas <= fit else None)

    @property
    def most(self) -> int:
        """How many ModelReplicas this placement composes at most: ``spec.replicas +
        surge`` (more do not fit: by the lower bound while the surge is :meth:`of`'s,
        ``fit``; else measured by :func:`_fit_surge`). ``fit`` when ``spec.replicas``
        alone does not fit (no surge: the call is refused, nothing is deferred)."""
        return self.fit if self.surge is None else self.replicas + self.surge

    def at(self, surge: int) -> _Room:
        """This room with ``surge`` (at most ``self.surge``) instead."""
        assert self.surge is not None and 0 <= surge <= self.surge
        return self._replace(surge=surge)


def _refuse_oversized(inputs: Inputs, placed: int, replicas: int, room: _Room) -> None:
    """Refuse, before any ModelReplica is built, a placement whose ``placed`` bodies (each
    a copy of ``spec.template``) would pass Crossplane's 4 MiB response.

    Only when ``spec.replicas`` alone does not fit (``room.surge`` is None): otherwise
    placement composes at most ``room.most`` (``Request.surge`` defers the moves past it),
    so a deployment that fits in steady state still fails over, in batches. ``placed``
    counts the replacements of replicas that move make-before-break too (composed beside
    the replicas they replace); the message says how many.

    Raises:
        SpecError: at ``spec.replicas``, naming the part of ``spec.template`` that holds
            most of its bytes (:func:`function.core.structs.heaviest_part`; review 16b
            F1: :func:`function.core.outcome.refuse_copies`).
    """
    each, fit = room.each, room.fit
    if placed * each <= MAX_RESPONSE_BYTES:
        return
    moving = placed - replicas if placed > replicas else 0
    what = f"ModelReplicas to compose (spec.replicas: {replicas}"
    what += f", and {moving} replacements of replicas moving make-before-break" if moving else ""
    what += "), each a copy of spec.template"
    shrink = _shrink(inputs)
    if fit == 0:
        fix = f"one copy alone is over the limit: {shrink}"
    else:
        fix = f"lower spec.replicas to at most {fit}, or {shrink}"
    refuse_copies("spec.replicas", placed, each, what, fix)


def _shrink(inputs: Inputs) -> str:
    """The advice to shrink ``spec.template``, naming its heaviest part."""
    path, size = structs.heaviest_part(Struct.FromString(_template_key(inputs)), "spec.template")
    heaviest = f"{path} ({size / 1024:.1f} KiB)" if path != "spec.template" else ""
    shrink = "shrink spec.template" + (f", whose heaviest part is {heaviest}" if heaviest else "")
    if ".env[" in path:
        shrink += (
            "; a large env value belongs in a ConfigMap mounted as a volume"
            " (spec.template volumes and volumeMounts)"
        )
    return shrink


def _refuse_measured(inputs: Inputs, replicas: int, size: int) -> None:
    """Refuse a call whose ``replicas`` ModelReplicas, every move deferred, make a
    response of ``size`` bytes (measured, what the request holds apart) past
    :data:`MAX_RESPONSE_BYTES`: ``spec.replicas`` alone does not fit, although copies of
    ``spec.template`` alone would (their cluster names, labels and status rows make the
    difference).

    The advice's bound, ``replicas * limit / size``, is more than fit: the response is
    its replicas' bytes and a rest that does not shrink with them.

    Raises:
        SpecError: at ``spec.replicas``, always.
    """
    limit = MAX_RESPONSE_BYTES - inputs.frame_bytes
    replicas = max(1, replicas)
    most = replicas * limit // size
    raise SpecError(
        "spec.replicas",
        f"{replicas} ModelReplicas (spec.replicas), each a copy of spec.template with its "
        f"cluster, labels and status rows, about {size / replicas / 1024:.1f} KiB, make a "
        f"response of {size:,} bytes, over the {MAX_RESPONSE_BYTES:,} (4 MiB) Crossplane "
        "accepts (refused before it was sent; nothing was changed): lower "
        f"spec.replicas to at most {most}, or {_shrink(inputs)}",
    )


# ---- what to read --------------------------------------------------------------


def _require_lists(
    inputs: Inputs, out: Outcome, selector: LabelSelector, cache: str | None
) -> None:
    """Ask for the InferenceClusters the selector's equality part matches and, with a
    cache, the ModelCache and its ModelCacheHydrations."""
    ns = inputs.namespace
    out.require(
        REQ_CLUSTERS, API_VERSION, "InferenceCluster", match_labels=selector.requirement_labels()
    )
    if cache:
        out.require(REQ_CACHE, API_VERSION, "ModelCache", match_name=cache, namespace=ns)
        out.require(
            REQ_HYDRATIONS,
            API_VERSION,
            "ModelCacheHydration",
            match_labels={LABEL_CACHE: label_value(cache)},
            namespace=ns,
        )


def _observe(inputs: Inputs, out: Outcome, replicas: int, cache: str | None) -> _Call:
    """Read the observed replicas and what capacity to ask for before placing.

    A replica's index is its composition-resource name's (``replica-<index>``, the one
    the function writes), not its ``spec.index``: an edited ``spec.index`` is written
    back, and two replicas never share an index. One under another name, or without
    ``spec.clusterName``, is named by :func:`_unknown_replicas`.
    """
    observed = []
    unknown = []
    for key, obj in _observed_replicas(inputs).items():
        v = _Observed.of(obj)
        v.index = _index_of(key)
        observed.append(v)
        if v.index is None or not v.cluster:
            unknown.append((key, v))
    rows = [(v.index or 0, v.cluster, v.obj, None) for v in observed]
    placed = [v for v in observed if v.cluster and v.index is not None]
    own_clusters = frozenset(v.cluster for v in placed)
    ahead, fleet_ahead = capacity.upfront(inputs, own_clusters, len(placed), replicas)
    return _Call(
        inputs,
        out,
        replicas,
        rows,
        cache,
        ahead,
        fleet_ahead,
        placed,
        _unknown_replicas(unknown),
        tuple(_read_displaced(_displaced_status(inputs))),
    )


def _index_of(key: str) -> int | None:
    """The index in a composition-resource name ``replica-<index>`` as the function writes
    it (no sign, no leading zero), else None."""
    digits = key.removeprefix(REPLICA_PREFIX)
    if digits == key or not ascii_digits(digits) or len(digits) > 9 or str(int(digits)) != digits:
        return None
    return int(digits)


def _unknown_replicas(unknown: list[tuple[str, _Observed]]) -> str:
    """What is wrong with the observed ModelReplicas the function cannot account for
    (``(key, view)``: a composition-resource name it never writes, no
    ``spec.clusterName``), or ''."""
    bad = []
    for key, v in unknown:
        name = structs.get_str(v.obj, "metadata", "name") or "?"
        if v.index is None:
            bad.append(f"ModelReplica {name} is composed as {quoted(key)}, not replica-<index>")
        else:
            bad.append(f"ModelReplica {name} ({key}) has no spec.clusterName")
    if not bad:
        return ""
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return (
        f"{'; '.join(bad[:3])}{more}: nothing is placed or removed until it is corrected "
        "(restore the field, or delete that ModelReplica to have it composed again)"
    )


def _resolve_lists(call: _Call) -> _Lists | Outcome:
    """The fleet lists, all resolved before anything is placed or removed; else the
    outcome that waits for them (or reports a missing cache)."""
    inputs, cache = call.inputs, call.cache
    names = [REQ_CLUSTERS] + ([REQ_CACHE, REQ_HYDRATIONS] if cache else [])
    got = {n: inputs.required(n) for n in names}
    pending = [n for n, v in got.items() if v is UNRESOLVED]
    if pending:
        call.require_upfront()
        return _pending(call, ", ".join(pending))
    clusters = got[REQ_CLUSTERS]
    assert isinstance(clusters, Resolved)
    if not cache:
        return _Lists(clusters)
    cache_r, hyd_r = got[REQ_CACHE], got[REQ_HYDRATIONS]
    assert isinstance(cache_r, Resolved) and isinstance(hyd_r, Resolved)
    if not cache_r.items:
        call.require_upfront()
        return _cache_not_found(call)
    mc = cache_r.items[0]
    return _Lists(
        clusters,
        _Footprint(hyd_r.items, inputs.namespace, cache, hyd_r.versions),
        retained_clusters(mc),
        cluster_selector(mc, cache_r.versions[0]) if cache_r.versions else cluster_selector(mc),
    )


# ---- placing --------------------------------------------------------------------


def _request(
    call: _Call,
    parsed: Parsed,
    engines: tuple[Engine, ...],
    lists: _Lists,
    surge: int | None,
) -> Request:
    """The placement request: the spec, the fleet lists, the existing replicas and the
    surge the response leaves room for (:class:`_Room`)."""
    displaced = frozenset(d.index for d in call.displaced)
    existing = []
    for v in call.placed:
        assert v.index is not None
        # Serving, for make-before-break: ModelReady, or pods that answer while the
        # workload rolls onto another identity (or its roll stalled: ModelReady=False,
        # the old pods serve). A replica whose hydration Failed after it served keeps
        # its pods (the replica composer keeps its workload exactly, its status lists no
        # engines) but reports ModelReady=False: one moving (recorded displaced while it
        # served) still serves until its replacement does.
        serves = (
            v.state[0]
            or v.answers
            or (v.index in displaced and v.state[1] == REASON_HYDRATION_FAILED)
        )
        existing.append(
            Existing(
                v.index,
                v.cluster,
                v.pools,
                serves,
                v.identity,
                v.serves,
                v.reads_root,
                v.state[0],
            )
        )
    selector = parsed.selector
    fleet = _Fleet(lists.clusters.items, lists.clusters.versions, selector.match_labels)
    retained: Container[str] = lists.retained
    if lists.footprint is not None and lists.cache_selector is not None:
        # A cluster that left the cache's selector is retained before its shard says so.
        retained = _Retained(lists.retained, lists.cache_selector, fleet, lists.footprint)
    return Request(
        replicas=parsed.spec.replicas,
        engines=engines,
        selector=selector,
        tolerations=parsed.tolerations,
        fleet=fleet,
        existing=tuple(existing),
        footprint=lists.footprint,
        retained=retained,
        cache=call.cache,
        identities=lists.footprint,
        displaced=displaced,
        surge=surge,
    )


def _place(call: _Call, request: Request, raw_engines: list[Any]) -> Placement | Outcome:
    """Placement with the capacity known so far, asking for the capacity it read; or the
    outcome that waits for capacity not resolved yet, or reports a failing selector."""
    inputs = call.inputs
    known = capacity.Usage(inputs.namespace, inputs.name, lookup=capacity.per_cluster(inputs))
    try:
        placement = _place_with_capacity(call, request, known)
    except SelectorEvaluationError as err:
        # Like a selector that does not compile: nothing placed, nothing removed.
        call.require_upfront()
        fields = _selector_fields(raw_engines).get(err.expression)
        msg = f"{fields[0] if fields else 'spec.template.spec.engines'}: {err}"
        return _invalid_selector(call, msg)
    if placement is None:
        unknown = sorted(known.unknown)
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        return _pending(call, f"ModelReplicas on {', '.join(unknown[:5])}{more} (their capacity)")
    return placement


def _place_with_capacity(call: _Call, request: Request, known: capacity.Usage) -> Placement | None:
    """Placement with the per-cluster usage resolved so far (``known``), or, when the
    fleet-wide fallback is resolved, with every replica of the fleet (capacity module).
    None when placement read a cluster whose usage is not resolved yet.

    Raises:
        SelectorEvaluationError: from placement.
    """
    inputs, out, ahead = call.inputs, call.out, call.ahead
    fleet_items = capacity.fleet_wide(inputs)
    if fleet_items is not None:
        exact = capacity.Usage(inputs.namespace, inputs.name, fleet=fleet_items)
        placement = place(replace(request, used=exact))
        reads = ahead | exact.read
        # Keep the fallback while the exact walk reads beyond the up-front clusters
        # (without it the per-cluster walk would expand again).
        capacity.require(
            out, reads, call.fleet_ahead or not exact.read <= ahead or capacity.too_many(reads)
        )
        return placement
    placement = place(replace(request, used=known))
    reads = ahead | known.read
    # A second expansion (candidates read beyond the up-front clusters are known and
    # the walk still reads unknown ones) asks for the fleet: bounded calls.
    expanded = bool(known.read - known.unknown - ahead - call.own_clusters)
    capacity.require(
        out,
        reads,
        call.fleet_ahead or (bool(known.unknown) and expanded) or capacity.too_many(reads),
    )
    return None if known.unknown else placement


def _next_clusters(request: Request, placement: Placement, replicas: int) -> list[str]:
    """``status.nextClusters``: where the next replicas would go (a hint only)."""
    try:
        k = min(MAX_NEXT_CLUSTERS, max(MIN_NEXT_CLUSTERS, replicas))
        return next_clusters(request, placement, k)
    except SelectorEvaluationError:
        return []  # a hint only: placement reports the selector when it reaches that cluster


# ---- writing the outcome --------------------------------------------------------


class _Serving(NamedTuple):
    """One placed replica's source identities: the one it serves now (its observed spec;
    "" for a new replica or one of the release before side-by-side revisions), the one
    it is given, the cluster's current one, and, when the cluster's hydration Failed,
    the identity it failed for and its message."""

    replica: int
    cluster: str
    serves: str
    given: str
    current: str
    failed: tuple[str, str] = ("", "")
    existing: bool = False
    held_on: str = ""  # the ModelCache it is held on (the spec references another)
    # The ModelCache its pods may still read while they roll off it: the one it leaves
    # in this call, or the one it left before while its roll is not done.
    leaving: str = ""


def _identity(
    footprint: _Footprint | None,
    replica: int,
    cluster: str,
    view: _Observed | None,
    cache: str | None = None,
) -> _Serving:
    """Which source identity the replica on ``cluster`` is given (side-by-side revisions).

    The cluster's hydration Ready for its identity: that one (a replica on an older one
    moves; its workload rolls make-before-break). Not Ready yet (a new revision
    hydrating beside the old one, or failed): the replica keeps the identity it was
    started on; a new replica gets the hydration's identity and waits for it. An
    existing replica without one (the release before side-by-side revisions: its
    workload reads the PVC root) is given the current identity only once the
    hydration stores it in its own directory (``status.stored``); until then its spec
    stays as it is.

    A replica composed from another ModelCache than ``cache`` (the spec's
    ``modelCacheRef`` changed) keeps that cache's name and identity, and serves from it,
    until ``cache``'s hydration is Ready on its cluster; then it is given that
    hydration's identity (its workload rolls make-before-break onto the new cache's
    PVC) and is marked as leaving the old cache (``leaving``: the label
    ``api.modeldeployment.LABEL_LEAVING_CACHE``, by which the old cache's hydration and
    shard keep what its old pods read) until its roll is done. An identity is never
    given under another cache's name. A replica leaves one cache at a time: one still
    rolling off a cache is held where it is until that roll is done, unless ``cache``
    is the one it is leaving (going back: its old pods read it).

    Without ``cache`` (the reference removed), a replica composed from a ModelCache
    rolls off it at once, marked as leaving it likewise; one already leaving a cache
    keeps that mark.
    """
    named = view.identity if view is not None else ""
    leaving = view.leaving if view is not None else ""
    if not cache and view is not None and view.cache and not leaving:
        # The reference removed: its pods roll off that cache now, as on a switch.
        leaving = view.cache
    if footprint is not None and view is not None and view.cache and cache and view.cache != cache:
        current, ready = footprint.identity(cluster)
        if ready and leaving in ("", cache):
            return _Serving(
                replica, cluster, named, current, current, existing=True, leaving=view.cache
            )
        failure = footprint.failure(cluster)
        return _Serving(replica, cluster, named, named, current, failure, True, view.cache, leaving)
    # What it serves: its spec's identity, else the one its workload serves (its
    # status.hydration.identity); only the spec's decides what it is given.
    serves = named or (view.serves if view is not None else "")
    if footprint is None:
        return _Serving(replica, cluster, serves, "", "", leaving=leaving)
    current, ready = footprint.identity(cluster)
    if named:
        given = current if ready else named
    elif view is not None:
        given = current if current and current in footprint.stored(cluster) else ""
    else:
        given = current
    failure = footprint.failure(cluster)
    return _Serving(
        replica, cluster, serves, given, current, failure, view is not None, leaving=leaving
    )


def _children(
    call: _Call, placement: Placement, footprint: _Footprint | None
) -> tuple[list[Any], list[_Serving] | None]:
    """A ModelReplica per placed replica, an event per removed one, the cache's Usage;
    returns the status rows of the placed replicas and, with a cache, the identities
    each replica serves and is given."""
    inputs, out = call.inputs, call.out
    ns, name = inputs.namespace, inputs.name
    by_index = {v.index: v for v in call.placed}
    template = _template_key(inputs)
    rows = []
    serving: list[_Serving] | None = [] if call.cache else None
    for p in placement.replicas:
        view = by_index.get(p.index) if p.existing else None
        pools = tuple(sorted(p.pools.items()))
        ident = _identity(footprint, p.index, p.cluster, view, call.cache)
        if serving is not None:
            serving.append(ident)
        slot = Slot(p.index, p.cluster, pools, ident.given, ident.held_on, ident.leaving)
        body = _replica_body(ns, name, template, slot)
        out.add(f"{REPLICA_PREFIX}{p.index}", body, ready=view is not None and view.state[0])
        rows.append((p.index, p.cluster, view.obj if view is not None else None, p.hydration))
    for r in placement.removed:
        msg = f"removed replica {r.index} from {r.cluster}: {r.why}"
        if r.why == "scaled down":
            out.normal(msg, "ReplicaRemoved")
        else:
            out.warning(msg, "ReplicaRemoved")
    # status.displaced keeps MAX_DISPLACED records: with that many, a move without one
    # may be under way already (unrecorded), so it is not announced again on every
    # reconcile (review 19e); the moves past the records are named by ReplicasReady.
    full = len(call.displaced) >= MAX_DISPLACED
    for mv in placement.moving:
        moves = Result(
            "Warning",
            f"replica {mv.index} on {mv.cluster} moves ({mv.why}): it keeps serving until "
            "a replacement serves (make-before-break)",
            "ReplicaMoving",
        )
        _say(call, moves, not mv.starts or full)  # when the move starts, not per reconcile
    _warn_stuck(call, placement)
    # A cache replicas are still held on keeps a Usage until none is, and until every
    # replica is ready after a switch (or the reference's removal): a replica given
    # another cache, or none, rolls make-before-break, its old pods reading the old
    # cache meanwhile.
    held = {c for s in serving or () for c in (s.held_on, s.leaving) if c}
    if not call.cache:
        # They leave it in this call (or still roll off the one they left before).
        held |= {c for v in call.placed for c in (v.cache, v.leaving) if c}
    if not all(by_index[p.index].state[0] for p in placement.replicas if p.index in by_index):
        held |= set(_observed_usages(inputs).values())
    _usages(inputs, out, call.cache, held)
    return rows, serving


def _warn_stuck(call: _Call, placement: Placement) -> None:
    """One Warning per replica that should move but stays (no replacement fits), when
    the observed ``ReplicasScheduled`` message does not name it yet (once per change,
    not every reconcile; else it goes to ``call.unsaid``)."""
    if not placement.stuck:
        return
    prev = structs.get(structs.conditions(call.inputs.xr).get(SCHEDULED), "message")
    said = prev if isinstance(prev, str) else ""
    for st in placement.stuck[:MAX_NAMED]:
        warning = Result(
            "Warning",
            f"replica {st.index} on {st.cluster} should move ({st.why}) but no "
            "replacement fits: it stays, and moves once one does",
            "ReplicaNotMoved",
        )
        _say(call, warning, f"replica {st.index} on {st.cluster} ({st.why})" in said)


def _say(call: _Call, warning: Result, said: bool) -> None:
    """Emit ``warning`` (a result: a Kubernetes event on the XR), unless an earlier call
    emitted it (``said``: once per change, not every reconcile); then it goes to
    ``call.unsaid``, which :func:`_measured` counts as sent (the surge does not depend
    on what was said before)."""
    (call.unsaid if said else call.out.results).append(warning)


def _observed_usages(inputs: Inputs) -> dict[str, str]:
    """The observed Usages of this deployment (``cache-usage``, ``cache-usage-held-*``):
    key to the ModelCache each protects."""
    out = {}
    for key in inputs.observed:
        if key == USAGE_KEY or key.startswith(HELD_USAGE_PREFIX):
            body = inputs.observed_body(key)
            cache = structs.get_str(body, "spec", "of", "resourceRef", "name")
            if cache:
                out[key] = cache
    return out


def _usages(inputs: Inputs, out: Outcome, cache: str | None, held: set[str]) -> None:
    """A Usage of the spec's ModelCache ``cache`` and of each cache in ``held``.

    A cache an observed Usage protects keeps that Usage, under its key, as it is:
    protection never passes from one composed resource to another, since Crossplane
    deletes what is no longer desired before it applies the rest (v2.4's
    ``FunctionComposer.Compose``: garbage collection, then apply), which would leave the
    cache unprotected meanwhile, and a Usage is never re-pointed. A cache without one
    gets ``cache-usage`` if it is the spec's and that key is free, else
    ``cache-usage-held-<cache>``. Any other Usage is dropped.

    A Usage's work is done once it exists: it is ready once observed (unspecified
    readiness would keep the XR unready forever; Crossplane counts only READY_TRUE).
    """
    protect = set(held) | ({cache} if cache else set())
    for key in [k for k in out.resources if k == USAGE_KEY or k.startswith(HELD_USAGE_PREFIX)]:
        del out.resources[key]  # kept by _keep_all: decided here
    keys: dict[str, str] = {}
    for key, of in sorted(_observed_usages(inputs).items()):
        if of in protect and of not in keys:
            keys[of] = key
    for of in sorted(protect - keys.keys()):
        # Free: not observed (an observed one protecting a cache no one needs any more
        # is dropped, never re-pointed; review 14d).
        free = of == cache and USAGE_KEY not in inputs.observed
        keys[of] = USAGE_KEY if free else f"{HELD_USAGE_PREFIX}{of}"
    for of, key in sorted(keys.items(), key=lambda kv: kv[1]):
        out.add(key, _usage(inputs.namespace, inputs.name, of, key), ready=key in inputs.observed)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _rollout_status(out: Outcome, serving: list[_Serving]) -> None:
    """``status.cacheIdentities`` (replicas per source identity they serve now; those
    of the release before side-by-side revisions, reading the PVC root, as one
    ``{pvcRoot: true}`` row) and, while any replica serves an identity other than its
    cluster's current one, ``status.cacheRollout``: what is served and where it is
    moving, for example ``2 replicas serve identity X; moving to Y as each cluster's
    hydration becomes Ready``; where the hydration Failed for the new identity, the
    clusters and that the replicas there keep serving the old one.
    """
    counts: dict[str, int] = {}
    root = 0
    for s in serving:
        if s.serves:
            counts[s.serves] = counts.get(s.serves, 0) + 1
        elif s.existing and not s.given:
            root += 1
    rows: list[dict[str, Any]] = [{"identity": i, "replicas": n} for i, n in sorted(counts.items())]
    if root:
        rows.append({"pvcRoot": True, "replicas": root})
    out.status[CACHE_IDENTITIES] = rows
    behind = [s for s in serving if s.serves and s.current and s.serves != s.current]
    legacy = [s for s in serving if s.existing and not s.serves and not s.given]
    parts = _behind_parts(behind) if behind else []
    if legacy:
        parts.append(
            f"{_plural(len(legacy), 'replica reads', 'replicas read')} the PVC root (the "
            "layout before side-by-side revisions); each moves to its identity's directory "
            "once its cluster's hydration stores it"
        )
        by_failed: dict[str, list[_Serving]] = {}
        for s in legacy:
            if s.failed[0]:
                by_failed.setdefault(s.failed[0], []).append(s)
        for ident, group in sorted(by_failed.items()):
            clusters = ", ".join(sorted({s.cluster for s in group}))
            n = _plural(len(group), "replica there keeps", "replicas there keep")
            parts.append(
                f"the hydration of identity {ident} Failed on {clusters}: {n} reading the PVC root"
            )
    if parts:
        out.status[CACHE_ROLLOUT] = "; ".join(parts)


def _behind_parts(behind: list[_Serving]) -> list[str]:
    """The ``cacheRollout`` sentences of replicas serving an identity other than their
    cluster's current one: what they serve, where they move, where the new one Failed."""
    olds: dict[str, int] = {}
    for s in behind:
        olds[s.serves] = olds.get(s.serves, 0) + 1
    parts = [
        "; ".join(
            f"{_plural(n, 'replica serves', 'replicas serve')} identity {i}"
            for i, n in sorted(olds.items())
        )
    ]
    failed = [s for s in behind if s.failed[0] == s.current]
    waiting = [s for s in behind if s not in failed]
    if waiting:
        targets = ", ".join(sorted({s.current for s in waiting}))
        msg = f"moving to {targets} as each cluster's hydration becomes Ready"
        moving = sorted({s.cluster for s in waiting if s.given and s.given != s.serves})
        if moving:
            msg += f" (rolling on {', '.join(moving)})"
        parts.append(msg)
    by_identity: dict[str, list[_Serving]] = {}
    for s in failed:
        by_identity.setdefault(s.current, []).append(s)
    for ident, group in sorted(by_identity.items()):
        clusters = ", ".join(sorted({s.cluster for s in group}))
        keep = ", ".join(sorted({s.serves for s in group}))
        n = _plural(len(group), "replica", "replicas")
        parts.append(
            f"the hydration of identity {ident} Failed on {clusters}: {n} there keep "
            f"serving identity {keep}"
        )
    return parts


def _held_report(call: _Call, held: list[_Serving]) -> None:
    """Replicas kept serving an earlier identity (or, of the release before side-by-side
    revisions, the PVC root) on a cluster whose hydration Failed for the new one
    (``Placement.held``): ``ReplicasReady`` (when True) says so with
    :data:`SERVING_PREVIOUS_IDENTITY`, naming the clusters and the identity that failed,
    and a Warning event is emitted when that message changes."""
    if not held:
        return
    out = call.out
    detail = "; ".join(
        f"replica {s.replica} on {s.cluster} keeps serving {_served(s)}: the hydration "
        f"of ModelCache {call.cache} Failed for identity {s.failed[0]}"
        + (f" ({s.failed[1]})" if s.failed[1] else "")
        for s in held[:5]
    )
    current = next((c for c in out.conditions if c.type == READY_COND), None)
    if current is None or current.status != "True":
        return
    msg = f"{current.message}; {detail}"
    out.condition(READY_COND, "True", SERVING_PREVIOUS_IDENTITY, msg)
    prev = structs.conditions(call.inputs.xr).get(READY_COND)
    if prev is None or structs.get_str(prev, "message") != msg:
        out.warning(detail, SERVING_PREVIOUS_IDENTITY)


def _served(s: _Serving) -> str:
    """What a held replica keeps serving: ``identity <id>``, or the PVC root."""
    if s.serves:
        return f"identity {s.serves}"
    return (
        "the PVC root (the layout before side-by-side revisions; the new layout never "
        "writes or prunes it)"
    )


def _report(call: _Call, placement: Placement, rows: list[Any], room: _Room) -> None:
    """``ReplicasScheduled``, the status rows and the displaced replicas."""
    inputs, out = call.inputs, call.out
    deferred = _deferred(placement, call.replicas, room)
    msg = f"{placement.message}; {deferred}" if deferred else placement.message
    if placement.reason is None:
        out.condition(SCHEDULED, "True", MOVES_DEFERRED if deferred else "Scheduled", msg)
    else:
        out.condition(SCHEDULED, "False", placement.reason, msg)
        out.requeue_after(inputs.settings.poll_seconds)
    if deferred:
        said = structs.get(structs.conditions(inputs.xr).get(SCHEDULED), "message")
        warning = Result("Warning", deferred, MOVES_DEFERRED)
        _say(call, warning, isinstance(said, str) and deferred in said)  # once per change
    done = _status_from(inputs, out, call.replicas, rows, call.cache, moving=placement.moving)
    if not done or placement.moving or placement.deferred:
        out.requeue_after(inputs.settings.poll_seconds)
    # Without a record or a move, tracking writes nothing (status.displaced is then
    # left out, as when its records are all malformed).
    if call.displaced or placement.moving or any(not r.scaled_down for r in placement.removed):
        by_index = {v.index: v for v in call.placed if v.index is not None}
        _track_displaced(inputs, out, placement, by_index, call.displaced)


def _deferred(placement: Placement, replicas: int, room: _Room) -> str:
    """What ``ReplicasScheduled`` says of the moves placement deferred for want of room
    in the response (``Placement.deferred``, bounded by ``room.surge``): how many, which
    (the first :data:`MAX_NAMED`), and the bound; '' when none is."""
    waits = placement.deferred
    if not waits:
        return ""
    parts = [f"replica {d.index} on {d.cluster} ({d.why})" for d in waits[:MAX_NAMED]]
    more = f" and {len(waits) - MAX_NAMED} more" if len(waits) > MAX_NAMED else ""
    surge = room.surge or 0
    bound = (
        f"each ModelReplica is a copy of spec.template (at least {room.each / 1024:.1f} KiB) "
        f"with its cluster, labels and status rows: at most {room.most} fit in the "
        f"{MAX_RESPONSE_BYTES / 1048576:g} MiB response Crossplane accepts and "
        f"spec.replicas is {replicas}"
    )
    if surge:
        then = (
            f"so {_plural(surge, 'replica moves', 'replicas move')} at a time, each beside "
            "its replacement; the next start as the replacements composed now serve (a "
            "smaller spec.template moves more at once)"
        )
    else:
        then = (
            "so no replacement fits beside the replica it replaces: shrink spec.template "
            "or lower spec.replicas to let them move"
        )
    return (
        f"{_plural(len(waits), 'move', 'moves')} deferred by the response size limit: "
        f"{', '.join(parts)}{more} stay where they are ({bound}, {then})"
    )


# ---- calls that place nothing ---------------------------------------------------


def _invalid_selector(call: _Call, msg: str) -> Outcome:
    """A device selector that does not compile or fails while evaluating: every
    existing child is kept exactly, ``ReplicasScheduled=False``,
    ``InvalidDeviceSelector`` with ``msg`` (the field and the error), and a warning."""
    return _frozen(call, INVALID_DEVICE_SELECTOR, msg)


def _frozen(call: _Call, reason: str, msg: str) -> Outcome:
    """Every existing child kept exactly, ``ReplicasScheduled=False`` with ``reason`` and
    ``msg``, and a warning."""
    inputs, out = call.inputs, call.out
    _keep_all(inputs, out)
    out.condition(SCHEDULED, "False", reason, msg)
    out.warning(msg, reason)
    return _hold(call, call.cache)


def _pending(call: _Call, what: str) -> Outcome:
    """A requirement is not resolved: keep every child exactly, say what is awaited."""
    _keep_all(call.inputs, call.out)
    call.out.condition(
        SCHEDULED,
        "Unknown",
        "ResolvingRequirements",
        f"waiting for Crossplane to resolve required resources: {what}",
    )
    return _hold(call, call.cache)


def _cache_not_found(call: _Call) -> Outcome:
    """The ModelCache does not exist: keep the replicas, drop the Usage, say so."""
    inputs, out = call.inputs, call.out
    _keep_all(inputs, out)
    # The replicas kept serve from the cache they name: it stays protected (review 13d:
    # a typo in modelCacheRef left the serving cache deletable), by the Usage that
    # protects it now (review 14b: moving it to another key left a gap).
    kept = {c for v in call.placed for c in (v.cache, v.leaving) if c and c != call.cache}
    _usages(inputs, out, None, kept)
    msg = (
        f"ModelCache {inputs.namespace}/{call.cache} (spec.template.spec.modelCacheRef) "
        f"does not exist; no replica is placed until it does"
    )
    out.condition(SCHEDULED, "False", CACHE_NOT_FOUND, msg)
    out.warning(msg, CACHE_NOT_FOUND)
    out.requeue_after(inputs.settings.poll_seconds)
    # ReplicasReady names the cache the kept replicas serve from, not the missing one
    # (review 19a F2); several: "the ModelCache they were composed with".
    served = {v.cache for v in call.placed if v.cache}
    return _hold(call, served.pop() if len(served) == 1 else None)


def _hold(call: _Call, cache: str | None) -> Outcome:
    """Status for a call that places nothing: the observed rows, and
    ``status.displaced`` and ``status.nextClusters`` carried (Crossplane applies the XR
    status a function returns: a field left out is lost). ``cache``: the cache the
    rows' messages name (:func:`~function.composers.deployment.status._cache_name`)."""
    inputs, out = call.inputs, call.out
    _status_from(inputs, out, call.replicas, call.rows, cache)
    _carry_displaced(inputs, out)
    for field in (CACHE_IDENTITIES, CACHE_ROLLOUT):
        value = inputs.status(field)
        if value is not None:
            out.status[field] = value
    nxt = capacity.next_clusters_status(inputs)
    if nxt:
        out.status[NEXT_CLUSTERS] = nxt
    return out
