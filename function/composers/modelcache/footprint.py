"""ModelCache decisions: which clusters the selector matches, which can host a cache,
the shard of each, and which shards stay desired (no wire bytes here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from google.protobuf.struct_pb2 import Struct

from function.api import inferencecluster
from function.api.inferencecluster import KUBECONFIG_FIELD, kubeconfig_secret
from function.api.modelcacheshard import ShardReport, hydrated_clusters, spec_hash
from function.core import structs, versioned
from function.core.inputs import Resolved
from function.core.timeutil import parse_time
from function.naming import cache_shard
from function.scheduling.selectors import LabelSelector

Entries = tuple[tuple[str, str], ...]


class Shared(NamedTuple):
    """InferenceClusters that name one kubeconfig Secret, so reach one workload cluster.

    Attributes:
        secret: ``(name, key)`` of ``spec.cluster.existing.secretRef``
            (:func:`function.api.inferencecluster.kubeconfig_secret`).
        matched: The members the selector matches, oldest first (:func:`_age`): the
            first is the one the cache uses there, every other one is matched with a
            reason (:func:`shared_reason`) and gets no new hydration.
        others: The members the selector does not match, by name (they count only
            through a hydration they still have: :func:`guard`).
        shards: ``cache_shard`` of each of ``(*matched, *others)``, in that order
            (computed once, inside the memo of :func:`match`, not on every call).
    """

    secret: tuple[str, str]
    matched: tuple[str, ...]
    others: tuple[str, ...]
    shards: tuple[int, ...]


class Guarded(NamedTuple):
    """A :class:`Shared` group as this call sees it (:func:`guard`).

    Attributes:
        group: The group.
        hydrated: Its members that have a hydration of the cache (their shard lists
            one), in the group's order (matched oldest first, then the others).
        blocked: Whether a member other than the one used has a hydration there: then
            nothing new is composed on that workload cluster, the one used included.
    """

    group: Shared
    hydrated: tuple[str, ...]
    blocked: bool


Footprint = tuple[dict[str, str], dict[int, Entries], tuple[Shared, ...]]


def match(clusters: Resolved, selector: LabelSelector) -> Footprint:
    """The footprint: matched cluster name -> why it cannot host a cache ("" when it can),
    the shard number -> its ``spec.clusters`` entries, sorted by name, and the groups of
    clusters that name one kubeconfig Secret (:class:`Shared`, by the name of the one
    used).

    The full selector with Kubernetes semantics (the requirement carried only its
    ``matchLabels``). A cluster's shard is ``naming.cache_shard`` of its name only: a
    cluster never moves between shards, whatever the fleet or the footprint (a moved
    hydration would be deleted with its PVC by the shard that stopped desiring it).

    A cluster being deleted (``metadata.deletionTimestamp``,
    :func:`function.core.structs.being_deleted`) is not matched, whatever its labels:
    it leaves the footprint as one the selector dropped does (README, "One
    InferenceCluster per workload cluster").

    One InferenceCluster per workload cluster (README): remote object names do not
    include the InferenceCluster, so two hydrations of one cache on one workload
    cluster would own the same PVC, token Secret and Job, and the one that goes deletes
    the PVC the other's replicas mount. Of the matched clusters that name the same
    Secret only the oldest (``metadata.creationTimestamp``, then name: never the order
    Crossplane sends them in) is used; each other one is matched with the reason
    :func:`shared_reason`, so it gets no new hydration and one it has is kept.

    All three are shared between calls that get the same clusters at the same versions
    (:func:`function.core.versioned.over_versions`): never mutate them. O(clusters).
    """
    return _footprint(clusters.items, clusters.versions, selector)


def shared_reason(used: str) -> str:
    """Why a matched cluster that shares its kubeconfig Secret with ``used`` gets no
    new hydration (the ``unavailable`` of its shard entry)."""
    return (
        f"names the same {KUBECONFIG_FIELD} as InferenceCluster {used}, which this cache "
        "uses on that workload cluster"
    )


def blocked_reason(holder: str) -> str:
    """Why the cluster used gets no new hydration while ``holder``, which shares its
    kubeconfig Secret, has one there."""
    return (
        f"InferenceCluster {holder}, which names the same {KUBECONFIG_FIELD}, has a "
        "hydration of this cache on that workload cluster"
    )


def _age(cluster: Struct, name: str) -> tuple[int, float, str]:
    """The order of creation: ``metadata.creationTimestamp``, then name; a cluster
    without a valid timestamp (a hand-written request) after every one with one."""
    t = parse_time(structs.get(cluster, "metadata", "creationTimestamp"))
    return (0, t.timestamp(), name) if t is not None else (1, 0.0, name)


@versioned.over_versions(256, weight=8)
def _footprint(
    items: tuple[Struct, ...],
    versions: tuple[versioned.Version | None, ...] | None,
    selector: LabelSelector,
) -> Footprint:
    matched: dict[str, str] = {}
    by_secret: dict[tuple[str, str], list[tuple[Struct, str]]] = {}
    matches = selector.matches
    facts, problem = versioned.object_facts, inferencecluster.host_problem
    for c, version in zip(items, versions or (...,) * len(items), strict=True):
        f = facts(c, version)
        if not f.name:
            continue
        # A label value that is not a string (only in a malformed request) reads as "".
        labels = f.labels if not f.odd_labels else {**dict.fromkeys(f.odd_labels, ""), **f.labels}
        # A cluster being deleted (foreground: the API server keeps it until its
        # dependents are gone) has left the fleet, like one the selector dropped: its
        # hydration is kept only while a replica still runs there (the shard's rule),
        # so its Objects release its provider config and the deletion completes.
        if matches(labels) and not structs.being_deleted(c):
            matched[f.name] = problem(c, version)
        secret = kubeconfig_secret(c, version)
        if secret is not None:
            by_secret.setdefault(secret, []).append((c, f.name))
    shared = []
    for secret, members in by_secret.items():
        if len(members) < 2:
            continue
        ours = sorted((_age(c, n) for c, n in members if n in matched))
        if not ours:
            continue
        used = ours[0][2]
        for _, _, name in ours[1:]:
            matched[name] = shared_reason(used)
        others = tuple(sorted(n for _, n in members if n not in matched))
        used_here = tuple(a[2] for a in ours)
        where = tuple(cache_shard(n) for n in (*used_here, *others))
        shared.append(Shared(secret, used_here, others, where))
    buckets: dict[int, list[tuple[str, str]]] = {}
    for name in sorted(matched):
        buckets.setdefault(cache_shard(name), []).append((name, matched[name]))
    shared.sort(key=lambda g: g.matched[0])
    return matched, {n: tuple(v) for n, v in buckets.items()}, tuple(shared)


def guard(
    shared: tuple[Shared, ...],
    matched: dict[str, str],
    shards: dict[int, Entries],
    observed: Mapping[int, Struct],
) -> tuple[dict[str, str], dict[int, Entries], list[Guarded]]:
    """Never a second hydration of the cache on one workload cluster.

    A group's first matched cluster is used there unless another member already has a
    hydration of this cache (composed before this check, or while it was the one used
    or selected): then it is matched with :func:`blocked_reason` too, so nothing new is
    composed there and every hydration that exists is kept (bad input loses nothing).
    Who has one is read from each member's observed shard (:func:`hydrated_clusters`,
    once per shard): a hydration that shard no longer desires counts until it reports it
    gone (its ``Deleting`` row), so the next one on that workload cluster is composed
    only once the first one's PVC and Job are deleted.

    Args:
        shared: The groups (:func:`match`).
        matched: The shared footprint of :func:`match` (not mutated).
        shards: Its shard entries (not mutated).
        observed: The observed shards by number.

    Returns:
        ``matched`` and ``shards`` (new ones when a cluster is blocked), and the groups
        the cache reports: two matched members or more, or one blocked. O(members),
        with one read of each shard holding a member.
    """
    if not shared:
        return matched, shards, []
    touched = {n for g in shared for n in g.shards}
    by_shard = {n: _rows(observed.get(n)) for n in touched}
    return _guard(shared, matched, shards, by_shard)


_NO_ROWS: frozenset[str] = frozenset()


def _rows(shard: Struct | None) -> frozenset[str]:
    """The clusters an observed shard reports a hydration of (none when not observed)."""
    return hydrated_clusters(shard) if shard is not None else _NO_ROWS


def _guard(
    shared: tuple[Shared, ...],
    matched: dict[str, str],
    shards: dict[int, Entries],
    by_shard: dict[int, frozenset[str]],
) -> tuple[dict[str, str], dict[int, Entries], list[Guarded]]:
    """:func:`guard` once the rows of every shard holding a member are read."""

    def has(name: str, n: int) -> bool:
        return name in by_shard[n]

    blocked: dict[str, str] = {}
    out: list[Guarded] = []
    for g in shared:
        used = g.matched[0]
        names = (*g.matched, *g.others)
        hydrated = tuple(n for n, k in zip(names, g.shards, strict=True) if has(n, k))
        holder = next((n for n in hydrated if n != used), None)
        if holder is not None:
            blocked[used] = blocked_reason(holder)
        if len(g.matched) > 1 or holder is not None:
            out.append(Guarded(g, hydrated, holder is not None))
    if not blocked:
        return matched, shards, out
    matched = {**matched, **blocked}
    shards = dict(shards)
    for n in {cache_shard(name) for name in blocked}:
        shards[n] = tuple((name, blocked.get(name, why)) for name, why in shards[n])
    return matched, shards, out


def keep_draining(observed: Struct, report: ShardReport, identity: str, shard: int) -> bool:
    """Whether an observed shard whose clusters all left the footprint stays desired.

    It stays (with no clusters) until it has been told so and reports that it keeps
    no hydration and that none it dropped is still being deleted (``summary.deleting``,
    None when not reported; its ``Deleting`` rows are what :func:`guard` reads): while a
    live replica uses one of its hydrations it keeps that one, and a shard not yet
    known to have let go is "not known", never "empty".
    Dropping it then deletes nothing but the empty shard.

    The report counts only when it describes the spec the cache desires for the
    shard now: no clusters, source ``identity`` (``status.specHash`` equals
    ``spec_hash(identity, shard, ())``). A status written for an older spec (say
    ``hydrations: 0`` from when its only cluster was matched unavailable and had no
    hydration yet) says nothing of what the draining shard keeps: dropping the shard
    on it would delete, with the shard, a hydration and PVC a live replica still reads.
    """
    if structs.items(observed, "spec", "clusters"):
        return True
    if report.spec_hash != spec_hash(identity, shard, ()):
        return True
    if report.deleting is None or report.deleting > 0:
        return True
    return report.hydrations is None or report.hydrations > 0
