"""The same world gives the same response whatever order its maps arrive in (review 19b F2).

A protobuf Struct map (upb) iterates in an order that follows the order its entries
arrived in (and a per-process hash seed), and Crossplane's grpc-go marshals maps in a
random order on every call. So a message, condition, result or composed list that
follows a tenant map's iteration order differs between calls and processes for an
unchanged world: a status that never settles (Crossplane v2.4 re-reconciles on every
status write) and a Warning event per flip.

:func:`test_the_response_does_not_depend_on_map_order`: each case drives the function
(Crossplane's requirements loop, in-process) over one world whose every map -- Struct
maps and the request's own maps -- is rebuilt in 8 insertion orders, with every memo
emptied between drives, and asserts the responses are byte-identical
(``SerializeToString(deterministic=True)``: maps are compared unordered, lists and
strings as they are). It runs in a process with protobuf's pure-Python implementation,
whose maps iterate in arrival order: upb's order follows arrival only partly, so there
a case could see one order only. A precondition makes sure the map that matters
arrived with more than one first key.

:func:`test_a_check_names_the_same_key_whatever_the_insertion_order`: the map checks
themselves over plain dicts built in 8 insertion orders.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.internal import api_implementation
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import ListValue, Struct, Value

from function.core import memo
from function.core.errors import SpecError
from function.render import World, drive, load_yaml
from tests.support import harness as h
from tests.support.backfill_sim import DEPLOYMENT, TEMPLATE, Sim, eval_cronjob
from tests.support.crossplane import ROOT
from tests.support.modelplane_examples_paths import KIND_LOCAL_CPU
from tests.support.validation import load_documents

SEEDS = range(8)


def _shuffle_value(v: Value, rng: random.Random) -> None:
    kind = v.WhichOneof("kind")
    if kind == "struct_value":
        _shuffle_struct(v.struct_value, rng)
    elif kind == "list_value":
        _shuffle_list(v.list_value, rng)


def _shuffle_list(lv: ListValue, rng: random.Random) -> None:
    for x in lv.values:
        _shuffle_value(x, rng)


def _shuffle_struct(s: Struct, rng: random.Random) -> None:
    entries = []
    for k in list(s.fields):
        v = Value()
        v.CopyFrom(s.fields[k])
        _shuffle_value(v, rng)
        entries.append((k, v))
    rng.shuffle(entries)
    s.Clear()
    for k, v in entries:
        s.fields[k].CopyFrom(v)


def _shuffle_message(m: Message, rng: random.Random) -> None:
    if isinstance(m, Struct):
        _shuffle_struct(m, rng)
        return
    for fd, value in m.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            entry_value = fd.message_type.fields_by_name["value"]
            if entry_value.message_type is None:
                items = list(value.items())
                rng.shuffle(items)
                value.clear()
                for k, x in items:
                    value[k] = x
                continue
            copies = []
            for k in list(value):
                c = type(value[k])()
                c.CopyFrom(value[k])
                _shuffle_message(c, rng)
                copies.append((k, c))
            rng.shuffle(copies)
            for k, _ in copies:
                del value[k]
            for k, c in copies:
                value[k].CopyFrom(c)
        elif fd.is_repeated:
            for x in value:
                _shuffle_message(x, rng)
        else:
            _shuffle_message(value, rng)


def shuffled(req: fnv1.RunFunctionRequest, seed: int) -> fnv1.RunFunctionRequest:
    """``req`` with every map rebuilt in an insertion order drawn from ``seed``, sent
    through the wire as grpc-go would (map entries in their iteration order) and parsed
    back (upb builds the maps in arrival order)."""
    out = fnv1.RunFunctionRequest()
    out.CopyFrom(req)
    _shuffle_message(out, random.Random(seed))
    return fnv1.RunFunctionRequest.FromString(out.SerializeToString())


def _clear_memos() -> None:
    for m in memo.REGISTRY:
        m.cache_clear()


def _caller(seed: int, seen: list[fnv1.RunFunctionRequest]) -> Callable[..., Any]:
    def call(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        sent = shuffled(req, seed)
        seen.append(sent)
        return h.run(sent)

    return call


def _dig(node: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        node = node.fields[p] if isinstance(node, Struct) else node
        if isinstance(node, Value):
            kind = node.WhichOneof("kind")
            node = node.struct_value if kind == "struct_value" else node.list_value
        if isinstance(p, int):
            node = node.values[p]
            node = node.struct_value if node.WhichOneof("kind") == "struct_value" else node
    return node


@dataclass
class Drive:
    """One world: ``drive(call)`` runs it through ``call``, returning the response
    Crossplane applies; ``order(requests)`` is the iteration order of the map that
    matters, read from the requests the drive sent."""

    drive: Callable[[Callable[..., Any]], fnv1.RunFunctionResponse]
    order: Callable[[list[fnv1.RunFunctionRequest]], tuple[str, ...]]
    expect: Callable[[fnv1.RunFunctionResponse], None]


# ---- InferenceCluster: an InferenceClass with several wrong attributes -------------------

DOCS = load_documents(KIND_LOCAL_CPU)
CLASSES = [d for d in DOCS if d["kind"] == "InferenceClass"]
CLUSTER = next(d for d in DOCS if d["kind"] == "InferenceCluster")
# Seven attribute versions that are not semantic versions (the XRD admits strings of at
# most 32 characters): more than the five a message lists.
BAD_ATTRIBUTES = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf")


def _cluster_drive(call: Callable[..., Any]) -> fnv1.RunFunctionResponse:
    classes = copy.deepcopy(CLASSES)
    attrs = classes[0]["spec"]["devices"][0].setdefault("attributes", {})
    attrs.update({k: {"version": f"v-{k}"} for k in BAD_ATTRIBUTES})
    xr = copy.deepcopy(CLUSTER)
    xr.pop("status", None)
    xr["metadata"] = {**xr["metadata"], "uid": "uid-ic"}
    rsp, _ = drive(call, xr, None, World(classes))
    return rsp


def _cluster_order(reqs: list[fnv1.RunFunctionRequest]) -> tuple[str, ...]:
    for r in reqs:
        for name, res in r.required_resources.items():
            if res.items and name.startswith("class-"):
                cls = res.items[0].resource
                if cls["metadata"]["name"] == CLASSES[0]["metadata"]["name"]:
                    dev = cls["spec"]["devices"].values[0].struct_value
                    return tuple(dev.fields["attributes"].struct_value.fields)
    raise AssertionError("the class was never sent")


def _cluster_expect(rsp: fnv1.RunFunctionResponse) -> None:
    c = h.conditions(rsp)["PoolsResolved"]
    assert (c["status"], c["reason"]) == ("False", "ClassInvalid"), c
    # The first five wrong attributes by path, whatever order they arrived in.
    for k in BAD_ATTRIBUTES[:5]:
        assert f"attributes.{k}.version" in c["message"], c
    assert "foxtrot" not in c["message"] and "golf" not in c["message"], c


# ---- ModelBackfill: a CronJob whose pod template carries several refused annotations -----

APPARMOR = "container.apparmor.security.beta.kubernetes.io/"
SHUFFLED = ("e", "b", "h", "d", "a", "g", "c", "f")


class _Fn:
    """What :class:`Sim` calls: Crossplane's requirements loop over ``call``."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call

    def drive(self, composite: Any, world: World, observed: Any = None) -> Any:
        return drive(self.call, composite, observed, world)


def _backfill(where: str, entries: dict[str, str], named: str) -> Drive:
    """A ModelBackfill whose CronJob's pod template carries ``entries`` (each refused)
    under ``metadata.<where>`` (``labels``, ``annotations``) or ``spec.<where>``
    (``nodeSelector``); the status message must name ``named``."""
    section = "spec" if where == "nodeSelector" else "metadata"

    def run(call: Callable[..., Any]) -> fnv1.RunFunctionResponse:
        clock = h.Clock()
        sim = Sim(_Fn(call), clock)  # type: ignore[arg-type]
        cj = eval_cronjob()
        cj["metadata"].update(uid="11111111-2222-3333-4444-555555555555", resourceVersion="9")
        part = cj["spec"]["jobTemplate"]["spec"]["template"].setdefault(section, {})
        part.setdefault(where, {}).update(entries)
        sim.cronjobs = [cj]
        sim.add({"modelRef": {"name": DEPLOYMENT}, "templateRef": {"name": TEMPLATE}})
        clock.advance(3600)
        sim.step()
        return sim.last

    def order(reqs: list[fnv1.RunFunctionRequest]) -> tuple[str, ...]:
        for r in reqs:
            for res in r.required_resources.values():
                for item in res.items:
                    if item.resource["kind"] == "CronJob":
                        t = _dig(item.resource, ("spec", "jobTemplate", "spec", "template"))
                        keys = tuple(_dig(t, (section, where)).fields)
                        return tuple(k for k in keys if k in entries)
        raise AssertionError("the CronJob was never sent")

    def expect(rsp: fnv1.RunFunctionResponse) -> None:
        st = h.status(rsp)
        assert (st["phase"], st["reason"]) == ("Blocked", "InvalidTemplate"), st
        # The smallest refused key is named, whatever order the map arrived in.
        assert f"{where}[{named}]" in st["message"], st

    return Drive(run, order, expect)


# ---- InferenceClass: several wrong attributes (the class's own, fatal, check) -------------

CLASS = next(d for d in DOCS if d["kind"] == "InferenceClass")


def _class_drive(call: Callable[..., Any]) -> fnv1.RunFunctionResponse:
    xr = copy.deepcopy(CLASS)
    attrs = xr["spec"]["devices"][0].setdefault("attributes", {})
    attrs.update({k: {"version": f"v-{k}"} for k in BAD_ATTRIBUTES})
    return call(h.request(xr))  # type: ignore[no-any-return]


def _class_order(reqs: list[fnv1.RunFunctionRequest]) -> tuple[str, ...]:
    spec = reqs[0].observed.composite.resource["spec"]
    dev = spec["devices"].values[0].struct_value
    return tuple(k for k in dev.fields["attributes"].struct_value.fields if k in BAD_ATTRIBUTES)


def _class_expect(rsp: fnv1.RunFunctionResponse) -> None:
    (msg,) = h.fatal(rsp)
    assert "spec.devices[0].attributes.alpha.version" in msg and "golf" not in msg, msg


# ---- ModelCacheHydration: two prune Jobs failed ------------------------------------------


def _prune_drive(call: Callable[..., Any]) -> fnv1.RunFunctionResponse:
    """A hydration whose two prune Objects (different keep-lists) both failed: the one
    ``status.prune`` records must not follow the observed map's order."""
    from tests import test_side_by_side as sbs

    th = sbs.th
    observed = th.pvc("Bound")
    observed.update(sbs._observed_prune((sbs.H_NEW,), sbs.FAILED_JOB))
    observed.update(sbs._observed_prune((sbs.H_NEW, sbs.H_OLD), sbs.FAILED_JOB))
    required = {**th.resolved(), "replicas": sbs.SERVING_NEW}
    xr = copy.deepcopy(sbs._ready_new([sbs.H_NEW, sbs.H_OLD]))
    return call(th.request(xr, observed=observed, required=required))  # type: ignore[no-any-return]


def _prune_order(reqs: list[fnv1.RunFunctionRequest]) -> tuple[str, ...]:
    return tuple(k for k in reqs[-1].observed.resources if k.startswith("prune-"))


def _prune_expect(rsp: fnv1.RunFunctionResponse) -> None:
    prune = h.status(rsp)["prune"]
    assert prune["reason"] == "BackoffLimitExceeded", prune


CASES = {
    "inferencecluster-class-invalid": Drive(_cluster_drive, _cluster_order, _cluster_expect),
    "modelbackfill-apparmor-annotations": _backfill(
        "annotations", {APPARMOR + k: "unconfined" for k in SHUFFLED}, APPARMOR + "a"
    ),
    "modelbackfill-selecting-labels": _backfill(
        "labels",
        {f"leaderworkerset.sigs.k8s.io/{k}": "x" for k in SHUFFLED},
        "leaderworkerset.sigs.k8s.io/a",
    ),
    "inferenceclass-invalid": Drive(_class_drive, _class_order, _class_expect),
    "hydration-two-failed-prunes": Drive(_prune_drive, _prune_order, _prune_expect),
}


def _outputs(case: Drive) -> tuple[set[str], dict[bytes, list[int]], fnv1.RunFunctionResponse]:
    """The first keys the map that matters arrived with, and the responses by seed."""
    outputs: dict[bytes, list[int]] = {}
    firsts = set()
    rsp = fnv1.RunFunctionResponse()
    for seed in SEEDS:
        _clear_memos()
        seen: list[fnv1.RunFunctionRequest] = []
        rsp = case.drive(_caller(seed, seen))
        firsts.add(case.order(seen)[0])
        outputs.setdefault(rsp.SerializeToString(deterministic=True), []).append(seed)
    _clear_memos()
    return firsts, outputs, rsp


def main() -> None:
    """Run every case (in a process whose maps iterate in insertion order); print a
    JSON report by case id."""
    report = {}
    for name, case in CASES.items():
        firsts, outputs, rsp = _outputs(case)
        try:
            case.expect(rsp)
            wrong = None
        except Exception as e:
            wrong = repr(e)
        report[name] = {"firsts": len(firsts), "outputs": list(outputs.values()), "wrong": wrong}
    print(REPORT + json.dumps({"implementation": api_implementation.Type(), "cases": report}))


REPORT = "map-order report: "


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """:func:`main` in a process with protobuf's pure-Python implementation, whose maps
    iterate in exactly the order their entries arrived in: every shuffled order is an
    order the function's code sees (upb iterates in an order that only partly follows
    arrival, and differently in every process, so in this process a case could happen
    to see one order only)."""
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    out = subprocess.run(
        [sys.executable, "-c", "from tests.test_map_order import main; main()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(REPORT)]
    assert out.returncode == 0 and lines, out.stderr[-4000:]
    got: dict[str, Any] = json.loads(lines[-1].removeprefix(REPORT))
    assert got["implementation"] == "python", got
    return got["cases"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", list(CASES))
def test_the_response_does_not_depend_on_map_order(report: dict[str, Any], case: str) -> None:
    got = report[case]
    assert got["firsts"] > 1, "the map arrived with one first key only: the case proves nothing"
    assert len(got["outputs"]) == 1, f"{len(got['outputs'])} different responses: {got['outputs']}"
    assert got["wrong"] is None, got["wrong"]


# ---- the checks themselves, over plain dicts built in different insertion orders ----------
#
# Specs the composers read from their deterministically serialized bytes
# (``structs.plain``) arrive with sorted keys; these checks are also called on maps read
# in their wire order (a CronJob's template, ``Inputs.spec``), and must name the same key
# whichever order they see.


DEPLOYMENT_XR = load_yaml([str(ROOT / "examples" / "modeldeployment" / "xr.yaml")])[0]


def _deployment_spec(labels: dict[str, str]) -> None:
    from function.composers.deployment.spec import _validate

    raw = copy.deepcopy(DEPLOYMENT_XR["spec"])
    raw["template"].setdefault("metadata", {})["labels"] = labels
    _validate(raw)


def _unit_cases() -> dict[str, tuple[Callable[[dict[str, Any]], None], dict[str, Any], str]]:
    from function.manifests.podrules import check_pod_rules
    from function.manifests.tenancy import check_pod_access
    from function.serving.flashloader import check_level

    invalid = {f"{k}/x/y": "v" for k in SHUFFLED}
    return {
        "podrules-labels": (
            lambda d: check_pod_rules({"metadata": {"labels": d}}, "t"),
            invalid,
            "t.metadata.labels[a/x/y]",
        ),
        "podrules-annotations": (
            lambda d: check_pod_rules({"metadata": {"annotations": d}}, "t"),
            invalid,
            "t.metadata.annotations[a/x/y]",
        ),
        "podrules-node-selector": (
            lambda d: check_pod_rules({"spec": {"nodeSelector": d}}, "t"),
            invalid,
            "t.spec.nodeSelector[a/x/y]",
        ),
        "tenancy-selecting-labels": (
            lambda d: check_pod_access({}, "t.spec", {"labels": d}),
            {f"leaderworkerset.sigs.k8s.io/{k}": "x" for k in SHUFFLED},
            "t.metadata.labels[leaderworkerset.sigs.k8s.io/a]",
        ),
        "tenancy-apparmor": (
            lambda d: check_pod_access({}, "t.spec", {"annotations": d}),
            {APPARMOR + k: "unconfined" for k in SHUFFLED},
            f"t.metadata.annotations[{APPARMOR}a]",
        ),
        "flashloader-level": (
            lambda d: check_level(d, None, "spec.candidate"),
            {"tmpfsSizeLimit": "-1Gi", "image": "Not An Image!", "concurrency": 100000},
            "spec.candidate.flashLoader.concurrency",
        ),
        "deployment-reserved-labels": (
            _deployment_spec,
            {f"modelplane.ai/{k}": "x" for k in SHUFFLED},
            "key modelplane.ai/a uses",
        ),
    }


UNIT = _unit_cases()


@pytest.mark.parametrize("case", list(UNIT))
def test_a_check_names_the_same_key_whatever_the_insertion_order(case: str) -> None:
    check, entries, named = UNIT[case]
    messages = set()
    for seed in SEEDS:
        items = list(entries.items())
        random.Random(seed).shuffle(items)
        with pytest.raises(SpecError) as e:
            check(dict(items))
        messages.add(str(e.value))
    assert len(messages) == 1, messages
    assert named in messages.pop()
