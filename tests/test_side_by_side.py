"""Side-by-side revisions (issue 13): a revision edit never disturbs a live replica.

Table-driven, over the function's own composers (tests/support/harness):

- the ModelReplica serves the identity its spec names: ``MODELPLANE_MODEL`` (and the
  flash loader's ``--source``) is that identity's directory on the cache PVC, and it
  keeps serving it while the cache's new identity hydrates beside it;
- the serving workloads roll make-before-break (``maxUnavailable: 0``).
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import pytest

from function.naming import source_identity
from jobs.contract import CACHE_MOUNT_PATH, FLASH_MOUNT_PATH, identity_dir
from tests.support import harness as h
from tests.support.replica_fixtures import (
    IDENTITY,
    ready_required,
    single_spec,
)
from tests.support.table import Case, table
from tests.test_replica import engine_of, manifest, run, validate_all

OLD = IDENTITY
NEW = source_identity("Qwen/Qwen2.5-0.5B-Instruct", "v2")


def _hydrating_new(phase: str, stored: list[str]) -> dict[str, Any]:
    """The required map with the cache's hydration on gpu-a moved to the new identity
    (``phase`` of the new one) and ``stored`` identities complete on the PVC."""
    req = ready_required()
    (hyd,) = req["hydration"]
    hyd["spec"]["huggingFace"]["revision"] = "v2"
    hyd["status"] = {
        "phase": phase,
        "message": f"hydration is {phase}",
        "source": {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "v2", "identity": NEW},
        "stored": [{"identity": i} for i in stored],
    }
    return req


class At(NamedTuple):
    """The replica's identity (None: unset) and its cluster's hydration."""

    identity: str | None
    required: dict[str, Any]


class Serves(NamedTuple):
    """What the replica does: the identity it loads (None: gated), its ModelReady reason."""

    identity: str | None
    reason: str


REPLICA_CASES = [
    Case(
        "old-identity-while-new-hydrates",
        "a replica on the old identity keeps serving it while the new one hydrates beside it "
        "(it is complete on the PVC: status.stored)",
        At(OLD, _hydrating_new("Hydrating", [OLD])),
        Serves(OLD, "Starting"),
    ),
    Case(
        "old-identity-while-new-failed",
        "a failed download of the new revision does not stop the old one from serving",
        At(OLD, _hydrating_new("Failed", [OLD])),
        Serves(OLD, "Starting"),
    ),
    Case(
        "moved-to-the-new-identity-once-ready",
        "the deployment moved the replica: it loads the new identity's directory",
        At(NEW, _hydrating_new("Ready", [NEW, OLD])),
        Serves(NEW, "Starting"),
    ),
    Case(
        "new-identity-not-complete-yet",
        "a replica named for an identity that is not complete on the PVC waits for it",
        At(NEW, _hydrating_new("Hydrating", [OLD])),
        Serves(None, "Hydrating"),
    ),
    Case(
        "old-identity-pruned",
        "an identity no longer on the PVC (not in stored, not the Ready one) is waited for, "
        "never read half-way",
        At(OLD, _hydrating_new("Ready", [NEW])),
        Serves(None, "Hydrating"),
    ),
    Case(
        "unset-identity-takes-the-ready-one",
        "a replica without an identity serves the one its cluster's hydration is Ready for",
        At(None, ready_required()),
        Serves(OLD, "Starting"),
    ),
    Case(
        "unset-identity-while-hydrating",
        "without an identity, a hydration that is not Ready gates the replica (as before)",
        At(None, _hydrating_new("Hydrating", [OLD])),
        Serves(None, "Hydrating"),
    ),
]


def _spec(identity: str | None) -> dict[str, Any]:
    spec = single_spec()
    if identity is not None:
        spec["modelCacheRef"] = {**spec["modelCacheRef"], "identity": identity}
    return spec


@table(REPLICA_CASES)
def test_replica_serves_its_identity(case: Case[At, Serves]) -> None:
    rsp = run(_spec(case.inputs.identity), copy.deepcopy(case.inputs.required))
    cond = h.conditions(rsp)["ModelReady"]
    assert cond["reason"] == case.want.reason, (case.reason, cond)
    desired = h.desired(rsp)
    if case.want.identity is None:
        assert "workload-vllm" not in desired, case.reason
        return
    pod = manifest(validate_all(rsp), "workload-vllm")["spec"]["template"]
    want = identity_dir(CACHE_MOUNT_PATH, case.want.identity)
    assert engine_of(pod)["env"][0] == {"name": "MODELPLANE_MODEL", "value": want}, case.reason
    assert h.status(rsp)["hydration"]["identity"] == case.want.identity


def test_flash_loader_copies_from_the_identity_directory() -> None:
    req = _hydrating_new("Hydrating", [OLD])
    req["cache"][0]["spec"]["flashLoader"] = {"enabled": True}
    rsp = run(_spec(OLD), req)
    pod = manifest(validate_all(rsp), "workload-vllm")["spec"]["template"]
    (init,) = pod["spec"]["initContainers"]
    assert f"--source={identity_dir(CACHE_MOUNT_PATH, OLD)}" in init["args"]
    assert engine_of(pod)["env"][0]["value"] == FLASH_MOUNT_PATH


def test_workloads_roll_make_before_break() -> None:
    rsp = run(_spec(OLD), ready_required())
    dep = manifest(validate_all(rsp), "workload-vllm")
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }


@pytest.mark.parametrize("bad", ["x", "ABCDEFABCDEF", "../../etc/x", 7])
def test_a_malformed_identity_is_refused_naming_the_field(bad: Any) -> None:
    [msg] = h.fatal(run(_spec(bad), ready_required()))
    assert "spec.modelCacheRef.identity" in msg


def test_identity_dir_refuses_what_is_not_an_identity() -> None:
    assert identity_dir("/mnt/models", OLD) == f"/mnt/models/{OLD}"
    for bad in ("", "..", "a/b", "ABCDEFABCDEF", OLD + "0"):
        with pytest.raises(ValueError):
            identity_dir("/mnt/models", bad)


# ---- the ModelDeployment moves each replica when its cluster's hydration is Ready ----

from tests import test_deployment as td  # noqa: E402 - the deployment's fixtures

DEP_OLD = source_identity("Qwen/Qwen2.5-7B-Instruct", "main")
DEP_NEW = source_identity("Qwen/Qwen2.5-7B-Instruct", "v2")


def _hyd(cluster: str, phase: str, identity: str) -> dict[str, Any]:
    """The cache's hydration on ``cluster`` in ``phase`` for source ``identity``."""
    body = td.hydration(cluster, phase)
    revision = "main" if identity == DEP_OLD else "v2"
    body["spec"]["huggingFace"]["revision"] = revision
    body["status"]["source"] = {
        "repo": "Qwen/Qwen2.5-7B-Instruct",
        "revision": revision,
        "identity": identity,
    }
    return body


class Fleet(NamedTuple):
    """Each cluster's hydration (phase, identity) after the edit."""

    a: tuple[str, str]
    b: tuple[str, str]


class Given(NamedTuple):
    """The identity each replica (index 0 on gpu-a, 1 on gpu-b) is given, and whether
    the deployment says replicas are still moving."""

    identities: tuple[str, str]
    rolling: bool


DEPLOYMENT_CASES = [
    Case(
        "both-hydrating-the-new-identity",
        "while the new identity hydrates beside the old one, every replica keeps the "
        "identity it was started on",
        Fleet(("Hydrating", DEP_NEW), ("Hydrating", DEP_NEW)),
        Given((DEP_OLD, DEP_OLD), True),
    ),
    Case(
        "one-cluster-ready",
        "a cluster whose hydration is Ready for the new identity moves its replica; the "
        "other keeps the old identity until its own hydration is Ready",
        Fleet(("Ready", DEP_NEW), ("Hydrating", DEP_NEW)),
        Given((DEP_NEW, DEP_OLD), True),
    ),
    Case(
        "both-ready",
        "every cluster Ready for the new identity: every replica moves",
        Fleet(("Ready", DEP_NEW), ("Ready", DEP_NEW)),
        Given((DEP_NEW, DEP_NEW), True),
    ),
]


def _two_serving() -> tuple[dict[str, Any], dict[str, Any]]:
    """A deployment of two replicas on gpu-a and gpu-b, both serving the old identity."""
    base = [td.ic("gpu-a"), td.ic("gpu-b"), td.cache()]
    w = td.world(_hyd("gpu-a", "Ready", DEP_OLD), _hyd("gpu-b", "Ready", DEP_OLD), base=base)
    xr = td.deployment(2)
    rsp = td.drive(xr, w)
    assert td.placed(rsp) == [(0, "gpu-a"), (1, "gpu-b")]
    for r in td.replicas_of(rsp).values():
        assert r["spec"]["modelCacheRef"]["identity"] == DEP_OLD
    serving = ("True", "Serving", "1/1 engines serving")
    return xr, td.observe(rsp, {0: serving, 1: serving})


@table(DEPLOYMENT_CASES)
def test_deployment_moves_replicas_only_when_ready(case: Case[Fleet, Given]) -> None:
    xr, observed = _two_serving()
    base = [td.ic("gpu-a"), td.ic("gpu-b"), td.cache()]
    (pa, ia), (pb, ib) = case.inputs
    w = td.world(_hyd("gpu-a", pa, ia), _hyd("gpu-b", pb, ib), base=base)
    rsp = td.drive(xr, w, observed)
    reps = td.replicas_of(rsp)
    got = tuple(reps[f"replica-{i}"]["spec"]["modelCacheRef"]["identity"] for i in (0, 1))
    assert got == case.want.identities, case.reason
    # The same ModelReplica names: the serving workload rolls in place.
    assert sorted(reps) == ["replica-0", "replica-1"]
    assert h.desired(rsp).keys() >= observed.keys()
    st = h.status(rsp)
    assert st["cacheIdentities"] == [{"identity": DEP_OLD, "replicas": 2}]
    assert ("cacheRollout" in st) == case.want.rolling, case.reason
    if case.want.rolling:
        assert st["cacheRollout"].startswith(f"2 replicas serve identity {DEP_OLD}; moving to")
    # Replicas still serving the old identity: the deployment stays Ready.
    assert h.conditions(rsp)["ReplicasReady"]["status"] == "True", case.reason


def test_a_new_replica_gets_the_current_identity() -> None:
    base = [td.ic("gpu-a"), td.ic("gpu-b"), td.cache()]
    w = td.world(_hyd("gpu-a", "Hydrating", DEP_NEW), _hyd("gpu-b", "Ready", DEP_NEW), base=base)
    rsp = td.drive(td.deployment(2), w)
    for r in td.replicas_of(rsp).values():
        assert r["spec"]["modelCacheRef"]["identity"] == DEP_NEW
        assert r["metadata"]["labels"]["modelplane.ai/cache"] == "qwen-cache"


# ---- the hydration keeps what live replicas serve and prunes the rest -----------------

from tests import test_hydration as th  # noqa: E402 - the hydration's fixtures
from tests.support.harness import NAMESPACE  # noqa: E402

H_OLD = th.IDENTITY
H_NEW = source_identity(th.REPO, "v2")


def _live(identity: str, name: str = "r0", cache: str = th.CACHE, cluster: str = th.CLUSTER):
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            # What the requirement selects by (shortened names could collide).
            "labels": {"modelplane.ai/cache": th.CACHE, "modelplane.ai/cluster": th.CLUSTER},
        },
        "spec": {"clusterName": cluster, "modelCacheRef": {"name": cache, "identity": identity}},
    }


def _ready_new(stored: list[str]) -> dict[str, Any]:
    """The hydration of revision v2, Ready (latched) with ``stored`` on the PVC."""
    st = th.prev_status("Ready", H_NEW, stored=[{"identity": i} for i in stored])
    st["source"]["revision"] = "v2"
    return th.hydration_xr(st, revision="v2")


class Live(NamedTuple):
    """The live-replica requirement: None (not resolved) or its items."""

    replicas: list[dict[str, Any]] | None


class Pruned(NamedTuple):
    """The prune Job's keep-list (None: no prune Job) and ``status.stored``."""

    keep: tuple[str, ...] | None
    stored: list[dict[str, Any]]


PRUNE_CASES = [
    Case(
        "replicas-not-known",
        "an unresolved requirement is not known, not empty: nothing is pruned",
        Live(None),
        Pruned(None, [{"identity": H_NEW}, {"identity": H_OLD}]),
    ),
    Case(
        "a-live-replica-serves-the-old-identity",
        "an identity a live replica serves is kept, and status says for whom",
        Live([_live(H_OLD, "r0"), _live(H_NEW, "r1")]),
        Pruned(
            None, [{"identity": H_NEW, "usedBy": ["r1"]}, {"identity": H_OLD, "usedBy": ["r0"]}]
        ),
    ),
    Case(
        "every-replica-moved",
        "once no live replica serves the old identity, a prune Job keeps only the current one",
        Live([_live(H_NEW, "r0"), _live(H_NEW, "r1")]),
        Pruned((H_NEW,), [{"identity": H_NEW, "usedBy": ["r0", "r1"]}, {"identity": H_OLD}]),
    ),
    Case(
        "no-replicas",
        "no live replica at all (resolved, empty): the old identity goes",
        Live([]),
        Pruned((H_NEW,), [{"identity": H_NEW}, {"identity": H_OLD}]),
    ),
    Case(
        "another-cache-or-cluster",
        "a replica of another cache or cluster whose shortened labels collide keeps nothing",
        Live([_live(H_OLD, "x", cache="other"), _live(H_OLD, "y", cluster="gpu-b")]),
        Pruned((H_NEW,), [{"identity": H_NEW}, {"identity": H_OLD}]),
    ),
]


def _prune_jobs(rsp) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in h.desired(rsp).items() if k.startswith("prune-")}


@table(PRUNE_CASES)
def test_prune_keeps_what_live_replicas_serve(case: Case[Live, Pruned]) -> None:
    required = th.resolved()
    if case.inputs.replicas is not None:
        required["replicas"] = case.inputs.replicas
    rsp = th.run(
        th.request(_ready_new([H_NEW, H_OLD]), observed=th.pvc("Bound"), required=required)
    )
    st = th.status(rsp)
    assert st["phase"] == "Ready"
    assert st["stored"] == case.want.stored, case.reason
    jobs = _prune_jobs(rsp)
    if case.want.keep is None:
        assert not jobs, case.reason
        return
    (obj,) = jobs.values()
    (c,) = obj["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["--target", CACHE_MOUNT_PATH, "--prune-keep", ",".join(case.want.keep)]
    assert "env" not in c  # no token, no API access: it only removes directories


def test_a_completed_prune_leaves_the_current_identity_only() -> None:
    required = {**th.resolved(), "replicas": []}
    first = th.run(
        th.request(_ready_new([H_NEW, H_OLD]), observed=th.pvc("Bound"), required=required)
    )
    (key,) = _prune_jobs(first)
    done = th.observed_object(h.desired(first)[key], {"conditions": th.COMPLETE})
    rsp = th.run(
        th.request(
            _ready_new([H_NEW, H_OLD]),
            observed={**th.pvc("Bound"), key: done},
            required=required,
        )
    )
    assert th.status(rsp)["stored"] == [{"identity": H_NEW}]
    assert not _prune_jobs(rsp)


def test_the_new_identity_hydrates_beside_the_old_one() -> None:
    """A revision edit: the old identity stays stored (replicas keep serving it), the new
    one downloads, nothing is pruned while it is not Ready."""
    prev = th.prev_status("Ready", H_OLD, stored=[{"identity": H_OLD}])
    composite = th.hydration_xr(prev, revision="v2")
    required = {**th.resolved(), "replicas": [_live(H_OLD)]}
    rsp = th.run(th.request(composite, observed=th.pvc("Bound"), required=required))
    st = th.status(rsp)
    assert st["phase"] == "Hydrating" and st["source"]["identity"] == H_NEW
    assert st["stored"] == [{"identity": H_OLD}]
    assert th.hydration.job_key(H_NEW) in h.desired(rsp)
    assert not _prune_jobs(rsp)


@pytest.mark.parametrize(
    ("observed", "want"),
    [("1Gi", "4Gi"), ("4Gi", "4Gi"), ("10Gi", "10Gi"), ("not-a-quantity", "4Gi")],
)
def test_pvc_room_for_two_copies_and_never_shrunk(observed: str, want: str) -> None:
    pvc = th.pvc("Bound")
    pvc["pvc"]["status"]["atProvider"]["manifest"]["spec"]["resources"]["requests"] = {
        "storage": observed
    }
    rsp = th.run(th.request(th.hydration_xr(), observed=pvc, required=th.resolved()))
    body = h.desired(rsp)["pvc"]["spec"]["forProvider"]["manifest"]
    assert body["spec"]["resources"]["requests"]["storage"] == want
