"""Placement's records: the fleet as placement sees it, the request and the outcome.

Shapes mirror the InferenceCluster status (``status.gpuPools[]``) and the ModelDeployment
spec; the rules that read them are in :mod:`function.scheduling.placement`.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from function.scheduling.devices import Device, DeviceRequest
from function.scheduling.selectors import LabelSelector
from function.scheduling.tolerations import Taint, Toleration


@dataclass(frozen=True, slots=True)
class Pool:
    """A GPU pool of a cluster: ``status.gpuPools[]``."""

    name: str
    nodes: int
    devices: tuple[Device, ...] = ()


@dataclass(frozen=True, slots=True)
class Cluster:
    """An InferenceCluster as placement sees it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    taints: tuple[Taint, ...] = ()
    pools: tuple[Pool, ...] = ()
    pools_known: bool = True
    """False when ``status.gpuPools`` is absent or not a list (not written yet, or lost
    in a restore): no new replica fits, and an existing one keeps its pools."""

    def pool(self, name: str) -> Pool | None:
        """The pool called ``name``, or None."""
        for p in self.pools:
            if p.name == name:
                return p
        return None


@dataclass(frozen=True, slots=True)
class Member:
    """One member of an engine: its pods per copy and its device requests."""

    role: str
    pods: int = 1
    requests: tuple[DeviceRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine: ``copies`` of its members."""

    name: str
    copies: int
    members: tuple[Member, ...]

    def cost(self, i: int) -> int:
        """Nodes member ``i`` takes: pods times copies."""
        return self.members[i].pods * self.copies


MemberKey = tuple[str, int]
"""(engine name, member index)."""


@dataclass(frozen=True, slots=True)
class Existing:
    """A replica of this deployment that exists (observed)."""

    index: int
    cluster: str
    pools: Mapping[MemberKey, str] = field(default_factory=dict)
    serving: bool = False
    """The replica serves (its ``ModelReady`` is True, or its pods answer while its
    workload rolls): a retiring replica goes only once enough replicas serve
    elsewhere."""
    identity: str = ""
    """The cache's source identity it serves (its spec's ``modelCacheRef.identity``;
    "" when unset or without a cache)."""
    serves: str = ""
    """The identity its workload serves when its spec names none (its last
    ``status.hydration.identity``, ``function.api.modelreplica.status_identity``); ""
    otherwise."""
    reads_root: bool = False
    """Its workload reads the cache PVC root (a replica of the release before side-by-side
    revisions, ``function.api.modelreplica.reads_pvc_root``): the side-by-side layout
    never writes or prunes the root, so a Failed hydration does not take what it serves."""
    ready: bool = False
    """Its ``ModelReady`` is True: of replicas moving, those ready stay before those whose
    pods only answer (mid-roll)."""


class CacheIdentities(Protocol):
    """What placement reads of the cache's hydrations beyond their phases."""

    def stored(self, cluster: str) -> frozenset[str]:
        """The identities complete on ``cluster``'s cache PVC (the hydration's
        ``status.stored``; empty without a hydration)."""
        ...

    def failure(self, cluster: str) -> tuple[str, str]:
        """``(identity, message)`` of ``cluster``'s hydration when it is Failed: the
        source identity it failed for and its message; ``("", "")`` otherwise."""
        ...


@dataclass(frozen=True, slots=True)
class Placed:
    """Where one replica runs."""

    index: int
    cluster: str
    pools: Mapping[MemberKey, str]
    existing: bool
    hydration: str | None = None
    """The cluster's hydration phase (None without a cache)."""


@dataclass(frozen=True, slots=True)
class Removed:
    """An existing replica that placement drops, and why.

    ``scaled_down`` is True when it goes because fewer replicas are wanted; False when
    it is *displaced*: its cluster stopped being eligible (gone, no longer selected,
    an untolerated ``NoExecute`` taint, outside the cache footprint, no longer fits)
    or it is moved off a cluster that is not Ready or whose hydration Failed.
    """

    index: int
    cluster: str
    why: str
    scaled_down: bool = False


@dataclass(frozen=True, slots=True)
class Moving:
    """An existing replica due to move (its cluster is not Ready, or its hydration
    Failed with nothing it serves stored there) that still serves: it stays, beside its
    replacement, until enough replicas serve elsewhere (make-before-break), then goes
    as a :class:`Removed` one."""

    index: int
    cluster: str
    why: str
    starts: bool = True
    """The move starts in this call (no ``Request.displaced`` record of it yet)."""


@dataclass
class Placement:
    """The outcome of :func:`place`.

    Attributes:
        replicas: Every replica that should exist, sorted by index.
        removed: Existing replicas dropped, sorted by index.
        reason: Why fewer replicas than wanted are placed (None when all are).
        message: A sentence for the condition, naming what was checked.
        held: See the field.
        moving: See the field.
    """

    replicas: list[Placed]
    removed: list[Removed]
    reason: str | None
    message: str
    held: list[int] = field(default_factory=list)
    """Indexes of replicas kept serving what they serve on a cluster whose hydration
    Failed for the cache's new identity (not moved, not removed): the identity still
    stored there, or the PVC root (:attr:`Existing.reads_root`)."""
    moving: list[Moving] = field(default_factory=list)
    """Replicas due to move kept serving until replacements serve, sorted by index
    (they are in ``replicas`` too)."""
    stuck: list[Moving] = field(default_factory=list)
    """Replicas due to move for which no replacement fits: they stay as placed (in
    ``replicas`` too), named in ``message``."""
    deferred: list[Moving] = field(default_factory=list)
    """Replicas due to move (or retiring) whose move waits for room under
    ``Request.surge``: they stay as placed, count toward ``replicas`` like any other, and
    get no replacement in this call (in ``replicas`` too), sorted by index. The caller
    says why there is no room (placement does not know the bound's cause)."""


@dataclass(frozen=True)
class Request:
    """What placement needs.

    Attributes:
        replicas: How many replicas the deployment wants.
        engines: The engines of every replica.
        selector: The deployment's own cluster selector.
        tolerations: The deployment's tolerations.
        clusters: Every InferenceCluster matching the selector's equality part
            (placement applies the whole selector again).
        used: Nodes used per ``(cluster, pool)`` by replicas of *other*
            deployments. Read only with ``.get((cluster, pool), 0)``, and only for the
            clusters placement looks at (an existing replica's cluster for scale-down,
            the clusters the new replicas' walk reaches), so it may be a mapping that
            reads each cluster's usage when first asked and records what was asked.
        existing: This deployment's replicas that exist.
        footprint: With a cache: cluster name to its hydration phase (every
            hydration, Failed too); None without a cache.
        cache: The cache's name (for messages), or None.
        identities: With a cache, the identities its hydrations store and what a
            Failed one failed for (:class:`CacheIdentities`); None reads as nothing
            stored.
        retained: Clusters of the footprint that the cache keeps only while a live
            replica uses them (they left its ``clusterSelector``): no new replica goes
            there, and replicas there retire make-before-break. Read only with ``in``
            (a caller may decide each cluster when asked).
        surge: How many replicas may be kept beside their replacements at once (moves
            make-before-break: replicas due to move that serve, retiring ones), or None
            for no bound. The replicas composed are then at most ``replicas + surge``.
            The moves past it are *deferred* (``Placement.deferred``): the replica stays
            where it is, counted as placed, with no replacement, until a move in flight
            ends (its replacement serves, the old one goes) and a later call has room.
            Moves go in this order: those already started (in ``displaced``), then those
            off a cluster that is gone, not Ready or whose hydration Failed (or absent),
            then those off a cluster merely no longer eligible (selector, footprint,
            pools, retained); by index within each. A replica due to move that does not
            serve is never deferred: it goes once its replacement is placed.
        displaced: Indexes of existing replicas the deployment recorded as displaced
            (its ``status.displaced[]``): a replica that serves and moves stays beside its
            replacement until that serves, then goes as moved; without the record (a
            status write lost) it goes as scaled down, which it is indistinguishable from.
        fleet: Instead of ``clusters``, a mapping of cluster name to Cluster that may
            build each Cluster when it is first read (iteration yields the names):
            placement reads only the clusters it needs (the existing replicas'
            clusters; every cluster only when new replicas are placed or some are
            missing), so a caller with thousands of clusters pays for those alone.
    """

    replicas: int
    engines: tuple[Engine, ...]
    selector: LabelSelector
    tolerations: tuple[Toleration, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    used: Mapping[tuple[str, str], int] = field(default_factory=dict)
    existing: tuple[Existing, ...] = ()
    footprint: Mapping[str, str] | None = None
    cache: str | None = None
    fleet: Mapping[str, Cluster] | None = None
    retained: Container[str] = frozenset()
    identities: CacheIdentities | None = None
    displaced: frozenset[int] = frozenset()
    surge: int | None = None
