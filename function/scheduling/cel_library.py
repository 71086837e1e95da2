"""Kubernetes' CEL libraries that a DRA device selector may call, for cel-python.

Kubernetes compiles a ``DeviceSelector.cel`` expression in its base CEL environment
(``k8s.io/apiserver/pkg/cel/environment``, the one CRD validation rules use): besides
the CEL standard library it declares cel-go's string extensions, Kubernetes' regex,
lists, sets, quantity and semver libraries, and cross-type numeric comparisons. cel-python
has the standard library only; this module adds what a selector over a device's
attributes and capacity plausibly needs, with the semantics of cel-go v0.26 (the one
Kubernetes 1.35 pins; compared expression by expression against it): indices count
Unicode code points, an out-of-range index is an error, not a non-match, and regular
expressions are RE2's (Go's ``regexp``; linear time):

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
- bounds on what a selector builds (:data:`MAX_STRING`, :data:`MAX_LIST`), checked
  before the value is built, and a runtime budget of steps (:func:`begin`,
  :class:`CountingRunner`), where cel-go has its runtime cost limit.

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
import math
import operator
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import re2
from celpy import InterpretedRunner, celtypes
from celpy.evaluation import CELEvalError, Evaluator, base_functions

from function.core import deadline
from function.core.errors import quoted
from function.core.memo import memo
from function.core.memo import sized as memo_sized

_S = celtypes.StringType
_I = celtypes.IntType
_B = celtypes.BoolType

# ---- the runtime budget ---------------------------------------------------------------
#
# cel-go charges every step and every call by the size of what it reads, and stops an
# evaluation past the environment's limit. The compile-time estimate
# (``function.scheduling.devices.estimate_cost``) cannot size a list a function makes
# from a device's values (``lists.range(n).reverse()``, ``s.split(",")``), so an
# evaluation is also counted as it runs: one unit per node of the parse tree visited
# (:class:`CountingRunner`, macro bodies included) and, for the functions here, one per
# element or character they read, charged before they read it. Past the limit given to
# :func:`begin`, every further step raises, and the evaluation is an error
# (``devices._eval`` checks :func:`over` too, since ``||`` and ``&&`` may absorb one).
_spent = 0
_limit = 0


def begin(limit: int) -> None:
    """Start the budget of one evaluation: ``limit`` units (see above). One evaluation
    runs at a time in a process, as composing does (a compute process composes one call
    at a time; the in-process server, one thread); an evaluation cut short by the
    compute deadline leaves its count, which the next one's :func:`begin` resets."""
    global _spent, _limit
    _spent, _limit = 0, limit


def over() -> bool:
    """Whether the evaluation since :func:`begin` passed its limit."""
    return _spent > _limit


def over_budget() -> str:
    """The reason of an evaluation that passed its limit."""
    return (
        f"its evaluation passed {_limit:,} steps (each node of the expression evaluated, "
        "each element or character its functions read): iterate shorter lists"
    )


def charge(units: int) -> None:
    """Count ``units`` of work about to be done.

    Raises:
        ValueError: once past the limit (:func:`over_budget`).
    """
    global _spent
    deadline.check()  # a compute deadline whose exception CPython lost (see there)
    _spent += units
    if _spent > _limit:
        raise ValueError(over_budget())


class _Counting(Evaluator):
    """celpy's evaluator, charging one unit per node it visits (macro bodies too): lark's
    ``Interpreter`` reaches every node, the root and each child, through ``_visit_tree``."""

    def _visit_tree(self, tree: Any) -> Any:
        # A literal is decoded again on every visit: charged by its length.
        charge(len(tree.children[0]) if tree.data == "literal" and tree.children else 1)
        return super()._visit_tree(tree)

    def sub_evaluator(self, ast: Any) -> Evaluator:
        return _Counting(ast, activation=self.activation)

    def function_eval(self, name_token: Any, exprlist: Any = None) -> Any:
        """``string()`` of a scalar only: cel-go has no overload for a list or a map, and
        celpy's would write out a list nested by shared reference in full. (Not an
        override of the ``string`` function: that name is also the type identifier.)"""
        if name_token.value == "string" and not isinstance(exprlist, Exception):
            args = list(exprlist or [])
            if len(args) == 1 and not isinstance(args[0], Exception):
                text = _string_of(args[0])
                if text is None:
                    return CELEvalError("no such overload", TypeError, ("string() of this",))
                return text
            exprlist = args
        return super().function_eval(name_token, exprlist)


_STRINGABLE = (
    celtypes.IntType, celtypes.UintType, celtypes.StringType, celtypes.BytesType,
    celtypes.TimestampType, celtypes.DurationType,
)  # fmt: skip


def _string_of(value: Any) -> Any:
    """cel-go's ``string(x)``: of an int, uint, double, bool, string, bytes, timestamp or
    duration, in cel-go's text (``true``, ``1`` for ``1.0``); None for anything else (a
    list, a map, null, a quantity, a type: no overload)."""
    if isinstance(value, celtypes.BoolType):
        return celtypes.StringType("true" if value else "false")
    if isinstance(value, celtypes.DoubleType):
        return celtypes.StringType(_double_text(value))
    if isinstance(value, _STRINGABLE):
        return base_functions["string"](value)
    return None


class CountingRunner(InterpretedRunner):
    """The runner of every compiled selector (``celpy.Environment(runner_class=...)``):
    evaluates with :class:`_Counting`."""

    def evaluate(self, context: Any) -> Any:
        return _Counting(ast=self.ast, activation=self.new_activation()).evaluate(context)


def _L(items: Any = ()) -> celtypes.ListType:
    return celtypes.ListType(bounded(list(items)))


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
    if isinstance(value, (str, bytes, list)):
        _sized(len(value), "list" if isinstance(value, list) else "string")
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


def _read(value: Any, what: str) -> str:
    """A string a function reads whole (charged by its length)."""
    text = _text(value, what)
    charge(len(text))
    return text


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} needs an int")
    return int(value)


# ---- strings ------------------------------------------------------------------------


def _char_at(s: Any, i: Any) -> celtypes.StringType:
    text, index = _read(s, "charAt"), _int(i, "charAt")
    if not 0 <= index <= len(text):
        raise ValueError(f"charAt: index {index} out of range (0..{len(text)})")
    return _S(text[index : index + 1])


def _offset(offset: Any, what: str) -> int:
    index = _int(offset, what)
    if index < 0:
        raise ValueError(f"{what}: index out of range: {index}")
    return index


def _index_of(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    """cel-go's ``indexOf`` (v0.26, Kubernetes 1.35's): an offset past the end finds
    nothing (-1); the empty string is found at the offset."""
    if isinstance(target, list):
        if offset is not None:
            raise TypeError("a list's indexOf takes one argument")
        charge(len(target))
        return _I(next((i for i, x in enumerate(target) if _equal(x, item)), -1))
    text, sub = _read(target, "indexOf"), _text(item, "indexOf")
    start = 0 if offset is None else _offset(offset, "indexOf")
    if sub == "":
        return _I(start)
    if start >= len(text):
        return _I(-1)
    return _I(text.find(sub, start))


def _last_index_of(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    """cel-go's ``lastIndexOf``: a match starting at or before the offset; an offset at
    or past the end finds nothing (-1); the empty string is found at the offset."""
    if isinstance(target, list):
        if offset is not None:
            raise TypeError("a list's lastIndexOf takes one argument")
        charge(len(target))
        found = [i for i, x in enumerate(target) if _equal(x, item)]
        return _I(found[-1] if found else -1)
    text, sub = _read(target, "lastIndexOf"), _text(item, "lastIndexOf")
    if offset is None:
        return _I(text.rfind(sub))
    start = _offset(offset, "lastIndexOf")
    if sub == "":
        return _I(start)
    if start >= len(text):
        return _I(-1)
    return _I(text.rfind(sub, 0, start + len(sub)))


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _lower_ascii(s: Any) -> celtypes.StringType:
    return _S(_read(s, "lowerAscii").translate(_ASCII_LOWER))


def _upper_ascii(s: Any) -> celtypes.StringType:
    return _S(_read(s, "upperAscii").translate(_ASCII_UPPER))


def _replace(s: Any, old: Any, new: Any, n: Any = -1) -> celtypes.StringType:
    count = _int(n, "replace")
    text, before, after = _read(s, "replace"), _text(old, "replace"), _text(new, "replace")
    found = text.count(before) if before else len(text) + 1
    found = found if count < 0 else min(found, count)
    size = len(text) + found * (len(after) - len(before))
    _sized(size, "string")
    charge(size)
    return _S(text.replace(before, after, max(count, -1)))


def _split(s: Any, sep: Any, n: Any = -1) -> celtypes.ListType:
    text, by, count = _read(s, "split"), _text(sep, "split"), _int(n, "split")
    if count == 0:
        return _L([])
    _sized(len(text) if by == "" else text.count(by) + 1, "list")
    if by == "":
        chars = list(text)
        if 0 < count < len(chars):
            chars = [*chars[: count - 1], "".join(chars[count - 1 :])]
        return _L([_S(c) for c in chars])
    return _L([_S(p) for p in text.split(by, count - 1 if count > 0 else -1)])


def _substring(s: Any, start: Any, end: Any = None) -> celtypes.StringType:
    text = _read(s, "substring")
    first = _int(start, "substring")
    last = len(text) if end is None else _int(end, "substring")
    if not 0 <= first <= last <= len(text):
        raise ValueError(f"substring: range [{first}, {last}) out of range (0..{len(text)})")
    return _S(text[first:last])


# Go's unicode.IsSpace, which cel-go's trim uses: Python's str.strip also strips the
# information separators U+001C..U+001F.
_SPACE = "".join(
    c for c in map(chr, range(0x3000 + 1)) if c.isspace() and c not in "\x1c\x1d\x1e\x1f"
)


def _trim(s: Any) -> celtypes.StringType:
    return _S(_read(s, "trim").strip(_SPACE))


def _join(items: Any, sep: Any = "") -> celtypes.StringType:
    if not isinstance(items, list):
        raise TypeError("join needs a list of strings")
    by = _text(sep, "join")
    parts = [_text(x, "join") for x in items]
    size = sum(map(len, parts)) + len(by) * max(len(parts) - 1, 0)
    _sized(size, "string")  # before building it
    charge(size)
    return _S(by.join(parts))


_QUOTES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
           "\v": "\\v", "\\": "\\\\", '"': '\\"'}  # fmt: skip


def _quote(namespace: Any, s: Any) -> celtypes.StringType:
    if namespace is not STRINGS:
        raise TypeError("quote is strings.quote")
    text = _read(s, "strings.quote")
    _sized(2 * len(text) + 2, "string")
    return _S('"' + "".join(_QUOTES.get(c, c) for c in text) + '"')


_VERB = re2.compile(r"%(?:\.([0-9]+))?(.?)")


def _format(s: Any, args: Any) -> celtypes.StringType:
    """cel-go's ``format``: ``%s %d %f %e %b %o %x %X %%``, a precision for ``%f`` and
    ``%e``; any other verb is an error (Kubernetes refuses it when it compiles)."""
    template = _read(s, "format")
    if not isinstance(args, list):
        raise TypeError("format needs a list of arguments")
    values = iter(args)
    out: list[str] = []
    size = 0
    last = 0
    for m in _VERB.finditer(template):
        out.append(template[last : m.start()])
        last = m.end()
        precision, verb = m.group(1), m.group(2)
        if verb == "%" and precision is None:
            piece = "%"
        elif verb in ("s", "d", "f", "e", "b", "o", "x", "X"):
            try:
                value = next(values)
            except StopIteration:
                raise ValueError(f"format: too few arguments for {quoted(template)}") from None
            piece = _verb(verb, precision, value, MAX_STRING - size)
        else:
            raise ValueError(
                f"format: unsupported verb %{precision or ''}{verb!s} in {quoted(template)}"
            )
        out.append(piece)
        size += len(piece) + m.start()
        _sized(size, "string")
    out.append(template[last:])
    return _S("".join(out))


def _verb(verb: str, precision: str | None, value: Any, room: int) -> str:
    if verb == "s":
        return _format_s(value, room)
    if verb in "fe":
        if not isinstance(value, float):
            raise TypeError(f"format: %{verb} needs a double")
        digits = int(precision) if precision else 6
        if digits > MAX_PRECISION:
            raise ValueError(f"format: a precision of at most {MAX_PRECISION} digits")
        if math.isinf(value):
            return "∞" if value > 0 else "-∞"
        if math.isnan(value):
            return "NaN"
        return _scientific(value, digits) if verb == "e" else f"{value:.{digits}f}"
    if verb in "xX" and isinstance(value, (str, bytes)):
        raw = value.encode() if isinstance(value, str) else bytes(value)
        _sized(2 * len(raw), "string")
        return raw.hex() if verb == "x" else raw.hex().upper()
    whole = _int(value, f"format %{verb}")
    return str(whole) if verb == "d" else format(whole, verb)


_SUPER = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_TIMES = "\u00d7"  # the multiplication sign


def _scientific(value: float, digits: int) -> str:
    """``%e`` as cel-go writes it: the mantissa, a multiplication sign, then 10 and the
    exponent in superscript digits (``1.234500``, U+00D7, ``10⁰³``)."""
    mantissa, _, exponent = f"{value:.{digits}e}".partition("e")
    power = int(exponent)
    sign = "\u207b" if power < 0 else ""  # superscript minus
    return f"{mantissa}{_TIMES}10{sign}{f'{abs(power):02d}'.translate(_SUPER)}"


def _format_s(value: Any, room: int) -> str:
    """``%s`` of ``value`` as cel-go writes it (strings bare at the top, quoted inside a
    list or map; ``true``, ``null``, a whole double without ``.0``), in at most ``room``
    characters (an error past it, before building more)."""
    out: list[str] = []
    used = 0
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, nested = stack.pop()
        if isinstance(item, _Literal):
            piece = item.text
        elif isinstance(item, list):
            charge(len(item))
            stack.append((_Literal("]"), True))
            for i, x in enumerate(reversed(item)):
                stack.append((x, True))
                if i < len(item) - 1:
                    stack.append((_Literal(", "), True))
            piece = "["
        elif isinstance(item, dict):
            charge(len(item))
            entries = list(item.items())
            stack.append((_Literal("}"), True))
            for i, (k, v) in enumerate(reversed(entries)):
                stack.append((v, True))
                stack.append((_Literal(":"), True))
                stack.append((k, True))
                if i < len(entries) - 1:
                    stack.append((_Literal(", "), True))
            piece = "{"
        else:
            piece = _scalar(item, nested)
        used += len(piece)
        if used > room:
            raise ValueError(f"a selector may build a string of at most {MAX_STRING} characters")
        out.append(piece)
    return "".join(out)


class _Literal:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _scalar(value: Any, nested: bool) -> str:  # noqa: PLR0911 - a return per type
    if value is None or isinstance(value, celtypes.NullType):
        return "null"
    if isinstance(value, celtypes.BoolType):
        return "true" if value else "false"
    if isinstance(value, float):
        return _double_text(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return '"' + "".join(_QUOTES.get(c, c) for c in value) + '"' if nested else str(value)
    if isinstance(value, type):
        return _TYPE_NAMES.get(value.__name__, value.__name__)
    return str(value)


def _double_text(number: float) -> str:
    """A double as cel-go's ``%s`` writes it: no ``.0`` on a whole value."""
    value = float(number)  # celpy's DoubleType compares only with doubles
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == 0:
        return "0"
    # Go's strconv.FormatFloat(value, 'g', -1, 64): the shortest digits, in exponent
    # form when the exponent is under -4 or at least 6 (``1.23456789e+08``).
    digits = Decimal(repr(value))
    exponent = digits.adjusted()
    if exponent < -4 or exponent >= 6:
        sign, ds, _ = digits.as_tuple()
        mantissa = "".join(map(str, ds)).rstrip("0") or "0"
        head = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
        return f"{'-' if sign else ''}{head}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    text = format(digits, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


_TYPE_NAMES = {
    "IntType": "int", "UintType": "uint", "DoubleType": "double", "BoolType": "bool",
    "StringType": "string", "BytesType": "bytes", "ListType": "list", "MapType": "map",
    "NullType": "null_type", "TypeType": "type", "DurationType": "google.protobuf.Duration",
    "TimestampType": "google.protobuf.Timestamp",
}  # fmt: skip


# ---- regex ------------------------------------------------------------------------------


# Bytes RE2 may use for one compiled regular expression: its programs and the DFA
# caches its searches fill (RE2's ``max_mem`` option; its default is 8 MiB). A pattern
# whose program needs more (``\\pL{300}``: about 360,000 instructions, 3 MiB and 0.15 s
# of CPU to compile) is refused, after a few milliseconds; the largest that compile
# (about 65,000 instructions) take about 15 ms. Each one a memo keeps is charged this
# much (the most it can grow to), within MODELPLANE_CACHE_BUDGET_MIB.
REGEX_MAX_MEM = 1 << 20
# Instructions of a compiled program per evaluation step charged (:func:`regex_cost`):
# compiling one instruction takes about 1/40 of the CPU of one step.
REGEX_INSTRUCTIONS_PER_STEP = 32
# Steps charged for each use of a pattern RE2 refuses as too large: refusing one takes
# about a quarter of the CPU of compiling the largest program it accepts (6 ms against
# 26 ms for about 65,000 instructions, measured), charged on every use as a compiled
# pattern's size is, so that a selector cannot try many of them for nothing (review
# 15d: 290 refused patterns in `... || true`, within the cost limit, took 1.5 s).
REGEX_LARGEST_PROGRAM = 65_000
REGEX_REFUSED_STEPS = 1 + REGEX_LARGEST_PROGRAM // REGEX_INSTRUCTIONS_PER_STEP // 4
# The functions whose argument is a regular expression: (name, index of the pattern
# among the arguments of the method form; of the global form, one more).
REGEX_FUNCTIONS = {"matches": 0, "find": 0, "findAll": 0}

_REGEX_OPTIONS = re2.Options()
_REGEX_OPTIONS.max_mem = REGEX_MAX_MEM
_REGEX_OPTIONS.log_errors = False  # a tenant's pattern is no error of the process


# Programs one call keeps whatever the memo keeps (:func:`compiled_regex`): a memo whose
# budget is full refuses new entries, and a call evaluates each selector once per
# distinct device, so without these a spec of new patterns compiled each one four or
# five times. At most this many times :data:`REGEX_MAX_MEM` past the byte budget,
# until the next call (:func:`forget`).
REGEX_CALL_KEEP = 8
_this_call: dict[str, Any] = {}


def forget() -> None:
    """Forget the programs the previous call kept (before each call)."""
    _this_call.clear()


def compiled_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2, the engine of Go's ``regexp`` (which Kubernetes'
    regex library uses): linear time, no backreferences or lookaround; within
    :data:`REGEX_MAX_MEM`. Memoized in the byte budget, charged :data:`REGEX_MAX_MEM`
    bytes each, and the first :data:`REGEX_CALL_KEEP` of a call kept for the call (the
    ``re2`` module's own cache, 128 programs of up to 8 MiB each whatever the byte
    budget, is emptied after each compile).

    Returns:
        The compiled expression, or the reason it does not compile (a string).
    """
    got = _this_call.get(pattern)
    if got is None:
        got = _compiled_regex(pattern)
        if len(_this_call) < REGEX_CALL_KEEP:
            _this_call[pattern] = got
    return got


# What the reason of a pattern refused as too large says (:func:`regex_cost` reads it).
_TOO_LARGE = "is too large: its RE2 program"


@memo(256)
def _compiled_regex(pattern: str) -> Any:
    """:func:`compiled_regex`, memoized."""
    try:
        return re2.compile(pattern, _REGEX_OPTIONS)
    except re2.error as e:
        detail = e.args[0] if e.args else ""
        text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
        if "too large" in text:
            return (
                f"regular expression {quoted(pattern, 200)} {_TOO_LARGE} "
                f"needs more than {REGEX_MAX_MEM / 2**20:g} MiB (write fewer or smaller "
                "repetitions, or narrower character classes)"
            )
        return f"invalid regular expression {quoted(pattern, 200)}: {text}"
    finally:
        re2.purge()


memo_sized(type(re2.compile("")), lambda _program: REGEX_MAX_MEM)
re2.purge()


def regex_cost(pattern: str) -> int:
    """Evaluation steps charged for using ``pattern`` (compiling it, or finding it
    compiled): one, plus one per :data:`REGEX_INSTRUCTIONS_PER_STEP` instructions of
    its program; :data:`REGEX_REFUSED_STEPS` when RE2 refuses it as too large; one when
    it does not parse (that is the evaluation's error)."""
    return _program_cost(compiled_regex(pattern))


def _program_cost(program: Any) -> int:
    """:func:`regex_cost` of what :func:`compiled_regex` gave."""
    if isinstance(program, str):
        return REGEX_REFUSED_STEPS if _TOO_LARGE in program else 1
    return 1 + int(program.programsize) // REGEX_INSTRUCTIONS_PER_STEP


def _regex(pattern: Any, what: str) -> Any:
    """``pattern`` compiled (:func:`compiled_regex`), its cost charged."""
    program = compiled_regex(_text(pattern, what))
    charge(_program_cost(program))  # a refused pattern too: refusing it took CPU
    if isinstance(program, str):
        raise ValueError(f"{what}: {program}")
    return program


def _matches(s: Any, pattern: Any) -> celtypes.BoolType:
    """CEL's ``matches``: whether RE2 finds ``pattern`` anywhere in ``s``."""
    return _B(_regex(pattern, "matches").search(_read(s, "matches")) is not None)


def _find(s: Any, pattern: Any) -> celtypes.StringType:
    m = _regex(pattern, "find").search(_read(s, "find"))
    return _S(m.group(0) if m else "")


def _find_all(s: Any, pattern: Any, n: Any = -1) -> celtypes.ListType:
    limit = _int(n, "findAll")
    found: list[Any] = []
    if limit != 0:
        for m in _regex(pattern, "findAll").finditer(_read(s, "findAll")):
            found.append(_S(m.group(0)))
            if len(found) == limit:
                break
            _sized(len(found), "list")
    return _L(found)


# ---- lists and sets -----------------------------------------------------------------------


def _items(value: Any, what: str) -> list[Any]:
    """The elements of a list (charged: a function reads all of them)."""
    if not isinstance(value, list):
        raise TypeError(f"{what} needs a list")
    charge(len(value))
    return list.copy(value)


def _is_sorted(items: Any) -> celtypes.BoolType:
    xs = _items(items, "isSorted")
    return _B(all(not _less(b, a) for a, b in itertools.pairwise(xs)))


_SUMMABLE = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType, celtypes.DurationType)


def _sum(items: Any) -> Any:
    """Kubernetes' ``sum``: of ints, uints, doubles or durations, one type per list."""
    xs = _items(items, "sum")
    if not xs:
        return _I(0)
    kind = type(xs[0])
    if kind not in _SUMMABLE or any(type(x) is not kind for x in xs):
        raise TypeError("sum needs a list of ints, uints, doubles or durations, of one type")
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return kind(total)


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
        size = sum(len(x) if isinstance(x, list) else 1 for x in out)
        _sized(size, "list")
        charge(size)
        out = [y for x in out for y in (x if isinstance(x, list) else [x])]
    return _L(out)


def _range(namespace: Any, n: Any) -> celtypes.ListType:
    if namespace is not LISTS:
        raise TypeError("range is lists.range")
    count = _int(n, "lists.range")
    if count > MAX_RANGE:
        raise ValueError(f"lists.range: {count} elements, over the {MAX_RANGE} it may make")
    charge(max(count, 0))
    return _L([_I(i) for i in range(max(count, 0))])


MAX_RANGE = 10_000  # a selector's list: far beyond any device's needs, small in memory


def _distinct(items: Any) -> celtypes.ListType:
    xs = _items(items, "distinct")
    if _keys(xs) is not None:  # linear, by keys
        seen: set[Any] = set()
        kept = []
        for x in xs:
            if _key(x) not in seen:
                seen.add(_key(x))
                kept.append(x)
        return _L(kept)
    charge(len(xs) * len(xs))  # compares each with the ones kept
    out: list[Any] = []
    for x in xs:
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


def _keys(xs: list[Any]) -> set[Any] | None:
    """The :func:`_key` of every element, or None when one is a list or a map."""
    keys = set()
    for x in xs:
        k = _key(x)
        if k is None:
            return None
        keys.add(k)
    return keys


def _found(xs: list[Any], ys: list[Any]) -> Iterator[bool]:
    """For each element of ``xs``, whether it is in ``ys``: by keys when every element
    has one (linear), else pairwise (charged ``len(xs) * len(ys)`` first)."""
    keys = _keys(ys)
    if keys is not None and all(_key(x) is not None for x in xs):
        return (_key(x) in keys for x in xs)
    charge(len(xs) * len(ys))
    return (_member(x, ys) for x in xs)


def _contained(xs: list[Any], ys: list[Any]) -> bool:
    """Whether every element of ``xs`` is in ``ys``."""
    return all(_found(xs, ys))


_base_in = base_functions["_in_"]


def _in(item: Any, container: Any) -> Any:
    """``x in list`` and ``k in map`` by CEL's equality (charged by the list's length; a
    map's key found by lookup, a number's by value); an error operand stays the error."""
    for operand in (item, container):
        if isinstance(operand, Exception):
            return operand
    try:
        if isinstance(container, list):
            charge(len(container))
            return _B(any(_equal(item, y) for y in container))
        if isinstance(container, dict):
            return _B(_map_get(container, item) is not _MISSING)
    except _ErrorInside as inside:
        return inside.error
    return _base_in(item, container)


_base_contains = base_functions["contains"]


def _contains(target: Any, *args: Any) -> Any:
    if target is SETS:
        if len(args) != 2:
            raise TypeError("sets.contains takes two lists")
        a, b = _set_args(target, args[0], args[1], "contains")
        return _B(_contained(b, a))
    return _base_contains(target, *args)


def _equivalent(namespace: Any, a: Any, b: Any) -> celtypes.BoolType:
    xs, ys = _set_args(namespace, a, b, "equivalent")
    return _B(_contained(xs, ys) and _contained(ys, xs))


def _intersects(namespace: Any, a: Any, b: Any) -> celtypes.BoolType:
    xs, ys = _set_args(namespace, a, b, "intersects")
    return _B(any(_found(xs, ys)))


# ---- cross-type numeric comparisons ----------------------------------------------------------


def _numeric(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, (bool, celtypes.BoolType))


def _plain(x: Any) -> int | float:
    return float(x) if isinstance(x, float) else int(x)


def _pair(a: Any, b: Any) -> tuple[int | float, int | float]:
    """Two numbers as cel-go compares them: an int or uint against a double as doubles
    (``common/types/compare.go``), an int against a uint exactly."""
    if isinstance(a, float) or isinstance(b, float):
        return float(a), float(b)
    return int(a), int(b)


def _mixed(a: Any, b: Any) -> bool:
    return _numeric(a) and _numeric(b) and type(a) is not type(b)


def _relation(name: str, op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    base = base_functions[name]
    if name in ("_==_", "_!=_"):
        equal = name == "_==_"

        def same(a: Any, b: Any) -> Any:
            for operand in (a, b):
                if isinstance(operand, Exception):  # an error operand stays the error
                    return operand
            if getattr(a, "cel_equals_own_type_only", False) and type(a) is not type(b):
                # Kubernetes' quantity and semver: == of another type is no overload.
                raise TypeError(f"no == for {type(a).__name__} and {type(b).__name__}")
            try:
                return _B(_equal(a, b) is equal)
            except _ErrorInside as inside:
                return inside.error

        return same

    def compare(a: Any, b: Any) -> Any:
        if _mixed(a, b):
            return _B(op(*_pair(a, b)))
        if isinstance(a, (str, list)) and isinstance(b, (str, list)):
            charge(min(len(a), len(b)))
        return base(a, b)

    compare.__name__ = f"cross_type_{op.__name__}"
    return compare


_base_add = base_functions["_+_"]


def _add(a: Any, b: Any) -> Any:
    """``a + b``, refusing a string, bytes or list past the bounds before building it."""
    if isinstance(a, (str, bytes, list)) and isinstance(b, (str, bytes, list)):
        _sized(len(a) + len(b), "list" if isinstance(a, list) else "string")
        charge(len(a) + len(b))
    return _base_add(a, b)


def _equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality (cel-go, on dyn values): numbers by value, values of
    other different types unequal (celpy's own ``==`` raises on some, and takes ``false``
    for ``0``), lists and maps element by element. Iterative, charging each pair it
    compares: lists nested by shared reference are as long as they look."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        charge(1)
        pairs = _step(x, y)
        if pairs is None:
            return False
        stack.extend(pairs)
    return True


class _ErrorInside(Exception):
    """An evaluation error held inside a compared list or map (celpy keeps ``{"a": 1/0}``
    as a map holding the error): the comparison is that error, as in cel-go."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _step(x: Any, y: Any) -> list[tuple[Any, Any]] | None:
    """One step of :func:`_equal`: None when ``x`` and ``y`` differ here, else the pairs
    of their elements still to compare (none for two equal scalars).

    Raises:
        _ErrorInside: when either is an evaluation error.
    """
    for value in (x, y):
        if isinstance(value, Exception):
            raise _ErrorInside(value)
    if _mixed(x, y):
        a, b = _pair(x, y)
        return [] if a == b else None
    if type(x) is not type(y) or (isinstance(x, (list, dict)) and len(x) != len(y)):
        return None
    if isinstance(x, list):
        return list(zip(x, y, strict=True))
    if isinstance(x, dict):
        pairs = [(v, _map_get(y, k)) for k, v in x.items()]
        return None if any(other is _MISSING for _, other in pairs) else pairs
    return [] if _scalar_equal(x, y) else None


_MISSING = object()


def _lookup(mapping: dict[Any, Any], key: Any) -> Any:
    try:
        return mapping.get(key, _MISSING)
    except TypeError:  # celpy's types refuse comparing keys of other types
        return _MISSING


def _map_get(mapping: dict[Any, Any], key: Any) -> Any:
    """``mapping[key]`` as CEL looks a key up: a number by value (``1``, ``1u`` and
    ``1.0`` are one key), a key of another type absent (not an error)."""
    found = _lookup(mapping, key)
    if found is _MISSING and _numeric(key):
        charge(len(mapping))
        for k, v in mapping.items():
            if _numeric(k) and _pair(k, key)[0] == _pair(k, key)[1]:
                return v
    return found


def _scalar_equal(x: Any, y: Any) -> bool:
    try:
        return bool(x == y)
    except TypeError:
        return False


def _key(x: Any) -> Any:
    """A hashable key equal for values CEL's equality takes as equal (numbers by value,
    other types apart), or None for a list or a map."""
    if isinstance(x, (list, dict)):
        return None
    if _numeric(x):
        return ("number", _plain(x))
    return (type(x).__name__, x)


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
    "matches": _matches,
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
    "_in_": _in,
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
