"""The flash loader: copy model weights from the cache PVC to node-local memory.

Runs as the engine pod's init container (``python -m jobs.flashload``, see
``function.manifests.workloads.flash_container``; the names it shares with the function
are in :mod:`jobs.contract`)::

    python -m jobs.flashload --source=/mnt/models --dest=/mnt/flash-models --concurrency=8

It copies every regular file under ``--source`` to the same relative path under
``--dest`` with ``--concurrency`` files in flight (network volumes deliver far
more throughput to parallel readers than to one), then writes
:data:`DONE_FILE` in ``--dest``. Symbolic links inside the tree are recreated as
links (Hugging Face caches link snapshots to blobs); links that point outside
the source are copied as files. A file whose size and mtime already match is not
copied again, so a restarted init container resumes. Exit status 0 on success,
1 with a message on stderr when anything fails (the pod then does not start its
engine, and Kubernetes restarts the init container).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jobs.contract import FLASH_DONE_FILE

DONE_FILE = FLASH_DONE_FILE
_BUFFER = 16 * 1024 * 1024


def _plan(source: Path, dest: Path) -> tuple[list[tuple[Path, Path]], list[tuple[Path, str]]]:
    """(files to copy, links to create) for the tree under ``source``."""
    files: list[tuple[Path, Path]] = []
    links: list[tuple[Path, str]] = []
    root = source.resolve()
    for dirpath, _dirs, names in os.walk(source, followlinks=False):
        rel_dir = Path(dirpath).relative_to(source)
        for name in sorted(names):
            src = Path(dirpath) / name
            dst = dest / rel_dir / name
            if src.is_symlink():
                target = os.readlink(src)
                resolved = (src.parent / target).resolve()
                if resolved.is_relative_to(root) and not os.path.isabs(target):
                    links.append((dst, target))
                    continue
                if not resolved.is_file():
                    continue  # a dangling or special link: nothing to load
            files.append((src, dst))
    return files, links


def _copy(pair: tuple[Path, Path]) -> int:
    src, dst = pair
    st = src.stat()
    if dst.exists():
        d = dst.stat()
        if d.st_size == st.st_size and int(d.st_mtime) == int(st.st_mtime):
            return 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.part")
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, _BUFFER)
    os.utime(tmp, (st.st_atime, st.st_mtime))
    os.replace(tmp, dst)
    return st.st_size


def flash_load(source: Path, dest: Path, concurrency: int) -> tuple[int, int]:
    """Copy ``source`` into ``dest`` with ``concurrency`` parallel files.

    Returns:
        ``(files, bytes)`` copied (files already up to date count 0 bytes).

    Raises:
        FileNotFoundError: ``source`` is not a directory.
        OSError: a copy failed (for example the ``emptyDir`` size limit was hit).
    """
    dest.mkdir(parents=True, exist_ok=True)
    (dest / DONE_FILE).unlink(missing_ok=True)
    if not source.is_dir():
        raise FileNotFoundError(f"source {source} is not a directory")
    files, links = _plan(source, dest)
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        copied = sum(pool.map(_copy, files))
    for dst, target in links:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        os.symlink(target, dst)
    (dest / DONE_FILE).write_text(f"{len(files)} files\n")
    return len(files), copied


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m jobs.flashload", description=__doc__)
    p.add_argument("--source", required=True, type=Path)
    p.add_argument("--dest", required=True, type=Path)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args(argv)
    if args.concurrency < 1:
        print("flashload: --concurrency must be at least 1", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        n, size = flash_load(args.source, args.dest, args.concurrency)
    except OSError as e:
        print(f"flashload: {e}", file=sys.stderr)
        return 1
    secs = time.monotonic() - started
    print(f"flashload: {n} files, {size / 2**30:.2f} GiB copied in {secs:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
