"""ModelDeployment capacity read per cluster (function.composers.deployment.capacity).

Driven through Crossplane's requirements loop in-process (``function.render.drive``,
the loop of ``internal/xfn/required_resources.go``): on random fleets the per-cluster
reads end in the same placement as reading every ModelReplica of the fleet, within the
calls the module documents, and never place on a cluster whose replicas were not read.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import API_VERSION
from tests.support import harness as h
from tests.test_deployment import cache, deployment, hydration, ic, observe, other_replica, placed


def _fleet_wide(xr: dict[str, Any], w: h.World, observed: dict[str, Any] | None) -> Any:
    """The placement with every ModelReplica of the fleet read (the fallback's view)."""
    first = h.run(h.request(xr, observed=observed))
    required = {
        n: w.resolve(s)
        for n, s in first.requirements.resources.items()
        if not n.startswith("replicas-on-")
    }
    every = fnv1.ResourceSelector(api_version=API_VERSION, kind="ModelReplica")
    every.match_labels.SetInParent()
    required["replicas"] = w.resolve(every)
    rsp = h.run(h.request(xr, observed=observed, required=required))
    return rsp


def as_written(rsp: Any) -> dict[str, Any]:
    """The XR status as Crossplane writes it from a response: the desired status and the
    conditions the function returned."""
    conds = [{"type": t, **c} for t, c in h.conditions(rsp).items()]
    return {**h.status(rsp), "conditions": conds}


def _world(rng: random.Random) -> tuple[list[dict[str, Any]], list[str]]:
    names = [f"gpu-{i:02d}" for i in range(rng.randint(3, 24))]
    base: list[dict[str, Any]] = [cache()]
    for n in names:
        base.append(ic(n, nodes=rng.randint(1, 4)))
        if rng.random() < 0.9:
            base.append(hydration(n, "Ready" if rng.random() < 0.8 else "Hydrating"))
    for i in range(rng.randint(0, 3 * len(names))):
        r = other_replica(rng.choice(names), rng.randint(1, 2), namespace=f"team-{i % 5}")
        r["metadata"]["name"] += f"-{i}"
        base.append(r)
    return base, names


@pytest.mark.parametrize("seed", range(40))
def test_per_cluster_reads_place_as_the_fleet_wide_read_within_four_calls(seed: int) -> None:
    rng = random.Random(seed)
    base, _ = _world(rng)
    w = h.World(base)
    xr = deployment(rng.randint(1, 6))
    observed: dict[str, Any] | None = None
    for _reconcile in range(3):
        rsp, calls = h.drive(h.run, xr, observed, w)
        assert calls <= 4, calls
        assert not h.fatal(rsp)
        want = _fleet_wide(xr, w, observed)
        assert placed(rsp) == placed(want)
        assert h.conditions(rsp)["ReplicasScheduled"] == h.conditions(want)["ReplicasScheduled"]
        observed = observe(rsp)
        xr["status"] = as_written(rsp)
        xr["spec"]["replicas"] = rng.randint(0, 8)


def test_a_scale_up_within_next_clusters_is_two_calls_and_reads_no_other_cluster() -> None:
    base = [cache()]
    for i in range(12):
        base += [ic(f"gpu-{i:02d}"), hydration(f"gpu-{i:02d}", "Ready")]
    base += [other_replica(f"gpu-{i:02d}") for i in range(12)]
    w = h.World(base)
    xr = deployment(2)
    first, calls = h.drive(h.run, xr, None, w)
    assert calls == 3  # nothing known up front on a first reconcile: one expansion
    assert h.status(first)["nextClusters"] == ["gpu-02", "gpu-03", "gpu-04", "gpu-05"]
    xr["status"] = h.status(first)
    xr["spec"]["replicas"] = 6
    rsp, calls = h.drive(h.run, xr, observe(first), w)
    assert calls == 2
    assert placed(rsp) == [(i, f"gpu-{i:02d}") for i in range(6)]
    asked = sorted(n for n in rsp.requirements.resources if n.startswith("replicas-on-"))
    assert asked == [f"replicas-on-gpu-{i:02d}" for i in range(2, 6)]
    assert "replicas" not in rsp.requirements.resources


def test_a_full_fleet_falls_back_to_the_fleet_wide_list_and_still_converges() -> None:
    # Every cluster the first walk tries is full: a second expansion would follow, so the
    # deployment asks for every ModelReplica once, and the loop ends within 4 calls.
    base = [cache()]
    for i in range(10):
        base += [ic(f"gpu-{i:02d}", nodes=1), hydration(f"gpu-{i:02d}", "Ready")]
    base += [other_replica(f"gpu-{i:02d}") for i in range(8)]
    w = h.World(base)
    rsp, calls = h.drive(h.run, deployment(2), None, w)
    assert calls == 4
    assert "replicas" in rsp.requirements.resources
    assert placed(rsp) == [(0, "gpu-08"), (1, "gpu-09")]
    assert h.conditions(rsp)["ReplicasScheduled"]["status"] == "True"


def test_a_replica_of_another_cluster_under_a_colliding_label_is_not_counted() -> None:
    long_a = "gpu-" + "a" * 70
    base = [cache(), ic(long_a, nodes=1), hydration(long_a, "Ready")]
    stray = other_replica("gpu-elsewhere")
    # Labelled as if it ran on long_a (a shortened label value two names share).
    from function.naming import label_value

    stray["metadata"]["labels"]["modelplane.ai/cluster"] = label_value(long_a)
    rsp, _ = h.drive(h.run, deployment(1), None, h.World([*base, stray]))
    assert placed(rsp) == [(0, long_a)]
