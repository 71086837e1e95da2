"""The ModelReplica composer: decisions only (see the package docstring).

Reads the requirements and the hydration gate, asks :mod:`.children` for the plan of
this distinct input (memoized), and reports status from the observed workloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf.struct_pb2 import ListValue, Struct

from function import API_VERSION, naming
from function.api.inferencecluster import STATUS_GPU_POOLS, provider_config_ref, unknown_claim
from function.api.modelcache import spec_source_identity
from function.api.modelcachehydration import (
    FAILED,
    HYDRATING,
    PENDING,
    READY,
    source_identity_of,
    stored_identities,
)
from function.api.modelreplica import (
    ENGINE_AVAILABLE,
    PHASE_SERVING,
    PHASE_STARTING,
    REASON_CACHE_NOT_FOUND,
    REASON_HYDRATING,
    REASON_HYDRATION_FAILED,
    REASON_HYDRATION_NOT_FOUND,
    REASON_OBJECT_NOT_SYNCED,
    REASON_ROLLOUT_STALLED,
    REASON_WORKLOAD_KIND_CHANGED,
    STATUS_CACHE_IDENTITIES,
    status_identity,
)
from function.composers.replica import children, handover
from function.composers.replica.children import Defaults, Head, PlanKey
from function.composers.replica.lifecycle import Times, gate_lifted_at, record_serving, was_gated
from function.composers.replica.names import (
    CLAIM_PREFIX,
    CONDITION,
    REQ_CACHE,
    REQ_CLUSTER,
    REQ_HYDRATION,
    SERVICE_KEY,
    WORKLOAD_PREFIX,
    engine_of_key,
)
from function.composers.replica.observed import (
    WorkloadFacts,
    claim_digest,
    observed_workload,
    read_workload,
    refusal,
)
from function.core import events, structs
from function.core.errors import quoted_ends
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.outcome import Outcome
from function.manifests import workloads as wl
from function.serving.flashloader import FlashLoader
from jobs.contract import IDENTITY_PATTERN

# Status fields this composer owns, with the type it writes (echoed while undecided).
_STATUS_FIELDS: dict[str, type | tuple[type, ...]] = {
    "phase": str,
    "message": str,
    "endpoint": str,
    "cluster": str,
    "engines": (ListValue, list),
    "hydration": (Struct, dict),
    STATUS_CACHE_IDENTITIES: (ListValue, list),
}


_BEING_DELETED = "its Object is being deleted; it is created again once gone"
"""``status.engines[].message`` of an engine whose own workload Object is being deleted."""


@dataclass(frozen=True, slots=True)
class Gate:
    """Compose nothing new; keep what exists exactly; report ``reason``; not ready.

    Attributes:
        reason: The ``ModelReady`` reason.
        message: Its message (and, with ``warn``, a Warning event's).
        hydration: ``status.hydration`` to write, if any.
        phase: ``status.phase``.
        warn: Also emit a Warning.
        cache_gate: The replica waits for its cache (``CacheNotFound``,
            ``HydrationNotFound``, ``Hydrating``, ``HydrationFailed``). Before it first
            served, that drops ``status.hydrationReadyAt``: its cold start counts from
            the next time the gate lifts.
    """

    reason: str
    message: str
    hydration: dict[str, Any] | None = None
    phase: str = PENDING
    warn: bool = False
    cache_gate: bool = False


@dataclass(slots=True)
class _Call:
    """One call: the request, the outcome being built, the valid spec's head and the
    lifecycle timestamps carried in status."""

    inputs: Inputs
    out: Outcome
    head: Head
    times: Times
    _workloads: dict[str, WorkloadFacts] | None = None

    def workloads(self) -> dict[str, WorkloadFacts]:
        """Observed workload Objects whose ``status.atProvider.manifest`` (the object as
        the workload cluster reports it) is observed, by composition-resource name, each
        read as the kind its manifest names (:func:`.observed.observed_workload`)."""
        if self._workloads is None:
            found = {}
            for key in self.inputs.observed:
                if not key.startswith(WORKLOAD_PREFIX):
                    continue
                body = self.inputs.observed_body(key)
                facts = observed_workload(body) if body is not None else None
                if facts is not None and facts.manifest:
                    found[key] = facts
            self._workloads = found
        return self._workloads

    def off_cache(self) -> list[str]:
        """Without a cache (``spec.modelCacheRef`` removed, or never set): the identities
        the replica's pods may still read while they roll off the cache they had,
        sorted; empty once every observed workload has rolled off it (its rollout
        complete and its pod templates reading no cache) or when it had none.

        Those of its last status (``status.cacheIdentities``, ``status.hydration.identity``)
        and those its observed workloads' templates read. While any is left the replica
        is not ready and writes them in ``status.cacheIdentities``, so that the cache it
        left keeps them and its ModelDeployment keeps the replica's
        ``modelplane.ai/leaving-cache`` label (review 17k: it reported ModelReady as soon
        as the old pods answered, and the label and the cache's Usage could go while they
        still ran)."""
        if self.head.cache is not None:
            return []
        workloads = self.workloads()
        reading: set[str] = set()
        for w in workloads.values():
            reading |= w.sources
        ids = {i for i in _last_identities(self.inputs) | reading if IDENTITY_PATTERN.fullmatch(i)}
        rolled = bool(workloads) and all(
            not w.sources and w.complete is True for w in workloads.values()
        )
        return [] if rolled else sorted(ids)


def compose(inputs: Inputs) -> Outcome:
    """Compose one ModelReplica (see the package docstring, "Hot path" for the memoization).

    Raises:
        SpecError: for an invalid spec, a user env entry that sets a reserved name,
            or an invalid flash-loader or ``/dev/shm`` setting (named with its level).
    """
    out = Outcome()
    spec_key = structs.canonical(inputs.xr, "spec")
    head = children.head(spec_key)
    hyd_name = _require(inputs, out, head)
    defaults = Defaults.of(inputs.settings)
    shm = children.shm(defaults, head.shm)
    c = _Call(inputs, out, head, Times.carried(inputs))

    cluster_req = inputs.required(REQ_CLUSTER)
    cache_req = inputs.required(REQ_CACHE) if head.cache is not None else None
    hyd_req = inputs.required(REQ_HYDRATION) if head.cache is not None else None
    if UNRESOLVED in (cluster_req, cache_req, hyd_req):
        return _unresolved(c)
    assert isinstance(cluster_req, Resolved)
    cluster = _cluster(head, cluster_req)
    if isinstance(cluster, Gate):
        return _gate(c, cluster)
    gpu_pools, pc = cluster
    if not _pools_known(cluster_req):
        # Not known (not written yet, or lost in a restore), not empty: as the
        # deployment reads it (review 14d: the two disagreed).
        return _unresolved(c, f"InferenceCluster {head.clusterName} reports no status.gpuPools")
    status = structs.sub(cluster_req.items[0], "status")
    claim = unknown_claim(structs.get(status, STATUS_GPU_POOLS), head.pools)
    if claim is not None:
        # Neither claimable nor Synthetic for sure: not known (review 15a: read as
        # Synthetic, the workload was rewritten without its GPU claim).
        return _unresolved(
            c,
            f"InferenceCluster {head.clusterName} reports {claim}: the devices of that pool "
            "are not known until its InferenceClass says DRA or Synthetic",
        )

    flash: FlashLoader | None = None
    hydration: dict[str, Any] | None = None
    identity = ""
    if head.cache is not None:
        assert isinstance(cache_req, Resolved) and isinstance(hyd_req, Resolved)
        cached = _cache(c, defaults, cache_req, hyd_name, hyd_req)
        if isinstance(cached, Gate):
            return _gate(c, cached)
        flash, hydration = cached
        identity = hydration.get("identity", "")

    key = PlanKey(
        inputs.name, inputs.namespace, spec_key, pc["kind"], pc["name"], gpu_pools, shm, flash,
        identity,
    )  # fmt: skip
    plan = children.plan(key)
    legacy = _legacy_claims(inputs, plan)
    if legacy:
        plan = children.plan(key._replace(legacy=legacy))
    return _apply(c, plan, hydration)


def _legacy_claims(inputs: Inputs, plan: children.Plan) -> frozenset[str]:
    """The members whose ResourceClaimTemplate Object of the release before (key
    without a digest, :func:`.names.claim_key`) is observed, not being deleted, and asks
    for what the spec asks (:func:`.observed.claim_digest` equals the plan's digest):
    their keys. They keep that Object and its remote name, so upgrading rolls no
    workload; any other member's template is named by the digest of its requests. Empty
    in the steady state of a replica composed by this release (one dict lookup per
    member); on one of the release before, a reading kept per Object version."""
    found: list[str] = []
    for e in plan.engines:
        for cl in e.claims:
            body = inputs.observed_body(cl.legacy_key)
            if body is None or claim_digest(body) != cl.digest:
                continue
            if not structs.being_deleted(body):
                found.append(cl.legacy_key)
    return frozenset(found)


def _require(inputs: Inputs, out: Outcome, head: Head) -> str:
    """Ask for the cluster and, with a cache, the ModelCache and the hydration of (cache,
    cluster); returns the hydration's name ("" without a cache)."""
    ns = inputs.namespace
    out.require(REQ_CLUSTER, API_VERSION, "InferenceCluster", match_name=head.clusterName)
    if head.cache is None:
        return ""
    hyd_name = naming.hydration_name(ns, head.cache, head.clusterName)
    out.require(REQ_CACHE, API_VERSION, "ModelCache", match_name=head.cache, namespace=ns)
    out.require(
        REQ_HYDRATION, API_VERSION, "ModelCacheHydration", match_name=hyd_name, namespace=ns
    )
    return hyd_name


def _cluster(head: Head, cluster_req: Resolved) -> Gate | tuple[bytes, dict[str, str]]:
    """The cluster's ``status.gpuPools`` (canonical form) and provider config, or a gate."""
    if not cluster_req.items:
        return Gate("ClusterNotFound", f"InferenceCluster {head.clusterName} not found", warn=True)
    cluster = cluster_req.items[0]
    pc = provider_config_ref(cluster)
    if pc is None:
        return Gate(
            "ClusterNotReady",
            f"InferenceCluster {head.clusterName} reports no status.providerConfigRef yet",
        )
    return structs.canonical(structs.sub(cluster, "status"), STATUS_GPU_POOLS), pc


def _cache(
    c: _Call, defaults: Defaults, cache_req: Resolved, hyd_name: str, hyd_req: Resolved
) -> Gate | tuple[FlashLoader | None, dict[str, Any]]:
    """The effective flash loader and ``status.hydration`` once the hydration is Ready,
    or the gate that holds the replica back."""
    inputs, head = c.inputs, c.head
    ref = f"{inputs.namespace}/{head.cache}"
    if not cache_req.items:
        msg = f"ModelCache {ref} not found"
        return Gate(REASON_CACHE_NOT_FOUND, msg, warn=True, cache_gate=True)
    fl = children.flash(
        defaults,
        structs.canonical(structs.sub(cache_req.items[0], "spec"), "flashLoader"),
        structs.canonical(structs.sub(inputs.xr, "spec"), "flashLoader"),
        f"ModelCache {ref} spec.flashLoader",
    )
    flash = fl if fl.enabled else None
    if flash is not None:
        children.check_flash_fits(c.out, flash, cache_req.items[0], ref)
    hydration = _hydration(c, hyd_name, hyd_req)
    if isinstance(hydration, Gate):
        return hydration
    return flash, hydration


def _hydration(c: _Call, hyd_name: str, hyd_req: Resolved) -> Gate | dict[str, Any]:
    """``status.hydration`` of a Ready hydration, or the gate (not found, failed, not
    Ready yet). Records when the gate lifted for a replica that waited for it."""
    cache, cluster = c.head.cache, c.head.clusterName
    if not hyd_req.items:
        return Gate(
            REASON_HYDRATION_NOT_FOUND,
            f"cache {cache} has no ModelCacheHydration {hyd_name} for cluster "
            f"{cluster}; the cluster is outside the cache's footprint "
            "or not staged yet",
            hydration={"name": hyd_name, "phase": "NotFound", "message": "not found"},
            cache_gate=True,
        )
    hyd_status = structs.sub(hyd_req.items[0], "status")
    phase = structs.sval(hyd_status, "phase") or PENDING
    msg = structs.sval(hyd_status, "message")
    source = structs.sub(hyd_status, "source")
    if source is not None:
        current = source_identity_of(source)
    else:
        current = spec_source_identity(hyd_req.items[0])
    want = c.head.identity
    stored = stored_identities(hyd_status)
    hydration = {"name": hyd_name, "phase": phase, "message": msg or f"hydration is {phase}"}
    if want is not None and want in stored:
        # The identity this replica serves is complete on the PVC: it keeps serving it
        # while the cache's new identity hydrates beside it (or failed to).
        hydration["identity"] = want
    elif want is None and (phase == FAILED or current not in stored) and _reads_root(c):
        # Upgrade: a workload of the release before side-by-side revisions reads the
        # PVC root; it keeps doing so (no roll onto a directory that does not exist)
        # until the hydration stores the identity in its own directory and the
        # deployment names it in the spec. The side-by-side layout never writes or
        # prunes the root, so a Failed download into the identity's directory leaves
        # it serving (held, like a replica whose identity is still stored).
        pass
    elif (
        want is None
        and phase != READY
        and (served := _served(c)) in stored
        and (phase != FAILED or served != current)
    ):
        # A spec naming no identity, a workload serving one that is complete on the PVC
        # (not the one that failed): it keeps serving it while the cache's identity
        # hydrates beside it (or failed to), as a replica whose spec names it does.
        hydration["identity"] = served
    elif phase == FAILED and want in (None, current):
        return Gate(
            REASON_HYDRATION_FAILED,
            f"hydration of cache {cache} failed on cluster {cluster}: {msg or 'no message'}",
            hydration=hydration,
            phase=FAILED,
            warn=True,
            cache_gate=True,
        )
    elif phase != READY or not current or want not in (None, current):
        waiting = f"identity {want}" if want is not None else f"cache {cache}"
        return Gate(
            REASON_HYDRATING,
            f"waiting for {waiting} on cluster {cluster}: hydration is {phase}"
            + (f" ({msg})" if msg else ""),
            hydration=hydration,
            phase=HYDRATING,
            cache_gate=True,
        )
    else:
        hydration["identity"] = current
    times = c.times
    if times.serving_since is None and times.hydration_ready is None and was_gated(c.inputs):
        times.hydration_ready = gate_lifted_at(hyd_status, times.created, c.inputs.now)
    return hydration


def _served(c: _Call) -> str:
    """The identity the replica's workload serves when its spec names none: the one its
    last status reports (``status.hydration.identity``), else the one its observed pod
    templates read (when they all read one identity); "" when neither is known."""
    last = status_identity(c.inputs.xr)
    if last:
        return last
    read: set[str] = set()
    for w in c.workloads().values():
        read |= w.sources
    if len(read) == 1:
        (only,) = read
        if IDENTITY_PATTERN.fullmatch(only):
            return only
    return ""


def _reads_root(c: _Call) -> bool:
    """Whether an observed workload's pods read the cache PVC root (the layout of the
    release before side-by-side revisions)."""
    return any(wl.ROOT_SOURCE in w.sources for w in c.workloads().values())


def _write_cache_identities(c: _Call, status: dict[str, Any], serving: str | None) -> None:
    """``status.cacheIdentities`` (the contract of ``function.api.modelreplica``): the
    identities the replica's pods may read now, so that its cluster's hydration prunes
    none of them.

    The identity composed (``serving``; None when gated, "" for the PVC root) and the
    spec's, first; then, until every observed workload has fully rolled onto
    ``serving`` (:func:`function.manifests.workloads.rollout_complete` True and its pod
    templates read only ``serving``), every identity the replica may have served before:
    those of its last status (``cacheIdentities`` and ``hydration.identity``) and those
    its observed workloads' templates read. Rollout state not known: all are kept.
    """
    if c.head.cache is None:
        leaving = c.off_cache()
        if leaving:
            status[STATUS_CACHE_IDENTITIES] = leaving
        return
    first = [i for i in (serving, c.head.identity) if i]
    earlier = _last_identities(c.inputs)
    workloads = c.workloads()
    rolled = serving is not None and bool(workloads)
    for w in workloads.values():
        earlier |= w.sources
        if serving is not None and _rolled(w, serving)[0] is not True:
            rolled = False
    keep = dict.fromkeys(first)
    if not rolled:
        keep.update(dict.fromkeys(sorted(i for i in earlier if IDENTITY_PATTERN.fullmatch(i))))
    if keep:
        status[STATUS_CACHE_IDENTITIES] = list(keep)


def _apply(c: _Call, plan: children.Plan, hydration: dict[str, Any] | None) -> Outcome:
    """Apply ``plan`` to this call: desire its children; status from the observed workloads.

    In the call where every engine first serves, records ``status.servingSince`` and
    observes the cold start (:func:`.lifecycle.record_serving`).
    """
    inputs, out, times = c.inputs, c.out, c.times
    out.results.extend(plan.results)
    if plan.gate is not None:
        stop = plan.gate
        return _gate(c, Gate(stop.reason, stop.message, hydration=hydration, warn=True))
    changed = _kinds_changed(c, plan)
    for key, body in plan.children:
        if changed and engine_of_key(key) in changed:
            continue  # nothing new for an engine whose workload would change kind
        out.add(key, body)  # serialized: the runner splices it into the response
    _keep_changed(c, changed)
    source = hydration.get("identity", wl.ROOT_SOURCE) if hydration is not None else None
    stalled: list[tuple[children.EnginePlan, str]] = []
    refused = _refused(c, plan, changed)
    old = _old_claims(c, plan, changed)
    engines_status = [
        _changed_status(c, e, changed[e.name])
        if e.name in changed
        else _engine_status(c, e, source, stalled, refused, moving=e.name in old)
        for e in plan.engines
    ]
    _hand_over(c, plan, engines_status, changed)
    _hold_old_claims(c, plan, engines_status, old)
    status: dict[str, Any] = {"cluster": c.head.clusterName, "engines": engines_status}
    if hydration is not None:
        status["hydration"] = hydration
    _write_cache_identities(c, status, source)
    n = len(engines_status)
    if not refused and all(e["ready"] for e in engines_status):
        url = plan.url
        msg = f"{n}/{n} engines serving at {url}"
        status.update(phase=PHASE_SERVING, message=msg, endpoint=url)
        out.condition(CONDITION, "True", "Serving", status["message"])
        out.ready = True
        if times.serving_since is None:
            kinds = {e.kind for e in plan.engines}
            record_serving(inputs, out, kinds, times, c.head.cache)
    else:
        # onto the cache's identity, or off a cache removed (source None)
        stall = ""
        if stalled:
            keep = status.get(STATUS_CACHE_IDENTITIES, [])
            devices = any(e.name in old for e, _ in stalled)
            stall = _stalled_message(c, stalled, source, keep, devices)
        _not_ready(c, plan, status, changed=changed, refused=refused, stalled=stall)
    times.write(status)
    out.status.update(status)
    return out


def _not_ready(
    c: _Call,
    plan: children.Plan,
    status: dict[str, Any],
    *,
    changed: dict[str, str],
    refused: dict[str, str],
    stalled: str,
) -> None:
    """A replica not every engine of which serves what the spec asks (or a child of
    which was refused): ``Starting``, with the reason that says most (an engine whose
    workload would change kind, a refused apply, a stalled roll: ``stalled`` is its
    message, else ``Starting``)."""
    inputs, out, engines_status = c.inputs, c.out, status["engines"]
    ready = sum(1 for e in engines_status if e["ready"])
    waiting = ", ".join(
        f"{e['name']} ({e['message']})" if e.get("message") else e["name"]
        for e in engines_status
        if not e["ready"]
    )
    msg = f"{ready}/{len(engines_status)} engines serving; waiting for {waiting}"
    reason = "Starting"
    if changed:
        reason = REASON_WORKLOAD_KIND_CHANGED
        msg = _kind_changed_message(c, plan, changed)
        events.condition_warning(out, inputs.xr, CONDITION, reason, msg)
    elif refused:
        reason = REASON_OBJECT_NOT_SYNCED
        msg = _refused_message(c, plan, refused)
        if _last_reason(inputs) != REASON_OBJECT_NOT_SYNCED:
            out.warning(msg, REASON_OBJECT_NOT_SYNCED)
    elif stalled:
        reason, msg = REASON_ROLLOUT_STALLED, stalled
        if _last_reason(inputs) != REASON_ROLLOUT_STALLED:
            out.warning(msg, REASON_ROLLOUT_STALLED)
    status.update(phase=PHASE_STARTING, message=msg)
    out.condition(CONDITION, "False", reason, msg)
    out.ready = False
    out.requeue_after(inputs.settings.poll_seconds)


def _hand_over(
    c: _Call,
    plan: children.Plan,
    engines_status: list[dict[str, Any]],
    changed: dict[str, str],
) -> None:
    """Keep the workload of an engine renamed away until its new one serves
    (:mod:`.handover`): desire it and its claim templates exactly as observed, mark the
    new engine's Object with the engines it replaces (not one kept as observed because
    its kind would change: ``changed``), and say so in its ``status.engines[]`` entry
    (``available`` while any kept workload answers)."""
    gone = handover.retired(c.inputs, plan.engines)
    if not gone:
        return
    serving = {e["name"]: bool(e["ready"]) for e in engines_status}
    replaces = handover.replaced(c.inputs, plan.engines, serving, gone)
    bodies = dict(plan.children)
    for e, entry in zip(plan.engines, engines_status, strict=True):
        olds = replaces.get(e.name)
        if not olds:
            continue
        if e.name not in changed:
            c.out.add(e.key, handover.annotated(bodies[e.key], olds))
        said = entry.get("message")
        entry["message"] = "; ".join(m for m in (said, handover.kept_message(olds)) if m)
        if not entry[ENGINE_AVAILABLE]:
            # Any kept workload that answers serves behind the Service (review 17g F2:
            # all of them, one renamed away before it ever served included).
            entry[ENGINE_AVAILABLE] = any(r.answers for r in olds)
        for r in olds:
            for key in r.keys:
                body = c.inputs.observed_body(key)
                if body is not None:
                    c.out.keep(key, body)


# How much of a provider's error a message quotes (characters, both ends kept).
_REFUSAL_CHARS = 400


def _excerpt(err: str) -> str:
    """A provider's error as a status message quotes it (:func:`quoted_ends`)."""
    return quoted_ends(err, _REFUSAL_CHARS)


def _refused(c: _Call, plan: children.Plan, changed: dict[str, str]) -> dict[str, str]:
    """The children this call desires whose observed Object reports ``Synced=False``
    (the workload cluster refused the last apply), by composition-resource name: the
    provider's message. Not those of an engine kept as observed (``changed``), nor an
    Object being deleted."""
    out: dict[str, str] = {}
    observed = c.inputs.observed
    for key, _ in plan.children:
        if key not in observed or (changed and engine_of_key(key) in changed):
            continue
        body = c.inputs.observed_body(key)
        err = refusal(body) if body is not None else None
        if err is not None and not structs.being_deleted(body):
            out[key] = err
    return out


def _refused_message(c: _Call, plan: children.Plan, refused: dict[str, str]) -> str:
    """The ``ObjectNotSynced`` message: each refused child (its kind and remote name,
    its Object) and the provider's message (:func:`_excerpt`)."""
    what: dict[str, str] = {SERVICE_KEY: f"Service {plan.service}"}
    for e in plan.engines:
        what[e.key] = f"{e.kind} {e.workload}"
        what.update((cl.key, f"ResourceClaimTemplate {cl.name}") for cl in e.claims)
    said = "; ".join(
        f"{what.get(key, key)} (Object {naming.child_name(c.inputs.name, key)}) not applied: "
        f"{_excerpt(err)}"
        for key, err in refused.items()
    )
    return said + (
        ". The workload cluster refused the last apply (the Object's Synced condition): "
        "what runs there is what was applied before, not what the spec asks; "
        "provider-kubernetes retries on every poll and the replica is not ready until it "
        "applies"
    )


def _old_claims(c: _Call, plan: children.Plan, changed: dict[str, str]) -> dict[str, list[str]]:
    """Per engine of the plan (not kept as observed: ``changed``), the observed claim
    template Objects it no longer desires (other requests than the spec's, or the
    release-before's key), not being deleted, sorted; empty in the steady state."""
    desired = plan.keys
    old: dict[str, list[str]] = {}
    for key in c.inputs.observed:
        if key.startswith(CLAIM_PREFIX) and key not in desired:
            engine = engine_of_key(key)
            if engine is None or engine in changed:
                continue
            body = c.inputs.observed_body(key)
            if body is not None and not structs.being_deleted(body):
                old.setdefault(engine, []).append(key)
    for keys in old.values():
        keys.sort()
    return old


def _hold_old_claims(
    c: _Call, plan: children.Plan, engines_status: list[dict[str, Any]], old: dict[str, list[str]]
) -> None:
    """Keep the ResourceClaimTemplates an engine's members claimed before (a device
    request edited: the new ones have other names, :func:`function.naming.claim_template_name`)
    exactly as observed until its workload has rolled onto the new ones, then let them go
    (not desired: Crossplane deletes them).

    Rolled: the observed workload's pod templates name exactly the templates the plan
    composes, it applied (no ``Synced=False``), and its rollout is complete
    (:func:`function.manifests.workloads.rollout_complete` True, or not known and the
    workload serves). Until then a pod of the old template that is re-created (an
    eviction, a node lost) still finds its template. An engine whose workload Object is
    not observed, or is being deleted, has no pods to keep them for. Engines renamed away
    (:mod:`.handover`) and those kept as observed keep theirs already.

    Args:
        old: :func:`_old_claims`.
    """
    if not old:
        return
    for e, entry in zip(plan.engines, engines_status, strict=True):
        keys = old.get(e.name)
        if not keys or _rolled_onto_claims(c, e):
            continue
        names = []
        for key in keys:
            body = c.inputs.observed_body(key)
            if body is None:
                continue
            c.out.keep(key, body)
            manifest = structs.get(structs.sub(body, "spec"), "forProvider", "manifest")
            names.append(structs.get_str(manifest, "metadata", "name") or key)
        if names:
            now = ", ".join(cl.name for cl in e.claims) or "none"
            said = entry.get("message")
            kept = (
                f"until its pods have rolled onto ResourceClaimTemplate {now}, "
                f"ResourceClaimTemplate {', '.join(names)} (what they claimed before) is kept"
            )
            entry["message"] = f"{said}; {kept}" if said else kept


def _rolled_onto_claims(c: _Call, e: children.EnginePlan) -> bool:
    """Whether engine ``e``'s workload runs only pods that claim the templates the plan
    composes for it (:func:`_hold_old_claims`)."""
    obj = c.inputs.observed_body(e.key)
    if obj is None or structs.being_deleted(obj):
        return True
    w = observed_workload(obj)
    if w.kind != e.kind:
        w = read_workload(obj, e.kind)
    if w.malformed or w.sync_error or w.claims != e.claim_names:
        return False
    return w.complete is True or (w.complete is None and w.serving)


def _observed_kind(c: _Call, key: str) -> tuple[str, str]:
    """The kind and remote name of the workload Object ``key`` as its observed manifest
    names them (``("", "")`` when not observed or naming none)."""
    manifest = structs.get(
        structs.sub(c.inputs.observed_body(key), "spec"), "forProvider", "manifest"
    )
    if not isinstance(manifest, Struct):
        return "", ""
    return structs.get_str(manifest, "kind"), structs.get_str(manifest, "metadata", "name")


def _kinds_changed(c: _Call, plan: children.Plan) -> dict[str, str]:
    """The engines of ``plan`` whose workload Object is observed (being deleted too) with
    a manifest of another kind than the plan composes, by name: the observed kind.

    An engine's members changed role under the same name (one Standalone member <-> a
    Leader and a Worker). provider-kubernetes reads an Object's workload by the kind its
    manifest names (``Observe`` gets the manifest's GroupVersionKind and name): given the
    new kind it would create the new workload and never read, update or delete the old
    one, which would run (holding its devices) with no Object managing it. So the
    observed workload and claim templates are kept as they are and nothing new is
    composed for the engine (:data:`~function.api.modelreplica.REASON_WORKLOAD_KIND_CHANGED`);
    renaming the engine switches make-before-break (:mod:`.handover`)."""
    out: dict[str, str] = {}
    for e in plan.engines:
        kind = _observed_kind(c, e.key)[0]
        if kind and kind != e.kind:
            out[e.name] = kind
    return out


def _keep_changed(c: _Call, changed: dict[str, str]) -> None:
    """Keep, exactly as observed, the workload and claim templates of each engine in
    ``changed`` (:func:`_kinds_changed`)."""
    if not changed:
        return
    for key in sorted(c.inputs.observed):
        if engine_of_key(key) in changed:
            body = c.inputs.observed_body(key)
            if body is not None:
                c.out.keep(key, body)


def _changed_status(c: _Call, e: children.EnginePlan, kind: str) -> dict[str, Any]:
    """``status.engines[]`` entry of engine ``e`` whose observed workload is of ``kind``
    (:func:`_kinds_changed`): not ready, ``available`` while the kept workload answers."""
    obj = c.inputs.observed_body(e.key)
    workload = _observed_kind(c, e.key)[1] or e.workload
    if obj is not None and structs.being_deleted(obj):
        why = f"its {kind} {workload} is being deleted; its {e.kind} is composed once it is gone"
    else:
        why = (
            f"its members need a {e.kind} in place of its {kind} {workload}, which is kept "
            "as it is (rename the engine to switch make-before-break)"
        )
    entry: dict[str, Any] = {"name": e.name, "kind": kind, "workload": workload}
    entry["ready"] = False
    entry[ENGINE_AVAILABLE] = _serving(c, e.key, kind, None)[3]
    entry["message"] = why
    return entry


def _kind_changed_message(c: _Call, plan: children.Plan, changed: dict[str, str]) -> str:
    """The ``WorkloadKindChanged`` message: the engines, the field, and what to write."""
    names = [structs.get_str(v, "name") for v in structs.items(c.inputs.xr, "spec", "engines")]
    which, live = [], False
    for e in plan.engines:
        if e.name in changed:
            at = f"spec.engines[{names.index(e.name)}]" if e.name in names else "spec.engines"
            workload = _observed_kind(c, e.key)[1] or e.workload
            old = f"{changed[e.name]} {workload}"
            if structs.being_deleted(c.inputs.observed_body(e.key)):
                # Going already (review 18a F2): the new kind follows with no edit.
                which.append(f"{at} ({e.name}): its {old} is being deleted; its {e.kind} is "
                             "composed once it is gone")  # fmt: skip
                continue
            live = True
            which.append(f"{at} ({e.name}): its members need a {e.kind} in place of its {old}")
    if not live:
        return "; ".join(which)
    return (
        "; ".join(which)
        + ". A workload cannot change kind under one name: provider-kubernetes reads an "
        "Object's workload by its manifest's kind, so it would create the new one and "
        "leave the old one running with nothing managing it. The old workload is kept as "
        "it is and nothing new is composed for the engine. To switch, rename the engine in "
        "the same edit (its name; in a ModelDeployment, spec.template.spec.engines[].name): "
        "the renamed engine is composed beside the old one, which serves until the new "
        "one does; or restore the members' roles"
    )


def _stalled_message(
    c: _Call,
    stalled: list[tuple[children.EnginePlan, str]],
    source: str | None,
    keep: list[str],
    devices: bool = False,
) -> str:
    """The ``RolloutStalled`` message: the workloads whose roll onto ``source`` (None: off
    the cache the replica had, its reference removed; ``devices``: onto new claim
    templates, a device request edited) stopped and why, what the old pods still serve,
    and what to do."""
    what = ", ".join(
        f"workload {e.workload} ({e.kind}) on cluster {c.head.clusterName}: {why}"
        for e, why in stalled
    )
    if devices:
        names = ", ".join(cl.name for e, _ in stalled for cl in e.claims) or "none"
        onto = f"rollout onto ResourceClaimTemplate {names} (a device request edited)"
        olds = "with the devices they were started with"
    elif source is None:
        onto = "rollout off the cache (spec.modelCacheRef removed)"
        olds = " and ".join(_source_name(i) for i in keep) or "the cache's PVC"
    else:
        onto = f"rollout onto {_source_name(source)}"
        olds = _old_pods_serve(c, source, keep)
    return (
        f"{onto} stalled: {what}; its old pods still serve {olds}"
        + ". A roll needs room for one surge pod per workload (maxSurge 1, maxUnavailable "
        "0): free one GPU slot per replica on the cluster for the surge pod (scale down "
        "or move another workload there), or, if the new pods do not start for another "
        "reason, see their events (kubectl describe pod); Kubernetes resumes the roll by "
        "itself once the surge pod runs"
    )


def _old_pods_serve(c: _Call, source: str, keep: list[str]) -> str:
    """What the old pods of a stalled roll onto ``source`` read: the other identities
    the replica names (``keep``: its ``status.cacheIdentities``); with none, the same
    identity when its last status served ``source`` (a roll for an image or engine
    argument change), the PVC root when it served the root (a replica of the release
    before side-by-side revisions moving to its identity's directory)."""
    olds = [i for i in keep if i != source]
    if olds:
        return " and ".join(_source_name(i) for i in olds)
    if source in _last_identities(c.inputs):
        return f"the same {_source_name(source)}"
    if structs.sub(structs.sub(c.inputs.xr, "status"), "hydration") is not None:
        return _source_name(wl.ROOT_SOURCE)
    return "what they were started on"


def _last_identities(inputs: Inputs) -> set[str]:
    """The identities the replica's last status names (``status.hydration.identity`` and
    ``status.cacheIdentities``), as written: "" included when it served the PVC root."""
    prev = structs.sub(inputs.xr, "status")
    out = {structs.get_str(prev, "hydration", "identity")}
    out.update(v for v in structs.items(prev, STATUS_CACHE_IDENTITIES) if isinstance(v, str))
    return out


def _last_reason(inputs: Inputs) -> str:
    """The reason of the last written ``ModelReady`` condition ("" when none)."""
    prev = structs.conditions(inputs.xr).get(CONDITION)
    return structs.get_str(prev, "reason") if prev is not None else ""


def _engine_status(
    c: _Call,
    e: children.EnginePlan,
    source: str | None,
    stalled: list[tuple[children.EnginePlan, str]],
    refused: dict[str, str],
    *,
    moving: bool = False,
) -> dict[str, Any]:
    """``status.engines[]`` entry of engine ``e``: whether its workload serves, and why
    not; appends ``(e, why)`` to ``stalled`` when its roll onto ``source`` stopped
    (:func:`function.manifests.workloads.rollout_stalled`). A claim template of its that
    the workload cluster refused (``refused``, :func:`_refused`) keeps it from serving;
    ``moving``: templates it claimed before are still observed (:func:`_old_claims`)."""
    serves, why, stall, answers = _serving(c, e.key, e.kind, source, (e.claim_names, moving))
    if stall:
        stalled.append((e, stall))
    for cl in e.claims:
        err = refused.get(cl.key)
        if err is not None:
            serves = False
            said = f"ResourceClaimTemplate {cl.name} not applied: {_excerpt(err)}"
            why = f"{why}; {said}" if why else said
    entry: dict[str, Any] = {"name": e.name, "kind": e.kind, "workload": e.workload}
    entry["ready"] = serves
    entry[ENGINE_AVAILABLE] = answers
    if why:
        entry["message"] = why
    return entry


def _serving(
    c: _Call,
    key: str,
    kind: str,
    source: str | None,
    claims: tuple[frozenset[str], bool] | None = None,
) -> tuple[bool, str, str | None, bool]:
    """Whether the observed workload Object serves, why not, why its roll onto
    ``source`` stalled (None unless the old pods serve while the roll stopped), and
    whether its pods answer at all, whatever template they run
    (:data:`function.api.modelreplica.ENGINE_AVAILABLE`). An Object being deleted
    (:func:`function.core.structs.being_deleted`) neither serves nor answers.

    With a cache (``source``: the identity composed, "" for the PVC root), the pods
    that serve must be those of the template that reads it: a workload whose observed
    template still reads another identity (the new one not applied yet), or that still
    runs pods of an older template (rolling make-before-break), does not serve
    ``source`` yet, though the old pods answer.

    With ``claims`` (the ResourceClaimTemplates the engine's members claim now, and
    whether templates they claimed before are still observed), a workload whose observed
    pod templates name others (a device request edited: the new template not applied
    yet), or that still runs pods of an older template while the old templates are kept,
    does not serve what the spec asks, though its pods answer.
    """
    obj = c.inputs.observed_body(key)
    if obj is None or structs.being_deleted(obj):
        # Being deleted, its status is the last one observed, not what runs (review
        # 17g F1: a name renamed back while Crossplane still deleted its Object read as
        # serving).
        why = "not created yet" if obj is None else _BEING_DELETED
        return False, why, None, False
    w = observed_workload(obj)
    if w.kind != kind:  # a manifest of another kind, or naming none: read as the plan's
        w = read_workload(obj, kind)
    if w.malformed:
        return False, "reports malformed status.conditions", None, False
    if w.sync_error:
        # The last template was not applied; what runs is what was applied before.
        return False, f"not applied: {_excerpt(w.sync_error)}", None, w.serving
    if not w.reported:
        return False, "not observed yet", None, False
    if not w.serving:
        unit = "groups ready" if kind == "LeaderWorkerSet" else "pods available"
        return False, f"{w.have}/{w.want} {unit}", None, False
    why, stall = _not_rolled(c, w, source, claims)
    return not why, why, stall, True


def _not_rolled(
    c: _Call, w: WorkloadFacts, source: str | None, claims: tuple[frozenset[str], bool] | None
) -> tuple[str, str | None]:
    """Why a workload that answers does not serve what the spec asks yet ("" when it
    does), and why its roll stalled (:func:`_serving`)."""
    if claims is not None and w.claims != claims[0]:
        # The template naming the new claims is not applied yet: nothing rolls, so
        # nothing stalls.
        return _claims_moving(w.claims, claims[0]), None
    if claims is not None and claims[1] and w.complete is False:
        onto = ", ".join(sorted(claims[0])) or "no ResourceClaimTemplate"
        why = f"rolling onto ResourceClaimTemplate {onto}: pods of the previous template still run"
        return why, w.stalled
    if source is not None:
        why = _rolled(w, source)[1]
    elif c.head.cache is None and (w.sources or c.off_cache()):
        why = _rolled_off(w)
    else:
        why = ""
    return why, w.stalled if why else None


def _rolled_off(w: WorkloadFacts) -> str:
    """Why an observed workload of a replica without a cache has not rolled off the
    cache it had ("" once it has; :meth:`_Call.off_cache`): its template still reads one,
    or pods of the previous template still run. Rollout state not known: "" (readiness
    waits only on what is known; ``status.cacheIdentities`` keeps the identities)."""
    if w.sources:
        return "rolling off the cache: the observed pods read " + ", ".join(
            _source_name(s) for s in sorted(w.sources)
        )
    if w.complete is False:
        return "rolling off the cache: pods of the previous template still run"
    return ""


def _claims_moving(have: frozenset[str], want: frozenset[str]) -> str:
    """Why a workload whose observed pod templates claim ``have`` does not serve the
    device requests of the spec (``want``): the template naming ``want`` is not applied
    yet."""
    onto = ", ".join(sorted(want)) or "no ResourceClaimTemplate"
    now = ", ".join(sorted(have)) or "none"
    return (
        f"rolling onto ResourceClaimTemplate {onto} (the devices the spec asks for): the "
        f"observed pods claim {now}"
    )


def _rolled(w: WorkloadFacts, source: str) -> tuple[bool | None, str]:
    """Whether an observed workload has rolled onto ``source``: ``(False, why)``;
    ``(True, "")``; ``(None, "")`` when not known (its templates read no cache, or its
    rollout counts are not reported).

    Readiness waits only on False (an unknown state does not hold a replica back);
    ``status.cacheIdentities`` keeps the earlier identities on anything but True (an
    unknown state never lets them be pruned)."""
    onto = f"rolling onto {_source_name(source)}"
    if w.sources and w.sources != {source}:
        return False, f"{onto}: the observed pods read " + ", ".join(
            _source_name(s) for s in sorted(w.sources)
        )
    if w.complete is False:
        return False, f"{onto}: pods of the previous template still run"
    return (True if w.sources and w.complete else None), ""


def _source_name(source: str) -> str:
    """``identity <id>``, or ``the PVC root`` for ``workloads.ROOT_SOURCE``."""
    return f"identity {source}" if source else "the PVC root"


def _hold_observed(inputs: Inputs, out: Outcome) -> bool:
    """Keep every observed child exactly; True when a workload is among them."""
    out.keep_observed(inputs)
    return any(key.startswith(WORKLOAD_PREFIX) for key in inputs.observed)


def _pools_known(cluster_req: Resolved) -> bool:
    """Whether the cluster's ``status.gpuPools`` is a list (``[]`` included)."""
    v = structs.get(structs.sub(cluster_req.items[0], "status"), STATUS_GPU_POOLS)
    return isinstance(v, ListValue)


def _unresolved(c: _Call, what: str = "") -> Outcome:
    """A requirement is not resolved yet (or what it holds is not known: ``what``):
    keep everything, echo the last status; not ready, stated (with every requirement
    resolved, the runner would leave it unspecified: the fuzzer's case 573 of m17)."""
    inputs, out = c.inputs, c.out
    _hold_observed(inputs, out)
    for key, kind in _STATUS_FIELDS.items():
        v = inputs.status(key)
        if isinstance(v, kind):
            out.status[key] = v
    c.times.write(out.status)
    out.condition(CONDITION, "Unknown", "Resolving", what or "waiting for required resources")
    out.ready = False
    return out


def _kept_engines(c: _Call) -> list[dict[str, Any]]:
    """``status.engines`` of a gated replica whose workloads are kept: none ready (the
    gate holds it), each ``available`` as its kept workload answers (:func:`_serving`,
    read as the kind it was composed as), so a deployment moving it make-before-break
    (its pool left ``gpuPools``, its cluster left the list) knows its pods still serve
    (review 14d: it was dropped one call after its move started, with no replacement
    serving yet)."""
    kept = []
    for key in sorted(c.inputs.observed):
        obj = c.inputs.observed_body(key) if key.startswith(WORKLOAD_PREFIX) else None
        manifest = structs.get(structs.sub(obj, "spec"), "forProvider", "manifest")
        if not isinstance(manifest, Struct):
            continue
        kind = structs.get_str(manifest, "kind") or "Deployment"
        entry: dict[str, Any] = {"name": key[len(WORKLOAD_PREFIX) :], "kind": kind}
        entry.update(workload=structs.get_str(manifest, "metadata", "name"), ready=False)
        entry[ENGINE_AVAILABLE] = _serving(c, key, kind, None)[3]
        kept.append(entry)
    return kept


def _gate(c: _Call, gate: Gate) -> Outcome:
    """Apply ``gate``: compose nothing new, keep what exists exactly; not ready."""
    inputs, out, times = c.inputs, c.out, c.times
    if gate.cache_gate and times.serving_since is None:
        times.hydration_ready = None
    message = gate.message
    if _hold_observed(inputs, out):
        message = f"{message}; the existing workload is kept as it is"
    status: dict[str, Any] = {"phase": gate.phase, "message": message}
    kept = _kept_engines(c)
    if kept:
        status["engines"] = kept
    cluster = structs.get_str(inputs.xr, "spec", "clusterName")
    if cluster:
        status["cluster"] = cluster
    if gate.hydration is not None:
        status["hydration"] = gate.hydration
    _write_cache_identities(c, status, None)
    times.write(status)
    out.status.update(status)
    out.condition(CONDITION, "False", gate.reason, message)
    if gate.warn and _last_reason(inputs) != gate.reason:
        # Once per episode (as RolloutStalled): the condition carries it meanwhile.
        out.warning(message, gate.reason)
    out.ready = False
    out.requeue_after(inputs.settings.poll_seconds)
    return out
