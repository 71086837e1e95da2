"""NaN/Infinity numbers and non-ASCII digits in what Crossplane sends (review 15a, #4).

A protobuf ``Struct`` carries IEEE doubles, so ``NaN`` and ``±Infinity`` are valid on the
wire (JSON cannot carry them, so only a client that sends protobuf directly does), and
``str.isdigit`` accepts digits ``int()`` refuses (``"²"``). Each used to end the call
with "internal error"; a number that is not finite now reads as not known, and a
composition-resource name with a non-ASCII digit is not one the function writes.

Each mutated object gets a new ``metadata.resourceVersion``: readings are memoized per
uid and resourceVersion (``function.core.versioned``), so the unmutated object's reading
would hide the mutation.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct

from benchmarks.scenarios import SCENARIOS
from function.core.numbers import finite_int
from tests.support import harness as hh

INF, NAN = math.inf, math.nan


@functools.cache
def _base(name: str) -> bytes:
    kind, when = name.split(":")
    first, steady = SCENARIOS[kind](3)
    return first if when == "first" else steady


def _target(req: fnv1.RunFunctionRequest, where: str) -> Struct:
    kind, _, key = where.partition(":")
    if kind == "xr":
        return req.observed.composite.resource
    if kind == "obs":
        return req.observed.resources[key].resource
    return req.required_resources[key].items[0].resource


def _set(s: Struct, path: tuple[str | int, ...], value: float) -> None:
    node: Any = s
    for step in path[:-1]:
        v = node.fields[step] if isinstance(node, Struct) else node.values[step]
        node = v.struct_value if v.WhichOneof("kind") == "struct_value" else v.list_value
    node.fields[path[-1]].number_value = value


def _number(base: str, where: str, path: tuple[str | int, ...], value: float) -> bytes:
    req = fnv1.RunFunctionRequest.FromString(_base(base))
    s = _target(req, where)
    _set(s, path, value)
    if where != "xr":
        s.fields["metadata"].struct_value.fields["resourceVersion"].string_value = "mutated"
    return req.SerializeToString()


def _renamed(base: str, old: str, new: str) -> bytes:
    req = fnv1.RunFunctionRequest.FromString(_base(base))
    req.observed.resources[new].CopyFrom(req.observed.resources[old])
    return req.SerializeToString()


CASES = {
    "cache: a shard's status.summary.total +Inf": lambda: _number(
        "ModelCache:steady", "obs:shard-22", ("status", "summary", "total"), INF
    ),
    "cache: a shard's status.summary.total NaN": lambda: _number(
        "ModelCache:steady", "obs:shard-22", ("status", "summary", "total"), NAN
    ),
    "cache: observed shard-\u00b2": lambda: _renamed(
        "ModelCache:steady", "shard-22", "shard-\u00b2"
    ),
    "deployment: a replica's spec.index NaN": lambda: _number(
        "ModelDeployment:steady", "obs:replica-0", ("spec", "index"), NAN
    ),
    "deployment: a replica's spec.index -Inf": lambda: _number(
        "ModelDeployment:steady", "obs:replica-0", ("spec", "index"), -INF
    ),
    "deployment: capacity read from spec.engines[0].copies +Inf": lambda: _number(
        "ModelDeployment:first",
        "req:replicas-on-gpu-us-east-1a",
        ("spec", "engines", 0, "copies"),
        INF,
    ),
    "deployment: observed replica-\u00b2": lambda: _renamed(
        "ModelDeployment:steady", "replica-0", "replica-\u00b2"
    ),
    "experiment: metadata.generation +Inf": lambda: _number(
        "ModelExperiment:first", "xr", ("metadata", "generation"), INF
    ),
    "experiment: metadata.generation NaN": lambda: _number(
        "ModelExperiment:first", "xr", ("metadata", "generation"), NAN
    ),
    "experiment: the cache's metadata.generation +Inf": lambda: _cache_generation(INF),
    "replica: the workload's status.availableReplicas NaN": lambda: _number(
        "ModelReplica:steady",
        "obs:workload-vllm",
        ("status", "atProvider", "manifest", "status", "availableReplicas"),
        NAN,
    ),
    "replica: the workload's spec.replicas +Inf": lambda: _number(
        "ModelReplica:steady",
        "obs:workload-vllm",
        ("status", "atProvider", "manifest", "spec", "replicas"),
        INF,
    ),
}


def _cache_generation(value: float) -> bytes:
    """The artifact cache at generation ``value``, its ArtifactReady condition stating
    observedGeneration 1 (the gate compares the two)."""
    req = fnv1.RunFunctionRequest.FromString(
        _number("ModelExperiment:first", "req:artifact-cache", ("metadata", "generation"), value)
    )
    cache = _target(req, "req:artifact-cache")
    _set(cache, ("status", "conditions", 0, "observedGeneration"), 1)
    return req.SerializeToString()


@pytest.mark.parametrize("case", list(CASES))
def test_a_number_that_is_not_finite_or_a_non_ascii_digit_is_no_internal_error(
    case: str,
) -> None:
    req = fnv1.RunFunctionRequest.FromString(CASES[case]())
    rsp = hh.run(req)
    internal = [m for m in hh.fatal(rsp) if "internal error" in m]
    assert not internal, internal


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_a_replicas_device_count_that_is_not_finite_is_named(value: float) -> None:
    req = fnv1.RunFunctionRequest.FromString(
        _number(
            "ModelReplica:steady",
            "xr",
            ("spec", "engines", 0, "members", 0, "nodeSelector", "devices", 0, "count"),
            value,
        )
    )
    (msg,) = hh.fatal(hh.run(req))
    assert "internal error" not in msg, msg
    assert "devices[0].count" in msg, msg


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (3.0, 3),
        (3, 3),
        (-2.0, -2),
        (2.7, 2),
        (0.0, 0),
        (NAN, None),
        (INF, None),
        (-INF, None),
        (True, None),
        ("3", None),
        (None, None),
        ([3], None),
    ],
)
def test_finite_int(value: Any, want: int | None) -> None:
    assert finite_int(value) == want
    s = Struct()
    if value is not None:
        s.update({"v": value})
        assert finite_int(s.fields["v"]) == want
