"""Kubernetes' CEL libraries that a DRA device selector may call, for cel-python.

Kubernetes compiles a ``DeviceSelector.cel`` expression in its base CEL environment
(``k8s.io/apiserver/pkg/cel/environment``, the one CRD validation rules use): besides
the CEL standard library it declares cel-go's string extensions, Kubernetes' regex,
lists, sets, quantity and semver libraries, and cross-type numeric comparisons. cel-python
has the standard library only; this module adds what a selector over a device's
attributes and capacity plausibly needs, with cel-go's semantics (indices count Unicode
code points; an out-of-range index is an error, not a non-match):

- strings (cel-go ``ext.Strings``): ``charAt``, ``indexOf``, ``lastIndexOf``,
  ``lowerAscii``, ``upperAscii``, ``replace``, ``split``, ``substring``, ``trim``,
  ``join``, ``format`` (``%s %d %f %e %b %o %x %X %%``, precision for ``%f``/``%e``),
  ``strings.quote``;
- regex (Kubernetes ``library.Regex``): ``find``, ``findAll``;
- lists (Kubernetes ``library.Lists``): ``isSorted``, ``sum``, ``min``, ``max``,
  ``indexOf``, ``lastIndexOf``; (cel-go ``ext.Lists`` version 3) ``slice``, ``flatten``,
  ``lists.range``, ``distinct``, ``reverse``, ``sort``;
- sets (cel-go ``ext.Sets``): ``sets.contains``, ``sets.equivalent``, ``sets.intersects``;
- ``<``, ``<=``, ``>``, ``>=``, ``==`` and ``!=`` between an int, a uint and a double
  (``cel.CrossTypeNumericComparisons``; equality as CEL's heterogeneous equality);
- the type identifiers ``int``, ``uint``, ``double``, ``bool``, ``string``, ``bytes``,
  ``list``, ``map``, ``null_type`` and ``type`` (``type(x) == string``);
- bounds on what a selector builds (:data:`MAX_STRING`, :data:`MAX_LIST`), where cel-go
  has its runtime cost limit.

Quantity and semver functions live with the types in :mod:`function.scheduling.devices`.
What Kubernetes declares and this evaluator does not (optional values and the ``.?``
syntax, two-variable comprehensions, ``transformList``/``transformMap``, ``sortBy``,
``first``/``last``, the URL, IP, CIDR and named-format libraries) is named in
:data:`UNSUPPORTED`, so a selector using it is refused with
a message saying so, never taken for a typo.

Errors are raised as ``ValueError`` (a message celpy passes through) or ``TypeError``
(celpy's "no such overload").
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable
from typing import Any

from celpy import celtypes
from celpy.evaluation import base_functions

_S = celtypes.StringType
_I = celtypes.IntType
_B = celtypes.BoolType
_L = celtypes.ListType


class Namespace:
    """The value of ``sets``, ``strings`` and ``lists`` in an activation: the receiver of a
    namespaced call (``sets.contains(a, b)`` is evaluated as ``contains(sets, a, b)``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


SETS = Namespace("sets")
STRINGS = Namespace("strings")
LISTS = Namespace("lists")
NAMESPACES: dict[str, Namespace] = {"sets": SETS, "strings": STRINGS, "lists": LISTS}
TYPE_IDENTIFIERS = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
)

# Declared by Kubernetes' base CEL environment (``k8s.io/apiserver/pkg/cel/environment``,
# base.go, at v0.35), not evaluated here: refused by name. So are the identifiers
# ``optional`` and ``format`` (:data:`UNSUPPORTED_IDENTIFIERS`).
UNSUPPORTED = frozenset(
    {
        "optional.of", "optional.ofNonZeroValue", "optional.none", "orValue", "or",
        "hasValue", "value", "transformList", "transformMap", "transformMapEntry",
        "url", "isURL", "getScheme", "getHost", "getHostname", "getPort",
        "getEscapedPath", "getQuery", "ip", "isIP", "family", "isUnspecified",
        "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast",
        "cidr", "isCIDR", "containsIP", "containsCIDR", "masked", "prefixLength",
        "isCanonical", "sortBy", "first", "last", "validate",
    }
)  # fmt: skip


UNSUPPORTED_IDENTIFIERS = frozenset({"optional", "format"})

# The largest string (characters) and list (elements) a selector may build. cel-go stops
# a growing value with its runtime cost limit (a concatenation costs its length);
# cel-python has none, so ``["a"].map(x, x + x).map(x, x + x)...`` would double a string
# per step until the process runs out of memory. A value past these bounds is an
# evaluation error naming them; no device attribute or quantity comes near them.
MAX_STRING = 1 << 20
MAX_LIST = 100_000
MAX_PRECISION = 100


def bounded(value: Any) -> Any:
    """``value`` if it is within :data:`MAX_STRING` and :data:`MAX_LIST`.

    Raises:
        ValueError: naming the bound.
    """
    if isinstance(value, (str, bytes)) and len(value) > MAX_STRING:
        raise ValueError(
            f"a selector may build a string of at most {MAX_STRING} characters "
            f"({len(value)} here)"
        )
    if isinstance(value, list) and len(value) > MAX_LIST:
        raise ValueError(
            f"a selector may build a list of at most {MAX_LIST} elements ({len(value)} here)"
        )
    return value


def _sized(size: int, kind: str) -> None:
    bound = MAX_LIST if kind == "list" else MAX_STRING
    if size > bound:
        unit = "elements" if kind == "list" else "characters"
        raise ValueError(f"a selector may build a {kind} of at most {bound} {unit} ({size} here)")


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} needs a string")
    return value


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} needs an int")
    return int(value)


# ---- strings ------------------------------------------------------------------------


def _char_at(s: Any, i: Any) -> celtypes.StringType:
    text, index = _text(s, "charAt"), _int(i, "charAt")
    if not 0 <= index <= len(text):
        raise ValueError(f"charAt: index {index} out of range (0..{len(text)})")
    return _S(text[index : index + 1])


def _offset(text: str, offset: Any, what: str) -> int:
    index = _int(offset, what)
    if not 0 <= index <= len(text):
        raise ValueError(f"{what}: offset {index} out of range (0..{len(text)})")
    return index


def _index_of(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if isinstance(target, list):
        if offset is not None:
            raise TypeError("a list's indexOf takes one argument")
        return _I(next((i for i, x in enumerate(target) if _equal(x, item)), -1))
    text, sub = _text(target, "indexOf"), _text(item, "indexOf")
    start = 0 if offset is None else _offset(text, offset, "indexOf")
    return _I(text.find(sub, start))


def _last_index_of(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if isinstance(target, list):
        if offset is not None:
            raise TypeError("a list's lastIndexOf takes one argument")
        found = [i for i, x in enumerate(target) if _equal(x, item)]
        return _I(found[-1] if found else -1)
    text, sub = _text(target, "lastIndexOf"), _text(item, "lastIndexOf")
    end = len(text) if offset is None else _offset(text, offset, "lastIndexOf")
    return _I(text.rfind(sub, 0, end + len(sub)))


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _lower_ascii(s: Any) -> celtypes.StringType:
    return _S(_text(s, "lowerAscii").translate(_ASCII_LOWER))


def _upper_ascii(s: Any) -> celtypes.StringType:
    return _S(_text(s, "upperAscii").translate(_ASCII_UPPER))


def _replace(s: Any, old: Any, new: Any, n: Any = -1) -> celtypes.StringType:
    count = _int(n, "replace")
    text, before, after = _text(s, "replace"), _text(old, "replace"), _text(new, "replace")
    found = text.count(before) if before else len(text) + 1
    found = found if count < 0 else min(found, count)
    _sized(len(text) + found * (len(after) - len(before)), "string")
    return _S(text.replace(before, after, max(count, -1)))


def _split(s: Any, sep: Any, n: Any = -1) -> celtypes.ListType:
    text, by, count = _text(s, "split"), _text(sep, "split"), _int(n, "split")
    if count == 0:
        return _L([])
    if by == "":
        chars = list(text)
        if 0 < count < len(chars):
            chars = [*chars[: count - 1], "".join(chars[count - 1 :])]
        return _L([_S(c) for c in chars])
    return _L([_S(p) for p in text.split(by, count - 1 if count > 0 else -1)])


def _substring(s: Any, start: Any, end: Any = None) -> celtypes.StringType:
    text = _text(s, "substring")
    first = _int(start, "substring")
    last = len(text) if end is None else _int(end, "substring")
    if not 0 <= first <= last <= len(text):
        raise ValueError(f"substring: range [{first}, {last}) out of range (0..{len(text)})")
    return _S(text[first:last])


def _trim(s: Any) -> celtypes.StringType:
    return _S(_text(s, "trim").strip())


def _join(items: Any, sep: Any = "") -> celtypes.StringType:
    if not isinstance(items, list):
        raise TypeError("join needs a list of strings")
    return _S(bounded(_text(sep, "join").join(_text(x, "join") for x in items)))


_QUOTES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
           "\v": "\\v", "\\": "\\\\", '"': '\\"'}  # fmt: skip


def _quote(namespace: Any, s: Any) -> celtypes.StringType:
    if namespace is not STRINGS:
        raise TypeError("quote is strings.quote")
    return _S('"' + "".join(_QUOTES.get(c, c) for c in _text(s, "strings.quote")) + '"')


_VERB = re.compile(r"%(?:\.(\d+))?([sdfebxXo%])")


def _format(s: Any, args: Any) -> celtypes.StringType:
    template = _text(s, "format")
    if not isinstance(args, list):
        raise TypeError("format needs a list of arguments")
    values = iter(args)

    def one(m: re.Match[str]) -> str:
        precision, verb = m.group(1), m.group(2)
        if verb == "%":
            return "%"
        try:
            value = next(values)
        except StopIteration:
            raise ValueError(f"format: too few arguments for {template!r}") from None
        return _verb(verb, precision, value)

    return _S(bounded(_VERB.sub(one, template)))


def _verb(verb: str, precision: str | None, value: Any) -> str:
    if verb == "s":
        return _format_s(value)
    if verb in "fe":
        number = float(value) if isinstance(value, (int, float)) else None
        if number is None or isinstance(value, bool):
            raise ValueError(f"format: %{verb} needs a number")
        digits = int(precision) if precision else 6
        if digits > MAX_PRECISION:
            raise ValueError(f"format: a precision of at most {MAX_PRECISION} digits")
        return f"{number:.{digits}{verb}}"
    whole = _int(value, f"format %{verb}")
    return str(whole) if verb == "d" else format(whole, verb)


def _format_s(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_format_s(v) for v in value) + "]"
    return str(value)


# ---- regex ------------------------------------------------------------------------------


def _regex(pattern: Any, what: str) -> re.Pattern[str]:
    try:
        return re.compile(_text(pattern, what))
    except re.error as e:
        raise ValueError(f"{what}: invalid regular expression {pattern!r}: {e}") from None


def _find(s: Any, pattern: Any) -> celtypes.StringType:
    m = _regex(pattern, "find").search(_text(s, "find"))
    return _S(m.group(0) if m else "")


def _find_all(s: Any, pattern: Any, n: Any = -1) -> celtypes.ListType:
    limit = _int(n, "findAll")
    found = [m.group(0) for m in _regex(pattern, "findAll").finditer(_text(s, "findAll"))]
    return _L([_S(x) for x in (found if limit < 0 else found[:limit])])


# ---- lists and sets -----------------------------------------------------------------------


def _items(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{what} needs a list")
    return list(value)


def _is_sorted(items: Any) -> celtypes.BoolType:
    xs = _items(items, "isSorted")
    return _B(all(not _less(b, a) for a, b in itertools.pairwise(xs)))


def _sum(items: Any) -> Any:
    xs = _items(items, "sum")
    if not xs:
        return _I(0)
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


def _extreme(items: Any, what: str, pick: Callable[[Any, Any], bool]) -> Any:
    xs = _items(items, what)
    if not xs:
        raise ValueError(f"{what} of an empty list")
    best = xs[0]
    for x in xs[1:]:
        if pick(x, best):
            best = x
    return best


def _min(items: Any) -> Any:
    return _extreme(items, "min", _less)


def _max(items: Any) -> Any:
    return _extreme(items, "max", lambda a, b: _less(b, a))


def _slice(items: Any, start: Any, end: Any) -> celtypes.ListType:
    xs = _items(items, "slice")
    first, last = _int(start, "slice"), _int(end, "slice")
    if not 0 <= first <= last <= len(xs):
        raise ValueError(f"slice: range [{first}, {last}) out of range (0..{len(xs)})")
    return _L(xs[first:last])


def _flatten(items: Any, depth: Any = 1) -> celtypes.ListType:
    levels = _int(depth, "flatten")
    if levels < 0:
        raise ValueError("flatten: depth must not be negative")
    out = _items(items, "flatten")
    for _ in range(levels):
        if not any(isinstance(x, list) for x in out):
            break
        _sized(sum(len(x) if isinstance(x, list) else 1 for x in out), "list")
        out = [y for x in out for y in (x if isinstance(x, list) else [x])]
    return _L(out)


def _range(namespace: Any, n: Any) -> celtypes.ListType:
    if namespace is not LISTS:
        raise TypeError("range is lists.range")
    count = _int(n, "lists.range")
    if count > MAX_RANGE:
        raise ValueError(f"lists.range: {count} elements, over the {MAX_RANGE} it may make")
    return _L([_I(i) for i in range(max(count, 0))])


MAX_RANGE = 10_000  # a selector's list: far beyond any device's needs, small in memory


def _distinct(items: Any) -> celtypes.ListType:
    out: list[Any] = []
    for x in _items(items, "distinct"):
        if not _member(x, out):
            out.append(x)
    return _L(out)


def _reverse(items: Any) -> celtypes.ListType:
    return _L(_items(items, "reverse")[::-1])


def _sort(items: Any) -> celtypes.ListType:
    xs = _items(items, "sort")
    kinds = {type(x) for x in xs}
    if len(kinds) > 1:
        raise TypeError("sort needs elements of one type")
    return _L(sorted(xs))


def _set_args(namespace: Any, a: Any, b: Any, what: str) -> tuple[list[Any], list[Any]]:
    if namespace is not SETS:
        raise TypeError(f"{what} is sets.{what}")
    return _items(a, f"sets.{what}"), _items(b, f"sets.{what}")


def _member(x: Any, xs: list[Any]) -> bool:
    return any(_equal(x, y) for y in xs)


_base_contains = base_functions["contains"]


def _contains(target: Any, *args: Any) -> Any:
    if target is SETS:
        if len(args) != 2:
            raise TypeError("sets.contains takes two lists")
        a, b = _set_args(target, args[0], args[1], "contains")
        return _B(all(_member(x, a) for x in b))
    return _base_contains(target, *args)


def _equivalent(namespace: Any, a: Any, b: Any) -> celtypes.BoolType:
    xs, ys = _set_args(namespace, a, b, "equivalent")
    return _B(all(_member(x, ys) for x in xs) and all(_member(y, xs) for y in ys))


def _intersects(namespace: Any, a: Any, b: Any) -> celtypes.BoolType:
    xs, ys = _set_args(namespace, a, b, "intersects")
    return _B(any(_member(x, ys) for x in xs))


# ---- cross-type numeric comparisons ----------------------------------------------------------


def _numeric(x: Any) -> bool:
    return isinstance(x, (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)) and not (
        isinstance(x, bool)
    )


def _plain(x: Any) -> int | float:
    return float(x) if isinstance(x, float) else int(x)


def _mixed(a: Any, b: Any) -> bool:
    return _numeric(a) and _numeric(b) and type(a) is not type(b)


def _relation(name: str, op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    base = base_functions[name]

    def compare(a: Any, b: Any) -> Any:
        if _mixed(a, b):
            return _B(op(_plain(a), _plain(b)))
        return base(a, b)

    compare.__name__ = f"cross_type_{op.__name__}"
    return compare


_base_add = base_functions["_+_"]


def _add(a: Any, b: Any) -> Any:
    """``a + b``, refusing a string, bytes or list past the bounds before building it."""
    if isinstance(a, (str, bytes, list)) and isinstance(b, (str, bytes, list)):
        _sized(len(a) + len(b), "list" if isinstance(a, list) else "string")
    return _base_add(a, b)


def _equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality: numbers by value, other values of different types
    unequal (celpy's own ``==`` raises on those)."""
    if _mixed(a, b):
        return bool(_plain(a) == _plain(b))
    if type(a) is not type(b):
        return False
    return bool(a == b)


def _less(a: Any, b: Any) -> bool:
    return bool(_plain(a) < _plain(b)) if _mixed(a, b) else bool(a < b)


# Every function this module adds, by the name a selector calls it by (a method's receiver
# is its first argument, as celpy calls methods).
FUNCTIONS: dict[str, Any] = {
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": _trim,
    "join": _join,
    "quote": _quote,
    "format": _format,
    "find": _find,
    "findAll": _find_all,
    "isSorted": _is_sorted,
    "slice": _slice,
    "flatten": _flatten,
    "range": _range,
    "distinct": _distinct,
    "reverse": _reverse,
    "sort": _sort,
    "sum": _sum,
    "min": _min,
    "max": _max,
    "contains": _contains,
    "equivalent": _equivalent,
    "intersects": _intersects,
    "_+_": _add,
    "_<_": _relation("_<_", operator.lt),
    "_<=_": _relation("_<=_", operator.le),
    "_>_": _relation("_>_", operator.gt),
    "_>=_": _relation("_>=_", operator.ge),
    "_==_": _relation("_==_", operator.eq),
    "_!=_": _relation("_!=_", operator.ne),
}

# What each returns, for the compile-time check that a selector returns a boolean.
METHOD_RETURNS: dict[str, str] = {
    "charAt": "string", "indexOf": "int", "lastIndexOf": "int", "lowerAscii": "string",
    "upperAscii": "string", "replace": "string", "split": "list", "substring": "string",
    "trim": "string", "join": "string", "quote": "string", "format": "string",
    "find": "string", "findAll": "list", "isSorted": "bool", "equivalent": "bool",
    "intersects": "bool", "slice": "list", "flatten": "list", "range": "list",
    "distinct": "list", "reverse": "list", "sort": "list",
}  # fmt: skip
