"""The Configuration package builds with the pinned ``crossplane xpkg build``.

``scripts/build-configuration`` stages ``configuration/crossplane.yaml`` with every XRD
and Composition of ``compositions/`` and builds an xpkg (an OCI image tarball). The
package's ``package.yaml`` layer must hold the Configuration metadata with its
dependencies and exactly the XRDs and Compositions the repository ships.
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile

import yaml

from function.render import load_yaml
from tests.support.crossplane import ROOT, Tools


def _package_yaml(xpkg: bytes) -> list[dict]:
    with tarfile.open(fileobj=io.BytesIO(xpkg)) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer in manifest[0]["Layers"]:
            data = outer.extractfile(layer).read()  # type: ignore[union-attr]
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as inner:
                if "package.yaml" in inner.getnames():
                    text = inner.extractfile("package.yaml").read().decode()  # type: ignore[union-attr]
                    return [d for d in yaml.safe_load_all(text) if d]
    raise AssertionError("no package.yaml layer in the xpkg")


def _files(xpkg: bytes) -> set[str]:
    """Every file name in every layer of an xpkg."""
    out: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(xpkg)) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer in manifest[0]["Layers"]:
            data = outer.extractfile(layer).read()  # type: ignore[union-attr]
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as inner:
                out.update(inner.getnames())
    return out


def _names(docs: list[dict], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d.get("kind") == kind}


def test_configuration_package_builds(xp: Tools, tmp_path):
    out = tmp_path / "configuration.xpkg"
    proc = subprocess.run(
        [str(ROOT / "scripts" / "build-configuration"), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    docs = _package_yaml(out.read_bytes())
    meta = [d for d in docs if d["kind"] == "Configuration"]
    assert len(meta) == 1 and meta[0]["apiVersion"] == "meta.pkg.crossplane.io/v1"
    deps = {(d["kind"], d["package"]) for d in meta[0]["spec"]["dependsOn"]}
    assert ("Function", "xpkg.crossplane.io/modelplane/function-modelplane") in deps
    assert ("Provider", "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes") in deps
    assert all(d.get("version") for d in meta[0]["spec"]["dependsOn"])
    shipped = load_yaml([str(p) for p in sorted((ROOT / "compositions").glob("*/*.yaml"))])
    for kind in ("CompositeResourceDefinition", "Composition"):
        assert _names(docs, kind) == _names(shipped, kind) != set()
    # No examples bundled (found by a trial: the CLI's default ./examples carried the
    # repository's render inputs, fake token Secrets too).
    assert not [f for f in _files(out.read_bytes()) if "example" in f]


def test_function_package_as_the_readme_builds_it_carries_no_examples(xp: Tools, tmp_path):
    """The README's ``xpkg build`` of the function package, without the runtime image
    (building that needs a container engine), run from the repository's root."""
    readme = (ROOT / "README.md").read_text()
    line = next(
        x for x in readme.splitlines() if "crossplane xpkg build --package-root=package" in x
    )
    flags = [f for f in line.strip().rstrip("\\").split()[2:] if f.startswith("--")]
    assert any(f.startswith("--examples-root=") for f in flags), line
    out = tmp_path / "function.xpkg"
    proc = subprocess.run(
        [str(xp.cli), "xpkg", "build", *flags, f"--package-file={out}"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    files = _files(out.read_bytes())
    assert "package.yaml" in files
    assert not [f for f in files if "example" in f], files
