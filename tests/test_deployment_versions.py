"""The ModelDeployment's memos and readings (issue 14, per-call cost) see every change.

The composer reads each InferenceCluster, ModelCacheHydration and observed ModelReplica
once per ``(uid, resourceVersion)`` (``function.core.versioned``), keeps its index of a
list by the list's versions, and memoizes what it derives from the spec by the spec's
canonical form. The API server changes an object's ``resourceVersion`` on every write,
so an object written again must be read again: each row below writes one object (a new
``resourceVersion``) or edits the spec after a warm call, and checks the answer against
the one computed from scratch (the same objects without versions, every memo cleared).
A spec that is not valid fails on every call, never from a memo.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.struct_pb2 import Struct

from function.composers.deployment import fleet, spec, status
from function.core import memo, versioned
from function.naming import source_identity
from tests.support import harness as h
from tests.test_deployment import C5_WORLD, L4_DEVICE, deployment, engine, hydration, observe

Docs = list[dict[str, Any]]
Observed = dict[str, dict[str, Any]]
NEW = source_identity("Qwen/Qwen2.5-7B-Instruct", "v2")


def _cold() -> None:
    """Forget every memo of the process (what a new compute process starts with)."""
    for m in memo.REGISTRY:
        m.cache_clear()


@pytest.fixture(autouse=True)
def _cold_memos() -> None:
    """Each test starts on a cold memo: the rows reuse uids with other content at the
    same resourceVersion (which the API server never does)."""
    _cold()


def _stamp(doc: dict[str, Any], rv: str = "1") -> dict[str, Any]:
    """``doc`` as the API server returns it: with a uid (stable per kind and name) and a
    resourceVersion."""
    out = copy.deepcopy(doc)
    meta = out.setdefault("metadata", {})
    meta.setdefault("uid", f"uid-{out.get('kind', '').lower()}-{meta.get('name', '')}")
    meta["resourceVersion"] = rv
    return out


def _unstamped(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out.get("metadata", {}).pop("uid", None)
    out.get("metadata", {}).pop("resourceVersion", None)
    return out


def _answer(xr: dict[str, Any], docs: Docs, observed: Observed) -> bytes:
    rsp, _ = h.drive(h.run, xr, observed, h.World(copy.deepcopy(docs)))
    return rsp.SerializeToString(deterministic=True)


def _fresh(xr: dict[str, Any], docs: Docs, observed: Observed) -> bytes:
    """The answer computed from scratch: no versions, no memo."""
    _cold()
    plain = {k: _unstamped(v) for k, v in observed.items()}
    return _answer(xr, [_unstamped(d) for d in docs], plain)


def _steady() -> tuple[dict[str, Any], Docs, Observed]:
    """Two replicas placed on gpu-a (hydration Ready) and gpu-b (Hydrating), observed, the
    one on gpu-a serving; every object with a uid and resourceVersion."""
    xr = deployment(2)
    docs = [_stamp(d) for d in C5_WORLD]
    first, _ = h.drive(h.run, xr, None, h.World(copy.deepcopy(docs)))
    serving = {0: ("True", "Serving", "1/1 engines serving")}
    observed = {k: _stamp(v) for k, v in observe(first, serving).items()}
    return xr, docs, observed


def _doc(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _written(doc: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> None:
    """Write ``doc`` again: apply ``change`` and give it the next resourceVersion."""
    change(doc)
    doc["metadata"]["resourceVersion"] = str(int(doc["metadata"]["resourceVersion"]) + 1)


def _cluster(name: str, change: Callable[[dict[str, Any]], None]) -> Any:
    def edit(docs: Docs, observed: Observed) -> None:
        _written(_doc(docs, "InferenceCluster", name), change)

    return edit


def _hydration_of(cluster: str, change: Callable[[dict[str, Any]], None]) -> Any:
    def edit(docs: Docs, observed: Observed) -> None:
        hyd = next(
            d
            for d in docs
            if d["kind"] == "ModelCacheHydration" and d["spec"]["clusterName"] == cluster
        )
        _written(hyd, change)

    return edit


def _replica(key: str, change: Callable[[dict[str, Any]], None]) -> Any:
    def edit(docs: Docs, observed: Observed) -> None:
        _written(observed[key], change)

    return edit


def _not_ready(c: dict[str, Any]) -> None:
    c["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Unavailable"}]


def _l4_only(c: dict[str, Any]) -> None:
    c["status"]["gpuPools"][0]["devices"] = [L4_DEVICE]


def _noexecute_taint(c: dict[str, Any]) -> None:
    c["spec"]["taints"] = [{"key": "maintenance", "value": "true", "effect": "NoExecute"}]


def _phase(phase: str) -> Callable[[dict[str, Any]], None]:
    def change(hyd: dict[str, Any]) -> None:
        hyd["status"]["phase"] = phase

    return change


def _new_identity_ready(hyd: dict[str, Any]) -> None:
    hyd["status"] = {
        "phase": "Ready",
        "source": {"repo": "Qwen/Qwen2.5-7B-Instruct", "revision": "v2", "identity": NEW},
        "stored": [{"identity": NEW}],
    }


def _new_identity_failed(hyd: dict[str, Any]) -> None:
    hyd["status"] = {
        "phase": "Failed",
        "message": "download failed",
        "source": {"repo": "Qwen/Qwen2.5-7B-Instruct", "revision": "v2", "identity": NEW},
    }


def _model_ready(status: str) -> Callable[[dict[str, Any]], None]:
    def change(r: dict[str, Any]) -> None:
        r["status"]["conditions"] = [
            {"type": "ModelReady", "status": status, "reason": "Serving", "message": "m"}
        ]

    return change


def _serves(identity: str) -> Callable[[dict[str, Any]], None]:
    def change(r: dict[str, Any]) -> None:
        r["spec"]["modelCacheRef"]["identity"] = identity

    return change


def _add(*docs: dict[str, Any]) -> Any:
    def edit(d: Docs, observed: Observed) -> None:
        d.extend(_stamp(x) for x in docs)

    return edit


def _drop(kind: str, name: str) -> Any:
    def edit(d: Docs, observed: Observed) -> None:
        d.remove(_doc(d, kind, name))

    return edit


HYD_A = hydration("gpu-a", "Ready")["metadata"]["name"]

WRITES = [
    ("cluster-not-ready", _cluster("gpu-a", _not_ready)),
    ("cluster-devices-no-longer-fit", _cluster("gpu-a", _l4_only)),
    ("cluster-noexecute-taint", _cluster("gpu-a", _noexecute_taint)),
    ("hydration-failed", _hydration_of("gpu-a", _phase("Failed"))),
    ("hydration-ready", _hydration_of("gpu-b", _phase("Ready"))),
    ("hydration-ready-for-a-new-identity", _hydration_of("gpu-a", _new_identity_ready)),
    ("hydration-failed-for-a-new-identity", _hydration_of("gpu-a", _new_identity_failed)),
    ("replica-serving", _replica("replica-1", _model_ready("True"))),
    ("replica-not-serving", _replica("replica-0", _model_ready("False"))),
    ("replica-names-an-identity", _replica("replica-0", _serves(NEW))),
    ("hydration-gone", _drop("ModelCacheHydration", HYD_A)),
    ("cluster-gone", _drop("InferenceCluster", "gpu-a")),
    ("hydration-added", _add(hydration("gpu-c", "Ready"))),
]


@pytest.mark.parametrize(("case", "edit"), WRITES, ids=[w[0] for w in WRITES])
def test_an_object_written_again_is_read_again(case: str, edit: Any) -> None:
    xr, docs, observed = _steady()
    before = _answer(xr, docs, observed)
    assert _answer(xr, docs, observed) == before  # warm: every reading kept
    edit(docs, observed)
    got = _answer(xr, docs, observed)
    assert got != before, case  # the write matters to the answer
    assert got == _fresh(xr, docs, observed)


def test_the_answer_is_the_same_with_and_without_versions_cold_and_warm() -> None:
    xr, docs, observed = _steady()
    plain = _fresh(xr, docs, observed)
    _cold()
    assert _answer(xr, docs, observed) == plain  # cold memo
    assert _answer(xr, docs, observed) == plain  # warm memo


# ---- the spec: memoized by its canonical form ---------------------------------------


def _replicas(n: int) -> Callable[[dict[str, Any]], None]:
    def change(s: dict[str, Any]) -> None:
        s["replicas"] = n

    return change


def _ts(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(s: dict[str, Any]) -> None:
        s["template"]["spec"][key] = value

    return change


def _template_labels(s: dict[str, Any]) -> None:
    s["template"]["metadata"]["labels"] = {"team": "search"}


def _cel(expr: str) -> Callable[[dict[str, Any]], None]:
    def change(s: dict[str, Any]) -> None:
        s["template"]["spec"]["engines"] = [engine(selector=expr)]

    return change


SPEC_EDITS = [
    ("more-replicas", _replicas(3)),
    ("fewer-replicas", _replicas(1)),
    ("selector", _ts("clusterSelector", {"matchLabels": {"gpu": "a100"}})),
    (
        "selector-expression",
        _ts(
            "clusterSelector",
            {
                "matchLabels": {"gpu": "h100"},
                "matchExpressions": [{"key": "zone", "operator": "Exists"}],
            },
        ),
    ),
    (
        "toleration",
        _ts("tolerations", [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}]),
    ),
    ("template-labels", _template_labels),
    (
        "device-selector",
        _cel('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) >= 0'),
    ),
    ("device-selector-that-does-not-compile", _cel("device.attributes[")),
    ("copies", _ts("engines", [engine(copies=2)])),
]


@pytest.mark.parametrize(("case", "change"), SPEC_EDITS, ids=[e[0] for e in SPEC_EDITS])
def test_an_edited_spec_is_read_again(case: str, change: Any) -> None:
    xr, docs, observed = _steady()
    # gpu-a carries a NoExecute taint the toleration row tolerates.
    _written(_doc(docs, "InferenceCluster", "gpu-a"), _noexecute_taint)
    before = _answer(xr, docs, observed)
    assert _answer(xr, docs, observed) == before
    edited = copy.deepcopy(xr)
    change(edited["spec"])
    got = _answer(edited, docs, observed)
    assert got != before, case
    assert got == _fresh(edited, docs, observed)
    _answer(xr, docs, observed)
    assert _answer(edited, docs, observed) == got  # both specs kept, each its own answer


INVALID = [
    ("negative-replicas", _replicas(-1), "spec.replicas"),
    ("replicas-not-whole", _replicas(1.5), "spec.replicas"),
    ("no-engines", _ts("engines", []), "spec.template.spec.engines"),
    (
        "bad-selector",
        _ts("clusterSelector", {"matchExpressions": [{"key": "a", "operator": "Near"}]}),
        "spec.template.spec.clusterSelector.matchExpressions[0].operator",
    ),
    (
        "reserved-label",
        lambda s: s["template"]["metadata"].update(labels={"modelplane.ai/x": "y"}),
        "spec.template.metadata.labels",
    ),
]


@pytest.mark.parametrize(("case", "change", "field"), INVALID, ids=[e[0] for e in INVALID])
def test_an_invalid_spec_fails_on_every_call_and_is_never_kept(
    case: str, change: Any, field: str
) -> None:
    xr, docs, observed = _steady()
    good = _answer(xr, docs, observed)
    bad = copy.deepcopy(xr)
    change(bad["spec"])
    kept = spec._parsed.cache_info().currsize
    for _ in range(2):
        rsp = h.run(h.request(bad, observed=observed))
        (msg,) = h.fatal(rsp)
        assert field in msg, msg
    assert spec._parsed.cache_info().currsize == kept  # nothing kept for it
    assert _answer(xr, docs, observed) == good  # the valid spec still answers as before


# ---- each reading, as a table: same version kept, new version read again --------------


def _struct(body: dict[str, Any]) -> Struct:
    s = Struct()
    s.update(body)
    return s


def _versioned_cluster_reading(d: dict[str, Any]) -> Any:
    return fleet._versioned_cluster(_struct(d))


def _hydration_reading(d: dict[str, Any]) -> Any:
    return fleet._hydration(_struct(d))


def _replica_reading(d: dict[str, Any]) -> Any:
    return fleet._replica(_struct(d))


def _state_reading(d: dict[str, Any]) -> Any:
    return status._state_of(_struct(d))


def _observed_replica() -> dict[str, Any]:
    _, _, observed = _steady()
    return observed["replica-0"]


READINGS = [
    ("cluster", _versioned_cluster_reading, lambda: _stamp(C5_WORLD[0]), _not_ready),
    ("cluster-pools", _versioned_cluster_reading, lambda: _stamp(C5_WORLD[0]), _l4_only),
    ("cluster-taints", _versioned_cluster_reading, lambda: _stamp(C5_WORLD[0]), _noexecute_taint),
    ("hydration-phase", _hydration_reading, lambda: _stamp(C5_WORLD[4]), _phase("Failed")),
    ("hydration-identity", _hydration_reading, lambda: _stamp(C5_WORLD[4]), _new_identity_ready),
    ("hydration-failure", _hydration_reading, lambda: _stamp(C5_WORLD[4]), _new_identity_failed),
    ("replica-state", _replica_reading, _observed_replica, _model_ready("False")),
    ("replica-identity", _replica_reading, _observed_replica, _serves(NEW)),
    ("replica-condition", _state_reading, _observed_replica, _model_ready("False")),
]


@pytest.mark.parametrize(("case", "read", "make", "change"), READINGS, ids=[r[0] for r in READINGS])
def test_a_reading_is_kept_per_version_and_read_again_when_written(
    case: str, read: Any, make: Any, change: Any
) -> None:
    _cold()
    obj = make()
    before = read(obj)
    edited = copy.deepcopy(obj)
    change(edited)
    # The same uid and resourceVersion: the same object as far as the API server says
    # (what versioned.trust relies on), so the kept reading answers.
    assert read(edited) == before
    _written(edited, lambda _: None)
    after = read(edited)
    assert after != before, case
    _cold()
    assert after == read(_unstamped(edited))  # what reading it from scratch gives


def _list(names: list[str], rv: str = "1") -> tuple[tuple[Struct, ...], Any]:
    items = tuple(_struct(_stamp({"kind": "X", "metadata": {"name": n}}, rv)) for n in names)
    return items, versioned.Versions(versioned.version_of(i) for i in items)


LISTS = [
    ("renamed", ["a", "b", "c"], ["a", "z", "c"]),
    ("added", ["a", "b"], ["a", "b", "c"]),
    ("removed", ["a", "b", "c"], ["a", "c"]),
    ("reordered", ["b", "a"], ["a", "b"]),
]


@pytest.mark.parametrize(("case", "old", "new"), LISTS, ids=[x[0] for x in LISTS])
def test_the_index_of_a_list_follows_its_versions(
    case: str, old: list[str], new: list[str]
) -> None:
    _cold()
    items, versions = _list(old)
    first = fleet._index(items, versions, "k")
    assert first.position == {n: i for i, n in enumerate(old)}
    # Written again (a rename bumps the object's resourceVersion): a new list of versions.
    items, versions = _list(new, "2")
    got = fleet._index(items, versions, "k")
    assert got.position == {n: i for i, n in enumerate(new)}
    assert got.ordered == tuple(sorted(new))


FOOTPRINTS = [
    ("phase", [("gpu-a", "Ready")], [("gpu-a", "Failed")]),
    ("added", [("gpu-a", "Ready")], [("gpu-a", "Ready"), ("gpu-b", "Hydrating")]),
    ("removed", [("gpu-a", "Ready"), ("gpu-b", "Ready")], [("gpu-b", "Ready")]),
]


@pytest.mark.parametrize(("case", "old", "new"), FOOTPRINTS, ids=[x[0] for x in FOOTPRINTS])
def test_the_footprint_follows_its_hydrations_versions(
    case: str, old: list[tuple[str, str]], new: list[tuple[str, str]]
) -> None:
    _cold()

    def read(rows: list[tuple[str, str]], rv: str) -> dict[str, str]:
        items = tuple(_struct(_stamp(hydration(c, ph), rv)) for c, ph in rows)
        versions = versioned.Versions(versioned.version_of(i) for i in items)
        fp = fleet._Footprint(items, h.NAMESPACE, "qwen-cache", versions)
        lazy = {c: fp[c] for c, _ in rows}
        assert dict(fp) == lazy  # the whole footprint and each lookup agree
        return lazy

    assert read(old, "1") == dict(old)
    assert read(new, "2") == dict(new)


# ---- Versions: one digest per list ------------------------------------------------------


def test_a_lists_digest_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    computed: list[int] = []
    real = versioned.digest

    def counting(v: Any) -> Any:
        computed.append(len(v))
        return real(v)

    monkeypatch.setattr(versioned, "digest", counting)
    _, versions = _list(["a", "b"])
    assert versions.tag == real(tuple(versions))
    assert versions.tag == real(tuple(versions))
    assert computed == [2]
    _, unknown = versioned.items_with_versions([])
    assert unknown.tag is None  # an empty list is not remembered (nothing to key)
    partial = versioned.Versions([versions[0], None])
    assert partial.tag is None
    assert computed == [2, 0]


# ---- memoized bodies and rows: another argument, another answer -------------------------


def test_status_placement_rows_follow_their_input() -> None:
    rows = [
        ((0, "gpu-a", True, ""),),
        ((0, "gpu-a", False, "Starting"),),
        ((0, "gpu-b", True, ""),),
        ((1, "gpu-a", True, ""),),
        ((0, "gpu-a", True, ""), (1, "gpu-b", False, "WaitingForCache")),
    ]
    for entries in rows:
        got = [
            (int(v["index"]), v["cluster"], v["ready"], v["reason"] if "reason" in v else "")
            for v in status._placement(entries)
        ]
        assert got == list(entries)
