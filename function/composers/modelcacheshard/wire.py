"""ModelCacheShard: memoized bodies and pre-encoded entries, and the reuse of an
unchanged ``status.clusters[]`` (no decisions here; see ``rows``)."""

from __future__ import annotations

import json

from google.protobuf.struct_pb2 import ListValue, Struct

from function import API_VERSION
from function.core import structs
from function.core.inputs import Inputs
from function.core.memo import memo
from function.edge.codec import state_entry
from function.naming import (
    LABEL_CACHE,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    composed_metadata,
    hydration_name,
)

CHILD_PREFIX = "hydration-"

Row = tuple[str, str, str, "Struct | None", bool]
"""One ``status.clusters[]`` entry: name, phase, message, evidence, retained."""


def child_key(cluster: str) -> str:
    """The composition-resource name of the hydration on ``cluster``."""
    return CHILD_PREFIX + cluster


@memo(16384, weight=4)
def hydration_body(namespace: str, cache: str, source_json: str, cluster: str) -> Struct:
    """The desired ModelCacheHydration of ``cache`` on ``cluster`` (memoized).

    A pure function of its arguments, memoized because the same bodies are desired on
    every reconcile (the hot path at fleet scale). The returned Struct is shared:
    callers only read or copy it (the runner copies it into the response). Name and
    labels are the contract the ModelDeployment and ModelReplica read
    (``naming.hydration_name``, ``LABEL_CACHE``, ``LABEL_CLUSTER``).
    """
    meta = composed_metadata(
        hydration_name(namespace, cache, cluster),
        namespace,
        {LABEL_CACHE: cache, LABEL_CLUSTER: cluster, LABEL_MANAGED_BY: MANAGED_BY},
    )
    body = Struct()
    body.update(
        {
            "apiVersion": API_VERSION,
            "kind": "ModelCacheHydration",
            "metadata": meta,
            "spec": {"clusterName": cluster, "cacheName": cache, **json.loads(source_json)},
        }
    )
    return body


@memo(32768, weight=4)
def hydration_entry(
    namespace: str, cache: str, source_json: str, cluster: str, ready: bool
) -> bytes:
    """The hydration of ``cluster`` as a pre-encoded desired-resources entry (memoized)."""
    body = hydration_body(namespace, cache, source_json, cluster)
    return state_entry(child_key(cluster), body, ready)


def previous_rows(inputs: Inputs) -> tuple[list[Row], ListValue | None]:
    """The ``status.clusters[]`` the function wrote last time, as rows, and the list itself.

    Rows are None-padded reads; an entry with fields this function does not write makes
    the list unusable for reuse (its rows still serve to detect transitions).
    """
    rows: list[Row] = []
    entries = structs.get(inputs.xr, "status", "clusters")
    if not isinstance(entries, ListValue):
        return rows, None
    reusable = True
    for v in entries.values:
        f = v.struct_value.fields
        n, p, m = f.get("name"), f.get("phase"), f.get("message")
        ev, rt = f.get("evidence"), f.get("retained")
        rows.append(
            (
                n.string_value if n is not None else "",
                p.string_value if p is not None else "",
                m.string_value if m is not None else "",
                ev.struct_value if ev is not None else None,
                rt.bool_value if rt is not None else False,
            )
        )
        if len(f) != 3 + (ev is not None) + (rt is not None):
            reusable = False
    return rows, entries if reusable else None


def same_rows(a: list[Row], b: list[Row]) -> bool:
    """True when two row lists would serialize to the same ``status.clusters``."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x[0] != y[0] or x[1] != y[1] or x[2] != y[2] or x[4] != y[4]:
            return False
        if (x[3] is None) != (y[3] is None) or (x[3] is not None and x[3] != y[3]):
            return False
    return True


def entries(rows: list[Row]) -> ListValue:
    """Build ``status.clusters[]`` from rows."""
    out = ListValue()
    values = out.values
    for name, phase, message, evidence, retained in rows:
        f = values.add().struct_value.fields
        f["name"].string_value = name
        f["phase"].string_value = phase
        f["message"].string_value = message
        if evidence is not None:
            f["evidence"].struct_value.CopyFrom(evidence)
        if retained:
            f["retained"].bool_value = True
    return out


@memo(4096, weight=4)
def source_status(repo: str, revision: str, identity: str) -> Struct:
    """``status.source {repo, revision, identity}``: the source the roll-up describes
    (shared, read-only; the runner copies it)."""
    s = Struct()
    s.update({"repo": repo, "revision": revision, "identity": identity})
    return s
