"""A gRPC fuzz of ``python -m function``: mutated requests over ONE channel (issue 14).

    python -m benchmarks.fuzz [--cases 10000] [--processes 2] [--seed 14]

Bases: the benchmark's scenarios (``benchmarks.scenarios``) at 10 clusters, first and
steady call of every kind, and a bring-your-own InferenceCluster's
(``benchmarks.scenarios.inferencecluster``). Each case takes a base and applies one
mutation, chosen by a seeded ``random.Random`` (the same cases every run):

- a field of the XR's ``spec`` or ``status``, of a required resource or of an observed
  child replaced by a value of another type (null, numbers negative and huge, strings
  empty, 70,000 characters and unicode, lists, objects, a value nested 150 deep) or
  deleted;
- the serialized request's bytes flipped, cut short or grown.

Eight calls are kept in flight on one channel. Counted: gRPC errors by code (``UNKNOWN``
above all), responses with an "internal error", compute processes that died while
composing (the pool's fatal result says so), and responses that drop an observed child
while a condition refuses the input (:func:`refusal`: a condition not True whose reason
is ``Blocked``, starts with ``Invalid`` or ends with ``Invalid``, ``NotFound``,
``Forbidden`` or ``Missing``, whatever the condition's type and status). A drop under
any other reason (a verdict, a cool-down, a suspension, a new run) is the lifecycle's.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import random
import re
import sys
import threading
from typing import Any

import grpc
import structlog
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from benchmarks.scenarios import SCENARIOS, inferencecluster
from function.render import start_function

METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"


def _deep(n: int) -> Any:
    v: Any = "bottom"
    for _ in range(n):
        v = {"x": v}
    return v


WRONG: list[Any] = [
    None,
    -1,
    0,
    1.5,
    10**15,
    -(10**15),
    "",
    "x",
    "\u00e9\u2713\U0001d518" * 10,
    "z" * 70_000,
    True,
    [],
    [1, "a"],
    {},
    {"a": {"b": []}},
    # Valid doubles in a protobuf Struct that int() refuses (review 15a #4).
    float("nan"),
    float("inf"),
    float("-inf"),
]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        # Sorted: a Struct's map comes out of protobuf (upb) in an order that changes
        # from process to process, and the seeded choice among the paths must not.
        for k, v in sorted(obj.items()):
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out += _paths(v, (*prefix, i))
    return out


def _mutate_dict(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    paths = [p for p in _paths(body) if len(p) >= 2 and p[0] in ("spec", "status")]
    if not paths:
        return body
    path = rng.choice(paths)
    cur = body
    for p in path[:-1]:
        cur = cur[p]
    if rng.random() < 0.15 and isinstance(cur, dict):
        cur.pop(path[-1], None)
    elif rng.random() < 0.05:
        cur[path[-1]] = _deep(150)
    else:
        cur[path[-1]] = rng.choice(WRONG)
    return body


def _set(target: Struct, body: dict[str, Any]) -> None:
    target.Clear()
    with contextlib.suppress(Exception):  # a value Struct refuses: keep the field empty
        target.update(body)


def case(rng: random.Random, bases: list[bytes]) -> tuple[bytes, set[str]]:
    """One mutated request and the names of its observed children."""
    data = rng.choice(bases)
    req = fnv1.RunFunctionRequest.FromString(data)
    observed = set(req.observed.resources)
    roll = rng.random()
    if roll < 0.1:  # bytes, in a deterministic order (a map's order varies by process)
        b = bytearray(req.SerializeToString(deterministic=True))
        how = rng.choice(("flip", "cut", "grow"))
        if how == "flip":
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif how == "cut":
            del b[rng.randrange(len(b)) :]
        else:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        return bytes(b), observed
    if roll < 0.6:
        target = req.observed.composite.resource
    elif roll < 0.8 and req.required_resources:
        r = req.required_resources[rng.choice(sorted(req.required_resources))]
        if not r.items:
            target = req.observed.composite.resource
        else:
            target = r.items[rng.randrange(len(r.items))].resource
    elif req.observed.resources:
        target = req.observed.resources[rng.choice(sorted(req.observed.resources))].resource
    else:
        target = req.observed.composite.resource
    body = json_format.MessageToDict(target)
    body = _mutate_dict(rng, body)
    # A changed object has a new resourceVersion, as the API server gives it: else the
    # function reads it from what it memoized of the unchanged one (function.core.
    # versioned), and the mutation never reaches the readers (review 15a #4).
    meta = body.get("metadata")
    if isinstance(meta, dict) and "resourceVersion" in meta:
        meta["resourceVersion"] = f"fuzz-{rng.randrange(1 << 30)}"
    _set(target, body)
    return req.SerializeToString(deterministic=True), observed


# A condition reason that refuses input: the spec or an object it names is invalid,
# missing or forbidden, or the run is Blocked (InvalidSpec, TemplateInvalid, ClassInvalid,
# TemplateNotFound, PoolNotFound, GPURequestForbidden, AuthSecretMissing, Blocked...).
REFUSAL = re.compile(r"^(Blocked|Invalid.*|.*(Invalid|NotFound|Forbidden|Missing))$")


def refusal(rsp: fnv1.RunFunctionResponse) -> str | None:
    """The first condition of ``rsp`` that refuses input, as ``"<type>=<status>
    <reason>"``, or None.

    A condition refuses input when it is not True (False or Unknown) and its reason
    matches :data:`REFUSAL`. Any status counts: a ModelExperiment held by a broken
    CronJob says ``Runnable=False TemplateInvalid`` and ``Verdict=Unknown Blocked``
    (review 15a #5, which the earlier rule, False with ``Invalid...``/``Blocked``,
    missed).
    """
    for c in rsp.conditions:
        if c.status != fnv1.STATUS_CONDITION_TRUE and REFUSAL.match(c.reason):
            name = fnv1.Status.Name(c.status).removeprefix("STATUS_CONDITION_").title()
            return f"{c.type}={name} {c.reason}"
    return None


def dropped_on_refusal(rsp: fnv1.RunFunctionResponse, observed: set[str]) -> bool:
    """Whether ``rsp`` refuses its input (:func:`refusal`) and yet drops one of the
    ``observed`` children (not fatal: Crossplane applies nothing of a fatal response)."""
    if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
        return False
    return refusal(rsp) is not None and not observed <= set(rsp.desired.resources)


def fuzz(cases: int, processes: int = 2, seed: int = 14) -> dict[str, Any]:
    """Send ``cases`` mutated requests; return the counts (see the module docstring)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    rng = random.Random(seed)
    bases = [b for k in SCENARIOS for b in SCENARIOS[k](10)] + list(inferencecluster())
    counts: collections.Counter[str] = collections.Counter()
    examples: list[str] = []
    lock = threading.Lock()
    proc, address = start_function({"PYTHONHASHSEED": "0"}, workers=processes)
    try:
        with grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 64 << 20)]
        ) as ch:
            call = ch.unary_unary(METHOD, response_deserializer=fnv1.RunFunctionResponse.FromString)
            work = [case(rng, bases) for _ in range(cases)]
            it = iter(work)

            def worker() -> None:
                while True:
                    with lock:
                        item = next(it, None)
                    if item is None:
                        return
                    data, observed = item
                    try:
                        rsp = call(data, timeout=120)
                    except grpc.RpcError as e:
                        with lock:
                            counts[f"grpc_{e.code().name}"] += 1
                        continue
                    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
                    with lock:
                        counts["calls"] += 1
                        if any("internal error" in m for m in fatal):
                            counts["internal_error"] += 1
                            if len(examples) < 5:
                                examples.append(next(m for m in fatal if "internal error" in m))
                        if any("compute process exited" in m for m in fatal):
                            counts["process_deaths"] += 1
                        if fatal:
                            counts["fatal"] += 1
                        elif dropped_on_refusal(rsp, observed):
                            counts["dropped_children_on_invalid_input"] += 1

            threads = [threading.Thread(target=worker) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        alive = proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    out = {
        "cases": cases,
        "server_alive_at_end": alive,
        "grpc_UNKNOWN": 0,
        "internal_error": 0,
        "process_deaths": 0,
        "dropped_children_on_invalid_input": 0,
        **counts,
    }
    if examples:
        out["internal_error_examples"] = examples
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit 1 when any death, UNKNOWN, internal error or drop is counted."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__)
    p.add_argument("--cases", type=int, default=10_000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--seed", type=int, default=14)
    args = p.parse_args(argv)
    out = fuzz(args.cases, args.processes, args.seed)
    print(json.dumps(out, indent=2, sort_keys=True))
    bad = (
        out["grpc_UNKNOWN"]
        + out["internal_error"]
        + out["process_deaths"]
        + out["dropped_children_on_invalid_input"]
    )
    return 1 if bad or not out["server_alive_at_end"] else 0


if __name__ == "__main__":
    sys.exit(main())
