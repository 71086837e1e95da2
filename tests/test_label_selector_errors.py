"""A label selector written wrong is named down to the key, in the author's terms."""

from __future__ import annotations

from typing import Any

import pytest

from function.core.errors import SpecError, plain_text
from function.scheduling.selectors import LabelSelector

F = "spec.clusterSelector"
CASES = [
    # (matchLabels as written, the field named, the message contains)
    ({"modelplane.ai/gpu": 100}, f"{F}.matchLabels.modelplane.ai/gpu", "got a number"),
    ({"gpu": True}, f"{F}.matchLabels.gpu", "got a boolean"),
    ({"bad key!": "x"}, f"{F}.matchLabels.bad key!", "invalid label key"),
    ({"gpu": "not valid!"}, f"{F}.matchLabels.gpu", "invalid label value 'not valid!'"),
]


@pytest.mark.parametrize(("labels", "field", "words"), CASES)
def test_match_labels_errors_name_the_key(labels: dict[str, Any], field: str, words: str):
    with pytest.raises(SpecError) as e:
        LabelSelector.parse({"matchLabels": labels}, F)
    assert e.value.field == field
    assert words in str(e.value)
    assert "100.0" not in str(e.value)


# Found by the property fuzz: a falsy value of the wrong type read as "absent", so
# matchLabels: [] selected every cluster instead of being refused as the XRD refuses it.
WRONG_EMPTY = [
    ({"matchLabels": []}, f"{F}.matchLabels", "must be a map of strings"),
    ({"matchLabels": ""}, f"{F}.matchLabels", "must be a map of strings"),
    ({"matchLabels": 0}, f"{F}.matchLabels", "must be a map of strings"),
    ({"matchExpressions": {}}, f"{F}.matchExpressions", "must be a list"),
    ({"matchExpressions": ""}, f"{F}.matchExpressions", "must be a list"),
    (
        {"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": {}}]},
        f"{F}.matchExpressions[0].values",
        "must be a list of strings",
    ),
]


@pytest.mark.parametrize(("raw", "field", "words"), WRONG_EMPTY)
def test_an_empty_value_of_the_wrong_type_is_refused(raw: dict[str, Any], field: str, words: str):
    with pytest.raises(SpecError) as e:
        LabelSelector.parse(raw, F)
    assert e.value.field == field
    assert words in str(e.value)


def test_absent_or_null_fields_select_everything():
    for raw in ({}, {"matchLabels": None}, {"matchExpressions": None}):
        assert LabelSelector.parse(raw, F) == LabelSelector()


def test_help_text_drops_docstring_markup():
    doc = "Runs ``python -m function`` and :class:`~function.render.World` and :func:`drive`."
    assert plain_text(doc) == "Runs python -m function and function.render.World and drive."
