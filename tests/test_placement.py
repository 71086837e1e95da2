"""Placement as a pure function: tables of (fleet, deployment) -> where replicas run.

Also the pieces it rests on: DRA-style CEL device selectors (function.scheduling.devices)
and Kubernetes taint/toleration matching (function.scheduling.tolerations).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from function.api.modeldeployment import (
    CACHE_NOT_FOUND,
    INSUFFICIENT_CAPACITY,
    NO_CLUSTER_IN_FOOTPRINT,
    NO_MATCHING_CLUSTERS,
    WAITING_FOR_CACHE,
)
from function.scheduling.devices import (
    Device,
    DeviceRequest,
    InvalidSelector,
    SelectorEvaluationError,
    Semver,
    compile_selector,
    parse_quantity,
    selector_matches,
)
from function.scheduling.placement import (
    Cluster,
    Engine,
    Existing,
    Member,
    Pool,
    Request,
    place,
)
from function.scheduling.selectors import LabelSelector
from function.scheduling.tolerations import (
    Taint,
    Toleration,
    parse_taints,
    parse_tolerations,
    untolerated,
)

assert CACHE_NOT_FOUND  # the composer, not placement, decides CacheNotFound

H100 = Device.from_status(
    {
        "name": "gpu",
        "driver": "gpu.nvidia.com",
        "count": 8,
        "attributes": {
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "nvlink": {"bool": True},
            "sm": {"int": 132},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
)
L4 = Device.from_status(
    {
        "name": "gpu",
        "driver": "gpu.nvidia.com",
        "count": 1,
        "attributes": {"architecture": {"string": "Ada Lovelace"}},
        "capacity": {"memory": {"value": "23034Mi"}},
    }
)
IB = Device.from_status({"name": "ib", "driver": "fabric.modelplane.ai", "claim": "Synthetic"})

MEM_40 = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
MEM_20 = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'


def gpu(count: int = 1, *sels: str) -> DeviceRequest:
    return DeviceRequest("gpu", count, tuple(sels) or (MEM_20,))


def standalone(count: int = 1, *sels: str, copies: int = 1, name: str = "vllm") -> Engine:
    return Engine(name, copies, (Member("Standalone", 1, (gpu(count, *sels),)),))


def gang(workers: int = 1, count: int = 8, name: str = "vllm") -> Engine:
    return Engine(
        name,
        1,
        (Member("Leader", 1, (gpu(count),)), Member("Worker", workers, (gpu(count),))),
    )


def cluster(name: str, nodes: int = 4, dev: Device = H100, **kw: object) -> Cluster:
    labels = kw.pop("labels", {"gpu": "h100"})
    pools = kw.pop("pools", (Pool("h100", nodes, (dev,)),))
    return Cluster(name, labels, pools=pools, **kw)  # type: ignore[arg-type]


ALL = LabelSelector.parse({}, "s")


def req(**kw: object) -> Request:
    base: dict[str, object] = {"replicas": 1, "engines": (standalone(),), "selector": ALL}
    base.update(kw)
    return Request(**base)  # type: ignore[arg-type]


def where(p) -> list[tuple[int, str]]:
    return [(r.index, r.cluster) for r in p.replicas]


# ---- devices -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80Gi", Decimal(80 * 2**30)),
        ("23034Mi", Decimal(23034 * 2**20)),
        ("500m", Decimal("0.5")),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
        ("1.5G", Decimal(1_500_000_000)),
        ("2", Decimal(2)),
    ],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1GB", "1.2.3", "abc"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("expr", "device", "want"),
    [
        (MEM_40, H100, True),
        (MEM_40, L4, False),
        (MEM_20, L4, True),  # 23034Mi > 20Gi
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("22Gi"))', L4, True),
        ('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("22Gi"))', L4, False),
        ('device.attributes["gpu.nvidia.com"].architecture == "Hopper"', H100, True),
        ('device.attributes["gpu.nvidia.com"].architecture == "Hopper"', L4, False),
        ('device.driver == "gpu.nvidia.com"', L4, True),
        ('device.attributes["gpu.nvidia.com"].nvlink', H100, True),
        ('device.attributes["gpu.nvidia.com"].sm >= 100', H100, True),
        (
            'device.attributes["gpu.nvidia.com"].cudaComputeCapability'
            '.isGreaterThan(semver("8.9.0"))',
            H100,
            True,
        ),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability.major() == 9', H100, True),
        # A device of another driver: the expression addresses only amd.com.
        ('device.capacity["amd.com"].memory.compareTo(quantity("1Gi")) >= 0', H100, False),
        # A guard that is false short-circuits what would fail.
        (
            'device.driver == "amd.com" && device.attributes["gpu.nvidia.com"].nvlink',
            H100,
            False,
        ),
    ],
)
def test_selector(expr: str, device: Device, want: bool) -> None:
    assert selector_matches(expr, device) is want


@pytest.mark.parametrize(
    ("expr", "device", "why"),
    [
        # Evaluation errors are errors (DRA aborts the allocation), never a non-match:
        # a missing attribute, another driver, a type error, a bad quantity, x/0.
        ('device.attributes["gpu.nvidia.com"].nvlink', L4, "nvlink"),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(1) >= 0', H100, ""),
        ('quantity("not-a-quantity").compareTo(quantity("1")) >= 0', H100, "not-a-quantity"),
        ("1 / 0 == 0", H100, "divide by zero"),
        # A non-boolean result is an error too.
        ("device.driver", H100, "not a boolean"),
    ],
)
def test_selector_failing_at_evaluation_is_an_error(expr: str, device: Device, why: str) -> None:
    with pytest.raises(SelectorEvaluationError) as e:
        selector_matches(expr, device)
    assert e.value.expression == expr and e.value.device == device
    assert why in str(e.value) and device.name in str(e.value)


@pytest.mark.parametrize("expr", ['device.capacity["gpu.nvidia.com"', "1 +", "", "a ++ b"])
def test_selector_that_does_not_compile_names_itself(expr: str) -> None:
    with pytest.raises(InvalidSelector) as e:
        compile_selector(expr)
    assert expr.strip() in str(e.value)
    assert "does not compile" in str(e.value)


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("foo(1)", "unknown function foo"),
        ('device.driver.lowerAscii() == "x"', "unknown function lowerAscii"),
        ("other.x == 1", "undeclared reference to other"),
        ('device.attributes["a"].exists(k, k == other)', "undeclared reference to other"),
    ],
)
def test_selector_checked_like_a_dra_compiler(expr: str, why: str) -> None:
    with pytest.raises(InvalidSelector, match=why):
        compile_selector(expr)


@pytest.mark.parametrize(
    "expr",
    [
        'device.attributes["gpu.nvidia.com"].all(k, k.startsWith("a"))',
        'has(device.attributes["gpu.nvidia.com"].nvlink)',
        'size(device.driver) > 0 && device.driver in ["gpu.nvidia.com"]',
    ],
)
def test_valid_selectors_compile(expr: str) -> None:
    compile_selector(expr)


def test_compiled_programs_are_cached_by_expression() -> None:
    assert compile_selector(MEM_20) is compile_selector(MEM_20)


def test_semver_order() -> None:
    assert Semver.parse("1.0.0-alpha").key() < Semver.parse("1.0.0").key()
    assert Semver.parse("1.0.0-alpha.1").key() < Semver.parse("1.0.0-alpha.beta").key()
    assert Semver.parse("1.10.0").key() > Semver.parse("1.9.0").key()


def test_device_request_count() -> None:
    assert DeviceRequest("gpu", 8, (MEM_20,)).satisfied_by(H100)
    assert not DeviceRequest("gpu", 9, (MEM_20,)).satisfied_by(H100)


# ---- taints ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tol", "taint", "want"),
    [
        (Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "Equal", "w", "NoSchedule"), Taint("k", "v", "NoSchedule"), False),
        (Toleration("k", "Exists", "", ""), Taint("k", "v", "NoExecute"), True),
        (Toleration("", "Exists", "", ""), Taint("any", "v", "NoSchedule"), True),
        (Toleration("k", "Equal", "v", "NoExecute"), Taint("k", "v", "NoSchedule"), False),
        (Toleration("other", "Exists", "", ""), Taint("k", "", "NoSchedule"), False),
    ],
)
def test_toleration(tol: Toleration, taint: Taint, want: bool) -> None:
    assert tol.tolerates(taint) is want


def test_parse_taints_and_tolerations() -> None:
    taints = parse_taints([{"key": "maint", "effect": "NoExecute"}, {"key": "x"}])
    assert taints == (Taint("maint", "", "NoExecute"),)
    tols = parse_tolerations([{"key": "maint", "operator": "Exists"}])
    assert untolerated(taints, tols, ("NoExecute",)) == []
    assert untolerated(taints, (), ("NoExecute",)) == [Taint("maint", "", "NoExecute")]


# ---- placement -------------------------------------------------------------------


def test_spread_before_pack_ties_by_name() -> None:
    p = place(req(replicas=3, clusters=(cluster("b"), cluster("a"))))
    # a then b (spread), then pack onto the fuller of the two (equal: by name).
    assert where(p) == [(0, "a"), (1, "b"), (2, "a")]
    assert p.reason is None


def test_pack_prefers_the_cluster_with_fewest_free_nodes() -> None:
    p = place(req(replicas=3, clusters=(cluster("a", nodes=8), cluster("b", nodes=3))))
    assert where(p) == [(0, "a"), (1, "b"), (2, "b")]


def test_capacity_counts_other_replicas_and_cost_is_pods_times_copies() -> None:
    eng = (standalone(copies=2),)  # 2 nodes per replica
    used = {("a", "h100"): 3}  # others use 3 of a's 4 nodes
    p = place(req(replicas=2, engines=eng, clusters=(cluster("a"), cluster("b")), used=used))
    assert where(p) == [(0, "b"), (1, "b")]
    p = place(req(replicas=3, engines=eng, clusters=(cluster("a"), cluster("b")), used=used))
    assert len(p.replicas) == 2
    assert p.reason == INSUFFICIENT_CAPACITY
    assert p.message.startswith("2 of 3 replicas placed")
    assert "a: engine vllm member 0 needs 2 node(s): h100 1/4 free" in p.message


def test_gang_needs_leader_plus_worker_nodes() -> None:
    # Leader (1 pod) + Worker with 2 nodes = 3 nodes of 8 H100s.
    eng = (gang(workers=2),)
    p = place(req(replicas=2, engines=eng, clusters=(cluster("a", nodes=3), cluster("b", nodes=2))))
    assert where(p) == [(0, "a")]
    assert p.reason == INSUFFICIENT_CAPACITY
    assert "b: engine vllm" in p.message


def test_devices_must_satisfy_every_selector_and_count() -> None:
    clusters = (cluster("l4", dev=L4, labels={}), cluster("h100"))
    p = place(req(replicas=2, engines=(standalone(1, MEM_40),), clusters=clusters))
    assert where(p) == [(0, "h100"), (1, "h100")]
    p = place(req(replicas=1, engines=(standalone(9),), clusters=clusters))
    assert p.replicas == []
    assert p.reason == INSUFFICIENT_CAPACITY
    assert "no pool's devices satisfy engine vllm member 0 (Standalone) request gpu" in p.message


def test_synthetic_only_pool_is_not_claimable() -> None:
    fabric = DeviceRequest("ib", 1, ('device.driver == "fabric.modelplane.ai"',))
    eng = (Engine("e", 1, (Member("Standalone", 1, (fabric,)),)),)
    c = cluster("a", pools=(Pool("p", 2, (IB, H100)),))
    p = place(req(engines=eng, clusters=(c,)))
    assert p.replicas == []
    assert "claimable" in p.message


def test_engine_prefers_one_pool_then_splits() -> None:
    small = Pool("a-small", 1, (H100,))
    big = Pool("b-big", 4, (H100,))
    c = cluster("a", pools=(small, big))
    # The whole gang (1 + 1 nodes) fits only on b-big: one pool for the engine.
    p = place(req(engines=(gang(workers=1),), clusters=(c,)))
    assert dict(p.replicas[0].pools) == {("vllm", 0): "b-big", ("vllm", 1): "b-big"}
    # 1 + 4 nodes fit no single pool: the Leader goes to a-small, the Workers to b-big.
    p = place(req(engines=(gang(workers=4),), clusters=(c,)))
    assert dict(p.replicas[0].pools) == {("vllm", 0): "a-small", ("vllm", 1): "b-big"}


def test_coordinator_leader_rides_on_its_engine_pool() -> None:
    eng = (Engine("e", 1, (Member("Leader", 1, ()), Member("Worker", 2, (gpu(8),)))),)
    p = place(req(engines=eng, clusters=(cluster("a", nodes=3),)))
    assert dict(p.replicas[0].pools) == {("e", 0): "h100", ("e", 1): "h100"}
    p = place(req(engines=eng, clusters=(cluster("a", nodes=2),)))
    assert p.replicas == []


def test_selector_full_semantics() -> None:
    sel = LabelSelector.parse(
        {
            "matchLabels": {"gpu": "h100"},
            "matchExpressions": [
                {"key": "region", "operator": "In", "values": ["us-east", "us-west"]},
                {"key": "tier", "operator": "NotIn", "values": ["dev"]},
            ],
        },
        "s",
    )
    clusters = (
        cluster("c1", labels={"gpu": "h100", "region": "us-east", "tier": "prod"}),
        cluster("c2", labels={"gpu": "h100", "region": "us-west"}),
        cluster("c3", labels={"gpu": "h100", "region": "us-east", "tier": "dev"}),
        cluster("c4", labels={"gpu": "a100", "region": "us-east"}),
    )
    p = place(req(replicas=4, selector=sel, clusters=clusters))
    assert {c for _, c in where(p)} == {"c1", "c2"}


def test_no_matching_clusters() -> None:
    sel = LabelSelector.parse({"matchLabels": {"gpu": "b200"}}, "s")
    p = place(req(selector=sel, clusters=(cluster("a"),)))
    assert (p.reason, p.replicas) == (NO_MATCHING_CLUSTERS, [])


def test_not_ready_and_tainted_clusters_get_no_new_replicas() -> None:
    clusters = (
        cluster("a", ready=False),
        cluster("b", taints=(Taint("maint", "", "NoSchedule"),)),
        cluster("c", taints=(Taint("spot", "true", "PreferNoSchedule"),)),
    )
    p = place(req(replicas=2, clusters=clusters))
    assert where(p) == [(0, "c"), (1, "c")]
    tol = (Toleration("maint", "Exists"),)
    p = place(req(replicas=2, clusters=clusters, tolerations=tol))
    assert where(p) == [(0, "b"), (1, "c")]
    p = place(req(replicas=3, clusters=clusters[:2]))
    assert p.reason == INSUFFICIENT_CAPACITY
    assert "a: not Ready" in p.message
    assert "b: taint maint:NoSchedule not tolerated" in p.message


def test_existing_replicas_stay_put() -> None:
    existing = (Existing(0, "b", {("vllm", 0): "h100"}), Existing(3, "b", {("vllm", 0): "h100"}))
    p = place(req(replicas=3, clusters=(cluster("a"), cluster("b")), existing=existing))
    # Both stay on b; the new one takes the lowest free index and goes to a (spread).
    assert where(p) == [(0, "b"), (1, "a"), (3, "b")]
    assert [r.existing for r in p.replicas] == [True, False, True]
    assert p.removed == []


def test_existing_replica_stays_when_others_filled_its_pool() -> None:
    existing = (Existing(0, "a", {("vllm", 0): "h100"}),)
    p = place(req(clusters=(cluster("a", nodes=1),), used={("a", "h100"): 1}, existing=existing))
    assert where(p) == [(0, "a")]


def test_no_schedule_taint_keeps_existing_no_execute_moves_it() -> None:
    existing = (Existing(0, "a", {("vllm", 0): "h100"}),)
    soft = cluster("a", taints=(Taint("maint", "", "NoSchedule"),))
    p = place(req(clusters=(soft, cluster("b")), existing=existing))
    assert where(p) == [(0, "a")]
    hard = cluster("a", taints=(Taint("maint", "", "NoExecute"),))
    p = place(req(clusters=(hard, cluster("b")), existing=existing))
    assert where(p) == [(1, "b")]
    assert [(r.index, r.cluster) for r in p.removed] == [(0, "a")]
    assert "taint maint:NoExecute not tolerated" in p.removed[0].why


def test_replica_leaves_a_cluster_that_no_longer_matches_or_is_gone() -> None:
    existing = (Existing(0, "a", {}), Existing(1, "gone", {}))
    sel = LabelSelector.parse({"matchLabels": {"gpu": "h100"}}, "s")
    clusters = (cluster("a", labels={"gpu": "a100"}), cluster("b"), cluster("c"))
    p = place(req(replicas=2, selector=sel, clusters=clusters, existing=existing))
    assert where(p) == [(2, "b"), (3, "c")]
    assert [r.index for r in p.removed] == [0, 1]


def test_not_ready_cluster_replica_moves_only_when_a_replacement_fits() -> None:
    existing = (Existing(0, "a", {("vllm", 0): "h100"}),)
    p = place(req(clusters=(cluster("a", ready=False), cluster("b")), existing=existing))
    assert where(p) == [(1, "b")]
    assert "moved (cluster is not Ready)" in p.removed[0].why
    p = place(req(clusters=(cluster("a", ready=False), cluster("b", nodes=0)), existing=existing))
    assert where(p) == [(0, "a")]
    assert p.removed == []


def test_scale_down_removes_most_loaded_first() -> None:
    existing = (
        Existing(0, "a", {("vllm", 0): "h100"}),
        Existing(1, "b", {("vllm", 0): "h100"}),
        Existing(2, "a", {("vllm", 0): "h100"}),
    )
    # b is the most loaded (others use 3 of its 4 nodes).
    p = place(
        req(
            replicas=2,
            clusters=(cluster("a"), cluster("b")),
            existing=existing,
            used={("b", "h100"): 3},
        )
    )
    assert where(p) == [(0, "a"), (2, "a")]
    assert [(r.index, r.why) for r in p.removed] == [(1, "scaled down")]
    # Equal load: the cluster with more of ours, then the highest index.
    p = place(req(replicas=2, clusters=(cluster("a"), cluster("b")), existing=existing))
    assert where(p) == [(0, "a"), (1, "b")]


def test_scale_to_zero() -> None:
    existing = (Existing(0, "a", {}),)
    p = place(req(replicas=0, clusters=(cluster("a"),), existing=existing))
    assert p.replicas == [] and p.reason is None


def test_deterministic() -> None:
    r = req(replicas=5, clusters=tuple(cluster(n) for n in "edcba"))
    assert where(place(r)) == where(place(r))


# ---- cache footprint -------------------------------------------------------------

FLEET = (cluster("gpu-a"), cluster("gpu-b"), cluster("gpu-c"))


def test_c5_only_inside_the_footprint_ready_first() -> None:
    fp = {"gpu-a": "Ready", "gpu-b": "Hydrating"}
    p = place(req(replicas=2, clusters=FLEET, footprint=fp, cache="qwen-cache"))
    assert where(p) == [(0, "gpu-a"), (1, "gpu-b")]
    assert [r.hydration for r in p.replicas] == ["Ready", "Hydrating"]
    # More replicas than spread: pack, never onto gpu-c.
    p = place(req(replicas=6, clusters=FLEET, footprint=fp, cache="qwen-cache"))
    assert {c for _, c in where(p)} == {"gpu-a", "gpu-b"}
    assert len(p.replicas) == 6


def test_ready_preferred_to_hydrating() -> None:
    fp = {"gpu-a": "Hydrating", "gpu-b": "Ready"}
    p = place(req(replicas=1, clusters=FLEET, footprint=fp, cache="c"))
    assert where(p) == [(0, "gpu-b")]


def test_c5_selector_and_footprint_do_not_intersect() -> None:
    sel = LabelSelector.parse({"matchLabels": {"region": "eu"}}, "s")
    clusters = (*FLEET, cluster("gpu-eu", labels={"region": "eu"}))
    fp = {"gpu-a": "Ready", "gpu-b": "Hydrating"}
    p = place(req(selector=sel, clusters=clusters, footprint=fp, cache="qwen-cache"))
    assert p.replicas == []
    assert p.reason == NO_CLUSTER_IN_FOOTPRINT
    assert "gpu-eu" in p.message and "gpu-a, gpu-b" in p.message


def test_cache_without_hydrations_waits() -> None:
    p = place(req(clusters=FLEET, footprint={}, cache="c"))
    assert (p.reason, p.replicas) == (WAITING_FOR_CACHE, [])


def test_c7_failed_hydration_is_outside_the_footprint_and_moves() -> None:
    fp = {"gpu-a": "Ready", "gpu-b": "Ready", "gpu-c": "Failed"}
    p = place(req(replicas=3, clusters=FLEET, footprint=fp, cache="c"))
    assert {c for _, c in where(p)} == {"gpu-a", "gpu-b"}
    existing = (Existing(0, "gpu-c", {("vllm", 0): "h100"}),)
    p = place(req(clusters=FLEET, footprint=fp, cache="c", existing=existing))
    assert where(p) == [(1, "gpu-a")]
    assert "moved (hydration of ModelCache c Failed)" in p.removed[0].why
    # Nowhere to go: the failed replica stays (and shows as failed).
    p = place(req(clusters=FLEET, footprint={"gpu-c": "Failed"}, cache="c", existing=existing))
    assert where(p) == [(0, "gpu-c")]
    assert p.replicas[0].hydration == "Failed"


def test_all_hydrations_failed_is_a_footprint_reason() -> None:
    p = place(req(clusters=FLEET, footprint={"gpu-a": "Failed"}, cache="c"))
    assert p.reason == NO_CLUSTER_IN_FOOTPRINT
    assert "hydration Failed on gpu-a" in p.message


def test_replicas_stay_while_the_cache_has_no_hydration_at_all() -> None:
    existing = (Existing(0, "gpu-a", {("vllm", 0): "h100"}),)
    p = place(req(clusters=FLEET, footprint={}, cache="c", existing=existing))
    assert where(p) == [(0, "gpu-a")]
    assert p.removed == []
    assert p.reason is None


def test_replica_outside_the_footprint_is_removed() -> None:
    existing = (Existing(0, "gpu-c", {}),)
    p = place(req(clusters=FLEET, footprint={"gpu-a": "Ready"}, cache="c", existing=existing))
    assert where(p) == [(1, "gpu-a")]
    assert "outside the footprint" in p.removed[0].why


# ---- fleet scale: what placement reads, and no quadratic step ---------------------------


class CountingFleet(dict):  # type: ignore[type-arg]
    """A ``Request.fleet`` that records which clusters placement reads."""

    def __init__(self, clusters: tuple[Cluster, ...]) -> None:
        super().__init__((c.name, c) for c in clusters)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> Cluster:
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        return self[name] if name in self else default


def test_steady_state_reads_only_the_clusters_replicas_run_on() -> None:
    fleet = CountingFleet(tuple(cluster(f"c{i:04d}") for i in range(1000)))
    existing = tuple(Existing(i, f"c{i * 7:04d}", {("vllm", 0): "h100"}) for i in range(100))
    p = place(req(replicas=100, fleet=fleet, existing=existing))
    assert [r.cluster for r in p.replicas] == [e.cluster for e in existing]
    assert p.reason is None
    assert fleet.read == {e.cluster for e in existing}


def test_first_call_reads_about_as_many_clusters_as_it_places() -> None:
    clusters = [cluster(f"c{i:04d}") for i in range(1000)]
    clusters[1] = cluster("c0001", ready=False)  # checked and skipped on the way
    fleet = CountingFleet(tuple(clusters))
    fp = {c.name: "Hydrating" if i % 10 == 9 else "Ready" for i, c in enumerate(clusters)}
    p = place(req(replicas=100, fleet=fleet, footprint=fp, cache="c"))
    assert len(p.replicas) == 100 and p.reason is None
    # Ready-cache clusters first, by name, skipping the one that is not Ready.
    assert where(p)[:3] == [(0, "c0000"), (1, "c0002"), (2, "c0003")]
    assert all(fp[c] == "Ready" for _, c in where(p))
    assert len(fleet.read) == 101


def test_fleet_mapping_and_cluster_tuple_place_alike() -> None:
    clusters = tuple(cluster(f"c{i}", nodes=1 + i % 3) for i in range(12))
    existing = (Existing(3, "c5", {("vllm", 0): "h100"}), Existing(0, "gone", {}))
    for n in (0, 1, 5, 30):
        a = place(req(replicas=n, clusters=clusters, existing=existing))
        b = place(req(replicas=n, fleet={c.name: c for c in clusters}, existing=existing))
        assert (a.replicas, a.removed, a.reason, a.message) == (
            b.replicas,
            b.removed,
            b.reason,
            b.message,
        )


def test_scale_down_picks_the_most_loaded_cluster_each_time() -> None:
    # c0 is fuller (others use 2 of its 4 nodes): it loses its replicas (highest index
    # first) until its load falls to c1's; then c1 loses its highest index.
    clusters = (cluster("c0"), cluster("c1"))
    existing = tuple(Existing(i, "c0" if i < 2 else "c1", {("vllm", 0): "h100"}) for i in range(4))
    p = place(req(replicas=1, clusters=clusters, existing=existing, used={("c0", "h100"): 2}))
    assert [r.index for r in p.removed] == [0, 1, 3]
    assert where(p) == [(2, "c1")]
    assert all(r.why == "scaled down" for r in p.removed)


def test_removed_tells_scale_down_from_displacement() -> None:
    """``Removed.scaled_down``: True only when fewer replicas are wanted (the composer
    records displaced replicas for the replacement-duration metric, never scale-downs)."""
    a0 = Existing(0, "a", {("vllm", 0): "h100"})
    b1 = Existing(1, "b", {("vllm", 0): "h100"})
    # Moved off a cluster that is not Ready: displaced.
    p = place(req(clusters=(cluster("a", ready=False), cluster("b")), existing=(a0,)))
    assert [(r.index, r.scaled_down) for r in p.removed] == [(0, False)]
    # Its cluster is gone: displaced.
    p = place(req(clusters=(cluster("b"),), existing=(a0,)))
    assert [(r.index, r.scaled_down) for r in p.removed] == [(0, False)]
    # Fewer replicas wanted: scaled down, from a healthy cluster or a not-Ready one.
    p = place(req(replicas=1, clusters=(cluster("a"), cluster("b")), existing=(a0, b1)))
    assert [(r.why, r.scaled_down) for r in p.removed] == [("scaled down", True)]
    p = place(
        req(replicas=1, clusters=(cluster("a", ready=False), cluster("b")), existing=(a0, b1))
    )
    assert [(r.index, r.scaled_down) for r in p.removed] == [(0, True)]
    assert p.removed[0].why == "scaled down (cluster is not Ready)"


# ---- issue 13: a retained cluster takes no replica; its replicas retire make-before-break


def _ex(index: int, cluster: str, serving: bool) -> Existing:
    return Existing(index, cluster, {("vllm", 0): "h100"}, serving)


# (case, replicas wanted, existing, clusters with room (others full), want placed, want removed)
RETIRE = [
    ("replacement placed, old kept", 1, [_ex(0, "a", True)], ["a", "b"], [(0, "a"), (1, "b")], []),
    (
        "replacement not serving yet",
        1,
        [_ex(0, "a", True), _ex(1, "b", False)],
        ["a", "b"],
        [(0, "a"), (1, "b")],
        [],
    ),
    ("replacement serves: old goes", 1, [_ex(0, "a", True), _ex(1, "b", True)], ["a", "b"],
     [(1, "b")], [(0, "a")]),
    ("no room for a replacement: kept", 1, [_ex(0, "a", True)], ["a"], [(0, "a")], []),
    ("two replicas, one serving elsewhere", 2, [_ex(0, "a", True), _ex(1, "b", True)],
     ["a", "b"], [(0, "a"), (1, "b"), (2, "b")], []),
    ("scaled to zero: retiring goes", 0, [_ex(0, "a", True)], ["a", "b"], [], [(0, "a")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "replicas", "existing", "room", "want", "gone"), RETIRE, ids=[c[0] for c in RETIRE]
)
def test_retained_cluster_retires_its_replicas_make_before_break(
    case: str, replicas: int, existing: list, room: list, want: list, gone: list
) -> None:
    fleet = tuple(cluster(n, nodes=4 if n in room else 0) for n in ("a", "b"))
    used = {("a", "h100"): 0}
    p = place(
        req(
            replicas=replicas,
            clusters=fleet,
            used=used,
            existing=tuple(existing),
            footprint={"a": "Ready", "b": "Ready"},
            cache="qwen-cache",
            retained=frozenset({"a"}),
        )
    )
    assert where(p) == want, (case, p.message)
    assert [(r.index, r.cluster) for r in p.removed] == gone, case
    for r in p.removed:
        assert r.scaled_down == (replicas == 0) and r.cluster == "a"
    # The retained cluster never gets a new replica.
    assert all(r.existing for r in p.replicas if r.cluster == "a")
