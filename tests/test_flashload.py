"""The flash loader program (``python -m jobs.flashload``) on real directories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs.flashload import DONE_FILE, flash_load, main

ROOT = Path(__file__).resolve().parents[1]


def _tree(root: Path) -> None:
    (root / "snapshots" / "abc").mkdir(parents=True)
    (root / "blobs").mkdir()
    (root / "blobs" / "w1").write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    (root / "config.json").write_text('{"model_type": "qwen2"}')
    (root / ".modelplane-hydrated").write_text("id\n")
    os.symlink("../../blobs/w1", root / "snapshots" / "abc" / "model.safetensors")
    for i in range(20):
        (root / f"shard-{i:02d}.bin").write_bytes(bytes([i]) * (1000 + i))


def _listing(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file() and p.name != DONE_FILE:
            out[rel] = p.read_bytes()
    return out


def test_copies_every_file_and_keeps_internal_links(tmp_path: Path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    files, size = flash_load(src, dst, concurrency=4)
    assert files == 23
    assert size > 3 * 1024 * 1024
    assert _listing(dst) == _listing(src)
    assert (dst / "snapshots" / "abc" / "model.safetensors").read_bytes() == (
        src / "blobs" / "w1"
    ).read_bytes()
    assert (dst / DONE_FILE).exists()


def test_second_run_copies_nothing_and_first_failure_leaves_no_marker(tmp_path: Path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    flash_load(src, dst, concurrency=2)
    _, size = flash_load(src, dst, concurrency=2)
    assert size == 0
    assert main([f"--source={tmp_path / 'missing'}", f"--dest={dst}"]) == 1
    assert not (dst / DONE_FILE).exists()


def test_runs_as_a_module(tmp_path: Path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.flashload",
            f"--source={src}",
            f"--dest={dst}",
            "--concurrency=8",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "23 files" in proc.stdout
    assert _listing(dst) == _listing(src)
