"""A tenant XR that multiplies a template past Crossplane's 4 MiB response is refused
before the copies are built (review 16b F1): the fatal result names the fields, the
estimate and the limit, and the call's memory stays near one copy."""

from __future__ import annotations

import copy
import datetime
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct

from function.core.outcome import MAX_RESPONSE_BYTES, Outcome
from function.edge import codec
from function.ops.settings import Settings
from tests.support import harness as h
from tests.support.table import Case, table
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


def _big_deployment(replicas: int, value_kib: float) -> dict[str, Any]:
    e = engine()
    container = e["members"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "BLOB", "value": "x" * int(value_kib * 1024)}]
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


def test_the_advice_fits_the_cause() -> None:
    """Steady state over the limit: lowering spec.replicas helps, to at most N (a
    deployment that fits in steady state is never refused for its replacements: its
    moves are deferred, below)."""
    rsp, _ = h.drive(h.run, _big_deployment(12, 400), None, h.World([ic("gpu-a", nodes=16)]))
    (msg,) = h.fatal(rsp)
    assert "lower spec.replicas to at most 10" in msg and "replacements" not in msg, msg
    assert "containers[0].env[0].value" in msg and "ConfigMap" in msg, msg


# ---- failover within the limit: moves deferred, never the whole call refused -------------

SERVING = ("True", "Serving", "ok")
DEFERRED = "MovesDeferred"


@dataclass(frozen=True)
class Outage:
    """A deployment of ``replicas`` ModelReplicas of about ``kib`` KiB each (10 fit in
    4 MiB at 400 KiB) whose clusters ``lost`` (all on them) fail over to ``gpu-z``."""

    replicas: int
    kib: float
    lost: tuple[tuple[str, str], ...]  # (cluster, how: "not-ready" | "gone")
    target: str = "gpu-z"  # the cluster with room for all, Ready


@dataclass(frozen=True)
class Failover:
    """What the first call after the outage composes, and how the failover ends."""

    first_batch: int  # replacements composed beside the replicas they replace
    deferred: int  # moves deferred in that call
    converges: bool  # every replica ends on the target cluster
    most: int = 10  # ModelReplicas composed at most in any call


def _world(o: Outage) -> h.World:
    """After the outage: the lost clusters not Ready (or gone), the target with room for
    all."""
    nodes = max(16, o.replicas)
    clusters = [ic(c, nodes=nodes, ready=False) for c, how in o.lost if how == "not-ready"]
    return h.World([*clusters, ic(o.target, nodes=nodes)])


def _long(name: str) -> str:
    """A 180-character cluster name ending in ``name`` (valid; the XRD does not bound it)."""
    return name[0] * (180 - len(name) - 1) + "-" + name


def _written(xr: dict[str, Any], rsp: Any) -> dict[str, Any]:
    """``xr`` with the status and conditions ``rsp`` writes (what Crossplane applies)."""
    out = copy.deepcopy(xr)
    conds = [{"type": t, **c} for t, c in h.conditions(rsp).items()]
    out["status"] = {**h.status(rsp), "conditions": conds}
    return out


def _replicas(rsp: Any) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in h.desired(rsp).items() if v.get("kind") == "ModelReplica"}


FAILOVER: list[Case[Outage, Failover]] = [
    Case("two-at-a-time", "8 fit with 2 more: 2 replacements at once, 6 moves deferred; "
         "each batch's old replicas go once their replacements serve, then the next batch",
         Outage(8, 400, (("gpu-a", "not-ready"),)), Failover(2, 6, True)),
    Case("one-at-a-time-two-clusters-lost", "9 fit with 1 more; one cluster gone, one not "
         "Ready: one move at a time",
         Outage(9, 400, (("gpu-a", "gone"), ("gpu-b", "not-ready"))), Failover(1, 8, True)),
    Case("no-room-to-move", "10 fit exactly: no replacement fits beside them, every move "
         "deferred, every replica kept as it is (not refused, not deleted)",
         Outage(10, 400, (("gpu-a", "not-ready"),)), Failover(0, 10, False)),
    Case("many-small-ones", "100 of 30 KiB: 133 lower bounds fit in 4 MiB, but 133 whole "
         "ModelReplicas with the status pass it (the runner refused the call): the surge "
         "is what the measured response holds, 131 (132 measured over)",
         Outage(100, 30, (("gpu-a", "not-ready"),)), Failover(31, 69, True, most=131)),
    Case("long-cluster-names", "600 of 3 KiB, clusters named with 180 characters: the "
         "cluster name is written in each body, its labels and its status rows (review 19c "
         "F1: a fixed charge per replica let 864 be composed, 4.1 MiB, and the runner "
         "refused every call)",
         Outage(600, 3, ((_long("a"), "not-ready"),), _long("z")),
         Failover(246, 354, True, most=846)),
    Case("room-for-a-hundred", "900 of 3 KiB: 3.6 MiB in steady state, room for about 100 "
         "more (review 19c F2: a fixed charge per replica said 864 fit, so none moved, "
         "ever)",
         Outage(900, 3, (("gpu-a", "not-ready"),)), Failover(105, 795, True, most=1005)),
]  # fmt: skip


@table(FAILOVER)
def test_a_failover_past_the_response_limit_moves_in_batches(
    case: Case[Outage, Failover],
) -> None:
    """Before, replicas plus their replacements past 4 MiB refused the
    whole call (a fatal result), so a deployment that fits in steady state could not fail
    over at all during an outage. Now the replacements that fit are composed, the other
    replicas due to move stay exactly as they are, ``ReplicasScheduled`` says how many
    moves wait and why (the response limit), with one Warning, and each later call moves
    the next batch once the previous one's replacements serve."""
    o, want = case.inputs, case.want
    fit = want.most
    xr = _big_deployment(o.replicas, o.kib)
    per_cluster = -(-o.replicas // len(o.lost))
    home = h.World([ic(c, nodes=per_cluster) for c, _ in o.lost])
    rsp, _ = h.drive(h.run, xr, None, home)
    assert not h.fatal(rsp) and len(_replicas(rsp)) == o.replicas, h.results(rsp)
    lost = {c for c, _ in o.lost}
    world = _world(o)
    xr = _written(xr, rsp)
    obs = observe(rsp, {i: SERVING for i in range(o.replicas)})

    rsp, _ = h.drive(h.run, xr, obs, world)
    assert not h.fatal(rsp), (case.reason, h.fatal(rsp))
    assert rsp.ByteSize() <= MAX_RESPONSE_BYTES, (case.reason, rsp.ByteSize())
    got = _replicas(rsp)
    new = [k for k in got if k not in obs]
    assert len(got) == fit and len(new) == want.first_batch, (case.reason, len(got), len(new))
    assert all(got[k]["spec"]["clusterName"] == o.target for k in new), case.reason
    # Every replica due to move is kept, exactly as observed (no replacement for most).
    for k, body in obs.items():
        assert got[k]["spec"] == body["spec"], (case.reason, k)
    cond = h.conditions(rsp)["ReplicasScheduled"]
    assert cond["status"] == "True" and cond["reason"] == DEFERRED, (case.reason, cond)
    # The bound it states is what is composed.
    said = (f"{want.deferred} moves deferred", f"at most {fit} fit", "4 MiB", "spec.template")
    for words in said:
        assert words in cond["message"], (case.reason, words, cond["message"])
    warned = [m for s, m in h.results(rsp) if s == "Warning" and "deferred" in m]
    assert len(warned) == 1, (case.reason, h.results(rsp))
    # A fixed point: the same world, the status written back, gives the same response
    # and no Warning again.
    xr = _written(xr, rsp)
    again, _ = h.drive(h.run, xr, obs, world)
    assert _replicas(again) == got and h.status(again) == h.status(rsp), case.reason
    assert h.conditions(again) == h.conditions(rsp), case.reason
    assert not [m for s, m in h.results(again) if "deferred" in m], h.results(again)

    # Later calls: every replica composed serves (the replacements become Ready); the
    # old replicas go once theirs serve, and the next batch follows.
    for _ in range(4 * o.replicas):
        obs = observe(rsp, {int(b["spec"]["index"]): SERVING for b in _replicas(rsp).values()})
        xr = _written(xr, rsp)
        before = got
        rsp, _ = h.drive(h.run, xr, obs, world)
        assert not h.fatal(rsp), (case.reason, h.fatal(rsp))
        assert rsp.ByteSize() <= MAX_RESPONSE_BYTES, (case.reason, rsp.ByteSize())
        got = _replicas(rsp)
        assert len(got) <= fit, (case.reason, len(got))
        on_lost = sum(1 for b in got.values() if b["spec"]["clusterName"] in lost)
        assert len(got) - on_lost <= o.replicas, case.reason
        # never fewer serving than wanted: an old replica goes only once a new one serves
        assert len(got) >= o.replicas, (case.reason, sorted(got))
        if not on_lost or got == before:  # done, or nothing moves any more
            break
    cond = h.conditions(rsp)["ReplicasScheduled"]
    if want.converges:
        assert not on_lost and len(got) == o.replicas, (case.reason, sorted(got))
        assert cond["reason"] == "Scheduled", (case.reason, cond)
    else:
        assert on_lost == o.replicas and cond["reason"] == DEFERRED, (case.reason, cond)


# ---- the measure the surge is decided on ----------------------------------------------


def _outcome(kind: str) -> Outcome:
    out = Outcome()
    body = Struct()
    body.update({"kind": "ModelReplica", "spec": {"clusterName": "c" * 180, "index": 7}})
    if kind in ("bytes", "all"):
        for i in range(300):
            out.add(f"replica-{i}", body.SerializeToString(deterministic=True), ready=i % 2 == 0)
    if kind in ("struct", "all"):
        out.add("usage", body)
    if kind in ("dict", "all"):
        out.add("plain", {"kind": "Usage", "spec": {"of": {"name": "x" * 300}}})
    if kind in ("status", "all"):
        out.status["placement"] = [{"index": i, "cluster": "c" * 180} for i in range(300)]
        out.status["displaced"] = Struct()
    if kind in ("talk", "all"):
        out.condition("ReplicasScheduled", "True", "MovesDeferred", "m" * 5000)
        for i in range(200):
            out.warning(f"replica {i} moves" + "w" * 150, "ReplicaMoving")
        out.require(
            "clusters", "modelplane.ai/v1alpha1", "InferenceCluster", match_labels={"a": "b"}
        )
        out.require("cache", "modelplane.ai/v1alpha1", "ModelCache", match_name="m", namespace="n")
    return out


@pytest.mark.parametrize("kind", ["bytes", "struct", "dict", "status", "talk", "all"])
def test_the_measured_response_size_bounds_the_encoded_one(kind: str) -> None:
    """``Outcome.response_bytes`` (what the surge is decided on) is never below the
    response the runner encodes and sends, with the request's desired state and context
    (``Inputs.frame_bytes``), and within a few bytes per item of it."""
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "t" * 40
    req.desired.composite.resource.update({"status": {"earlier": "e" * 2000}})
    req.context.update({"ctx": "c" * 3000})
    out = _outcome(kind)
    rsp, wires = codec.encode(req, out, 60)
    sent = len(codec.serialize(rsp) + codec.desired_suffix(wires))
    inputs = codec.decode(req, now=datetime.datetime.now(datetime.UTC), settings=Settings())
    got = out.response_bytes(inputs.frame_bytes)
    items = len(out.resources) + len(out.results) + len(out.conditions) + 3
    assert sent <= got <= sent + 300 + 16 * items, (kind, sent, got)


def test_spec_replicas_alone_past_the_limit_in_a_failover_is_refused_measured() -> None:
    """Copies of the template fit, and the steady state is composed just under 4 MiB, but
    the failover call with every move deferred (its status and message) is over: then
    ``spec.replicas`` alone does not fit, and the refusal says so with the measured size
    and a bound below ``spec.replicas`` (before, the runner's generic size fatal)."""
    replicas, a, z = 100, _long("a"), _long("z")

    def steady(value: int) -> tuple[dict[str, Any], Any]:
        xr = _big_deployment(replicas, value / 1024)
        rsp, _ = h.drive(h.run, xr, None, h.World([ic(a, nodes=replicas)]))
        return xr, rsp

    lo, hi = 30_000, 45_000  # the largest env value whose steady state is composed
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not h.fatal(steady(mid)[1]) else (lo, mid)
    xr, rsp = steady(lo)
    assert not h.fatal(rsp) and len(_replicas(rsp)) == replicas
    obs = observe(rsp, {i: SERVING for i in range(replicas)})
    world = h.World([ic(a, nodes=replicas, ready=False), ic(z, nodes=replicas)])
    again, _ = h.drive(h.run, _written(xr, rsp), obs, world)
    (msg,) = h.fatal(again)
    assert msg.startswith("invalid ModelDeployment ml-team/chat: spec.replicas: 100 "), msg
    assert "cluster, labels and status rows" in msg and "bytes, over the 4,194,304" in msg, msg
    assert "lower spec.replicas to at most 99," in msg, msg


@pytest.mark.parametrize("moves", [60, 150], ids=["under-the-records", "past-the-records"])
def test_each_move_is_announced_once_however_many_are_under_way(moves: int) -> None:
    """Found by review 19e: ``status.displaced`` keeps 100 records, and every move past
    them "started" again on every reconcile, each with a ``ReplicaMoving`` Warning."""
    from collections import Counter

    xr = _big_deployment(moves, 0.1)
    rsp, _ = h.drive(h.run, xr, None, h.World([ic("gpu-a", nodes=moves)]))
    assert not h.fatal(rsp), h.fatal(rsp)
    world = h.World([ic("gpu-a", nodes=moves, ready=False), ic("gpu-z", nodes=moves)])
    serving = {i: SERVING for i in range(moves)}  # the old replicas serve
    obs = observe(rsp, serving)
    xr = _written(xr, rsp)
    announced = []
    for _ in range(4):
        rsp, _ = h.drive(h.run, xr, obs, world)
        assert not h.fatal(rsp), h.fatal(rsp)
        announced.append(Counter(r.reason for r in rsp.results)["ReplicaMoving"])
        obs = observe(rsp, serving)  # the replacements composed, observed not Ready
        xr = _written(xr, rsp)
    assert announced == [moves, 0, 0, 0], announced
