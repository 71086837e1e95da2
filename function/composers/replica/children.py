"""ModelReplica hot path: the memo layers and the serialized bodies of its children.

Crossplane calls the function for every replica about once a minute, and what a replica
desires changes rarely. Its children are a pure function of the spec, the cluster's
provider config and ``status.gpuPools``, the effective flash-loader and ``/dev/shm``
settings, and the XR's name and namespace, so :func:`plan` builds them once per distinct
input (:func:`.desired.build`) and keeps them serialized. Inputs are keyed by their
canonical form (:func:`function.core.structs.canonical`: the deterministic serialization
of a Struct field),
so equal values give equal keys without converting them. Invalid input is never
memoized (an exception is never cached): it is rejected on every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import Struct

from function.api.inferencecluster import pools_by_name
from function.api.modelreplica import ModelReplicaSpec
from function.composers.replica.desired import EnginePlan, Stop, Target, build
from function.composers.replica.spec import parse_spec, pool_of
from function.core import structs
from function.core.errors import SpecError
from function.core.k8svalidation import decode_quantity
from function.core.memo import memo
from function.core.outcome import Outcome, Result
from function.core.structfill import struct_from
from function.ops.settings import Settings
from function.serving.flashloader import (
    SETTINGS_ATTRS,
    FlashLoader,
    resolve_flash_loader,
    resolve_shm,
)

# How many distinct parsed specs and plans are kept per process (least recently used
# dropped first): one per ModelReplica this process serves, each a few KiB.
CACHE_SIZE = 4096


def from_canonical(key: bytes) -> Any:
    """The value whose canonical form is ``key``, as :func:`function.core.structs.get` reads it:
    a str, float, bool, Struct or ListValue; None when absent or null."""
    holder = Struct()
    holder.fields["v"].MergeFromString(key)
    return structs.get(holder, "v")


@memo(32, weight=4)
def parsed(spec_key: bytes) -> ModelReplicaSpec:
    """The validated spec from its canonical form (memoized: only the last few, since
    a parsed spec is tens of KiB; :func:`head` and :func:`plan` keep what they need).

    The returned model is shared between calls: read it, never change it.

    Raises:
        SpecError: naming the first invalid field (not memoized).
    """
    return parse_spec(structs.plain_object(spec_key))


@dataclass(frozen=True, slots=True)
class Head:
    """What every call reads of a valid spec before the plan."""

    clusterName: str
    cache: str | None
    shm: str | None
    identity: str | None = None  # spec.modelCacheRef.identity
    pools: frozenset[str] = frozenset()  # the status.gpuPools[] its members sit on


@memo(CACHE_SIZE, weight=4)
def head(spec_key: bytes) -> Head:
    """Validate the spec (:func:`.spec.parse_spec`) and keep its cluster, cache and shm
    override.

    Raises:
        SpecError: naming the first invalid field (not memoized).
    """
    spec = parsed(spec_key)
    ref = spec.modelCacheRef
    cache = ref.name if ref is not None else None
    pools = frozenset(pool_of(e, m) for e in spec.engines for m in e.members)
    identity = ref.identity if ref else None
    return Head(spec.clusterName, cache, spec.shmSizeLimit, identity, pools)


@dataclass(frozen=True, slots=True)
class Defaults:
    """The settings a replica's flash loader and ``/dev/shm`` depend on, as a cache key.

    Equal and hashed by those values only (``key``); ``settings`` rides along for the
    resolvers, so settings fields of any type, or added later, never break hashing.
    """

    key: tuple[Any, ...]
    settings: Settings = field(compare=False, hash=False)

    @classmethod
    def of(cls, settings: Settings) -> Defaults:
        return cls(
            tuple(getattr(settings, attr, None) for attr in SETTINGS_ATTRS),
            settings,
        )


@memo(256, weight=4)
def shm(defaults: Defaults, value: str | None) -> str:
    """``resolve_shm`` memoized (a pure function of the defaults and the override)."""
    return resolve_shm(defaults.settings, value)


@memo(1024, weight=4)
def flash(defaults: Defaults, cache_key: bytes, own_key: bytes, cache_level: str) -> FlashLoader:
    """The effective flash loader (memoized): defaults, the ModelCache's, the replica's.

    ``cache_key`` and ``own_key`` are the canonical forms (:func:`canonical`) of the
    ModelCache's and the replica's ``spec.flashLoader``.

    Raises:
        SpecError: the ModelCache's ``spec.flashLoader`` is not an object, or a level
            holds an invalid value (``function.serving.flashloader.resolve_flash_loader``).
    """
    cache_fl = structs.plain(cache_key)
    if cache_fl is not None and not isinstance(cache_fl, dict):
        raise SpecError(cache_level, "must be an object (level: ModelCache)")
    return resolve_flash_loader(
        defaults.settings, cache_fl, structs.plain(own_key), cache_level=cache_level
    )


def check_flash_fits(out: Outcome, loader: FlashLoader, cache: Any, ref: str) -> None:
    """Warn when the flash loader's memory volume cannot hold the cache's weights.

    The copy would hit the ``emptyDir`` size limit and the kubelet evicts the pod
    (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir), so every
    start would fail; the cache's ``spec.huggingFace.sizeGiB`` says how large
    the weights are.
    """
    size_gib = structs.get(cache, "spec", "huggingFace", "sizeGiB")
    if not isinstance(size_gib, (int, float)) or isinstance(size_gib, bool) or size_gib <= 0:
        return
    try:
        limit = decode_quantity(loader.tmpfs_size_limit)  # as the emptyDir's sizeLimit
    except ValueError:
        return
    if limit < Decimal(str(size_gib)) * 2**30:
        out.warning(
            f"flash loader tmpfsSizeLimit {loader.tmpfs_size_limit} is smaller than ModelCache "
            f"{ref} ({size_gib:g} GiB): the copy cannot fit and the engine pods will be evicted",
            "FlashLoaderTooSmall",
        )


class PlanKey(NamedTuple):
    """One distinct input of :func:`plan` (a tuple: hashed and compared in C).

    Attributes:
        name: The XR's name.
        ns: The XR's namespace.
        spec_key: The canonical form of the XR's spec (:func:`canonical`).
        pc_kind: The cluster's provider config kind.
        pc_name: The cluster's provider config name.
        pools_key: The canonical form of the cluster's ``status.gpuPools``.
        shm: The ``/dev/shm`` size limit.
        flash: The effective flash loader when enabled, else None.
        identity: The source identity served from the cache ("" without a cache).
        legacy: The members' claim keys that keep the release-before's template
            (:attr:`.desired.Target.legacy`; empty but on upgraded replicas).
    """

    name: str
    ns: str
    spec_key: bytes
    pc_kind: str
    pc_name: str
    pools_key: bytes
    shm: str
    flash: FlashLoader | None
    identity: str = ""
    legacy: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Plan:
    """What a replica desires for one distinct input (see :func:`plan`).

    Attributes:
        gate: a :class:`~.desired.Stop` when nothing new may be composed
            (``PoolNotFound``, ``DeviceNotFound``); the children are then empty.
        results: Warning results, in the order they arise.
        children: ``(composition-resource name, serialized Struct body)``.
        engines: The composed engines, in spec order.
        url: The Service's in-cluster URL.
        service: The Service's remote name.
        keys: The composition-resource names of ``children``.
    """

    gate: Stop | None
    results: tuple[Result, ...] = ()
    children: tuple[tuple[str, bytes], ...] = ()
    engines: tuple[EnginePlan, ...] = ()
    url: str = ""
    service: str = ""
    keys: frozenset[str] = frozenset()


@memo(CACHE_SIZE, weight=4)
def plan(k: PlanKey) -> Plan:
    """The desired children of replica ``k.ns/k.name`` (memoized; a pure function of ``k``).

    Raises:
        SpecError: a pod template the function cannot extend (not memoized).
    """
    desired = build(
        Target(
            k.name,
            k.ns,
            parsed(k.spec_key),
            {"kind": k.pc_kind, "name": k.pc_name},
            pools_by_name(from_canonical(k.pools_key)),
            k.shm,
            k.flash,
            k.identity,
            k.legacy,
        )
    )
    if desired.gate is not None:
        return Plan(desired.gate, desired.results)
    children = []
    for key, body in desired.resources.items():
        # Kept serialized: a few KiB each, where a Struct holds its own arena of
        # tens of KiB; the runner splices the bytes into the response as they are.
        children.append((key, struct_from(body).SerializeToString(deterministic=True)))
    return Plan(
        None,
        desired.results,
        tuple(children),
        desired.engines,
        desired.url,
        desired.service,
        frozenset(k for k, _ in children),
    )
