"""``python -m function.render`` refuses input Crossplane could never send, saying what to write.

Each case fails before the function is started (exit code 2, one line on stderr).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from function import render

ROOT = Path(__file__).resolve().parents[1]
XR = "apiVersion: modelplane.ai/v1alpha1\nkind: ModelCache\nmetadata: {name: c, namespace: n}\n"


@dataclass(frozen=True)
class Case:
    name: str
    files: dict[str, str]  # file name -> content, under tmp_path
    argv: list[str]  # {tmp} is replaced by tmp_path
    want: str  # stderr contains


CASES = [
    Case(
        "a directory given as the XR",
        {},
        [str(ROOT / "examples/modelcache")],
        "is a directory; give the XR's file (for example",
    ),
    Case(
        "an XR without a name",
        {"xr.yaml": "apiVersion: modelplane.ai/v1alpha1\nkind: ModelCache\nspec: {}\n"},
        ["{tmp}/xr.yaml"],
        "the XR has no metadata.name",
    ),
    Case(
        "two XRs in one file",
        {"xr.yaml": XR + "---\n" + XR},
        ["{tmp}/xr.yaml"],
        "want exactly one XR, found 2",
    ),
    Case(
        "a required resource without a kind",
        {"xr.yaml": XR, "req.yaml": "apiVersion: v1\nmetadata: {name: s}\n"},
        ["{tmp}/xr.yaml", "--required", "{tmp}/req.yaml"],
        "--required document 1 (? s) has no kind",
    ),
    Case(
        "a required resource without a name",
        {"xr.yaml": XR, "req.yaml": "apiVersion: v1\nkind: Secret\n"},
        ["{tmp}/xr.yaml", "--required", "{tmp}/req.yaml"],
        "has no metadata.name",
    ),
    Case(
        "a path that does not exist",
        {"xr.yaml": XR},
        ["{tmp}/xr.yaml", "--observed", "{tmp}/nope"],
        "nope: no such file or directory",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_render_refuses(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)
    code = render.main([a.replace("{tmp}", str(tmp_path)) for a in case.argv])
    err = capsys.readouterr().err
    assert code == 2
    assert case.want in err, err


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """``python -m function.render ... | head``: the pipe closes before the output ends;
    the command says nothing more and exits 141, as a shell reports SIGPIPE (a read end
    closed before the first write makes it certain)."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "function.render",
                "examples/modelcache/xr.yaml",
                "--required",
                "examples/modelcache/required",
                "--observed",
                "examples/modelcache/observed",
            ],
            stdout=write,
            stderr=subprocess.PIPE,
            cwd=Path(__file__).resolve().parent.parent,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
    assert proc.returncode == 141
