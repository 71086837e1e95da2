"""``crossplane resource validate`` of every example XR and every composed resource.

The pinned CLI validates what ``crossplane render`` printed for each bundled example
(the XR with ``--include-full-xr``, and every composed resource: ModelCacheHydrations,
ModelReplicas, Usages, provider-kubernetes Objects) against our XRDs and the CRDs of the
projects that own the other kinds (Crossplane's Usage, provider-kubernetes' Object, the
LeaderWorkerSet), with the API server's validation library, CEL rules included, and
unknown-field detection. ``--crossplane-image=`` keeps it offline: Crossplane's own CRDs
come from the pinned module instead of a download. A missing schema is an error.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from function.render import load_yaml
from tests.e2e.test_examples import CASES, _required_dir
from tests.support.crossplane import ROOT, Tools


@pytest.fixture(scope="module")
def extensions(xp: Tools, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of every XRD and CRD the rendered documents are validated against."""
    d = tmp_path_factory.mktemp("extensions")
    for f in sorted((ROOT / "compositions").glob("*/definition.yaml")):
        shutil.copy(f, d / f"{f.parent.name}.yaml")
    s = xp.schemas
    for f in [
        *sorted((s / "crossplane").glob("protection.crossplane.io_*.yaml")),
        *sorted((s / "provider-kubernetes").glob("kubernetes.m.crossplane.io_*.yaml")),
        s / "lws" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    ]:
        shutil.copy(f, d / f.name)
    return d


def validate(
    xp: Tools, extensions: Path, docs: list[dict], tmp: Path
) -> subprocess.CompletedProcess:
    path = tmp / "resources.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=True))
    return subprocess.run(
        [str(xp.cli), "resource", "validate", str(extensions), str(path),
         f"--cache-dir={tmp / 'cache'}", "--crossplane-image=", "--error-on-missing-schemas"],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("case, xr_file, with_observed", CASES, ids=[c[0] for c in CASES])
def test_rendered_example_validates(render, xp, extensions, tmp_path, case, xr_file, with_observed):
    (xr,) = load_yaml([str(xr_file)])
    req_dir = _required_dir(xr_file)
    required = load_yaml([str(req_dir)]) if req_dir else []
    observed = load_yaml([str(xr_file.parent / "observed")]) if with_observed else []
    out = render(xr, observed=observed, required=required).check()
    docs = [out.xr, *out.composed.values()]
    proc = validate(xp, extensions, docs, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(docs)
    assert f"Total {n} resources: 0 missing schemas, {n} success cases" in proc.stdout


def test_validate_can_fail(render, xp, extensions, tmp_path):
    """The same check rejects a composed resource that breaks its schema or a CEL rule."""
    (xr,) = load_yaml([str(ROOT / "examples" / "modelcache" / "xr.yaml")])
    out = render(xr, required=load_yaml([str(ROOT / "examples" / "modelcache" / "required")]))
    child = copy.deepcopy(next(iter(out.composed.values())))
    child["spec"]["huggingFace"]["sizeGiB"] = "two"
    broken_xr = copy.deepcopy(out.xr)
    del broken_xr["spec"]["clusterSelector"]  # required by the XRD's CEL rule / schema
    proc = validate(xp, extensions, [broken_xr, child], tmp_path)
    assert proc.returncode != 0
    assert "0 failure cases" not in proc.stdout, proc.stdout
