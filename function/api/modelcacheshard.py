"""ModelCacheShard: its spec (written by the ModelCache) and its status contract.

A ModelCacheShard is never authored: the ModelCache composes one per shard of its
footprint (``naming.cache_shard``: a pure function of the cluster's name, 64 shards),
and each shard composes one ModelCacheHydration per cluster of its spec. This module
owns the fields both sides read:

- ``spec`` (:class:`ShardSpec`): ``cacheName``, ``shard`` (0-63), the source
  (``source``, ``huggingFace``, as :class:`function.api.modelcache.CacheSource`), and
  ``clusters[] {name, unavailable?}``: the matched clusters of this shard, sorted by
  name; ``unavailable`` says why a cluster cannot host a cache (it gets no new
  hydration; an existing one is kept).
- ``status`` (written by the shard, read by the ModelCache's roll-up):
  ``specHash`` (:func:`spec_hash` of the spec the status describes), ``namesHash``
  (:func:`names_hash`: the same without the clusters' availability), ``source``,
  ``summary {ready: "r/n", total, hydrations, retained, deleting, phases {<phase>:
  count}}`` (``deleting``: hydrations the shard no longer desires that are still there,
  Crossplane deleting them),
  ``evidence[] {commit, digest, clusters, validated}`` (one entry per distinct
  artifact among the Ready clusters), ``failed[] / unavailable[] / retained[]
  {name, message}``, ``waiting[]`` (names) and ``clusters[]`` (one row per cluster of
  the shard, as the ModelCache wrote them before issue 17, plus one row in phase
  :data:`DELETING` per hydration of a cluster that left the shard while Crossplane
  deletes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf.struct_pb2 import ListValue, Struct
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from function.api.modelcache import UNAVAILABLE as UNAVAILABLE
from function.api.modelcachehydration import PHASES as PHASES
from function.core import structs, versioned
from function.core.errors import pydantic_errors
from function.core.memo import memo
from function.core.numbers import WholeInt, finite_int
from function.naming import CACHE_SHARDS, name_hash

KIND = "ModelCacheShard"
# Phase of a status.clusters[] row whose cluster left the shard and whose hydration the
# shard no longer desires but which is still there: Crossplane is deleting it (and,
# before it, its Objects and the PVC, token Secret and Job they own on the cluster).
DELETING = "Deleting"
# Lists a shard writes to its status are cut at these lengths (the counts stay whole).
MAX_LISTED = 20
MAX_WAITING = 5
MAX_RETAINED = 1000


class ShardCluster(BaseModel):
    """One matched cluster of the shard; ``unavailable`` when it cannot host a cache."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=253)
    unavailable: str | None = Field(default=None, max_length=1024)


class ShardSpec(BaseModel):
    """``spec`` of a ModelCacheShard (the source fields are parsed separately)."""

    model_config = ConfigDict(extra="allow", strict=True)

    cacheName: str = Field(min_length=1, max_length=253)
    shard: WholeInt = Field(ge=0, lt=CACHE_SHARDS)
    clusters: list[ShardCluster] = Field(default_factory=list, max_length=100_000)


def parse_spec(spec: dict[str, Any]) -> ShardSpec:
    """Validate ``spec.cacheName``, ``spec.shard`` and ``spec.clusters``.

    Raises:
        SpecError: naming the first invalid field (``spec.clusters[3].name`` ...).
    """
    try:
        return ShardSpec.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors("spec", e) from None


@memo(8192, weight=2)
def spec_hash(identity: str, shard: int, clusters: tuple[tuple[str, str], ...]) -> str:
    """What a shard's status describes: ``name_hash`` of the source identity, the shard
    number and each ``(name, unavailable or "")`` of ``spec.clusters`` in order.

    The ModelCache counts a shard's status only when its ``status.specHash`` equals the
    hash of the spec it desires now; otherwise every cluster of that shard reads Pending
    (the status describes another footprint or source).
    """
    parts = ["modelcache-shard-spec", identity, str(shard)]
    for name, why in clusters:
        parts += (name, why)
    return name_hash(tuple(parts))


@memo(8192, weight=2)
def names_hash(identity: str, shard: int, names: tuple[str, ...]) -> str:
    """``name_hash`` of the source identity, the shard number and the cluster names of
    ``spec.clusters`` in order, without their ``unavailable`` reasons: a status whose
    ``namesHash`` matches describes the same clusters and source, and differs from the
    current spec at most in which clusters may get a new hydration (see
    ``function.composers.modelcache.rollup.Rollup.add``)."""
    return name_hash(("modelcache-shard-names", identity, str(shard), *names))


@dataclass
class ShardReport:
    """A shard's status as the ModelCache reads it (see the module docstring)."""

    spec_hash: str = ""
    names_hash: str = ""
    identity: str = ""
    """The source identity the status describes (``status.source.identity``)."""
    total: int = 0
    hydrations: int | None = None
    deleting: int | None = None
    """Hydrations being deleted (``summary.deleting``); None when not reported."""
    phases: dict[str, int] = field(default_factory=dict)
    evidence: list[tuple[str, str, int, int]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    unavailable: list[tuple[str, str]] = field(default_factory=list)
    retained: list[tuple[str, str]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)


def _pairs(st: Any, key: str) -> list[tuple[str, str]]:
    """``[{name, message}]`` at ``key`` of the status field map ``st`` as pairs."""
    v = st.get(key)
    if v is None or not v.HasField("list_value"):
        return []
    out = []
    for e in v.list_value.values:
        if e.HasField("struct_value"):
            f = e.struct_value.fields
            out.append((_str(f, "name"), _str(f, "message")))
    return out


def _count(v: Any) -> int:
    """A count from the status: a finite number of at least 0, else 0 (not known)."""
    n = finite_int(v)
    return n if n is not None and n >= 0 else 0


def _str(fields: Any, key: str) -> str:
    """The string at one key of a Struct's field map; "" when absent or not a string
    (``string_value`` of a Value holding another kind is "", what ``get_str`` reads)."""
    v = fields.get(key)
    return v.string_value if v is not None else ""


def _at(fields: Any, key: str) -> Any:
    """``structs.get`` of one key of a Struct's field map (None when absent or null)."""
    v = fields.get(key)
    return None if v is None else structs.unwrap(v)


@versioned.reading(4096, weight=2)
def read_report(shard: Struct) -> ShardReport:
    """The roll-up a shard reported in ``status`` (empty when it reported none), read
    once per ``(uid, resourceVersion)`` of the shard (:mod:`function.core.versioned`):
    the result is shared, never mutate it.

    ``hydrations`` is None when the shard has not reported how many hydrations it
    keeps ("not known": the ModelCache then keeps it).

    Hot path (the ModelCache reads its 64 shards on every call): one field-map lookup
    per field, the same values as ``structs.get``.
    """
    r = ShardReport()
    v = shard.fields.get("status")
    if v is None or not v.HasField("struct_value"):
        return r
    st = v.struct_value.fields
    r.spec_hash = _str(st, "specHash")
    r.names_hash = _str(st, "namesHash")
    v = st.get("source")
    if v is not None and v.HasField("struct_value"):
        r.identity = _str(v.struct_value.fields, "identity")
    v = st.get("summary")
    if v is not None and v.HasField("struct_value"):
        summary = v.struct_value.fields
        r.total = _count(_at(summary, "total"))
        h = _at(summary, "hydrations")
        r.hydrations = _count(h) if isinstance(h, (int, float)) else None
        d = _at(summary, "deleting")
        r.deleting = _count(d) if isinstance(d, (int, float)) else None
        v = summary.get("phases")
        if v is not None and v.HasField("struct_value"):
            phases = v.struct_value.fields
            for p in (*PHASES, UNAVAILABLE):
                r.phases[p] = _count(_at(phases, p))
    ev = st.get("evidence")
    if ev is not None and ev.HasField("list_value"):
        for e in ev.list_value.values:
            if e.HasField("struct_value"):
                f = e.struct_value.fields
                r.evidence.append(
                    (
                        _str(f, "commit"),
                        _str(f, "digest"),
                        _count(_at(f, "clusters")),
                        _count(_at(f, "validated")),
                    )
                )
    r.failed = _pairs(st, "failed")
    r.unavailable = _pairs(st, "unavailable")
    r.retained = _pairs(st, "retained")
    w = st.get("waiting")
    if w is not None and w.HasField("list_value"):
        r.waiting = [x.string_value for x in w.list_value.values if x.HasField("string_value")]
    return r


@versioned.reading(4096, weight=2)
def hydrated_clusters(shard: Struct) -> frozenset[str]:
    """The clusters a shard reported a hydration of: each ``status.clusters[]`` row whose
    ``phase`` is not ``Unavailable``, or that is ``retained`` (read once per ``(uid,
    resourceVersion)``; shared, never mutate it). A row in phase :data:`DELETING`
    counts: that hydration, and its PVC and Job on the cluster, are still there.

    A shard writes its rows in the reconcile that desires its hydrations, so a cluster
    it does not list (it has not reported yet, or the cluster is new to it) has none:
    it gets one only in a reconcile that lists it (the same rule as the roll-up's
    "unreported": composed, not reconciled yet, no hydration). A hydration it stops
    desiring keeps its row (phase :data:`DELETING`) until the shard has seen it gone.
    """
    out: set[str] = set()
    v = shard.fields.get("status")
    rows = v.struct_value.fields.get("clusters") if v is not None else None
    if rows is None:
        return frozenset()
    for e in rows.list_value.values:
        f = e.struct_value.fields
        name = _str(f, "name")
        r = f.get("retained")
        if name and (_str(f, "phase") != UNAVAILABLE or (r is not None and r.bool_value)):
            out.add(name)
    return frozenset(out)


def named_list(pairs: list[tuple[str, str]]) -> ListValue:
    """``[{name, message}]`` from (name, message) pairs."""
    out = ListValue()
    for name, message in pairs:
        f = out.values.add().struct_value.fields
        f["name"].string_value = name
        f["message"].string_value = message
    return out


def evidence_list(groups: list[tuple[str, str, int, int]]) -> ListValue:
    """``[{commit, digest, clusters, validated}]`` from groups."""
    out = ListValue()
    for commit, digest, clusters, validated in groups:
        f = out.values.add().struct_value.fields
        if commit:
            f["commit"].string_value = commit
        if digest:
            f["digest"].string_value = digest
        f["clusters"].number_value = clusters
        f["validated"].number_value = validated
    return out
