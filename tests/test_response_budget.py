"""A tenant XR that multiplies a template past Crossplane's 4 MiB response is refused
before the copies are built (review 16b F1): the fatal result names the fields, the
estimate and the limit, and the call's memory stays near one copy."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from tests.support import harness as h
from tests.test_deployment import deployment, engine, ic


def _big_deployment(replicas: int, value_kib: int) -> dict[str, Any]:
    e = engine()
    container = e["members"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "BLOB", "value": "x" * (value_kib * 1024)}]
    return deployment(replicas, cache_name=None, engines=[e])


@pytest.mark.parametrize(
    ("replicas", "value_kib", "clusters", "refused"),
    [
        # 200 placed x 64 KiB: about 12.5 MiB.
        (200, 64, 25, True),
        # 20 placed x 64 KiB: 1.3 MiB, composed.
        (20, 64, 25, False),
        # spec.replicas 1000, but one cluster of 8 nodes places 8: 8 x 64 KiB composed.
        (1000, 64, 1, False),
        # 80 placed (10 clusters of 8 nodes) x 1 MiB: refused although 920 are not placed.
        (1000, 1024, 10, True),
    ],
)
def test_deployment_refuses_replicas_times_template_before_building(
    replicas: int, value_kib: int, clusters: int, refused: bool
) -> None:
    xr = _big_deployment(replicas, value_kib)
    w = h.World([ic(f"gpu-{i:03d}", nodes=8) for i in range(clusters)])
    tracemalloc.start()
    try:
        rsp, _ = h.drive(h.run, xr, None, w)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    fatal = h.fatal(rsp)
    replicas_out = [v for v in h.desired(rsp).values() if v.get("kind") == "ModelReplica"]
    if not refused:
        assert not fatal, fatal
        assert replicas_out
        return
    assert len(fatal) == 1 and not replicas_out, fatal
    msg = fatal[0]
    for words in (
        "spec.replicas",
        "spec.template",
        "spec.template.spec.engines[0].members[0].template.spec.containers[0].env[0].value",
        "4 MiB",
        "ConfigMap",
    ):
        assert words in msg, (words, msg)
    assert "selector" not in msg, msg
    assert len(msg) < 1024, msg
    # Nothing built but one copy of the template: at most a few copies of it traced,
    # not one per replica.
    assert peak < 8 * value_kib * 1024 + 4 * 1024 * 1024, f"peak {peak / 1048576:.1f} MiB"
