"""Device selectors that Kubernetes' DRA environment admits are evaluated, with cel-go's
semantics (``function.scheduling.cel_library`` and the quantity and semver functions of
``function.scheduling.devices``); what it declares and this function does not evaluate is
refused saying so.

Found by a trial: ``lowerAscii``, ``split``, ``isSemver``, ``sets.contains``, ``type(x) ==
string``, ``attr.index > 2.5`` and 40 more were refused as unknown (or failed at
evaluation), so a selector Kubernetes admits could never place a replica.
"""

from __future__ import annotations

import uuid

import pytest
import re2

from function.core import memo
from function.scheduling import devices

GPU = devices.Device.from_status(
    {
        "name": "gpu-0",
        "driver": "gpu.nvidia.com",
        "attributes": {
            "architecture": {"string": "Hopper"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "index": {"int": 3},
            "mig": {"bool": False},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
)
A = 'device.attributes["gpu.nvidia.com"]'
C = 'device.capacity["gpu.nvidia.com"]'

# Each is true on GPU (and would be admitted by Kubernetes, v1.34's base environment).
TRUE = [
    # strings (cel-go ext.Strings v2)
    f'{A}.architecture.lowerAscii() == "hopper"',
    f'{A}.architecture.upperAscii() == "HOPPER"',
    f'{A}.productName.split(" ")[1] == "H100"',
    f'{A}.productName.split(" ", 2) == ["NVIDIA", "H100 80GB HBM3"]',
    f'{A}.productName.split(" ", 0) == []',
    '"abc".split("") == ["a", "b", "c"]',
    f'{A}.productName.indexOf("H100") == 7',
    f'{A}.productName.indexOf("H", 8) == 17',
    f'{A}.productName.lastIndexOf("H") == 17',
    f'{A}.productName.lastIndexOf("H", 14) == 7',
    f'{A}.productName.substring(7, 11) == "H100"',
    f'{A}.productName.substring(17) == "HBM3"',
    f'{A}.productName.replace(" ", "-") == "NVIDIA-H100-80GB-HBM3"',
    f'{A}.productName.replace(" ", "-", 1) == "NVIDIA-H100 80GB HBM3"',
    '"  x \\t".trim() == "x"',
    f'{A}.architecture.charAt(0) == "H" && {A}.architecture.charAt(6) == ""',
    '["a", "b"].join("-") == "a-b" && ["a", "b"].join() == "ab"',
    '"%s has %d GiB (%.1f%%)".format(["H100", 80, 99.5]) == "H100 has 80 GiB (99.5%)"',
    '"%x %o %b".format([255, 8, 5]) == "ff 10 101"',
    'strings.quote("a\\"b") == "\\"a\\\\\\"b\\""',
    '"ÄbC".lowerAscii() == "Äbc"',
    # regex (Kubernetes library.Regex)
    f'{A}.productName.find("H[0-9]+") == "H100"',
    f'{A}.productName.find("A[0-9]+") == ""',
    f'{A}.productName.findAll("[0-9]+") == ["100", "80", "3"]',
    f'{A}.productName.findAll("[0-9]+", 2) == ["100", "80"]',
    f'{A}.architecture.matches("^Hop")',
    # lists (Kubernetes library.Lists, cel-go ext.Lists v3)
    "[1, 2, 3].isSorted() && ![2, 1].isSorted()",
    "[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [].sum() == 0",
    "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3",
    "[1, 2, 3, 2].indexOf(2) == 1 && [1, 2, 3, 2].lastIndexOf(2) == 3",
    "[1, 2, 3].indexOf(9) == -1",
    "[1, 2, 3].slice(1, 3) == [2, 3]",
    "[[1], [2, [3]]].flatten() == [1, 2, [3]] && [[1], [2, [3]]].flatten(2) == [1, 2, 3]",
    "lists.range(3) == [0, 1, 2]",
    "[1, 1, 2].distinct() == [1, 2] && [1, 2].reverse() == [2, 1]",
    "[3, 1, 2].sort() == [1, 2, 3]",
    # a second trial, against Kubernetes' environment (k8s.io/apiserver v0.35.1, cel-go
    # v0.26.0): offsets past the end find nothing; the empty string is found at the offset
    '"abc".indexOf("b", 5) == -1 && "abc".lastIndexOf("b", 10) == -1',
    '"abc".lastIndexOf("b", 3) == -1 && "abc".indexOf("", 10) == 10',
    '"abcabc".lastIndexOf("bc", 4) == 4 && "abcabc".indexOf("bc", 6) == -1',
    # format's %s as cel-go writes values; %e in its superscript form; %x of a string
    "'%s'.format([{'a': 1}]) == '{\"a\":1}'",
    '"%s %s %s".format([null, 1.0, 123456789.0]) == "null 1 1.23456789e+08"',
    "'%s'.format([[1, 'a', true]]) == '[1, \"a\", true]' && '%s'.format([int]) == 'int'",
    '"%s".format([b"abc"]) == "abc" && "%x".format(["hello"]) == "68656c6c6f"',
    '"%e".format([1234.5]) == "1.234500\u00d710\u2070\u00b3"',
    # RE2, as Go's regexp: POSIX classes, \pL, \z
    '"abc".find("[[:alpha:]]+") == "abc" && "αβ".find("\\pL+") == "αβ"',
    # quantities and versions as Kubernetes reads them
    '!quantity("1.5Gi").isInteger() && !quantity("9223372036854775808").isInteger()',
    '!isQuantity(" 1Gi") && quantity("9e999999").add(quantity("9e999999")).sign() == 1',
    '!isSemver("1-alpha", true) && !isSemver("v1.2-alpha", true) && !isSemver("1.2.3-01")',
    '!isSemver("99999999999999999999.0.0") && !isSemver(" 1.2.3") && !isSemver("1.2.3 ", true)',
    'semver("v01.02.03", true).minor() == 2',
    '" \u001c x".trim() == "\u001c x"',
    # a third review: CEL's heterogeneous equality on dyn values (a bool is not 0; values
    # of other types are unequal, not an error), lists and maps element by element
    f"!({A}.mig == 0) && {A}.mig != 0 && !(0 in [{A}.mig])",
    f'{A}.index != "0" && {A}.index != false && {A}.architecture != 1',
    # (a version on the left of == against a string is an error, as in Kubernetes)
    f'{A}.exists(k, k != "cudaComputeCapability" && {A}[k] == "Ampere") == false',
    '[[1], {"a": [2]}] == [[1], {"a": [2]}] && [1, 2.0] == [1.0, 2] && {"a": 1} != {"a": 1.5}',
    "!sets.contains([0], [false]) && sets.intersects(lists.range(200), lists.range(200))",
    "sets.contains(lists.range(300), lists.range(300).reverse())",
    "lists.range(10000).distinct().size() == 10000",  # of scalars: by keys, linear
    # a fourth review, against cel-go: map keys by value, ints against doubles as doubles,
    # string() in cel-go's text, a version on the right of == against a string is false
    'dyn(1) in dyn({"a": 1}) == false && dyn(1.0) in dyn({1: "a"})',
    'dyn({1: "a"}) == dyn({1u: "a"}) && dyn(9007199254740993) == dyn(9007199254740992.0)',
    'string(true) == "true" && string(1.0) == "1" && string(b"ab") == "ab"',
    f'"9.0.0" != {A}.cudaComputeCapability',
    # heterogeneous equality inside list functions: numbers by value, other types unequal
    'dyn([1, "a"]).indexOf("a") == 1 && sets.contains(dyn([1, "a"]), ["a"])',
    "dyn([1, 1.0, 2u]).distinct() == [1, 2u] && [1, 2.0, 3u].isSorted()",
    # sets (cel-go ext.Sets)
    "sets.contains([1, 2, 3], [1, 3]) && !sets.contains([1], [2])",
    "sets.equivalent([1, 2], [2, 1, 1]) && sets.intersects([1, 2], [2, 3])",
    # quantity (Kubernetes library.Quantity)
    'isQuantity("40Gi") && !isQuantity("forty")',
    f'{C}.memory.sign() == 1 && {C}.memory.isInteger()',
    f'{C}.memory.add(quantity("1Gi")).isGreaterThan(quantity("80Gi"))',
    f'{C}.memory.sub(quantity("1Gi")).isLessThan(quantity("80Gi"))',
    f'{C}.memory.add(1).compareTo({C}.memory) == 1',
    'quantity("500m").isInteger() == false && quantity("-1").sign() == -1',
    # semver (Kubernetes library.Semver v1)
    'isSemver("1.2.3") && !isSemver("v1.2") && isSemver("v1.2", true)',
    'semver("v9.0", true).major() == 9 && semver("v9.0", true).minor() == 0',
    f'{A}.cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    # cross-type numeric comparisons and heterogeneous equality
    f"{A}.index > 2.5 && {A}.index < 3.5 && {A}.index == 3.0 && {A}.index > 2u",
    f"{A}.index != 3.5 && 1.0 <= {A}.index",
    # type identifiers
    f"type({A}.architecture) == string && type({A}.index) == int",
    f"type({A}.mig) == bool && type({C}.memory) != string",
    # the standard library, unchanged
    f'{A}.architecture in ["Hopper", "Blackwell"] && has({A}.mig) && !{A}.mig',
    f'"{{}}" != "" && {A}.exists(k, k == "index")',
    "[1, 2, 3].filter(x, x > 1).map(x, x * 2) == [4, 6]",
]


@pytest.mark.parametrize("expression", TRUE, ids=range(len(TRUE)))
def test_a_selector_of_kubernetes_cel_libraries_is_evaluated(expression: str) -> None:
    devices.compile_selector(expression)
    assert devices.selector_matches(expression, GPU) is True


# (expression, the reason contains): Kubernetes declares these; this evaluator does not.
UNSUPPORTED = [
    (f"{A}.all(k, v, k != '')", "two-variable all(i, v, ...) is not evaluated here"),
    ("[1, 2].exists(i, v, v > i)", "two-variable exists"),
    ("[1, 2].map(x, x > 1, x * 2) == [4]", "write .filter(x, filter).map(x, transform)"),
    ("[1, 2].transformList(i, v, v) == [1, 2]", "transformList is in Kubernetes' CEL library"),
    ('isIP("10.0.0.1")', "isIP is in Kubernetes' CEL library"),
    ('url("https://x").getHost() == "x"', "url is in Kubernetes' CEL library"),
    ('cidr("10.0.0.0/8").containsIP("10.0.0.1")', "is in Kubernetes' CEL library"),
    ("optional.of(1).hasValue()", "optional.* is in Kubernetes' CEL library"),
    ('!format.dns1123Label().validate("x").hasValue()', "format.* is in Kubernetes'"),
    ("[2, 1].sortBy(x, x) == [1, 2]", "sortBy is in Kubernetes' CEL library"),
    # Not Kubernetes' at all: unknown, as before.
    ("math.greatest(1, 2) == 2", "unknown function greatest"),
    # Return no boolean by their shape (cel-go's type check).
    (f"{A}.architecture.lowerAscii()", "it returns a string, not a boolean"),
    ("lists.range(3)", "it returns a list, not a boolean"),
    (f"{A}.productName.indexOf('H')", "it returns an int, not a boolean"),
]


@pytest.mark.parametrize(("expression", "want"), UNSUPPORTED, ids=range(len(UNSUPPORTED)))
def test_what_is_not_evaluated_is_refused_saying_so(expression: str, want: str) -> None:
    with pytest.raises(devices.InvalidSelector) as e:
        devices.compile_selector(expression)
    assert want in e.value.reason, e.value.reason


# (expression, the reason contains): errors at evaluation, as cel-go's (never a non-match).
ERRORS = [
    (f"{A}.architecture.charAt(7) == ''", "charAt: index 7 out of range (0..6)"),
    (f"{A}.architecture.substring(4, 2) == ''", "substring: range [4, 2) out of range"),
    (f"{A}.architecture.indexOf('o', -1) == 1", "indexOf: index out of range: -1"),
    ("[].min() == 0", "empty sequence"),  # cel-python's own min (a reduction)
    ("[].max() == 0", "max of an empty list"),
    ("[1, 2].slice(1, 5) == [2]", "slice: range [1, 5) out of range (0..2)"),
    ("lists.range(100000).size() > 0", "over the 10000 it may make"),
    (f"{A}.architecture.find('(') == ''", "find: invalid regular expression"),
    ('"%d".format(["x"]) == ""', "no such overload"),
    ('"%5d".format([1]) == ""', "format: unsupported verb %5"),
    ('"%q".format(["x"]) == ""', "format: unsupported verb %q"),
    ('["a", "b"].sum() == "ab"', "no such overload"),  # Kubernetes sums numbers only
    ('"a".find("(a)\\1") == "a"', "invalid regular expression"),  # RE2: no backreferences
    # The runtime budget: lists a function makes are sized as they are iterated (the
    # compile-time estimate takes them for 32 elements); each stops in about a second.
    ("lists.range(10000).reverse().all(x, lists.range(10000).reverse().all(y, true))",
     "its evaluation passed 40,000 steps"),
    ("lists.range(300).map(x, [x]).distinct().size() > 0",
     "its evaluation passed"),  # of lists: pairwise, charged
    # a third review: each node of a macro body counts (the estimate takes a list a
    # function makes for 32 elements); equality of lists nested by shared reference,
    # ``in`` and string() of a list are charged or refused, not run for minutes
    ("lists.range(10000).reverse().exists(x, x * 1 % 8 == 1 || x * 2 % 9 == 2)",
     "its evaluation passed"),
    ("[[1]]" + ".map(a, [a, a])" * 30 + " == [[1]]" + ".map(a, [a, a])" * 30,
     "its evaluation passed"),
    ("[lists.range(4000)].all(y, y.reverse().all(x, !(x + 4000 in y)))",
     "its evaluation passed"),
    ('string([1, 2]) == ""', "no such overload"),
    # a fourth review: an error on either side of ``in`` or inside a compared map is the
    # error (before, a missing attribute under ``!(... in [...])`` selected the device);
    # a version or quantity on the left of == against another type is no overload, as
    # Kubernetes' types answer; string() of null or a quantity is no overload
    (f"!({A}.missing in ['a', 'b'])", "no such member in mapping: 'missing'"),
    ("dyn({'a': 1/0}) != dyn({'a': 1})", "divide by zero"),
    (f"{A}.cudaComputeCapability == '9.0.0'", "no operator == for a version and a string"),
    (f"{C}.memory == '80Gi'", "no operator == for a quantity and a string"),
    ("string(null) == ''", "no such overload"),
    ("string(quantity('1')) == ''", "no such overload"),
    ("string(null) == '' || string(1/0) == ''", "no operator || for an error and an error"),
    # a literal is decoded on every visit: charged by its length
    ("lists.range(1000).all(i, '" + "a" * 2000 + "' != '')", "its evaluation passed"),
    ("sets.equivalent(lists.range(10000), lists.range(10000).reverse())", "passed"),
    ("lists.range(10000).reverse().all(x, lists.range(10000).reverse().all(y, true)) || true",
     "its evaluation passed"),  # an error that || would absorb: still the budget's
    ('"%s %s".format(["x"]) == ""', "format: too few arguments"),
    ("[1, 'a'].sort() == []", "no such overload"),
    # What a selector builds is bounded (cel-go's runtime cost limit stops these): a
    # string doubled 40 times would need a terabyte.
    ('["a"]' + ".map(x, x + x)" * 40 + ".size() == 1", "its evaluation passed"),
    ("[[1]]" + ".map(x, x + x)" * 40 + ".size() == 1", "its evaluation passed"),
    ('"' + "a" * 4000 + '".replace("", "' + "b" * 4000 + '") == ""', "(16008000 here)"),
    ('"%.999999999f".format([1.0]) == ""', "a precision of at most 100 digits"),
    ('["' + "a" * 4000 + '"]' + ".map(x, [x, x, x, x])" * 12 + ".flatten(12).size() > 0",
     "its evaluation passed"),
]


@pytest.mark.parametrize(("expression", "want"), ERRORS, ids=range(len(ERRORS)))
def test_library_errors_are_evaluation_errors_naming_why(expression: str, want: str) -> None:
    devices.compile_selector(expression)
    with pytest.raises(devices.SelectorEvaluationError) as e:
        devices.selector_matches(expression, GPU)
    assert want in e.value.reason, e.value.reason


# Review 15a: a short pattern compiled to a program of megabytes (``\\pL{300}``: 3 MiB,
# 0.15 s of CPU), uncharged by the cost estimate and kept in the re2 module's own cache
# (128 programs a process, outside MODELPLANE_CACHE_BUDGET_MIB).
REGEX_TOO_LARGE = [
    ('!"a".matches("\\\\pL{300}")', "matches: regular expression '\\\\pL{300}' is too large"),
    ('!matches("a", "\\\\pL{300}")', "is too large"),
    ('"a".find("\\\\pL{300}") == ""', "find: regular expression"),
    ('"a".findAll("' + ".{1000}" * 9 + '") == []', "findAll: regular expression"),
]


@pytest.mark.parametrize(("expression", "want"), REGEX_TOO_LARGE, ids=range(len(REGEX_TOO_LARGE)))
def test_a_regex_too_large_for_its_memory_bound_is_an_evaluation_error(
    expression: str, want: str
) -> None:
    devices.compile_selector(expression)
    with pytest.raises(devices.SelectorEvaluationError) as e:
        devices.selector_matches(expression, GPU)
    assert want in e.value.reason, e.value.reason


# (expression, refused by its estimated cost): a literal pattern is charged by its program.
REGEX_COST = [
    ('"a".matches("^[a-z]+$")', False),
    ('lists.range(30).all(i, "a".matches("^[a-z]+$"))', False),
    ('"a".matches("\\\\pL{50}")', False),  # 60,000 instructions: one is in the budget
    ('lists.range(30).all(i, "a".matches("\\\\pL{50}"))', True),
    ('lists.range(30).all(i, "a".find("\\\\pL{50}") == "")', True),
    ('lists.range(30).all(i, matches("a", "\\\\pL{50}"))', True),
]


@pytest.mark.parametrize(("expression", "refused"), REGEX_COST, ids=range(len(REGEX_COST)))
def test_a_literal_regex_is_charged_by_its_program(expression: str, refused: bool) -> None:
    if refused:
        with pytest.raises(devices.InvalidSelector, match="estimated cost"):
            devices.compile_selector(expression)
    else:
        devices.compile_selector(expression)


def test_compiled_regexes_are_kept_within_the_byte_budget_not_by_re2() -> None:
    """Each compiled program is kept by the function's memo, charged the most RE2 may
    use for it; the re2 module's own cache (bounded by count only) keeps none."""
    tag = uuid.uuid4().hex
    before = memo.report()["used_bytes"]
    for i in range(4):
        expression = f'device.driver.matches("^{tag}{i}[a-z]*$")'
        devices.compile_selector(expression)
        assert devices.selector_matches(expression, GPU) is False
    assert re2._Regexp._make.cache_info().currsize == 0
    assert memo.report()["used_bytes"] - before >= 4 * 2**20
