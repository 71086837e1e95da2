"""Fixtures for the end-to-end suite: Crossplane's own reconciler calls the function.

``xp`` is the pinned Crossplane CLI and core binary (built once by
``scripts/crossplane-tools`` where Go is installed; otherwise every test here skips with
one line saying how to get them). ``fn`` is ``python -m function --insecure`` serving on
a free port on 127.0.0.1 for the whole session, and ``render`` renders an XR through
``crossplane render --crossplane-binary`` against it (see :mod:`tests.support.engine`).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from function.render import start_function
from tests.support import crossplane, engine, golden

# Set to a directory (tests/golden) to record every call Crossplane makes as a golden case.
RECORD = os.environ.get("MODELPLANE_RECORD_GOLDEN", "")


@pytest.fixture(scope="session")
def xp() -> crossplane.Tools:
    """The pinned Crossplane tools (skips the test when they cannot be had here)."""
    return crossplane.require()


@pytest.fixture(scope="session")
def fn(xp: crossplane.Tools) -> Iterator[str]:
    """``host:port`` of the function, started once for the session on 127.0.0.1."""
    proc, address = start_function()
    proxy = None
    if RECORD:
        from benchmarks.fleet import Proxy

        proxy = Proxy(address)
        _RECORDING["proxy"] = proxy
        _RECORDING["recorder"] = golden.Recorder(Path(RECORD))
    try:
        yield proxy.address if proxy else address
    finally:
        if proxy:
            proxy.stop()
        proc.terminate()
        proc.wait(timeout=30)


_RECORDING: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _record_golden(request: pytest.FixtureRequest) -> Iterator[None]:
    """With MODELPLANE_RECORD_GOLDEN set, store the test's calls as golden cases."""
    yield
    proxy = _RECORDING.get("proxy")
    if proxy is None:
        return
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    calls = [(c.request, now) for c in proxy.take() if c.method.endswith("/RunFunction")]
    _RECORDING["recorder"].add(request.node.name, calls)


@pytest.fixture
def render(xp: crossplane.Tools, fn: str) -> Callable[..., engine.Rendered]:
    """``render(xr, observed=..., required=..., ...)`` through the real engine."""

    def _render(xr: dict[str, Any], **kw: Any) -> engine.Rendered:
        return engine.render(xp, fn, xr, **kw)

    return _render
