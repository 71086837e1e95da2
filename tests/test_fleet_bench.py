"""The fleet benchmark (``python -m benchmarks.fleet``) at N=20, through the real engine.

Skips like the end-to-end suite when Crossplane's binaries are missing. Checks that the
proxy saw every call and that the counts are what Crossplane's loop and the fleet imply,
not the timings.
"""

from __future__ import annotations

import pytest

from benchmarks import fleet
from tests.support import crossplane

N = 20
DEPLOYMENTS = 5
PER = 2


@pytest.fixture(scope="module")
def report() -> dict:
    crossplane.require()
    return fleet.run([N], DEPLOYMENTS, PER, (2, 4), timeout=120)


def _rows(report: dict, scenario: str) -> dict[str, dict]:
    return {r["step"]: r for r in report["rows"] if r["scenario"] == scenario}


def test_modelcache_from_nothing_to_ready_and_steady(report: dict):
    rows = _rows(report, "ModelCache")
    assert list(rows) == ["create", "pending", "ready", "steady"]
    shards = rows["create"]["composed"]
    assert 1 <= shards <= min(N, 64)
    for step, r in rows.items():
        assert r["exit_code"] == 0, r["render_error"]
        # Its requirement depends on the spec (the selector's matchLabels) and nothing
        # is seeded in render: an unresolved call, then a resolved one.
        assert (r["calls"], r["unresolved_calls"]) == (2, 1), step
        assert r["grpc_errors"] == [] and r["fatal"] is None
        # The resolved call carries the N clusters (no ModelReplica: the shards read those).
        assert r["required_objects"] == N
        assert 0 < r["required_bytes"] < r["largest_request_bytes"]
        assert r["composed"] == shards  # one ModelCacheShard per shard, not per cluster
        assert not r["over_2mib"] and not r["over_4mib"]
        sizes = [c["response_bytes"] for c in r["per_call"]]
        assert r["largest_response_bytes"] == max(sizes)
    assert not rows["create"]["xr_ready"] and not rows["pending"]["xr_ready"]
    assert rows["ready"]["xr_ready"] and rows["steady"]["xr_ready"]
    # The unresolved call echoes the observed shards.
    assert rows["create"]["per_call"][0]["desired_resources"] == 0
    assert rows["steady"]["per_call"][0]["desired_resources"] == shards


def test_modelcacheshards_take_one_call_and_hold_every_hydration(report: dict):
    rows = _rows(report, "ModelCacheShard")
    assert list(rows) == ["create", "pending", "ready", "steady"]
    for step, r in rows.items():
        assert r["exit_code"] == 0, r["render_error"]
        assert r["renders"] == _rows(report, "ModelCache")["create"]["composed"]
        # A steady shard requires nothing: every shard reconcile is one call.
        assert (r["calls"], r["unresolved_calls"]) == (1, 0), step
        assert r["calls_total"] == r["renders"]
        assert r["required_objects"] == 0
        assert r["composed"] == N, step  # every cluster's hydration, across the shards
        assert not r["over_2mib"]
    assert rows["pending"]["ready_shards"] == 0
    assert rows["ready"]["ready_shards"] == rows["ready"]["renders"]


def test_modeldeployment_reads_capacity_only_where_placement_looks(report: dict):
    rows = _rows(report, "ModelDeployment")
    assert list(rows) == ["create", "scale-up", "settle", "steady"]
    others = DEPLOYMENTS * PER
    lists = ["cache", "clusters", "hydrations"]
    for step, r in rows.items():
        assert r["exit_code"] == 0, r["render_error"]
        assert r["unresolved_calls"] == 1, step
        for call in r["per_call"][1:]:
            names = call["required_names"]
            assert names[:3] == lists, step
            # Never every ModelReplica of the fleet: only those on the clusters read.
            assert "replicas" not in names, step
            assert all(n.startswith("replicas-on-") for n in names[3:]), step
        assert r["fleet_replicas"] >= others
    # Create: nothing known up front, so one expansion for the clusters the walk tries.
    assert rows["create"]["calls"] == 3
    assert len(rows["create"]["per_call"][2]["required_names"]) == 3 + 2
    # Scale-up 2 -> 4: status.nextClusters named them up front, so one resolved call.
    assert rows["scale-up"]["calls"] == 2
    assert len(rows["scale-up"]["per_call"][1]["required_names"]) == 3 + 4
    # Settled: nothing to place or remove, no capacity read at all.
    for step in ("settle", "steady"):
        assert rows[step]["calls"] == 2
        assert rows[step]["required_objects"] == N + 1 + N
    assert rows["create"]["composed"] == 2 + 1  # replicas and the cache Usage
    assert rows["scale-up"]["composed"] == 4 + 1
    assert rows["steady"]["xr_ready"]
    assert "| fleet ModelReplicas |" in fleet.deployment_markdown(report)


def test_markdown_table(report: dict):
    text = fleet.markdown(report)
    assert "core v2.4.0" in text
    rows = [ln for ln in text.splitlines() if ln.startswith(f"| {N} | Model")]
    assert len(rows) == len(report["rows"]) == 12
