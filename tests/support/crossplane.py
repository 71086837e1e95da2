"""Crossplane's own binaries and CRD schemas, built from pinned Go modules.

``scripts/crossplane-tools`` builds the Crossplane CLI and core binary and collects the
CRD schemas (Crossplane's, provider-kubernetes' ``kubernetes.m.crossplane.io``, the
LeaderWorkerSet) from the Go module cache, and builds ``scripts/policy-check`` (which
management-policy sets provider-kubernetes' reconciler accepts), once per pinned
version, into a cache directory outside the repository (``$MODELPLANE_TOOLS_CACHE``, else
``~/.cache/function-modelplane``). Nothing is read from outside the repository but that
cache, which the script fills from the Go module proxy.

:func:`tools` returns the paths, building them the first time when ``go`` is installed
(a few minutes; a file lock serialises concurrent test processes). Where neither the
cache nor ``go`` exists, tests that need them skip with :data:`HOW_TO_GET`.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "crossplane-tools"
HOW_TO_GET = (
    "needs Crossplane's binaries and CRD schemas: install Go 1.26+ and run "
    "scripts/crossplane-tools (the tests then build them once by themselves)"
)


@dataclass(frozen=True)
class Tools:
    """Paths to the pinned Crossplane tools.

    Attributes:
        cli: the ``crossplane`` CLI (``crossplane render``, ``crossplane xpkg build``).
        core: the core binary whose ``internal render`` runs Crossplane's composite
            reconciler against an in-memory client (``--crossplane-binary``).
        schemas: a directory with ``crossplane/``, ``provider-kubernetes/`` and ``lws/``
            holding the CRDs of those projects at the pinned versions.
        policy_check: ``scripts/policy-check`` built against the crossplane-runtime
            the pinned provider-kubernetes requires: a JSON array of
            ``spec.managementPolicies`` sets on stdin, the resolver's verdict for each
            ("" accepted, else its error) on stdout; with ``missing`` or ``deleting``,
            what one reconcile of the runtime's managed reconciler does for each (see
            its source).
        ssa_check: ``scripts/ssa-check`` built against the k8s.io/apimachinery the
            pinned core requires: the API server's field manager replaying Crossplane's
            forced apply of a composed resource, an ``Update`` of one field by another
            manager, and the next apply (JSON in and out, see its source).
    """

    cli: Path
    core: Path
    schemas: Path
    policy_check: Path
    ssa_check: Path


def _parse(out: str) -> Tools:
    values: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = shlex.split(value)[0] if value else ""
    return Tools(
        Path(values["CROSSPLANE_CLI"]),
        Path(values["CROSSPLANE_CORE"]),
        Path(values["CROSSPLANE_SCHEMAS"]),
        Path(values["POLICY_CHECK"]),
        Path(values["SSA_CHECK"]),
    )


def cache_dir() -> Path:
    """The tools cache: ``MODELPLANE_TOOLS_CACHE``, else
    ``$XDG_CACHE_HOME/function-modelplane`` (``~/.cache`` without XDG), as
    ``scripts/crossplane-tools`` resolves it."""
    base = os.environ.get("MODELPLANE_TOOLS_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "function-modelplane"


@functools.lru_cache(maxsize=1)
def find() -> Tools | None:
    """The tools if they are built or can be built here; None otherwise.

    Builds them (``scripts/crossplane-tools``) when they are missing and ``go`` is on
    PATH. Raises ``RuntimeError`` when a build with Go installed fails: that is a
    defect to see, not a reason to skip.
    """
    check = subprocess.run([str(SCRIPT), "--check"], capture_output=True, text=True)
    if check.returncode == 0:
        return _parse(check.stdout)
    if shutil.which("go") is None:
        return None
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = subprocess.run([str(SCRIPT)], capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"scripts/crossplane-tools failed:\n{built.stderr[-4000:]}")
    return _parse(built.stdout)


def require() -> Tools:
    """The tools, or skip the calling test with one line saying how to get them.

    With ``MODELPLANE_REQUIRE_E2E=1`` (``.ci/run`` sets it) a missing tool fails the test
    instead: CI must run everything through the real engine.
    """
    found = find()
    if found is None:
        if os.environ.get("MODELPLANE_REQUIRE_E2E") == "1":
            pytest.fail(HOW_TO_GET)
        pytest.skip(HOW_TO_GET)
    return found
