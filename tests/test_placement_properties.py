"""Properties of placement over generated fleets (hypothesis).

Whatever the fleet, placement must: never exceed a pool's nodes with new replicas,
never place a new replica where it is not eligible, give unique indices, place all
wanted replicas or say why not, spread before it packs, keep every existing replica
whose cluster is still eligible, and not depend on the order clusters arrive in.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from function.scheduling.devices import Device, DeviceRequest
from function.scheduling.placement import Cluster, Engine, Existing, Member, Pool, Request, place
from function.scheduling.selectors import LabelSelector
from function.scheduling.tolerations import Taint

BIG = Device("gpu", "gpu.nvidia.com", 8, "DRA", (), (("memory", "80Gi"),))
SMALL = Device("gpu", "gpu.nvidia.com", 1, "DRA", (), (("memory", "24Gi"),))
MEM_40 = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
SELECTOR = LabelSelector.parse({"matchLabels": {"gpu": "yes"}}, "s")


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Cluster, ...]:
    n = draw(st.integers(1, 8))
    out = []
    for i in range(n):
        pools = tuple(
            Pool(f"p{j}", draw(st.integers(0, 4)), (draw(st.sampled_from([BIG, SMALL])),))
            for j in range(draw(st.integers(1, 2)))
        )
        out.append(
            Cluster(
                f"c{i}",
                {"gpu": draw(st.sampled_from(["yes", "no"]))},
                ready=draw(st.booleans()) or draw(st.booleans()),
                taints=(Taint("t", "", "NoSchedule"),) if draw(st.integers(0, 4)) == 0 else (),
                pools=pools,
            )
        )
    return tuple(out)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    clusters = draw(fleets())
    gang = draw(st.booleans())
    req = (DeviceRequest("gpu", 1, (MEM_40,)),)
    if gang:
        members = (Member("Leader", 1, req), Member("Worker", draw(st.integers(1, 2)), req))
    else:
        members = (Member("Standalone", 1, req),)
    engine = Engine("e", draw(st.integers(1, 2)), members)
    used = {(c.name, p.name): draw(st.integers(0, p.nodes)) for c in clusters for p in c.pools}
    phases = st.sampled_from(["Ready", "Hydrating", "Failed"])
    footprint = None
    if draw(st.booleans()):
        footprint = {c.name: draw(phases) for c in clusters if draw(st.booleans())}
    return Request(
        replicas=draw(st.integers(0, 8)),
        engines=(engine,),
        selector=SELECTOR,
        clusters=clusters,
        used=used,
        footprint=footprint,
        cache="c" if footprint is not None else None,
    )


def eligible(r: Request, c: Cluster) -> bool:
    if not c.ready or not SELECTOR.matches(c.labels) or c.taints:
        return False
    return r.footprint is None or r.footprint.get(c.name) in ("Ready", "Hydrating", "Pending")


@settings(max_examples=150, deadline=None)
@given(requests())
def test_new_placement_invariants(r: Request) -> None:
    p = place(r)
    clusters = {c.name: c for c in r.clusters}
    assert len({x.index for x in p.replicas}) == len(p.replicas)
    assert len(p.replicas) <= r.replicas
    if p.reason is None:
        assert len(p.replicas) == r.replicas
    else:
        assert len(p.replicas) < r.replicas and p.message
    load = dict(r.used)
    e = r.engines[0]
    for x in p.replicas:
        assert eligible(r, clusters[x.cluster]), (x, clusters[x.cluster])
        for i in range(len(e.members)):
            key = (x.cluster, x.pools[(e.name, i)])
            load[key] = load.get(key, 0) + e.cost(i)
    for (cname, pname), n in load.items():
        pool = clusters[cname].pool(pname)
        assert pool is not None and n <= pool.nodes, (cname, pname, n)


@settings(max_examples=150, deadline=None)
@given(requests())
def test_spread_before_pack(r: Request) -> None:
    """With room everywhere, no cluster gets a second replica before every eligible
    cluster whose devices fit has one."""
    roomy = tuple(
        Cluster(
            c.name,
            c.labels,
            c.ready,
            c.taints,
            tuple(Pool(p.name, 100, p.devices) for p in c.pools),
        )
        for c in r.clusters
    )
    p = place(Request(**{**r.__dict__, "clusters": roomy, "used": {}}))
    counts: dict[str, int] = {}
    for x in p.replicas:
        counts[x.cluster] = counts.get(x.cluster, 0) + 1
    fits = {
        c.name
        for c in roomy
        if eligible(r, c) and any(d.capacity == BIG.capacity for pl in c.pools for d in pl.devices)
    }
    assert set(counts) <= fits
    if any(n > 1 for n in counts.values()):
        assert set(counts) == fits
    # Ready before Hydrating in the spread round.
    if r.footprint is not None and len(counts) < len(fits):
        ready = {c for c in fits if r.footprint.get(c) == "Ready"}
        if set(counts) - ready:
            assert ready <= set(counts)


@settings(max_examples=100, deadline=None)
@given(requests())
def test_order_of_clusters_does_not_matter(r: Request) -> None:
    shuffled = Request(**{**r.__dict__, "clusters": tuple(reversed(r.clusters))})
    a, b = place(r), place(shuffled)
    assert [(x.index, x.cluster, dict(x.pools)) for x in a.replicas] == [
        (x.index, x.cluster, dict(x.pools)) for x in b.replicas
    ]
    assert (a.reason, a.message) == (b.reason, b.message)


@settings(max_examples=100, deadline=None)
@given(requests(), st.integers(0, 8))
def test_second_reconcile_keeps_what_the_first_placed(r: Request, extra: int) -> None:
    first = place(r)
    existing = tuple(Existing(x.index, x.cluster, dict(x.pools)) for x in first.replicas)
    # Same fleet, others' usage unchanged, own replicas now observed; scale up by extra.
    again = place(Request(**{**r.__dict__, "existing": existing, "replicas": r.replicas + extra}))
    kept = {(x.index, x.cluster) for x in again.replicas if x.existing}
    assert kept == {(x.index, x.cluster) for x in first.replicas}
    assert again.removed == []
    assert len(again.replicas) >= len(first.replicas)
