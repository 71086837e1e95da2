"""The ModelDeployment composer: requirements, placement, children, conditions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from function import API_VERSION
from function.composers.deployment import capacity
from function.composers.deployment.children import (
    _keep_all,
    _observed_replicas,
    _replica_body,
    _template_key,
    _usage_body,
)
from function.composers.deployment.fleet import (
    _Fleet,
    _Footprint,
    _Observed,
)
from function.composers.deployment.spec import _engines, _parse, _selector_fields
from function.composers.deployment.status import (
    _carry_displaced,
    _displaced_status,
    _status_from,
    _track_displaced,
)
from function.composers.deployment.terms import (
    CACHE_NOT_FOUND,
    INVALID_DEVICE_SELECTOR,
    MAX_NEXT_CLUSTERS,
    MIN_NEXT_CLUSTERS,
    NEXT_CLUSTERS,
    REPLICA_PREFIX,
    REQ_CACHE,
    REQ_CLUSTERS,
    REQ_HYDRATIONS,
    SCHEDULED,
    USAGE_KEY,
)
from function.composers.modelcache import retained_clusters
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.outcome import Outcome
from function.naming import (
    LABEL_CACHE,
    label_value,
)
from function.scheduling.devices import (
    SelectorEvaluationError,
)
from function.scheduling.placement import (
    Existing,
    Placement,
    Request,
    next_clusters,
    place,
)
from function.scheduling.tolerations import parse_tolerations


def _invalid_selector(
    inputs: Inputs,
    out: Outcome,
    msg: str,
    replicas: int,
    obs_rows: list[Any],
    cache: str | None,
) -> Outcome:
    """A device selector that does not compile or fails while evaluating: every
    existing child is kept exactly, ``ReplicasScheduled=False``,
    ``InvalidDeviceSelector`` with ``msg`` (the field and the error), and a warning."""
    _keep_all(inputs, out)
    out.condition(SCHEDULED, "False", INVALID_DEVICE_SELECTOR, msg)
    out.warning(msg, INVALID_DEVICE_SELECTOR)
    _status_from(inputs, out, replicas, obs_rows, cache)
    _carry(inputs, out)
    return out


def _carry(inputs: Inputs, out: Outcome) -> None:
    """Keep ``status.displaced`` and ``status.nextClusters`` in a call that places nothing
    (Crossplane applies the XR status a function returns: a field left out is lost)."""
    _carry_displaced(inputs, out)
    nxt = capacity.next_clusters_status(inputs)
    if nxt:
        out.status[NEXT_CLUSTERS] = nxt


def _pending(
    inputs: Inputs, out: Outcome, wanted: int, obs_rows: list[Any], cache: str | None, what: str
) -> Outcome:
    """A requirement is not resolved: keep every child exactly, say what is awaited."""
    _keep_all(inputs, out)
    out.condition(
        SCHEDULED,
        "Unknown",
        "ResolvingRequirements",
        f"waiting for Crossplane to resolve required resources: {what}",
    )
    _status_from(inputs, out, wanted, obs_rows, cache)
    _carry(inputs, out)
    return out


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
    spec, selector = _parse(inputs)
    raw_ts = inputs.spec.get("template", {}).get("spec", {})
    ns, name = inputs.namespace, inputs.name
    ts = spec.template.spec
    cache = ts.modelCacheRef.name if ts.modelCacheRef else None

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

    observed = [_Observed.of(o) for o in _observed_replicas(inputs).values()]
    obs_rows = [(v.index or 0, v.cluster, v.obj, None) for v in observed]
    placed_obs = [v for v in observed if v.cluster and v.index is not None]
    own_clusters = frozenset(v.cluster for v in placed_obs)
    ahead, fleet_ahead = capacity.upfront(inputs, own_clusters, len(placed_obs), spec.replicas)

    engines, bad = _engines(raw_ts.get("engines") or [])
    if bad:
        capacity.require(out, ahead, fleet_ahead)
        return _invalid_selector(inputs, out, "; ".join(bad[:3]), spec.replicas, obs_rows, cache)

    # The fleet lists: all must be resolved before anything is placed or removed.
    names = [REQ_CLUSTERS] + ([REQ_CACHE, REQ_HYDRATIONS] if cache else [])
    got = {n: inputs.required(n) for n in names}
    pending = [n for n, v in got.items() if v is UNRESOLVED]
    if pending:
        capacity.require(out, ahead, fleet_ahead)
        return _pending(inputs, out, spec.replicas, obs_rows, cache, ", ".join(pending))
    clusters_r = got[REQ_CLUSTERS]
    assert isinstance(clusters_r, Resolved)

    footprint: Mapping[str, str] | None = None
    retained: frozenset[str] = frozenset()
    if cache:
        cache_r = got[REQ_CACHE]
        assert isinstance(cache_r, Resolved)
        if not cache_r.items:
            capacity.require(out, ahead, fleet_ahead)
            _keep_all(inputs, out)
            out.resources.pop(USAGE_KEY, None)
            msg = (
                f"ModelCache {ns}/{cache} (spec.template.spec.modelCacheRef) does not exist; "
                f"no replica is placed until it does"
            )
            out.condition(SCHEDULED, "False", CACHE_NOT_FOUND, msg)
            out.warning(msg, CACHE_NOT_FOUND)
            out.requeue_after(inputs.settings.poll_seconds)
            _status_from(inputs, out, spec.replicas, obs_rows, cache)
            _carry(inputs, out)
            return out
        hyd_r = got[REQ_HYDRATIONS]
        assert isinstance(hyd_r, Resolved)
        footprint = _Footprint(hyd_r.items, ns, cache)
        retained = retained_clusters(cache_r.items[0])

    existing = []
    by_index: dict[int, _Observed] = {}
    for v in placed_obs:
        assert v.index is not None
        existing.append(Existing(v.index, v.cluster, v.pools, v.state[0]))
        by_index[v.index] = v
    request = Request(
        replicas=spec.replicas,
        engines=engines,
        selector=selector,
        tolerations=parse_tolerations([t.model_dump(exclude_none=True) for t in ts.tolerations]),
        fleet=_Fleet(clusters_r.items),
        existing=tuple(existing),
        footprint=footprint,
        retained=retained,
        cache=cache,
    )

    # Capacity: placement with the per-cluster usage resolved so far, and, when the
    # fleet-wide fallback is resolved, with every replica of the fleet (capacity module).
    fleet_items = capacity.fleet_wide(inputs)
    known = capacity.Usage(ns, name, lookup=capacity.per_cluster(inputs))
    try:
        placement: Placement | None
        if fleet_items is not None:
            exact = capacity.Usage(ns, name, fleet=fleet_items)
            placement = place(replace(request, used=exact))
            reads = ahead | exact.read
            # Keep the fallback while the exact walk reads beyond the up-front clusters
            # (without it the per-cluster walk would expand again).
            capacity.require(
                out,
                reads,
                fleet_ahead or not exact.read <= ahead or capacity.too_many(reads),
            )
        else:
            placement = place(replace(request, used=known))
            reads = ahead | known.read
            # A second expansion (candidates read beyond the up-front ones are known and
            # the walk still reads unknown ones) asks for the fleet: bounded calls.
            expanded = bool(known.read - known.unknown - ahead - own_clusters)
            capacity.require(
                out,
                reads,
                fleet_ahead or (bool(known.unknown) and expanded) or capacity.too_many(reads),
            )
            if known.unknown:
                placement = None
    except SelectorEvaluationError as err:
        # Like a selector that does not compile: nothing placed, nothing removed.
        capacity.require(out, ahead, fleet_ahead)
        fields = _selector_fields(raw_ts.get("engines") or []).get(err.expression)
        msg = f"{fields[0] if fields else 'spec.template.spec.engines'}: {err}"
        return _invalid_selector(inputs, out, msg, spec.replicas, obs_rows, cache)
    if placement is None:
        unknown = sorted(known.unknown)
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        return _pending(
            inputs,
            out,
            spec.replicas,
            obs_rows,
            cache,
            f"ModelReplicas on {', '.join(unknown[:5])}{more} (their capacity)",
        )

    try:
        k = min(MAX_NEXT_CLUSTERS, max(MIN_NEXT_CLUSTERS, spec.replicas))
        nxt = next_clusters(request, placement, k)
    except SelectorEvaluationError:
        nxt = []  # a hint only: placement reports the selector when it reaches that cluster
    template = _template_key(inputs)
    rows = []
    for p in placement.replicas:
        view = by_index.get(p.index) if p.existing else None
        body = _replica_body(ns, name, template, p.index, p.cluster, tuple(sorted(p.pools.items())))
        out.add(f"{REPLICA_PREFIX}{p.index}", body, ready=view is not None and view.state[0])
        rows.append((p.index, p.cluster, view.obj if view is not None else None, p.hydration))
    for r in placement.removed:
        msg = f"removed replica {r.index} from {r.cluster}: {r.why}"
        if r.why == "scaled down":
            out.normal(msg, "ReplicaRemoved")
        else:
            out.warning(msg, "ReplicaRemoved")
    if cache:
        # A Usage's work is done once it exists; unspecified readiness would keep the
        # XR unready forever (Crossplane counts only READY_TRUE).
        out.add(USAGE_KEY, _usage_body(inputs, cache), ready=USAGE_KEY in inputs.observed)

    if placement.reason is None:
        out.condition(SCHEDULED, "True", "Scheduled", placement.message)
    else:
        out.condition(SCHEDULED, "False", placement.reason, placement.message)
        out.requeue_after(inputs.settings.poll_seconds)
    if not _status_from(inputs, out, spec.replicas, rows, cache):
        out.requeue_after(inputs.settings.poll_seconds)
    prev = _displaced_status(inputs)
    if prev is not None or any(not r.scaled_down for r in placement.removed):
        _track_displaced(inputs, out, placement, by_index, prev)
    if nxt:
        out.status[NEXT_CLUSTERS] = nxt
    return out
