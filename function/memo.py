"""Memos bounded in bytes, least recently used first out.

Every memo of the function (``@memo(...)`` instead of ``functools.lru_cache``) keeps
at most ``maxsize`` entries **and** at most its share of one byte budget per process:
``MODELPLANE_CACHE_BUDGET_MIB`` (``function.settings``) split between the memos by
their ``weight``. An entry's size is estimated from its key and value (:func:`size_of`:
the length of strings and bytes, the serialized size of protobuf messages times
:data:`MESSAGE_FACTOR`, containers and plain objects summed member by member, plus a
fixed overhead per object). An entry larger than the memo's whole budget is not kept.

Like ``functools.lru_cache``: positional and keyword arguments must be hashable, an
exception is never cached, ``cache_clear()`` and ``cache_info()`` exist. Not
thread-safe beyond the GIL: a memo is only used by one composing thread at a time.
"""

from __future__ import annotations

import functools
import sys
from collections import OrderedDict, namedtuple
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf.message import Message

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_BUDGET_BYTES = 64 * 1024 * 1024
# In-memory size of a protobuf message (upb), as a multiple of its serialized size.
MESSAGE_FACTOR = 4
_OBJECT = 56  # bytes of a small Python object's header and slot, roughly
_MAX_DEPTH = 8

CacheInfo = namedtuple("CacheInfo", ["hits", "misses", "maxsize", "currsize"])


def size_of(value: Any, depth: int = 0) -> int:
    """Estimated bytes ``value`` holds in memory (a cheap over-estimate, not exact)."""
    if value is None or isinstance(value, (bool, int, float)):
        return 32
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return _OBJECT + len(value)
    if isinstance(value, Message):
        return _OBJECT + MESSAGE_FACTOR * value.ByteSize()
    if depth >= _MAX_DEPTH:
        return sys.getsizeof(value)
    if isinstance(value, (tuple, list, set, frozenset)):
        return _OBJECT + 8 * len(value) + sum(size_of(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return (
            _OBJECT
            + 32 * len(value)
            + sum(size_of(k, depth + 1) + size_of(v, depth + 1) for k, v in value.items())
        )
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        return _OBJECT + size_of(fields, depth + 1)
    slots = getattr(type(value), "__slots__", None)
    if slots:
        names = (slots,) if isinstance(slots, str) else slots
        return _OBJECT + sum(size_of(getattr(value, n, None), depth + 1) for n in names)
    return sys.getsizeof(value)


class ByteLRU:
    """A memo of ``fn`` bounded by entries and bytes (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], maxsize: int, weight: float) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.maxsize = maxsize
        self.weight = weight
        self.budget = DEFAULT_BUDGET_BYTES
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
        entries = self._entries
        got = entries.get(key)
        if got is not None:
            entries.move_to_end(key)
            self.hits += 1
            return got[0]
        self.misses += 1
        value = self.fn(*args, **kwargs)
        size = _OBJECT * 3 + size_of(key) + size_of(value)
        if size > self.budget:
            return value
        entries[key] = (value, size)
        self.bytes += size
        while self.bytes > self.budget or len(entries) > self.maxsize:
            _, (_, gone) = entries.popitem(last=False)
            self.bytes -= gone
            self.evictions += 1
        return value

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # used as a method
        return self if obj is None else functools.partial(self, obj)

    def cache_clear(self) -> None:
        """Forget every entry (and the counters)."""
        self._entries.clear()
        self.bytes = self.hits = self.misses = self.evictions = 0

    def cache_info(self) -> CacheInfo:
        """Hits, misses, the entry bound and the entries kept (like ``lru_cache``)."""
        return CacheInfo(self.hits, self.misses, self.maxsize, len(self._entries))


REGISTRY: list[ByteLRU] = []


def memo(maxsize: int, weight: float = 1.0) -> Callable[[F], F]:
    """Decorate a pure function with a :class:`ByteLRU` memo.

    Args:
        maxsize: Most entries kept.
        weight: This memo's share of the process's byte budget, relative to the other
            memos' weights (:func:`configure`).
    """

    def wrap(fn: F) -> F:
        m = ByteLRU(fn, maxsize, weight)
        REGISTRY.append(m)
        _split()
        return m  # type: ignore[return-value]

    return wrap


_total = DEFAULT_BUDGET_BYTES


def _split() -> None:
    weights = sum(m.weight for m in REGISTRY) or 1.0
    for m in REGISTRY:
        m.budget = int(_total * m.weight / weights)


def configure(total_bytes: int) -> None:
    """Set the byte budget shared by every memo of this process (and trim to it)."""
    global _total
    _total = int(total_bytes)
    _split()
    for m in REGISTRY:
        while m.bytes > m.budget and m._entries:
            _, (_, gone) = m._entries.popitem(last=False)
            m.bytes -= gone
            m.evictions += 1


def report() -> dict[str, Any]:
    """Budget and use of every memo: ``{"budget_bytes", "used_bytes", "memos": {...}}``."""
    return {
        "budget_bytes": _total,
        "used_bytes": sum(m.bytes for m in REGISTRY),
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
