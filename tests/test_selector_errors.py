"""A device selector that does not parse says where, with whole words of the text before it."""

from __future__ import annotations

import pytest

from function.scheduling import devices

CASES = [
    # (expression, the reason contains)
    ('device.attributes["x"].model === 3', "after 'device.attributes[\"x\"].model=='"),
    (
        'device.capacity["memory"] >',
        "syntax error at column 26, after 'device.capacity[\"memory\"]'",
    ),
    (
        'device.attributes["gpu.example.com"].model == "h100" && ((((',
        'after \'..."gpu.example.com"].model=="h100"&&(((\'',
    ),
]


@pytest.mark.parametrize(("expression", "want"), CASES)
def test_parse_error_names_the_place(expression: str, want: str):
    with pytest.raises(devices.InvalidSelector) as e:
        devices.compile_selector(expression)
    assert want in str(e.value), str(e.value)
    excerpt = str(e.value).split("after '", 1)[1]
    # The excerpt starts at a word boundary: "..." then a whole word, or the expression's start.
    assert excerpt.startswith(("...", "device")), excerpt
    normalized = devices.normalize(expression)
    if excerpt.startswith("..."):
        start = normalized.index(excerpt[3:-1])
        assert not (normalized[start - 1].isalnum() and excerpt[3].isalnum()), excerpt


GPU = devices.Device(
    name="gpu",
    driver="gpu.nvidia.com",
    attributes=(("arch", ("string", "Hopper")),),
    capacity=(("memory", "80Gi"),),
)
EVALUATION = [
    # (expression, the reason says; in CEL's words, never Python's class names)
    (
        'device.capacity["gpu.nvidia.com"].memory > "40Gi"',
        "no operator > for a quantity and a string"
        ' (compare quantities with .compareTo(quantity("40Gi")))',
    ),
    ('device.attributes["gpu.nvidia.com"].arch', "returned a string (Hopper), not a boolean"),
    (
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("forty")) > 0',
        "'forty' is not a Kubernetes quantity: quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    ),
]


@pytest.mark.parametrize(("expression", "want"), EVALUATION)
def test_evaluation_error_says_what_in_cel_terms(expression: str, want: str):
    with pytest.raises(devices.SelectorEvaluationError) as e:
        devices.selector_matches(expression, GPU)
    assert e.value.reason == want
    assert "class" not in str(e.value) and "Token(" not in str(e.value)


# A selector that returns no boolean by its shape is refused when it compiles, as cel-go's
# type check refuses it when Kubernetes admits a DRA selector; one whose type is known
# only at evaluation (an attribute read is dyn) is checked on each device instead.
NOT_A_CONDITION = [
    ("0", "it returns an int, not a boolean"),
    ("device.driver", "it returns a string, not a boolean"),
    ("device.attributes", "it returns a map, not a boolean"),
    ("device", "it returns an object, not a boolean"),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1Gi"))', "returns an int"),
    ('quantity("1Gi")', "it returns a quantity"),
    ("[true]", "it returns a list"),
    ("1 + 1", "it returns a number, string, list or duration"),
    ('true ? "a" : "b"', "it returns a string"),
    ("(((1.5)))", "it returns a double"),
]
CONDITIONS = [
    'device.driver == "gpu.nvidia.com"',
    '!(device.driver == "x")',
    'device.driver.startsWith("gpu")',
    '"gpu.nvidia.com" in device.attributes',
    'has(device.attributes["gpu.nvidia.com"].arch)',
    '[1, 2].all(x, x > 0)',
    'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("1Gi"))',
    'device.attributes["gpu.nvidia.com"].nvlink',  # dyn: a bool attribute is a condition
    'true ? device.driver == "a" : false',
    'device.attributes["gpu.nvidia.com"].nvlink ? 1 : true',  # dyn: checked when evaluated
]


@pytest.mark.parametrize(("expression", "want"), NOT_A_CONDITION)
def test_a_selector_that_returns_no_boolean_does_not_compile(expression: str, want: str):
    with pytest.raises(devices.InvalidSelector) as e:
        devices.compile_selector(expression)
    assert want in e.value.reason, e.value.reason
    assert 'such as device.driver == "gpu.nvidia.com"' in e.value.reason


@pytest.mark.parametrize("expression", CONDITIONS)
def test_a_condition_or_a_dyn_result_compiles(expression: str):
    devices.compile_selector(expression)


def test_a_large_non_boolean_result_is_shown_in_brief():
    """Found by a trial: a selector that builds a large list put the whole value in the
    message (1 MB in the ReplicasScheduled condition and the warning at 300 elements
    squared: past etcd's object limit at about 370)."""
    expression = 'dyn("' + "x" * 5000 + '")'
    with pytest.raises(devices.SelectorEvaluationError) as e:
        devices.selector_matches(expression, GPU)
    assert e.value.reason.startswith("returned a string (xxx")
    assert e.value.reason.endswith("characters)), not a boolean"), e.value.reason[-80:]
    assert len(e.value.reason) < 250


L600 = "[" + ",".join(["0"] * 600) + "]"
# (expression, refused by the default cost limit): a variable bound to an element of a
# literal is as long as that element. Found by a trial: ``[L].all(l, l.all(a, l.all(b,
# true)))`` was estimated at 17,717 steps (``l`` taken for 32 elements) and ran 20 s.
COSTS = [
    (f"[{L600}].all(l, l.all(a, l.all(b, true)))", True),
    (f"[{L600}].map(x, x).all(l, l.all(a, l.all(b, true)))", True),
    (f"[{L600}].filter(x, true).all(l, l.all(a, l.all(b, true)))", True),
    (f"[[{L600}]].all(m, m.all(l, l.all(a, l.all(b, true))))", True),
    ("lists.range(10000).all(x, lists.range(10000).all(y, true))", True),
    ("lists.range(1 + 1).all(x, true)", True),  # not a literal: the most it may make
    (f"[{L600}].all(l, l.size() > 0)", False),
    ("lists.range(16).all(x, x >= 0)", False),
    ("[[1, 2, 3], [4]].all(l, l.all(a, a > 0))", False),
    ('{"a": [1, 2], "b": [3]}.all(k, k != "")', False),
    ('device.driver == "gpu.nvidia.com"', False),
]


@pytest.mark.parametrize(("expression", "refused"), COSTS, ids=range(len(COSTS)))
def test_the_cost_estimate_follows_variables_bound_to_literals(expression: str, refused: bool):
    if refused:
        with pytest.raises(devices.InvalidSelector, match="estimated cost"):
            devices.compile_selector(expression)
    else:
        devices.compile_selector(expression)


def test_a_result_nested_by_shared_reference_is_shown_without_building_its_text():
    """2**40 leaves by shared reference: rendering it whole would never finish."""
    expression = "dyn([1]" + ".map(x, [x, x])" * 40 + ")"
    with pytest.raises(devices.SelectorEvaluationError) as e:
        devices.selector_matches(expression, GPU)
    assert e.value.reason.startswith("returned a list ([[[[")
    assert len(e.value.reason) < 250


def test_an_invalid_selector_raised_again_keeps_no_traceback() -> None:
    """selector_matches on a selector that does not compile raises a new exception each
    time: the one compiling memoized is never raised, so its traceback does not grow by
    the frames of every call that evaluated it (before session 21: 4, 8, 12 frames, kept
    by the memo)."""
    depths = []
    for _ in range(3):
        with pytest.raises(devices.InvalidSelector) as e:
            devices.selector_matches("device.driver == ((", GPU)
        assert "does not compile" in str(e.value)
        tb, n = e.value.__traceback__, 0
        while tb is not None:
            n, tb = n + 1, tb.tb_next
        depths.append(n)
    assert depths[0] == depths[1] == depths[2], depths
    cached = devices._compile(devices.normalize("device.driver == (("))
    assert isinstance(cached, devices.InvalidSelector) and cached.__traceback__ is None
