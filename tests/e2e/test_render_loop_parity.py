"""The stand-in requirements loop against Crossplane's own (review 14c #3): every row of
``tests/test_render_loop.py``'s table, the probe function pre-populated through a
Composition step's bootstrap requirements (the code path Crossplane v2.4 also seeds
last reconcile's requirements through), rendered by ``crossplane render
--crossplane-binary`` (core v2.4.0) and by ``function.render.drive``: the same
``status.probe``, the same error ("requirements didn't stabilize", exit 1, nothing
applied) and the same number of calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from function.render import NOT_STABLE
from tests.support import crossplane, probe
from tests.support.table import Case, table
from tests.test_render_loop import LOOPS, Loop, stand_in


@pytest.fixture(scope="module")
def served() -> Iterator[probe.Probe]:
    with probe.serving() as p:
        yield p


@table(LOOPS)
def test_crossplane_render_and_the_stand_in_end_the_loop_alike(
    xp: crossplane.Tools, served: probe.Probe, case: Case[Loop, probe.Outcome]
) -> None:
    real, code, stderr = probe.render_real(xp, served, case.inputs.shape, dict(case.inputs.given))
    if real.error is not None:
        assert code == 1 and real.probe is None, stderr
        assert NOT_STABLE in real.error, stderr
        real = probe.Outcome(None, NOT_STABLE, real.calls)
    assert real == case.want, (case.reason, stderr)
    assert stand_in(served, case.inputs, "bootstrap") == real
