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
