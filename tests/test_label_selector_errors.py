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


def test_help_text_drops_docstring_markup():
    doc = "Runs ``python -m function`` and :class:`~function.render.World` and :func:`drive`."
    assert plain_text(doc) == "Runs python -m function and function.render.World and drive."
