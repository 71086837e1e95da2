"""Every bundled example renders through Crossplane's own reconciler.

Each ``examples/**/xr*.yaml`` is rendered by ``crossplane render`` with the pinned core
binary, with the example's ``required/`` resources, once as a first reconcile (nothing
observed) and once with its ``observed/`` resources where it has them. Crossplane must
accept every response (exit 0, no fatal result), apply the XRD's schema, and keep every
observed composed resource the example expects to keep.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from function.render import load_yaml
from tests.support.crossplane import ROOT

EXAMPLES = ROOT / "examples"


def _required_dir(xr_file: Path) -> Path | None:
    for d in (xr_file.parent, xr_file.parent.parent):
        if (d / "required").is_dir():
            return d / "required"
    return None


def cases() -> list[tuple[str, Path, bool]]:
    """(id, XR file, with observed) for every example XR."""
    out = []
    for xr_file in sorted(EXAMPLES.rglob("xr*.yaml")):
        rel = str(xr_file.relative_to(ROOT))
        out.append((rel, xr_file, False))
        if (xr_file.parent / "observed").is_dir():
            out.append((rel + "+observed", xr_file, True))
    return out


CASES = cases()

# (case id) -> (observed composed resources Crossplane deletes, why). Every other case
# keeps everything it observed (examples/modelcache/xr-kimi.yaml+observed too: observed/
# holds qwen-cache's shards, which a cache keeps, emptied, until they report that they
# hold no hydration).
DELETES: dict[str, tuple[set[str], str]] = {
    "examples/modelbackfill/xr-finishing.yaml+observed": (
        {"job-1"},
        "the Job succeeded: the attempt is recorded in status and its Job removed",
    ),
}


def test_every_example_is_a_case():
    assert len({c[1] for c in CASES}) == len(list(EXAMPLES.rglob("xr*.yaml"))) >= 10


@pytest.mark.parametrize("case, xr_file, with_observed", CASES, ids=[c[0] for c in CASES])
def test_example_renders_through_crossplane(render, case: str, xr_file: Path, with_observed: bool):
    (xr,) = load_yaml([str(xr_file)])
    req_dir = _required_dir(xr_file)
    required = load_yaml([str(req_dir)]) if req_dir else []
    observed = load_yaml([str(xr_file.parent / "observed")]) if with_observed else []
    out = render(xr, observed=observed, required=required).check()
    assert not [r for r in out.results if r.get("severity") == "Fatal"]
    assert out.xr.get("kind") == xr["kind"]
    assert out.condition("Synced") is not None, out.stdout
    for name, body in out.composed.items():
        assert body["metadata"]["annotations"]["crossplane.io/composition-resource-name"] == name
    want, _why = DELETES.get(case, (set(), ""))
    assert out.deleted(observed) == want, f"Crossplane would delete {out.deleted(observed)}"
