"""An XR whose ``spec`` is not an object gets a fatal result naming ``spec``, every kind.

Every kind's XRD makes ``spec`` an object, so the API server rejects ``spec: 5``; a
function called anyway must not read it as an empty spec (which reads as "nothing
wanted").
"""

from __future__ import annotations

import pytest

from function import API_VERSION
from function.composers import KINDS
from tests.support.harness import fatal, request, run


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(
    "spec, named", [(5, "a number"), ("x", "a string"), ([1], "a list"), (True, "a boolean")]
)
def test_a_spec_that_is_not_an_object_is_named(kind: str, spec, named: str) -> None:
    xr = {"apiVersion": API_VERSION, "kind": kind,
          "metadata": {"name": "x", "namespace": "ml"}, "spec": spec}
    msgs = fatal(run(request(xr)))
    assert msgs and f"spec: expected an object, got {named}" in msgs[0], (kind, msgs)
