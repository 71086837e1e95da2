"""Placement as a pure function: tables of (fleet, deployment) -> where replicas run.

Also the pieces it rests on: DRA-style CEL device selectors (function.scheduling.devices)
and Kubernetes taint/toleration matching (function.scheduling.tolerations).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Final

import pytest

from function.api.modeldeployment import (
    CACHE_NOT_FOUND,
    HYDRATION_FAILED,
    INSUFFICIENT_CAPACITY,
    NO_CLUSTER_IN_FOOTPRINT,
    NO_MATCHING_CLUSTERS,
    WAITING_FOR_CACHE,
)
from function.scheduling.devices import (
    Device,
    DeviceRequest,
    InvalidSelector,
    Quantity,
    SelectorEvaluationError,
    Semver,
    compile_selector,
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
from tests.support.table import Case, table

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

QUANTITY = "a Kubernetes resource quantity: binary and decimal suffixes, exponents"
REJECTED = "not a Kubernetes resource quantity: a ValueError"

QUANTITIES: list[Case[str, Decimal | None]] = [
    Case("80Gi", QUANTITY, "80Gi", Decimal(80 * 2**30)),
    Case("23034Mi", QUANTITY, "23034Mi", Decimal(23034 * 2**20)),
    Case("500m", QUANTITY, "500m", Decimal("0.5")),
    Case("1k", QUANTITY, "1k", Decimal(1000)),
    Case("1e3", QUANTITY, "1e3", Decimal(1000)),
    Case("1.5G", QUANTITY, "1.5G", Decimal(1_500_000_000)),
    Case("2", QUANTITY, "2", Decimal(2)),
    Case("empty", REJECTED, "", None),
    Case("suffix-only", "Kubernetes' parser reads a suffix alone as 0", "Gi", Decimal(0)),
    Case("GB", REJECTED, "1GB", None),
    Case("two-points", REJECTED, "1.2.3", None),
    Case("letters", REJECTED, "abc", None),
]


@table(QUANTITIES)
def test_parse_quantity(case: Case[str, Decimal | None]) -> None:
    if case.want is None:
        with pytest.raises(ValueError):
            Quantity(case.inputs)
    else:
        assert Quantity(case.inputs).value == case.want, case.reason


@dataclass(frozen=True)
class Match:
    """A DRA CEL selector and the device it is evaluated against."""

    expr: str
    device: Device


DRA_CEL = "DRA's CEL environment: capacity quantities, attributes, driver"

MATCHES: list[Case[Match, bool]] = [
    Case("memory-40Gi-h100", DRA_CEL, Match(MEM_40, H100), True),
    Case("memory-40Gi-l4", DRA_CEL, Match(MEM_40, L4), False),
    Case("memory-20Gi-l4", "23034Mi > 20Gi", Match(MEM_20, L4), True),
    Case("isGreaterThan", DRA_CEL + ": quantity isGreaterThan",
         Match('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("22Gi"))', L4),
         True),
    Case("isLessThan", DRA_CEL + ": quantity isLessThan",
         Match('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("22Gi"))', L4),
         False),
    Case("string-attribute-h100", DRA_CEL,
         Match('device.attributes["gpu.nvidia.com"].architecture == "Hopper"', H100), True),
    Case("string-attribute-l4", DRA_CEL,
         Match('device.attributes["gpu.nvidia.com"].architecture == "Hopper"', L4), False),
    Case("driver", DRA_CEL, Match('device.driver == "gpu.nvidia.com"', L4), True),
    Case("bool-attribute", DRA_CEL, Match('device.attributes["gpu.nvidia.com"].nvlink', H100),
         True),
    Case("int-attribute", DRA_CEL, Match('device.attributes["gpu.nvidia.com"].sm >= 100', H100),
         True),
    Case("semver-isGreaterThan", DRA_CEL + ": version attributes are semver",
         Match('device.attributes["gpu.nvidia.com"].cudaComputeCapability'
               '.isGreaterThan(semver("8.9.0"))', H100), True),
    Case("semver-major", DRA_CEL + ": semver major()",
         Match('device.attributes["gpu.nvidia.com"].cudaComputeCapability.major() == 9', H100),
         True),
    Case("another-driver", "the expression addresses only amd.com: a device of another driver",
         Match('device.capacity["amd.com"].memory.compareTo(quantity("1Gi")) >= 0', H100), False),
    Case("guard-short-circuits", "a guard that is false short-circuits what would fail",
         Match('device.driver == "amd.com" && device.attributes["gpu.nvidia.com"].nvlink', H100),
         False),
]  # fmt: skip


@table(MATCHES)
def test_selector(case: Case[Match, bool]) -> None:
    assert selector_matches(case.inputs.expr, case.inputs.device) is case.want, case.reason


EVAL_ERROR = "an evaluation error is an error (DRA aborts the allocation), never a non-match"

EVALUATION_ERRORS: list[Case[Match, str]] = [
    Case("missing-attribute", EVAL_ERROR, Match('device.attributes["gpu.nvidia.com"].nvlink', L4),
         "nvlink"),
    Case("type-error", EVAL_ERROR,
         Match('device.capacity["gpu.nvidia.com"].memory.compareTo(1) >= 0', H100), ""),
    Case("bad-quantity", EVAL_ERROR,
         Match('quantity("not-a-quantity").compareTo(quantity("1")) >= 0', H100),
         "not-a-quantity"),
    Case("divide-by-zero", EVAL_ERROR, Match("1 / 0 == 0", H100), "divide by zero"),
    Case("not-boolean", "a non-boolean result is an error too", Match("dyn(device.driver)", H100),
         "not a boolean"),
]  # fmt: skip


@table(EVALUATION_ERRORS)
def test_selector_failing_at_evaluation_is_an_error(case: Case[Match, str]) -> None:
    expr, device = case.inputs.expr, case.inputs.device
    with pytest.raises(SelectorEvaluationError) as e:
        selector_matches(expr, device)
    assert e.value.expression == expr and e.value.device == device
    assert case.want in str(e.value) and device.name in str(e.value)


@pytest.mark.parametrize("expr", ['device.capacity["gpu.nvidia.com"', "1 +", "", "a ++ b"])
def test_selector_that_does_not_compile_names_itself(expr: str) -> None:
    with pytest.raises(InvalidSelector) as e:
        compile_selector(expr)
    assert expr.strip() in str(e.value)
    assert "does not compile" in str(e.value)


DRA_CHECKED = "checked like a DRA compiler: only DRA's functions and the device variable"

UNCHECKED_SELECTORS: list[Case[str, str]] = [
    Case("unknown-function", DRA_CHECKED, "foo(1)", "unknown function foo"),
    Case("unknown-method", DRA_CHECKED, 'device.driver.toLower() == "x"',
         "unknown function toLower"),
    Case("undeclared-variable", DRA_CHECKED, "other.x == 1", "undeclared reference to other"),
    Case("undeclared-in-macro", DRA_CHECKED, 'device.attributes["a"].exists(k, k == other)',
         "undeclared reference to other"),
]  # fmt: skip


@table(UNCHECKED_SELECTORS)
def test_selector_checked_like_a_dra_compiler(case: Case[str, str]) -> None:
    with pytest.raises(InvalidSelector, match=case.want):
        compile_selector(case.inputs)


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


@dataclass(frozen=True)
class Against:
    """A toleration and the taint it is matched against."""

    toleration: Toleration
    taint: Taint


TOLERATES = "Kubernetes taint matching: key, Equal value or Exists, and effect (empty: any)"

TOLERATIONS: list[Case[Against, bool]] = [
    Case("equal-value", TOLERATES,
         Against(Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "v", "NoSchedule")),
         True),
    Case("other-value", TOLERATES,
         Against(Toleration("k", "Equal", "w", "NoSchedule"), Taint("k", "v", "NoSchedule")),
         False),
    Case("exists-any-effect", TOLERATES,
         Against(Toleration("k", "Exists", "", ""), Taint("k", "v", "NoExecute")), True),
    Case("empty-key-exists-tolerates-all", TOLERATES,
         Against(Toleration("", "Exists", "", ""), Taint("any", "v", "NoSchedule")), True),
    Case("other-effect", TOLERATES,
         Against(Toleration("k", "Equal", "v", "NoExecute"), Taint("k", "v", "NoSchedule")),
         False),
    Case("other-key", TOLERATES,
         Against(Toleration("other", "Exists", "", ""), Taint("k", "", "NoSchedule")), False),
]  # fmt: skip


@table(TOLERATIONS)
def test_toleration(case: Case[Against, bool]) -> None:
    assert case.inputs.toleration.tolerates(case.inputs.taint) is case.want, case.reason


def test_parse_taints_and_tolerations() -> None:
    taints = parse_taints([{"key": "maint", "effect": "NoExecute"}, {"key": "x"}])
    assert taints == (Taint("maint", "", "NoExecute"),)
    tols = parse_tolerations([{"key": "maint", "operator": "Exists"}])
    assert untolerated(taints, tols, ("NoExecute",)) == []
    assert untolerated(taints, (), ("NoExecute",)) == [Taint("maint", "", "NoExecute")]


# ---- placement: one table, one row per place() call --------------------------------

UNCHECKED: Final = "<unchecked>"  # a Want.reason that the row does not check


@dataclass(frozen=True)
class At:
    """A replica placed: its index and the cluster it runs on."""

    index: int
    cluster: str


@dataclass(frozen=True)
class Uses:
    """The pool replica 0's engine member runs on."""

    engine: str
    member: int
    pool: str


@dataclass(frozen=True)
class Gone:
    """A replica removed; each field left None is not checked."""

    index: int | None = None
    cluster: str | None = None
    why: str | None = None
    why_has: str | None = None
    scaled_down: bool | None = None


@dataclass(frozen=True)
class Want:
    """What place() must return; each field left None (or UNCHECKED) is not checked."""

    placed: tuple[At, ...] | None = None  # exactly these replicas, in order
    on: frozenset[str] | None = None  # the set of clusters the replicas run on
    count: int | None = None  # how many replicas are placed
    existing: tuple[bool, ...] | None = None  # Placed.existing, per replica
    hydration: tuple[str | None, ...] | None = None  # Placed.hydration, per replica
    pools: tuple[Uses, ...] | None = None  # replica 0's pools, whole
    reason: str | None = UNCHECKED
    message_starts: str = ""
    message_has: tuple[str, ...] = ()
    removed: tuple[Gone, ...] | None = None  # exactly these, in order
    moving: tuple[int, ...] | None = None  # Placement.moving's indexes, exactly
    deferred: tuple[tuple[int, str], ...] | None = None  # Placement.deferred (index, why)


def at(*pairs: tuple[int, str]) -> tuple[At, ...]:
    return tuple(At(index=i, cluster=c) for i, c in pairs)


COPIES_2 = (standalone(copies=2),)  # 2 nodes per replica
OTHERS_USE_3_OF_A = {("a", "h100"): 3}
L4_AND_H100 = (cluster("l4", dev=L4, labels={}), cluster("h100"))
FABRIC = DeviceRequest("ib", 1, ('device.driver == "fabric.modelplane.ai"',))
SMALL_AND_BIG = cluster("a", pools=(Pool("a-small", 1, (H100,)), Pool("b-big", 4, (H100,))))
COORDINATOR = (Engine("e", 1, (Member("Leader", 1, ()), Member("Worker", 2, (gpu(8),)))),)
FULL_SELECTOR = LabelSelector.parse(
    {
        "matchLabels": {"gpu": "h100"},
        "matchExpressions": [
            {"key": "region", "operator": "In", "values": ["us-east", "us-west"]},
            {"key": "tier", "operator": "NotIn", "values": ["dev"]},
        ],
    },
    "s",
)
H100_ONLY = LabelSelector.parse({"matchLabels": {"gpu": "h100"}}, "s")
NOT_READY_TAINTED = (
    cluster("a", ready=False),
    cluster("b", taints=(Taint("maint", "", "NoSchedule"),)),
    cluster("c", taints=(Taint("spot", "true", "PreferNoSchedule"),)),
)
ON_H100 = {("vllm", 0): "h100"}
A0 = Existing(0, "a", ON_H100)
SERVING_A0 = Existing(0, "a", ON_H100, True)
MOVES = "a serving replica whose cluster stopped being eligible moves make-before-break"
B1 = Existing(1, "b", ON_H100)
A_B_A = (A0, B1, Existing(2, "a", ON_H100))
FLEET = (cluster("gpu-a"), cluster("gpu-b"), cluster("gpu-c"))
C5_FOOTPRINT = {"gpu-a": "Ready", "gpu-b": "Hydrating"}
C7_FOOTPRINT = {"gpu-a": "Ready", "gpu-b": "Ready", "gpu-c": "Failed"}
ON_GPU_C = (Existing(0, "gpu-c", ON_H100),)
C0_C0_C1_C1 = tuple(Existing(i, "c0" if i < 2 else "c1", ON_H100) for i in range(4))


def retire(replicas: int, existing: tuple[Existing, ...], room: tuple[str, ...]) -> Request:
    """Issue 13: cluster a is retained (its cache kept only while a replica serves)."""
    return req(
        replicas=replicas,
        clusters=tuple(cluster(n, nodes=4 if n in room else 0) for n in ("a", "b")),
        used={("a", "h100"): 0},
        existing=existing,
        footprint={"a": "Ready", "b": "Ready"},
        cache="qwen-cache",
        retained=frozenset({"a"}),
    )


def serving(index: int, cluster: str, serving: bool) -> Existing:
    return Existing(index, cluster, ON_H100, serving)


SPREAD = "spread before pack; equal load ties by cluster name"
CAPACITY = "a replica costs pods x copies nodes, and other replicas' use counts"
TAINTS = "a cluster that is not Ready, or has an untolerated NoSchedule taint, gets none"
FAILED = "a Failed hydration is outside the footprint: its replicas move when they can"
DISPLACED = "Removed.scaled_down is True only when fewer replicas are wanted"
NO_CLUSTER_YET = (
    "review 16a: a selector that matches no InferenceCluster (clusters being re-created "
    "or relabelled) is NoMatchingClusters, a wait, with or without a cache; not "
    "NoClusterInCacheFootprint, which a ModelExperiment takes as final"
)
RETIRE = "a retained cluster takes no new replica; its replicas retire make-before-break"
MOVE = "a serving replica due to move stays until as many replicas serve elsewhere as wanted"
SURGE = "at most Request.surge replicas are kept beside their replacements at once"
NOT_READY = "cluster is not Ready"

PLACEMENT: list[Case[Request, Want]] = [
    Case("spread-then-pack", SPREAD,
         req(replicas=3, clusters=(cluster("b"), cluster("a"))),
         Want(placed=at((0, "a"), (1, "b"), (2, "a")), reason=None)),
    Case("pack-fewest-free", "packing prefers the cluster with the fewest free nodes",
         req(replicas=3, clusters=(cluster("a", nodes=8), cluster("b", nodes=3))),
         Want(placed=at((0, "a"), (1, "b"), (2, "b")))),
    Case("capacity-others-use", CAPACITY,
         req(replicas=2, engines=COPIES_2, clusters=(cluster("a"), cluster("b")),
             used=OTHERS_USE_3_OF_A),
         Want(placed=at((0, "b"), (1, "b")))),
    Case("capacity-short", CAPACITY + "; a shortfall says what each cluster lacks",
         req(replicas=3, engines=COPIES_2, clusters=(cluster("a"), cluster("b")),
             used=OTHERS_USE_3_OF_A),
         Want(count=2, reason=INSUFFICIENT_CAPACITY, message_starts="2 of 3 replicas placed",
              message_has=("a: engine vllm member 0 needs 2 node(s): h100 1/4 free",))),
    Case("gang-leader-plus-workers", "a gang needs Leader + Worker nodes (1 + 2 = 3)",
         req(replicas=2, engines=(gang(workers=2),),
             clusters=(cluster("a", nodes=3), cluster("b", nodes=2))),
         Want(placed=at((0, "a")), reason=INSUFFICIENT_CAPACITY, message_has=("b: engine vllm",))),
    Case("devices-every-selector", "a device must satisfy every selector of the request",
         req(replicas=2, engines=(standalone(1, MEM_40),), clusters=L4_AND_H100),
         Want(placed=at((0, "h100"), (1, "h100")))),
    Case("devices-count", "a device must have the count the request asks for",
         req(replicas=1, engines=(standalone(9),), clusters=L4_AND_H100),
         Want(placed=(), reason=INSUFFICIENT_CAPACITY, message_has=(
             "no pool's devices satisfy engine vllm member 0 (Standalone) request gpu",))),
    Case("synthetic-only-pool", "a pool whose only matching devices are Synthetic is not claimable",
         req(engines=(Engine("e", 1, (Member("Standalone", 1, (FABRIC,)),)),),
             clusters=(cluster("a", pools=(Pool("p", 2, (IB, H100)),)),)),
         Want(placed=(), message_has=("claimable",))),
    Case("engine-one-pool", "an engine that fits one pool keeps its members together",
         req(engines=(gang(workers=1),), clusters=(SMALL_AND_BIG,)),
         Want(pools=(Uses("vllm", 0, "b-big"), Uses("vllm", 1, "b-big")))),
    Case("engine-splits", "an engine that fits no single pool splits its members",
         req(engines=(gang(workers=4),), clusters=(SMALL_AND_BIG,)),
         Want(pools=(Uses("vllm", 0, "a-small"), Uses("vllm", 1, "b-big")))),
    Case("coordinator-leader-rides", "a Leader with no devices rides on its engine's pool",
         req(engines=COORDINATOR, clusters=(cluster("a", nodes=3),)),
         Want(pools=(Uses("e", 0, "h100"), Uses("e", 1, "h100")))),
    Case("coordinator-leader-needs-a-node", "a Leader with no devices still takes a node",
         req(engines=COORDINATOR, clusters=(cluster("a", nodes=2),)),
         Want(placed=())),
    Case("selector-full-semantics", "matchLabels, In and NotIn as Kubernetes label selectors",
         req(replicas=4, selector=FULL_SELECTOR, clusters=(
             cluster("c1", labels={"gpu": "h100", "region": "us-east", "tier": "prod"}),
             cluster("c2", labels={"gpu": "h100", "region": "us-west"}),
             cluster("c3", labels={"gpu": "h100", "region": "us-east", "tier": "dev"}),
             cluster("c4", labels={"gpu": "a100", "region": "us-east"}))),
         Want(on=frozenset({"c1", "c2"}))),
    Case("no-matching-clusters", "a selector no cluster matches is NoMatchingClusters",
         req(selector=LabelSelector.parse({"matchLabels": {"gpu": "b200"}}, "s"),
             clusters=(cluster("a"),)),
         Want(placed=(), reason=NO_MATCHING_CLUSTERS)),
    Case("not-ready-and-tainted", TAINTS + "; PreferNoSchedule does not keep replicas off",
         req(replicas=2, clusters=NOT_READY_TAINTED),
         Want(placed=at((0, "c"), (1, "c")))),
    Case("tolerated-taint", "a tolerated taint does not keep replicas off",
         req(replicas=2, clusters=NOT_READY_TAINTED,
             tolerations=(Toleration("maint", "Exists"),)),
         Want(placed=at((0, "b"), (1, "c")))),
    Case("not-ready-and-tainted-say-why", TAINTS + "; the message names each cluster's reason",
         req(replicas=3, clusters=NOT_READY_TAINTED[:2]),
         Want(reason=INSUFFICIENT_CAPACITY,
              message_has=("a: not Ready", "b: taint maint:NoSchedule not tolerated"))),
    Case("existing-stay-put", "existing replicas stay; a new one takes the lowest free index",
         req(replicas=3, clusters=(cluster("a"), cluster("b")),
             existing=(Existing(0, "b", ON_H100), Existing(3, "b", ON_H100))),
         Want(placed=at((0, "b"), (1, "a"), (3, "b")), existing=(True, False, True),
              removed=())),
    Case("existing-stays-in-full-pool", "an existing replica stays when others filled its pool",
         req(clusters=(cluster("a", nodes=1),), used={("a", "h100"): 1}, existing=(A0,)),
         Want(placed=at((0, "a")))),
    Case("no-schedule-keeps-existing", "NoSchedule keeps new replicas off, not existing ones",
         req(clusters=(cluster("a", taints=(Taint("maint", "", "NoSchedule"),)), cluster("b")),
             existing=(A0,)),
         Want(placed=at((0, "a")))),
    Case("no-execute-moves-existing", "NoExecute moves existing replicas off",
         req(clusters=(cluster("a", taints=(Taint("maint", "", "NoExecute"),)), cluster("b")),
             existing=(A0,)),
         Want(placed=at((1, "b")), removed=(
             Gone(index=0, cluster="a", why_has="taint maint:NoExecute not tolerated"),))),
    Case("leaves-unmatched-or-gone", "a replica leaves a cluster that no longer matches or is gone",
         req(replicas=2, selector=H100_ONLY,
             clusters=(cluster("a", labels={"gpu": "a100"}), cluster("b"), cluster("c")),
             existing=(Existing(0, "a", {}), Existing(1, "gone", {}))),
         Want(placed=at((2, "b"), (3, "c")), removed=(Gone(index=0), Gone(index=1)))),
    Case("not-ready-moves-when-it-fits", "a not-Ready cluster's replica moves to a replacement",
         req(clusters=(cluster("a", ready=False), cluster("b")), existing=(A0,)),
         Want(placed=at((1, "b")), removed=(Gone(why_has="moved (cluster is not Ready)"),))),
    Case("not-ready-stays-without-room", "it stays while no replacement fits",
         req(clusters=(cluster("a", ready=False), cluster("b", nodes=0)), existing=(A0,)),
         Want(placed=at((0, "a")), removed=())),
    Case("scale-down-most-loaded", "scale-down removes from the most loaded cluster first",
         req(replicas=2, clusters=(cluster("a"), cluster("b")), existing=A_B_A,
             used={("b", "h100"): 3}),
         Want(placed=at((0, "a"), (2, "a")), removed=(Gone(index=1, why="scaled down"),))),
    Case("scale-down-equal-load", "equal load: the cluster with more of ours, highest index",
         req(replicas=2, clusters=(cluster("a"), cluster("b")), existing=A_B_A),
         Want(placed=at((0, "a"), (1, "b")))),
    Case("scale-to-zero", "zero replicas wanted places none and is no failure",
         req(replicas=0, clusters=(cluster("a"),), existing=(Existing(0, "a", {}),)),
         Want(placed=(), reason=None)),
    Case("scale-down-each-time", "each removal re-picks the most loaded cluster (c0 is fuller "
         "until its load falls to c1's; then c1 loses its highest index)",
         req(replicas=1, clusters=(cluster("c0"), cluster("c1")), existing=C0_C0_C1_C1,
             used={("c0", "h100"): 2}),
         Want(placed=at((2, "c1")), removed=(Gone(index=0, why="scaled down"),
                                             Gone(index=1, why="scaled down"),
                                             Gone(index=3, why="scaled down")))),
    # cache footprint
    Case("c5-inside-footprint-ready-first", "C5: only inside the footprint, Ready first",
         req(replicas=2, clusters=FLEET, footprint=C5_FOOTPRINT, cache="qwen-cache"),
         Want(placed=at((0, "gpu-a"), (1, "gpu-b")), hydration=("Ready", "Hydrating"))),
    Case("c5-pack-inside-footprint", "C5: more replicas than spread pack, never outside",
         req(replicas=6, clusters=FLEET, footprint=C5_FOOTPRINT, cache="qwen-cache"),
         Want(on=frozenset({"gpu-a", "gpu-b"}), count=6)),
    Case("ready-before-hydrating", "a Ready cache is preferred to a Hydrating one",
         req(replicas=1, clusters=FLEET, footprint={"gpu-a": "Hydrating", "gpu-b": "Ready"},
             cache="c"),
         Want(placed=at((0, "gpu-b")))),
    Case("c5-selector-misses-footprint", "C5: selector and footprint are intersected; "
         "an empty intersection names both sides",
         req(selector=LabelSelector.parse({"matchLabels": {"region": "eu"}}, "s"),
             clusters=(*FLEET, cluster("gpu-eu", labels={"region": "eu"})),
             footprint=C5_FOOTPRINT, cache="qwen-cache"),
         Want(placed=(), reason=NO_CLUSTER_IN_FOOTPRINT, message_has=("gpu-eu", "gpu-a, gpu-b"))),
    Case("no-cluster-at-all-with-a-footprint", NO_CLUSTER_YET,
         req(clusters=(), footprint=C5_FOOTPRINT, cache="qwen-cache"),
         Want(placed=(), reason=NO_MATCHING_CLUSTERS, message_has=("footprint",))),
    Case("selector-matches-nothing-with-a-footprint", NO_CLUSTER_YET,
         req(selector=LabelSelector.parse({"matchLabels": {"gpu": "b200"}}, "s"),
             clusters=FLEET, footprint=C5_FOOTPRINT, cache="qwen-cache"),
         Want(placed=(), reason=NO_MATCHING_CLUSTERS, message_has=("gpu-a, gpu-b",))),
    Case("no-cluster-at-all-with-an-empty-footprint", NO_CLUSTER_YET,
         req(clusters=(), footprint={}, cache="qwen-cache"),
         Want(placed=(), reason=NO_MATCHING_CLUSTERS)),
    Case("cache-without-hydrations-waits", "a cache with no hydration yet is waited for",
         req(clusters=FLEET, footprint={}, cache="c"),
         Want(placed=(), reason=WAITING_FOR_CACHE)),
    Case("c7-failed-outside-footprint", FAILED,
         req(replicas=3, clusters=FLEET, footprint=C7_FOOTPRINT, cache="c"),
         Want(on=frozenset({"gpu-a", "gpu-b"}))),
    Case("c7-failed-moves", FAILED,
         req(clusters=FLEET, footprint=C7_FOOTPRINT, cache="c", existing=ON_GPU_C),
         Want(placed=at((1, "gpu-a")),
              removed=(Gone(why_has="moved (hydration of ModelCache c Failed)"),))),
    Case("c7-failed-stays-with-nowhere-to-go", FAILED + "; with nowhere to go it stays, as Failed",
         req(clusters=FLEET, footprint={"gpu-c": "Failed"}, cache="c", existing=ON_GPU_C),
         Want(placed=at((0, "gpu-c")), hydration=("Failed",))),
    Case("all-hydrations-failed", "every selected hydration Failed: the reason says so, and "
         "where (not an empty footprint)",
         req(clusters=FLEET, footprint={"gpu-a": "Failed"}, cache="c"),
         Want(reason=HYDRATION_FAILED, message_has=("ModelCache c Failed on gpu-a",))),
    Case("stay-while-no-hydration", "replicas stay while the cache has no hydration at all",
         req(clusters=FLEET, footprint={}, cache="c",
             existing=(Existing(0, "gpu-a", ON_H100),)),
         Want(placed=at((0, "gpu-a")), removed=(), reason=None)),
    Case("outside-footprint-removed", "a replica outside the footprint is removed",
         req(clusters=FLEET, footprint={"gpu-a": "Ready"}, cache="c",
             existing=(Existing(0, "gpu-c", {}),)),
         Want(placed=at((1, "gpu-a")), removed=(Gone(why_has="outside the footprint"),))),
    # review 14b: a SERVING replica whose cluster stopped being eligible moves
    # make-before-break (its pods serve), not removed at once; one that does not serve
    # goes; an untolerated NoExecute taint removes it at once (Kubernetes evicts it)
    Case("serving-cluster-gone-moves", MOVES,
         req(clusters=(cluster("b"),), existing=(SERVING_A0,)),
         Want(placed=at((0, "a"), (1, "b")), removed=())),
    Case("serving-cluster-gone-no-room-stays", MOVES + "; with no room it stays, named",
         req(clusters=(), existing=(SERVING_A0,)),
         Want(placed=at((0, "a")), removed=(), reason=None,
              message_has=("should move but no replacement fits: replica 0 on a (cluster is "
                           "gone",))),
    Case("serving-relabelled-moves", MOVES,
         req(selector=H100_ONLY, clusters=(cluster("a", labels={"gpu": "a100"}), cluster("b")),
             existing=(SERVING_A0,)),
         Want(placed=at((0, "a"), (1, "b")), removed=())),
    Case("serving-outside-footprint-moves", MOVES,
         req(clusters=FLEET, footprint={"gpu-a": "Ready"}, cache="c",
             existing=(Existing(0, "gpu-c", ON_H100, True),)),
         Want(placed=at((0, "gpu-c"), (1, "gpu-a")), removed=())),
    Case("serving-pool-gone-moves", MOVES + " (an InferenceClass deleted: gpuPools [])",
         req(clusters=(cluster("a", pools=(), ready=False), cluster("b")),
             existing=(SERVING_A0,)),
         Want(placed=at((0, "a"), (1, "b")), removed=())),
    Case("serving-no-longer-fits-moves", MOVES,
         req(clusters=(cluster("a", dev=L4), cluster("b")), engines=(standalone(1, MEM_40),),
             existing=(SERVING_A0,)),
         Want(placed=at((0, "a"), (1, "b")), removed=())),
    Case("pools-not-known-stays", "status.gpuPools absent is not known, not empty: the "
         "replica keeps its pools (solid)",
         req(clusters=(cluster("a", pools=(), pools_known=False), cluster("b")),
             existing=(A0,)),
         Want(placed=at((0, "a")), removed=(), pools=(Uses("vllm", 0, "h100"),))),
    Case("not-serving-cluster-gone-removed", MOVES + "; one that does not serve goes",
         req(clusters=(cluster("b"),), existing=(A0,)),
         Want(placed=at((1, "b")), removed=(Gone(index=0, why_has="cluster is gone"),))),
    Case("serving-no-execute-removed", "an untolerated NoExecute taint removes even a "
         "serving replica at once (Kubernetes evicts its pods)",
         req(clusters=(cluster("a", taints=(Taint("maint", "", "NoExecute"),)), cluster("b")),
             existing=(SERVING_A0,)),
         Want(placed=at((1, "b")), removed=(Gone(index=0, why_has="NoExecute"),))),
    # displacement or scale-down
    Case("displaced-not-ready", DISPLACED + "; moved off a cluster that is not Ready",
         req(clusters=(cluster("a", ready=False), cluster("b")), existing=(A0,)),
         Want(removed=(Gone(index=0, scaled_down=False),))),
    Case("displaced-cluster-gone", DISPLACED + "; its cluster is gone",
         req(clusters=(cluster("b"),), existing=(A0,)),
         Want(removed=(Gone(index=0, scaled_down=False),))),
    Case("scaled-down-healthy", DISPLACED + "; fewer wanted, from a healthy cluster",
         req(replicas=1, clusters=(cluster("a"), cluster("b")), existing=(A0, B1)),
         Want(removed=(Gone(why="scaled down", scaled_down=True),))),
    Case("scaled-down-not-ready", DISPLACED + "; fewer wanted, from a not-Ready cluster",
         req(replicas=1, clusters=(cluster("a", ready=False), cluster("b")), existing=(A0, B1)),
         Want(removed=(Gone(index=0, why="scaled down (cluster is not Ready)",
                            scaled_down=True),))),
    # issue 13: (replicas wanted, existing, clusters with room; the others are full)
    Case("retire-replacement-placed-old-kept", RETIRE,
         retire(1, (serving(0, "a", True),), room=("a", "b")),
         Want(placed=at((0, "a"), (1, "b")), removed=())),
    Case("retire-replacement-not-serving-yet", RETIRE,
         retire(1, (serving(0, "a", True), serving(1, "b", False)), room=("a", "b")),
         Want(placed=at((0, "a"), (1, "b")), removed=())),
    Case("retire-replacement-serves-old-goes", RETIRE,
         retire(1, (serving(0, "a", True), serving(1, "b", True)), room=("a", "b")),
         Want(placed=at((1, "b")), removed=(Gone(index=0, cluster="a", scaled_down=False),))),
    Case("retire-no-room-kept", RETIRE + "; with no room for a replacement it is kept",
         retire(1, (serving(0, "a", True),), room=("a",)),
         Want(placed=at((0, "a")), removed=())),
    Case("retire-two-one-serving-elsewhere", RETIRE,
         retire(2, (serving(0, "a", True), serving(1, "b", True)), room=("a", "b")),
         Want(placed=at((0, "a"), (1, "b"), (2, "b")), removed=())),
    Case("retire-scaled-to-zero", RETIRE + "; scaled to zero, the retiring replica goes",
         retire(0, (serving(0, "a", True),), room=("a", "b")),
         Want(placed=(), removed=(Gone(index=0, cluster="a", scaled_down=True),))),
    # a replica moving off a cluster that is not Ready, or whose hydration Failed, while
    # it serves: make-before-break
    Case("move-serving-kept-beside-replacement", MOVE,
         req(clusters=(cluster("a", ready=False), cluster("b")), existing=(serving(0, "a", True),)),
         Want(placed=at((0, "a"), (1, "b")), removed=(), reason=None,
              message_has=("1 of 1 replicas placed",
                           "1 more kept serving on a (cluster is not Ready) until replacements "
                           "serve (make-before-break)"))),
    Case("move-serving-kept-replacement-not-serving", MOVE,
         req(clusters=(cluster("a", ready=False), cluster("b")),
             existing=(serving(0, "a", True), serving(1, "b", False)), displaced=frozenset({0})),
         Want(placed=at((0, "a"), (1, "b")), removed=())),
    Case("move-serving-goes-once-replacement-serves", MOVE,
         req(clusters=(cluster("a", ready=False), cluster("b")),
             existing=(serving(0, "a", True), serving(1, "b", True)), displaced=frozenset({0})),
         Want(placed=at((1, "b")), removed=(
             Gone(index=0, why="moved (cluster is not Ready)", scaled_down=False),))),
    Case("move-serving-failed-hydration", MOVE,
         req(clusters=FLEET, footprint=C7_FOOTPRINT, cache="c",
             existing=(Existing(0, "gpu-c", ON_H100, True),)),
         Want(placed=at((0, "gpu-c"), (1, "gpu-a")), removed=())),
    Case("move-not-serving-goes-when-replaced", MOVE + "; one that does not serve goes once "
         "its replacement is placed",
         req(clusters=(cluster("a", ready=False), cluster("b")),
             existing=(serving(0, "a", False),)),
         Want(placed=at((1, "b")), removed=(Gone(index=0, why="moved (cluster is not Ready)"),))),
    Case("scale-down-serving-on-not-ready", MOVE + "; fewer wanted, with enough serving "
         "elsewhere and no record of a move, it is scaled down",
         req(clusters=(cluster("a", ready=False), cluster("b")),
             existing=(serving(0, "a", True), serving(1, "b", True))),
         Want(placed=at((1, "b")), removed=(
             Gone(index=0, why="scaled down (cluster is not Ready)", scaled_down=True),))),
    Case("move-back-costs-the-replacement", MOVE + "; its cluster back before the "
         "replacement serves: the replacement goes, not a serving replica elsewhere",
         req(replicas=2, clusters=(cluster("a"), cluster("b"), cluster("c", nodes=8)),
             existing=(serving(0, "a", True), serving(1, "b", True), serving(2, "c", False)),
             displaced=frozenset({0})),
         Want(placed=at((0, "a"), (1, "b")), removed=(
             Gone(index=2, cluster="c", scaled_down=True),))),
    Case("move-serving-two-of-them", MOVE + "; each serving one waits for as many serving "
         "elsewhere",
         req(replicas=2, clusters=(cluster("a", ready=False), cluster("b")),
             existing=(serving(0, "a", True), serving(1, "a", True), serving(2, "b", True),
                       serving(3, "b", False)), displaced=frozenset({0, 1})),
         Want(placed=at((0, "a"), (2, "b"), (3, "b")), removed=(
             Gone(index=1, why="moved (cluster is not Ready)"),))),
    # Request.surge (the response size limit): at most that many replicas are kept beside
    # their replacements; the other moves are deferred, the replicas kept where they are
    Case("surge-defers-the-moves-past-it", SURGE,
         req(replicas=4, clusters=(cluster("a", ready=False), cluster("b", nodes=8)),
             existing=tuple(serving(i, "a", True) for i in range(4)), surge=1),
         Want(placed=at((0, "a"), (1, "a"), (2, "a"), (3, "a"), (4, "b")), removed=(),
              reason=None, moving=(0,), deferred=((1, NOT_READY), (2, NOT_READY),
                                                  (3, NOT_READY)))),
    Case("surge-a-started-move-goes-on", SURGE + "; a move recorded as started (displaced) "
         "goes before one not started, so its replacement is never left alone",
         req(replicas=4, clusters=(cluster("a", ready=False), cluster("b", nodes=8)),
             existing=(*(serving(i, "a", True) for i in range(4)), serving(4, "b", False)),
             displaced=frozenset({2}), surge=1),
         Want(placed=at((0, "a"), (1, "a"), (2, "a"), (3, "a"), (4, "b")), removed=(),
              reason=None, moving=(2,), deferred=((0, NOT_READY), (1, NOT_READY),
                                                  (3, NOT_READY)))),
    Case("surge-the-old-goes-when-the-new-serves", SURGE + "; the old replica goes once its "
         "replacement serves, the rest still deferred (the next call moves the next)",
         req(replicas=4, clusters=(cluster("a", ready=False), cluster("b", nodes=8)),
             existing=(*(serving(i, "a", True) for i in range(4)), serving(4, "b", True)),
             displaced=frozenset({2}), surge=1),
         Want(placed=at((0, "a"), (1, "a"), (3, "a"), (4, "b")), reason=None, moving=(),
              removed=(Gone(index=2, why="moved (cluster is not Ready)", scaled_down=False),),
              deferred=((0, NOT_READY), (1, NOT_READY), (3, NOT_READY)))),
    Case("surge-next-batch", SURGE + "; with room again, the next move starts",
         req(replicas=4, clusters=(cluster("a", ready=False), cluster("b", nodes=8)),
             existing=(*(serving(i, "a", True) for i in (0, 1, 3)), serving(4, "b", True)),
             surge=1),
         Want(placed=at((0, "a"), (1, "a"), (2, "b"), (3, "a"), (4, "b")), removed=(),
              moving=(0,), deferred=((1, NOT_READY), (3, NOT_READY)))),
    Case("surge-a-gone-cluster-before-a-relabelled-one", SURGE + "; a replica whose cluster "
         "is gone moves before one whose cluster merely stopped matching",
         req(replicas=2, selector=H100_ONLY,
             clusters=(cluster("a", labels={"gpu": "a100"}), cluster("b", nodes=8)),
             existing=(serving(0, "a", True), serving(1, "x", True)), surge=1),
         Want(placed=at((0, "a"), (1, "x"), (2, "b")), removed=(), moving=(1,),
              deferred=((0, "cluster no longer matches clusterSelector"),))),
    Case("surge-retiring-deferred", SURGE + "; a retiring replica's move is deferred too",
         replace(retire(2, (serving(0, "a", True), serving(1, "a", True)), room=("a", "b")),
                 surge=1),
         Want(placed=at((0, "a"), (1, "a"), (2, "b")), removed=(), reason=None,
              deferred=((1, "cluster is retained by ModelCache qwen-cache"),))),
    Case("surge-zero-a-replica-not-serving-still-moves", SURGE + "; one that does not serve "
         "is never kept beside its replacement: it moves with no surge at all",
         req(clusters=(cluster("a", ready=False), cluster("b")),
             existing=(serving(0, "a", False),), surge=0),
         Want(placed=at((1, "b")), removed=(Gone(index=0, why="moved (cluster is not Ready)"),),
              deferred=())),
    Case("surge-enough-nothing-deferred", SURGE + "; within it, placement is as without it",
         req(replicas=2, clusters=(cluster("a", ready=False), cluster("b", nodes=8)),
             existing=(serving(0, "a", True), serving(1, "a", True)), surge=2),
         Want(placed=at((0, "a"), (1, "a"), (2, "b"), (3, "b")), moving=(0, 1), deferred=())),
    Case("surge-scale-down-drops-the-deferred-first", SURGE + "; fewer wanted: the replicas "
         "due to move go before a healthy one, as without a surge",
         req(replicas=1, clusters=(cluster("a", ready=False), cluster("b")),
             existing=(serving(0, "a", True), serving(1, "a", True), serving(2, "b", True)),
             surge=0),
         Want(placed=at((2, "b")), deferred=(), removed=(
             Gone(index=0, why="scaled down (cluster is not Ready)", scaled_down=True),
             Gone(index=1, why="scaled down (cluster is not Ready)", scaled_down=True)))),
]  # fmt: skip


@table(PLACEMENT)
def test_placement(case: Case[Request, Want]) -> None:
    p = place(case.inputs)
    w, why = case.want, (case.reason, p.message)
    if w.placed is not None:
        assert where(p) == [(a.index, a.cluster) for a in w.placed], why
    if w.on is not None:
        assert {c for _, c in where(p)} == w.on, why
    if w.count is not None:
        assert len(p.replicas) == w.count, why
    if w.existing is not None:
        assert tuple(r.existing for r in p.replicas) == w.existing, why
    if w.hydration is not None:
        assert tuple(r.hydration for r in p.replicas) == w.hydration, why
    if w.pools is not None:
        assert dict(p.replicas[0].pools) == {(u.engine, u.member): u.pool for u in w.pools}, why
    if w.reason != UNCHECKED:
        assert p.reason == w.reason, why
    assert p.message.startswith(w.message_starts), why
    for part in w.message_has:
        assert part in p.message, (part, *why)
    if w.removed is not None:
        assert len(p.removed) == len(w.removed), (p.removed, *why)
        for got, want in zip(p.removed, w.removed, strict=True):
            for name in ("index", "cluster", "why", "scaled_down"):
                if getattr(want, name) is not None:
                    assert getattr(got, name) == getattr(want, name), (name, got, *why)
            if want.why_has is not None:
                assert want.why_has in got.why, (got, *why)
    if w.moving is not None:
        assert tuple(m.index for m in p.moving) == w.moving, why
    if w.deferred is not None:
        assert tuple((d.index, d.why) for d in p.deferred) == w.deferred, why
    # Request.surge bounds the replicas composed: the wanted ones and the surge.
    if case.inputs.surge is not None:
        assert len(p.replicas) <= case.inputs.replicas + case.inputs.surge, why
    # Issue 13: a retained cluster never gets a new replica.
    assert all(r.existing for r in p.replicas if r.cluster in case.inputs.retained), why


def test_deterministic() -> None:
    r = req(replicas=5, clusters=tuple(cluster(n) for n in "edcba"))
    assert where(place(r)) == where(place(r))


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
