"""The per-call readings added for the small kinds (issue 14, per-call cost): each is a
pure reading kept by an object's uid and resourceVersion, or a validated spec kept by
its canonical bytes. For every one: the same version (or bytes) is read once, a new
version (or a changed spec) is read again, an object without a version is read every
time, and invalid input is refused on every call. Then, for every kind's benchmark
scenario, the response with versions on every object equals the one without, on a cold
and on a warm memo, and an observed child written since (new resourceVersion) is seen.
"""

from __future__ import annotations

import datetime
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct

from benchmarks.scenarios import SCENARIOS, parse
from function.composers.backfill import admit as backfill_admit
from function.composers.backfill import call as backfill_call
from function.composers.replica import observed as replica_observed
from function.core import memo, structs
from function.core.errors import SpecError
from function.edge import codec
from function.edge.runner import FunctionRunner

# The package exports its compose function under the module's name.
experiment_compose = importlib.import_module("function.composers.experiment.compose")

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


def _struct(body: dict[str, Any]) -> Struct:
    s = Struct()
    s.update(body)
    return s


def _versioned(body: dict[str, Any], rv: str | None) -> Struct:
    meta = {"name": "x", "namespace": "ml-team"}
    if rv is not None:
        meta.update(uid="u-1", resourceVersion=rv)
    return _struct({**body, "metadata": meta})


def _ready(status: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Ready", "status": status}]}}


def _workload(available: int) -> dict[str, Any]:
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"generation": 1},
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "availableReplicas": available,
        },
    }
    return {"status": {"atProvider": {"manifest": manifest}}}


def _cronjob(gpu: bool) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": 1}} if gpu else {"limits": {"cpu": "1"}}
    pod = {"containers": [{"name": "work", "image": "busybox", "resources": resources}]}
    return {"spec": {"jobTemplate": {"spec": {"template": {"spec": pod}}}}}


@dataclass(frozen=True)
class Reading:
    """A reading, what it reads of an object, and two contents that read differently."""

    name: str
    read: Callable[[Struct], Any]
    before: dict[str, Any]
    after: dict[str, Any]


READINGS = [
    Reading("observed Ready", codec._reports_ready, _ready("True"), _ready("False")),
    Reading(
        "observed workload",
        lambda o: replica_observed.observed_workload(o).serving,
        _workload(1),
        _workload(0),
    ),
    Reading(
        "CronJob accelerators", backfill_admit._accelerator_uses, _cronjob(False), _cronjob(True)
    ),
]


@pytest.fixture(autouse=True)
def _cold() -> None:
    for m in memo.REGISTRY:
        m.cache_clear()


@pytest.mark.parametrize("r", READINGS, ids=[r.name for r in READINGS])
def test_a_version_is_read_once_and_a_new_one_again(r: Reading) -> None:
    want_before, want_after = r.read(_versioned(r.before, None)), r.read(_versioned(r.after, None))
    assert want_before != want_after, "the two contents must read differently"
    assert r.read(_versioned(r.before, "1")) == want_before
    # Same uid and resourceVersion: the API server never stores other content under it,
    # so what was read is kept (this is the memo at work, not a claim about the content).
    assert r.read(_versioned(r.after, "1")) == want_before
    assert r.read(_versioned(r.after, "2")) == want_after  # written since: read again
    # Without a version, every call reads the object.
    assert r.read(_versioned(r.before, None)) == want_before
    assert r.read(_versioned(r.after, None)) == want_after


def _spec(body: dict[str, Any]) -> bytes:
    return structs.canonical(_struct({"spec": body}), "spec")


BACKFILL = {
    "modelRef": {"name": "qwen"},
    "templateRef": {"name": "embed"},
    "idleFor": "10m",
    "maxRunDuration": "1h",
}


@pytest.mark.parametrize(
    "parsed, good, changed, invalid, field",
    [
        (
            backfill_call._parsed,
            BACKFILL,
            {**BACKFILL, "idleFor": "20m"},
            {**BACKFILL, "idleFor": "0s"},
            "spec.idleFor",
        ),
    ],
    ids=["ModelBackfill"],
)
def test_a_spec_is_parsed_once_per_canonical_form(
    parsed: Callable[[bytes], Any], good: dict, changed: dict, invalid: dict, field: str
) -> None:
    first = parsed(_spec(good))
    assert parsed(_spec(good)) is first  # kept
    assert parsed(_spec(dict(reversed(list(good.items()))))) is first  # key order is no change
    other = parsed(_spec(changed))
    assert other[1] != first[1]  # a changed spec: a new definition hash
    for _ in range(2):  # refused on every call, never kept
        with pytest.raises(SpecError) as e:
            parsed(_spec(invalid))
        assert e.value.field == field


def test_the_experiment_spec_is_parsed_once_and_refused_every_time() -> None:
    req = parse(SCENARIOS["ModelExperiment"](10)[0])
    spec = req.observed.composite.resource["spec"]
    key = structs.canonical(req.observed.composite.resource, "spec")
    first = experiment_compose._parsed(key)
    assert experiment_compose._parsed(key) is first
    spec["timeout"] = "37m"
    other = experiment_compose._parsed(structs.canonical(req.observed.composite.resource, "spec"))
    assert other[1] != first[1]
    spec["candidate"] = "not an object"
    bad = structs.canonical(req.observed.composite.resource, "spec")
    for _ in range(2):
        with pytest.raises(SpecError) as e:
            experiment_compose._parsed(bad)
        assert e.value.field.startswith("spec.candidate")


def _strip_versions(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionRequest:
    out = fnv1.RunFunctionRequest()
    out.CopyFrom(req)
    objects = [r.resource for r in out.observed.resources.values()]
    for res in out.required_resources.values():
        objects.extend(i.resource for i in res.items)
    for o in objects:
        meta = o.fields.get("metadata")
        if meta is not None and "resourceVersion" in meta.struct_value.fields:
            del meta.struct_value["resourceVersion"]  # (the uid is content too: kept)
    return out


def _respond(req: fnv1.RunFunctionRequest) -> bytes:
    rsp = FunctionRunner(clock=lambda: NOW).run(req)
    return rsp.SerializeToString(deterministic=True)


KINDS = sorted(SCENARIOS)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("call", ["first", "steady"])
def test_every_kind_answers_the_same_with_and_without_versions(kind: str, call: str) -> None:
    data = SCENARIOS[kind](10)[0 if call == "first" else 1]
    req = parse(data)
    plain = _respond(_strip_versions(req))
    for m in memo.REGISTRY:
        m.cache_clear()
    assert _respond(req) == plain  # cold
    assert _respond(req) == plain  # warm


@pytest.mark.parametrize("kind", KINDS)
def test_an_observed_child_written_since_is_seen(kind: str) -> None:
    """Every observed child loses its Ready condition under a new resourceVersion: the
    warm answer equals the answer read without versions."""
    req = parse(SCENARIOS[kind](10)[1])
    _respond(req)  # warm
    for res in req.observed.resources.values():
        o = res.resource
        status = o.get_or_create_struct("status")
        status["conditions"] = [{"type": "Ready", "status": "False", "reason": "Unavailable"}]
        meta = o.fields.get("metadata")
        if meta is not None and "resourceVersion" in meta.struct_value.fields:
            meta.struct_value["resourceVersion"] = meta.struct_value["resourceVersion"] + "9"
    assert _respond(req) == _respond(_strip_versions(req))


MULTI_NODE = sorted(
    p.parent
    for p in Path(__file__).parent.glob("golden/modelreplica/*multi-node*/observed.yaml")
    if "kind: LeaderWorkerSet" in p.read_text()
    and "engines:" in (p.parent / "want.yaml").read_text()  # not gated: engines reported
)


@pytest.mark.parametrize("case", MULTI_NODE, ids=[c.name for c in MULTI_NODE])
@pytest.mark.parametrize("kind", [None, "Deployment"])
def test_a_workload_manifest_of_another_kind_is_read_as_the_plans(
    case: Path, kind: str | None
) -> None:
    """An observed LeaderWorkerSet whose manifest names no kind, or another one, is read as
    the kind the replica composes (its serving state, counts and roll): ``status.engines``
    equals the one read from the manifest as it is (``read_workload``, not the reading
    kept as the manifest's own kind)."""
    from tests.support.golden import load_request
    from tests.support.harness import run

    def engines(rsp: fnv1.RunFunctionResponse) -> Any:
        status = rsp.desired.composite.resource.fields.get("status")
        return status and status.struct_value.fields.get("engines")

    req, now = load_request(case)
    want = engines(run(req, now=now))
    assert want is not None
    changed = 0
    for res in req.observed.resources.values():
        manifest = res.resource.fields.get("status")
        manifest = manifest and manifest.struct_value.fields.get("atProvider")
        manifest = manifest and manifest.struct_value.fields.get("manifest")
        if manifest is None or manifest.struct_value.fields.get("kind") is None:
            continue
        fields = manifest.struct_value.fields
        if fields["kind"].string_value != "LeaderWorkerSet":
            continue
        if kind is None:
            del manifest.struct_value["kind"]
        else:
            manifest.struct_value["kind"] = kind
        changed += 1
    assert changed, "the case observes no LeaderWorkerSet manifest"
    assert engines(run(req, now=now)) == want
