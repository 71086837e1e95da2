"""Kubernetes' syntax rules for names, label keys and values, in one place.

Each rule is the one the API server applies, as written in Kubernetes 1.34 (the oldest
workload cluster the README supports; none of these rules is relaxed in later releases):

- ``k8s.io/apimachinery/pkg/util/validation`` (``IsDNS1123Label``,
  ``IsDNS1123Subdomain``, ``IsValidPortName``, ``IsRelaxedEnvVarName``) and
  ``k8s.io/apimachinery/pkg/api/validate/content`` (``IsLabelKey``, the qualified name
  that ``IsQualifiedName`` is, and ``IsLabelValue``);
- ``k8s.io/apimachinery/pkg/api/validation`` (``ValidateAnnotations``: a qualified name
  once lowercased by Go's ``strings.ToLower``, :func:`go_lower`,
  :data:`ANNOTATIONS_MAX_BYTES` in all);
- ``k8s.io/apimachinery/pkg/api/resource`` (``ParseQuantity``: :func:`go_parse_quantity`,
  :func:`go_quantity` with the form Go holds it in; ``Quantity.UnmarshalJSON``, how an
  object's quantity is decoded: :func:`decode_quantity`). Every quantity the function
  reads goes through these (CEL ``quantity()`` and ``isQuantity()``, an InferenceClass's
  capacity, a PVC's size, the flash loader's and ``/dev/shm`` size limits).

Where a rule applies a Go string function first, this module has Go's, not Python's
look-alike (:func:`go_lower`, :func:`go_trim_space`): the two differ on a few
characters (``İ``; U+001C..U+001F), and the API server's verdict is Go's.

Environment variable names follow ``IsRelaxedEnvVarName``: the
``RelaxedEnvironmentVariableValidation`` feature gate is on by default from 1.32 and GA,
locked on, from 1.34 (``pkg/features/kube_features.go``), so a 1.34 API server takes
any non-empty name of printable ASCII characters other than ``=``.

Each ``*_problem`` function returns None for a valid value, else what the value must
be, as a sentence fragment without the value (the caller names the field and quotes a
bounded excerpt: :func:`function.core.errors.quoted`). Lengths are counted in bytes,
as Go's ``len`` does; the patterns admit ASCII only, so that is characters too. The
patterns are whole-string (``^...\\Z``: Python's ``$`` would also match before a final
newline), for ``match`` and ``fullmatch`` alike.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Container
from typing import NamedTuple

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
QUALIFIED_NAME_MAX = 63  # the name part of a qualified name; its prefix is a subdomain
PORT_NAME_MAX = 15
ANNOTATIONS_MAX_BYTES = 256 * 1024  # apimachinery TotalAnnotationSizeLimitB

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(rf"^{_LABEL}\Z")
DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*\Z")
QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_PORT_NAME_CHARS = re.compile(r"^[-a-z0-9]+\Z")

DNS1123_LABEL_RULE = (
    f"a DNS-1123 label: at most {DNS1123_LABEL_MAX} characters of lowercase letters, "
    "digits and '-', starting and ending with a letter or digit"
)
DNS1123_SUBDOMAIN_RULE = (
    f"a DNS-1123 subdomain: at most {DNS1123_SUBDOMAIN_MAX} characters of lowercase "
    "letters, digits, '-' and '.', each part between dots starting and ending with a "
    "letter or digit"
)
QUALIFIED_NAME_RULE = (
    "a qualified name: an optional DNS-1123 subdomain prefix of at most "
    f"{DNS1123_SUBDOMAIN_MAX} characters and '/', then a name of at most "
    f"{QUALIFIED_NAME_MAX} characters of letters, digits, '-', '_' and '.', starting and "
    "ending with a letter or digit (for example example.com/my-key)"
)
LABEL_VALUE_RULE = (
    f"a label value: empty, or at most {LABEL_VALUE_MAX} characters of letters, digits, "
    "'-', '_' and '.', starting and ending with a letter or digit"
)
PORT_NAME_RULE = (
    f"an IANA service name: at most {PORT_NAME_MAX} characters of lowercase letters, "
    "digits and '-', with at least one letter, no '--' and no '-' at either end (for "
    "example http)"
)
ENV_NAME_RULE = (
    "an environment variable name: one or more printable ASCII characters other than '='"
)


def dns1123_label_problem(value: str) -> str | None:
    """``IsDNS1123Label``: None, or :data:`DNS1123_LABEL_RULE`."""
    if len(value) <= DNS1123_LABEL_MAX and DNS1123_LABEL.match(value):
        return None
    return f"must be {DNS1123_LABEL_RULE}"


def dns1123_subdomain_problem(value: str) -> str | None:
    """``IsDNS1123Subdomain``: None, or :data:`DNS1123_SUBDOMAIN_RULE`."""
    if len(value) <= DNS1123_SUBDOMAIN_MAX and DNS1123_SUBDOMAIN.match(value):
        return None
    return f"must be {DNS1123_SUBDOMAIN_RULE}"


def qualified_name_problem(value: str) -> str | None:
    """``IsQualifiedName`` (a label key, a toleration key): None, or
    :data:`QUALIFIED_NAME_RULE`. ``prefix/name``: the prefix (before the only ``/``) a
    non-empty DNS-1123 subdomain, the name non-empty, at most :data:`QUALIFIED_NAME_MAX`
    characters matching :data:`QUALIFIED_NAME_PART`."""
    parts = value.split("/")
    if len(parts) == 1:
        name = value
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix or dns1123_subdomain_problem(prefix):
            return f"must be {QUALIFIED_NAME_RULE}"
    else:
        return f"must be {QUALIFIED_NAME_RULE}"
    if len(name) > QUALIFIED_NAME_MAX or not QUALIFIED_NAME_PART.match(name):
        return f"must be {QUALIFIED_NAME_RULE}"
    return None


def label_value_problem(value: str) -> str | None:
    """``IsValidLabelValue``: None, or :data:`LABEL_VALUE_RULE`."""
    if len(value) <= LABEL_VALUE_MAX and LABEL_VALUE.match(value):
        return None
    return f"must be {LABEL_VALUE_RULE}"


def port_name_problem(value: str) -> str | None:
    """``IsValidPortName`` (``IANA_SVC_NAME``, RFC 6335, lowercase only): None, or
    :data:`PORT_NAME_RULE`."""
    if (
        len(value) <= PORT_NAME_MAX
        and _PORT_NAME_CHARS.match(value)
        and any("a" <= c <= "z" for c in value)
        and "--" not in value
        and not value.startswith("-")
        and not value.endswith("-")
    ):
        return None
    return f"must be {PORT_NAME_RULE}"


def env_name_problem(value: str) -> str | None:
    """``IsRelaxedEnvVarName`` (Kubernetes 1.34's rule for ``env[].name`` and
    ``envFrom[].prefix``): None, or :data:`ENV_NAME_RULE`. Printable ASCII is
    ``' '`` to ``'~'`` (Go's ``unicode.IsPrint`` below 128)."""
    if value and all(" " <= c <= "~" and c != "=" for c in value):
        return None
    return f"must be {ENV_NAME_RULE}"


# Go's unicode.IsSpace, the set strings.TrimSpace removes: ASCII '\t', '\n', '\v', '\f',
# '\r' and ' ', U+0085 and U+00A0, and the rest of Unicode's White_Space property
# (unicode.White_Space). Not U+001C..U+001F, which Python's str.strip() also removes.
GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))  # U+2000..U+200A
    + "\u2028\u2029\u202f\u205f\u3000"
)
# Where Go's unicode.ToLower (Unicode's simple lowercase mapping, per rune) differs
# from Python's str.lower() of one character (the full mapping of SpecialCasing.txt):
# U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE, to ASCII 'i' (Python: 'i' + U+0307).
_GO_LOWER = {"\u0130": "i"}


def go_lower(value: str) -> str:
    """Go's ``strings.ToLower``: ``unicode.ToLower`` of each rune, no special casing and
    no context (capital alpha and sigma become small alpha and sigma, never a final
    sigma). Where it maps a non-ASCII character to ASCII: U+0130 ``İ`` to ``i`` (which
    ``str.lower`` makes ``i`` and U+0307) and U+212A KELVIN SIGN to ``k`` (as
    ``str.lower`` does). Checked against go1.26 on every rune. Used as
    ``ValidateAnnotations`` uses it, before ``IsQualifiedName``."""
    if value.isascii():
        return value.lower()
    return "".join(_GO_LOWER.get(c) or c.lower() for c in value)


def go_trim_space(value: str) -> str:
    """Go's ``strings.TrimSpace``: ``value`` without leading and trailing
    :data:`GO_SPACE` (``unicode.IsSpace``). Used as ``validateContainerOnlyForPod``
    uses it on a container's ``image``."""
    return value.strip(GO_SPACE)


def annotations_bytes(annotations: dict[str, str]) -> int:
    """What ``ValidateAnnotationsSize`` adds up: every key's and value's UTF-8 bytes."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


def suggest_label(value: str, fallback: str = "my-name") -> str:
    """A DNS-1123 label close to ``value`` for a message to offer: lowercased, every run
    of other characters folded to ``-``, cut to :data:`DNS1123_LABEL_MAX`; ``fallback``
    when nothing is left."""
    folded = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")
    return folded[:DNS1123_LABEL_MAX].rstrip("-") or fallback


# ---- quantities: k8s.io/apimachinery/pkg/api/resource ---------------------------------

# resource.ErrFormatWrong
QUANTITY_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
QUANTITY_NUMERIC = "unable to parse numeric part of quantity"  # resource.ErrNumeric
QUANTITY_SUFFIX = "unable to parse quantity's suffix"  # resource.ErrSuffix
_DIGITS = frozenset("0123456789")
_SUFFIX_LETTERS = frozenset("eEinumkKMGTP")
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12}
_DECIMAL_SUFFIXES |= {"P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_EXPONENT = re.compile(r"[+-]?[0-9]+\Z")  # what strconv.ParseInt(s, 10, 64) reads
_INT64_MAX = 2**63 - 1  # resource.maxAllowed, the cap of a binary-suffixed quantity
# What Go's encoding/json writes as an escape (control characters, '"', '\\', '<', '>',
# '&', U+2028, U+2029): the API server's decoder gets the escape, not the character.
_GO_JSON_ESCAPED = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029]')
# Exact arithmetic on any exponent an int32 holds, and on every digit written.
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


class GoQuantity(NamedTuple):
    """A ``resource.Quantity`` as Go holds it after ``ParseQuantity`` (and after the
    CEL library's ``add``/``sub``): its exact ``value`` and its form, which decides
    ``AsInt64`` and ``AsApproximateFloat64``.

    ``dec``: False for Go's ``int64Amount`` (``value`` is an int64 count of
    ``10^exponent``; ``exponent`` is its ``scale``), True for an ``inf.Dec`` (an
    integer count of ``10^exponent`` of any size; its ``Scale()`` is ``-exponent``).
    """

    value: decimal.Decimal
    exponent: int
    dec: bool

    @property
    def unscaled(self) -> decimal.Decimal:
        """The integer count of ``10^exponent`` (``int64Amount.value``, or
        ``inf.Dec.UnscaledBig``), as a Decimal (it may have millions of digits)."""
        with decimal.localcontext(_EXACT):
            return self.value.scaleb(-self.exponent)


def go_parse_quantity(text: str) -> decimal.Decimal:
    """Go's ``resource.ParseQuantity`` (k8s.io/apimachinery v0.35.3, checked against it
    on 48,125 strings): the value of ``text``, as ``Quantity.AsDec`` has it, or
    ValueError with Go's error (:func:`go_quantity` has its form too).

    The grammar (``parseQuantityString``): an optional sign, digits with at most one
    ``.`` (no digit at all reads as 0: ``Gi``, ``+``, ``.``), then a suffix: binary
    ``Ki`` .. ``Ei``, decimal ``n``, ``u``, ``m``, ``k``, ``M``, ``G``, ``T``, ``P``,
    ``E``, or ``e``/``E`` and an exponent (an int64, kept as Go's ``int32()`` wraps it).
    No whitespace (:func:`decode_quantity` trims, as the JSON decoder does). The
    value: exact, then, where Go takes its arbitrary-precision path, rounded away from
    zero to a multiple of 10^-9 (``0.1n`` is ``1n``) and, with a binary suffix, capped
    at 2^63 - 1 (``9Ei``). That path needs a digit: one without (``Pi``, ``Ei``,
    ``e-10``) is ``unable to parse numeric part of quantity``.

    Raises:
        ValueError: :data:`QUANTITY_FORMAT_WRONG` (``""``, ``16gb``, ``0x10``),
            :data:`QUANTITY_SUFFIX` (``1ki``), :data:`QUANTITY_NUMERIC` (``Pi``).
    """
    return go_quantity(text).value


def go_quantity(text: str) -> GoQuantity:
    """:func:`go_parse_quantity` with the form Go holds the quantity in
    (:class:`GoQuantity`): ``int64Amount`` where ``ParseQuantity`` takes its int64 path
    (at most 18 digits and a unit of at least 10^-9, or a whole binary quantity small
    enough: ``80Gi``, ``1.5G``, ``1000m``), else ``inf.Dec`` at scale 9 (``1.5Gi``,
    ``1Ei``, ``0.1n``; a zero keeps the scale it was written with; a capped binary one
    has scale 0).

    Raises:
        ValueError: as :func:`go_parse_quantity`.
    """
    if not text:
        raise ValueError(QUANTITY_FORMAT_WRONG)
    negative, num, denom, digits, suffix = _split_quantity(text)
    binary = suffix in _BINARY_SUFFIXES
    if suffix in _DECIMAL_SUFFIXES:
        exponent = _DECIMAL_SUFFIXES[suffix]
    elif binary:
        exponent = _BINARY_SUFFIXES[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT.match(suffix[1:]):
        parsed = int(suffix[1:])
        if not -(2**63) <= parsed < 2**63:
            raise ValueError(QUANTITY_SUFFIX)
        exponent = _int32(parsed)
    else:
        raise ValueError(QUANTITY_SUFFIX)
    # The unit of the digits as written: 10^(exponent - len(denom)), or 10^-len(denom)
    # times 2^exponent; Go's int64Amount.scale, or what inf.Dec's scale starts at.
    unit = -len(denom) if binary else _int32(exponent - len(denom))  # Go's int32 scale
    # Go's int64 path (exact) takes a quantity of at most 18 digits with an exponent
    # down to 10^-9, or a whole binary one of at most 14 - exponent * 3 // 10 digits.
    if binary:
        fast = not denom and exponent * 3 // 10 <= 14 - len(num)
    else:
        fast = len(num) + len(denom) <= 18 and unit >= -9
    if fast:
        count = int(num + denom) << exponent if binary else int(num + denom)
        value = decimal.Decimal(-count if negative else count).scaleb(unit, _EXACT)
        return GoQuantity(value, unit, False)
    if not digits:
        raise ValueError(QUANTITY_NUMERIC)
    return _go_dec_quantity(negative, num, denom, binary=binary, exponent=exponent, unit=unit)


def _go_dec_quantity(
    negative: bool, num: str, denom: str, *, binary: bool, exponent: int, unit: int
) -> GoQuantity:
    """``ParseQuantity``'s ``inf.Dec`` path: exact, rounded away from zero to scale 9
    (a zero is not rounded and keeps its scale), a binary quantity capped at 2^63 - 1
    (then scale 0)."""
    with decimal.localcontext(_EXACT):
        value = decimal.Decimal(f"{num}.{denom}")
        value = value * (2**exponent) if binary else value.scaleb(exponent)
        if not value:
            return GoQuantity(decimal.Decimal(0), -_int32(-unit), True)
        nanos = value.scaleb(9)
        whole = nanos.to_integral_value(decimal.ROUND_CEILING)
        if whole != nanos:
            value = whole.scaleb(-9)
        if binary and value > _INT64_MAX:
            return GoQuantity(decimal.Decimal(-_INT64_MAX if negative else _INT64_MAX), 0, True)
        return GoQuantity(-value if negative else value, -9, True)


def _int32(n: int) -> int:
    """Go's ``int32(n)`` of an int64: wrapped."""
    return (n + 2**31) % 2**32 - 2**31


def _split_quantity(text: str) -> tuple[bool, str, str, bool, str]:
    """``parseQuantityString``: (negative, the digits before the point without leading
    zeros or "0", those after it, whether any digit was written, the suffix).

    Raises:
        ValueError: :data:`QUANTITY_FORMAT_WRONG`, a character after the suffix's
            letters and sign that is not a digit.
    """
    sign = 1 if text[0] in "+-" else 0
    negative = text[0] == "-"
    first = _past(text, sign, "0")  # leading zeros
    if first == len(text):
        return negative, "0", "", True, ""
    point = _past(text, first, _DIGITS)
    num, denom, pos = text[first:point], "", point
    if text[point : point + 1] == ".":
        pos = _past(text, point + 1, _DIGITS)
        denom = text[point + 1 : pos]
    digits = first > sign or bool(num) or bool(denom)
    suffix = pos
    pos = _past(text, pos, _SUFFIX_LETTERS)
    if text[pos : pos + 1] in ("+", "-"):
        pos += 1
    if _past(text, pos, _DIGITS) < len(text):
        raise ValueError(QUANTITY_FORMAT_WRONG)
    return negative, num or "0", denom, digits, text[suffix:]


def _past(text: str, pos: int, chars: Container[str]) -> int:
    """Where the run of ``chars`` in ``text`` from ``pos`` ends."""
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def decode_quantity(text: str) -> decimal.Decimal:
    """A string quantity as the API server decodes it in an object (a container's
    ``resources``, an ``emptyDir.sizeLimit``, a ResourceSlice's ``capacity``):
    ``Quantity.UnmarshalJSON`` of the JSON string Go's ``encoding/json`` writes for
    ``text`` (what Crossplane and provider-kubernetes send): a character it escapes (a
    control character such as a tab or newline, ``"``, ``\\``, U+2028, U+2029) reaches
    the decoder as its escape and is refused; the rest is :func:`go_trim_space`
    (``" 1Gi "`` is ``1Gi``), then :func:`go_parse_quantity`.

    Raises:
        ValueError: Go's error (:func:`go_parse_quantity`).
    """
    return decode_go_quantity(text).value


def decode_go_quantity(text: str) -> GoQuantity:
    """:func:`decode_quantity` with the form Go holds the value in (:func:`go_quantity`).

    Raises:
        ValueError: Go's error (:func:`go_parse_quantity`).
    """
    if _GO_JSON_ESCAPED.search(text):
        raise ValueError(QUANTITY_FORMAT_WRONG)
    return go_quantity(go_trim_space(text))
