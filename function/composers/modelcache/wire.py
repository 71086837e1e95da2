"""ModelCache: the memoized ModelCacheShard bodies and their pre-encoded entries (no
decisions here; see ``footprint`` and ``rollup``)."""

from __future__ import annotations

import json
from typing import NamedTuple

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.modelcacheshard import KIND
from function.core.memo import memo
from function.edge.codec import state_entry
from function.naming import (
    LABEL_CACHE,
    LABEL_MANAGED_BY,
    LABEL_SHARD,
    MANAGED_BY,
    composed_metadata,
    shard_name,
)

CHILD_PREFIX = "shard-"

Entries = tuple[tuple[str, str], ...]
"""A shard's ``spec.clusters``: ``(name, unavailable or "")`` sorted by name."""


class ShardKey(NamedTuple):
    """What determines one desired ModelCacheShard (a tuple: hashed and compared in C).

    Attributes:
        namespace: The ModelCache's namespace.
        cache: The ModelCache's name.
        source_json: The canonical JSON of the cache's ``source`` and ``huggingFace``.
        shard: The shard's number.
        entries: The shard's clusters (:data:`Entries`).
    """

    namespace: str
    cache: str
    source_json: str
    shard: int
    entries: Entries


def child_key(shard: int) -> str:
    """The composition-resource name of shard ``shard``: ``shard-<n>``."""
    return f"{CHILD_PREFIX}{shard}"


@memo(4096, weight=4)
def shard_body(key: ShardKey) -> Struct:
    """The desired ModelCacheShard ``key.shard`` of ``key.cache`` (memoized, shared,
    read-only).

    ``spec {cacheName, shard, source, huggingFace, clusters[] {name, unavailable?}}``;
    labels ``LABEL_CACHE``, ``LABEL_SHARD`` and managed-by.
    """
    namespace, cache, source_json, shard, entries = key
    meta = composed_metadata(
        shard_name(namespace, cache, shard),
        namespace,
        {LABEL_CACHE: cache, LABEL_SHARD: str(shard), LABEL_MANAGED_BY: MANAGED_BY},
    )
    clusters = [{"name": n, "unavailable": why} if why else {"name": n} for n, why in entries]
    body = Struct()
    body.update(
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": meta,
            "spec": {
                "cacheName": cache,
                "shard": shard,
                **json.loads(source_json),
                "clusters": clusters,
            },
        }
    )
    return body


@memo(8192, weight=2)
def shard_entry(key: ShardKey, ready: bool) -> bytes:
    """The shard as a pre-encoded desired-resources entry (memoized)."""
    return state_entry(child_key(key.shard), shard_body(key), ready)
