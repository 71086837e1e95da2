"""Memos bounded in bytes, least recently used first out.

Every memo of the function (``@memo(...)`` instead of ``functools.lru_cache``) keeps
at most ``maxsize`` entries, and all of them together at most one byte budget per
process: ``MODELPLANE_CACHE_BUDGET_MIB`` (``function.ops.settings``). Each memo is
guaranteed its share of the budget (split between the memos by their ``weight``) and
may use more while the others leave it free: a process that serves a 10,000-cluster
ModelCache uses the room the kinds it does not serve would have. When the total is
full, the memo holding the most bytes over its share gives up its least recently used
entries first.
An entry's size is estimated from its key and value (:func:`size_of`: the size of
strings and bytes, the serialized size of protobuf messages times
:data:`MESSAGE_FACTOR`, containers and plain objects summed member by member at any
depth, plus a fixed overhead per object). An entry larger than the memo's share and
than an eighth of the total is not kept.

Like ``functools.lru_cache``: positional and keyword arguments must be hashable, an
exception is never cached, and the decorated function has ``cache_clear()`` and
``cache_info()`` (and ``memo``, its :class:`ByteLRU`). Not
thread-safe beyond the GIL: a memo is only used by one composing thread at a time.
"""

from __future__ import annotations

import functools
import logging
import sys
import types
from collections import OrderedDict, namedtuple
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf.message import Message

from function.core import deadline

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_BUDGET_BYTES = 64 * 1024 * 1024
# In-memory size of a protobuf message (upb), as a multiple of its serialized size.
MESSAGE_FACTOR = 4
_OBJECT = 56  # bytes of a small Python object's header and slot, roughly
# Bytes per entry of a dict beyond its keys and values: its hash table's entry and
# index (sys.getsizeof of a dict of 20,000 string keys: 21 bytes an entry; one grown by
# insertion holds up to about half again as many slots as entries).
_DICT_SLOT = 32

CacheInfo = namedtuple("CacheInfo", ["hits", "misses", "maxsize", "currsize"])


# Process-wide objects a memo's value may reach (a compiled CEL program holds the shared
# CEL environment, its parser and its logger): not charged to any entry.
_UNCHARGED_TYPES: tuple[type, ...] = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    logging.Logger,
    logging.Manager,
)
_shared: set[int] = set()
# Types whose instances hold memory outside Python's heap that the walk cannot see (a
# compiled RE2 program), by type: the bytes to charge one instance (:func:`sized`).
_SIZED: dict[type, Callable[[Any], int]] = {}


def sized(cls: type, size: Callable[[Any], int]) -> None:
    """Charge each instance of ``cls`` that a memo's value reaches ``size(instance)``
    bytes (:func:`size_of`), in place of walking it: for objects whose memory lives
    outside Python's heap (a compiled regular expression's RE2 program)."""
    _SIZED[cls] = size


def shared(*objects: Any) -> None:
    """Mark ``objects`` as process-wide (a module-level environment, a table of
    functions): :func:`size_of` charges them to no entry that reaches them. They must
    live as long as the process (their ids are kept)."""
    _shared.update(id(o) for o in objects)


def size_of(value: Any) -> int:
    """Estimated bytes ``value`` holds in memory, in bytes: every object it reaches, at
    any depth (an iterative walk, each container and object counted once however often
    it is reached).

    Strings and bytes count their ``sys.getsizeof`` (a non-ASCII string takes 2 or 4
    bytes a character); a protobuf message (upb, outside Python's heap) its serialized
    size times :data:`MESSAGE_FACTOR`; a tuple, list or set a slot per item, a dict
    :data:`_DICT_SLOT` bytes per entry, plus what the items are; an object a slot per
    attribute and the values of its ``__dict__`` or ``__slots__``; numbers and None a
    fixed 32. A tenant controls how deep a spec nests (up to protobuf's 100 levels), so
    nothing deep is left out.
    Modules, classes, functions, loggers and what :func:`shared` marks are process-wide:
    not counted. An instance of a type given to :func:`sized` counts what its function
    says.
    """
    total = 0
    stack = [value]
    seen: set[int] = set(_shared)  # what is shared counts as seen already
    pop, extend, getsize = stack.pop, stack.extend, sys.getsizeof
    while stack:
        v = pop()
        if v is None or isinstance(v, (bool, int, float)):
            total += 32
        elif isinstance(v, (str, bytes, bytearray)):
            total += getsize(v)
        elif isinstance(v, Message):
            total += _OBJECT + MESSAGE_FACTOR * v.ByteSize()
        elif isinstance(v, memoryview):  # keeps the whole buffer it views alive
            total += _OBJECT + getsize(v.obj)
        elif id(v) in seen:
            continue
        elif isinstance(v, dict):
            seen.add(id(v))
            total += _OBJECT + _DICT_SLOT * len(v)
            extend(v.keys())
            extend(v.values())
        elif isinstance(v, (tuple, list, set, frozenset)):
            seen.add(id(v))
            total += _OBJECT + 8 * len(v)
            extend(v)
        elif isinstance(v, _UNCHARGED_TYPES):
            continue
        else:
            seen.add(id(v))
            own = _SIZED.get(type(v))
            total += own(v) if own is not None else _object_parts(v, seen, extend)
    return total


def _object_parts(v: Any, seen: set[int], extend: Callable[[Any], None]) -> int:
    """:func:`size_of`'s own bytes of the object ``v``; puts its attribute values on the
    walk (``extend``). An instance's attribute names are interned and its dict shares its
    keys with the other instances of its class: a slot per attribute, and the values."""
    fields = getattr(v, "__dict__", None)
    if isinstance(fields, dict):
        seen.add(id(fields))
        extend(fields.values())
        return _OBJECT + 8 * len(fields)
    names: list[str] = []
    for c in type(v).__mro__:  # a class's own __slots__ and its bases'
        slots = c.__dict__.get("__slots__", ())
        names.extend((slots,) if isinstance(slots, str) else slots)
    if names:
        extend(getattr(v, n, None) for n in names)
        return _OBJECT + 8 * len(names)
    return int(sys.getsizeof(v))


class ByteLRU:
    """A memo of ``fn`` bounded by entries and bytes (see the module docstring).

    Calling it calls a closure built once (:meth:`_build`): a hit is one dictionary
    lookup and one move to the most recent end, with no attribute lookups.
    """

    def __init__(self, fn: Callable[..., Any], maxsize: int, weight: float) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.maxsize = maxsize
        self.weight = weight
        self.budget = DEFAULT_BUDGET_BYTES
        self.bytes = 0
        self.misses = 0
        self.evictions = 0
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._hits = [0]
        self._refused = 0
        self._call = self._build()

    def _build(self) -> Callable[..., Any]:
        entries, hits, fn = self._entries, self._hits, self.fn
        get, to_end = entries.get, entries.move_to_end

        def call(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                return self._keyword_call(args, kwargs)
            got = get(args)
            if got is not None:
                to_end(args)
                hits[0] += 1
                return got[0]
            return self._miss(args, fn(*args))

        functools.update_wrapper(call, self.fn)
        call.cache_info = self.cache_info  # type: ignore[attr-defined]
        call.cache_clear = self.cache_clear  # type: ignore[attr-defined]
        call.memo = self  # type: ignore[attr-defined]
        return call

    def tagged_fetcher(self) -> Callable[..., Any]:
        """A fast ``fetch(key, tag, fn, *args)``: the value kept under ``key`` when it was
        kept with ``tag`` (now the most recent); otherwise ``fn(*args)``, kept under
        ``key`` with ``tag`` in place of what ``key`` held. One entry per key whatever its
        tags: an object read again at a new version replaces its old reading instead of
        adding one (:mod:`function.core.versioned`)."""
        get, to_end = self._entries.get, self._entries.move_to_end
        hits, miss = self._hits, self._miss

        def fetch(key: Any, tag: Any, fn: Callable[..., Any], *args: Any) -> Any:
            got = get(key)
            if got is not None and got[0][0] == tag:
                to_end(key)
                hits[0] += 1
                return got[0][1]
            value = fn(*args)
            miss(key, (tag, value))
            return value

        return fetch

    def _keyword_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        key = (*args, _KW, *sorted(kwargs.items()))
        got = self._entries.get(key)
        if got is not None:
            self._entries.move_to_end(key)
            self._hits[0] += 1
            return got[0]
        return self._miss(key, self.fn(*args, **kwargs))

    def _miss(self, key: Any, value: Any) -> Any:
        # A value computed after a compute deadline fired is not trusted (CPython may have
        # lost the deadline's exception half-way through a step): never kept.
        deadline.check()
        self.misses += 1
        entries = self._entries
        if key in entries:  # kept under another tag, or computed again: replace it
            self._evict(key)
        size = _OBJECT * 3 + size_of(key) + size_of(value)
        if size > self.budget and size > _total // 8:
            return value
        entries[key] = (value, size)
        self.bytes += size
        _used[0] += size
        while len(entries) > self.maxsize:
            self._evict()
        if _used[0] > _total:
            self._make_room(key)
        return value

    def _make_room(self, key: Any) -> None:
        """Bring the total back within the budget after ``key`` was kept.

        The memo most over its share gives up its least recently used entries. When that
        is this memo, the new entry is given up instead, except for one miss in
        :data:`SCAN_DRAIN` (which gives up the least recently used one): a sorted scan
        larger than the memo (a fleet past what the budget holds) then keeps hitting
        what it holds instead of evicting, on each miss, the entry it needs next, and
        entries no call reads any more still leave.
        """
        while _used[0] > _total:
            victim = _most_over()
            if victim is None or not victim._entries:
                return
            if victim is self and key in self._entries:
                self._refused += 1
                if self._refused % SCAN_DRAIN:
                    self._evict(key)
                    self.evictions -= 1  # not kept, rather than evicted
                    return
            victim._evict()

    def _evict(self, key: Any = None) -> None:
        """Drop ``key`` (default: the least recently used entry)."""
        if key is None:
            _, (_, gone) = self._entries.popitem(last=False)
        else:
            gone = self._entries.pop(key)[1]
        self.bytes -= gone
        _used[0] -= gone
        self.evictions += 1

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    @property
    def hits(self) -> int:
        """Calls answered from the memo."""
        return self._hits[0]

    def cache_clear(self) -> None:
        """Forget every entry (and the counters)."""
        self._entries.clear()
        _used[0] -= self.bytes
        self.bytes = self.misses = self.evictions = 0
        self._hits[0] = 0

    def cache_info(self) -> CacheInfo:
        """Hits, misses, the entry bound and the entries kept (like ``lru_cache``)."""
        return CacheInfo(self.hits, self.misses, self.maxsize, len(self._entries))


SCAN_DRAIN = 16
"""When a full memo refuses a new entry (:meth:`ByteLRU._make_room`), one refusal in this
many evicts its least recently used entry instead."""

_KW = object()  # separates positional from keyword arguments in a key


REGISTRY: list[ByteLRU] = []


def register(m: ByteLRU) -> ByteLRU:
    """Give ``m`` its share of the byte budget (and list it in :func:`report`)."""
    REGISTRY.append(m)
    _split()
    return m


def memo(maxsize: int, weight: float = 1.0) -> Callable[[F], F]:
    """Decorate a pure function with a :class:`ByteLRU` memo.

    Args:
        maxsize: Most entries kept.
        weight: This memo's share of the process's byte budget, relative to the other
            memos' weights (:func:`configure`).
    """

    def wrap(fn: F) -> F:
        return register(ByteLRU(fn, maxsize, weight))._call  # type: ignore[return-value]

    return wrap


_total = DEFAULT_BUDGET_BYTES
_used = [0]  # bytes held by every memo of the process


def _most_over() -> ByteLRU | None:
    """The memo holding the most bytes over its share (None when none is over it)."""
    worst, over = None, 0
    for m in REGISTRY:
        if m.bytes - m.budget > over:
            worst, over = m, m.bytes - m.budget
    return worst


def _split() -> None:
    weights = sum(m.weight for m in REGISTRY) or 1.0
    for m in REGISTRY:
        m.budget = int(_total * m.weight / weights)


def configure(total_bytes: int) -> None:
    """Set the byte budget shared by every memo of this process (and trim to it)."""
    global _total
    _total = int(total_bytes)
    _split()
    while _used[0] > _total:
        victim = _most_over()
        if victim is None or not victim._entries:
            break
        victim._evict()


def report() -> dict[str, Any]:
    """Budget and use of every memo: ``{"budget_bytes", "used_bytes", "memos": {...}}``."""
    return {
        "budget_bytes": _total,
        "used_bytes": _used[0],
        "memos": {
            f"{m.fn.__module__}.{m.fn.__qualname__}": {
                "budget_bytes": m.budget,
                "used_bytes": m.bytes,
                "entries": len(m._entries),
                "max_entries": m.maxsize,
            }
            for m in REGISTRY
        },
    }
