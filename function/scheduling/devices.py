"""DRA-style device selectors: CEL expressions evaluated against one device.

A ModelDeployment member asks for devices with ``nodeSelector.devices[]``; each
request names a ``count`` and CEL ``selectors`` that a device must all satisfy.
The expressions read a device the way Kubernetes Dynamic Resource Allocation
does (https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/,
``DeviceSelector.cel``)::

    device.driver                                  # string
    device.attributes["<driver>"].<name>           # string, bool, int or semver
    device.capacity["<driver>"].<name>             # Quantity
    quantity("141Gi"), semver("9.0.0")             # helpers
    q.compareTo(other) / q.isGreaterThan(other) / q.isLessThan(other)
    q.asInteger() / q.asApproximateFloat()
    v.compareTo(other) / v.isGreaterThan(other) / v.isLessThan(other)
    v.major() / v.minor() / v.patch()

The devices come from an InferenceCluster's ``status.gpuPools[].devices[]``
(copied from its InferenceClass): ``attributes`` maps a bare name to exactly one
of ``{string, version, bool, int}``; ``capacity`` maps a bare name to
``{value: <Kubernetes quantity>}``; both live in the device's driver domain.

Rules (as in DRA): an expression that does not parse is an error that names it
(:class:`InvalidSelector`); an expression that fails at evaluation (a missing
attribute, a type mismatch, a division by zero) or returns a non-boolean is an
error too (:class:`SelectorEvaluationError`), never a non-match: Kubernetes says of
``CELDeviceSelector.expression`` "Any other result is an error and causes allocation
of devices to abort". Callers keep what exists and name the field. One exception,
because the fleet is wider than one cluster's DeviceClass: a device of another
driver (the expression addresses ``device.attributes["<domain>"]`` or
``device.capacity["<domain>"]`` of some domains, and the device's driver is none of
them) does not match when the expression fails on it; on a real cluster the
DeviceClass of those drivers would never offer it (Modelplane's AMD recipe beside an
NVIDIA cluster relies on this).

Hot path: compiled programs are cached by normalized expression (:func:`normalize`)
and cost limit, and results by (normalized expression, device), because every cluster
of a fleet usually carries the same few InferenceClass devices. Selectors whose
estimated cost (:func:`estimate_cost`) is over the limit are refused before they run.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    Context,
    Decimal,
    DivisionByZero,
    Inexact,
    InvalidOperation,
    Overflow,
    localcontext,
)
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import base_functions as ev_base_functions
from celpy.evaluation import celstr

from function.api.inferencecluster import CLAIM_DRA
from function.core import deadline
from function.core import k8svalidation as k8s
from function.core.errors import quoted
from function.core.memo import memo, shared
from function.scheduling import cel_library

# celpy logs every evaluation error at ERROR level; a non-matching device is not an error.
logging.getLogger("celpy").setLevel(logging.CRITICAL)

# A device attribute of type int is a 64-bit signed integer (DRA's DeviceAttribute.IntValue,
# the XRD's format: int64), as CEL's int is: values are within [-INT64_LIMIT, INT64_LIMIT).
INT64_LIMIT = 2**63

# A sum that Go's inf.Dec would hold exactly in more digits than this is refused (Go
# would write out 1e2147483647 + 1n in two billion digits); a parsed quantity has at most
# the 8,192 characters of a selector.
_SUM_DIGITS = 10_000
_SUM_CONTEXT = Context(
    prec=_SUM_DIGITS,
    Emax=MAX_EMAX,
    Emin=MIN_EMIN,
    traps=[Inexact, InvalidOperation, Overflow, DivisionByZero],
)
_INT64 = (-(2**63), 2**63 - 1)
# Go's math.Pow10 tables (float64 literals: correctly rounded, as Python's are).
_POW10 = tuple(float(f"1e{i}") for i in range(32))
_POW10_POS32 = tuple(float(f"1e{32 * i}") for i in range(10))
_POW10_NEG32 = tuple(float(f"1e-{32 * i}") for i in range(11))
_SEMVER = re.compile(
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)


class Quantity:
    """A Kubernetes quantity inside CEL (``quantity("20Gi")``, a device's capacity): Go's
    ``resource.Quantity`` as the CEL library (``k8s.io/apiserver/pkg/cel/library``,
    ``quantity.go``) holds it, its value and form from
    :func:`function.core.k8svalidation.go_quantity` (``resource.ParseQuantity``, no
    trimming). Ordered by value (``Quantity.Cmp``).

    Raises:
        ValueError: ``'<text>' is not a Kubernetes quantity: <Go's error>``.
    """

    __slots__ = ("go", "text")
    # Kubernetes' Quantity.Equal: == with another type is no overload, not false.
    cel_equals_own_type_only = True

    def __init__(self, text: str) -> None:
        self.text = text
        go = _go_quantity(text, decoded=False)
        if isinstance(go, str):
            raise ValueError(f"{quoted(text)} is not a Kubernetes quantity: {go}")
        self.go = go

    @classmethod
    def decoded(cls, text: str) -> Quantity:
        """A device's capacity (``{value: <quantity>}``) as the API server decodes a
        ResourceSlice's: :func:`function.core.k8svalidation.decode_go_quantity`
        (``" 80Gi"`` is 80Gi; a tab in it is refused).

        Raises:
            ValueError: as :class:`Quantity`.
        """
        go = _go_quantity(text, decoded=True)
        if isinstance(go, str):
            raise ValueError(f"{quoted(text)} is not a Kubernetes quantity: {go}")
        q = cls.__new__(cls)
        q.text = text
        q.go = go
        return q

    @classmethod
    def of(cls, go: k8s.GoQuantity) -> Quantity:
        """The quantity Go holds as ``go`` (``add``, ``sub``), written with an exponent
        when that is shorter (``1e999999`` is not written out in a million digits)."""
        q = cls.__new__(cls)
        q.go = go
        q.text = str(go.value.normalize(_SUM_CONTEXT))
        return q

    @property
    def value(self) -> Decimal:
        """The exact value (``Quantity.AsDec``)."""
        return self.go.value

    def as_int64(self) -> int | None:
        """Go's ``Quantity.AsInt64``: the value when Go holds it as an ``int64Amount``
        whose scale is not negative and whose value an int64 holds, else None: ``1k``
        is 1000, but ``1000m`` (scale -3), ``1.5Gi`` and ``1Ei`` (held as ``inf.Dec``)
        are None though whole."""
        go = self.go
        if go.dec or go.exponent < 0:
            return None
        return _scaled_int64(int(go.unscaled), go.exponent)

    def as_approximate_float(self) -> float:
        """Go's ``Quantity.AsApproximateFloat64``: the unscaled integer as the nearest
        float64, times ``math.Pow10(exponent)`` (past 1e308 that is +Inf: ``0e400`` is
        NaN, ``1e400`` +Inf)."""
        go = self.go
        base = float(go.unscaled) if go.value else 0.0  # Go's zero is +0
        if go.exponent == 0:
            return base
        return base * _go_pow10(go.exponent)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.go.value == other.go.value

    def __hash__(self) -> int:
        return hash(self.go.value)

    def __repr__(self) -> str:
        return f"quantity({self.text!r})"


@memo(4096)
def _go_quantity(text: str, *, decoded: bool) -> k8s.GoQuantity | str:
    """``text`` as Go parses it (:func:`function.core.k8svalidation.go_quantity`) or,
    when ``decoded``, as the API server decodes it in an object
    (:func:`function.core.k8svalidation.decode_go_quantity`); Go's error where it
    refuses it (memoized: a fleet's few capacities and selector literals recur)."""
    try:
        return k8s.decode_go_quantity(text) if decoded else k8s.go_quantity(text)
    except ValueError as e:
        return str(e)


def decoded_quantity_problem(text: str) -> str | None:
    """Go's error for ``text`` as the API server decodes an object's quantity (a
    ResourceSlice's capacity), None when it is one (:meth:`Quantity.decoded`)."""
    go = _go_quantity(text, decoded=True)
    return go if isinstance(go, str) else None


def _go_pow10(n: int) -> float:
    """Go's ``math.Pow10`` (not always the float nearest 10^n: a product of two)."""
    if 0 <= n <= 308:
        return _POW10_POS32[n // 32] * _POW10[n % 32]
    if -323 <= n <= 0:
        return _POW10_NEG32[-n // 32] / _POW10[-n % 32]
    return math.inf if n > 0 else 0.0


def _scaled_int64(value: int, scale: int) -> int | None:
    """Go's ``positiveScaleInt64``: ``value * 10^scale`` (``scale`` >= 0) when an int64
    holds it, else None."""
    if not value or not scale:
        return value
    if scale > 18:
        return None
    scaled = value * 10**scale
    return scaled if _INT64[0] <= scaled <= _INT64[1] else None


def _int64_add(a: k8s.GoQuantity, b: k8s.GoQuantity, b_count: int) -> k8s.GoQuantity | None:
    """Go's ``int64Amount.Add`` of ``a`` and ``b_count * 10^b.exponent``: the sum at the
    smaller scale, None when a scaled operand or the sum leaves int64 (Go then adds as
    ``inf.Dec``). A zero ``b`` leaves ``a`` as it is; a zero ``a`` becomes ``b``."""
    a_count = int(a.unscaled)
    if not b_count:
        return a
    if not a_count:
        scale = b.exponent
        total: int | None = b_count
    elif a.exponent == b.exponent:
        scale, total = a.exponent, a_count + b_count
    elif a.exponent > b.exponent:
        scale = b.exponent
        scaled = _scaled_int64(a_count, a.exponent - b.exponent)
        total = None if scaled is None else scaled + b_count
    else:
        scale = a.exponent
        scaled = _scaled_int64(b_count, b.exponent - a.exponent)
        total = None if scaled is None else a_count + scaled
    if total is None or not _INT64[0] <= total <= _INT64[1]:
        return None
    return k8s.GoQuantity(Decimal(total).scaleb(scale, _SUM_CONTEXT), scale, False)


def _go_add(a: k8s.GoQuantity, b: k8s.GoQuantity, negate: bool) -> k8s.GoQuantity:
    """Go's ``Quantity.Add`` (``Sub`` when ``negate``): ``int64Amount.Add`` when both
    are held as int64 and it does not overflow (``Sub`` negates the int64 as Go does:
    -(-2^63) wraps to -2^63), else the exact ``inf.Dec`` sum at the larger scale.

    Raises:
        ValueError: when the exact sum needs more than :data:`_SUM_DIGITS` digits.
    """
    if not a.dec and not b.dec:
        count = int(b.unscaled)
        if negate:
            count = -count if count != _INT64[0] else count
        total = _int64_add(a, b, count)
        if total is not None:
            return total
    try:
        with localcontext(_SUM_CONTEXT):
            value = a.value - b.value if negate else a.value + b.value
    except ArithmeticError:
        raise ValueError(
            f"the quantity's exact value needs more than {_SUM_DIGITS:,} digits"
        ) from None
    return k8s.GoQuantity(value, min(a.exponent, b.exponent), True)


@dataclass(frozen=True, slots=True)
class Semver:
    """A semantic version inside CEL (``semver("9.0.0")``); ordered per semver.org."""

    major: int
    minor: int
    patch: int
    pre: tuple[Any, ...] = ()
    # Kubernetes' Semver.Equal: == with another type is no overload, not false.
    cel_equals_own_type_only = True

    @classmethod
    def parse(cls, text: str) -> Semver:
        """Parse ``MAJOR.MINOR.PATCH[-pre][+build]``; raises ValueError otherwise."""
        m = _SEMVER.match(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"{quoted(text)} is not a semantic version")
        pre: tuple[Any, ...] = ()
        if m.group(4):
            ids = m.group(4).split(".")
            if any(p.isdigit() and len(p) > 1 and p[0] == "0" for p in ids):
                raise ValueError(
                    f"{quoted(text)} is not a semantic version (a numeric "
                    "pre-release identifier with a leading zero)"
                )
            pre = tuple(int(p) if p.isdigit() else p for p in ids)
        major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if max(major, minor, patch) > _UINT64:
            raise ValueError(f"{quoted(text)} is not a semantic version (a number past 2^64)")
        return cls(major, minor, patch, pre)

    def key(self) -> tuple[Any, ...]:
        """Sort key: a release sorts after its pre-releases; numeric ids before text ids."""
        pre = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 1 if not pre else 0, pre)


_UINT64 = 2**64 - 1


def _cmp(a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.go.value > b.go.value) - (a.go.value < b.go.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        ka, kb = a.key(), b.key()
        return (ka > kb) - (ka < kb)
    raise TypeError(f"cannot compare {type(a).__name__} with {type(b).__name__}")


def _quantity(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise TypeError("quantity needs a string")
    return Quantity(str(text))


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType(_cmp(a, b))


def _greater(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_cmp(a, b) > 0)


def _less(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_cmp(a, b) < 0)


def _as_integer(q: Any) -> celtypes.IntType:
    if not isinstance(q, Quantity):
        raise TypeError("asInteger needs a quantity")
    value = q.as_int64()
    if value is None:  # Kubernetes' message, with the quantity
        raise ValueError(f"asInteger: cannot convert value to integer ({quoted(q.text)})")
    return celtypes.IntType(value)


def _as_float(q: Any) -> celtypes.DoubleType:
    if not isinstance(q, Quantity):
        raise TypeError("asApproximateFloat needs a quantity")
    return celtypes.DoubleType(q.as_approximate_float())


def _is_quantity(text: Any) -> celtypes.BoolType:
    """Kubernetes' ``isQuantity``: whether ``resource.ParseQuantity`` takes the string
    as it is (``" 1Gi"`` is not; ``"Gi"`` is, as 0)."""
    if not isinstance(text, str):
        raise TypeError("isQuantity needs a string")
    try:
        k8s.go_quantity(text)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _sign(q: Any) -> celtypes.IntType:
    if not isinstance(q, Quantity):
        raise TypeError("sign needs a quantity")
    return celtypes.IntType((q.go.value > 0) - (q.go.value < 0))


def _is_integer(q: Any) -> celtypes.BoolType:
    """Kubernetes' ``isInteger``: whether ``Quantity.AsInt64`` succeeds
    (:meth:`Quantity.as_int64`: ``1000m``, ``1.5Gi`` and ``1Ei`` are not, though whole)."""
    if not isinstance(q, Quantity):
        raise TypeError("isInteger needs a quantity")
    return celtypes.BoolType(q.as_int64() is not None)


def _operand(x: Any, what: str) -> k8s.GoQuantity:
    """A quantity, or an int as ``resource.NewQuantity(x, DecimalExponent)`` has it."""
    if isinstance(x, Quantity):
        return x.go
    if isinstance(x, int) and not isinstance(x, bool):
        return k8s.GoQuantity(Decimal(int(x)), 0, False)
    raise TypeError(f"{what} needs a quantity or an int")


def _add(q: Any, x: Any) -> Quantity:
    if not isinstance(q, Quantity):
        raise TypeError("add needs a quantity")
    return Quantity.of(_go_add(q.go, _operand(x, "add"), negate=False))


def _sub(q: Any, x: Any) -> Quantity:
    if not isinstance(q, Quantity):
        raise TypeError("sub needs a quantity")
    return Quantity.of(_go_add(q.go, _operand(x, "sub"), negate=True))


def _normalized_semver(text: str) -> str:
    """Kubernetes' semver normalization (``normalizeAndParse``): a leading ``v``
    dropped, leading zeros of the first three dot-separated parts removed, a missing
    minor or patch taken as 0 (``v01.2`` -> ``1.2.0``); a short version with a
    pre-release or build (``1-alpha``) is not a version. No spaces are trimmed."""
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            parts[i] = part if part[:1] in tuple("0123456789") else "0" + part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise ValueError(
                f"{quoted(text)} is not a semantic version (a short version with "
                "pre-release or build metadata)"
            )
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _semver_of(text: Any, normalize: Any = False) -> Semver:
    """Kubernetes' ``semver(s[, normalize])``: strict semver 2.0 (no spaces)."""
    if not isinstance(text, str) or not isinstance(normalize, (bool, celtypes.BoolType)):
        raise TypeError("semver needs a string and, optionally, a bool")
    if text != text.strip():
        raise ValueError(f"{quoted(text)} is not a semantic version (spaces around it)")
    return Semver.parse(_normalized_semver(text) if normalize else text)


def _is_semver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    try:
        _semver_of(text, normalize)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _part(i: int) -> Any:
    def f(v: Any) -> celtypes.IntType:
        if not isinstance(v, Semver):
            raise TypeError("needs a semver")
        return celtypes.IntType((v.major, v.minor, v.patch)[i])

    return f


FUNCTIONS: dict[str, Any] = {
    **cel_library.FUNCTIONS,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "sign": _sign,
    "isInteger": _is_integer,
    "add": _add,
    "sub": _sub,
    "semver": _semver_of,
    "isSemver": _is_semver,
    "compareTo": _compare_to,
    "isGreaterThan": _greater,
    "isLessThan": _less,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_float,
    "major": _part(0),
    "minor": _part(1),
    "patch": _part(2),
}

_ENV = celpy.Environment(runner_class=cel_library.CountingRunner)
# A compiled program refers to both: not charged to each memo entry that holds one.
shared(_ENV, FUNCTIONS)


# The most of a selector a message quotes (characters): the field is named beside it, and
# a selector may be 8 KiB (review 16b F3; the runner's deadline message shows as much).
_SHOWN_EXPRESSION = 200


class InvalidSelector(ValueError):
    """A CEL selector that does not compile; names the expression and why."""

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(
            f"CEL selector {quoted(expression.strip(), _SHOWN_EXPRESSION)} does not compile: "
            f"{reason}"
        )
        self.expression = expression
        self.reason = reason


class SelectorEvaluationError(ValueError):
    """A CEL selector that compiled but failed while evaluating on a device.

    Attributes:
        expression: The selector, as written.
        device: The device it was evaluated on.
        reason: The evaluation error (or the non-boolean result).
    """

    def __init__(self, expression: str, device: Device, reason: str) -> None:
        super().__init__(
            f"CEL selector {quoted(expression.strip(), _SHOWN_EXPRESSION)} fails on device "
            f"{device.name or '?'} "
            f"(driver {device.driver or '?'}): {reason}"
        )
        self.expression = expression
        self.device = device
        self.reason = reason


_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_KNOWN = (
    frozenset(k for k in ev_base_functions if k[:1].isalpha())
    | _MACROS
    | {"has", "dyn"}
    | frozenset(FUNCTIONS)
)
_VARIABLES = frozenset({"device"})
# Identifiers that are not variables: the type identifiers and the namespaces of
# ``sets.contains(...)``, ``strings.quote(...)`` and ``lists.range(...)``
# (:mod:`function.scheduling.cel_library`).
_IDENTIFIERS = cel_library.TYPE_IDENTIFIERS | frozenset(cel_library.NAMESPACES)


def _check(tree: Any) -> str | None:
    """What a DRA CEL compiler would reject beyond syntax, or None.

    Kubernetes compiles a device selector against a declared environment: the
    only variable is ``device``, and functions must exist. celpy only parses,
    so unknown functions and undeclared variables are found here (otherwise
    they would fail at every evaluation and silently match nothing).
    """
    depth = _depth(tree)
    if depth > MAX_TREE_DEPTH:
        return (
            f"it nests {depth} levels deep, over the {MAX_TREE_DEPTH} it may (each "
            "parenthesis, call, macro and operator adds levels: cel-python evaluates "
            "recursively): write it with fewer levels"
        )
    problem = _macro_arguments(tree) or _names_problem(tree)
    if problem is not None:
        return problem
    returns = _result_type(tree)
    if returns is not None and returns != "bool":
        return (
            f"it returns {_a(returns)}, not a boolean: a selector is a condition on the "
            'device, such as device.driver == "gpu.nvidia.com"'
        )
    return None


def _names_problem(tree: Any) -> str | None:
    """A function or identifier the environment does not declare (or declares and this
    evaluator does not evaluate), or None."""
    calls, idents, bound = _names(tree)
    for name in idents:
        if name in cel_library.UNSUPPORTED_IDENTIFIERS and name not in bound:
            return (
                f"{name}.* is in Kubernetes' CEL library but this function does not "
                "evaluate it: write the selector without it"
            )
    for name in calls:
        if name in cel_library.UNSUPPORTED:
            return (
                f"{name} is in Kubernetes' CEL library but this function does not evaluate "
                "it (nor optional values, URLs, IPs or CIDRs): write the selector without it"
            )
        if name not in _KNOWN:
            return f"unknown function {name}"
    for name in idents:
        if name not in _VARIABLES and name not in bound and name not in _IDENTIFIERS:
            return f"undeclared reference to {name} (the only variable is device)"
    return None


# What an expression returns when its top node settles it (cel-go's type checker, which
# Kubernetes runs on every DRA selector with the result type bool, refuses these at
# admission; an attribute read, ``device.attributes["d"].x``, is dyn and checked at
# evaluation instead). Global functions and methods by name, as the CEL spec and
# Kubernetes' quantity and semver libraries declare them.
_CALL_RETURNS = {
    "size": "int", "int": "int", "uint": "uint", "double": "double", "string": "string",
    "bytes": "bytes", "bool": "bool", "has": "bool", "matches": "bool",
    "quantity": "quantity", "semver": "semver", "duration": "duration",
    "timestamp": "timestamp", "type": "type", "isQuantity": "bool", "isSemver": "bool",
}  # fmt: skip
_METHOD_RETURNS = {
    "contains": "bool", "startsWith": "bool", "endsWith": "bool", "matches": "bool",
    "all": "bool", "exists": "bool", "exists_one": "bool", "isGreaterThan": "bool",
    "isLessThan": "bool", "size": "int", "compareTo": "int", "asInteger": "int",
    "major": "int", "minor": "int", "patch": "int", "asApproximateFloat": "double",
    "map": "list", "filter": "list", "sign": "int", "isInteger": "bool", "add": "quantity",
    "sub": "quantity", **cel_library.METHOD_RETURNS,
}  # fmt: skip
_DEVICE_FIELDS = {"driver": "string", "attributes": "map", "capacity": "map"}
_LITERALS = {
    "INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "STRING_LIT": "string",
    "MLSTRING_LIT": "string", "BYTES_LIT": "bytes", "BOOL_LIT": "bool", "NULL_LIT": "null",
}  # fmt: skip
# Operators that never give a boolean, whatever their operands: + - * / % and unary -.
_ARITHMETIC = "a number, string, list or duration"
_NEGATED = "a number or duration"


def _a(returns: str) -> str:
    if returns in (_ARITHMETIC, _NEGATED):
        return returns
    return f"an {returns}" if returns[0] in "aeiou" else f"a {returns}"


def _result_type(tree: Any) -> str | None:  # noqa: C901, PLR0911, PLR0912 - a branch per node kind
    """The CEL type a parsed selector returns when its shape settles it, or None (dyn:
    known only at evaluation).

    Args:
        tree: celpy's parse tree (``Environment.compile``).

    ``"bool"`` for a comparison, ``&&``, ``||``, ``!``, ``in``, ``has()`` or a
    predicate method; the literal's type for a literal; ``"string"`` for
    ``device.driver``; the declared return of a known function; the arithmetic
    description for ``+ - * / %``; for ``c ? a : b``, the type both branches share.
    """
    from lark import Token, Tree

    node = tree
    while True:
        if isinstance(node, Token):
            return _LITERALS.get(node.type)
        kids = node.children
        kind = node.data
        if kind == "expr" and len(kids) == 3:
            a, b = _result_type(kids[1]), _result_type(kids[2])
            return a if a == b else None
        if len(kids) == 2 and kind in ("conditionalor", "conditionaland", "relation"):
            return "bool"
        if len(kids) == 2 and kind in ("addition", "multiplication"):
            return _ARITHMETIC
        if len(kids) == 2 and kind == "unary":
            return "bool" if kids[0].data == "unary_not" else _NEGATED
        if kind == "member_dot_arg":
            return _METHOD_RETURNS.get(str(kids[1]))
        if kind == "ident_arg":
            return _CALL_RETURNS.get(str(kids[0]))
        if kind == "member_dot":
            inner = kids[0]
            while (
                isinstance(inner, Tree)
                and inner.data in ("member", "primary")
                and len(inner.children) == 1
            ):
                inner = inner.children[0]
            is_device = isinstance(inner, Tree) and inner.data == "ident"
            if is_device and str(inner.children[0]) in _VARIABLES:
                return _DEVICE_FIELDS.get(str(kids[1]))
            return None
        if kind == "ident":
            return "object" if str(kids[0]) in _VARIABLES else None
        if kind == "list_lit":
            return "list"
        if kind == "map_lit":
            return "map"
        if kind == "literal" or (len(kids) == 1 and kind in _PASS_THROUGH):
            node = kids[0]
            continue
        return None


_PASS_THROUGH = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
     "unary", "member", "primary", "paren_expr"}
)  # fmt: skip


# Deepest parse tree a selector may have (a bare comparison is 15 levels, each pair of
# parentheses adds 10): cel-python evaluates recursively, and about 540 levels exhaust
# Python's stack, fewer below a composer's own frames.
MAX_TREE_DEPTH = 300


def _depth(tree: Any) -> int:
    """Levels of the parse tree ``tree`` (iterative: any depth)."""
    from lark import Tree

    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        if level > deepest:
            deepest = level
        if isinstance(node, Tree):
            stack.extend((child, level + 1) for child in node.children)
    return deepest


def _names(tree: Any) -> tuple[list[str], list[str], set[str]]:
    """The functions a parse tree calls, the identifiers it reads, and the variables its
    macros bind (``x`` in ``list.all(x, ...)``)."""
    calls: list[str] = []
    idents: list[str] = []
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg":
            name = str(node.children[1])
            calls.append(name)
            if name in _MACROS and len(node.children) > 2:
                variable = _macro_variable(node.children[2])
                if variable is not None:
                    bound.add(variable)
        elif node.data == "ident_arg":
            calls.append(str(node.children[0]))
        elif node.data == "ident":
            idents.append(str(node.children[0]))
    return calls, idents, bound


def _macro_arguments(tree: Any) -> str | None:
    """A macro called with other than (variable, expression): cel-python evaluates only
    that form. Kubernetes also takes ``map(x, filter, transform)`` and the two-variable
    ``all``, ``exists`` and ``exists_one`` (``list.all(i, v, ...)``)."""
    from lark import Tree

    for node in tree.iter_subtrees():
        if node.data != "member_dot_arg" or str(node.children[1]) not in _MACROS:
            continue
        args = node.children[2] if len(node.children) > 2 else None
        count = len(args.children) if isinstance(args, Tree) else 0
        if count == 2:
            continue
        name = str(node.children[1])
        if name == "map" and count == 3:
            return (
                "map(x, filter, transform) is not evaluated here: write "
                ".filter(x, filter).map(x, transform)"
            )
        if count == 3:
            return f"two-variable {name}(i, v, ...) is not evaluated here: iterate one variable"
        return f"{name} takes a variable and an expression ({count} arguments given)"
    return None


def _macro_variable(args: Any) -> str | None:
    """The variable a macro's first argument binds, or None."""
    from lark import Token, Tree

    if not (isinstance(args, Tree) and args.children):
        return None
    first = next(args.children[0].scan_values(lambda t: isinstance(t, Token)), None)
    return None if first is None else str(first)


# Estimated cost of one selector, in evaluation steps (one step: one node of the parse
# tree evaluated once; a macro's body counts once per element it may visit). cel-python
# has no runtime cost limit, so runaway selectors (nested macros over long lists) are
# refused before they run, as Kubernetes refuses a DRA selector over its cost budget.
DEFAULT_COST_LIMIT = 20_000
# Elements a macro is assumed to visit when its range is not a literal (a device's
# attribute or capacity map, a variable bound by an outer macro).
UNKNOWN_SIZE = 32
# An evaluation may take this many times the cost limit in steps as it runs (each node
# visited, each element or character a library function reads;
# :mod:`function.scheduling.cel_library`): the estimate is a heuristic, a list a
# function makes is sized only at run time, and a runaway stops within about a second.
RUNTIME_FACTOR = 2
_cost_limit = DEFAULT_COST_LIMIT


def set_cost_limit(limit: int) -> None:
    """Set the cost limit (estimated evaluation steps) of every selector compiled after."""
    global _cost_limit
    _cost_limit = int(limit)


def cost_limit() -> int:
    """The cost limit in force (estimated evaluation steps)."""
    return _cost_limit


def _unwrap(node: Any) -> Any:
    """``node`` without the single-child wrappers of celpy's grammar (down to a literal,
    an identifier, a call or an operator)."""
    from lark import Tree

    while (
        isinstance(node, Tree)
        and len(node.children) == 1
        and node.data not in ("list_lit", "map_lit", "ident")
    ):
        node = node.children[0]
    return node


def _entries(node: Any) -> list[Any]:
    """The element expressions of a list literal (the values of a map literal)."""
    from lark import Tree

    inner = node.children[0] if node.children else None
    if not isinstance(inner, Tree):
        return [] if inner is None else [inner]
    if node.data == "map_lit":
        return inner.children[1::2]
    return inner.children


# A variable bound by an enclosing macro -> a representative element of its range and
# the scope that element is read in (None: not known).
_Scope = Mapping[str, "tuple[Any, _Scope] | None"]


def _size(node: Any, scope: _Scope) -> int:  # noqa: PLR0911 - a return per node kind
    """Estimated number of elements ``node`` evaluates to (for a macro's range), read in
    ``scope`` (a variable's size is the size of its representative element)."""
    from lark import Tree

    node = _unwrap(node)
    if not isinstance(node, Tree):
        return UNKNOWN_SIZE
    if node.data in ("list_lit", "map_lit"):
        return len(_entries(node))
    if node.data == "ident":
        bound = scope.get(str(node.children[0]))
        return UNKNOWN_SIZE if bound is None else _size(*bound)
    if node.data == "member_dot_arg" and str(node.children[1]) in ("map", "filter"):
        return _size(node.children[0], scope)
    if node.data == "member_dot_arg" and str(node.children[1]) == "range":
        return _range_size(node.children[2] if len(node.children) > 2 else None)
    if node.data.startswith("addition"):
        return sum(_size(c, scope) for c in node.children if isinstance(c, Tree))
    return UNKNOWN_SIZE


def _range_size(args: Any) -> int:
    """Elements of ``lists.range(n)``: ``n`` when a literal, else the most it may make."""
    from lark import Token

    literal = _unwrap(args.children[0]) if args is not None and args.children else None
    if isinstance(literal, Token) and literal.type == "INT_LIT":
        return max(0, min(int(literal, 0), cel_library.MAX_RANGE))
    return cel_library.MAX_RANGE


def _element(node: Any, scope: _Scope) -> tuple[Any, _Scope] | None:  # noqa: PLR0911
    """A representative element of the range ``node`` (the largest of a list literal's;
    what ``map`` makes of one) with the scope it is read in, or None when not known (a
    variable bound to it is then :data:`UNKNOWN_SIZE` long; a map's keys are scalars)."""
    from lark import Tree

    node = _unwrap(node)
    if not isinstance(node, Tree):
        return None
    if node.data == "list_lit":
        entries = _entries(node)
        return (max(entries, key=lambda e: _size(e, scope)), scope) if entries else None
    if node.data == "ident":
        bound = scope.get(str(node.children[0]))
        return None if bound is None else _element(*bound)
    if node.data == "member_dot_arg" and str(node.children[1]) == "filter":
        return _element(node.children[0], scope)
    if node.data == "member_dot_arg" and str(node.children[1]) == "map":
        args = node.children[2] if len(node.children) > 2 else None
        variable = _macro_variable(args)
        if variable is None or not isinstance(args, Tree):
            return None
        return args.children[-1], {**scope, variable: _element(node.children[0], scope)}
    return None


def estimate_cost(tree: Any, scope: _Scope | None = None) -> int:
    """Estimated evaluation steps of a parsed CEL expression (an upper-bound heuristic).

    Every node costs 1, a regular expression given as a literal the size of its
    compiled program (:func:`_regex_cost`); a macro (``all``, ``exists``, ``exists_one``, ``map``,
    ``filter``) costs its range plus the range's estimated size (:func:`_size`:
    the element count of a literal, of the largest element of a literal for a variable
    bound to one, :data:`UNKNOWN_SIZE` otherwise) times its body. Nested macros
    multiply. Call it on a tree whose depth was checked (it recurses).
    """
    from lark import Tree

    if not isinstance(tree, Tree):
        return 0
    scope = scope or {}
    if tree.data == "member_dot_arg" and str(tree.children[1]) in _MACROS:
        target = tree.children[0]
        args = tree.children[2] if len(tree.children) > 2 else None
        body = args.children[-1] if isinstance(args, Tree) and args.children else None
        variable = _macro_variable(args)
        inner = scope if variable is None else {**scope, variable: _element(target, scope)}
        return (
            1
            + estimate_cost(target, scope)
            + _size(target, scope) * (1 + estimate_cost(body, inner))
        )
    return 1 + _regex_cost(tree) + sum(estimate_cost(c, scope) for c in tree.children)


def _regex_cost(node: Any) -> int:
    """The cost of a regular expression a call gives as a literal (``s.matches("...")``,
    ``matches(s, "...")``, ``find``, ``findAll``): compiled now, charged by the size of
    its program (:func:`function.scheduling.cel_library.regex_cost`); 0 otherwise (a
    pattern computed at run time is charged as it runs)."""
    from lark import Token, Tree

    if node.data == "member_dot_arg" and len(node.children) > 2:
        name, args, at = str(node.children[1]), node.children[2], 0
    elif node.data == "ident_arg" and len(node.children) > 1:
        name, args, at = str(node.children[0]), node.children[1], 1
    else:
        return 0
    if name not in cel_library.REGEX_FUNCTIONS or not isinstance(args, Tree):
        return 0
    index = cel_library.REGEX_FUNCTIONS[name] + at
    literal = _unwrap(args.children[index]) if len(args.children) > index else None
    if not isinstance(literal, Token) or literal.type not in ("STRING_LIT", "MLSTRING_LIT"):
        return 0
    try:
        pattern = str(celstr(literal))
    except Exception:  # an undecodable literal: the evaluation reports it
        return 0
    return cel_library.regex_cost(pattern)


_WORD = re.compile(r"[A-Za-z0-9_]")


@memo(1024)
def normalize(expression: str) -> str:
    """``expression`` with comments and insignificant whitespace removed.

    String literals (single, double, triple quoted, with escapes) are kept as written;
    whitespace between two word characters becomes one space. So ``a  in b`` and
    ``a in b`` share one cache entry and one verdict, and a space cannot defeat the
    memo of a runaway selector.
    """
    out: list[str] = []
    i, n = 0, len(expression)
    pending_space = False
    while i < n:
        c = expression[i]
        if c in "\"'":
            q = expression[i : i + 3] if expression[i : i + 3] in ('"""', "'''") else c
            j = i + len(q)
            while j < n and expression[j : j + len(q)] != q:
                j += 2 if expression[j] == "\\" else 1
            j = min(n, j + len(q))
            if pending_space and out and _WORD.match(out[-1][-1]) and out[-1][-1] not in "rRbB":
                out.append(" ")
            out.append(expression[i:j])
            pending_space = False
            i = j
            continue
        if c == "/" and expression[i : i + 2] == "//":
            while i < n and expression[i] != "\n":
                i += 1
            pending_space = True
            continue
        if c.isspace():
            pending_space = True
            i += 1
            continue
        if pending_space and out and _WORD.match(c) and _WORD.match(out[-1][-1]):
            out.append(" ")
        pending_space = False
        out.append(c)
        i += 1
    return "".join(out)


def _parse_reason(expression: str, error: Exception) -> str:
    """Why ``expression`` does not parse: the position and the text before it, whole words.

    celpy's ``CELParseError`` carries ``line`` and ``column`` (1-based, of the normalized
    expression) and a fixed-width excerpt that can start mid-word; the excerpt here starts
    at a word boundary, at most 40 characters before the error.
    """
    column = getattr(error, "column", None)
    if not isinstance(column, int) or column < 1:
        return " ".join(str(error).split()) or type(error).__name__
    at = min(column - 1, len(expression))
    start = max(0, at - 40)
    while 0 < start < at and _WORD.match(expression[start - 1]):
        start += 1
    before = ("..." if start else "") + expression[start:at]
    where = "the end" if at >= len(expression) else f"column {column}"
    return f"syntax error at {where}, after {before!r}"


@memo(4096)
def _compile_normalized(expression: str, limit: int) -> Any:
    try:
        ast = _ENV.compile(expression)
    except Exception as e:  # celpy raises CELParseError (and lark errors) for bad syntax
        return InvalidSelector(expression, _parse_reason(expression, e))
    problem = _check(ast)  # first: it refuses a tree too deep for the recursive steps
    if problem is not None:
        return InvalidSelector(expression, problem)
    cost = estimate_cost(ast)
    if cost > limit:
        return InvalidSelector(
            expression,
            f"its estimated cost of {cost} evaluation steps is over the limit of {limit} "
            "(MODELPLANE_SELECTOR_COST_LIMIT): nest fewer macros or iterate shorter lists",
        )
    return _ENV.program(ast, functions=FUNCTIONS)


def _compile(expression: str) -> Any:
    return _compile_normalized(normalize(expression), _cost_limit)


_paths: dict[str, str] = {}


def path_of(expression: str | None) -> str | None:
    """The spec path a selector was compiled for in this call (see :func:`compile_selector`)."""
    return _paths.get(expression) if expression is not None else None


def note_paths(paths: Mapping[str, str]) -> None:
    """Remember, for this call, the spec path of each normalized selector in ``paths``
    (a spec compiled in an earlier call, whose :func:`compile_selector` did not run in
    this one): a deadline message names the field (:func:`path_of`)."""
    if len(_paths) + len(paths) <= _MAX_PATHS:
        _paths.update(paths)


_MAX_PATHS = 4096


def forget_paths() -> None:
    """Forget the paths of the previous call, and the regular expressions it kept
    (:func:`function.scheduling.cel_library.forget`); the runner calls this before each
    call."""
    global _evaluating, _compiling
    _paths.clear()
    _evaluating = _compiling = None
    cel_library.forget()


def compile_selector(expression: str, path: str | None = None) -> Any:
    """Compile (once; cached by normalized expression and cost limit) and return the
    CEL program.

    Args:
        expression: The CEL text.
        path: Where it is in the XR's spec (``spec...selectors[0].cel``), remembered
            for this call so a deadline message can name it (:func:`path_of`).

    Raises:
        InvalidSelector: when the expression does not parse, uses an unknown function
            or variable, or its estimated cost (:func:`estimate_cost`) is over the
            limit (:func:`set_cost_limit`).
    """
    global _compiling
    # Left set when a deadline (a BaseException) interrupts compiling, so the runner can
    # name the selector (review 15a: a fatal result named no field).
    _compiling = (expression, path)
    if path is not None and len(_paths) < _MAX_PATHS:
        _paths[normalize(expression)] = path
    p = _compile(expression)
    _compiling = None
    if isinstance(p, InvalidSelector):
        raise InvalidSelector(expression, p.reason)  # named as the user wrote it
    return p


_evaluating: str | None = None
_compiling: tuple[str, str | None] | None = None  # (expression as written, its path)


def in_progress() -> tuple[str, str, str | None] | None:
    """What is being done to which selector right now, for deadline messages:
    ``("evaluating" or "compiling", expression, its spec path or None)``, or None."""
    if _evaluating is not None:
        return "evaluating", _evaluating, path_of(_evaluating)
    if _compiling is not None:
        return "compiling", *_compiling
    return None


# ---- devices ---------------------------------------------------------------


def _attribute_value(typ: str, val: Any) -> Any:
    """A status device attribute's value of type ``typ`` (string, version, bool, int), or
    None when it is not one: only a scalar of the declared type is an attribute (DRA's
    DeviceAttribute; a list, an object, a fraction, or an int outside int64, which CEL's
    int refuses, reads as absent)."""
    if typ in ("string", "version"):
        return val if isinstance(val, str) else None
    if typ == "bool":
        return val if isinstance(val, bool) else None
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        return None
    if isinstance(val, float) and not val.is_integer():
        return None
    if val == INT64_LIMIT:  # INT64_MAX: a Struct's number (a double) rounds it to 2**63
        return INT64_LIMIT - 1
    return int(val) if -INT64_LIMIT <= val < INT64_LIMIT else None


@dataclass(frozen=True, slots=True)
class Device:
    """One kind of device on every node of a pool (DRA ``ResourceSlice`` style).

    Attributes:
        name: The device's name in its class (``gpu``).
        driver: The DRA driver, and the domain of attributes and capacity.
        count: How many of this device each node has.
        claim: ``DRA`` (claimable) or ``Synthetic`` (placement only), as the status
            says (absent: DRA); a pool with any other value is not known (its readers
            check :func:`function.api.inferencecluster.unknown_claim` first), and a
            device holding one is never claimable.
        attributes: Bare name to a typed value (``("string", "Ampere")``).
        capacity: Bare name to a quantity string (``"23034Mi"``).
    """

    name: str
    driver: str
    count: int = 1
    claim: str = CLAIM_DRA
    attributes: tuple[tuple[str, tuple[str, Any]], ...] = ()
    capacity: tuple[tuple[str, str], ...] = ()
    _activation: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def from_status(cls, raw: Any) -> Device:
        """Build from a ``status.gpuPools[].devices[]`` entry (a plain dict)."""
        attrs: list[tuple[str, tuple[str, Any]]] = []
        for k, v in sorted(_items(raw.get("attributes") if raw else None)):
            for typ in ("string", "version", "bool", "int"):
                val = _attribute_value(typ, v.get(typ) if isinstance(v, dict) else None)
                if val is not None:
                    attrs.append((k, (typ, val)))
                    break
        caps = []
        for k, v in sorted(_items(raw.get("capacity") if raw else None)):
            if isinstance(v, dict) and isinstance(v.get("value"), str):
                caps.append((k, v["value"]))
        count = raw.get("count", 1) if raw else 1
        claim = raw.get("claim") if raw else None
        return cls(
            name=str(raw.get("name", "")),
            driver=str(raw.get("driver", "")),
            count=int(count) if isinstance(count, (int, float)) and math.isfinite(count) else 1,
            claim=CLAIM_DRA if claim is None else str(claim),
            attributes=tuple(attrs),
            capacity=tuple(caps),
        )

    def activation(self) -> dict[str, Any]:
        """The CEL activation ``{"device": ...}`` (built once per device)."""
        if not self._activation:
            attrs: dict[Any, Any] = {}
            for k, (typ, v) in self.attributes:
                attrs[celtypes.StringType(k)] = _typed(typ, v)
            caps: dict[Any, Any] = {}
            for k, v in self.capacity:
                try:
                    caps[celtypes.StringType(k)] = Quantity.decoded(v)
                except ValueError:
                    continue  # an unparsable capacity is simply absent
            d = celtypes.StringType(self.driver)
            device = celtypes.MapType(
                {
                    celtypes.StringType("driver"): d,
                    celtypes.StringType("attributes"): celtypes.MapType(
                        {d: celtypes.MapType(attrs)}
                    ),
                    celtypes.StringType("capacity"): celtypes.MapType({d: celtypes.MapType(caps)}),
                }
            )
            self._activation["device"] = device
            self._activation.update(cel_library.NAMESPACES)
        return self._activation


def _items(v: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(v, Mapping):
        return [(k, x) for k, x in v.items() if isinstance(x, Mapping)]
    return []


def _typed(typ: str, v: Any) -> Any:
    if typ == "string":
        return celtypes.StringType(str(v))
    if typ == "bool":
        return celtypes.BoolType(bool(v))
    if typ == "int":
        return celtypes.IntType(int(v))
    try:
        return Semver.parse(str(v))
    except ValueError:
        return celtypes.StringType(str(v))


_DOMAIN = re.compile(r"""device\.(?:attributes|capacity)\s*\[\s*(?:"([^"]*)"|'([^']*)')\s*\]""")


@memo(4096)
def _domains(expression: str) -> frozenset[str]:
    """The driver domains ``expression`` addresses by literal (``device.capacity["x"]``)."""
    return frozenset(a or b for a, b in _DOMAIN.findall(expression))


# celpy's wording for an operator without an overload for its operand types, and for a
# ValueError raised by a function (quantity(), semver()).
_OVERLOAD = re.compile(
    r"found no matching overload for (?:Token\('RULE', '(?P<op>\w+)'\)|_(?P<logical>\S+)_) "
    r"applied to '\((?P<types>.*)\)'"
)
_OPERATORS = {
    "relation_gt": ">", "relation_ge": ">=", "relation_lt": "<", "relation_le": "<=",
    "relation_eq": "==", "relation_ne": "!=", "relation_in": "in",
    "addition_add": "+", "addition_sub": "-", "multiplication_mul": "*",
    "multiplication_div": "/", "multiplication_mod": "%",
}  # fmt: skip
_CEL_TYPES = {
    "Quantity": "a quantity", "Semver": "a version", "StringType": "a string",
    "IntType": "an int", "UintType": "a uint", "DoubleType": "a double",
    "BoolType": "a bool", "MapType": "a map", "ListType": "a list", "NullType": "null",
    "BytesType": "bytes", "CELEvalError": "an error",
}  # fmt: skip


def _cel_type(name: str) -> str:
    """``<class 'celpy.celtypes.StringType'>`` -> ``a string`` (CEL's words, not Python's)."""
    bare = name.strip().removeprefix("<class '").removesuffix("'>").rsplit(".", 1)[-1]
    return _CEL_TYPES.get(bare, bare)


def _reason(e: BaseException) -> str:
    """A one-line reason in CEL's terms, from the message celpy puts first in its error's
    args: an operator applied to types it has no overload for names the operator and the
    types (``no operator > for a quantity and a string``); a function's ValueError gives
    the function's own message (celpy reports it as ``return error for overflow``)."""
    first = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
    m = _OVERLOAD.search(first)
    if m is not None:
        types = " and ".join(_cel_type(t) for t in m.group("types").split(","))
        op = m.group("logical") or _OPERATORS.get(m.group("op"), m.group("op"))
        hint = (
            ' (compare quantities with .compareTo(quantity("40Gi")))' if "quantity" in types else ""
        )
        return f"no operator {op} for {types}{hint}"
    if first.startswith("return error for overflow") and len(e.args) > 2:
        detail = e.args[2]
        words = " ".join(str(a) for a in detail) if isinstance(detail, tuple) else str(detail)
        if words and words != "None":
            return " ".join(words.split())
    return " ".join(first.split()) or type(e).__name__


@memo(65536)
def _eval(expression: str, device: Device, limit: int) -> bool | SelectorEvaluationError:
    global _evaluating
    # Left set when a deadline (a BaseException) interrupts the evaluation (or the
    # compiling it may start with), so the runner can name the selector.
    _evaluating = expression
    program = _compile_normalized(expression, limit)
    if isinstance(program, InvalidSelector):
        _evaluating = None
        # A new exception: raising the memoized one would chain every raise's traceback
        # onto it (4 frames each, and their locals), kept as long as the memo keeps it.
        raise InvalidSelector(program.expression, program.reason)
    cel_library.begin(limit * RUNTIME_FACTOR)
    try:
        result = program.evaluate(device.activation())
    except Exception as e:  # celpy raises CELEvalError (and Python errors from functions)
        result = e
    deadline.check()  # lost in the last step: raised here, the selector still named
    _evaluating = None
    if cel_library.over():  # even when || or && absorbed the error it raised
        return SelectorEvaluationError(expression, device, cel_library.over_budget())
    if isinstance(result, celtypes.BoolType):
        return bool(result)
    # celpy returns (not raises) CELEvalError for most runtime errors.
    if isinstance(result, Exception):
        domains = _domains(expression)
        if domains and device.driver not in domains:
            return False  # a device of another driver (see the module docstring)
        return SelectorEvaluationError(expression, device, _reason(result))
    kind = _cel_type(type(result).__name__)
    shown = _brief(result)
    return SelectorEvaluationError(expression, device, f"returned {kind} ({shown}), not a boolean")


# The most of a non-boolean result a message shows: the value is the tenant's (a list of
# a million characters, or lists nested by shared reference whose full text would be
# exponentially long), and the condition message must stay small.
_SHOWN_RESULT = 120


def _brief(value: Any) -> str:
    """At most about :data:`_SHOWN_RESULT` characters of ``value``'s text, rendered
    without ever building the whole text (``...`` and the length where cut)."""
    out: list[str] = []
    room = _SHOWN_RESULT
    stack: list[Any] = [value]
    while stack and room > 0:
        item = stack.pop()
        if isinstance(item, _Text):
            piece = item.text
        elif isinstance(item, list):
            stack.append(_Text("]"))
            for i, x in enumerate(reversed(item)):
                stack.append(x)
                if i < len(item) - 1:
                    stack.append(_Text(", "))
            piece = "["
        elif isinstance(item, Mapping):
            piece = f"{{...{len(item)} entries}}"
        else:
            piece = str(item)[: room + 1]
        out.append(piece[:room])
        room -= len(piece)
    text = "".join(out)
    if room < 0 or stack:
        text += "..."
        if isinstance(value, str):
            text += f" ({len(value)} characters)"
        elif isinstance(value, list):
            text += f" ({len(value)} elements)"
    return text


@dataclass(frozen=True, slots=True)
class _Text:
    """Literal text in :func:`_brief`'s walk (brackets and separators)."""

    text: str


def selector_matches(expression: str, device: Device) -> bool:
    """True when ``device`` satisfies the CEL ``expression`` (memoized by the normalized
    expression and the device).

    Raises:
        InvalidSelector: when the expression does not compile (see :func:`compile_selector`).
        SelectorEvaluationError: when it fails while evaluating on ``device`` (an
            attribute or capacity the device does not have, a division by zero, a
            type mismatch) or returns something other than a boolean.
    """
    r = _eval(normalize(expression), device, _cost_limit)
    if isinstance(r, SelectorEvaluationError):
        raise SelectorEvaluationError(expression, device, r.reason)  # as the user wrote it
    return r


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One ``nodeSelector.devices[]`` entry: ``count`` devices satisfying every selector."""

    name: str
    count: int
    selectors: tuple[str, ...]

    def satisfied_by(self, device: Device) -> bool:
        """True when ``device`` has at least ``count`` units and passes every selector."""
        if device.count < self.count:
            return False
        return all(selector_matches(s, device) for s in self.selectors)


def pool_satisfies(requests: Iterable[DeviceRequest], devices: Iterable[Device]) -> bool:
    """True when every request is satisfied by some device of the pool.

    An engine also needs something to claim: at least one request must be met by
    a ``claim: DRA`` device (Modelplane's rule: a pool that matches only
    Synthetic devices leaves the pods nothing to claim). Callers apply that rule
    per engine with :func:`claims_dra`.
    """
    devs = tuple(devices)
    return all(any(r.satisfied_by(d) for d in devs) for r in requests)


def claims_dra(requests: Iterable[DeviceRequest], devices: Iterable[Device]) -> bool:
    """True when some request is satisfied by a claimable (``claim: DRA``) device."""
    devs = tuple(d for d in devices if d.claim == CLAIM_DRA)
    return any(any(r.satisfied_by(d) for d in devs) for r in requests)
