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


def _live(
    identity: str,
    name: str = "r0",
    cache: str = th.CACHE,
    cluster: str = th.CLUSTER,
    rolling_from: list[Any] | None = None,
):
    """A live ModelReplica of the cache on the cluster, serving ``identity`` (its spec);
    ``rolling_from``: its ``status.cacheIdentities`` (the identities its pods may still
    read while the workload rolls; written by the ModelReplica composer)."""
    body: dict[str, Any] = {
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
    if rolling_from is not None:
        body["status"] = {"cacheIdentities": rolling_from}
    return body


H_THIRD = source_identity(th.REPO, "v3")
REVISION = {H_OLD: "main", H_NEW: "v2", H_THIRD: "v3"}


def _at(
    identity: str, phase: str, stored: list[str] | None, now: str | None = None, **extra: Any
) -> dict[str, Any]:
    """The hydration whose last status is ``phase`` for ``identity`` with ``stored``
    (None: no ``stored``, as the release before side-by-side wrote), its spec naming
    ``now``'s revision (the user's edit; default: the same)."""
    st = th.prev_status(
        phase, identity, stored=None if stored is None else [{"identity": i} for i in stored]
    )
    st["source"]["revision"] = REVISION[identity]
    st.update(extra)
    return th.hydration_xr(st, revision=REVISION[now or identity])


def _ready_new(stored: list[str]) -> dict[str, Any]:
    """The hydration of revision v2, Ready (latched) with ``stored`` on the PVC."""
    return _at(H_NEW, "Ready", stored)


def _leaving(
    reads: list[Any] | None,
    name: str = "r0",
    cluster: str = th.CLUSTER,
    full: str | None = None,
    to: str = "llama-cache",
) -> dict[str, Any]:
    """A ModelReplica whose deployment moved it off this cache onto ``to`` ("": its
    ``modelCacheRef`` removed) (spec, cache label and ``modelplane.ai/leaving-cache:
    <this cache>`` as the deployment writes them) while its old pods still mount this
    cache's PVC: ``reads`` is its ``status.cacheIdentities`` (None: none reported);
    ``full`` the ``modelplane.ai/full-leaving-cache`` annotation (a shortened label)."""
    body = _live(LLAMA_ID, name, cache=to, cluster=cluster)
    body["metadata"]["labels"] = {
        "modelplane.ai/leaving-cache": th.CACHE,
        "modelplane.ai/cluster": th.CLUSTER,
    }
    if to:
        body["metadata"]["labels"]["modelplane.ai/cache"] = to
    else:
        del body["spec"]["modelCacheRef"]
    if full is not None:
        body["metadata"]["annotations"] = {"modelplane.ai/full-leaving-cache": full}
    if reads is not None:
        body["status"] = {"cacheIdentities": reads}
    return body


LLAMA_ID = source_identity("meta-llama/Llama-3.1-8B-Instruct", "main")


class Live(NamedTuple):
    """The live-replica requirements: None (not resolved) or their items: ``replicas``
    (labelled with this cache) and ``leaving`` (labelled as leaving it)."""

    replicas: list[dict[str, Any]] | None
    leaving: list[dict[str, Any]] | None = []


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
        "a-replica-still-rolling-onto-the-new-identity",
        "issue 13 p1: a replica whose spec was moved to the new identity while its old "
        "pods still serve the old one (status.cacheIdentities lists both) keeps the old one",
        Live([_live(H_NEW, "r0", rolling_from=[H_NEW, H_OLD])]),
        Pruned(
            None, [{"identity": H_NEW, "usedBy": ["r0"]}, {"identity": H_OLD, "usedBy": ["r0"]}]
        ),
    ),
    Case(
        "rolled-out",
        "once the replica's status names the new identity only, the old one goes",
        Live([_live(H_NEW, "r0", rolling_from=[H_NEW])]),
        Pruned((H_NEW,), [{"identity": H_NEW, "usedBy": ["r0"]}]),
    ),
    Case(
        "malformed-status-identities-are-not-known",
        "status is read, not trusted: entries that are not identities keep nothing",
        Live([_live(H_NEW, "r0", rolling_from=["../" + H_OLD, 7, H_OLD.upper()])]),
        Pruned((H_NEW,), [{"identity": H_NEW, "usedBy": ["r0"]}]),
    ),
    Case(
        "every-replica-moved",
        "once no live replica may read the old identity, a prune Job keeps only the current "
        "one; the old one leaves status.stored at once (it is being removed)",
        Live([_live(H_NEW, "r0"), _live(H_NEW, "r1")]),
        Pruned((H_NEW,), [{"identity": H_NEW, "usedBy": ["r0", "r1"]}]),
    ),
    Case(
        "no-replicas",
        "no live replica at all (resolved, empty): the old identity goes",
        Live([]),
        Pruned((H_NEW,), [{"identity": H_NEW}]),
    ),
    Case(
        "another-cache-or-cluster",
        "a replica of another cache or cluster whose shortened labels collide keeps nothing",
        Live([_live(H_OLD, "x", cache="other"), _live(H_OLD, "y", cluster="gpu-b")]),
        Pruned((H_NEW,), [{"identity": H_NEW}]),
    ),
    Case(
        "a-replica-rolling-off-this-cache",
        "review 17l F2: the deployment's modelCacheRef moved to another cache and the "
        "replica's roll stalls; its old pods still read the old identity from this PVC "
        "(status.cacheIdentities), so a revision edit of this cache keeps it",
        Live([], [_leaving([LLAMA_ID, H_OLD])]),
        Pruned(None, [{"identity": H_NEW}, {"identity": H_OLD, "usedBy": ["r0"]}]),
    ),
    Case(
        "a-replica-rolling-off-this-cache-onto-none",
        "review 17k F3: the deployment's modelCacheRef removed; the replica (no "
        "modelCacheRef now, labelled as leaving this cache) still has pods reading the "
        "old identity: kept",
        Live([], [_leaving([H_OLD], to="")]),
        Pruned(None, [{"identity": H_NEW}, {"identity": H_OLD, "usedBy": ["r0"]}]),
    ),
    Case(
        "leaving-replicas-not-known",
        "the leaving-replicas requirement unresolved is not known, not empty: no prune",
        Live([], None),
        Pruned(None, [{"identity": H_NEW}, {"identity": H_OLD}]),
    ),
    Case(
        "a-leaving-replica-that-reports-nothing",
        "a replica leaving this cache with no status.cacheIdentities has not said what its "
        "old pods read: not known, no prune",
        Live([], [_leaving(None)]),
        Pruned(None, [{"identity": H_NEW}, {"identity": H_OLD}]),
    ),
    Case(
        "rolled-off-this-cache",
        "once the replica's pods read the other cache only (its status names that "
        "cache's identity), the old identity goes",
        Live([], [_leaving([LLAMA_ID])]),
        Pruned((H_NEW,), [{"identity": H_NEW}]),
    ),
    Case(
        "leaving-another-cache-or-cluster",
        "a replica leaving another cache whose shortened label collides (its full name "
        "in the annotation), or on another cluster, keeps nothing",
        Live(
            [],
            [
                _leaving([H_OLD], "x", full=th.CACHE + "-" + "x" * 60),
                _leaving([H_OLD], "y", cluster="gpu-b"),
            ],
        ),
        Pruned((H_NEW,), [{"identity": H_NEW}]),
    ),
]


def _prune_jobs(rsp) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in h.desired(rsp).items() if k.startswith("prune-")}


def _keep_of(obj: dict[str, Any]) -> tuple[str, ...]:
    (c,) = obj["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]["containers"]
    assert c["args"][:3] == ["--target", CACHE_MOUNT_PATH, "--prune-keep"]
    assert "env" not in c  # no token, no API access: it only removes directories
    return tuple(c["args"][3].split(","))


@table(PRUNE_CASES)
def test_prune_keeps_what_live_replicas_serve(case: Case[Live, Pruned]) -> None:
    required: dict[str, Any] = th.resolved()
    if case.inputs.replicas is not None:
        required["replicas"] = case.inputs.replicas
    if case.inputs.leaving is None:
        del required["leaving-replicas"]
    else:
        required["leaving-replicas"] = case.inputs.leaving
    composite = _ready_new([H_NEW, H_OLD])
    rsp = th.run(th.request(composite, observed=th.pvc("Bound"), required=required))
    st = th.status(rsp)
    assert st["phase"] == "Ready"
    assert st["stored"] == case.want.stored, case.reason
    th.validate_status(composite, rsp)
    jobs = _prune_jobs(rsp)
    if case.want.keep is None:
        assert not jobs, case.reason
        return
    (obj,) = jobs.values()
    assert _keep_of(obj) == case.want.keep, case.reason


# ---- a prune Job is never dropped before its outcome is read (issue 13 p2/p3) ---------

RUNNING_JOB = {"active": 1}
COMPLETE_JOB = {"conditions": th.COMPLETE, "succeeded": 1}
FAILED_JOB = {"conditions": th.BACKOFF, "failed": 4}


def _observed_prune(keep: tuple[str, ...], remote: dict[str, Any]) -> dict[str, Any]:
    """The observed prune Job Object keeping ``keep`` (which holds H_NEW), its Job in
    ``remote`` state: the one the hydration composed when H_THIRD had to go."""
    live = [_live(i, f"k-{i}") for i in keep if i != H_NEW]
    first = th.run(
        th.request(
            _ready_new([H_NEW, *[i for i in keep if i != H_NEW], H_THIRD]),
            observed=th.pvc("Bound"),
            required={**th.resolved(), "replicas": live},
        )
    )
    ((key, body),) = _prune_jobs(first).items()
    assert _keep_of(body) == tuple(sorted(keep))
    return {key: th.observed_object(body, remote)}


class Around(NamedTuple):
    """The hydration (its current identity, last phase, stored), the prune Job observed
    (its keep-list and remote state; None: none), and the live replicas."""

    xr: dict[str, Any]
    prune: tuple[tuple[str, ...], dict[str, Any]] | None
    replicas: list[dict[str, Any]] | None


class Then(NamedTuple):
    """Phase, reason, status.stored identities, the prune Job kept, the download Job
    of the current identity composed, and a fragment of a Warning (None: none)."""

    phase: str
    reason: str
    stored: list[str]
    prune_kept: bool
    download: bool
    warning: str | None = None


SERVING_NEW = [_live(H_NEW, "r0")]

PRUNE_LIFECYCLE = [
    Case(
        "running-prune-is-kept-while-ready",
        "a running prune Job is kept (dropping it would kill its pod mid-delete); no "
        "second prune starts while it runs",
        Around(_ready_new([H_NEW]), ((H_NEW,), RUNNING_JOB), SERVING_NEW),
        Then("Ready", "Ready", [H_NEW], True, False),
    ),
    Case(
        "running-prune-is-kept-while-replicas-not-known",
        "not known keeps everything: the running prune Job too",
        Around(_ready_new([H_NEW]), ((H_NEW,), RUNNING_JOB), None),
        Then("Ready", "Ready", [H_NEW], True, False),
    ),
    Case(
        "revert-while-the-prune-removing-it-runs",
        "p2/p3: a revert to the identity a running prune removes waits for it: no "
        "download into a directory being deleted, and stored does not list it",
        Around(_at(H_NEW, "Ready", [H_NEW], H_OLD), ((H_NEW,), RUNNING_JOB), SERVING_NEW),
        Then("Pending", "WaitingForPrune", [H_NEW], True, False),
    ),
    Case(
        "revert-after-the-prune-completed",
        "p2: the prune's outcome is read: the reverted identity is not stored (it was "
        "removed), so it downloads again; the recorded prune Job is dropped",
        Around(_at(H_NEW, "Ready", [H_NEW], H_OLD), ((H_NEW,), COMPLETE_JOB), SERVING_NEW),
        Then("Hydrating", "JobRunning", [H_NEW], False, True),
    ),
    Case(
        "completed-prune-not-recorded-yet",
        "p2: a completed prune whose removals the last status still lists is kept for the "
        "call that records them (never dropped before its outcome is read)",
        Around(_ready_new([H_NEW, H_OLD]), ((H_NEW,), COMPLETE_JOB), SERVING_NEW),
        Then("Ready", "Ready", [H_NEW], True, False),
    ),
    Case(
        "completed-prune-recorded",
        "recorded (the last status lists nothing it removed): dropped, nothing new",
        Around(_ready_new([H_NEW]), ((H_NEW,), COMPLETE_JOB), SERVING_NEW),
        Then("Ready", "Ready", [H_NEW], False, False),
    ),
    Case(
        "failed-prune",
        "a failed prune Job is kept for the call that records it (status.prune) and said; "
        "what it may have removed "
        "is not listed",
        Around(_ready_new([H_NEW, H_OLD]), ((H_NEW,), FAILED_JOB), SERVING_NEW),
        Then("Ready", "Ready", [H_NEW], True, False, "prune Job"),
    ),
    Case(
        "revert-to-an-identity-the-running-prune-keeps",
        "p8: an identity the running prune keeps is complete: Ready at once",
        Around(
            _at(H_NEW, "Ready", [H_NEW, H_OLD], H_OLD), ((H_NEW, H_OLD), RUNNING_JOB), SERVING_NEW
        ),
        Then("Ready", "Hydrated", [H_OLD, H_NEW], True, False),
    ),
    Case(
        "edit-to-a-third-identity-while-a-prune-runs",
        "a new identity is not kept by the running prune (its .partial would be removed): "
        "its download waits",
        Around(_at(H_NEW, "Ready", [H_NEW], H_THIRD), ((H_NEW,), RUNNING_JOB), SERVING_NEW),
        Then("Pending", "WaitingForPrune", [H_NEW], True, False),
    ),
]


@table(PRUNE_LIFECYCLE)
def test_a_prune_job_is_never_dropped_before_its_outcome_is_read(
    case: Case[Around, Then],
) -> None:
    xr, prune, replicas = case.inputs
    # The last status was Ready for the prune's identity; the spec may name another now.
    observed = th.pvc("Bound")
    prune_key = None
    if prune is not None:
        obj = _observed_prune(*prune)
        (prune_key,) = obj
        observed.update(obj)
    required = th.resolved()
    if replicas is not None:
        required["replicas"] = replicas
    rsp = th.run(th.request(copy.deepcopy(xr), observed=observed, required=required))
    st = th.status(rsp)
    want = case.want
    assert (st["phase"], st["reason"]) == (want.phase, want.reason), (case.reason, st)
    assert [r["identity"] for r in st["stored"]] == want.stored, case.reason
    desired = h.desired(rsp)
    assert (prune_key in desired) is want.prune_kept, case.reason
    if want.prune_kept and prune is not None:
        # Kept exactly as it was desired (a changed pod template would be a new Job).
        assert desired[prune_key]["spec"] == observed[prune_key]["spec"]
    if not want.prune_kept:
        assert not _prune_jobs(rsp), case.reason  # and no other started meanwhile
    current = st["source"]["identity"]
    assert (th.hydration.job_key(current) in desired) is want.download, case.reason
    warns = th.warnings(rsp)
    if want.warning is None:
        assert not warns, warns
    else:
        assert any(want.warning in w for w in warns) and want.warning in st["message"]
    th.validate_status(xr, rsp)


def test_no_prune_while_a_download_job_of_another_identity_still_exists() -> None:
    """A download Job being deleted (the source changed) may still write its .partial:
    the prune that would remove it waits until it is gone."""
    composite = _ready_new([H_NEW, H_OLD])
    other = th.job([], active=1)  # the download Job of H_OLD (th.JOB_KEY), still there
    required = {**th.resolved(), "replicas": []}
    rsp = th.run(th.request(composite, observed={**th.pvc("Bound"), **other}, required=required))
    assert not _prune_jobs(rsp)
    assert [r["identity"] for r in th.status(rsp)["stored"]] == [H_NEW, H_OLD]
    rsp = th.run(th.request(composite, observed=th.pvc("Bound"), required=required))
    assert [_keep_of(b) for b in _prune_jobs(rsp).values()] == [(H_NEW,)]


def test_a_prune_lifecycle_leaves_the_current_identity_only() -> None:
    """Composed (the old identity leaves stored), running (kept), completed (recorded,
    then dropped): each call's status is the next call's input."""
    required = {**th.resolved(), "replicas": []}
    composite = _ready_new([H_NEW, H_OLD])
    first = th.run(th.request(composite, observed=th.pvc("Bound"), required=required))
    (key,) = _prune_jobs(first)
    assert th.status(first)["stored"] == [{"identity": H_NEW}]
    body = h.desired(first)[key]
    for remote, kept in ((RUNNING_JOB, True), (COMPLETE_JOB, False)):
        composite = th.hydration_xr(th.status(first), revision="v2")
        observed = {**th.pvc("Bound"), key: th.observed_object(body, remote)}
        first = th.run(th.request(composite, observed=observed, required=required))
        assert (key in h.desired(first)) is kept
        assert th.status(first)["stored"] == [{"identity": H_NEW}]
        assert th.status(first)["phase"] == "Ready"


# ---- a change of source: revert, third edit, upgrade (issue 13 p4/p5/p8) --------------


class Before(NamedTuple):
    """The hydration as the user left it, and whether the auth Secret still exists."""

    xr: dict[str, Any]
    secret: bool = True
    pvc: dict[str, Any] | None = None


class After(NamedTuple):
    """Phase, status.stored (identity -> usedBy), the download Jobs composed, and a
    fragment the message must hold (None: nothing particular)."""

    phase: str
    stored: dict[str, list[str]]
    jobs: list[str]
    says: str | None = None


SERVING_OLD = [_live(H_OLD, "r0", rolling_from=[H_OLD])]

SOURCE_CASES = [
    Case(
        "revert-while-the-new-identity-hydrates",
        "p8: the old identity is complete on the PVC (stored): Ready at once, no download",
        Before(_at(H_NEW, "Hydrating", [H_OLD], H_OLD)),
        After("Ready", {H_OLD: ["r0"]}, []),
    ),
    Case(
        "revert-without-the-token",
        "p8: no download, so no token needed: a deleted auth Secret does not block it",
        Before(_at(H_NEW, "Hydrating", [H_OLD], H_OLD), secret=False),
        After("Ready", {H_OLD: ["r0"]}, []),
    ),
    Case(
        "revert-after-the-new-identity-failed",
        "p4: the failed download does not matter to the identity still on the PVC",
        Before(_at(H_NEW, "Failed", [H_OLD], H_OLD, reason="BackoffLimitExceeded")),
        After("Ready", {H_OLD: ["r0"]}, []),
    ),
    Case(
        "revert-onto-a-re-created-pvc",
        "stored describes the PVC it was written for: re-created (another uid), it is empty",
        Before(
            _at(H_NEW, "Hydrating", [H_OLD], H_OLD, pvcUID="uid-1"),
            pvc=th.pvc_with("Bound", "uid-2"),
        ),
        After("Hydrating", {}, [H_OLD], "re-created"),
    ),
    Case(
        "a-third-identity-before-the-second-was-ready",
        "p4b: the new edit downloads its own identity; the second one's Job is not composed "
        "(its .partial is removed by the next download); the served one stays, with usedBy",
        Before(_at(H_NEW, "Hydrating", [H_OLD], H_THIRD)),
        After("Hydrating", {H_OLD: ["r0"]}, [H_THIRD]),
    ),
    Case(
        "upgrade-from-the-release-before-side-by-side",
        "p5: Ready without status.stored (weights at the PVC root): hydrates again into the "
        "identity's directory and says why; stored lists nothing yet",
        Before(_at(H_OLD, "Ready", None, reason="Hydrated")),
        After("Hydrating", {}, [H_OLD], "before side-by-side revisions"),
    ),
    Case(
        "upgrade-without-the-token",
        "p5: the download needs the token again; the message says why it is needed",
        Before(_at(H_OLD, "Ready", None, reason="Hydrated"), secret=False),
        After("Pending", {}, [], "before side-by-side revisions"),
    ),
    Case(
        "ready-but-not-stored",
        "Ready counts only when status.stored lists the identity",
        Before(_at(H_OLD, "Ready", [], reason="Hydrated")),
        After("Hydrating", {}, [H_OLD], "status.stored does not list"),
    ),
]


@table(SOURCE_CASES)
def test_a_source_change_is_ready_only_for_what_the_pvc_holds(case: Case[Before, After]) -> None:
    xr, secret, pvc = case.inputs
    required = {**th.resolved(secret=None if secret else []), "replicas": SERVING_OLD}
    observed = pvc if pvc is not None else th.pvc("Bound")
    rsp = th.run(th.request(copy.deepcopy(xr), observed=observed, required=required))
    st = th.status(rsp)
    assert st["phase"] == case.want.phase, (case.reason, st)
    assert {r["identity"]: r.get("usedBy", []) for r in st["stored"]} == case.want.stored
    jobs = sorted(k[len("job-") :] for k in h.desired(rsp) if k.startswith("job-"))
    assert jobs == case.want.jobs, case.reason
    if case.want.says is not None:
        assert case.want.says in st["message"], st["message"]
    if case.want.phase == "Ready":
        assert "token-secret" not in h.desired(rsp)
        assert "auth-secret" not in h.requirements(rsp)
        assert h.xr_ready(rsp) == "READY_TRUE"
    th.validate_status(xr, rsp)


def test_the_new_identity_hydrates_beside_the_old_one() -> None:
    """A revision edit: the old identity stays stored (replicas keep serving it, usedBy
    says so), the new one downloads, nothing is pruned while it is not Ready."""
    prev = th.prev_status("Ready", H_OLD, stored=[{"identity": H_OLD}])
    composite = th.hydration_xr(prev, revision="v2")
    required = {**th.resolved(), "replicas": [_live(H_OLD)]}
    rsp = th.run(th.request(composite, observed=th.pvc("Bound"), required=required))
    st = th.status(rsp)
    assert st["phase"] == "Hydrating" and st["source"]["identity"] == H_NEW
    assert st["stored"] == [{"identity": H_OLD, "usedBy": ["r0"]}]
    assert th.hydration.job_key(H_NEW) in h.desired(rsp)
    assert not _prune_jobs(rsp)


# ---- the PVC request refused (issue 13 p11) -----------------------------------------


def _pvc_refused(message: str, phase: str = "Bound") -> dict[str, Any]:
    p = th.pvc(phase)
    p["pvc"]["status"]["atProvider"]["manifest"]["spec"]["resources"]["requests"] = {
        "storage": "2Gi"
    }
    p["pvc"]["status"]["conditions"] = [
        {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message}
    ]
    return p


REFUSED = (
    'cannot update object: persistentvolumeclaims "x" is forbidden: only dynamically '
    "provisioned pvc can be resized and the storageclass that provisions the pvc must "
    "support resize"
)


@pytest.mark.parametrize(
    ("phase", "xr"),
    [("Ready", _at(H_OLD, "Ready", [H_OLD])), ("Hydrating", _at(H_NEW, "Hydrating", [H_OLD]))],
    ids=["ready", "hydrating"],
)
def test_a_refused_pvc_request_is_said_in_every_phase(phase: str, xr: dict[str, Any]) -> None:
    required = {**th.resolved(), "replicas": []}
    rsp = th.run(th.request(copy.deepcopy(xr), observed=_pvc_refused(REFUSED), required=required))
    st = th.status(rsp)
    assert st["phase"] == phase
    pvc = th.cache_pvc_name(NAMESPACE, th.CACHE)
    for text in (st["message"], *th.warnings(rsp)):
        assert f"PVC {pvc} (request 4Gi) not applied: {REFUSED}" in text
    # Said once: the next call (the message recorded) emits no second event ...
    again = copy.deepcopy(xr)
    again["status"]["message"] = st["message"]
    rsp = th.run(th.request(again, observed=_pvc_refused(REFUSED), required=required))
    assert not th.warnings(rsp) and REFUSED in th.status(rsp)["message"]
    # ... and once the PVC is applied, the message no longer carries it.
    rsp = th.run(th.request(again, observed=th.pvc("Bound"), required=required))
    assert REFUSED not in th.status(rsp)["message"]


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


def test_a_pvc_that_cannot_be_created_is_said_once() -> None:
    """Not bound because provider-kubernetes cannot apply it: the error is said once."""
    required = {**th.resolved(), "replicas": []}
    rsp = th.run(
        th.request(th.hydration_xr(), observed=_pvc_refused(REFUSED, "Pending"), required=required)
    )
    st = th.status(rsp)
    assert (st["phase"], st["reason"]) == ("Pending", "PVCNotBound")
    assert st["message"].count(REFUSED) == 1, st["message"]
    assert [w for w in th.warnings(rsp) if REFUSED in w]


def _quota(used: int) -> str:
    return (
        'cannot update object: persistentvolumeclaims "x" is forbidden: exceeded quota: '
        f"storage, requested: requests.storage=4Gi, used: requests.storage={used}Gi, "
        "limited: requests.storage=100Gi"
    )


class Carried(NamedTuple):
    """A phase carried from the last status (message included) while the PVC apply
    error changes each call: the status, and the observed PVC's phase."""

    prev: dict[str, Any]
    pvc_phase: str = "Bound"


CARRIED_CASES = [
    Case("failed-job-gone", "Failed, the download Job not observed: the message is carried; "
         "the refused PVC's quota counts change each call",
         Carried(th.prev_status("Failed", th.IDENTITY, stored=[], reason="BackoffLimitExceeded",
                                message="Job BackoffLimitExceeded: revision v2 not found")),
         "Job BackoffLimitExceeded: revision v2 not found"),
    Case("failed-huge-job-message", "a Job message beyond the bound is cut, then stays cut",
         Carried(th.prev_status("Failed", th.IDENTITY, stored=[], reason="BackoffLimitExceeded",
                                message="Job BackoffLimitExceeded: " + "x" * 5000)),
         "Job BackoffLimitExceeded: xxx"),
]  # fmt: skip


@table(CARRIED_CASES)
def test_a_carried_message_is_rebuilt_and_bounded(case: Case[Carried, str]) -> None:
    """Six calls, a different PVC apply error each: ``status.message`` is the base plus
    this call's warning (never the last message plus warnings), bounded, and the
    Warning is emitted once for the reason, not per text."""
    xr = th.hydration_xr(copy.deepcopy(case.inputs.prev))
    required = {**th.resolved(), "replicas": []}
    lengths, warned = [], []
    for used in range(10, 16):
        observed = _pvc_refused(_quota(used), case.inputs.pvc_phase)
        rsp = th.run(th.request(copy.deepcopy(xr), observed=observed, required=required))
        st = th.status(rsp)
        assert st["phase"] == "Failed", case.reason
        assert st["message"].startswith(case.want), (case.reason, st["message"][:200])
        assert st["message"].count("PVCNotSynced: ") == 1, (case.reason, st["message"])
        assert _quota(used) in st["message"] and _quota(used - 1) not in st["message"]
        lengths.append(len(st["message"]))
        warned.append(len(th.warnings(rsp)))
        xr = th.hydration_xr(st)
    assert len(set(lengths[1:])) == 1 and max(lengths) <= 2048, (case.reason, lengths)
    assert warned == [1, 0, 0, 0, 0, 0], (case.reason, warned)


# ---- a failed or never-created prune Job is recorded, dropped, retried after a back-off ---

import datetime  # noqa: E402

from function.manifests.hydration import PRUNE_RETRY_SECONDS  # noqa: E402

QUOTA = (
    'cannot create object: jobs.batch "x" is forbidden: exceeded quota: jobs, requested: '
    "count/jobs.batch=1, used: count/jobs.batch=10, limited: count/jobs.batch=10"
)
UNAPPLIED = "unapplied"  # the prune Object's state: Synced=False, no remote Job
NOT_REPORTED = "not-reported"  # created, provider-kubernetes reported nothing yet
INCOMPLETE = (
    "cannot determine creation result - remove the crossplane.io/external-create-pending "
    "annotation if it is safe to proceed"
)
UNREACHABLE = "cannot connect: dial tcp: i/o timeout"


def _ago(seconds: float) -> str:
    return (h.NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


class Unreported(NamedTuple):
    """A prune Object with no remote observation (no ``status.atProvider``): its
    ``Synced`` condition (the error; None: ``Synced=True``) and crossplane-runtime's
    create annotations (``pending``, ``succeeded``, ``failed``: RFC 3339 times)."""

    error: str | None
    notes: dict[str, str]


CREATE_PENDING = Unreported(INCOMPLETE, {"pending": _ago(60), "failed": _ago(120)})
CREATED_NOT_REPORTED = Unreported(None, {"pending": _ago(60), "succeeded": _ago(59)})
CREATED_THEN_UNREACHABLE = Unreported(UNREACHABLE, {"pending": _ago(60), "succeeded": _ago(59)})
CREATE_FAILED = Unreported(QUOTA, {"pending": _ago(120), "failed": _ago(60)})


def _prune_observed(keep: tuple[str, ...], remote: Any) -> dict[str, Any]:
    """The observed prune Job Object keeping ``keep``: its remote Job in ``remote`` state,
    or one provider-kubernetes could not create (UNAPPLIED), has not reported on, or
    reports as ``remote`` (an :class:`Unreported`)."""
    if remote not in (UNAPPLIED, NOT_REPORTED) and not isinstance(remote, Unreported):
        return _observed_prune(keep, remote)
    ((key, obs),) = _observed_prune(keep, RUNNING_JOB).items()
    obs["status"] = {}
    if remote == UNAPPLIED:
        remote = Unreported(QUOTA, {})
    if isinstance(remote, Unreported):
        synced = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}
        if remote.error is not None:
            synced = {
                "type": "Synced",
                "status": "False",
                "reason": "ReconcileError",
                "message": remote.error,
            }
        obs["status"]["conditions"] = [
            synced,
            {"type": "Ready", "status": "False", "reason": "Creating"},
        ]
        notes = {f"crossplane.io/external-create-{k}": v for k, v in remote.notes.items()}
        if notes:
            obs["metadata"].setdefault("annotations", {}).update(notes)
    return {key: obs}


def _prune_job_name(keep: tuple[str, ...]) -> str:
    (obj,) = _prune_observed(keep, RUNNING_JOB).values()
    return obj["spec"]["forProvider"]["manifest"]["metadata"]["name"]


class Record(NamedTuple):
    """``status.prune`` as the last status wrote it: the failed keep-list, seconds since
    ``failedAt``, and the reason."""

    keep: tuple[str, ...]
    age: float
    reason: str = "BackoffLimitExceeded"


class Failing(NamedTuple):
    """The hydration, its last ``status.prune`` (None: none), the prune Job observed
    (keep-list and remote state; None: none), and the live replicas (None: not known)."""

    xr: dict[str, Any]
    record: Record | None
    prune: tuple[tuple[str, ...], Any] | None
    replicas: list[dict[str, Any]] | None


class Handled(NamedTuple):
    """Phase and reason; the observed prune Job still desired; the keep-list of a prune
    Job composed anew (None: none); the current identity's download composed;
    ``status.prune.reason`` (None: no record) and whether its ``failedAt`` is now; a
    fragment of the message (None: nothing particular) and whether a Warning is emitted."""

    phase: str
    reason: str
    prune_kept: bool
    new_prune: tuple[str, ...] | None
    download: bool
    record: str | None
    recorded_now: bool = False
    says: str | None = None
    warned: bool = False


BACKOFF_REASON = "BackoffLimitExceeded"

PRUNE_FAILURES = [
    Case(
        "failed-prune-not-recorded-yet",
        "a failed prune whose keep-list still covers the current identity and what live "
        "replicas read is kept for the call that records its failure (status.prune)",
        Failing(_ready_new([H_NEW, H_OLD]), None, ((H_NEW,), FAILED_JOB), SERVING_NEW),
        Handled("Ready", "Ready", True, None, False, BACKOFF_REASON, True, "prune Job", True),
    ),
    Case(
        "failed-prune-recorded",
        "once status.prune records it, the failed Job is dropped (deleted on the cluster, it "
        "is never re-created to run again); the warning stays in the message",
        Failing(_ready_new([H_NEW]), Record((H_NEW,), 60), ((H_NEW,), FAILED_JOB), SERVING_NEW),
        Handled("Ready", "Ready", False, None, False, BACKOFF_REASON, False, "prune Job"),
    ),
    Case(
        "failed-prune-no-longer-covers-the-current-identity",
        "the source moved on: a failed prune keeping only the old identity is dropped at "
        "once (recorded in the same call) and the new identity downloads",
        Failing(_at(H_NEW, "Ready", [H_NEW], H_THIRD), None, ((H_NEW,), FAILED_JOB), SERVING_NEW),
        Handled("Hydrating", "JobRunning", False, None, True, BACKOFF_REASON, True, None, True),
    ),
    Case(
        "failed-prune-no-longer-covers-a-live-replica",
        "a live replica reads an identity the failed keep-list does not name: dropped at once",
        Failing(
            _ready_new([H_NEW]),
            None,
            ((H_NEW,), FAILED_JOB),
            [_live(H_NEW, "r0", rolling_from=[H_NEW, H_THIRD])],
        ),
        Handled("Ready", "Ready", False, None, False, BACKOFF_REASON, True, None, True),
    ),
    Case(
        "failed-prune-while-replicas-not-known",
        "not known is not covered: a failed prune is dropped at once (it runs nothing)",
        Failing(_ready_new([H_NEW]), None, ((H_NEW,), FAILED_JOB), None),
        Handled("Ready", "Ready", False, None, False, BACKOFF_REASON, True, None, True),
    ),
    Case(
        "the-failed-keep-list-waits-for-the-back-off",
        "the keep-list that just failed is not composed again before the back-off",
        Failing(_ready_new([H_NEW]), Record((H_NEW,), PRUNE_RETRY_SECONDS - 60), None, SERVING_NEW),
        Handled("Ready", "Ready", False, None, False, BACKOFF_REASON, False, "prune Job"),
    ),
    Case(
        "retried-after-the-back-off",
        "after the back-off a prune of the current keep-list is composed (what the failed "
        "one should have removed may still be on the PVC); the record is cleared",
        Failing(_ready_new([H_NEW]), Record((H_NEW,), PRUNE_RETRY_SECONDS + 1), None, SERVING_NEW),
        Handled("Ready", "Ready", False, (H_NEW,), False, None),
    ),
    Case(
        "a-changed-keep-list-is-not-held",
        "a keep-list other than the failed one is composed at once",
        Failing(
            _ready_new([H_NEW, H_OLD]),
            Record((H_NEW,), 60),
            None,
            [_live(H_NEW, "r0", rolling_from=[H_NEW, H_OLD])],
        ),
        Handled("Ready", "Ready", False, tuple(sorted((H_NEW, H_OLD))), False, None),
    ),
    Case(
        "a-download-comes-before-any-prune",
        "a prune is composed only once the current identity is Ready and stored: an owed "
        "retry waits while it downloads",
        Failing(
            _at(H_THIRD, "Hydrating", [H_NEW]), Record((H_NEW,), PRUNE_RETRY_SECONDS + 1), None, []
        ),
        Handled("Hydrating", "JobRunning", False, None, True, BACKOFF_REASON, False, "prune Job"),
    ),
    # ---- a prune Job provider-kubernetes cannot create is not running ----
    Case(
        "unapplied-prune-blocks-no-revert",
        "Synced=False and no remote Job (a jobs quota): not running, so the revert to the "
        "identity it would remove downloads; the warning names the Job and the error",
        Failing(_at(H_NEW, "Ready", [H_NEW], H_OLD), None, ((H_NEW,), UNAPPLIED), SERVING_NEW),
        Handled("Hydrating", "JobRunning", False, None, True, "PruneNotSynced", True, QUOTA, True),
    ),
    Case(
        "unapplied-prune-blocks-no-new-revision",
        "nor a later revision: the cache is never stuck on it",
        Failing(_at(H_NEW, "Ready", [H_NEW], H_THIRD), None, ((H_NEW,), UNAPPLIED), SERVING_NEW),
        Handled("Hydrating", "JobRunning", False, None, True, "PruneNotSynced", True, QUOTA, True),
    ),
    Case(
        "unapplied-prune-while-ready",
        "dropped and recorded; the same keep-list is tried again only after the back-off",
        Failing(_ready_new([H_NEW]), None, ((H_NEW,), UNAPPLIED), SERVING_NEW),
        Handled("Ready", "Ready", False, None, False, "PruneNotSynced", True, QUOTA, True),
    ),
    Case(
        "prune-not-reported-yet-is-running",
        "an Object provider-kubernetes has not reported on (no Synced, no Job) may be "
        "creating the Job: not known, so it still holds a download it would remove",
        Failing(_at(H_NEW, "Ready", [H_NEW], H_OLD), None, ((H_NEW,), NOT_REPORTED), SERVING_NEW),
        Handled("Pending", "WaitingForPrune", True, None, False, None),
    ),
    # ---- "never created" is evidence (observed._never_created), as for the download Job ----
    Case(
        "prune-create-pending-is-running",
        "a create whose result provider-kubernetes does not know (external-create-pending "
        "newer than any result; Synced=False 'cannot determine creation result') may have "
        "created the Job: kept as observed, it still holds a download it would remove",
        Failing(_at(H_NEW, "Ready", [H_NEW], H_OLD), None, ((H_NEW,), CREATE_PENDING), SERVING_NEW),
        Handled("Pending", "WaitingForPrune", True, None, False, None),
    ),
    Case(
        "prune-created-not-reported-is-running",
        "created (external-create-succeeded, Synced=True), the remote Job not reported yet: "
        "kept as observed",
        Failing(
            _at(H_NEW, "Ready", [H_NEW], H_OLD), None, ((H_NEW,), CREATED_NOT_REPORTED), SERVING_NEW
        ),
        Handled("Pending", "WaitingForPrune", True, None, False, None),
    ),
    Case(
        "prune-created-then-unreachable-is-running",
        "created (external-create-succeeded), the status carrying the remote Job never "
        "written, then the cluster unreachable (Synced=False): the Job exists, kept",
        Failing(
            _at(H_NEW, "Ready", [H_NEW], H_OLD),
            None,
            ((H_NEW,), CREATED_THEN_UNREACHABLE),
            SERVING_NEW,
        ),
        Handled("Pending", "WaitingForPrune", True, None, False, None),
    ),
    Case(
        "prune-create-failed-is-not-running",
        "the last create failed (external-create-failed after -pending, Synced=False, no "
        "remote Job): known never created, recorded and dropped as before",
        Failing(_at(H_NEW, "Ready", [H_NEW], H_OLD), None, ((H_NEW,), CREATE_FAILED), SERVING_NEW),
        Handled("Hydrating", "JobRunning", False, None, True, "PruneNotSynced", True, QUOTA, True),
    ),
]


def _with_record(xr: dict[str, Any], record: Record | None) -> dict[str, Any]:
    """``xr`` whose last status carries ``record`` in ``status.prune`` (and, as the
    function writes it, its warning in the message)."""
    xr = copy.deepcopy(xr)
    if record is None:
        return xr
    name = _prune_job_name(record.keep)
    failed_at = h.NOW - datetime.timedelta(seconds=record.age)
    xr["status"]["prune"] = {
        "jobName": name,
        "keep": list(record.keep),
        "reason": record.reason,
        "message": "Job has reached the specified backoff limit",
        "failedAt": failed_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    xr["status"]["message"] += (
        f"; prune Job {name} {record.reason}: Job has reached the specified backoff limit"
    )
    return xr


@table(PRUNE_FAILURES)
def test_a_failed_or_uncreated_prune_is_recorded_and_dropped(
    case: Case[Failing, Handled],
) -> None:
    xr, record, prune, replicas = case.inputs
    xr = _with_record(xr, record)
    observed = th.pvc("Bound")
    key = None
    if prune is not None:
        obj = _prune_observed(*prune)
        (key,) = obj
        observed.update(obj)
    required = th.resolved()
    if replicas is not None:
        required["replicas"] = replicas
    rsp = th.run(th.request(xr, observed=observed, required=required))
    st, want = th.status(rsp), case.want
    assert (st["phase"], st["reason"]) == (want.phase, want.reason), (case.reason, st)
    desired = h.desired(rsp)
    if key is not None:
        assert (key in desired) is want.prune_kept, case.reason
    composed = {k: _keep_of(b) for k, b in _prune_jobs(rsp).items() if k != key}
    assert list(composed.values()) == ([] if want.new_prune is None else [want.new_prune])
    current = st["source"]["identity"]
    assert (th.hydration.job_key(current) in desired) is want.download, case.reason
    rec = st.get("prune")
    assert (rec or {}).get("reason") == want.record, (case.reason, rec)
    if rec is not None:
        now = h.NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert (rec["failedAt"] == now) is want.recorded_now, case.reason
        assert rec["jobName"] in st["message"]
        if prune is not None:
            assert rec["keep"] == list(prune[0])
    if want.says is not None:
        assert want.says in st["message"], (case.reason, st["message"])
    assert bool(th.warnings(rsp)) is want.warned, (case.reason, th.warnings(rsp))
    if want.warned and want.says is not None:
        assert any(want.says in w for w in th.warnings(rsp))
    # Never desired: a prune whose keep-list misses the current identity or a live read.
    for body in _prune_jobs(rsp).values():
        keep = set(_keep_of(body))
        assert current in keep or want.reason == "WaitingForPrune", case.reason
        if replicas is not None and body is not desired.get(key):
            for r in replicas:
                assert set(r.get("status", {}).get("cacheIdentities", [])) <= keep
    th.validate_status(xr, rsp)
    if isinstance(prune and prune[1], Unreported):
        # An unchanged world: the status written is read back and written again as is,
        # the prune Object kept (or not) alike, no Warning said twice.
        again = copy.deepcopy(xr)
        again["status"] = st
        rsp2 = th.run(th.request(again, observed=observed, required=required))
        assert th.status(rsp2) == st, case.reason
        assert (key in h.desired(rsp2)) is want.prune_kept, case.reason
        assert not th.warnings(rsp2), case.reason


def test_a_failed_prune_lifecycle() -> None:
    """Failed (kept, recorded), recorded (dropped; the warning stays, said once), held by
    the back-off, then retried from the current keep-list: each status feeds the next call."""
    required = {**th.resolved(), "replicas": SERVING_NEW}
    clock = h.Clock()
    failed = _prune_observed((H_NEW,), FAILED_JOB)
    (key,) = failed
    observed = {**th.pvc("Bound"), **failed}
    xr = _ready_new([H_NEW, H_OLD])
    calls = [
        (observed, True, 1),  # the failure is recorded, the Job kept for that call
        (observed, False, 0),  # recorded: dropped, no second Warning
        (th.pvc("Bound"), False, 0),  # gone from the cluster: not composed again
    ]
    for obs, kept, warned in calls:
        rsp = th.run(th.request(xr, observed=obs, required=required), now=clock)
        st = th.status(rsp)
        assert st["phase"] == "Ready" and st["prune"]["reason"] == BACKOFF_REASON
        assert (key in h.desired(rsp)) is kept and len(_prune_jobs(rsp)) == int(kept)
        assert len(th.warnings(rsp)) == warned and "prune Job" in st["message"]
        assert rsp.meta.ttl.seconds <= PRUNE_RETRY_SECONDS
        xr = th.hydration_xr(st, revision="v2")
        clock.now += datetime.timedelta(seconds=60)
    clock.now += datetime.timedelta(seconds=PRUNE_RETRY_SECONDS)
    rsp = th.run(th.request(xr, observed=th.pvc("Bound"), required=required), now=clock)
    st = th.status(rsp)
    assert [_keep_of(b) for b in _prune_jobs(rsp).values()] == [(H_NEW,)]
    assert "prune" not in st and "prune Job" not in st["message"]
