"""The gRPC fuzz (``benchmarks.fuzz``) sends the same cases every run: from the same
bases and seed, two processes (each with its own protobuf map order and string hashing)
build byte-identical requests. Before, the paths it chose among followed the order in
which protobuf returned a Struct's map, which changes from process to process, so the
same seed gave different cases and a different count of fatal results in each run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent

_BUILD = """
import hashlib, random, sys
from pathlib import Path
from benchmarks.fuzz import case
bases = [Path(p).read_bytes() for p in sys.argv[1:]]
rng = random.Random(14)
digest = hashlib.sha256()
for _ in range(400):
    data, observed = case(rng, bases)
    digest.update(data)
    digest.update(repr(sorted(observed)).encode())
print(digest.hexdigest())
"""


def test_same_cases_in_every_process(tmp_path):
    files = []
    for kind in ("ModelCache", "ModelDeployment", "ModelReplica"):
        for i, data in enumerate(SCENARIOS[kind](10)):
            f = tmp_path / f"{kind}-{i}.bin"
            f.write_bytes(data)
            files.append(str(f))
    digests = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _BUILD, *files],
            cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=300,
        )  # fmt: skip
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests
