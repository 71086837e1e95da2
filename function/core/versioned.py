"""Readings of a Kubernetes object, memoized by the object's uid and resourceVersion.

The API server gives every object a ``metadata.uid`` unique for the cluster's lifetime
and changes its ``metadata.resourceVersion`` on every write of the object, status
included; a write that changes nothing keeps it
(https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions). So a
reading that depends only on an object's content, such as which labels it carries or
whether a cluster can host a cache, is the same for as long as the pair is: Crossplane
sends the same 1,000 InferenceClusters on every steady reconcile of a ModelCache, and
each is read once per process, not once per call.

An object without both fields (``crossplane render``'s input files, hand-written
requests) is read each time: nothing is memoized without the pair. Each reading keeps
its share of the process's memo budget in bytes (:mod:`function.core.memo`), least
recently used first out, and is listed in ``config``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

from google.protobuf.struct_pb2 import Struct

from function.core.memo import ByteLRU, register

T = TypeVar("T")

Version = tuple[str, str]
"""``(metadata.uid, metadata.resourceVersion)`` of an object."""


_trusted = [True]


def trust(on: bool) -> None:
    """Whether versions are read at all (``MODELPLANE_TRUST_RESOURCE_VERSIONS``): when
    off, :func:`version_of` is None for every object, so every reading reads the object
    on every call (for ``crossplane render`` of hand-edited files, where an object may
    change under the same ``resourceVersion``)."""
    _trusted[0] = bool(on)


def version_of(item: Struct) -> Version | None:
    """``(uid, resourceVersion)`` of ``item``, or None when either is absent or empty (or
    when versions are not trusted: :func:`trust`)."""
    if not _trusted[0]:
        return None
    v = item.fields.get("metadata")
    if v is None:
        return None
    meta = v.struct_value.fields
    u = meta.get("uid")
    r = meta.get("resourceVersion")
    if u is None or r is None:
        return None
    uid, rv = u.string_value, r.string_value
    return (uid, rv) if uid and rv else None


class Versions(tuple[Version | None, ...]):
    """The :func:`version_of` of each object of a list, in order: a tuple that computes
    its :func:`digest` once (:attr:`tag`), however many memos of the call key by it
    (:func:`over_versions`)."""

    @functools.cached_property
    def tag(self) -> bytes | None:
        """:func:`digest` of these versions; None when one is not known (or holds a
        separator): such a list is not memoized."""
        if None in self:
            return None
        return digest(cast("tuple[Version, ...]", self))


def items_with_versions(items: Any) -> tuple[tuple[Struct, ...], tuple[Version | None, ...]]:
    """The objects of a ``Resources.items`` list (``item.resource``) and, in the same
    order, the :func:`version_of` of each, as :class:`Versions` (one pass: the hot path
    of every required resource of every call)."""
    objects: list[Struct] = []
    versions: list[Version | None] = []
    add_object, add_version = objects.append, versions.append
    for i in items:
        item = i.resource
        add_object(item)
        add_version(version_of(item))
    return tuple(objects), Versions(versions)


def reading(
    maxsize: int, weight: float = 1.0
) -> Callable[[Callable[[Struct], T]], Callable[..., T]]:
    """Decorate ``fn(item) -> T``, a pure reading of an object's content, with a memo
    keyed by the object's :func:`version_of`.

    The decorated function takes the object and, optionally, its version when the
    caller read it already (``fn(item, version)``; otherwise it reads it). An object
    whose version is not known (None) is read every time. The result is shared between
    calls: it must not be mutated.

    Args:
        maxsize: Most objects remembered.
        weight: Share of the process's memo budget (:func:`function.core.memo.memo`).
    """

    def wrap(fn: Callable[[Struct], T]) -> Callable[..., T]:
        m = register(ByteLRU(fn, maxsize, weight))
        fetch = m.tagged_fetcher()

        @functools.wraps(fn)
        def call(item: Struct, version: Any = ...) -> T:
            key = version_of(item) if version is ... else version
            # Kept by uid, tagged with the resourceVersion: an object written since is
            # read again and its reading replaced, so the memo holds one per object.
            value: T = fn(item) if key is None else fetch(key[0], key[1], fn, item)
            return value

        call.memo = m  # type: ignore[attr-defined]
        call.cache_clear = m.cache_clear  # type: ignore[attr-defined]
        return call

    return wrap


class ObjectFacts(NamedTuple):
    """Who an object is and the labels it carries (:func:`object_facts`).

    Attributes:
        api_version: ``apiVersion`` ("" when absent).
        kind: ``kind``.
        namespace: ``metadata.namespace`` ("" for a cluster-scoped object; None when it
            is present and not a string, only in a malformed request: no requirement's
            namespace equals it, :func:`namespace_of`).
        name: ``metadata.name``.
        labels: ``metadata.labels`` whose values are strings (every label the API
            server stores is one).
        odd_labels: Keys of ``metadata.labels`` whose values are not strings (only in a
            malformed request): no selector's value equals them.
    """

    api_version: str
    kind: str
    namespace: str | None
    name: str
    labels: dict[str, str]
    odd_labels: frozenset[str]


def _str(fields: Any, key: str) -> str:
    v = fields.get(key)
    return v.string_value if v is not None else ""


def namespace_of(meta: Any) -> str | None:
    """``metadata.namespace`` from the field map of an object's ``metadata``: the string,
    ``""`` when absent or null (a cluster-scoped object), None when it holds another
    kind of value (a number, a bool, an object, a list: only in a malformed request)."""
    v = meta.get("namespace")
    if v is None:
        return ""
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return v.string_value
    return "" if kind in (None, "null_value") else None


@reading(65536, weight=34)
def object_facts(item: Struct) -> ObjectFacts:
    """:class:`ObjectFacts` of ``item``, read once per ``(uid, resourceVersion)``.

    A value of the wrong type reads as "" (``string_value`` of a Value holding another
    kind). Pass the version when it is known: ``object_facts(item, version)``.
    """
    f = item.fields
    v = f.get("metadata")
    meta = v.struct_value.fields if v is not None else {}
    labels: dict[str, str] = {}
    odd: list[str] = []
    lv = meta.get("labels")
    if lv is not None:
        for k, x in lv.struct_value.fields.items():
            if x.HasField("string_value"):
                labels[k] = x.string_value
            else:
                odd.append(k)
    return ObjectFacts(
        _str(f, "apiVersion"),
        _str(f, "kind"),
        namespace_of(meta),
        _str(meta, "name"),
        labels,
        frozenset(odd),
    )


def digest(versions: tuple[Version, ...]) -> bytes | None:
    """16 bytes that stand for ``versions`` (in order) in a memo, instead of the list
    itself (2 MiB at 10,000 objects): BLAKE2b of every ``uid`` and ``resourceVersion``
    joined with separators. None when a field holds a separator (never from the API
    server: a uid is a UUID, a resourceVersion a number), where two lists could give the
    same input: such a list is not memoized."""
    text = "\x00".join(map("\x01".join, versions))
    if text.count("\x00") != len(versions) - 1 or text.count("\x01") != len(versions):
        return None
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def over_versions(
    maxsize: int, weight: float = 1.0
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate ``fn(items, versions, *args) -> T``, a pure function of a list of objects
    and hashable arguments, with a memo keyed by ``(versions, *args)``.

    ``versions`` is the :func:`version_of` of each of ``items``, in order (kept as its
    :func:`digest`, one entry per value of the other arguments): when every object has
    one, the same versions mean the same objects, so a steady reconcile that gets the
    same list again (Crossplane 2.1 and later list required resources sorted by
    namespace and name) is answered from the memo; a list with any object of unknown
    version is computed each time. The result is shared: never mutate it.

    Args:
        maxsize: Most lists remembered.
        weight: Share of the process's memo budget (the key holds every version).
    """

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        m = register(ByteLRU(fn, maxsize, weight))
        fetch = m.tagged_fetcher()

        @functools.wraps(fn)
        def call(items: Any, versions: tuple[Version | None, ...] | None, *args: Any) -> T:
            if isinstance(versions, Versions):
                tag = versions.tag  # computed once per list
            elif versions is None or None in versions:
                return fn(items, versions, *args)
            else:
                tag = digest(cast("tuple[Version, ...]", versions))  # no None: checked above
            if tag is None:
                return fn(items, versions, *args)
            # Kept by the other arguments (a selector, a requirement), tagged with the
            # list's digest: a list that changed replaces what was kept for them.
            value: T = fetch(args, tag, fn, items, versions, *args)
            return value

        call.memo = m  # type: ignore[attr-defined]
        call.cache_clear = m.cache_clear  # type: ignore[attr-defined]
        return call

    return wrap
