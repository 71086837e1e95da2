"""ModelCacheShard: the spec the ModelCache writes is checked, never trusted blindly."""

from __future__ import annotations

import copy

import pytest

from function.naming import cache_shard
from tests.support.cache_tree import shard_clusters, shard_request
from tests.support.harness import desired, fatal, request, requirements, run, status


def _spec(req):
    from google.protobuf import json_format

    return json_format.MessageToDict(req.observed.composite.resource)


def _with_spec(**over):
    xr = _spec(shard_request(3))
    xr["spec"].update(over)
    return request(xr)


def test_a_cluster_of_another_shard_is_fatal_naming_the_field():
    other = next(f"gpu-{i}" for i in range(100) if cache_shard(f"gpu-{i}") != 0)
    names = shard_clusters(2)
    rsp = run(_with_spec(clusters=[{"name": names[0]}, {"name": other}]))
    (msg,) = fatal(rsp)
    assert "spec.clusters[1].name" in msg and "not 0" in msg, msg
    assert not rsp.desired.resources


def test_a_cluster_listed_twice_is_fatal():
    (name,) = shard_clusters(1)
    (msg,) = fatal(run(_with_spec(clusters=[{"name": name}, {"name": name}])))
    assert "spec.clusters[1].name" in msg and "twice" in msg


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"shard": 64}, "spec.shard"),
        ({"shard": 1.5}, "spec.shard"),
        ({"cacheName": ""}, "spec.cacheName"),
    ],
)
def test_malformed_spec_is_fatal_naming_the_field(over, field):
    (msg,) = fatal(run(_with_spec(**over)))
    assert field in msg, msg


def test_one_hydration_per_cluster_and_a_status_for_the_cache():
    rsp = run(shard_request(5))
    assert sorted(b["spec"]["clusterName"] for b in desired(rsp).values()) == shard_clusters(5)
    st = status(rsp)
    assert st["summary"]["total"] == 5 and st["summary"]["hydrations"] == 5
    assert st["summary"]["phases"]["Pending"] == 5
    assert len(st["waiting"]) == 5 and st["specHash"]
    assert requirements(rsp) == {}


def test_unavailable_cluster_gets_no_new_hydration():
    xr = _spec(shard_request(2))
    xr["spec"]["clusters"][1]["unavailable"] = "cluster is not Ready"
    rsp = run(request(xr))
    assert [b["spec"]["clusterName"] for b in desired(rsp).values()] == shard_clusters(2)[:1]
    st = status(rsp)
    assert st["unavailable"][0]["name"] == shard_clusters(2)[1]
    # An existing hydration there is kept.
    obs = {
        f"hydration-{b['spec']['clusterName']}": copy.deepcopy(b)
        for b in desired(run(shard_request(2))).values()
    }
    rsp = run(request(xr, observed=obs))
    assert sorted(b["spec"]["clusterName"] for b in desired(rsp).values()) == shard_clusters(2)


GONE_ROWS = [
    # (case, found by name: None = not looked up yet, True = still there, False = gone,
    #  whether the Deleting row stays)
    ("unresolved-is-not-known", None, True),
    ("still-there-being-deleted", True, True),
    ("gone", False, False),
]


@pytest.mark.parametrize(("case", "found", "kept"), GONE_ROWS, ids=[r[0] for r in GONE_ROWS])
def test_a_deleting_row_lasts_until_the_hydration_is_seen_gone(case, found, kept):
    """A cluster that left the shard, whose hydration the previous call stopped desiring
    (row ``Deleting``) and which Crossplane no longer shows as observed: the row stays
    while the hydration is found by name or not looked up yet, and goes once it is not
    found; it is never desired again on this account."""
    from function.naming import hydration_name

    names = shard_clusters(3)
    xr = _spec(shard_request(3))
    xr["spec"]["clusters"] = [{"name": n} for n in names[:2]]
    first = run(request(xr))
    xr["status"] = status(first)
    xr["status"]["clusters"].append(
        {"name": names[2], "phase": "Deleting", "message": "being deleted"}
    )
    body = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCacheHydration",
        "metadata": {
            "name": hydration_name(xr["metadata"]["namespace"], "c", names[2]),
            "namespace": xr["metadata"]["namespace"],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
    }
    required = {} if found is None else {f"gone-{names[2]}": [body] if found else []}
    rsp = run(request(xr, required=required))
    (req,) = [v for k, v in requirements(rsp).items() if k == f"gone-{names[2]}"]
    assert req["matchName"] == body["metadata"]["name"], req
    rows = {r["name"]: r for r in status(rsp)["clusters"]}
    assert (names[2] in rows) is kept, (case, rows)
    assert status(rsp)["summary"]["deleting"] == int(kept), case
    assert names[2] not in {b["spec"]["clusterName"] for b in desired(rsp).values()}
    if kept:
        assert rows[names[2]]["phase"] == "Deleting"
        # A fixed point: the same world gives the same status.
        xr["status"] = status(rsp)
        assert status(run(request(xr, required=required))) == status(rsp), case
