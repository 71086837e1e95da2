"""Property tests: no crash, invalid input named, children never dropped on bad days (issue 9).

For every kind of ``function.composers.KINDS`` whose composer exists (a kind whose
module has not landed yet is skipped, with the reason), hypothesis generates
reconciles from the kind's seeds (``tests/support/reliability.py``):

- the XR: the seed's spec with 0 to 3 mutations (a value replaced by an arbitrary
  JSON value, a field deleted, an unknown field added, a type swapped, malformed
  selectors, huge and unicode strings, negative numbers), or an arbitrary spec; its
  status taken from what the function itself wrote (then mutated) or arbitrary;
- observed children: the seed's desired children as provider-kubernetes would
  echo them, with arbitrary remote states, plus arbitrary junk children;
- required resources: each requirement the function asks for is left unresolved,
  resolved empty, resolved from the seed's world, resolved with mutated items, or
  resolved with arbitrary objects.

Two calls per case (nothing resolved yet, then the mixed resolution). Properties:

1. ``FunctionRunner.run`` returns a response echoing the tag; no call ends in the
   runner's "internal error" fatal (that is an exception a composer did not expect).
2. Every fatal result names a field (``spec.``, ``status.``, ``metadata.`` ...).
3. Every condition has a non-empty message and a type Crossplane does not reserve.
4. Unknown is not empty: when a requirement is unresolved, every observed child that
   the same request would keep with that requirement resolved (from the seed's
   world) is still desired -- unless the response is fatal (Crossplane then applies
   nothing). With nothing resolved at all, every observed child is kept.
5. Invalid input is named: once every requirement resolved as the seed's world has
   it (the function has no other reason to stop), a spec that breaks the XRD's
   structural schema (a wrong type or a missing required field, within four levels
   of spec and outside embedded pod templates) gets a fatal result or a False
   condition whose message names a ``spec.`` field; a spec the function flags as
   invalid (a condition not True that refuses the input, ``benchmarks.fuzz.refusal``:
   ``Blocked``, ``Invalid...``, ``...Invalid``, ``...NotFound`` ...) never drops a
   child that the seed's valid spec keeps in the same reconcile.

The total number of generated cases is :data:`TOTAL_CASES` (split over the kinds
that exist, at least :data:`MIN_CASES_PER_KIND` each; ``MODELPLANE_FUZZ_CASES``
lowers it for a quick local run); a summary line per kind and one in total are
printed. Bugs found in other helpers' composers are listed in :data:`KNOWN_BUGS`
(strict ``xfail`` at the full count) with minimal reproductions at the end.
"""

from __future__ import annotations

import copy
import math
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.fuzz import refusal
from function import API_VERSION
from function.composers import KINDS
from function.render import World
from tests.support.harness import NOW, conditions, fatal, request, run, status
from tests.support.reliability import Seed, evolve, missing_reason, seeds, settle

# MODELPLANE_FUZZ_CASES lowers the count for a quick local run; CI uses the default.
TOTAL_CASES = int(os.environ.get("MODELPLANE_FUZZ_CASES", "10000"))
MIN_CASES_PER_KIND = min(1_000, TOTAL_CASES)
AVAILABLE = [k for k in KINDS if missing_reason(k) is None]
CASES_PER_KIND = max(MIN_CASES_PER_KIND, math.ceil(TOTAL_CASES / max(1, len(AVAILABLE))))

FIELD = re.compile(r"\b(spec|status|metadata|data|stringData)(\.[A-Za-z_$]|\[|: )")
RESERVED = {"Ready", "Synced", "Healthy", "UpToDate", "Responsive"}

RAN: dict[str, int] = {}
CALLS: dict[str, int] = {}
SECONDS: dict[str, float] = {}

# ---- strategies -------------------------------------------------------------------

NASTY_STRINGS = [
    "",
    " ",
    "-1",
    "0",
    "null",
    "true",
    "1e309",
    "NaN",
    "a" * 64,
    "x" * 300,
    "Ab" * 35_000,
    "ünïcødé-名前-🚀",
    "é" * 5_000,
    "\u202eevil\u0000nul",
    "../../etc/passwd",
    "$(MODELPLANE_MODEL)",
    "${HF_TOKEN}",
    "UPPER_case.Name",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "org/",
    "/name",
    "a/b/c",
    "2026-11-29T09:00:00Z",
    "2026-11-29T09:00:00.123456Z",
    "2026-11-29T09:00:00+02:00",
    "2099-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "29/11/2026",
    "5m",
    "-5m",
    "1h30m",
    "10Gi",
    "HuggingFace",
    "Exists",
    "In",
]
NASTY_NUMBERS = [
    0,
    -1,
    -(2**31),
    2**31,
    2**53,
    -0.5,
    0.5,
    1e300,
    -1e300,
    3.0,
    100_001,
    math.nan,
    math.inf,
    -math.inf,
]
MALFORMED_SELECTORS = [
    "everything",
    [],
    {"matchLabels": "gpu=h100"},
    {"matchLabels": {"gpu": 1}},
    {"matchLabels": {"bad key!": "x"}},
    {"matchLabels": {"k": "v" * 64}},
    {"matchLabels": {"k": "-bad-"}},
    {"matchExpressions": "gpu In h100"},
    {"matchExpressions": [{"key": "gpu", "operator": "Bogus", "values": ["x"]}]},
    {"matchExpressions": [{"key": "gpu", "operator": "In"}]},
    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": []}]},
    {"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": ["x"]}]},
    {"matchExpressions": [{"operator": "Exists"}]},
    {"matchExpressions": [{"key": "", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": [1, None]}]},
    {"matchExpressions": [None]},
    {"matchLabels": {}, "matchExpressions": [], "extra": True},
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(NASTY_NUMBERS),
    st.text(max_size=12),
    st.sampled_from(NASTY_STRINGS),
)
keys = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["name", "key", "phase", "message", "spec", "status", "labels", "values"]),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=10,
)
# Drawn values are copied: a later mutation must never change a shared constant.
any_values = st.one_of(json_values, st.sampled_from(MALFORMED_SELECTORS).map(copy.deepcopy))

REMOTE_STATES: list[Any] = [
    None,
    {},
    {"phase": "Bound"},
    {"phase": "Pending"},
    {"phase": "Lost"},
    {"active": 1, "startTime": "2026-11-29T08:59:00Z"},
    {"active": 1, "startTime": "2099-11-29T08:59:00Z"},
    {"active": 1, "startTime": "2026-11-29T08:59:00.5Z"},
    {"conditions": [{"type": "Complete", "status": "True", "message": "done"}]},
    {
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}
        ]
    },
    {"conditions": [{"type": "Failed", "status": "False"}, {"type": "Complete"}]},
    {"conditions": "garbage"},
    {"readyReplicas": 1, "replicas": 1, "availableReplicas": 1},
    {"readyReplicas": -3, "replicas": "two"},
]
CHILD_PHASES = ["Pending", "Hydrating", "Ready", "Failed", "Running", "Bogus", "", None, 7]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            yield from _paths(value[k], (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _get(root: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        root = root[p]
    return root


def _wrong_type(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return ["not-an-object", 3, [value], True]
    if isinstance(value, list):
        return [{"0": value[0] if value else None}, "not-a-list", 1]
    if isinstance(value, bool):
        return ["yes", 1, {}]
    if isinstance(value, (int, float)):
        return [str(value), [value], {"value": value}, True]
    if isinstance(value, str):
        return [123, -1, [value], {"value": value}, False, None]
    return ["x", 1, {}]


@st.composite
def mutated(draw: st.DrawFn, value: Any, max_mutations: int = 3) -> Any:
    """``value`` (a spec or status dict) with up to ``max_mutations`` random mutations."""
    value = copy.deepcopy(value)
    for _ in range(draw(st.integers(0, max_mutations))):
        if not isinstance(value, dict):
            break
        paths = list(_paths(value))[1:]
        op = draw(st.sampled_from(["replace", "delete", "insert", "retype", "nasty"]))
        if not paths or op == "insert":
            container_paths = [p for p in [(), *paths] if isinstance(_get(value, p), dict)]
            target = _get(value, draw(st.sampled_from(container_paths)))
            target[draw(keys)] = draw(any_values)
            continue
        path = draw(st.sampled_from(paths))
        parent = _get(value, path[:-1])
        leaf = path[-1]
        current = parent[leaf]
        if op == "delete":
            del parent[leaf]
        elif op == "retype":
            parent[leaf] = draw(st.sampled_from(_wrong_type(current)))
        elif op == "nasty":
            parent[leaf] = copy.deepcopy(
                draw(st.sampled_from(MALFORMED_SELECTORS + NASTY_STRINGS + NASTY_NUMBERS))
            )
        else:
            parent[leaf] = draw(any_values)
    return value


# ---- XRD structural check (types and required fields only) --------------------------

_TYPES = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int, float),
    "number": (int, float),
}


def _xrd_spec_schema(kind: str) -> dict[str, Any] | None:
    try:
        from tests.support.validation import crd_version_schema, find_xrd

        xrd = find_xrd(API_VERSION, kind)
        schema = crd_version_schema(xrd, API_VERSION.split("/")[1])
    except Exception:
        return None
    return (schema.get("properties") or {}).get("spec")


# How deep below spec the structural check looks, and subtrees it leaves alone: embedded
# Kubernetes objects (pod templates) travel to the remote API server, which validates
# them and reports through the Object's Synced condition.
MAX_DEPTH = 4
EMBEDDED = {"template", "podTemplate", "manifest", "containers", "initContainers"}


def structural_error(
    value: Any, schema: dict[str, Any] | None, path: str = "spec", depth: int = 0
) -> str | None:
    """The first wrong type or missing required field of ``value`` under ``schema``.

    Only what an XRD's structural schema states as types and ``required`` lists is
    checked (patterns, enums and bounds are the API server's job); unknown fields
    are pruned by the API server, so they are no error.
    """
    if schema is None or depth > MAX_DEPTH or schema.get("x-kubernetes-embedded-resource"):
        return None
    if schema.get("x-kubernetes-int-or-string"):
        ok: tuple[type, ...] = (int, float, str)
        if value is None or not isinstance(value, ok) or isinstance(value, bool):
            return f"{path}: want int or string"
        return None
    typ = schema.get("type")
    if value is None:  # the API server prunes a null unless the field is nullable
        return None
    wrong = typ in _TYPES and (
        not isinstance(value, _TYPES[typ]) or (typ != "boolean" and isinstance(value, bool))
    )
    if wrong:
        return f"{path}: want {typ}"
    if typ == "object" and isinstance(value, dict):
        props_ = schema.get("properties") or {}
        for req in schema.get("required") or ():
            sub_ = props_.get(req) or {}
            # The API server prunes a null (unless nullable) and then applies the field's
            # default before it validates: a required field with a default is never
            # missing (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
            # custom-resource-definitions/#defaulting-and-nullable).
            if value.get(req) is None and not sub_.get("nullable") and "default" not in sub_:
                return f"{path}.{req}: required"
        props = schema.get("properties") or {}
        for k in sorted(value, key=str):
            sub = props.get(k)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None and k not in EMBEDDED:
                err = structural_error(value[k], sub, f"{path}.{k}", depth + 1)
                if err:
                    return err
    if typ == "array" and isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            err = structural_error(v, schema["items"], f"{path}[{i}]", depth + 1)
            if err:
                return err
    return None


# ---- properties -----------------------------------------------------------------------


def _check_basic(req: fnv1.RunFunctionRequest, rsp: Any, where: str) -> None:
    assert isinstance(rsp, fnv1.RunFunctionResponse), where
    assert rsp.meta.tag == req.meta.tag, where
    for msg in fatal(rsp):
        assert not msg.startswith("internal error"), f"{where}: composer raised: {msg}"
        assert FIELD.search(msg) or "4 MiB" in msg, f"{where}: fatal names no field: {msg}"
    for c in rsp.conditions:
        assert c.message, f"{where}: condition {c.type} has no message"
        assert c.type not in RESERVED, f"{where}: reserved condition type {c.type}"
    if not fatal(rsp):
        # Explicit readiness (Crossplane counts only READY_TRUE; unspecified keeps the XR
        # unready and costs a requeue and an event per reconcile).
        assert rsp.desired.composite.ready != fnv1.READY_UNSPECIFIED, (
            f"{where}: the XR's readiness is not stated"
        )
        for name, r in rsp.desired.resources.items():
            assert r.ready != fnv1.READY_UNSPECIFIED, f"{where}: {name} has no readiness"
    rsp.SerializeToString(deterministic=True)


def _unresolved(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> list[str]:
    return sorted(n for n in rsp.requirements.resources if n not in req.required_resources)


def _fill(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, world: World
) -> fnv1.RunFunctionRequest:
    """``req`` with every requirement of ``rsp`` it leaves unresolved resolved from ``world``."""
    full = fnv1.RunFunctionRequest()
    full.CopyFrom(req)
    for name, sel in rsp.requirements.resources.items():
        if name in full.required_resources:
            continue
        res = full.required_resources[name]
        for item in world.resolve(sel):
            res.items.add().resource.update(item)
    return full


def _invalid_flag(rsp: fnv1.RunFunctionResponse) -> str | None:
    """The condition that refuses the input, by the gRPC fuzz's rule
    (:func:`benchmarks.fuzz.refusal`), with its message; or None."""
    flag = refusal(rsp)
    if flag is None:
        return None
    typ = flag.split("=", 1)[0]
    return f"{flag}: {conditions(rsp)[typ]['message']}"


def _check_keeps(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    world: World,
    where: str,
    valid_spec: Any = None,
) -> None:
    if fatal(rsp):
        return
    observed = set(req.observed.resources)
    kept = set(rsp.desired.resources)
    if not req.required_resources and rsp.requirements.resources:
        lost = observed - kept
        assert not lost, (
            f"{where}: nothing resolved yet, yet observed children dropped: {sorted(lost)}"
        )
    missing = _unresolved(req, rsp)
    if missing:
        filled = _fill(req, rsp, world)
        full = run(filled)
        _check_basic(filled, full, where + " (requirements filled from the world)")
        if not fatal(full):
            must = observed & set(full.desired.resources)
            lost = must - kept
            assert not lost, (
                f"{where}: requirement(s) {missing} unresolved dropped {sorted(lost)}, "
                f"which the same request keeps once they resolve"
            )
    flag = _invalid_flag(rsp)
    if flag and valid_spec is not None:
        valid = fnv1.RunFunctionRequest()
        valid.CopyFrom(req)
        valid.observed.composite.resource["spec"] = valid_spec
        ref = run(valid)
        if not fatal(ref) and _unresolved(valid, ref):
            # The valid spec asks for what the mutated one did not (another class, say):
            # resolved from the world, else "not known" keeps every child and any drop
            # of the flagged response would look like a loss.
            valid = _fill(valid, ref, world)
            ref = run(valid)
        _check_basic(valid, ref, where + " (the seed's valid spec)")
        if not fatal(ref):
            lost = (observed & set(ref.desired.resources)) - kept
            assert not lost, (
                f"{where}: invalid input ({flag}) dropped {sorted(lost)}, which the seed's "
                f"valid spec keeps"
            )


def _check_invalid_named(
    spec: Any, schema: dict[str, Any] | None, rsp: fnv1.RunFunctionResponse, where: str
) -> None:
    err = structural_error(spec, schema) if isinstance(spec, dict) else "spec: not an object"
    if err is None:
        return
    if fatal(rsp):
        return
    named = [
        c["message"]
        for c in conditions(rsp).values()
        if c["status"] == "False" and "spec." in c["message"]
    ]
    assert named, (
        f"{where}: spec breaks the XRD ({err}) but the response has no fatal result and no "
        f"False condition naming a spec field: {conditions(rsp)}"
    )


# ---- the test ----------------------------------------------------------------------


def _baselines(kind: str) -> list[tuple[Seed, list[dict[str, Any]], dict[str, Any]]]:
    """Per seed: statuses the function wrote, and the desired children as observed."""
    out = []
    for seed in seeds(kind):
        _, rsp = settle(seed)
        statuses = [status(rsp)] if not fatal(rsp) else []
        out.append((seed, statuses, evolve(rsp)))
    return out


@st.composite
def cases(
    draw: st.DrawFn, kind: str, baselines: list[tuple[Seed, list[dict[str, Any]], dict[str, Any]]]
) -> tuple[Seed, dict[str, Any], dict[str, dict[str, Any]]]:
    seed, statuses, children = draw(st.sampled_from(baselines))
    body = copy.deepcopy(seed.xr)
    if draw(st.integers(0, 9)) == 0:
        body["spec"] = draw(st.one_of(json_values, st.dictionaries(keys, json_values, max_size=6)))
    else:
        body["spec"] = draw(mutated(body.get("spec") or {}))
    which = draw(st.integers(0, 3))
    if which == 1 and statuses:
        body["status"] = draw(mutated(draw(st.sampled_from(statuses)), 2))
    elif which == 2:
        body["status"] = draw(st.dictionaries(keys, json_values, max_size=4))
    if draw(st.integers(0, 19)) == 0:
        body["metadata"]["name"] = draw(st.sampled_from(["a" * 253, "x", "with.dots.name"]))
    observed: dict[str, dict[str, Any]] = {}
    for name in draw(st.lists(st.sampled_from(sorted(children)), unique=True)) if children else []:
        obs = copy.deepcopy(children[name])
        if obs.get("kind") == "Object":
            remote = copy.deepcopy(draw(st.one_of(st.sampled_from(REMOTE_STATES), json_values)))
            manifest = obs["status"]["atProvider"]["manifest"]
            if remote is not None:
                manifest["status"] = remote
            if draw(st.booleans()):
                obs["status"]["conditions"] = [
                    {
                        "type": "Synced",
                        "status": "False",
                        "reason": "ReconcileError",
                        "message": draw(st.sampled_from(NASTY_STRINGS)),
                    }
                ]
        else:
            obs["status"] = {
                "phase": draw(st.sampled_from(CHILD_PHASES)),
                "message": draw(st.sampled_from(NASTY_STRINGS)),
            }
        if draw(st.integers(0, 9)) == 0:
            obs = draw(mutated(obs, 2))
        observed[name] = obs
    for _ in range(draw(st.integers(0, 2))):
        junk = draw(st.dictionaries(keys, json_values, max_size=4))
        if draw(st.booleans()):
            junk.update({"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object"})
        observed[draw(st.text(min_size=1, max_size=20))] = junk
    return seed, body, observed


def _resolution(draw: st.DrawFn, sel: fnv1.ResourceSelector, world: World) -> tuple[Any, bool]:
    """A resolution of requirement ``sel`` and whether it is the seed world's own."""
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return None, False  # not resolved yet
    if choice == 1:
        return [], False
    items = world.resolve(sel)
    if choice in (2, 3):
        return copy.deepcopy(items), True
    if choice == 4:
        return [draw(mutated(i, 2)) for i in items], False
    return draw(st.lists(st.dictionaries(keys, json_values, max_size=4), max_size=3)), False


# Bugs the fuzzer found in composers owned by other helpers (reported to the lead).
# strict: once fixed the test XPASSes and fails, so the marker gets removed.
KNOWN_BUGS: dict[str, str] = {}


def _kind_params() -> list[Any]:
    return [
        # strict only at the full count: a quick local run may not reach the bug
        pytest.param(k, marks=pytest.mark.xfail(strict=TOTAL_CASES >= 10_000, reason=KNOWN_BUGS[k]))
        if k in KNOWN_BUGS
        else k
        for k in KINDS
    ]


def _say(config: pytest.Config, line: str) -> None:
    """Print ``line`` on the terminal, past pytest's output capture."""
    capman = config.pluginmanager.get_plugin("capturemanager")
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if capman is None or tr is None:
        return
    with capman.global_and_fixture_disabled():
        tr.ensure_newline()
        tr.write_line(line)


@pytest.mark.parametrize("kind", _kind_params())
def test_fuzz(kind: str, pytestconfig: pytest.Config) -> None:
    """CASES_PER_KIND generated reconciles of ``kind`` keep every property above."""
    reason = missing_reason(kind)
    if reason:
        pytest.skip(reason)
    baselines = _baselines(kind)
    schema = _xrd_spec_schema(kind)
    counter = {"cases": 0, "calls": 0}
    started = time.perf_counter()

    @settings(
        max_examples=CASES_PER_KIND,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases(kind, baselines), data=st.data())
    def check(case: tuple[Seed, dict[str, Any], dict[str, dict[str, Any]]], data: Any) -> None:
        seed, body, observed = case
        world = World(seed.world)
        counter["cases"] += 1
        where = f"{seed.id} case {counter['cases']}"
        req1 = request(body, observed=observed, tag=f"fuzz-{counter['cases']}")
        rsp1 = run(req1, now=NOW)
        counter["calls"] += 1
        _check_basic(req1, rsp1, where + " call 1")
        _check_keeps(req1, rsp1, world, where + " call 1", seed.xr.get("spec"))
        if not rsp1.requirements.resources:  # final: the function asks for nothing
            _check_invalid_named(body.get("spec"), schema, rsp1, where + " call 1")
        if fatal(rsp1) or not rsp1.requirements.resources:
            return
        drawn = {
            name: _resolution(data.draw, sel, world)
            for name, sel in sorted(rsp1.requirements.resources.items())
        }
        resolved = {name: value for name, (value, _) in drawn.items()}
        healthy = all(ok for _, ok in drawn.values())
        req2 = request(body, observed=observed, required=resolved, tag=req1.meta.tag)
        rsp2 = run(req2, now=NOW)
        counter["calls"] += 1
        _check_basic(req2, rsp2, where + " call 2")
        _check_keeps(req2, rsp2, world, where + " call 2", seed.xr.get("spec"))
        # Once everything it asked for resolved as the seed's world has it, the function
        # has no other reason to stop: an invalid spec must be named then.
        if healthy and not _unresolved(req2, rsp2):
            _check_invalid_named(body.get("spec"), schema, rsp2, where + " call 2")

    try:
        check()
    finally:  # counted also when a known bug fails the kind (xfail)
        RAN[kind] = counter["cases"]
        CALLS[kind] = counter["calls"]
        SECONDS[kind] = time.perf_counter() - started
        _say(
            pytestconfig,
            f"fuzz {kind}: {counter['cases']} cases, {counter['calls']} RunFunction calls "
            f"in {SECONDS[kind]:.1f}s",
        )
    assert counter["cases"] >= CASES_PER_KIND, (
        f"hypothesis ran {counter['cases']} cases of {kind}, wanted {CASES_PER_KIND}"
    )


def test_fuzz_total(pytestconfig: pytest.Config) -> None:
    """At least TOTAL_CASES cases ran over the kinds that exist (when all ran here)."""
    ran = {k: RAN[k] for k in AVAILABLE if k in RAN}
    if len(ran) < len(AVAILABLE):
        pytest.skip("not every kind's fuzz test ran in this session")
    total = sum(ran.values())
    _say(
        pytestconfig,
        (
            f"fuzz summary: {total} generated cases ({sum(CALLS.values())} RunFunction calls) "
            f"over {len(ran)} kinds in {sum(SECONDS.values()):.1f}s; skipped kinds: "
            f"{sorted(set(KINDS) - set(AVAILABLE)) or 'none'}; kinds with a known bug: "
            f"{sorted(set(KNOWN_BUGS) & set(ran)) or 'none'}"
        ),
    )
    assert total >= TOTAL_CASES


# ---- minimal reproductions of the bugs above ------------------------------------------


def _seed(kind: str, label: str) -> Seed:
    found = [s for s in seeds(kind) if s.label == label]
    if not found:
        pytest.skip(f"seed {kind}:{label} is not there (example changed)")
    return found[0]


def test_deployment_device_selectors_of_wrong_type_are_named() -> None:
    """Fixed: a nodeSelector of the wrong shape is a fatal result naming the field."""
    if missing_reason("ModelDeployment"):
        pytest.skip(missing_reason("ModelDeployment"))
    body = copy.deepcopy(_seed("ModelDeployment", "example-modeldeployment-qwen-chat").xr)
    member = body["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"] = 1.5
    rsp = run(request(body))
    _check_basic(request(body), rsp, "ModelDeployment selectors=1.5")


def test_backfill_status_phase_of_wrong_type_does_not_crash() -> None:
    if missing_reason("ModelBackfill"):
        pytest.skip(missing_reason("ModelBackfill"))
    body = copy.deepcopy(_seed("ModelBackfill", "example-modelbackfill-chat-gsm8k").xr)
    body["status"] = {"phase": {"unexpected": "object"}}
    req = request(body)
    _check_basic(req, run(req), "ModelBackfill status.phase={...}")


def test_cache_spec_types_are_strict() -> None:
    """sizeGiB "2" or true is named, not coerced (fixed in function/api/modelcache.py)."""
    for bad in ("2", True):
        body = copy.deepcopy(_seed("ModelCache", "builder-selector").xr)
        body["spec"]["huggingFace"]["sizeGiB"] = bad
        msgs = fatal(run(request(body)))
        assert msgs and "spec.huggingFace.sizeGiB" in msgs[0], (bad, msgs)


def test_backfill_cronjob_template_of_the_wrong_shape_is_named() -> None:
    if missing_reason("ModelBackfill"):
        pytest.skip(missing_reason("ModelBackfill"))
    s = _seed("ModelBackfill", "example-modelbackfill-chat-gsm8k-fresh")
    world = copy.deepcopy(s.world)
    for d in world:
        if d.get("kind") == "CronJob":
            d["spec"]["jobTemplate"] = True
    req, rsp = settle(Seed(s.kind, s.label, s.xr, world))
    _check_basic(req, rsp, "ModelBackfill with spec.jobTemplate: true")


# ---- the properties can fail ----------------------------------------------------------


def _rsp(fatal_msg: str | None = None, keep: tuple[str, ...] = ()) -> fnv1.RunFunctionResponse:
    rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag="t"))
    if fatal_msg:
        rsp.results.add(severity=fnv1.SEVERITY_FATAL, message=fatal_msg)
    for k in keep:
        rsp.desired.resources[k].resource.update({"kind": "X"})
    rsp.requirements.resources["r"].kind = "InferenceCluster"
    return rsp


def test_properties_catch_what_they_are_for() -> None:
    from tests.support.fixtures import cache_spec
    from tests.support.harness import xr

    body = xr("ModelCache", "c", cache_spec({}))
    req = request(body, observed={"a": {"kind": "X"}, "b": {"kind": "X"}}, tag="t")
    with pytest.raises(AssertionError, match="composer raised"):
        _check_basic(req, _rsp("internal error composing ModelCache x/y: KeyError"), "w")
    with pytest.raises(AssertionError, match="names no field"):
        _check_basic(req, _rsp("something went wrong"), "w")
    _check_basic(req, _rsp("invalid ModelCache x/y: spec.clusterSelector: is required"), "w")
    with pytest.raises(AssertionError, match="nothing resolved yet"):
        _check_keeps(req, _rsp(keep=("a",)), World([]), "w")
    _check_keeps(req, _rsp(keep=("a", "b")), World([]), "w")
    _check_keeps(req, _rsp("spec.x: bad"), World([]), "w")  # fatal: Crossplane applies nothing


def test_the_invalid_flag_is_the_grpc_fuzz_refusal() -> None:
    """Review 15a #5: a held ModelExperiment says Runnable=False TemplateInvalid and
    Verdict=Unknown Blocked; the earlier flag (False with Blocked/Invalid...) missed both,
    so a drop under it was never compared with the valid spec's."""
    rsp = fnv1.RunFunctionResponse()
    rsp.conditions.add(
        type="Runnable", status=fnv1.STATUS_CONDITION_FALSE, reason="TemplateInvalid",
        message="CronJob x (spec.gauntlet.templateRef): spec.jobTemplate...: is empty",
    )  # fmt: skip
    rsp.conditions.add(
        type="Verdict", status=fnv1.STATUS_CONDITION_UNKNOWN, reason="Blocked", message="held"
    )
    assert _invalid_flag(rsp) == (
        "Runnable=False TemplateInvalid: CronJob x (spec.gauntlet.templateRef): "
        "spec.jobTemplate...: is empty"
    )
    del rsp.conditions[0]
    assert _invalid_flag(rsp) == "Verdict=Unknown Blocked: held"
    rsp.conditions[0].reason = "Deploying"
    assert _invalid_flag(rsp) is None


def test_structural_check() -> None:
    schema = {
        "type": "object",
        "required": ["a"],
        "properties": {
            "a": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "s": {"type": "array", "items": {"type": "string"}},
        },
    }
    assert structural_error({"a": {"n": 1}, "s": ["x"]}, schema) is None
    assert structural_error({"a": {"n": None}}, schema) is None  # null is pruned
    assert structural_error({"a": {"n": 1.5}, "zzz": 1}, schema) is None  # unknown pruned
    assert structural_error({}, schema) == "spec.a: required"
    assert structural_error({"a": None}, schema) == "spec.a: required"
    assert structural_error({"a": {"n": "1"}}, schema) == "spec.a.n: want integer"
    assert structural_error({"a": {"n": True}}, schema) == "spec.a.n: want integer"
    assert structural_error({"a": {}, "s": [1]}, schema) == "spec.s[0]: want string"
    # A required field with a default is defaulted by the API server before it validates
    # (an XRD's serving.mode: required, default Unified).
    defaulted = {
        "type": "object",
        "required": ["mode"],
        "properties": {"mode": {"type": "string", "default": "Unified"}},
    }
    assert structural_error({}, defaulted) is None
    assert structural_error({"mode": None}, defaulted) is None
    assert structural_error({"mode": 3}, defaulted) == "spec.mode: want string"
