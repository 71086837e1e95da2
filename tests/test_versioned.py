"""Readings memoized by an object's uid and resourceVersion (issue 14, per-call cost):
``function.core.versioned``.

The contract they rest on is Kubernetes': an object's ``resourceVersion`` changes on
every write of it, and its ``uid`` is unique. So the tests check the three cases that
matter: the same version is read once, a new version is read again, and an object
without both fields is read every time. Then the ModelCache, the hot path that uses
them, answers byte for byte what it answers without versions, on a cold and a warm
memo, and sees a cluster that changed (new resourceVersion) at once.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct

import function.composers.modelcache  # noqa: F401 - registers its readings
from function.core import memo, versioned
from function.edge.runner import FunctionRunner
from function.render import build_request

NS = "ml-team"


def _struct(body: dict[str, Any]) -> Struct:
    s = Struct()
    s.update(body)
    return s


def _obj(uid: str | None = "u1", rv: str | None = "7", **extra: Any) -> Struct:
    meta: dict[str, Any] = {"name": "c"}
    if uid is not None:
        meta["uid"] = uid
    if rv is not None:
        meta["resourceVersion"] = rv
    return _struct({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **extra})


@pytest.mark.parametrize(
    ("item", "want"),
    [
        (_obj(), ("u1", "7")),
        (_obj(uid=None), None),
        (_obj(rv=None), None),
        (_obj(uid=""), None),
        (_obj(rv=""), None),
        (_struct({"kind": "ConfigMap"}), None),
        (_struct({"metadata": "not a map"}), None),
        (_struct({"metadata": {"uid": 3, "resourceVersion": "7"}}), None),
    ],
)
def test_version_of(item: Struct, want: Any) -> None:
    before = item.SerializeToString(deterministic=True)
    assert versioned.version_of(item) == want
    # A pure read: indexing a protobuf map of messages inserts the key (upb), so an
    # absent metadata, uid or resourceVersion must not be read that way (a trial found
    # metadata: {uid: null, resourceVersion: null} written into required objects).
    assert item.SerializeToString(deterministic=True) == before


def _counting() -> tuple[Any, list[str]]:
    read: list[str] = []

    def data(item: Struct) -> str:
        v = item.fields["data"].string_value
        read.append(v)
        return v

    return versioned.reading(16)(data), read


def test_a_reading_is_read_once_per_version() -> None:
    data, read = _counting()
    assert data(_obj(data="a")) == "a"
    assert data(_obj(data="a")) == "a"  # same uid and resourceVersion: the memo
    assert read == ["a"]
    assert data(_obj(rv="8", data="b")) == "b"  # written again: read again
    assert data(_obj(uid="u2", data="c")) == "c"  # another object
    assert read == ["a", "b", "c"]
    # A version the caller read already is used as it is (u1 is kept at version 8 now).
    assert data(_obj(uid="u9", data="d"), ("u1", "8")) == "b"
    assert data(_obj(data="e"), None) == "e"  # None: not known, read
    assert read == ["a", "b", "c", "e"]


def test_an_object_written_again_replaces_its_reading() -> None:
    data, read = _counting()
    for rv in range(1, 20):
        assert data(_obj(rv=str(rv), data=f"v{rv}")) == f"v{rv}"
    assert data.memo.cache_info().currsize == 1  # one entry per object, not per version
    assert data(_obj(rv="19", data="v19")) == "v19"
    assert read == [f"v{rv}" for rv in range(1, 20)]


def test_a_list_whose_fields_hold_a_separator_is_not_remembered() -> None:
    assert versioned.digest((("a\x01b", "c"),)) is None
    assert versioned.digest((("a", "b"), ("c\x00", "d"))) is None
    assert versioned.digest((("a", "b"),)) != versioned.digest((("a", "c"),))
    calls: list[int] = []

    @versioned.over_versions(8)
    def count(items: tuple[Struct, ...], versions: Any) -> int:
        calls.append(1)
        return len(items)

    odd = (("u\x01", "1"),)
    count((_obj(),), odd)
    count((_obj(),), odd)
    assert len(calls) == 2


def test_an_object_without_a_version_is_read_every_time() -> None:
    data, read = _counting()
    for _ in range(3):
        assert data(_obj(uid=None, data="x")) == "x"
        assert data(_obj(rv=None, data="y")) == "y"
    assert read == ["x", "y"] * 3
    assert data.memo.cache_info().currsize == 0


def test_readings_share_the_process_budget() -> None:
    names = set(memo.report()["memos"])
    for want in (
        "function.core.versioned.object_facts",
        "function.api.inferencecluster.host_problem",
        "function.api.modelcacheshard.read_report",
        "function.core.inputs._all_admitted",
        "function.composers.modelcache.footprint._footprint",
    ):
        assert want in names, sorted(names)


def test_a_list_is_remembered_only_when_every_version_is_known() -> None:
    calls: list[int] = []

    @versioned.over_versions(8)
    def count(items: tuple[Struct, ...], versions: Any, tag: str) -> int:
        calls.append(len(items))
        return len(items)

    a, b = _obj(uid="a"), _obj(uid="b")
    known = (versioned.version_of(a), versioned.version_of(b))
    assert count((a, b), known, "t") == 2
    assert count((a, b), known, "t") == 2
    assert calls == [2]
    assert count((a, b), known, "other") == 2  # other arguments: another entry
    assert count((b, a), known[::-1], "t") == 2  # another order: another entry
    assert len(calls) == 3
    partial = (known[0], None)
    count((a, _obj(uid=None)), partial, "t")
    count((a, _obj(uid=None)), partial, "t")
    count((a, b), None, "t")
    assert len(calls) == 6  # never remembered


# ---- the ModelCache over versioned clusters ------------------------------------------


def _cluster(i: int, *, ready: bool = True, versions: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"gpu-{i:03d}",
        "labels": {"tier": "prod", "region": ("eu", "us")[i % 2]},
    }
    if versions:
        meta["uid"] = str(uuid.UUID(int=i + 1))
        meta["resourceVersion"] = "10" if ready else "11"
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": meta,
        "status": {
            "providerConfigRef": {"name": f"gpu-{i:03d}"},
            "cache": {"storageClassName": "rwx"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


XR: dict[str, Any] = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "ModelCache",
    "metadata": {"name": "qwen", "namespace": NS, "uid": "xr-1"},
    "spec": {
        "source": "HuggingFace",
        "huggingFace": {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "main", "sizeGiB": 2},
        "clusterSelector": {
            "matchLabels": {"tier": "prod"},
            "matchExpressions": [{"key": "region", "operator": "In", "values": ["eu"]}],
        },
    },
}


def _respond(clusters: list[dict[str, Any]]) -> bytes:
    req = build_request(XR, {}, {"clusters": clusters})
    rsp = FunctionRunner().run(req)
    return rsp.SerializeToString(deterministic=True)


@pytest.mark.parametrize("n", [1, 40])
def test_the_modelcache_answers_the_same_with_and_without_versions(n: int) -> None:
    plain = _respond([_cluster(i, versions=False) for i in range(n)])
    versions = [_cluster(i) for i in range(n)]
    cold = _respond(copy.deepcopy(versions))
    warm = _respond(copy.deepcopy(versions))
    assert cold == plain
    assert warm == plain


def test_a_cluster_written_again_is_read_again() -> None:
    fleet = [_cluster(i) for i in range(10)]
    before = _respond(fleet)
    _respond(fleet)  # warm
    changed = [*fleet[:2], _cluster(2, ready=False), *fleet[3:]]  # new resourceVersion
    got = _respond(changed)
    assert got != before
    assert got == _respond([*fleet[:2], _cluster(2, ready=False, versions=False), *fleet[3:]])
    rsp = fnv1.RunFunctionResponse.FromString(got)
    unavailable = rsp.desired.composite.resource["status"]["unavailable"]
    assert [u["name"] for u in unavailable] == ["gpu-002"]


def test_a_foreign_object_with_its_own_uid_is_ignored_on_a_warm_memo() -> None:
    fleet = [_cluster(i) for i in range(6)]
    want = _respond(fleet)
    _respond(fleet)
    foreign = copy.deepcopy(fleet[0])
    foreign["kind"] = "ConfigMap"
    foreign["metadata"]["uid"] = "another-object"
    assert _respond([foreign, *fleet]) == want
    moved = copy.deepcopy(fleet[0])
    moved["metadata"]["labels"]["tier"] = "dev"  # not what the requirement selects
    moved["metadata"]["uid"] = "yet-another-object"
    assert _respond([moved, *fleet]) == want


def test_a_draining_shard_never_leaks_into_the_kept_footprint() -> None:
    from function.naming import cache_shard

    fleet = [_cluster(i) for i in range(10)]
    used = {cache_shard(c["metadata"]["name"]) for c in fleet}
    gone = next(n for n in range(64) if n not in used)
    draining = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCacheShard",
        "metadata": {"name": f"qwen-shard-{gone}", "namespace": NS},
        "spec": {"shard": gone, "clusters": [{"name": "left-the-selector"}]},
    }

    def desired(observed: dict[str, Any]) -> set[str]:
        req = build_request(XR, observed, {"clusters": copy.deepcopy(fleet)})
        return set(FunctionRunner().run(req).desired.resources)

    plain = desired({})
    with_draining = desired({f"shard-{gone}": draining})
    assert with_draining == plain | {f"shard-{gone}"}  # kept while it drains
    assert desired({}) == plain  # the kept footprint was not changed by that call


def _unversioned(clusters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(clusters)
    for c in out:
        c["metadata"].pop("uid", None)
        c["metadata"].pop("resourceVersion", None)
    return out


def test_versions_not_trusted_read_an_object_edited_under_the_same_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from function.ops.settings import load_settings

    fleet = [_cluster(i) for i in range(4)]
    _respond(fleet)  # warm: every cluster read once
    edited = copy.deepcopy(fleet)
    edited[2]["status"]["conditions"][0]["status"] = "False"  # same uid, same version
    fresh = _respond(_unversioned(edited))
    # Trusted (the default; what the API server guarantees): read as it was.
    assert _respond(copy.deepcopy(edited)) == _respond(_unversioned(fleet)) != fresh
    monkeypatch.setenv("MODELPLANE_TRUST_RESOURCE_VERSIONS", "false")
    try:
        runner = FunctionRunner(settings=load_settings())
        req = build_request(XR, {}, {"clusters": copy.deepcopy(edited)})
        assert runner.run(req).SerializeToString(deterministic=True) == fresh
    finally:
        versioned.trust(True)
