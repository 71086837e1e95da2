"""ModelReplica hot path: memoized plans never go stale, observed workloads read leanly.

The composer memoizes what it desires per distinct input (``replica.children.plan``, keyed by
the canonical form of the spec, the cluster's provider config and ``gpuPools``, the
flash-loader and ``/dev/shm`` settings, and the XR's name). These tests change each
input in turn after a warm call and check that the response is exactly what a cold
process (caches cleared) gives, that a response's bodies are independent copies, and
that invalid input is rejected on every call. The observed-workload table covers every
``engines[].message`` the composer can give, in-process and over gRPC.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from function.composers import replica
from function.composers.replica import CONDITION, children
from function.ops.settings import Settings, default_settings
from function.serving.flashloader import SETTINGS_ATTRS, resolve_flash_loader, resolve_shm
from tests.support import harness as h
from tests.support.replica_fixtures import (
    H100_POOL,
    claim_of,
    cluster,
    model_cache,
    multi_spec,
    observed_object,
    ready_required,
    single_spec,
)
from tests.support.replica_fixtures import (
    replica as replica_xr,
)
from tests.support.table import Case, table


def clear_caches() -> None:
    for fn in (children.parsed, children.head, children.plan, children.flash, children.shm):
        fn.cache_clear()


def run(
    spec: dict[str, Any],
    req: dict[str, Any],
    *,
    observed: dict[str, Any] | None = None,
    settings: Settings | None = None,
    name: str | None = None,
) -> Any:
    xr = replica_xr(spec)
    if name is not None:
        xr["metadata"]["name"] = name
    return h.run(h.request(xr, observed=observed, required=req), settings=settings)


def wire(rsp: Any) -> bytes:
    return bytes(rsp.SerializeToString(deterministic=True))


def cold(call: Callable[[], Any]) -> bytes:
    """The response a fresh process would give."""
    clear_caches()
    return wire(call())


# ---- every input of the plan invalidates it -------------------------------------------


def _pools_with_selector() -> dict[str, Any]:
    pool = copy.deepcopy(H100_POOL)
    pool["nodeSelector"] = {"example.com/pool": "big"}
    return ready_required() | {"cluster": [cluster(pools=[pool])]}


def _no_dra_class() -> dict[str, Any]:
    pool = copy.deepcopy(H100_POOL)
    del pool["devices"][0]["deviceClassName"]
    return ready_required() | {"cluster": [cluster(pools=[pool])]}


def _other_provider_config() -> dict[str, Any]:
    return ready_required() | {"cluster": [cluster(provider_config="gpu-a-other")]}


def _flash_on() -> dict[str, Any]:
    return ready_required(flash_loader={"enabled": True, "tmpfsSizeLimit": "64Gi"})


def _spec(**changes: Any) -> dict[str, Any]:
    return single_spec(**changes)


@dataclass(frozen=True)
class Call:
    """One call's inputs: the spec, the ``required`` map, the settings (None: the
    defaults) and the XR's name (None: the fixture's)."""

    spec: dict[str, Any]
    required: dict[str, Any]
    settings: Settings | None = None
    name: str | None = None

    def run(self) -> Any:
        return run(self.spec, self.required, settings=self.settings, name=self.name)


PLAN_INPUT = "an input of the memoized plan: a change gives what a cold process gives"

# want: what must show in the response's wire form.
CHANGES: list[Case[Call, bytes]] = [
    Case("copies", PLAN_INPUT, Call(_spec(copies=3), ready_required()), b""),
    Case("shm override", PLAN_INPUT, Call(_spec(shmSizeLimit="24Gi"), ready_required()),
         b"24Gi"),
    Case("shm setting", "the operator's /dev/shm default is part of the plan's key",
         Call(_spec(), ready_required(),
              Settings.model_construct(default_shm_size_limit="12Gi")), b"12Gi"),
    Case("provider config", PLAN_INPUT, Call(_spec(), _other_provider_config()), b"gpu-a-other"),
    Case("pool node selector", "status.gpuPools is part of the plan's key",
         Call(_spec(), _pools_with_selector()), b"example.com/pool"),
    Case("pool device class gone", "status.gpuPools is part of the plan's key",
         Call(_spec(), _no_dra_class()), b"DeviceNotFound"),
    Case("cache flash loader", "the ModelCache's flash loader is part of the plan's key",
         Call(_spec(), _flash_on()), b"modelplane-flash-loader"),
    Case("flash setting", "the operator's flash-loader default is part of the plan's key",
         Call(_spec(), ready_required(),
              Settings.model_construct(default_flash_loader_enabled=True)),
         b"modelplane-flash-loader"),
    Case("xr name", "the XR's name is part of the plan's key",
         Call(_spec(), ready_required(), None, "modelreplica-ml-team-chat-0-other"), b"other"),
    Case("multi-node", PLAN_INPUT, Call(multi_spec(), ready_required()), b"LeaderWorkerSet"),
]  # fmt: skip


@table(CHANGES)
def test_a_changed_input_gives_what_a_cold_process_gives(case: Case[Call, bytes]) -> None:
    base = wire(run(single_spec(), ready_required()))  # warms every cache
    warm = wire(case.inputs.run())
    assert warm == cold(case.inputs.run), case.reason
    assert warm != base
    assert case.want in warm
    # ...and going back gives the base response again.
    assert wire(run(single_spec(), ready_required())) == base


def test_warm_and_cold_responses_are_identical_for_each_phase() -> None:
    for phase in ("Ready", "Pending", "Hydrating", "Failed"):
        call = lambda p=phase: run(single_spec(), ready_required(p))  # noqa: E731
        warm = [wire(call()) for _ in range(2)]
        assert warm[0] == warm[1] == cold(call)


def test_response_bodies_are_independent_copies() -> None:
    first = run(single_spec(), ready_required())
    want = wire(run(single_spec(), ready_required()))
    # Scribble over every body of the first response: later ones must not change.
    for res in first.desired.resources.values():
        res.resource.fields["spec"].struct_value.fields["forProvider"].Clear()
        res.resource.fields["metadata"].struct_value.fields["name"].string_value = "x"
    assert wire(run(single_spec(), ready_required())) == want


NEVER_MEMOIZED = "invalid input is never memoized: it is rejected on every call"

INVALID: list[Case[Callable[[dict[str, Any]], Any], str]] = [
    Case("negative index", NEVER_MEMOIZED, lambda s: s.update(index=-1), "spec.index"),
    Case("reserved env name", f"{NEVER_MEMOIZED} (MODELPLANE_MODEL is the function's)",
         lambda s: s["engines"][0]["members"][0]["template"]["spec"]["containers"][0].update(
             env=[{"name": "MODELPLANE_MODEL", "value": "/x"}]),
         "spec.engines[0].members[0].template.spec.containers[0].env[0].name"),
    Case("shm not a quantity", NEVER_MEMOIZED, lambda s: s.update(shmSizeLimit="lots"),
         "spec.shmSizeLimit"),
    Case("flash concurrency 0", NEVER_MEMOIZED,
         lambda s: s.update(flashLoader={"concurrency": 0}), "spec.flashLoader.concurrency"),
]  # fmt: skip


@table(INVALID)
def test_invalid_input_is_fatal_on_every_call(
    case: Case[Callable[[dict[str, Any]], Any], str],
) -> None:
    spec = single_spec()
    case.inputs(spec)
    for _ in range(3):
        fatal = h.fatal(run(spec, ready_required()))
        assert len(fatal) == 1 and case.want in fatal[0], case.reason


def test_a_cache_flash_loader_that_is_not_an_object_is_fatal_every_time() -> None:
    bad = model_cache()
    bad["spec"]["flashLoader"] = "yes"
    req = ready_required() | {"cache": [bad]}
    for _ in range(2):
        fatal = h.fatal(run(single_spec(), req))
        assert len(fatal) == 1 and "spec.flashLoader" in fatal[0] and "ModelCache" in fatal[0]


def test_plans_are_bounded_and_keep_bodies_serialized(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_caches()
    plans: list[Any] = []
    real = children.plan

    def probe(*args: Any) -> Any:
        plans.append(real(*args))
        return plans[-1]

    monkeypatch.setattr(children, "plan", probe)
    run(single_spec(), ready_required())
    run(single_spec(), ready_required())
    assert real.cache_info().maxsize == replica.CACHE_SIZE
    assert real.cache_info().currsize == 1 and real.cache_info().hits == 1
    assert (children.parsed.cache_info().maxsize or 0) <= 64  # parsed specs are large: few kept
    assert plans[0] is plans[1]
    keys = {k for k, _ in plans[0].children}
    assert keys == {claim_of(keys, "vllm", "Standalone"), "workload-vllm", "service"}
    assert all(isinstance(b, bytes) for _, b in plans[0].children)


# ---- what the observed workload says ----------------------------------------------------


def _observed(key: str, remote: dict[str, Any], edit: Callable[[dict[str, Any]], Any] | None):
    def build(desired: dict[str, Any]) -> dict[str, Any]:
        obj = observed_object(desired[key], remote)
        if edit is not None:
            edit(obj)
        return {key: obj}

    return build


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        node = obj
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value

    return edit


_AVAILABLE = {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2}


@dataclass(frozen=True)
class Observed:
    """A two-copy replica (multi-node or not) and what is observed of its children (a
    builder from the desired children, None: nothing)."""

    multi: bool
    build: Any


@dataclass(frozen=True)
class EngineState:
    """``status.engines[0]``: ready, and its message (None: none)."""

    ready: bool
    message: str | None


SERVING: list[Case[Observed, EngineState]] = [
    Case(
        "not created",
        "no Object observed yet",
        Observed(False, None),
        EngineState(False, "not created yet"),
    ),
    Case(
        "available",
        "every pod updated and available at the observed generation",
        Observed(False, _observed("workload-vllm", _AVAILABLE, None)),
        EngineState(True, None),
    ),
    Case(
        "one of two available",
        "not every pod is available",
        Observed(False, _observed("workload-vllm", {**_AVAILABLE, "availableReplicas": 1}, None)),
        EngineState(False, "1/2 pods available"),
    ),
    Case(
        "old generation",
        "the status describes an older spec",
        Observed(False, _observed("workload-vllm", {**_AVAILABLE, "observedGeneration": 0}, None)),
        EngineState(False, "2/2 pods available"),
    ),
    Case(
        "object conditions not a list",
        "a malformed status is reported, not trusted",
        Observed(
            False, _observed("workload-vllm", _AVAILABLE, _set(("status", "conditions"), "Ready"))
        ),
        EngineState(False, "reports malformed status.conditions"),
    ),
    Case(
        "remote conditions not a list",
        "a malformed status is reported, not trusted",
        Observed(False, _observed("workload-vllm", {**_AVAILABLE, "conditions": 3}, None)),
        EngineState(False, "reports malformed status.conditions"),
    ),
    Case(
        "object conditions null",
        "null conditions are absent conditions",
        Observed(
            False, _observed("workload-vllm", _AVAILABLE, _set(("status", "conditions"), None))
        ),
        EngineState(True, None),
    ),
    Case(
        "not synced",
        "provider-kubernetes could not apply it",
        Observed(
            False,
            _observed(
                "workload-vllm",
                _AVAILABLE,
                _set(
                    ("status", "conditions"),
                    [{"type": "Synced", "status": "False", "reason": "X", "message": "forbidden"}],
                ),
            ),
        ),
        EngineState(False, "not applied: 'forbidden'"),
    ),
    Case(
        "no atProvider",
        "the remote object is not observed yet",
        Observed(False, _observed("workload-vllm", _AVAILABLE, _set(("status", "atProvider"), {}))),
        EngineState(False, "not observed yet"),
    ),
    Case(
        "status a list",
        "a malformed status reads as not observed",
        Observed(False, _observed("workload-vllm", _AVAILABLE, _set(("status",), [1, 2]))),
        EngineState(False, "not observed yet"),
    ),
    Case(
        "manifest a string",
        "a malformed manifest reads as empty",
        Observed(
            False,
            _observed("workload-vllm", _AVAILABLE, _set(("status", "atProvider", "manifest"), "x")),
        ),
        EngineState(False, "0/0 pods available"),
    ),
    Case(
        "groups not ready",
        "every LeaderWorkerSet group must be ready",
        Observed(True, _observed("workload-kimi", {"readyReplicas": 1}, None)),
        EngineState(False, "1/2 groups ready"),
    ),
    Case(
        "groups ready, not Available",
        "a LeaderWorkerSet must report Available",
        Observed(True, _observed("workload-kimi", {"readyReplicas": 2}, None)),
        EngineState(False, "2/2 groups ready"),
    ),
    Case(
        "groups serving",
        "Available and every group ready",
        Observed(
            True,
            _observed(
                "workload-kimi",
                {"readyReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]},
                None,
            ),
        ),
        EngineState(True, None),
    ),
]


def _serving_request(case: Case[Observed, EngineState]) -> Any:
    multi, build = case.inputs.multi, case.inputs.build
    spec = multi_spec(copies=2) if multi else single_spec(copies=2)
    first = h.desired(run(spec, ready_required()))
    observed = build(first) if build is not None else None
    return h.request(replica_xr(spec), observed=observed, required=ready_required())


def _check_serving(case: Case[Observed, EngineState], rsp: Any) -> None:
    ready, message = case.want.ready, case.want.message
    (engine,) = h.status(rsp)["engines"]
    assert engine["ready"] is ready
    assert engine.get("message") == message
    cond = h.conditions(rsp)[CONDITION]
    refused = message is not None and message.startswith("not applied: ")
    # A refused apply is said by its own reason, naming the Object (review 20a F1).
    want = "Serving" if ready else ("ObjectNotSynced" if refused else "Starting")
    assert cond["reason"] == want
    assert h.xr_ready(rsp) == ("READY_TRUE" if ready else "READY_FALSE")
    if refused:
        assert message is not None
        assert "Deployment chat-0-vllm-" in cond["message"]
        assert "(Object modelreplica-" in cond["message"]
        assert message in cond["message"]
    elif message is not None:
        assert message in cond["message"]


@table(SERVING)
def test_observed_workload_state(case: Case[Observed, EngineState]) -> None:
    _check_serving(case, h.run(_serving_request(case), settings=default_settings()))


@table(SERVING)
def test_observed_workload_state_over_grpc(
    grpc_function: Any, case: Case[Observed, EngineState]
) -> None:
    req = _serving_request(case)
    rsp = grpc_function.call(req)
    _check_serving(case, rsp)
    assert h.status(rsp) == h.status(h.run(req))


def test_the_settings_key_covers_every_setting_the_resolvers_read() -> None:
    """Memoized flash-loader and /dev/shm results are keyed by ``SETTINGS_ATTRS`` only."""
    read: set[str] = set()
    base = default_settings()

    class Probe:
        def __getattr__(self, name: str) -> Any:
            read.add(name)
            return getattr(base, name)

    probe: Any = Probe()
    resolve_flash_loader(probe, {"enabled": True}, {"concurrency": 2})
    resolve_shm(probe, "1Gi")
    resolve_shm(probe, None)
    assert read and read <= set(SETTINGS_ATTRS)
