"""What the function emits for every bundled example is valid against the schemas.

For each ``examples/<kind>/xr*.yaml`` the function is driven through
Crossplane's requirements loop in-process (``function.render.drive`` with the
example's ``required/`` resources), once as a first reconcile (nothing
observed) and once with the example's ``observed/`` resources. Every desired
composed resource must validate (our XRDs, the Object CRD with its embedded
manifest, Kubernetes' schemas), and so must the XR with the desired status
merged in: Crossplane's API server silently prunes status fields that the XRD
does not declare, so a status field missing from the XRD would be lost in a
real cluster while every composer test still passed.

Examples are discovered, so new ones are covered without editing this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from function.render import World, drive, load_yaml, observed_by_name
from tests.support.harness import desired, fatal, run, status
from tests.support.validation import ROOT, SchemaError, validate_manifest, validate_xr

EXAMPLES = ROOT / "examples"


def _cases() -> list[tuple[str, Path, bool]]:
    cases = []
    for xr_file in sorted(EXAMPLES.glob("*/xr*.yaml")):
        has_observed = (xr_file.parent / "observed").is_dir()
        cases.append((str(xr_file.relative_to(ROOT)), xr_file, False))
        if has_observed:
            cases.append((str(xr_file.relative_to(ROOT)), xr_file, True))
    return cases


CASES = _cases()


def _render(xr_file: Path, with_observed: bool):
    xrs = load_yaml([str(xr_file)])
    assert len(xrs) == 1, f"{xr_file}: want exactly one XR"
    required_dir = xr_file.parent / "required"
    world = World(load_yaml([str(required_dir)]) if required_dir.is_dir() else [])
    observed: dict[str, dict[str, Any]] = {}
    if with_observed:
        observed = observed_by_name(load_yaml([str(xr_file.parent / "observed")]))
    rsp, _calls = drive(lambda req: run(req), xrs[0], observed, world)
    return xrs[0], rsp


def test_examples_are_found():
    assert any(p.endswith("modelcache/xr.yaml") for p, _, _ in CASES)


@pytest.mark.parametrize(
    "rel, xr_file, with_observed",
    CASES,
    ids=[f"{r}{'+observed' if o else ''}" for r, _, o in CASES],
)
def test_rendered_example_is_valid(rel: str, xr_file: Path, with_observed: bool):
    xr, rsp = _render(xr_file, with_observed)
    assert fatal(rsp) == [], f"{rel}: fatal results {fatal(rsp)}"
    problems: list[str] = []
    for name, body in sorted(desired(rsp).items()):
        try:
            validate_manifest(body)
        except SchemaError as e:
            problems.append(f"composed resource {name!r}: {e}")
    merged = dict(xr)
    merged["status"] = {**(xr.get("status") or {}), **status(rsp)}
    merged["status"].pop("conditions", None)  # Crossplane writes these, with its own schema
    try:
        validate_xr(merged)
    except SchemaError as e:
        problems.append(f"XR with the desired status: {e}")
    assert not problems, "\n".join(problems)
