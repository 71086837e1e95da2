"""A tenant XR that multiplies a template past Crossplane's 4 MiB response is refused
before the copies are built (review 16b F1): the fatal result names the fields, the
estimate and the limit, and the call's memory stays near one copy."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from tests.support import harness as h
from tests.test_deployment import deployment, engine, ic, observe


def _drive_traced(xr: dict[str, Any], world: h.World) -> tuple[Any, int]:
    """One reconcile of ``xr`` (its requirements loop) and the peak of memory traced
    meanwhile, bytes."""
    tracemalloc.start()
    try:
        rsp, _ = h.drive(h.run, xr, None, world)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return rsp, peak


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
    rsp, peak = _drive_traced(xr, h.World([ic(f"gpu-{i:03d}", nodes=8) for i in range(clusters)]))
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


def _deep_list_deployment(depth: int, items: int) -> dict[str, Any]:
    """One replica whose container ``resources`` (preserve-unknown-fields in the XRD)
    holds ``items`` zeros under ``depth`` maps of 200-character keys: about 1.4 MB of
    JSON for 21 x 700,000, under etcd's request limit, and over 4 MiB as protobuf."""
    e = engine()
    node: Any = [0] * items
    for d in range(depth):
        node = {f"k{d:02d}" + "x" * 200: node}
    e["members"][0]["template"]["spec"]["containers"][0]["resources"] = {"x": node}
    return deployment(1, cache_name=None, engines=[e])


def test_a_refusal_names_the_heaviest_part_without_a_path_per_item() -> None:
    """Review 16f F0: the refusal named the template's longest string, built with a path
    string per list item: a 1.4 MB XR of zeros under long keys took the call to 1.4 GB.
    It now steps into the part that holds most of the bytes (no path per node), and a
    single copy over the limit says so (F4: it said "at most 1 such copies fit")."""
    rsp, peak = _drive_traced(_deep_list_deployment(21, 700_000), h.World([ic("gpu-a", nodes=8)]))
    (msg,) = h.fatal(rsp)
    assert "one copy alone is over the limit" in msg, msg
    assert "copies fit" not in msg and "ConfigMap" not in msg, msg
    heaviest = "spec.template.spec.engines[0].members[0].template.spec.containers[0].resources.x"
    assert heaviest + ".k20" in msg and ".k19" not in msg, msg  # 12 steps at most
    assert len(msg) < 2048, len(msg)
    assert peak < 400 * 1048576, f"traced peak {peak / 1048576:.0f} MiB"


@pytest.mark.parametrize(
    ("replicas", "kib", "says", "not_says"),
    [
        # steady state over the limit: lowering spec.replicas helps, to at most N
        (12, 400, "lower spec.replicas to at most 10", "replacements"),
        # fits in steady state; 8 more replacements while gpu-a fails over (review 16f F1:
        # it said "lower spec.replicas (at most 10 such copies fit)" of a spec of 8)
        (8, 400, "and 8 replacements of replicas moving make-before-break", "to at most"),
    ],
)
def test_the_advice_fits_the_cause(replicas: int, kib: int, says: str, not_says: str) -> None:
    xr = _big_deployment(replicas, kib)
    before = h.World([ic("gpu-a", nodes=16)])
    rsp, _ = h.drive(h.run, xr, None, before)
    if h.fatal(rsp):
        msg = h.fatal(rsp)[0]
    else:
        obs = observe(rsp, {i: ("True", "Serving", "ok") for i in range(replicas)})
        after = h.World([ic("gpu-a", nodes=16, ready=False), ic("gpu-b", nodes=16)])
        rsp, _ = h.drive(h.run, xr, obs, after)
        (msg,) = h.fatal(rsp)
    assert says in msg and not_says not in msg, msg
    assert "containers[0].env[0].value" in msg and "ConfigMap" in msg, msg
