"""Faults around the function: the fleet, provider-kubernetes and clocks misbehave (issue 9).

Each test injects one fault into an otherwise healthy reconcile (seeds of
``tests/reliability.py``) and checks what is lost -- nothing -- and what is said:

- a cluster disappears from the fleet while live replicas use it (ModelCache keeps
  the hydration there and says why; a ModelReplica keeps its workload and names the
  cluster);
- provider-kubernetes reports an Object that cannot sync (``Synced=False``): the
  remote error reaches the XR's conditions (hydration, replica);
- a remote Job (or its Object) deleted by hand: the hydration desires it again
  unless the weights are already staged; a running backfill records the loss;
- clock skew: remote start times and status timestamps in the future never fail a
  hydration early, never give a negative duration or a TTL below one second;
- RFC 3339 timestamps with and without fractional seconds, ``Z`` or offsets.

A part whose composer does not exist yet is skipped with the reason.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from function.composers import hydration as hyd
from function.core.timeutil import elapsed, format_time, parse_time
from tests.fixtures import inference_cluster
from tests.harness import (
    NOW,
    conditions,
    desired,
    fatal,
    request,
    results,
    run,
    status,
)
from tests.reliability import Seed, evolve, missing_reason, seeds, settle

REMOTE_ERROR = 'admission webhook "policy.example.com" denied the request: REMOTE-ERR-42'
FAULTS: list[str] = []  # one line per injected fault, for the summary


def need(kind: str) -> None:
    reason = missing_reason(kind)
    if reason:
        pytest.skip(reason)


def seed(kind: str, label: str) -> Seed:
    need(kind)
    for s in seeds(kind):
        if s.label == label:
            return s
    pytest.skip(f"seed {kind}:{label} is not there (its example changed)")


def seed_with(kind: str, key_prefix: str) -> tuple[Seed, Any]:
    """The first seed of ``kind`` whose settled response desires a ``key_prefix*`` child."""
    need(kind)
    for s in seeds(kind):
        _, rsp = settle(s)
        if not fatal(rsp) and any(k.startswith(key_prefix) for k in desired(rsp)):
            return s, rsp
    pytest.skip(f"no seed of {kind} desires a {key_prefix}* child")


def all_messages(rsp: Any) -> str:
    texts = [c["message"] for c in conditions(rsp).values()]
    texts += [m for _, m in results(rsp)]
    st = status(rsp)
    texts += [str(st.get("message", ""))]
    return "\n".join(texts)


def synced_false(obs: dict[str, Any], message: str = REMOTE_ERROR) -> dict[str, Any]:
    obs = copy.deepcopy(obs)
    obs.setdefault("status", {})["conditions"] = [
        {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message},
        {"type": "Ready", "status": "False", "reason": "Unavailable"},
    ]
    return obs


def record(fault: str) -> None:
    FAULTS.append(fault)


@pytest.fixture(scope="module", autouse=True)
def _summary(pytestconfig: pytest.Config) -> Iterator[None]:
    """Print how many faults were injected and survived with nothing lost."""
    yield
    capman = pytestconfig.pluginmanager.get_plugin("capturemanager")
    tr = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if capman is None or tr is None or not FAULTS:
        return
    with capman.global_and_fixture_disabled():
        tr.ensure_newline()
        tr.write_line(f"faults: {len(FAULTS)} injected, nothing lost in any")


# ---- hydration helpers --------------------------------------------------------------

HYD = "builder-auth"


def hydration_step(
    remote: dict[str, Any],
    *,
    status_: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
    unresolved: tuple[str, ...] = (),
    now: datetime.datetime = NOW,
) -> tuple[Any, dict[str, Any]]:
    """One hydration reconcile after the first: observed Objects with remote states.

    ``remote`` maps a child key prefix (``pvc``, ``job-``) to the remote object's
    status; children in ``drop`` are not observed; requirements in ``unresolved``
    are left out of the request.
    """
    s = seed("ModelCacheHydration", HYD)
    req, rsp = settle(s)

    def remote_status(name: str, manifest: dict[str, Any]) -> Any:
        for prefix, st in remote.items():
            if name.startswith(prefix):
                return copy.deepcopy(st)
        return None

    observed = {k: v for k, v in evolve(rsp, remote_status).items() if k not in drop}
    body = copy.deepcopy(s.xr)
    body["status"] = copy.deepcopy(status_ if status_ is not None else status(rsp))
    required = {
        k: [dict_of(i.resource) for i in v.items]
        for k, v in req.required_resources.items()
        if k not in unresolved
    }
    r = request(body, observed=observed, required=required)
    return run(r, now=now), observed


def resolved_of(req: Any) -> dict[str, list[dict[str, Any]]]:
    """The required resources of ``req`` as plain dicts (to alter and send again)."""
    return {k: [dict_of(i.resource) for i in v.items] for k, v in req.required_resources.items()}


def dict_of(struct: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(struct)


BOUND = {"phase": "Bound"}
RUNNING_JOB = {"active": 1, "startTime": "2026-11-29T08:55:00Z"}


# ---- a cluster disappears from the fleet ------------------------------------------


def test_cluster_gone_with_live_replicas_keeps_the_cache_there() -> None:
    from tests.cache_tree import Tree

    s = seed("ModelCache", "builder-all-auth")
    clusters = [c for c in s.world if c.get("kind") == "InferenceCluster"]
    fleet = [c for c in clusters if c["metadata"]["name"] != "gpu-b"]
    replica = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": "chat-0", "namespace": s.xr["metadata"]["namespace"]},
        "spec": {"clusterName": "gpu-b", "modelCacheRef": {"name": s.xr["metadata"]["name"]}},
    }

    def vanished(replicas: list | None) -> Tree:
        t = Tree(copy.deepcopy(s.xr), clusters)
        t.step()
        t.observe({c: ("Ready", "staged") for c in t.hydrated_clusters()})
        assert "gpu-b" in t.hydrations
        t.clusters, t.replicas = fleet, replicas
        t.step()
        assert not fatal(t.rsp)
        return t

    # Live replica on the vanished cluster: kept, and status says why.
    t = vanished([replica])
    assert "gpu-b" in t.hydrated_clusters(), "a hydration a live replica uses was dropped"
    gpu_b = t.rows()["gpu-b"]
    assert gpu_b.get("retained") and "chat-0" in gpu_b["message"]
    assert [e["name"] for e in status(t.rsp)["retained"]] == ["gpu-b"]
    # Replicas not resolved yet: not known, so kept too.
    assert "gpu-b" in vanished(None).hydrated_clusters()
    # No replica there any more: that hydration (alone) goes.
    before = vanished([replica]).hydrated_clusters()
    t = vanished([])
    assert t.hydrated_clusters() == [c for c in before if c != "gpu-b"]
    record("ModelCache: cluster gone with a live replica (kept), replicas unresolved (kept)")


def test_cluster_gone_under_a_replica_keeps_its_workload_and_names_the_cluster() -> None:
    s, first = seed_with("ModelReplica", "workload")
    obs = evolve(first)
    req, _ = settle(s)
    required = {
        k: [dict_of(i.resource) for i in v.items] for k, v in req.required_resources.items()
    }
    cluster = s.xr["spec"].get("clusterName", "")
    required["cluster"] = []  # resolved: the InferenceCluster no longer exists
    rsp = run(request(s.xr, observed=obs, required=required))
    assert not fatal(rsp)
    lost = set(obs) - set(desired(rsp))
    assert not lost, f"children dropped when the cluster vanished: {sorted(lost)}"
    assert cluster and cluster in all_messages(rsp)
    record("ModelReplica: its InferenceCluster vanished (children kept, cluster named)")


def test_cluster_gone_under_a_hydration_keeps_the_volume() -> None:
    _, observed = hydration_step({"pvc": BOUND, "job-": RUNNING_JOB}, drop=())
    # The same reconcile, but the InferenceCluster is gone from the fleet.
    s = seed("ModelCacheHydration", HYD)
    req, _ = settle(s)
    required = {
        k: [dict_of(i.resource) for i in v.items] for k, v in req.required_resources.items()
    }
    required["cluster"] = []
    r = run(request(s.xr, observed=observed, required=required))
    assert not fatal(r)
    assert set(observed) <= set(desired(r)), "children dropped when the cluster vanished"
    assert s.xr["spec"]["clusterName"] in all_messages(r)
    record("ModelCacheHydration: its InferenceCluster vanished (PVC, Job, Secret kept)")


def test_cache_deleted_while_a_deployment_uses_it_stays_protected_by_the_usage() -> None:
    """Crossplane's Usage blocks the ModelCache's deletion while the deployment needs it:
    the function keeps desiring the Usage (and every replica) while the cache is being
    deleted, so the deletion waits (``replayDeletion`` retries it once released)."""
    need("ModelDeployment")
    s = seeds("ModelDeployment")[0]
    req, rsp = settle(s)
    usages = {k: v for k, v in desired(rsp).items() if v.get("kind") == "Usage"}
    if not usages:
        pytest.skip(f"{s.id} uses no ModelCache")
    cache_name = s.xr["spec"]["template"]["spec"]["modelCacheRef"]["name"]
    for u in usages.values():
        assert u["spec"]["of"]["kind"] == "ModelCache"
        assert u["spec"]["of"]["resourceRef"]["name"] == cache_name
        assert u["metadata"]["namespace"] == s.xr["metadata"]["namespace"]
    obs = evolve(rsp)
    required = {
        k: [dict_of(i.resource) for i in v.items] for k, v in req.required_resources.items()
    }
    for c in required["cache"]:
        c["metadata"]["deletionTimestamp"] = "2026-11-29T08:59:00Z"
    r = run(request(s.xr, observed=obs, required=required))
    assert not fatal(r)
    assert set(obs) <= set(desired(r)), "the Usage or a replica was dropped while deleting"
    record("ModelDeployment: its ModelCache being deleted (Usage and replicas kept)")


# ---- provider-kubernetes cannot sync an Object -------------------------------------


def test_pvc_that_cannot_sync_surfaces_the_remote_error() -> None:
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    obs = evolve(first, lambda n, m: {"phase": "Pending"} if n == "pvc" else None)
    obs["pvc"] = synced_false(obs["pvc"])
    req, _ = settle(s)
    required = {
        k: [dict_of(i.resource) for i in v.items] for k, v in req.required_resources.items()
    }
    rsp = run(request(s.xr, observed=obs, required=required))
    assert REMOTE_ERROR in conditions(rsp)[hyd.CONDITION]["message"]
    assert set(obs) <= set(desired(rsp))
    record("ModelCacheHydration: PVC Object Synced=False (error in condition Hydrated)")


def test_job_that_cannot_sync_surfaces_the_remote_error() -> None:
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    obs = evolve(first, lambda n, m: BOUND if n == "pvc" else None)
    job = next(k for k in obs if k.startswith("job-"))
    obs[job] = synced_false(obs[job])
    req, _ = settle(s)
    required = {
        k: [dict_of(i.resource) for i in v.items] for k, v in req.required_resources.items()
    }
    rsp = run(request(s.xr, observed=obs, required=required))
    assert REMOTE_ERROR in all_messages(rsp)
    assert REMOTE_ERROR in conditions(rsp)[hyd.CONDITION]["message"]
    assert set(obs) <= set(desired(rsp))
    record("ModelCacheHydration: Job Object Synced=False (error in condition Hydrated)")


def test_replica_workload_that_cannot_sync_surfaces_the_remote_error() -> None:
    s, first = seed_with("ModelReplica", "workload")
    obs = evolve(first)
    key = next(k for k in obs if k.startswith("workload"))
    obs[key] = synced_false(obs[key])
    req, _ = settle(s)
    required = {
        k: [dict_of(i.resource) for i in v.items] for k, v in req.required_resources.items()
    }
    rsp = run(request(s.xr, observed=obs, required=required))
    assert not fatal(rsp)
    msgs = [c["message"] for c in conditions(rsp).values() if c["status"] != "True"]
    assert any(REMOTE_ERROR in m for m in msgs), conditions(rsp)
    assert set(obs) <= set(desired(rsp))
    record("ModelReplica: workload Object Synced=False (error in condition)")


# ---- a remote Job deleted by hand -----------------------------------------------------


def test_job_object_deleted_by_hand_is_desired_again_while_hydrating() -> None:
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    job = next(k for k in desired(first) if k.startswith("job-"))
    prior = status(first) | {"phase": "Hydrating"}
    rsp, observed = hydration_step({"pvc": BOUND}, status_=prior, drop=(job,))
    assert job in desired(rsp), "a Job deleted by hand mid-hydration was not re-created"
    assert set(observed) <= set(desired(rsp))
    assert status(rsp)["phase"] in ("Pending", "Hydrating")
    record("ModelCacheHydration: Job Object deleted mid-hydration (re-created)")


def test_remote_job_deleted_by_hand_is_not_a_failure() -> None:
    # provider-kubernetes re-creates a remote object deleted by hand: the echoed
    # manifest has no status for a while.
    rsp, observed = hydration_step({"pvc": BOUND, "job-": {}})
    assert status(rsp)["phase"] in ("Pending", "Hydrating")
    assert set(observed) <= set(desired(rsp))
    record("ModelCacheHydration: remote Job deleted (no status echoed; still Hydrating)")


def test_finished_job_deleted_by_hand_is_not_recreated() -> None:
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    job = next(k for k in desired(first) if k.startswith("job-"))
    done, _ = hydration_step(
        {"pvc": BOUND, "job-": {"conditions": [{"type": "Complete", "status": "True"}]}}
    )
    assert status(done)["phase"] == "Ready"
    rsp, _ = hydration_step({"pvc": BOUND}, status_=status(done), drop=(job,))
    assert status(rsp)["phase"] == "Ready"
    assert job not in desired(rsp), "a finished Job was created again"
    assert "pvc" in desired(rsp)
    record("ModelCacheHydration: finished Job deleted (not re-created, stays Ready)")


def test_job_deleted_while_the_secret_is_unresolved_keeps_every_other_child() -> None:
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    job = next(k for k in desired(first) if k.startswith("job-"))
    rsp, observed = hydration_step(
        {"pvc": BOUND}, status_=status(first) | {"phase": "Hydrating"}, drop=(job,),
        unresolved=(hyd.REQ_SECRET,),
    )  # fmt: skip
    lost = set(observed) - set(desired(rsp))
    assert not lost, f"unresolved Secret requirement dropped {sorted(lost)}"


def test_running_backfill_job_deleted_by_hand_is_recorded() -> None:
    s, first = seed_with("ModelBackfill", "job-")
    body = copy.deepcopy(s.xr)
    body["status"] = status(first) | {"phase": "Running", "runningSince": format_time(NOW)}
    _, rsp = settle(Seed(s.kind, s.label, body, s.world), observed={})
    assert not fatal(rsp)
    text = all_messages(rsp)
    assert "disappeared" in text or "JobLost" in text or "lost" in text.lower(), text
    record("ModelBackfill: running Job Object deleted (recorded as lost)")


# ---- clock skew -----------------------------------------------------------------------

FUTURE = "2026-11-29T10:00:00Z"  # an hour after NOW


def test_remote_start_time_in_the_future_is_not_a_failure() -> None:
    rsp, _ = hydration_step({"pvc": BOUND, "job-": {"active": 1, "startTime": FUTURE}})
    assert status(rsp)["phase"] == "Hydrating"
    assert rsp.meta.ttl.seconds >= 1
    record("ModelCacheHydration: remote Job startTime an hour in the future")


def test_pending_since_in_the_future_neither_fails_nor_requeues_below_a_second() -> None:
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    prior = status(first) | {"phase": "Pending", "pendingSince": FUTURE}
    rsp, _ = hydration_step({"pvc": {"phase": "Pending"}}, status_=prior)
    assert status(rsp)["phase"] == "Pending"
    assert rsp.meta.ttl.seconds >= 1
    # Once the real time passes the bind timeout, counted from the skewed stamp, it fails.
    record("ModelCacheHydration: status.pendingSince an hour in the future")


def test_started_at_in_the_future_gives_no_negative_duration() -> None:
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    prior = status(first) | {"phase": "Hydrating", "startedAt": FUTURE}
    rsp, _ = hydration_step(
        {"pvc": BOUND, "job-": {"conditions": [{"type": "Complete", "status": "True"}]}},
        status_=prior,
    )
    assert not fatal(rsp)
    assert status(rsp)["phase"] == "Ready"
    record("ModelCacheHydration: status.startedAt in the future at completion")


def test_elapsed_is_never_negative() -> None:
    assert elapsed(parse_time(FUTURE), NOW) == 0.0
    assert elapsed(None, NOW) == 0.0
    assert elapsed(parse_time("2026-11-29T08:59:30.5Z"), NOW) == 29.5


# ---- timestamps -------------------------------------------------------------------------

UTC = datetime.UTC


def at(micro: int = 0, hour: int = 9) -> datetime.datetime:
    return datetime.datetime(2026, 11, 29, hour, 0, 0, micro, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2026-11-29T09:00:00Z", at()),
        ("2026-11-29T09:00:00.5Z", at(500000)),
        (
            "2026-11-29T09:00:00.123456Z",
            at(123456),
        ),
        # metav1.MicroTime / RFC3339Nano: nanoseconds, truncated to microseconds
        (
            "2026-11-29T09:00:00.123456789Z",
            at(123456),
        ),
        ("2026-11-29T10:00:00+01:00", at()),
        (
            "2026-11-29T03:30:00.25-05:30",
            at(250000),
        ),
        ("2026-11-29t09:00:00z", at()),
        ("2026-11-29T09:00:00", None),  # no offset: not RFC 3339
        ("2026-11-29 09:00:00Z", None),
        ("2026-11-29T09:00:00.Z", None),
        ("2026-11-29T09:00:00,5Z", None),
        ("2026-W48-7T09:00:00Z", None),
        ("20261129T090000Z", None),
        ("2026-02-30T09:00:00Z", None),
        ("2026-11-29T24:00:00Z", None),
        ("0001-01-01T00:00:00+01:00", None),  # before year 1 in UTC
        ("9999-12-31T23:59:59-01:00", None),  # after year 9999 in UTC
        ("", None),
        (None, None),
        (1764406800, None),
    ],
)
def test_parse_time(text: Any, want: datetime.datetime | None) -> None:
    assert parse_time(text) == want


def test_format_time_is_whole_seconds_utc_z() -> None:
    t = parse_time("2026-11-29T10:00:00.999999+01:00")
    assert format_time(t) == "2026-11-29T09:00:00Z"
    assert parse_time(format_time(t)) == t.replace(microsecond=0)


@pytest.mark.parametrize(
    "stamp", ["2026-11-29T08:50:00Z", "2026-11-29T08:50:00.123Z", "2026-11-29T09:50:00+01:00"]
)
def test_hydration_reads_every_timestamp_form(stamp: str) -> None:
    """Status stamps written with fractions or offsets are read and re-written as ``...Z``."""
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    prior = status(first) | {"phase": "Hydrating", "startedAt": stamp}
    rsp, _ = hydration_step({"pvc": BOUND, "job-": RUNNING_JOB}, status_=prior)
    assert status(rsp)["startedAt"] == "2026-11-29T08:50:00Z"


def test_garbage_timestamps_in_status_are_not_known_not_fatal() -> None:
    s = seed("ModelCacheHydration", HYD)
    _, first = settle(s)
    prior = status(first) | {
        "phase": "Pending",
        "pendingSince": "yesterday",
        "startedAt": 12,
        "readyAt": {"a": 1},
    }
    rsp, _ = hydration_step({"pvc": {"phase": "Pending"}}, status_=prior)
    assert not fatal(rsp)
    assert status(rsp)["phase"] == "Pending"
    assert parse_time(status(rsp).get("pendingSince")) is not None
    record("ModelCacheHydration: garbage timestamps in status (treated as not known)")


def test_inference_cluster_fixture_is_ready() -> None:
    """Guard for the seeds above: the builder fleet has a Ready, hostable gpu-a."""
    c = inference_cluster("gpu-a")
    assert c["status"]["providerConfigRef"]["name"]
