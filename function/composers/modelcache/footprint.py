"""ModelCache decisions: which clusters the selector matches, which can host a cache,
the shard of each, and which shards stay desired (no wire bytes here)."""

from __future__ import annotations

from google.protobuf.struct_pb2 import Struct

from function.api import inferencecluster
from function.api.modelcacheshard import ShardReport, spec_hash
from function.core import structs, versioned
from function.core.inputs import Resolved
from function.naming import cache_shard
from function.scheduling.selectors import LabelSelector

Entries = tuple[tuple[str, str], ...]


def match(clusters: Resolved, selector: LabelSelector) -> tuple[dict[str, str], dict[int, Entries]]:
    """The footprint: matched cluster name -> why it cannot host a cache ("" when it can),
    and the shard number -> its ``spec.clusters`` entries, sorted by name.

    The full selector with Kubernetes semantics (the requirement carried only its
    ``matchLabels``). A cluster's shard is ``naming.cache_shard`` of its name only: a
    cluster never moves between shards, whatever the fleet or the footprint (a moved
    hydration would be deleted with its PVC by the shard that stopped desiring it).

    Both are shared between calls that get the same clusters at the same versions
    (:func:`function.core.versioned.over_versions`): never mutate them.
    """
    return _footprint(clusters.items, clusters.versions, selector)


@versioned.over_versions(256, weight=8)
def _footprint(
    items: tuple[Struct, ...],
    versions: tuple[versioned.Version | None, ...] | None,
    selector: LabelSelector,
) -> tuple[dict[str, str], dict[int, Entries]]:
    matched: dict[str, str] = {}
    matches = selector.matches
    facts, problem = versioned.object_facts, inferencecluster.host_problem
    for c, version in zip(items, versions or (...,) * len(items), strict=True):
        f = facts(c, version)
        # A label value that is not a string (only in a malformed request) reads as "".
        labels = f.labels if not f.odd_labels else {**dict.fromkeys(f.odd_labels, ""), **f.labels}
        if f.name and matches(labels):
            matched[f.name] = problem(c, version)
    buckets: dict[int, list[tuple[str, str]]] = {}
    for name in sorted(matched):
        buckets.setdefault(cache_shard(name), []).append((name, matched[name]))
    return matched, {n: tuple(v) for n, v in buckets.items()}


def keep_draining(observed: Struct, report: ShardReport, identity: str, shard: int) -> bool:
    """Whether an observed shard whose clusters all left the footprint stays desired.

    It stays (with no clusters) until it has been told so and reports that it keeps
    no hydration: while a live replica uses one of its hydrations it keeps that one,
    and a shard not yet known to have let go is "not known", never "empty".
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
    return report.hydrations is None or report.hydrations > 0
