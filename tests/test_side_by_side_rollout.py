"""Side-by-side revisions, the serving side (issue 13, review of the side-by-side build).

Table-driven, over the function's own composers (tests/support/harness):

- a ModelReplica writes ``status.cacheIdentities``: the identity it serves, and the one
  it served before until its workload has fully rolled onto the new one (the contract
  of ``function.api.modelreplica``, read by the hydration's prune); ``ModelReady`` is not
  True while only the old pods serve;
- an existing replica from the release before side-by-side revisions (weights at the
  PVC root, no identity in its spec) keeps reading the root until its cluster's
  hydration stores the identity in its own directory.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import Struct

from function.api.modelreplica import STATUS_CACHE_IDENTITIES, identities_in_use
from function.manifests import workloads as wl
from jobs.contract import CACHE_MOUNT_PATH, identity_dir
from tests.support import harness as h
from tests.support.replica_fixtures import multi_spec, observed_object, single_spec
from tests.support.table import Case, table
from tests.test_replica import engine_of, manifest, run
from tests.test_side_by_side import NEW, OLD, _hydrating_new

WORKLOAD = "workload-vllm"
DEP_FULL = {  # kubectl rollout status: complete
    "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1,
}  # fmt: skip
DEP_SURGE = {  # maxSurge 1: the new pod is not available yet, the old one serves
    "observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1,
}  # fmt: skip
DEP_OLD_GEN = {  # the Deployment controller has not seen the new template yet
    "observedGeneration": 0, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1,
}  # fmt: skip
DEP_NO_COUNTS = {"observedGeneration": 1}  # counts not reported: not known
DEP_DRAINING = {**DEP_FULL, "terminatingReplicas": 1}  # a pod terminates (1.33+)


def _spec(identity: str | None, multi: bool = False) -> dict[str, Any]:
    spec = multi_spec() if multi else single_spec()
    if identity is not None:
        spec["modelCacheRef"] = {**spec["modelCacheRef"], "identity": identity}
    return spec


def _reading(desired: dict[str, Any], source: str) -> dict[str, Any]:
    """``desired`` with every MODELPLANE_MODEL pointing at ``source`` (an identity, or
    "" for the PVC root): the workload as a previous call composed it."""
    path = wl.cache_source(source)
    body = copy.deepcopy(desired)
    m = body["spec"]["forProvider"]["manifest"]
    for t in wl.pod_templates(m, m["kind"]):
        for c in t["spec"].get("containers", []):
            for e in c.get("env", []):
                if e["name"] == "MODELPLANE_MODEL":
                    e["value"] = path
    return body


def _observed(spec: dict[str, Any], source: str, remote: dict[str, Any]) -> dict[str, Any]:
    """The replica's workload observed reading ``source`` with remote status ``remote``."""
    first = h.desired(run(spec, _hydrating_new("Ready", [NEW, OLD])))
    return {WORKLOAD: observed_object(_reading(first[WORKLOAD], source), remote)}


class Rolling(NamedTuple):
    """The replica's spec identity, what its workload's observed template reads and
    its rollout status, and its last ``status.cacheIdentities`` (None: absent)."""

    spec: str
    reads: str
    remote: dict[str, Any]
    last: list[str] | None = None


class Reads(NamedTuple):
    """``status.cacheIdentities`` and whether ``ModelReady`` is True."""

    identities: list[str]
    serving: bool


ROLLOUT_CASES = [
    Case("steady", "a replica fully rolled on its identity names only it",
         Rolling(OLD, OLD, DEP_FULL, [OLD]), Reads([OLD], True)),
    Case("spec-moved-not-applied", "the deployment moved the spec; the observed template still "
         "reads the old identity: both are named, and the replica does not claim to serve NEW",
         Rolling(NEW, OLD, DEP_FULL, [OLD]), Reads([NEW, OLD], False)),
    Case("surge", "the new pod is not available yet, the old one serves: both named, not Ready",
         Rolling(NEW, NEW, DEP_SURGE, [NEW, OLD]), Reads([NEW, OLD], False)),
    Case("old-generation", "the controller has not observed the new template yet",
         Rolling(NEW, NEW, DEP_OLD_GEN, [NEW, OLD]), Reads([NEW, OLD], False)),
    Case("unknown-counts", "a rollout state not reported is not known: both kept",
         Rolling(NEW, NEW, DEP_NO_COUNTS, [NEW, OLD]), Reads([NEW, OLD], False)),
    Case("rolled", "every pod updated and available, none of the old template: OLD dropped",
         Rolling(NEW, NEW, DEP_FULL, [NEW, OLD]), Reads([NEW], True)),
    Case("old-pods-terminating", "every pod updated and available, a pod still terminates "
         "(status.terminatingReplicas, Kubernetes 1.33+, counts every template's): a "
         "terminating pod reads no files, so rolled, OLD dropped",
         Rolling(NEW, NEW, DEP_DRAINING, [NEW, OLD]), Reads([NEW], True)),
    Case("current-pod-terminating", "steady on NEW, a pod of the current template is "
         "evicted (or stuck Terminating on a lost node): still Ready, only NEW named",
         Rolling(NEW, NEW, DEP_DRAINING, [NEW]), Reads([NEW], True)),
    Case("terminated", "terminatingReplicas 0: rolled, OLD dropped",
         Rolling(NEW, NEW, {**DEP_DRAINING, "terminatingReplicas": 0}, [NEW, OLD]),
         Reads([NEW], True)),
    Case("remembered-from-hydration-status", "a status written before cacheIdentities existed: "
         "the identity served is remembered from status.hydration.identity",
         Rolling(NEW, NEW, DEP_SURGE, None), Reads([NEW, OLD], False)),
]  # fmt: skip


@table(ROLLOUT_CASES)
def test_replica_names_every_identity_its_pods_may_read(case: Case[Rolling, Reads]) -> None:
    spec = _spec(case.inputs.spec)
    observed = _observed(spec, case.inputs.reads, case.inputs.remote)
    status: dict[str, Any] = {"hydration": {"identity": OLD}}
    if case.inputs.last is not None:
        status[STATUS_CACHE_IDENTITIES] = case.inputs.last
    rsp = run(spec, _hydrating_new("Ready", [NEW, OLD]), observed=observed, status=status)
    st = h.status(rsp)
    assert st[STATUS_CACHE_IDENTITIES] == case.want.identities, case.reason
    cond = h.conditions(rsp)["ModelReady"]
    assert (cond["status"] == "True") == case.want.serving, (case.reason, cond)
    # The contract's reader (the hydration's prune) sees the same identities.
    xr = Struct()
    xr.update({"spec": spec, "status": st})
    assert identities_in_use(xr) == set(case.want.identities)


def test_a_gated_replica_keeps_naming_what_its_kept_workload_reads() -> None:
    """Spec moved to NEW but NEW is not stored: the replica is gated, its workload is
    kept as it is (reading OLD), and OLD stays named."""
    spec = _spec(NEW)
    observed = _observed(spec, OLD, DEP_FULL)
    rsp = run(spec, _hydrating_new("Hydrating", [OLD]), observed=observed)
    assert h.conditions(rsp)["ModelReady"]["reason"] == "Hydrating"
    assert h.status(rsp)[STATUS_CACHE_IDENTITIES] == [NEW, OLD]


def test_unresolved_requirements_echo_the_identities() -> None:
    spec = _spec(NEW)
    req = _hydrating_new("Ready", [NEW, OLD])
    req["hydration"] = None
    rsp = run(spec, req, status={STATUS_CACHE_IDENTITIES: [NEW, OLD]})
    assert h.status(rsp)[STATUS_CACHE_IDENTITIES] == [NEW, OLD]


LWS_FULL = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
            "conditions": [{"type": "Available", "status": "True"}]}  # fmt: skip
LWS_UPDATING = {
    **LWS_FULL,
    "conditions": [
        {"type": "Available", "status": "True"},
        {"type": "UpdateInProgress", "status": "True"},
    ],
}
LWS_SURGE = {**LWS_FULL, "replicas": 2}
LWS_NO_GEN = {k: v for k, v in LWS_FULL.items() if k != "observedGeneration"}

LWS_CASES = [
    Case("lws-rolled", "LWS: updated == replicas == spec, ready, at the observed generation",
         LWS_FULL, Reads([NEW], True)),
    Case("lws-update-in-progress", "LWS: UpdateInProgress=True", LWS_UPDATING,
         Reads([NEW, OLD], False)),
    Case("lws-surge", "LWS: a surge group of the old template still runs", LWS_SURGE,
         Reads([NEW, OLD], False)),
    Case("lws-no-generation", "LWS without observedGeneration: not known, both kept "
         "(ModelReady as the LWS readiness rule says)", LWS_NO_GEN, Reads([NEW, OLD], True)),
]  # fmt: skip


@table(LWS_CASES)
def test_leaderworkerset_rollout(case: Case[dict[str, Any], Reads]) -> None:
    spec = _spec(NEW, multi=True)
    first = h.desired(run(spec, _hydrating_new("Ready", [NEW, OLD])))
    (key,) = [k for k in first if k.startswith("workload-")]
    observed = {key: observed_object(first[key], case.inputs)}
    status = {STATUS_CACHE_IDENTITIES: [NEW, OLD]}
    rsp = run(spec, _hydrating_new("Ready", [NEW, OLD]), observed=observed, status=status)
    assert h.status(rsp)[STATUS_CACHE_IDENTITIES] == case.want.identities, case.reason
    cond = h.conditions(rsp)["ModelReady"]
    assert (cond["status"] == "True") == case.want.serving, (case.reason, cond)


# ---- upgrade: a replica of the release before side-by-side revisions -----------------


class Legacy(NamedTuple):
    """What the hydration stores (None: no status.stored, as the previous release)."""

    stored: list[str] | None
    phase: str = "Ready"


class Path(NamedTuple):
    """MODELPLANE_MODEL of the composed workload, None when the replica is gated."""

    model: str | None


def _legacy_required(legacy: Legacy) -> dict[str, Any]:
    req = _hydrating_new(legacy.phase, legacy.stored or [])
    (hyd,) = req["hydration"]
    hyd["spec"]["huggingFace"]["revision"] = "main"
    hyd["status"]["source"] = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "main",
                               "identity": OLD}  # fmt: skip
    if legacy.stored is None:
        del hyd["status"]["stored"]
    return req


LEGACY_CASES = [
    Case("latched-without-stored", "a Ready hydration of the previous release (no stored): "
         "the workload keeps reading the PVC root, no roll onto a missing directory",
         Legacy(None), Path(CACHE_MOUNT_PATH)),
    Case("rehydrating-into-its-directory", "while the hydration writes the identity's "
         "directory, the root still serves", Legacy([], "Hydrating"), Path(CACHE_MOUNT_PATH)),
    Case("stored", "once the identity is stored in its directory, the replica reads it",
         Legacy([OLD]), Path(identity_dir(CACHE_MOUNT_PATH, OLD))),
    Case("failed", "the re-download into the identity's directory Failed: the root is "
         "intact (never written or pruned by the new layout), the replica keeps serving it",
         Legacy([], "Failed"), Path(CACHE_MOUNT_PATH)),
    Case("failed-never-latched", "Failed before the previous release stored anything (no "
         "stored): the root the workload reads is not touched, it keeps serving",
         Legacy(None, "Failed"), Path(CACHE_MOUNT_PATH)),
]  # fmt: skip


@table(LEGACY_CASES)
def test_a_replica_of_the_previous_release_keeps_the_pvc_root(case: Case[Legacy, Path]) -> None:
    spec = _spec(None)
    observed = _observed(spec, "", DEP_FULL)
    rsp = run(spec, _legacy_required(case.inputs), observed=observed)
    desired = h.desired(rsp)
    if case.want.model is None:
        kept = desired[WORKLOAD]["spec"]["forProvider"]["manifest"]  # kept as it is
        assert kept == observed[WORKLOAD]["spec"]["forProvider"]["manifest"], case.reason
        return
    pod = manifest(rsp, WORKLOAD)["spec"]["template"]
    env = engine_of(pod)["env"][0]
    assert env == {"name": "MODELPLANE_MODEL", "value": case.want.model}, case.reason
    reads_root = case.want.model == CACHE_MOUNT_PATH
    # Reading the root, the observed pods serve what is composed; moved to the
    # identity's directory, the workload rolls (not serving it until rolled).
    cond = h.conditions(rsp)["ModelReady"]
    assert (cond["status"] == "True") == reads_root, (case.reason, cond)
    st = h.status(rsp)
    assert ("identity" in st["hydration"]) != reads_root, case.reason
    assert (STATUS_CACHE_IDENTITIES in st) != reads_root, case.reason
    assert st["hydration"]["phase"] == case.inputs.phase, case.reason
    assert not [m for sev, m in h.results(rsp) if sev == "Warning"], case.reason


def test_a_gated_replica_of_the_previous_release_without_workload_stays_gated() -> None:
    """No observed workload reading the root (it never served): a Failed hydration gates
    it as before."""
    rsp = run(_spec(None), _legacy_required(Legacy([], "Failed")))
    cond = h.conditions(rsp)["ModelReady"]
    assert (cond["status"], cond["reason"]) == ("False", "HydrationFailed")
    assert WORKLOAD not in h.desired(rsp)


class Unset(NamedTuple):
    """A replica whose spec names no identity: its cluster's hydration (phase of the new
    identity, stored), its last ``status.hydration.identity`` (None: absent) and what its
    observed workload's template reads."""

    phase: str
    stored: list[str]
    last: str | None
    reads: str


class Composed(NamedTuple):
    """ModelReady reason and MODELPLANE_MODEL composed (None: gated, workload kept)."""

    reason: str
    model: str | None


AT_OLD = identity_dir(CACHE_MOUNT_PATH, OLD)
UNSET_CASES = [
    Case("failed-serving-stored-old", "the new identity Failed; the workload serves OLD "
         "(status.hydration.identity), still stored: it keeps serving OLD, not gated",
         Unset("Failed", [OLD], OLD, OLD), Composed("Serving", AT_OLD)),
    Case("failed-template-reads-old", "no status.hydration.identity (written gated before): "
         "the observed template's identity decides; OLD stored: keeps serving OLD",
         Unset("Failed", [OLD], None, OLD), Composed("Serving", AT_OLD)),
    Case("hydrating-serving-stored-old", "the new identity hydrates beside OLD: OLD keeps "
         "serving meanwhile", Unset("Hydrating", [OLD], OLD, OLD),
         Composed("Serving", AT_OLD)),
    Case("failed-old-pruned", "what it serves is no longer stored: gated HydrationFailed, the "
         "workload kept", Unset("Failed", [], OLD, OLD), Composed("HydrationFailed", None)),
    Case("failed-for-what-it-serves", "the identity it serves is the one that Failed: gated",
         Unset("Failed", [NEW, OLD], NEW, NEW), Composed("HydrationFailed", None)),
    Case("ready-follows-current", "the new identity Ready: a spec without identity follows the "
         "cache's current one (rolls onto NEW)", Unset("Ready", [NEW, OLD], OLD, OLD),
         Composed("Starting", identity_dir(CACHE_MOUNT_PATH, NEW))),
]  # fmt: skip


@table(UNSET_CASES)
def test_an_unset_identity_replica_keeps_the_stored_identity_it_serves(
    case: Case[Unset, Composed],
) -> None:
    spec = _spec(None)
    observed = _observed(spec, case.inputs.reads, DEP_FULL)
    status: dict[str, Any] = {"phase": "Serving", "hydration": {"name": "h", "phase": "Ready"},
                              "conditions": [{"type": "ModelReady", "status": "True",
                                              "reason": "Serving", "message": "m"}]}  # fmt: skip
    if case.inputs.last is not None:
        status["hydration"]["identity"] = case.inputs.last
    req = _hydrating_new(case.inputs.phase, case.inputs.stored)
    rsp = run(spec, req, observed=observed, status=status)
    cond = h.conditions(rsp)["ModelReady"]
    assert cond["reason"] == case.want.reason, (case.reason, cond)
    desired = h.desired(rsp)
    if case.want.model is None:
        kept = desired[WORKLOAD]["spec"]["forProvider"]["manifest"]
        assert kept == observed[WORKLOAD]["spec"]["forProvider"]["manifest"], case.reason
        return
    env = engine_of(manifest(rsp, WORKLOAD)["spec"]["template"])["env"][0]
    assert env == {"name": "MODELPLANE_MODEL", "value": case.want.model}, case.reason
    assert h.status(rsp)["hydration"]["identity"] == case.want.model.rsplit("/", 1)[1]


def test_the_hydration_failed_warning_is_emitted_once_per_episode() -> None:
    """HydrationFailed: a Warning when the replica enters it, none on the next calls
    (the condition carries it), as RolloutStalled."""
    spec = _spec(NEW)
    observed = _observed(spec, NEW, DEP_FULL)
    req = _hydrating_new("Failed", [OLD])
    status: dict[str, Any] = {"conditions": [{"type": "ModelReady", "status": "True",
                                              "reason": "Serving", "message": "m"}]}  # fmt: skip
    warned = []
    for _ in range(3):
        rsp = run(spec, copy.deepcopy(req), observed=observed, status=status)
        cond = h.conditions(rsp)["ModelReady"]
        assert cond["reason"] == "HydrationFailed", cond
        warned.append(len([m for sev, m in h.results(rsp) if sev == "Warning"]))
        status = {**h.status(rsp), "conditions": [{"type": "ModelReady", **cond}]}
    assert warned == [1, 0, 0]


def test_template_sources_and_rollout_complete() -> None:
    dep: Callable[[str, dict[str, Any]], dict[str, Any]] = lambda path, status: {  # noqa: E731
        "kind": "Deployment",
        "metadata": {"generation": 2},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "engine", "env": [{"name": "MODELPLANE_MODEL", "value": path}]}]}}},
        "status": status,
    }  # fmt: skip
    assert wl.template_sources(dep(f"/mnt/models/{OLD}", {}), "Deployment") == {OLD}
    assert wl.template_sources(dep("/mnt/models", {}), "Deployment") == {wl.ROOT_SOURCE}
    assert wl.template_sources(dep("/mnt/models/../x", {}), "Deployment") == set()
    full = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}
    assert wl.rollout_complete(dep("", full), "Deployment") is True
    assert wl.rollout_complete(dep("", {**full, "observedGeneration": 1}), "Deployment") is False
    assert wl.rollout_complete(dep("", {**full, "replicas": 3}), "Deployment") is False
    assert wl.rollout_complete(dep("", {"observedGeneration": 2}), "Deployment") is None


# ---- the ModelDeployment: a failed new identity never removes a replica serving the old --

from tests import test_deployment as td  # noqa: E402 - the deployment's fixtures
from tests.test_side_by_side import DEP_NEW, DEP_OLD, _hyd, _two_serving  # noqa: E402

FAILED_MSG = "Job BackoffLimitExceeded: revision v2 not found"
BASE = [td.ic("gpu-a"), td.ic("gpu-b"), td.cache()]


def _hyd_at(cluster: str, phase: str, stored: list[str]) -> dict[str, Any]:
    """The hydration on ``cluster`` moved to the new identity, in ``phase``, with
    ``stored`` complete on the PVC."""
    b = _hyd(cluster, phase, DEP_NEW)
    b["status"]["stored"] = [{"identity": i} for i in stored]
    if phase == "Failed":
        b["status"]["message"] = FAILED_MSG
    return b


class Fleet2(NamedTuple):
    """(phase, stored) of the new identity's hydration on gpu-a and gpu-b."""

    a: tuple[str, list[str]]
    b: tuple[str, list[str]]


class Kept(NamedTuple):
    """The replicas that exist after the call (name: cluster), the ReplicasReady reason,
    and what status.cacheRollout must say (substrings)."""

    replicas: dict[str, str]
    ready_reason: str
    rollout_has: tuple[str, ...]


FAILED_CASES = [
    Case("failed-on-one-old-stored", "the new identity Failed on gpu-a, the old one is still "
         "stored there: replica 0 keeps serving it, is not moved, and the deployment says so",
         Fleet2(("Failed", [DEP_OLD]), ("Hydrating", [DEP_OLD])),
         Kept({"replica-0": "gpu-a", "replica-1": "gpu-b"}, "ServingPreviousIdentity",
              (f"identity {DEP_NEW} Failed on gpu-a", f"keep serving identity {DEP_OLD}",
               f"moving to {DEP_NEW}"))),
    Case("failed-everywhere-old-stored", "a revision typo fails on every cluster: no replica "
         "is moved or removed, and the rollout names every cluster",
         Fleet2(("Failed", [DEP_OLD]), ("Failed", [DEP_OLD])),
         Kept({"replica-0": "gpu-a", "replica-1": "gpu-b"}, "ServingPreviousIdentity",
              (f"identity {DEP_NEW} Failed on gpu-a, gpu-b",
               f"2 replicas there keep serving identity {DEP_OLD}"))),
    Case("failed-nothing-stored", "a Failed hydration with nothing the replica serves on the "
         "PVC: the replica moves, as before (make-before-break: serving, it stays until "
         "its replacement serves; ReplicasReady True, Moving, while both wanted serve)",
         Fleet2(("Failed", []), ("Ready", [DEP_NEW])),
         Kept({"replica-0": "gpu-a", "replica-1": "gpu-b", "replica-2": "gpu-b"},
              "Moving", ())),
]  # fmt: skip


@table(FAILED_CASES)
def test_a_failed_new_identity_keeps_replicas_serving_the_old(case: Case[Fleet2, Kept]) -> None:
    xr, observed = _two_serving()
    (pa, sa), (pb, sb) = case.inputs
    w = td.world(_hyd_at("gpu-a", pa, sa), _hyd_at("gpu-b", pb, sb), base=BASE)
    rsp = td.drive(xr, w, observed)
    reps = td.replicas_of(rsp)
    assert {k: r["spec"]["clusterName"] for k, r in reps.items()} == case.want.replicas, case.reason
    for i, k in enumerate(("replica-0", "replica-1")):
        if k in reps and case.inputs[i][0] == "Failed":  # held: still the old identity
            assert reps[k]["spec"]["modelCacheRef"]["identity"] == DEP_OLD, case.reason
    cond = h.conditions(rsp)["ReplicasReady"]
    assert cond["reason"] == case.want.ready_reason, (case.reason, cond)
    st = h.status(rsp)
    for part in case.want.rollout_has:
        assert part in st["cacheRollout"], (case.reason, st["cacheRollout"])
    if case.want.ready_reason == "Moving":
        assert cond["status"] == "True", cond
        assert "replica 0 on gpu-a (hydration of ModelCache qwen-cache Failed)" in cond["message"]
        assert "replacements: replica 2 on gpu-b: Creating" in cond["message"]
    if case.want.ready_reason == "ServingPreviousIdentity":
        assert cond["status"] == "True" and "gpu-a" in cond["message"]
        assert DEP_NEW in cond["message"] and FAILED_MSG in cond["message"]
        warnings = [m for s, m in h.results(rsp) if s == "Warning"]
        assert any("keeps serving identity" in m for m in warnings), case.reason
        assert not any("removed replica" in m for m in warnings), case.reason


def test_the_held_warning_is_emitted_on_change_only() -> None:
    xr, observed = _two_serving()
    w = td.world(_hyd_at("gpu-a", "Failed", [DEP_OLD]), _hyd_at("gpu-b", "Failed", [DEP_OLD]),
                 base=BASE)  # fmt: skip
    first = td.drive(xr, w, observed)
    again = copy.deepcopy(xr)
    again["status"] = {
        **h.status(first),
        "conditions": [{"type": t, **c} for t, c in h.conditions(first).items()],
    }
    rsp = td.drive(again, w, observed)
    assert h.conditions(rsp)["ReplicasReady"]["reason"] == "ServingPreviousIdentity"
    assert not [m for s, m in h.results(rsp) if s == "Warning"]


class Scale(NamedTuple):
    """The hydrations of the new identity (phase on gpu-a, gpu-b; old stored on each)."""

    a: str
    b: str


NEW_DEPLOYMENT_CASES = [
    Case("failed-everywhere", "created while the new identity Failed everywhere: the reason "
         "names the failed hydrations, not an empty footprint",
         Scale("Failed", "Failed"), ("HydrationFailed", ("Failed on gpu-a, gpu-b",
                                                         f"for identity {DEP_NEW}", FAILED_MSG))),
    Case("failed-on-one", "one cluster still hydrating: replicas wait there, none on the "
         "Failed one", Scale("Failed", "Hydrating"), ("Scheduled", ())),
]  # fmt: skip


@table(NEW_DEPLOYMENT_CASES)
def test_a_new_deployment_while_the_new_identity_failed(
    case: Case[Scale, tuple[str, tuple[str, ...]]],
) -> None:
    w = td.world(_hyd_at("gpu-a", case.inputs.a, [DEP_OLD]),
                 _hyd_at("gpu-b", case.inputs.b, [DEP_OLD]), base=BASE)  # fmt: skip
    rsp = td.drive(td.deployment(2), w)
    reason, has = case.want
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert c["reason"] == reason, (case.reason, c)
    for part in has:
        assert part in c["message"], (case.reason, c["message"])
    assert "is empty" not in c["message"]
    assert all(r["spec"]["clusterName"] != "gpu-a" for r in td.replicas_of(rsp).values())


def test_scaling_up_while_the_new_identity_failed_everywhere_keeps_the_old_replicas() -> None:
    xr, observed = _two_serving()
    xr = copy.deepcopy(xr)
    xr["spec"]["replicas"] = 3
    w = td.world(_hyd_at("gpu-a", "Failed", [DEP_OLD]), _hyd_at("gpu-b", "Failed", [DEP_OLD]),
                 base=BASE)  # fmt: skip
    rsp = td.drive(xr, w, observed)
    assert sorted(td.replicas_of(rsp)) == ["replica-0", "replica-1"]
    c = h.conditions(rsp)["ReplicasScheduled"]
    assert c["reason"] == "HydrationFailed" and "Failed on gpu-a, gpu-b" in c["message"]
    assert c["message"].startswith("2 of 3 replicas placed")


# ---- upgrade: replicas of the release before side-by-side revisions ------------------


class Upgrade(NamedTuple):
    """What each cluster's hydration stores (None: no status.stored)."""

    stored: list[str] | None


UPGRADE_CASES = [
    Case("not-stored", "the hydration stores nothing yet: the spec stays without identity "
         "(its workload keeps reading the PVC root) and the status says so",
         Upgrade(None), (None, [{"pvcRoot": True, "replicas": 2}])),
    Case("stored", "once the hydration stores the identity in its directory, the replica "
         "is given it", Upgrade([DEP_OLD]), (DEP_OLD, [])),
]  # fmt: skip


@table(UPGRADE_CASES)
def test_an_existing_replica_without_identity_moves_only_once_stored(
    case: Case[Upgrade, tuple[str | None, list[dict[str, Any]]]],
) -> None:
    def hyd(cluster: str) -> dict[str, Any]:
        b = _hyd(cluster, "Ready", DEP_OLD)
        if case.inputs.stored is not None:
            b["status"]["stored"] = [{"identity": i} for i in case.inputs.stored]
        return b

    w = td.world(hyd("gpu-a"), hyd("gpu-b"), base=BASE)
    xr = td.deployment(2)
    observed = td.observe(td.drive(xr, w), {0: ("True", "Serving", "ok"),
                                            1: ("True", "Serving", "ok")})  # fmt: skip
    for b in observed.values():
        if b.get("kind") == "ModelReplica":
            b["spec"]["modelCacheRef"].pop("identity")
    rsp = td.drive(xr, w, observed)
    want_identity, rows = case.want
    for r in td.replicas_of(rsp).values():
        assert r["spec"]["modelCacheRef"].get("identity") == want_identity, case.reason
    st = h.status(rsp)
    if rows:
        assert st["cacheIdentities"] == rows, case.reason
        assert "PVC root" in st["cacheRollout"]
    assert h.conditions(rsp)["ReplicasReady"]["status"] == "True"


class RootReplica(NamedTuple):
    """The last status of replica 0 (spec without identity) on gpu-a, whose re-download
    into the identity's directory Failed: ``status.phase``, whether ``status.hydration``
    names an identity, and its ModelReady (status, reason)."""

    phase: str | None
    hydration_identity: bool
    ready: tuple[str, str]


class Held(NamedTuple):
    """Whether replica 0 stays on gpu-a (held) and what ReplicasReady says."""

    held: bool
    ready_reason: str


ENOSPC = "Job BackoffLimitExceeded: OSError: [Errno 28] No space left on device"

ROOT_HELD_CASES = [
    Case("serving-from-root", "the replica composer reports it serving from the PVC root: "
         "held, not moved; ReplicasReady says it keeps serving the PVC root",
         RootReplica("Serving", False, ("True", "Serving")),
         Held(True, "ServingPreviousIdentity")),
    Case("starting-from-root", "its pods restart (Starting) but still read the intact root: "
         "held", RootReplica("Starting", False, ("False", "Starting")),
         Held(True, "HydrationFailed")),
    Case("ready-without-phase", "ModelReady True without status.phase (an older status "
         "shape): its workload serves what the PVC holds, held",
         RootReplica(None, False, ("True", "Serving")), Held(True, "ServingPreviousIdentity")),
    Case("gated-never-served", "gated (HydrationFailed, no workload composed): nothing "
         "serves, it moves as before", RootReplica("Failed", False, ("False", "HydrationFailed")),
         Held(False, "ReplicasNotReady")),
]  # fmt: skip


@table(ROOT_HELD_CASES)
def test_a_replica_reading_the_pvc_root_is_held_when_the_redownload_failed(
    case: Case[RootReplica, Held],
) -> None:
    a = _hyd("gpu-a", "Ready", DEP_OLD)
    b = _hyd("gpu-b", "Ready", DEP_OLD)
    xr = td.deployment(2)
    observed = td.observe(td.drive(xr, td.world(a, b, base=BASE)),
                          {0: ("True", "Serving", "ok"), 1: ("True", "Serving", "ok")})  # fmt: skip
    for body in observed.values():
        if body.get("kind") == "ModelReplica":
            body["spec"]["modelCacheRef"].pop("identity")
    r0 = observed["replica-0"]["status"]
    st, reason = case.inputs.ready
    r0["conditions"] = [{"type": "ModelReady", "status": st, "reason": reason, "message": "m"}]
    if case.inputs.phase is not None:
        r0["phase"] = case.inputs.phase
        r0["hydration"] = {"name": "h", "phase": "Failed", "message": ENOSPC}
        if case.inputs.hydration_identity:
            r0["hydration"]["identity"] = DEP_OLD
    a = _hyd("gpu-a", "Failed", DEP_OLD)
    a["status"]["stored"] = []
    a["status"]["message"] = ENOSPC
    b["status"]["stored"] = [{"identity": DEP_OLD}]
    rsp = td.drive(xr, td.world(a, b, base=BASE), observed)
    reps = td.replicas_of(rsp)
    on_a = reps.get("replica-0", {}).get("spec", {}).get("clusterName") == "gpu-a"
    assert on_a == case.want.held, (case.reason, sorted(reps))
    warnings = [m for sev, m in h.results(rsp) if sev == "Warning"]
    assert any("removed replica 0" in m for m in warnings) != case.want.held, warnings
    cond = h.conditions(rsp)["ReplicasReady"]
    assert cond["reason"] == case.want.ready_reason, (case.reason, cond)
    if case.want.held:
        assert "identity" not in reps["replica-0"]["spec"]["modelCacheRef"], case.reason
        rollout = h.status(rsp)["cacheRollout"]
        keeps = f"identity {DEP_OLD} Failed on gpu-a: 1 replica there keeps reading the PVC root"
        assert keeps in rollout, rollout
    if case.want.ready_reason == "ServingPreviousIdentity":
        assert "replica 0 on gpu-a keeps serving the PVC root" in cond["message"], cond
        assert ENOSPC in cond["message"]
        assert any("keeps serving the PVC root" in m for m in warnings), warnings


def test_an_unset_identity_replica_serving_a_stored_identity_is_held() -> None:
    """Replica 0's spec names no identity but its workload serves OLD
    (status.hydration.identity); NEW Failed on gpu-a, OLD still stored there: held, not
    moved, and reported as serving OLD (not the PVC root)."""
    a = _hyd("gpu-a", "Ready", DEP_OLD)
    b = _hyd("gpu-b", "Ready", DEP_OLD)
    xr = td.deployment(2)
    observed = td.observe(td.drive(xr, td.world(a, b, base=BASE)),
                          {0: ("True", "Serving", "ok"), 1: ("True", "Serving", "ok")})  # fmt: skip
    observed["replica-0"]["spec"]["modelCacheRef"].pop("identity")
    r0 = observed["replica-0"]["status"]
    r0["phase"] = "Serving"
    r0["hydration"] = {"name": "h", "phase": "Ready", "identity": DEP_OLD}
    w = td.world(_hyd_at("gpu-a", "Failed", [DEP_OLD]), _hyd_at("gpu-b", "Ready",
                 [DEP_NEW, DEP_OLD]), base=BASE)  # fmt: skip
    rsp = td.drive(xr, w, observed)
    reps = td.replicas_of(rsp)
    assert reps["replica-0"]["spec"]["clusterName"] == "gpu-a"
    warnings = [m for s, m in h.results(rsp) if s == "Warning"]
    assert not any("removed replica 0" in m for m in warnings), warnings
    assert any(f"replica 0 on gpu-a keeps serving identity {DEP_OLD}" in m for m in warnings)
    st = h.status(rsp)
    assert "PVC root" not in st["cacheRollout"], st["cacheRollout"]
    assert f"keep serving identity {DEP_OLD}" in st["cacheRollout"], st["cacheRollout"]


# ---- make-before-break with no room for the surge pod --------------------------------

PROGRESSING_OK = {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}
DEADLINE = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
            "message": 'ReplicaSet "w-7d9" has timed out progressing.'}  # fmt: skip


class Stall(NamedTuple):
    """The observed Deployment's remote status and the last ModelReady reason."""

    remote: dict[str, Any]
    last_reason: str = "Starting"


class Said(NamedTuple):
    """ModelReady (status, reason), whether a RolloutStalled Warning is emitted, and the
    identities the replica keeps naming."""

    ready: tuple[str, str]
    warns: bool
    identities: list[str]


STALL_CASES = [
    Case("no-room-for-surge", "the surge pod never schedules: Progressing=False "
         "ProgressDeadlineExceeded; RolloutStalled, what still serves and what to do, a "
         "Warning", Stall({**DEP_SURGE, "conditions": [DEADLINE]}),
         Said(("False", "RolloutStalled"), True, [NEW, OLD])),
    Case("stalled-again", "the same stall on the next call: the condition stays, no second "
         "Warning", Stall({**DEP_SURGE, "conditions": [DEADLINE]}, "RolloutStalled"),
         Said(("False", "RolloutStalled"), False, [NEW, OLD])),
    Case("surging", "the surge pod starts (Progressing=True): Starting, no Warning",
         Stall({**DEP_SURGE, "conditions": [PROGRESSING_OK]}),
         Said(("False", "Starting"), False, [NEW, OLD])),
    Case("resumed-and-rolled", "room freed, the roll completed (Kubernetes sets "
         "Progressing=True again): Serving, OLD released",
         Stall({**DEP_FULL, "conditions": [PROGRESSING_OK]}, "RolloutStalled"),
         Said(("True", "Serving"), False, [NEW])),
    Case("rolled-stale-condition", "every pod rolled: a deadline condition left over does "
         "not make it stalled", Stall({**DEP_FULL, "conditions": [DEADLINE]}),
         Said(("True", "Serving"), False, [NEW])),
]  # fmt: skip


@table(STALL_CASES)
def test_a_stalled_roll_says_so(case: Case[Stall, Said]) -> None:
    spec = _spec(NEW)
    observed = _observed(spec, NEW, case.inputs.remote)
    status = {
        "hydration": {"identity": OLD},
        STATUS_CACHE_IDENTITIES: [NEW, OLD],
        "conditions": [{"type": "ModelReady", "status": "False",
                        "reason": case.inputs.last_reason, "message": "m"}],
    }  # fmt: skip
    rsp = run(spec, _hydrating_new("Ready", [NEW, OLD]), observed=observed, status=status)
    cond = h.conditions(rsp)["ModelReady"]
    assert (cond["status"], cond["reason"]) == case.want.ready, (case.reason, cond)
    warnings = [m for sev, m in h.results(rsp) if sev == "Warning"]
    assert bool(warnings) == case.want.warns, (case.reason, warnings)
    assert h.status(rsp)[STATUS_CACHE_IDENTITIES] == case.want.identities, case.reason
    # The old pods answer throughout: the ModelDeployment's make-before-break reads it
    # (a replica mid-roll is not ready, but it serves; review 13b).
    (engine,) = h.status(rsp)["engines"]
    assert engine["available"] is True, (case.reason, engine)
    assert engine["ready"] is (case.want.ready[0] == "True"), (case.reason, engine)
    if case.want.ready[1] == "RolloutStalled":
        msg = cond["message"]
        workload = manifest(rsp, WORKLOAD)["metadata"]["name"]
        for part in (f"workload {workload} (Deployment)", f"rollout onto identity {NEW}",
                     "ProgressDeadlineExceeded", "timed out progressing",
                     f"old pods still serve identity {OLD}", "one surge pod per workload",
                     "free one GPU slot per replica"):  # fmt: skip
            assert part in msg, (part, msg)
        assert h.status(rsp)["phase"] == "Starting"
        if case.want.warns:
            assert warnings == [msg]


STALL_FROM_CASES = [
    Case("onto-a-new-identity", "spec moved OLD -> NEW: the old pods serve OLD",
         {"hydration": {"name": "h", "phase": "Ready", "identity": OLD},
          STATUS_CACHE_IDENTITIES: [NEW, OLD]}, f"old pods still serve identity {OLD}"),
    Case("same-identity", "a roll for an image or engine argument change, the identity "
         "unchanged: the old pods serve the same identity, not the PVC root",
         {"hydration": {"name": "h", "phase": "Ready", "identity": NEW},
          STATUS_CACHE_IDENTITIES: [NEW]}, f"old pods still serve the same identity {NEW}"),
    Case("from-the-pvc-root", "a replica of the release before side-by-side revisions "
         "moving to its identity's directory: the old pods read the PVC root",
         {"hydration": {"name": "h", "phase": "Ready"}}, "old pods still serve the PVC root"),
]  # fmt: skip


@table(STALL_FROM_CASES)
def test_a_stalled_roll_says_what_the_old_pods_read(case: Case[dict[str, Any], str]) -> None:
    spec = _spec(NEW)
    observed = _observed(spec, NEW, {**DEP_SURGE, "conditions": [DEADLINE]})
    status = {**case.inputs, "phase": "Serving", "conditions": [
        {"type": "ModelReady", "status": "True", "reason": "Serving", "message": "m"}]}  # fmt: skip
    rsp = run(spec, _hydrating_new("Ready", [NEW, OLD]), observed=observed, status=status)
    cond = h.conditions(rsp)["ModelReady"]
    assert cond["reason"] == "RolloutStalled", (case.reason, cond)
    assert case.want in cond["message"], (case.reason, cond["message"])
    for other in (f"identity {OLD}", "the same identity", "the PVC root"):
        if other not in case.want:
            assert f"old pods still serve {other}" not in cond["message"], (case.reason, other)


def test_a_leaderworkerset_reports_no_stall() -> None:
    """kubernetes-sigs/lws has no progress deadline: a surge group that never schedules
    leaves UpdateInProgress=True, read as Starting (README)."""
    spec = _spec(NEW, multi=True)
    first = h.desired(run(spec, _hydrating_new("Ready", [NEW, OLD])))
    (key,) = [k for k in first if k.startswith("workload-")]
    stuck = {**LWS_UPDATING, "conditions": [*LWS_UPDATING["conditions"], DEADLINE]}
    observed = {key: observed_object(first[key], stuck)}
    rsp = run(spec, _hydrating_new("Ready", [NEW, OLD]), observed=observed,
              status={STATUS_CACHE_IDENTITIES: [NEW, OLD]})  # fmt: skip
    assert h.conditions(rsp)["ModelReady"]["reason"] == "Starting"
    assert wl.rollout_stalled({"status": stuck}, "LeaderWorkerSet") is None
