"""``python -m function.render`` prints what ``crossplane render`` prints.

For every bundled example both are run against the same function: the project's own
requirements loop (``function.render``) and Crossplane's reconciler (the CLI with the
core binary), the project's tool given the XR as Crossplane passed it to the function
(the XRD's defaults applied). Their YAML streams are compared after removing only what
the project's tool cannot know (names Crossplane generates, owner references, uids,
``spec.crossplane``, Crossplane's ``Responsive``
condition and ``SelectComposition`` event, condition timestamps, and wall-clock
timestamps the function writes, which differ by the second between two runs).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from function.render import load_yaml
from tests.e2e.test_examples import CASES, _required_dir
from tests.support.crossplane import ROOT
from tests.support.engine import composition_for

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def _untimed(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _untimed(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_untimed(x) for x in v]
    if isinstance(v, str):
        return _TIME.sub("<time>", v)
    return v


def normalize(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The comparable view of a render stream: XR status and conditions, composed
    resources by composition-resource name, results."""
    xr, rest = docs[0], docs[1:]
    status = dict(xr.get("status") or {})
    conditions = sorted(
        (c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
        for c in status.pop("conditions", [])
        if c["type"] != "Responsive"
    )
    composed = {}
    results = []
    for d in rest:
        if d.get("kind") == "Result":
            if d.get("reason") != "SelectComposition":
                results.append((d["severity"], d.get("reason", ""), d["message"]))
            continue
        meta = d["metadata"]
        labels = dict(meta.get("labels") or {})
        composed[meta["annotations"]["crossplane.io/composition-resource-name"]] = {
            "apiVersion": d["apiVersion"],
            "kind": d["kind"],
            "labels": labels,
            "annotations": meta.get("annotations") or {},
            "namespace": meta.get("namespace"),
            "spec": d.get("spec"),
            **({"data": d["data"]} if "data" in d else {}),
        }
    return _untimed({"status": status, "conditions": conditions, "composed": composed,
                     "results": sorted(results)})


def step_of(kind: str) -> str:
    (comp,) = load_yaml([str(composition_for(kind))])
    return comp["spec"]["pipeline"][0]["step"]


@pytest.mark.parametrize("case, xr_file, with_observed", CASES, ids=[c[0] for c in CASES])
def test_function_render_matches_crossplane_render(
    render, fn, tmp_path, case, xr_file: Path, with_observed
):
    (xr,) = load_yaml([str(xr_file)])
    req_dir = _required_dir(xr_file)
    required = load_yaml([str(req_dir)]) if req_dir else []
    obs_dir = xr_file.parent / "observed"
    observed = load_yaml([str(obs_dir)]) if with_observed else []
    theirs = render(xr, observed=observed, required=required).check()

    # The same input for both: the XR as Crossplane saw it, with the XRD's defaults.
    applied = {k: v for k, v in theirs.xr.items() if k != "status"}
    applied["spec"] = {k: v for k, v in applied["spec"].items() if k != "crossplane"}
    if "status" in xr:
        applied["status"] = xr["status"]
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(applied))
    args = [sys.executable, "-m", "function.render", str(path), "--address", fn, "-r",
            "--step", step_of(xr["kind"])]
    if req_dir:
        args += ["--required", str(req_dir)]
    if with_observed:
        args += ["--observed", str(obs_dir)]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ours = [d for d in yaml.safe_load_all(proc.stdout) if d]

    want, got = normalize(theirs.documents), normalize(ours)
    assert got["composed"].keys() == want["composed"].keys()
    for name in want["composed"]:
        assert got["composed"][name] == want["composed"][name], name
    assert got["status"] == want["status"]
    assert got["conditions"] == want["conditions"]
    assert got["results"] == want["results"]


def test_fatal_result_is_an_error_in_both(render, fn, tmp_path):
    (xr,) = load_yaml([str(ROOT / "examples" / "modelcache" / "xr.yaml")])
    del xr["spec"]["clusterSelector"]
    required = load_yaml([str(ROOT / "examples" / "modelcache" / "required")])
    theirs = render(xr, required=required, xrd=False)
    assert theirs.exit_code != 0
    assert "returned a fatal result" in theirs.stderr and "spec.clusterSelector" in theirs.stderr
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    proc = subprocess.run(
        [sys.executable, "-m", "function.render", str(path), "--address", fn,
         "--required", str(ROOT / "examples" / "modelcache" / "required")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert proc.returncode == theirs.exit_code == 1
    assert proc.stdout == theirs.stdout == ""
    assert "fatal result" in proc.stderr and "spec.clusterSelector" in proc.stderr


def test_an_xr_being_deleted_is_not_composed_in_either(render, fn, tmp_path):
    """Found by review 13a: Crossplane's reconciler calls no function for an XR with a
    deletionTimestamp (it removes its finalizer and returns; Kubernetes' garbage
    collector deletes the composed resources), while ``function.render`` called the
    function, which cancelled the running backfill with an event. Both now print the
    XR as it was, ``Ready=False`` ``Deleting``, nothing composed, no result."""
    (xr,) = load_yaml([str(ROOT / "examples" / "modelbackfill" / "xr-finishing.yaml")])
    xr["metadata"]["deletionTimestamp"] = "2026-11-29T03:40:00Z"
    xr["metadata"]["finalizers"] = ["composite.apiextensions.crossplane.io"]
    required = ROOT / "examples" / "modelbackfill" / "required"
    observed = ROOT / "examples" / "modelbackfill" / "observed"
    theirs = render(
        xr, required=load_yaml([str(required)]), observed=load_yaml([str(observed)]), xrd=False
    ).check()
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    proc = subprocess.run(
        [sys.executable, "-m", "function.render", str(path), "--address", fn, "-r",
         "--required", str(required), "--observed", str(observed)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ours = [d for d in yaml.safe_load_all(proc.stdout) if d]
    want, got = normalize(theirs.documents), normalize(ours)
    assert ["Ready", "False", "Deleting", ""] in want["conditions"], want["conditions"]
    assert got == want
    assert got["status"]["phase"] == xr["status"]["phase"]
