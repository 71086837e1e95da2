"""ModelCacheHydration: phases, requirements, token handling.

The team's cases C2, C8, C9: an unresolved auth Secret, Job failure, token sealing.

Each test builds the observed state the way Crossplane and provider-kubernetes
report it: composed Objects echo the remote object under
``status.atProvider.manifest``. Every desired Object is validated against the
Object CRD and its manifest against Kubernetes' schemas (tests/support/validation.py).
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
from typing import Any, NamedTuple

import pytest
import structlog
from google.protobuf import json_format

from function.composers import hydration
from function.manifests.hydration import JOB_COMPLETE_CEL, PVC_BOUND_CEL, REMOTE_TOKEN_KEY
from function.naming import (
    DNS1123_LABEL,
    REMOTE_NAMESPACE,
    cache_pvc_name,
    cache_secret_name,
    hydration_job_name,
    source_identity,
)
from function.ops.settings import default_settings
from tests.support import fixtures
from tests.support.fixtures import inference_cluster
from tests.support.harness import (
    NAMESPACE,
    NOW,
    Clock,
    World,
    conditions,
    desired,
    fatal,
    request,
    requirements,
    results,
    run,
    status,
    xr,
    xr_ready,
)
from tests.support.table import Case, table
from tests.support.validation import validate_object, validate_xr

# The token the suite-wide guard (tests/support/secret_guard.py) watches.
FAKE_TOKEN = fixtures.FAKE_TOKEN
FAKE_TOKEN_B64 = base64.b64encode(FAKE_TOKEN.encode()).decode()
REPO = "org/gated-model"
CACHE = "qwen-cache"
CLUSTER = "gpu-a"
NAME = "modelcache-ml-team-qwen-cache-gpu-a-1a2b3"
IDENTITY = source_identity(REPO, "main")
JOB_KEY = hydration.job_key(IDENTITY)
LASTING = ["pvc", "result"]
RUNNING = [*LASTING, "token-secret", JOB_KEY, *hydration.RBAC_KEYS]
SETTINGS = default_settings()


# ---- builders --------------------------------------------------------------------


def spec(*, repo: str = REPO, revision: str = "main", auth: bool = True, **extra: Any) -> dict:
    hf: dict[str, Any] = {"repo": repo, "revision": revision, "sizeGiB": 2}
    if auth:
        hf["authSecret"] = {"name": "hf-token", "key": "HF_TOKEN"}
    return {
        "clusterName": CLUSTER,
        "cacheName": CACHE,
        "source": "HuggingFace",
        "huggingFace": hf,
        **extra,
    }


def hydration_xr(status: dict | None = None, **kw: Any) -> dict:
    return xr("ModelCacheHydration", NAME, spec(**kw), status=status)


def auth_secret(data: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf-token", "namespace": NAMESPACE},
        "type": "Opaque",
        "data": {"HF_TOKEN": FAKE_TOKEN_B64} if data is None else data,
    }


CLUSTER_OBJ = inference_cluster(CLUSTER)


def resolved(secret: list | None = None, cluster: list | None = None) -> dict:
    """Required resources: both resolved by default (cluster found, Secret with the token)."""
    return {
        "cluster": [CLUSTER_OBJ] if cluster is None else cluster,
        "auth-secret": [auth_secret()] if secret is None else secret,
        # No replica rolls off this cache (resolved, nothing matched).
        "leaving-replicas": [],
    }


def baseline() -> dict[str, dict]:
    """The desired Objects of a first call with everything resolved."""
    rsp = run(request(hydration_xr(), required=resolved()))
    return desired(rsp)


def observed_object(body: dict, remote_status: dict | None, *, synced: bool = True) -> dict:
    """An observed Object: the desired body plus what provider-kubernetes reports."""
    obs = copy.deepcopy(body)
    manifest = copy.deepcopy(body["spec"]["forProvider"]["manifest"])
    if remote_status is not None:
        manifest["status"] = remote_status
    obs["status"] = {
        "atProvider": {"manifest": manifest},
        "conditions": [
            {"type": "Synced", "status": "True" if synced else "False", "reason": "x"},
        ],
    }
    return obs


def pvc(phase: str) -> dict:
    return {"pvc": observed_object(baseline()["pvc"], {"phase": phase})}


def job(conds: list[dict] | None = None, **job_status: Any) -> dict:
    st: dict[str, Any] = dict(job_status)
    if conds is not None:
        st["conditions"] = conds
    return {JOB_KEY: observed_object(baseline()[JOB_KEY], st)}


def token_object() -> dict:
    return {"token-secret": observed_object(baseline()["token-secret"], None)}


def cond(typ: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": typ, "status": status, "reason": reason, "message": message}


COMPLETE = [cond("SuccessCriteriaMet"), cond("Complete", reason="", message="")]
BACKOFF = [
    cond("FailureTarget", reason="BackoffLimitExceeded"),
    cond(
        "Failed",
        reason="BackoffLimitExceeded",
        message="Job has reached the specified backoff limit",
    ),
]
DEADLINE = [
    cond(
        "Failed", reason="DeadlineExceeded", message="Job was active longer than specified deadline"
    ),
]


def prev_status(phase: str, identity: str = IDENTITY, **extra: Any) -> dict:
    """A status as the function writes it: a Ready one lists its identity in ``stored``
    unless ``stored`` is given (``stored=None``: no ``stored`` at all, as the release
    before side-by-side revisions wrote it)."""
    repo, revision = (REPO, "main")
    if phase == "Ready":
        extra.setdefault("stored", [{"identity": identity}])
    if extra.get("stored", ...) is None:
        del extra["stored"]
    return {
        "phase": phase,
        "reason": extra.pop("reason", phase),
        "message": extra.pop("message", f"hydration is {phase}"),
        "source": {"repo": repo, "revision": revision, "identity": identity},
        **extra,
    }


def validate_all(rsp) -> None:
    """Every desired Object (and its manifest) is valid; names are DNS-1123 labels."""
    for name, body in desired(rsp).items():
        validate_object(body)
        assert DNS1123_LABEL.match(body["metadata"]["name"]), name
        assert len(body["metadata"]["name"]) <= 63
        manifest_name = body["spec"]["forProvider"]["manifest"]["metadata"]["name"]
        assert DNS1123_LABEL.match(manifest_name) and len(manifest_name) <= 63


def validate_status(composite: dict, rsp) -> None:
    """The status the function writes is valid against our XRD (nothing would be pruned)."""
    written = copy.deepcopy(composite)
    written["status"] = status(rsp)
    stored = validate_xr(written)
    assert stored["status"] == written["status"]


def warnings(rsp) -> list[str]:
    return [m for s, m in results(rsp) if s == "Warning"]


def normals(rsp) -> list[str]:
    return [m for s, m in results(rsp) if s == "Normal"]


# ---- table: every phase ------------------------------------------------------------

T_MINUS = NOW - datetime.timedelta(seconds=SETTINGS.pvc_bind_timeout_seconds + 5)
LATER = NOW - datetime.timedelta(seconds=60)

CASES: list[dict[str, Any]] = [
    {
        "id": "unresolved-everything",
        "status": None,
        "required": {},
        "observed": {},
        "phase": "Pending",
        "reason": "WaitingForRequirements",
        "resources": [],
        "warn": [],
    },
    {
        "id": "secret-resolved-missing",
        "status": None,
        "required": resolved(secret=[]),
        "observed": {},
        "phase": "Pending",
        "reason": "AuthSecretMissing",
        "resources": LASTING,
        "warn": [f"{NAMESPACE}/hf-token"],
    },
    {
        "id": "secret-without-key",
        "status": None,
        "required": resolved(secret=[auth_secret({"OTHER": "eA=="})]),
        "observed": {},
        "phase": "Pending",
        "reason": "AuthSecretKeyMissing",
        "resources": LASTING,
        "warn": [f"{NAMESPACE}/hf-token", "HF_TOKEN"],
    },
    {
        "id": "first-call-pvc-not-created",
        "status": None,
        "required": resolved(),
        "observed": {},
        "phase": "Pending",
        "reason": "PVCNotBound",
        "resources": RUNNING,
        "warn": [],
        "pendingSince": "2026-11-29T09:00:00Z",
    },
    {
        "id": "pvc-pending-within-limit",
        "status": prev_status("Pending", pendingSince="2026-11-29T08:59:00Z"),
        "required": resolved(),
        "observed": {**pvc("Pending")},
        "phase": "Pending",
        "reason": "PVCNotBound",
        "resources": RUNNING,
        "warn": [],
        "pendingSince": "2026-11-29T08:59:00Z",
    },
    {
        "id": "pvc-bind-timeout",
        "status": prev_status("Pending", pendingSince=T_MINUS.strftime("%Y-%m-%dT%H:%M:%SZ")),
        "required": resolved(),
        "observed": {**pvc("Pending")},
        "phase": "Failed",
        "reason": "PVCBindTimeout",
        "resources": RUNNING,
        "warn": ["PVC"],
    },
    {
        "id": "hydrating",
        "status": prev_status("Pending"),
        "required": resolved(),
        "observed": {**pvc("Bound"), **job([], active=1), **token_object()},
        "phase": "Hydrating",
        "reason": "JobRunning",
        "resources": RUNNING,
        "warn": [],
    },
    {
        # status.failed counts pod failures; the Job is not Failed until its condition says so.
        "id": "pod-failures-are-not-job-failure",
        "status": prev_status("Hydrating"),
        "required": resolved(),
        "observed": {**pvc("Bound"), **job([], failed=3, active=1), **token_object()},
        "phase": "Hydrating",
        "reason": "JobRunning",
        "resources": RUNNING,
        "warn": [],
    },
    {
        "id": "complete-ready",
        "status": prev_status("Hydrating", startedAt="2026-11-29T08:00:00Z"),
        "required": resolved(),
        "observed": {**pvc("Bound"), **job(COMPLETE, succeeded=1), **token_object()},
        "phase": "Ready",
        "reason": "Hydrated",
        "resources": LASTING,
        "warn": [],
    },
    {
        "id": "ready-latched",
        "status": prev_status("Ready", readyAt="2026-11-29T08:30:00Z"),
        "required": resolved(),
        "observed": {**pvc("Bound")},
        "phase": "Ready",
        "reason": "Ready",
        "resources": LASTING,
        "warn": [],
    },
    {
        "id": "ready-latched-secret-gone",
        "status": prev_status("Ready"),
        "required": resolved(secret=[]),
        "observed": {**pvc("Bound")},
        "phase": "Ready",
        "reason": "Ready",
        "resources": LASTING,
        "warn": [],
    },
    {
        "id": "backoff-limit-exceeded",
        "status": prev_status("Hydrating"),
        "required": resolved(),
        "observed": {**pvc("Bound"), **job(BACKOFF, failed=4), **token_object()},
        "phase": "Failed",
        "reason": "BackoffLimitExceeded",
        "resources": RUNNING,
        "warn": ["BackoffLimitExceeded"],
    },
    {
        # Derived from the condition, never from counting status.failed.
        "id": "deadline-exceeded-no-failed-count",
        "status": prev_status("Hydrating"),
        "required": resolved(),
        "observed": {**pvc("Bound"), **job(DEADLINE), **token_object()},
        "phase": "Failed",
        "reason": "DeadlineExceeded",
        "resources": RUNNING,
        "warn": ["DeadlineExceeded"],
    },
    {
        "id": "failed-stays-failed",
        "status": prev_status(
            "Failed", reason="BackoffLimitExceeded", message="Job BackoffLimitExceeded"
        ),
        "required": resolved(),
        "observed": {**pvc("Bound"), **job(BACKOFF, failed=4), **token_object()},
        "phase": "Failed",
        "reason": "BackoffLimitExceeded",
        "resources": RUNNING,
        "warn": [],
    },
    {
        "id": "cluster-not-found",
        "status": prev_status("Hydrating"),
        "required": resolved(cluster=[]),
        "observed": {**pvc("Bound"), **job([], active=1), **token_object()},
        "phase": "Pending",
        "reason": "ClusterUnavailable",
        "resources": ["pvc", "token-secret", JOB_KEY],
        "warn": [f"InferenceCluster {CLUSTER} not found"],
    },
    {
        "id": "cluster-without-storage-class",
        "status": None,
        "required": resolved(cluster=[inference_cluster(CLUSTER, storage_class=None)]),
        "observed": {},
        "phase": "Pending",
        "reason": "ClusterUnavailable",
        "resources": [],
        "warn": ["status.cache.storageClassName"],
    },
    {
        "id": "public-model-no-secret",
        "status": None,
        "auth": False,
        "required": {"cluster": [CLUSTER_OBJ]},
        "observed": {},
        "phase": "Pending",
        "reason": "PVCNotBound",
        "resources": [*LASTING, JOB_KEY, *hydration.RBAC_KEYS],
        "warn": [],
    },
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_phases(case: dict[str, Any]) -> None:
    composite = hydration_xr(case["status"], auth=case.get("auth", True))
    rsp = run(request(composite, observed=case["observed"], required=case["required"]))
    assert not fatal(rsp)
    st = status(rsp)
    assert st["phase"] == case["phase"], st
    assert st["reason"] == case["reason"], st
    assert st["message"]
    assert st["source"] == {"repo": REPO, "revision": "main", "identity": IDENTITY}
    assert sorted(desired(rsp)) == sorted(case["resources"])
    cond_ = conditions(rsp)["Hydrated"]
    assert cond_ == {
        "status": "True" if case["phase"] == "Ready" else "False",
        "reason": case["phase"],
        "message": st["message"],
    }
    assert xr_ready(rsp) == ("READY_TRUE" if case["phase"] == "Ready" else "READY_FALSE")
    warns = warnings(rsp)
    if case["warn"]:
        assert warns, results(rsp)
        for needle in case["warn"]:
            assert any(needle in w for w in warns), (needle, warns)
    else:
        assert not warns, warns
    if "pendingSince" in case:
        assert st.get("pendingSince") == case["pendingSince"]
    if case["phase"] in ("Pending", "Hydrating"):
        assert rsp.meta.ttl.seconds <= SETTINGS.poll_seconds
    validate_all(rsp)
    validate_status(composite, rsp)


def test_phase_table_over_grpc(grpc_function) -> None:
    """Every row of the table, over a real gRPC channel: the same response, byte for byte."""
    for case in CASES:
        composite = hydration_xr(case["status"], auth=case.get("auth", True))
        req = request(composite, observed=case["observed"], required=case["required"])
        over_grpc = grpc_function.call(req)
        local = run(req)
        assert over_grpc.SerializeToString(deterministic=True) == local.SerializeToString(
            deterministic=True
        ), case["id"]
        assert status(over_grpc)["phase"] == case["phase"], case["id"]


def test_apply_errors_are_reported_without_secret_details() -> None:
    leaky = f"Secret is invalid: data[HF_TOKEN]: {FAKE_TOKEN_B64}"
    secret = token_object()
    secret["token-secret"]["status"]["conditions"] = [
        cond("Synced", "False", "ReconcileError", leaky)
    ]
    job_obj = job([], active=1)
    job_obj[JOB_KEY]["status"]["conditions"] = [
        cond("Synced", "False", "ReconcileError", "admission webhook denied the Job")
    ]
    pvc_obj = pvc("Pending")
    pvc_obj["pvc"]["status"]["conditions"] = [
        cond("Synced", "False", "ReconcileError", 'storageclass "rwx-fast" not found')
    ]
    composite = hydration_xr(prev_status("Hydrating"))
    observed = {**pvc("Bound"), **job_obj, **secret}
    rsp = run(request(composite, observed=observed, required=resolved()))
    msg = status(rsp)["message"]
    assert "admission webhook denied the Job" in msg
    assert "token Secret not applied: see Object" in msg
    assert FAKE_TOKEN_B64 not in msg and "data[HF_TOKEN]" not in msg
    rsp = run(request(composite, observed=pvc_obj, required=resolved()))
    assert 'storageclass "rwx-fast" not found' in status(rsp)["message"]


# ---- requirements ------------------------------------------------------------------


def test_requirements_ask_for_cluster_and_secret() -> None:
    rsp = run(request(hydration_xr(), required={}))
    assert requirements(rsp) == {
        "cluster": {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "InferenceCluster",
            "matchName": CLUSTER,
        },
        "auth-secret": {
            "apiVersion": "v1",
            "kind": "Secret",
            "matchName": "hf-token",
            "namespace": NAMESPACE,
        },
        # The live replicas of this cache on this cluster: the identities they serve are
        # kept on the PVC (side-by-side revisions).
        "replicas": {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelReplica",
            "matchLabels": {
                "labels": {"modelplane.ai/cache": CACHE, "modelplane.ai/cluster": CLUSTER}
            },
            "namespace": NAMESPACE,
        },
        # The replicas on this cluster whose old pods still read this cache while they
        # roll off it onto another (their status.cacheIdentities are kept too).
        "leaving-replicas": {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelReplica",
            "matchLabels": {
                "labels": {"modelplane.ai/leaving-cache": CACHE, "modelplane.ai/cluster": CLUSTER}
            },
            "namespace": NAMESPACE,
        },
    }
    public = run(request(hydration_xr(auth=False), required={}))
    assert sorted(requirements(public)) == ["cluster", "leaving-replicas", "replicas"]


# ---- C2: unresolved is not empty (auth Secret) -------------------------------------


def c2_calls(call):
    """Calls A, B, C of case C2 through ``call`` (in-process or gRPC)."""
    composite = hydration_xr()
    a = call(request(composite, required={}))
    b = call(request(composite, required={"cluster": [CLUSTER_OBJ], "auth-secret": []}))
    c = call(request(composite, observed=pvc("Bound"), required=resolved()))
    return a, b, c


def check_c2(a, b, c) -> None:
    # A: ask for the Secret and the cluster, compose nothing that needs the token.
    assert set(requirements(a)) == {"cluster", "auth-secret", "replicas", "leaving-replicas"}
    assert not [k for k in desired(a) if k == "token-secret" or k.startswith("job-")]
    assert status(a)["phase"] == "Pending"
    assert not warnings(a)
    # B: resolved, no Secret: still no Job, a warning naming it, not Failed.
    assert not [k for k in desired(b) if k == "token-secret" or k.startswith("job-")]
    assert status(b)["phase"] == "Pending"
    assert any(f"{NAMESPACE}/hf-token" in w for w in warnings(b)), results(b)
    assert conditions(b)["Hydrated"]["reason"] == "Pending"
    # C: the Secret resolved with key HF_TOKEN: the Secret Object and the Job.
    assert {"token-secret", JOB_KEY} <= set(desired(c))
    assert status(c)["phase"] == "Hydrating"
    assert not warnings(c)
    for rsp in (a, b, c):
        assert not fatal(rsp)
        validate_all(rsp)


def test_c2_unresolved_is_not_empty() -> None:
    check_c2(*c2_calls(run))


def test_c2_over_grpc(grpc_function) -> None:
    check_c2(*c2_calls(grpc_function.call))


def test_requirements_loop_over_grpc(grpc_function) -> None:
    """Crossplane's loop: the second call gets the cluster and the Secret."""
    world = World([CLUSTER_OBJ, auth_secret()])
    rsp, calls = grpc_function.drive(hydration_xr(), world, pvc("Bound"))
    assert calls == 2
    assert status(rsp)["phase"] == "Hydrating"
    assert set(RUNNING) == set(desired(rsp))
    # The Secret does not exist: the loop settles with a warning, no Job.
    rsp, _ = grpc_function.drive(hydration_xr(), World([CLUSTER_OBJ]), pvc("Bound"))
    assert status(rsp)["phase"] == "Pending"
    assert JOB_KEY not in desired(rsp)
    assert any(f"{NAMESPACE}/hf-token" in w for w in warnings(rsp))


def test_unresolved_keeps_children_exactly() -> None:
    """A requirement not resolved yet never shrinks the desired set, and says no warning."""
    observed = {**pvc("Bound"), **job([], active=1), **token_object()}
    composite = hydration_xr(prev_status("Hydrating", message="downloading"))
    rsp = run(request(composite, observed=observed, required={}))
    assert sorted(desired(rsp)) == sorted(observed)
    for key, body in observed.items():
        kept = desired(rsp)[key]
        assert kept["spec"] == body["spec"]
        assert kept["metadata"]["name"] == body["metadata"]["name"]
        assert "status" not in kept
    assert status(rsp)["phase"] == "Hydrating"
    assert status(rsp)["message"] == "downloading"
    assert not warnings(rsp)
    # The cluster resolved but the Secret not yet: the running Job and Secret stay
    # exactly as they were (the lasting children are composed as usual).
    rsp = run(request(composite, observed=observed, required={"cluster": [CLUSTER_OBJ]}))
    assert sorted(desired(rsp)) == sorted({*observed, *LASTING})
    for key in (JOB_KEY, "token-secret"):
        assert desired(rsp)[key]["spec"] == observed[key]["spec"]
    assert status(rsp)["phase"] == "Hydrating"
    assert not warnings(rsp)


def test_warnings_are_emitted_once() -> None:
    """A warning becomes an event in the call that records it, not on every call."""
    required = resolved(secret=[])
    first = run(request(hydration_xr(), required=required))
    assert any(f"{NAMESPACE}/hf-token" in w for w in warnings(first))
    again = run(request(hydration_xr(status(first)), required=required))
    assert not warnings(again)
    assert status(again)["message"] == status(first)["message"]
    assert status(again)["reason"] == "AuthSecretMissing"


def test_missing_secret_does_not_kill_running_job() -> None:
    observed = {**pvc("Bound"), **job([], active=1), **token_object()}
    composite = hydration_xr(prev_status("Hydrating"))
    rsp = run(request(composite, observed=observed, required=resolved(secret=[])))
    assert JOB_KEY in desired(rsp)
    assert status(rsp)["phase"] == "Hydrating"
    assert any(f"{NAMESPACE}/hf-token" in w for w in warnings(rsp))
    assert f"{NAMESPACE}/hf-token" in status(rsp)["message"]
    again = run(request(hydration_xr(status(rsp)), observed=observed, required=resolved(secret=[])))
    assert not warnings(again)


# ---- C8: hydration Jobs fail for real ---------------------------------------------


def test_c8_job_shape() -> None:
    rsp = run(request(hydration_xr(), required=resolved()))
    objs = desired(rsp)
    pvc_manifest = objs["pvc"]["spec"]["forProvider"]["manifest"]
    assert pvc_manifest["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc_manifest["spec"]["storageClassName"] == "rwx-fast"
    # Room for two copies of sizeGiB 2: the current identity and the previous one.
    assert pvc_manifest["spec"]["resources"]["requests"]["storage"] == "4Gi"
    assert pvc_manifest["metadata"]["name"] == cache_pvc_name(NAMESPACE, CACHE)
    assert pvc_manifest["metadata"]["namespace"] == REMOTE_NAMESPACE
    job_obj = objs[JOB_KEY]
    manifest = job_obj["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"]["name"] == hydration_job_name(NAMESPACE, CACHE, REPO, "main")
    jspec = manifest["spec"]
    pod = jspec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert jspec["backoffLimit"] == SETTINGS.hydration_backoff_limit
    assert 0 < jspec["activeDeadlineSeconds"] == SETTINGS.hydration_deadline_seconds
    claim = {v["name"]: v for v in pod["volumes"]}["cache"]["persistentVolumeClaim"]
    assert claim["claimName"] == cache_pvc_name(NAMESPACE, CACHE)
    (container,) = pod["containers"]
    assert container["image"] == SETTINGS.hydration_image
    assert container["command"] == ["python", "-m", "jobs.hydrate"]
    args = container["args"]
    assert args[args.index("--repo") + 1] == REPO
    assert args[args.index("--revision") + 1] == "main"
    assert args[args.index("--identity") + 1] == IDENTITY
    assert job_obj["spec"]["readiness"] == {
        "policy": "DeriveFromCelQuery",
        "celQuery": JOB_COMPLETE_CEL,
    }
    assert objs["pvc"]["spec"]["readiness"]["celQuery"] == PVC_BOUND_CEL


def test_c8_failed_job_is_not_recreated() -> None:
    """The failed Job stays desired exactly as observed (Kubernetes does not re-run it),
    and a failed Job that is not observed any more keeps the phase Failed."""
    observed = {**pvc("Bound"), **job(BACKOFF, failed=4), **token_object()}
    composite = hydration_xr(prev_status("Failed", reason="BackoffLimitExceeded"))
    rsp = run(request(composite, observed=observed, required=resolved()))
    assert desired(rsp)[JOB_KEY]["spec"] == observed[JOB_KEY]["spec"]
    assert desired(rsp)[JOB_KEY]["metadata"]["name"] == observed[JOB_KEY]["metadata"]["name"]
    assert not results(rsp)  # no event: the phase did not change
    gone = {**pvc("Bound"), **token_object()}
    rsp = run(request(composite, observed=gone, required=resolved()))
    assert status(rsp)["phase"] == "Failed"


def test_a_retried_job_starts_a_new_attempt() -> None:
    """Found by a review: after the failed Job's Object was deleted to retry (the README's
    advice), the new Job's hydration kept the first attempt's ``startedAt``, so
    ``readyAt - startedAt`` and the duration metric counted the failed attempt and the
    wait for the operator too."""
    clock = Clock(NOW)
    first = "2026-11-29T07:00:00Z"
    failed = prev_status(
        "Failed", reason="BackoffLimitExceeded", startedAt=first, failedAt="2026-11-29T08:00:00Z"
    )
    gone = {**pvc("Bound"), **token_object()}
    rsp = run(request(hydration_xr(failed), observed=gone, required=resolved()), now=clock)
    st = status(rsp)
    assert JOB_KEY in desired(rsp) and st["phase"] == "Failed"
    assert st["startedAt"] == "2026-11-29T09:00:00Z"  # now: the Job is desired again
    clock.advance(60)
    running = {**gone, **job([], active=1)}
    rsp = run(request(hydration_xr(st), observed=running, required=resolved()), now=clock)
    assert status(rsp)["phase"] == "Hydrating"
    assert status(rsp)["startedAt"] == st["startedAt"]  # carried from now on
    # A Job whose Object exists but was refused (JobNotCreated) is not a new attempt.
    refused = hydration_xr({**failed, "reason": "JobNotCreated"})
    observed = {**gone, **_job_refused("exceeded quota")}
    rsp = run(request(refused, observed=observed, required=resolved()), now=clock)
    assert status(rsp)["startedAt"] == first


def test_failed_job_message_carries_reason_and_message() -> None:
    observed = {**pvc("Bound"), **job(DEADLINE), **token_object()}
    rsp = run(
        request(hydration_xr(prev_status("Hydrating")), observed=observed, required=resolved())
    )
    st = status(rsp)
    assert st["message"] == "Job DeadlineExceeded: Job was active longer than specified deadline"
    assert warnings(rsp) == [f"hydration of {REPO}@main on {CLUSTER} is Failed: {st['message']}"]


def test_pvc_bind_timeout_recovers_when_bound() -> None:
    since = T_MINUS.strftime("%Y-%m-%dT%H:%M:%SZ")
    composite = hydration_xr(prev_status("Failed", reason="PVCBindTimeout", pendingSince=since))
    observed = {**pvc("Bound"), **job([], active=1), **token_object()}
    rsp = run(request(composite, observed=observed, required=resolved()))
    assert status(rsp)["phase"] == "Hydrating"
    assert "pendingSince" not in status(rsp)


def test_pvc_pending_requeues_before_timeout() -> None:
    clock = Clock(NOW)
    composite = hydration_xr(prev_status("Pending"))
    observed = pvc("Pending")
    rsp = run(request(composite, observed=observed, required=resolved()), now=clock)
    since = status(rsp)["pendingSince"]
    assert since == "2026-11-29T09:00:00Z"
    assert 0 < rsp.meta.ttl.seconds <= SETTINGS.poll_seconds
    # The clock moves past the limit with the recorded timestamp: Failed.
    clock.advance(SETTINGS.pvc_bind_timeout_seconds)
    composite = hydration_xr(prev_status("Pending", pendingSince=since))
    rsp = run(request(composite, observed=observed, required=resolved()), now=clock)
    assert status(rsp)["phase"] == "Failed"
    assert status(rsp)["reason"] == "PVCBindTimeout"
    assert status(rsp)["pendingSince"] == since


def _job_refused(message: str) -> dict:
    """The download Job's Object as provider-kubernetes reports a Job it cannot create:
    ``Synced=False`` with the apply error, and no remote Job (no ``atProvider``)."""
    obj = copy.deepcopy(baseline()[JOB_KEY])
    obj["status"] = {"conditions": [cond("Synced", "False", "ReconcileError", message)]}
    return {JOB_KEY: obj}


def test_a_download_job_that_cannot_be_created_is_pending_then_failed() -> None:
    """Found by a trial: a Job refused by a jobs quota read Hydrating / JobRunning for
    ever (nothing downloads, and the Job's deadline starts only once it exists)."""
    quota = 'jobs.batch "x" is forbidden: exceeded quota: q, requested: count/jobs.batch=1'
    clock = Clock(NOW)
    observed = {**pvc("Bound"), **_job_refused(quota), **token_object()}
    composite = hydration_xr(prev_status("Hydrating", reason="JobRunning"))
    rsp = run(request(composite, observed=observed, required=resolved()), now=clock)
    st = status(rsp)
    assert (st["phase"], st["reason"]) == ("Pending", "JobNotSynced"), st
    assert quota in st["message"] and "not created on gpu-a" in st["message"]
    assert [m for m in warnings(rsp) if "not created" in m] == [st["message"]]
    assert JOB_KEY in desired(rsp)  # still desired: it runs once it can be created
    assert 0 < rsp.meta.ttl.seconds <= SETTINGS.poll_seconds
    validate_status(composite, rsp)
    since = st["pendingSince"]
    # Still refused later: no second Warning, the same pendingSince.
    clock.advance(60)
    composite = hydration_xr(st)
    rsp = run(request(composite, observed=observed, required=resolved()), now=clock)
    assert status(rsp)["pendingSince"] == since and not warnings(rsp)
    # Past the hydration deadline: Failed (the ModelCache reports HydrationFailed).
    clock.advance(SETTINGS.hydration_deadline_seconds)
    rsp = run(request(hydration_xr(status(rsp)), observed=observed, required=resolved()), now=clock)
    st = status(rsp)
    assert (st["phase"], st["reason"]) == ("Failed", "JobNotCreated"), st
    assert "MODELPLANE_HYDRATION_DEADLINE_SECONDS" in st["message"]
    validate_status(composite, rsp)
    # It stays Failed while still refused, and runs once created.
    clock.advance(60)
    again = run(request(hydration_xr(st), observed=observed, required=resolved()), now=clock)
    assert status(again)["phase"] == "Failed" and status(again)["failedAt"] == st["failedAt"]
    created = {**observed, **job([], active=1)}
    rsp = run(request(hydration_xr(st), observed=created, required=resolved()), now=clock)
    assert (status(rsp)["phase"], status(rsp)["reason"]) == ("Hydrating", "JobRunning")


def test_a_refused_job_is_named_while_the_pvc_waits_for_it() -> None:
    """Found by a review: on WaitForFirstConsumer storage the PVC cannot bind before the
    Job's pod exists; a Job refused by a quota read PVCNotBound, then PVCBindTimeout,
    and the quota error appeared nowhere."""
    quota = "exceeded quota: q, requested: count/jobs.batch=1"
    observed = {**pvc("Pending"), **_job_refused(quota), **token_object()}
    rsp = run(request(hydration_xr(prev_status("Pending")), observed=observed,
                      required=resolved()))  # fmt: skip
    st = status(rsp)
    assert (st["phase"], st["reason"]) == ("Pending", "JobNotSynced"), st
    assert quota in st["message"]


def test_the_bind_timer_does_not_count_the_wait_for_a_refused_job() -> None:
    """Found by a review: after 1,000 s of a refused Job (PVC Bound), one call with the
    PVC not Bound failed at once with PVCBindTimeout ("not bound after 1010s"): the bind
    timer read the pendingSince the other wait had written."""
    clock = Clock(NOW)
    since = (NOW - datetime.timedelta(seconds=1000)).strftime("%Y-%m-%dT%H:%M:%SZ")
    composite = hydration_xr(prev_status("Pending", reason="JobNotSynced", pendingSince=since))
    observed = {**pvc("Pending"), **job([], active=1), **token_object()}
    rsp = run(request(composite, observed=observed, required=resolved()), now=clock)
    st = status(rsp)
    assert (st["phase"], st["reason"]) == ("Pending", "PVCNotBound"), st
    assert st["pendingSince"] == "2026-11-29T09:00:00Z"


def test_wait_for_first_consumer_does_not_time_out_without_job() -> None:
    """Without a Job (no Secret yet), a WaitForFirstConsumer PVC cannot bind: no timer."""
    composite = hydration_xr(prev_status("Pending", pendingSince=T_MINUS.isoformat()))
    rsp = run(request(composite, observed=pvc("Pending"), required=resolved(secret=[])))
    assert status(rsp)["phase"] == "Pending"
    assert "pendingSince" not in status(rsp)


def _unbound(message: str = "") -> dict:
    """A PVC that does not bind (with provider-kubernetes' apply error when ``message``),
    and the download Job and token Secret Crossplane created meanwhile (no pod yet)."""
    obs = {**pvc("Pending"), **job(), **token_object()}
    if message:
        obs["pvc"]["status"]["conditions"] = [cond("Synced", "False", "ReconcileError", message)]
    return obs


def _ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


_DEADLINE = SETTINGS.hydration_deadline_seconds
_BOUND_RUNNING = {**pvc("Bound"), **job([], active=1), **token_object()}
# (status the last reconcile wrote, observed, required) -> (phase, reason) written.
FIXED_POINT: list[Case[tuple[dict, dict, dict], tuple[str, str]]] = [
    Case(
        "pvc-not-bound",
        "the PVC waits to bind within MODELPLANE_PVC_BIND_TIMEOUT_SECONDS",
        (prev_status("Pending", pendingSince=_ago(60)), _unbound(), resolved()),
        ("Pending", "PVCNotBound"),
    ),
    Case(
        "pvc-bind-timeout",
        "found by review 15b: the message counted the seconds since pendingSince, so a "
        "PVC that never binds rewrote the status on every reconcile (and the shard's and "
        "cache's that quote it): Crossplane v2.4 reconciles an XR again on every write",
        (
            prev_status("Pending", pendingSince=T_MINUS.strftime("%Y-%m-%dT%H:%M:%SZ")),
            _unbound(),
            resolved(),
        ),
        ("Failed", "PVCBindTimeout"),
    ),
    Case(
        "pvc-bind-timeout-with-apply-error",
        "as pvc-bind-timeout, with the PVC Object's apply error in the message",
        (
            prev_status("Pending", pendingSince=T_MINUS.strftime("%Y-%m-%dT%H:%M:%SZ")),
            _unbound("storageclass efs-rwx not found"),
            resolved(),
        ),
        ("Failed", "PVCBindTimeout"),
    ),
    Case(
        "job-not-synced",
        "a download Job provider-kubernetes cannot create, within the hydration deadline",
        (
            prev_status("Hydrating", reason="JobRunning"),
            {**pvc("Bound"), **_job_refused("exceeded quota: q"), **token_object()},
            resolved(),
        ),
        ("Pending", "JobNotSynced"),
    ),
    Case(
        "job-not-created",
        "found by review 15b: the message counted the seconds the Job could not be "
        "created, rewritten on every reconcile for as long as the quota refuses it",
        (
            prev_status("Pending", reason="JobNotSynced", pendingSince=_ago(_DEADLINE + 5)),
            {**pvc("Bound"), **_job_refused("exceeded quota: q"), **token_object()},
            resolved(),
        ),
        ("Failed", "JobNotCreated"),
    ),
    Case(
        "hydrating",
        "the download Job runs",
        (prev_status("Pending"), _BOUND_RUNNING, resolved()),
        ("Hydrating", "JobRunning"),
    ),
    Case(
        "job-failed",
        "the download Job failed (its reason is the status' reason)",
        (prev_status("Hydrating"), {**pvc("Bound"), **job(BACKOFF), **token_object()}, resolved()),
        ("Failed", "BackoffLimitExceeded"),
    ),
    Case(
        "ready",
        "the download Job completed: Ready, latched",
        (
            prev_status("Hydrating", startedAt=_ago(600)),
            {**pvc("Bound"), **job(COMPLETE, succeeded=1), **token_object()},
            resolved(),
        ),
        ("Ready", "Hydrated"),
    ),
    Case(
        "auth-secret-missing",
        "the auth Secret does not exist",
        (prev_status("Pending"), pvc("Bound"), resolved(secret=[])),
        ("Pending", "AuthSecretMissing"),
    ),
]


@table(FIXED_POINT)
def test_a_status_is_a_fixed_point_in_an_unchanged_world(case: Case) -> None:
    """Crossplane v2.4 reconciles an XR again on every write of it and writes the status
    whenever it differs: in a world that does not change, the status and conditions the
    next reconciles write (a second and a minute later) are the ones written first."""
    prev, observed, required = case.inputs
    clock = Clock(NOW)
    first = run(request(hydration_xr(prev), observed=observed, required=required), now=clock)
    written = status(first)
    assert (written["phase"], written["reason"]) == case.want, written
    for seconds in (1, 60):
        clock.advance(seconds)
        again = run(request(hydration_xr(written), observed=observed, required=required), now=clock)
        assert status(again) == written, f"{seconds}s later"
        assert conditions(again) == conditions(first), f"{seconds}s later"


# ---- Ready latch, re-hydration ---------------------------------------------------


def test_ready_drops_job_and_secret_and_latches() -> None:
    observed = {**pvc("Bound"), **job(COMPLETE, succeeded=1), **token_object()}
    composite = hydration_xr(prev_status("Hydrating", startedAt="2026-11-29T08:00:00Z"))
    rsp = run(request(composite, observed=observed, required=resolved()))
    st = status(rsp)
    assert st["phase"] == "Ready"
    assert st["readyAt"] == "2026-11-29T09:00:00Z"
    assert st["startedAt"] == "2026-11-29T08:00:00Z"
    assert sorted(desired(rsp)) == LASTING
    assert normals(rsp) == [f"hydration of {REPO}@main on {CLUSTER} is Ready"]
    # Next call: the Job and the Secret are gone; status says Ready for this identity.
    after = hydration_xr({**prev_status("Ready"), "readyAt": st["readyAt"]})
    rsp2 = run(request(after, observed=pvc("Bound"), required=resolved()))
    assert sorted(desired(rsp2)) == LASTING
    assert status(rsp2)["phase"] == "Ready"
    assert status(rsp2)["readyAt"] == st["readyAt"]
    assert not results(rsp2)
    # Ready needs no token: Crossplane is not asked for the Secret any more.
    assert sorted(requirements(rsp2)) == ["cluster", "leaving-replicas", "replicas"]
    # The Secret requirement is not even needed once Ready: unresolved keeps Ready.
    rsp3 = run(request(after, observed=pvc("Bound"), required={}))
    assert status(rsp3)["phase"] == "Ready"
    assert sorted(desired(rsp3)) == ["pvc"]  # kept as observed; nothing else existed


def test_new_revision_hydrates_again() -> None:
    composite = hydration_xr(prev_status("Ready"), revision="v2")
    rsp = run(request(composite, observed=pvc("Bound"), required=resolved()))
    new_identity = source_identity(REPO, "v2")
    assert new_identity != IDENTITY
    new_key = hydration.job_key(new_identity)
    assert sorted(desired(rsp)) == sorted([*RUNNING[:-4], new_key, *hydration.RBAC_KEYS])
    st = status(rsp)
    assert st["phase"] == "Hydrating"
    assert st["source"] == {"repo": REPO, "revision": "v2", "identity": new_identity}
    job_name = desired(rsp)[hydration.job_key(new_identity)]["spec"]["forProvider"]["manifest"][
        "metadata"
    ]["name"]
    assert job_name == hydration_job_name(NAMESPACE, CACHE, REPO, "v2")
    assert job_name != hydration_job_name(NAMESPACE, CACHE, REPO, "main")


def test_old_identity_job_is_dropped() -> None:
    old = job(BACKOFF)  # keyed by the old identity
    composite = hydration_xr(prev_status("Failed"), revision="v3")
    rsp = run(request(composite, observed={**pvc("Bound"), **old}, required=resolved()))
    assert JOB_KEY not in desired(rsp)
    assert hydration.job_key(source_identity(REPO, "v3")) in desired(rsp)
    assert status(rsp)["phase"] == "Hydrating"


def test_evidence_is_carried_for_the_same_source_only() -> None:
    evidence = {
        "commit": "a" * 40,
        "digest": "sha256:" + "b" * 64,
        "validatedAt": "2026-11-29T08:00:00Z",
    }
    composite = hydration_xr(prev_status("Ready", evidence=evidence))
    rsp = run(request(composite, observed=pvc("Bound"), required=resolved()))
    assert status(rsp)["evidence"] == evidence
    changed = hydration_xr(prev_status("Ready", evidence=evidence), revision="v2")
    rsp = run(request(changed, observed=pvc("Bound"), required=resolved()))
    assert "evidence" not in status(rsp)


def result_object(result: str | None, *, repo: str = REPO, revision: str = "main") -> dict:
    """The observed result ConfigMap Object, with ``data.result`` as the Job wrote it."""
    composite = hydration_xr(repo=repo, revision=revision)
    body = desired(run(request(composite, required=resolved())))["result"]
    obs = observed_object(body, None)
    if result is not None:
        obs["status"]["atProvider"]["manifest"]["data"] = {"result": result}
    return {"result": obs}


def evidence_from_result(result: str, *, repo: str = REPO, revision: str = "main") -> dict | None:
    """``status.evidence`` of a Ready hydration of ``repo@revision`` given a reported result."""
    identity = source_identity(repo, revision)
    prev = {
        "phase": "Ready",
        "source": {"repo": repo, "revision": revision, "identity": identity},
        "stored": [{"identity": identity}],
    }
    composite = hydration_xr(prev, repo=repo, revision=revision)
    observed = {**pvc("Bound"), **result_object(result, repo=repo, revision=revision)}
    rsp = run(request(composite, observed=observed, required=resolved()))
    assert status(rsp)["phase"] == "Ready"
    validate_status(composite, rsp)
    return status(rsp).get("evidence")


GOOD_RESULT = {
    "repo": REPO,
    "revision": "main",
    "identity": IDENTITY,
    "commit": "c" * 40,
    "digest": "sha256:" + "d" * 64,
    "validatedAt": "2026-11-29T08:59:00Z",
    "completedAt": "2026-11-29T08:59:00Z",
    "files": 3,
    "bytes": 1024,
}


@pytest.mark.parametrize(
    ("result", "want"),
    [
        (
            json.dumps(GOOD_RESULT),
            {
                "commit": "c" * 40,
                "digest": "sha256:" + "d" * 64,
                "validatedAt": "2026-11-29T08:59:00Z",
            },
        ),
        (json.dumps({**GOOD_RESULT, "identity": "0000000000"}), None),  # another source
        (json.dumps({**GOOD_RESULT, "commit": "main"}), None),
        (json.dumps({**GOOD_RESULT, "digest": "md5:abc"}), None),
        (json.dumps({**GOOD_RESULT, "validatedAt": "yesterday"}), None),
        ("not json", None),
        ("[1, 2]", None),
        # Larger than the memoized size: parsed all the same.
        (
            json.dumps({**GOOD_RESULT, "note": "x" * 5000}),
            {
                "commit": "c" * 40,
                "digest": "sha256:" + "d" * 64,
                "validatedAt": "2026-11-29T08:59:00Z",
            },
        ),
    ],
)
def test_evidence_from_the_reported_result(result: str, want: dict | None) -> None:
    assert evidence_from_result(result) == want


def test_evidence_recorded_while_hydrating_and_after() -> None:
    observed = {
        **pvc("Bound"),
        **job(COMPLETE, succeeded=1),
        **token_object(),
        **result_object(json.dumps(GOOD_RESULT)),
    }
    composite = hydration_xr(prev_status("Hydrating"))
    rsp = run(request(composite, observed=observed, required=resolved()))
    assert status(rsp)["phase"] == "Ready"
    assert status(rsp)["evidence"]["commit"] == "c" * 40
    # The result ConfigMap stays (it is the record); the RBAC goes with the Job.
    assert sorted(desired(rsp)) == LASTING


def test_result_rbac_is_least_privilege() -> None:
    objs = desired(run(request(hydration_xr(), required=resolved())))
    manifests = {k: v["spec"]["forProvider"]["manifest"] for k, v in objs.items()}
    cm = manifests["result"]
    assert cm["kind"] == "ConfigMap" and "data" not in cm
    role = manifests["hydrate-role"]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [cm["metadata"]["name"]],
            "verbs": ["get", "patch"],
        }
    ]
    binding = manifests["hydrate-rolebinding"]
    sa = manifests["hydrate-sa"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": REMOTE_NAMESPACE}
    ]
    pod = manifests[JOB_KEY]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MODELPLANE_RESULT_CONFIGMAP"]["value"] == cm["metadata"]["name"]
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    for m in manifests.values():
        assert m["metadata"]["namespace"] == REMOTE_NAMESPACE


# ---- events --------------------------------------------------------------------------


def test_events_only_on_transitions() -> None:
    observed = {**pvc("Bound"), **job([], active=1), **token_object()}
    first = run(
        request(hydration_xr(prev_status("Pending")), observed=observed, required=resolved())
    )
    assert normals(first) == [f"hydration of {REPO}@main on {CLUSTER} is Hydrating"]
    again = run(
        request(hydration_xr(prev_status("Hydrating")), observed=observed, required=resolved())
    )
    assert not results(again)


def test_deterministic_response() -> None:
    observed = {**pvc("Bound"), **job([], active=1), **token_object()}
    req = request(hydration_xr(prev_status("Hydrating")), observed=observed, required=resolved())
    a = run(req).SerializeToString(deterministic=True)
    b = run(copy.deepcopy(req)).SerializeToString(deterministic=True)
    assert a == b


def _clear_memos() -> None:
    for memo in (
        hydration._parse_spec,
        hydration.lasting_objects,
        hydration.token_object,
        hydration.download_objects,
        hydration._source_status,
        hydration._evidence_memo,
    ):
        memo.cache_clear()


def test_memoized_objects_equal_fresh_ones_and_are_not_shared() -> None:
    """The memoized builders give what a fresh build gives; responses own their copies."""
    observed = {**pvc("Bound"), **job([], active=1), **token_object()}
    req = request(hydration_xr(prev_status("Hydrating")), observed=observed, required=resolved())
    _clear_memos()
    fresh = run(req).SerializeToString(deterministic=True)
    first = run(req)
    assert first.SerializeToString(deterministic=True) == fresh
    # Changing one response's desired Objects and status leaves the next response alone.
    for res in first.desired.resources.values():
        res.resource["spec"]["forProvider"]["manifest"]["metadata"]["name"] = "changed"
    first.desired.composite.resource["status"]["source"]["repo"] = "changed"
    assert run(req).SerializeToString(deterministic=True) == fresh


def test_memoized_objects_follow_every_input() -> None:
    """Another XR, cluster provider config or setting gives other Objects, never a stale one."""
    base = desired(run(request(hydration_xr(), required=resolved())))
    other_pc = inference_cluster(CLUSTER)
    other_pc["status"]["providerConfigRef"]["name"] = "another-config"
    moved = desired(run(request(hydration_xr(), required=resolved(cluster=[other_pc]))))
    assert {v["spec"]["providerConfigRef"]["name"] for v in moved.values()} == {"another-config"}
    image = SETTINGS.model_copy(update={"hydration_image": "registry.example/other:1"})
    rsp = run(request(hydration_xr(), required=resolved()), settings=image)
    pod = desired(rsp)[JOB_KEY]["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example/other:1"
    renamed = xr("ModelCacheHydration", NAME + "x", spec(), status=None)
    renamed_objs = desired(run(request(renamed, required=resolved())))
    names = {v["metadata"]["name"] for v in renamed_objs.values()}
    assert names.isdisjoint({v["metadata"]["name"] for v in base.values()})
    again = desired(run(request(hydration_xr(), required=resolved())))
    assert again == base


# ---- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda s: s.pop("clusterName"), "spec.clusterName"),
        (lambda s: s.pop("cacheName"), "spec.cacheName"),
        (lambda s: s["huggingFace"].update(repo="not a repo!"), "spec.huggingFace.repo"),
        (lambda s: s["huggingFace"].update(sizeGiB=0), "spec.huggingFace.sizeGiB"),
        (lambda s: s["huggingFace"].update(revision="-x"), "spec.huggingFace.revision"),
        (lambda s: s.pop("huggingFace"), "spec.huggingFace"),
        (
            lambda s: s["huggingFace"]["authSecret"].update(key="bad key"),
            "spec.huggingFace.authSecret.key",
        ),
    ],
)
def test_invalid_spec_is_fatal_and_names_the_field(mutate, field) -> None:
    composite = hydration_xr()
    mutate(composite["spec"])
    observed = {**pvc("Bound"), **job([], active=1)}
    rsp = run(request(composite, observed=observed, required=resolved()))
    msgs = fatal(rsp)
    assert msgs and field in msgs[0], msgs
    # A fatal result applies nothing: existing children are not rewritten or dropped.
    assert not rsp.desired.resources
    # The spec is validated once per distinct spec; an invalid one fails every time.
    assert fatal(run(request(composite, observed=observed, required=resolved()))) == msgs


# ---- C9: the token never leaves the Secret --------------------------------------------


def test_c9_token_never_in_output_or_logs(capsys) -> None:
    secret_obj = token_object()
    # Even if the provider echoed the token in the observed Object, it must not come back.
    echoed = secret_obj["token-secret"]
    echoed["spec"]["forProvider"]["manifest"]["data"] = {"HF_TOKEN": FAKE_TOKEN_B64}
    echoed["status"]["atProvider"]["manifest"]["data"] = {"HF_TOKEN": FAKE_TOKEN_B64}
    scenarios = [
        (hydration_xr(), {}, resolved()),
        (hydration_xr(), {}, {}),
        (
            hydration_xr(prev_status("Hydrating")),
            {**pvc("Bound"), **job([], active=1), **secret_obj},
            resolved(),
        ),
        (
            hydration_xr(prev_status("Hydrating")),
            {**pvc("Bound"), **job([], active=1), **secret_obj},
            {},
        ),
        (
            hydration_xr(prev_status("Hydrating")),
            {**pvc("Bound"), **job([], active=1), **secret_obj},
            resolved(secret=[]),
        ),
        (
            hydration_xr(prev_status("Hydrating")),
            {**pvc("Bound"), **job(COMPLETE), **secret_obj},
            resolved(),
        ),
    ]
    with structlog.testing.capture_logs() as logs:
        responses = [run(request(x, observed=o, required=r)) for x, o, r in scenarios]
    captured = capsys.readouterr()
    text = json.dumps([json_format.MessageToDict(r) for r in responses]) + repr(logs)
    text += captured.out + captured.err
    raw = b"".join(r.SerializeToString() for r in responses)
    for needle in (FAKE_TOKEN, FAKE_TOKEN_B64):
        assert needle not in text
        assert needle.encode() not in raw
    # The remote Secret's manifest declares only an empty placeholder for the key
    # patchesFrom fills (review 19d F1); it gets the token by patchesFrom.
    c = responses[0]
    token = desired(c)["token-secret"]
    manifest = token["spec"]["forProvider"]["manifest"]
    assert manifest["data"] == {"HF_TOKEN": ""} and "stringData" not in manifest
    assert manifest["metadata"]["name"] == cache_secret_name(NAMESPACE, CACHE)
    assert token["spec"]["references"] == [
        {
            "patchesFrom": {
                "apiVersion": "v1",
                "kind": "Secret",
                "name": "hf-token",
                "namespace": NAMESPACE,
                "fieldPath": "data.HF_TOKEN",
            },
            "toFieldPath": "data.HF_TOKEN",
        }
    ]
    # The Job reads the token with secretKeyRef from that remote Secret.
    pod = desired(c)[JOB_KEY]["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {
            "secretKeyRef": {"name": cache_secret_name(NAMESPACE, CACHE), "key": "HF_TOKEN"}
        },
    }
    # Dropped once Ready.
    assert set(desired(responses[-1])) == set(LASTING)


def _echoed_token_object() -> dict:
    """The token-secret Object as provider-kubernetes v1.3.1 leaves it after a create:
    the token it patched in memory persisted in ``spec`` (crossplane-runtime's
    critical-annotation ``Update``) and the remote Secret's data in ``status``."""
    obj = token_object()
    echoed = obj["token-secret"]
    echoed["spec"]["forProvider"]["manifest"]["data"] = {"HF_TOKEN": FAKE_TOKEN_B64}
    echoed["spec"]["forProvider"]["manifest"]["stringData"] = {"HF_TOKEN": FAKE_TOKEN}
    echoed["status"]["atProvider"]["manifest"]["data"] = {"HF_TOKEN": FAKE_TOKEN_B64}
    echoed["spec"]["forProvider"]["manifest"]["metadata"]["labels"]["observed-only"] = "x"
    return obj


@pytest.mark.parametrize(
    ("case", "prev", "auth", "required"),
    [
        # composed anew: the spec has authSecret and the download runs
        ("fresh", None, True, resolved),
        # kept as observed: the cluster, or the auth Secret, is not resolved
        ("kept, unresolved", "Hydrating", True, dict),
        ("kept, secret missing", "Hydrating", True, lambda: resolved(secret=[])),
        # kept as observed: authSecret removed while the Job that reads it runs
        ("kept, authSecret removed", "Hydrating", False, lambda: _PUBLIC),
    ],
)
def test_token_secret_declares_the_patched_key_empty(case, prev, auth, required) -> None:
    """Review 19d F1: provider-kubernetes persists the token it patches into
    ``spec.forProvider.manifest.data.HF_TOKEN``. The desired Object declares that key
    itself, empty, on every path (composed anew or kept as observed), so Crossplane's
    forced server-side apply owns it and resets the persisted value on the next
    reconcile; provider-kubernetes still patches the token over it in memory before it
    applies the remote Secret."""
    xr = hydration_xr(prev_status(prev), auth=auth) if prev else hydration_xr(auth=auth)
    observed = {**pvc("Bound"), **job([], active=1), **_echoed_token_object()}
    rsp = run(request(xr, observed=observed, required=required()))
    assert not fatal(rsp), case
    manifest = desired(rsp)["token-secret"]["spec"]["forProvider"]["manifest"]
    # the path the case names: a kept Object is the observed one (its marker label)
    assert ("observed-only" in manifest["metadata"]["labels"]) == case.startswith("kept")
    assert manifest["data"] == {REMOTE_TOKEN_KEY: ""}, case
    assert "stringData" not in manifest, case


def test_secret_key_with_dots_uses_bracket_field_path() -> None:
    composite = hydration_xr()
    composite["spec"]["huggingFace"]["authSecret"]["key"] = "hf.token"
    rsp = run(
        request(composite, required=resolved(secret=[auth_secret({"hf.token": FAKE_TOKEN_B64})]))
    )
    ref = desired(rsp)["token-secret"]["spec"]["references"][0]
    assert ref["patchesFrom"]["fieldPath"] == "data[hf.token]"
    assert ref["toFieldPath"] == "data.HF_TOKEN"


# ---- C1: long names ---------------------------------------------------------------------


def test_c1_long_names_valid_and_distinct() -> None:
    long_cache = "qwen2-5-72b-instruct-awq-int4-weights-shared-cache-prod"
    names = []
    for cache_name in (long_cache, long_cache[:60] + "-other"):
        composite = hydration_xr()
        composite["spec"]["cacheName"] = cache_name
        composite["spec"]["clusterName"] = "gpu-cluster-us-east-1a-production-h100"
        cl = inference_cluster("gpu-cluster-us-east-1a-production-h100")
        rsp = run(request(composite, required=resolved(cluster=[cl])))
        validate_all(rsp)
        manifests = {
            k: v["spec"]["forProvider"]["manifest"]["metadata"]["name"]
            for k, v in desired(rsp).items()
        }
        assert len(manifests) == len(RUNNING)
        # The ServiceAccount, Role and RoleBinding share one name; the rest differ.
        assert len(set(manifests.values())) == len(RUNNING) - 2
        names.append(manifests)
        again = run(request(composite, required=resolved(cluster=[cl])))
        assert desired(again) == desired(rsp)
    assert not set(names[0].values()) & set(names[1].values())


# ---- readiness CEL queries ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "obj", "want"),
    [
        (PVC_BOUND_CEL, {"status": {"phase": "Bound"}}, True),
        (PVC_BOUND_CEL, {"status": {"phase": "Pending"}}, False),
        (PVC_BOUND_CEL, {"spec": {}}, False),
        (JOB_COMPLETE_CEL, {"status": {"conditions": COMPLETE}}, True),
        (JOB_COMPLETE_CEL, {"status": {"conditions": BACKOFF}}, False),
        (JOB_COMPLETE_CEL, {"status": {"active": 1}}, False),
    ],
)
def test_readiness_cel(query: str, obj: dict, want: bool) -> None:
    """The Objects' DeriveFromCelQuery queries give the right answer (cel-python)."""
    import celpy

    env = celpy.Environment()
    program = env.program(env.compile(query))
    assert bool(program.evaluate({"object": celpy.json_to_cel(obj)})) is want


def test_hydration_duration_is_observed_once_when_ready_is_recorded() -> None:
    from function.edge.runner import FunctionRunner

    def observations(composite: dict, observed: dict) -> list:
        runner = FunctionRunner(settings=SETTINGS, clock=Clock(NOW))
        inputs = runner.decode(request(composite, observed=observed, required=resolved()))
        return hydration.compose(inputs).observations

    observed = {**pvc("Bound"), **job(COMPLETE, succeeded=1), **token_object()}
    started = hydration_xr(prev_status("Hydrating", startedAt="2026-11-29T08:00:00Z"))
    obs, entered = observations(started, observed)
    assert (entered.metric, dict(entered.labels)) == (
        "cache_hydration_transitions_total",
        {"namespace": NAMESPACE, "cache": CACHE, "phase": "Ready"},
    )
    assert obs.metric == "cache_hydration_duration_seconds"
    assert dict(obs.labels) == {"namespace": NAMESPACE, "cache": CACHE}
    assert obs.value == 3600.0
    ready = hydration_xr(prev_status("Ready", readyAt="2026-11-29T09:00:00Z"))
    assert observations(ready, pvc("Bound")) == []


def test_phase_transitions_and_failures_are_counted_with_the_event() -> None:
    """Issue 16: the dashboard's hydration phases and failed clusters come from these."""
    from function.edge.runner import FunctionRunner

    def observed_metrics(composite: dict, observed: dict) -> dict[str, dict[str, str]]:
        runner = FunctionRunner(settings=SETTINGS, clock=Clock(NOW))
        inputs = runner.decode(request(composite, observed=observed, required=resolved()))
        return {o.metric: dict(o.labels) for o in hydration.compose(inputs).observations}

    observed = {**pvc("Bound"), **job(BACKOFF, failed=4), **token_object()}
    running = hydration_xr(prev_status("Hydrating", startedAt="2026-11-29T08:00:00Z"))
    got = observed_metrics(running, observed)
    assert got == {
        "cache_hydration_transitions_total": {
            "namespace": NAMESPACE, "cache": CACHE, "phase": "Failed",
        },
        "cache_hydration_failures_total": {
            "namespace": NAMESPACE, "cache": CACHE, "cluster": CLUSTER,
            "reason": "BackoffLimitExceeded",
        },
    }  # fmt: skip
    failed = hydration_xr(prev_status("Failed", reason="BackoffLimitExceeded"))
    assert observed_metrics(failed, observed) == {}  # recorded already: counted once


# ---- issue 13: the Ready latch holds only while its PVC exists and is Bound -------------


def pvc_with(phase: str | None, uid: str | None) -> dict:
    """The observed pvc Object; ``phase`` None: provider-kubernetes reported nothing yet."""
    obj = observed_object(baseline()["pvc"], None if phase is None else {"phase": phase})
    if uid is not None:
        obj["status"]["atProvider"]["manifest"]["metadata"]["uid"] = uid
    return {"pvc": obj}


# (case, observed PVC (None: its Object is not observed), pvcUID in the last status,
#  want phase, want the download Job composed again, a fragment of the warning or None)
LATCH = [
    ("bound, same uid", pvc_with("Bound", "uid-1"), "uid-1", "Ready", False, None),
    ("bound, uid not recorded yet", pvc_with("Bound", "uid-1"), None, "Ready", False, None),
    ("state not reported: not known", pvc_with(None, None), "uid-1", "Ready", False, None),
    ("lost", pvc_with("Lost", "uid-1"), "uid-1", "Pending", True, "is Lost"),
    ("deleted", {}, "uid-1", "Pending", True, "is gone"),
    ("re-created empty", pvc_with("Bound", "uid-2"), "uid-1", "Hydrating", True, "re-created"),
]


@pytest.mark.parametrize("transport", ["in-process", "grpc"])
@pytest.mark.parametrize(
    ("case", "observed", "uid", "phase", "job_again", "warning"), LATCH, ids=[c[0] for c in LATCH]
)
def test_ready_latch_holds_only_while_the_pvc_is_bound(
    grpc_function, transport, case, observed, uid, phase, job_again, warning
) -> None:
    extra = {"readyAt": "2026-11-29T08:00:00Z", "startedAt": "2026-11-29T07:00:00Z"}
    if uid is not None:
        extra["pvcUID"] = uid
    composite = hydration_xr(prev_status("Ready", **extra))
    req = request(composite, observed=observed, required=resolved())
    rsp = run(req) if transport == "in-process" else grpc_function.call(req)
    st = status(rsp)
    assert st["phase"] == phase, (case, st)
    assert (JOB_KEY in desired(rsp)) is job_again, case
    validate_status(composite, rsp)
    if warning is None:
        assert st["pvcUID"] == "uid-1"  # recorded now, or carried while not reported
        assert not [m for s, m in results(rsp) if s == "Warning"]
    else:
        assert warning in st["message"], st["message"]
        assert any(warning in m for s, m in results(rsp) if s == "Warning")
        assert "readyAt" not in st and st.get("startedAt") != extra["startedAt"]
        assert xr_ready(rsp) == "READY_FALSE"


# ---- a download Job that exists is kept as it was observed -------------------------
#
# Found by review 17n (finding A): the download Job was rebuilt from the spec on every
# call. A Job's pod template is immutable, so a running Job whose template the spec (an
# added or removed spec.huggingFace.authSecret) or an upgrade of the function changed
# was re-sent under the same remote name and refused (its Object Synced=False), and with
# authSecret removed the token Secret Object stopped being desired: Crossplane deleted
# the remote Secret the running Job's pods read (a retry pod could not start).


def _public_baseline() -> dict[str, dict]:
    """The desired Objects of a first call for a public model (no authSecret)."""
    return desired(run(request(hydration_xr(auth=False), required={"cluster": [CLUSTER_OBJ]})))


def _older_template() -> dict:
    """The download Job's Object as an older release composed it: another image, less
    memory, no ServiceAccount and no result ConfigMap (the README example's Job)."""
    body = copy.deepcopy(baseline()[JOB_KEY])
    pod = body["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]
    pod["automountServiceAccountToken"] = False
    pod.pop("serviceAccountName", None)
    (container,) = pod["containers"]
    container["image"] = "xpkg.crossplane.io/modelplane/function-modelplane:v0.0.9"
    container["resources"]["limits"]["memory"] = "4Gi"
    container["env"] = [e for e in container["env"] if e["name"].startswith("HF_")]
    return body


def _download(
    body: dict, conds: list[dict] | None, *, token: bool = True, **job_status: Any
) -> dict:
    """The observed download Job Object ``body`` with its remote status (and the token
    Secret's Object when ``token``: it exists when the Job was created with a token)."""
    st: dict[str, Any] = dict(job_status)
    if conds is not None:
        st["conditions"] = conds
    return {JOB_KEY: observed_object(body, st), **(token_object() if token else {})}


def _unreported(body: dict, synced: dict, *, token: bool = True, **annotations: str) -> dict:
    """The download Job's Object ``body`` with no remote observation
    (no ``status.atProvider``), its ``Synced`` condition ``synced``, and crossplane-runtime's
    create annotations (``pending``, ``succeeded``, ``failed``: RFC 3339 times), plus the
    token Secret's Object when ``token``."""
    obj = copy.deepcopy(body)
    obj["status"] = {"conditions": [synced, cond("Ready", "False", "Creating")]}
    if annotations:
        obj["metadata"].setdefault("annotations", {}).update(
            {f"crossplane.io/external-create-{k}": v for k, v in annotations.items()}
        )
    return {JOB_KEY: obj, **(token_object() if token else {})}


_SYNCED = cond("Synced", "True", "ReconcileSuccess")
_INCOMPLETE = cond(
    "Synced",
    "False",
    "ReconcileError",
    "cannot determine creation result - remove the crossplane.io/external-create-pending "
    "annotation if it is safe to proceed",
)
_UNREACHABLE = cond("Synced", "False", "ReconcileError", "cannot connect: dial tcp: i/o timeout")
_QUOTA = cond("Synced", "False", "ReconcileError", "exceeded quota: q")

_HELD = "spec.huggingFace.authSecret change applies after the running download ends"
_NEXT = "spec.huggingFace.authSecret change applies to the next download"
_PUBLIC = {"cluster": [CLUSTER_OBJ]}


class _Kept(NamedTuple):
    """What a call must write: the phase, whether the Job is the observed one (else the
    one the spec asks for, or none), whether the token Secret is desired, and the note
    the message carries (None: no authSecret note)."""

    phase: str
    job: str  # "observed", "spec" or "none"
    token: bool
    note: str | None


# (auth in the spec, observed download Job and token Secret, required) -> what is written.
KEPT_AS_OBSERVED: list[Case[tuple[bool, dict, dict], _Kept]] = [
    Case(
        "unchanged-running",
        "nothing changed: the running Job and its token Secret are what the spec asks for",
        (True, _download(baseline()[JOB_KEY], [], active=1), resolved()),
        _Kept("Hydrating", "observed", True, None),
    ),
    Case(
        "auth-removed-while-running",
        "review 17n A: the running Job keeps the template it was created with (it reads "
        "the token Secret), so the token Secret stays desired until the Job ends",
        (False, _download(baseline()[JOB_KEY], [], active=1), _PUBLIC),
        _Kept("Hydrating", "observed", True, _HELD),
    ),
    Case(
        "auth-added-while-running",
        "review 17n A, the reverse: a public download that runs is not re-sent with "
        "HF_TOKEN; the token Secret the spec now asks for is composed beside it",
        (True, _download(_public_baseline()[JOB_KEY], [], token=False, active=1), resolved()),
        _Kept("Hydrating", "observed", True, _HELD),
    ),
    Case(
        "auth-added-secret-missing-while-running",
        "the added Secret does not exist yet: the running public Job goes on as it was",
        (
            True,
            _download(_public_baseline()[JOB_KEY], [], token=False, active=1),
            resolved(secret=[]),
        ),
        _Kept("Hydrating", "observed", False, _HELD),
    ),
    Case(
        "older-template-while-running",
        "review 17n E, the README example: a Job an older release created runs on with "
        "the template it has (a Job's pod template is immutable); no refused update",
        (True, _download(_older_template(), [], active=1), resolved()),
        _Kept("Hydrating", "observed", True, None),
    ),
    Case(
        "auth-removed-after-failure",
        "a failed Job is kept as it failed (not re-sent, not re-run: the name is the "
        "source's, and Failed holds until the source changes or its Object is deleted); "
        "review 17h B: its template reads the token Secret, and provider-kubernetes "
        "re-creates the Job from the kept Object if the Job is deleted on the cluster, so "
        "the token Secret stays desired (as observed) while the Job's Object is; the "
        "message says how to retry",
        (False, _download(baseline()[JOB_KEY], BACKOFF, failed=4), _PUBLIC),
        _Kept("Failed", "observed", True, _NEXT),
    ),
    Case(
        "auth-added-after-failure",
        "a public download that failed (a gated repo): kept as it failed; the token "
        "Secret follows the spec, ready for the retry the message names",
        (True, _download(_public_baseline()[JOB_KEY], BACKOFF, token=False, failed=4), resolved()),
        _Kept("Failed", "observed", True, _NEXT),
    ),
    Case(
        "auth-removed-after-complete",
        "a completed Job: Ready, the Job and the token Secret are dropped; nothing is held",
        (False, _download(baseline()[JOB_KEY], COMPLETE, succeeded=1), _PUBLIC),
        _Kept("Ready", "none", False, None),
    ),
    Case(
        "auth-removed-job-created-not-reported",
        "review 17h A: Crossplane applied the Object (Synced=True), provider-kubernetes "
        "has not reported the remote Job yet (no atProvider): it may exist with the token "
        "template, so it is kept as observed and the token Secret with it",
        (False, _unreported(baseline()[JOB_KEY], _SYNCED), _PUBLIC),
        _Kept("Hydrating", "observed", True, _HELD),
    ),
    Case(
        "older-template-created-not-reported",
        "review 17h A, an upgrade in that window: not re-sent with the new template",
        (True, _unreported(_older_template(), _SYNCED), resolved()),
        _Kept("Hydrating", "observed", True, None),
    ),
    Case(
        "auth-removed-job-create-incomplete",
        "review 17h A: a create whose result provider-kubernetes does not know "
        "(external-create-pending newer than any result; Synced=False) is not known, "
        "not 'never created'",
        (
            False,
            _unreported(baseline()[JOB_KEY], _INCOMPLETE, pending=_ago(120)),
            _PUBLIC,
        ),
        _Kept("Hydrating", "observed", True, _HELD),
    ),
    Case(
        "auth-removed-job-created-then-unreachable",
        "review 17h A: the create succeeded (external-create-succeeded), the status "
        "carrying the remote Job was never written, then the cluster became unreachable "
        "(Synced=False): the Job exists, kept as observed",
        (
            False,
            _unreported(baseline()[JOB_KEY], _UNREACHABLE, pending=_ago(120), succeeded=_ago(119)),
            _PUBLIC,
        ),
        _Kept("Hydrating", "observed", True, _HELD),
    ),
    Case(
        "auth-removed-job-create-failed",
        "the last create failed (external-create-failed after -pending, Synced=False, no "
        "remote Job): known never created, so the spec applies (a guard of the rule)",
        (
            False,
            _unreported(baseline()[JOB_KEY], _QUOTA, pending=_ago(120), failed=_ago(120)),
            _PUBLIC,
        ),
        _Kept("Pending", "spec", False, None),
    ),
    Case(
        "auth-removed-job-never-created",
        "a Job provider-kubernetes could not create (Synced=False, no remote Job) has no "
        "template to keep: the spec's applies at once",
        (False, {**_job_refused("exceeded quota: q"), **token_object()}, _PUBLIC),
        _Kept("Pending", "spec", False, None),
    ),
]


@table(KEPT_AS_OBSERVED)
def test_a_created_download_job_is_kept_as_observed(case: Case) -> None:
    auth, observed_job, required = case.inputs
    want: _Kept = case.want
    rbac = {k: observed_object(baseline()[k], None) for k in hydration.RBAC_KEYS}
    observed = {**pvc("Bound"), **rbac, **observed_job}
    composite = hydration_xr(prev_status("Hydrating", startedAt=_ago(600)), auth=auth)
    clock = Clock(NOW)
    rsp = run(request(composite, observed=observed, required=required), now=clock)
    assert not fatal(rsp)
    st = status(rsp)
    assert st["phase"] == want.phase, st
    got = desired(rsp)
    if want.job == "observed":
        kept, seen = got[JOB_KEY], observed[JOB_KEY]
        assert kept["spec"] == seen["spec"]
        assert {k: kept["metadata"].get(k) for k in ("name", "labels", "annotations")} == {
            k: seen["metadata"].get(k) for k in ("name", "labels", "annotations")
        }
    elif want.job == "spec":
        fresh = (baseline() if auth else _public_baseline())[JOB_KEY]
        assert got[JOB_KEY]["spec"] == fresh["spec"]
    else:
        assert JOB_KEY not in got
    assert ("token-secret" in got) == want.token, sorted(got)
    if want.token and not auth:
        # Kept as observed (no spec to build it from), never with data.
        assert (
            got["token-secret"]["spec"]["references"]
            == observed["token-secret"]["spec"]["references"]
        )
    if want.job == "observed" and want.phase == "Hydrating":
        assert set(hydration.RBAC_KEYS) <= set(got)  # the Job may report its result
        assert "result" in got
    if want.note is None:
        assert "authSecret" not in st["message"], st["message"]
    else:
        assert want.note in st["message"], st["message"]
        assert hydration_job_name(NAMESPACE, CACHE, REPO, "main") in st["message"]
    if not any(c["status"] == "False" for c in observed[JOB_KEY]["status"]["conditions"]):
        assert "not applied" not in st["message"]
    validate_all(rsp)
    validate_status(composite, rsp)
    # A fixed point: the next reconcile of the same world writes the same status.
    clock.advance(60)
    again = run(request(hydration_xr(st, auth=auth), observed=observed, required=required),
                now=clock)  # fmt: skip
    assert status(again) == st
    assert desired(again) == got


def test_a_refused_update_still_keeps_the_token_the_running_job_reads() -> None:
    """The Object's desired template and the Job on the cluster differ only after an
    update provider-kubernetes could not apply (``Synced=False``: a release before this
    rule re-sent a running Job without the token). The Job on the cluster reads the
    token: its Secret stays desired while it runs."""
    refused = observed_object(_public_baseline()[JOB_KEY], {"active": 1})
    running = baseline()[JOB_KEY]["spec"]["forProvider"]["manifest"]
    refused["status"]["atProvider"]["manifest"] = {
        **copy.deepcopy(running),
        "status": {"active": 1},
    }
    error = "Job.batch is invalid: spec.template: Invalid value: field is immutable"
    refused["status"]["conditions"] = [cond("Synced", "False", "ReconcileError", error)]
    observed = {**pvc("Bound"), JOB_KEY: refused, **token_object()}
    composite = hydration_xr(prev_status("Hydrating"), auth=False)
    rsp = run(request(composite, observed=observed, required=_PUBLIC))
    got = desired(rsp)
    assert got[JOB_KEY]["spec"] == refused["spec"]  # as observed, never rebuilt again
    assert "token-secret" in got
    st = status(rsp)
    assert st["phase"] == "Hydrating" and _HELD in st["message"] and error in st["message"]


def test_a_kept_job_that_reads_the_token_keeps_it_until_its_object_is_dropped() -> None:
    """Review 17h B, as a sequence: the download failed, then ``authSecret`` was removed.
    The failed Job's Object is kept (its template reads the token Secret), so the token
    Secret's Object stays desired as observed: when the failed Job is deleted on the
    cluster, provider-kubernetes re-creates it from the kept Object and its pods can read
    the token. Once the Job's Object is dropped (the user deletes it to retry), the token
    Secret goes with it: the retry follows the spec, without the token."""
    rbac = {k: observed_object(baseline()[k], None) for k in hydration.RBAC_KEYS}
    clock = Clock(NOW)
    prev = prev_status("Failed", startedAt=_ago(900))
    prev.update(reason="BackoffLimitExceeded", message="Job BackoffLimitExceeded: x")
    prev["failedAt"] = _ago(300)

    def call(prev: dict, observed: dict) -> tuple[dict, dict]:
        rsp = run(
            request(hydration_xr(prev, auth=False), observed=observed, required=_PUBLIC),
            now=clock,
        )
        assert not fatal(rsp)
        validate_all(rsp)
        return status(rsp), desired(rsp)

    # 1. Failed, authSecret removed: the failed Job and the token Secret it reads stay.
    failed = {**pvc("Bound"), **rbac, **_download(baseline()[JOB_KEY], BACKOFF, failed=4)}
    st, got = call(prev, failed)
    assert st["phase"] == "Failed" and _NEXT in st["message"], st
    assert got[JOB_KEY]["spec"] == failed[JOB_KEY]["spec"]
    assert "token-secret" in got
    assert got["token-secret"]["spec"]["forProvider"]["manifest"]["data"] == {"HF_TOKEN": ""}
    # 2. The remote Job deleted and re-created from the kept Object: it runs with the
    #    token (its Secret is still there), and the message says it is running.
    recreated = {
        **pvc("Bound"),
        **rbac,
        JOB_KEY: observed_object(got[JOB_KEY], {"active": 1}),
        **token_object(),
    }
    st, got = call(st, recreated)
    assert st["phase"] == "Hydrating" and _HELD in st["message"], st
    assert "token-secret" in got
    # 3. The Job's Object deleted to retry: the new Job follows the spec, without the
    #    token, and the token Secret is no longer desired.
    retry = {**pvc("Bound"), **rbac, **token_object()}
    st, got = call(st, retry)
    assert got[JOB_KEY]["spec"] == _public_baseline()[JOB_KEY]["spec"]
    assert "token-secret" not in got
    assert "authSecret" not in st["message"], st


# ---- the cache PVC keeps the storage class it was created with (review 20a F2) ------
#
# A PVC's spec is immutable after creation except a bound claim's resources.requests
# (Kubernetes' ValidatePersistentVolumeClaimUpdate): an InferenceCluster's cache storage
# class edit must not be written into an existing PVC, or the PVC Object is refused for
# ever, and every later request growth with it.

_NEW_CLASS = "fsx-lustre-rwx"  # the class the InferenceCluster reports after the edit
_OLD_CLASS = "rwx-fast"  # the class the PVC was created with (the baseline's)
_ABSENT = "absent"  # the remote PVC has no storageClassName (Kubernetes' nil)
_SPEC_IMMUTABLE = (
    'cannot patch object: PersistentVolumeClaim "x" is invalid: spec: Forbidden: spec is '
    "immutable after creation except resources.requests and volumeAttributesClassName "
    'for bound claims ... StorageClassName: &"rwx-fast" -> &"fsx-lustre-rwx"'
)
_PENDING_AT = "2026-01-01T00:00:00Z"


class PvcSeen(NamedTuple):
    """How the PVC Object is observed: ``remote`` is the remote PVC's storageClassName
    (None: no ``status.atProvider`` at all; :data:`_ABSENT`: the field left out);
    ``sent`` the class its Object was applied with (:data:`_ABSENT`: left out);
    ``error`` its ``Synced=False`` message (None: ``Synced=True``); ``notes`` its
    crossplane-runtime create annotations; ``request`` the remote request."""

    remote: str | None
    sent: str = _OLD_CLASS
    error: str | None = None
    notes: dict[str, str] = {}
    request: str = "2Gi"
    phase: str = "Bound"


class ClassWant(NamedTuple):
    """The desired PVC's storageClassName (:data:`_ABSENT`: left out) and whether the
    message says the PVC keeps it (naming the PVC and both classes)."""

    storage_class: str
    note: bool


def _pvc_seen(seen: PvcSeen) -> dict[str, Any]:
    body = copy.deepcopy(baseline()["pvc"])
    sent = body["spec"]["forProvider"]["manifest"]["spec"]
    if seen.sent == _ABSENT:
        del sent["storageClassName"]
    else:
        sent["storageClassName"] = seen.sent
    synced = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}
    if seen.error is not None:
        synced = {"type": "Synced", "status": "False", "reason": "ReconcileError"}
        synced["message"] = seen.error
    body["status"] = {"conditions": [synced]}
    if seen.notes:
        body["metadata"]["annotations"] = {**body["metadata"].get("annotations", {}), **seen.notes}
    if seen.remote is not None:
        remote = copy.deepcopy(body["spec"]["forProvider"]["manifest"])
        remote["spec"]["resources"] = {"requests": {"storage": seen.request}}
        remote["spec"].pop("storageClassName", None)
        if seen.remote != _ABSENT:
            remote["spec"]["storageClassName"] = seen.remote
        remote["status"] = {"phase": seen.phase}
        body["status"]["atProvider"] = {"manifest": remote}
    return body


CLASS_CASES = [
    Case("new-pvc", "no PVC Object observed: the PVC is created with the cluster's class",
         None, ClassWant(_NEW_CLASS, note=False)),
    Case("existing-keeps-its-class", "the remote PVC has the class it was created with: "
         "kept (the edit is immutable), and said", PvcSeen(_OLD_CLASS),
         ClassWant(_OLD_CLASS, note=True)),
    Case("existing-same-class", "the cluster's class is the PVC's: nothing to say",
         PvcSeen(_NEW_CLASS, sent=_NEW_CLASS), ClassWant(_NEW_CLASS, note=False)),
    Case("refused-rewrite-is-undone", "an Object a release before this fix rewrote (sent "
         "the new class, refused): the remote PVC's class is written back",
         PvcSeen(_OLD_CLASS, sent=_NEW_CLASS, error=_SPEC_IMMUTABLE),
         ClassWant(_OLD_CLASS, note=True)),
    Case("defaulted-class", "created without a class, the API server defaulted it (the "
         "observed PVC carries the default): the default is kept, not the cluster's",
         PvcSeen("standard-rwx", sent=_ABSENT), ClassWant("standard-rwx", note=True)),
    Case("remote-without-class", "the observed PVC has no storageClassName: none is "
         "written (never a class the PVC does not have)",
         PvcSeen(_ABSENT, sent=_ABSENT), ClassWant(_ABSENT, note=True)),
    Case("remote-empty-class", "storageClassName \"\" (no class, statically bound): kept "
         "as \"\"", PvcSeen("", sent=""), ClassWant("", note=True)),
    Case("not-reported-yet", "the Object exists, provider-kubernetes has not reported the "
         "PVC: it may exist with the class it was sent with, which is kept",
         PvcSeen(None), ClassWant(_OLD_CLASS, note=True)),
    Case("create-result-not-known", "Synced=False, no remote PVC, a create in flight "
         "(pending newer than failed): may exist, the sent class is kept",
         PvcSeen(None, error="cannot create object: timeout",
                 notes={"crossplane.io/external-create-pending": _PENDING_AT}),
         ClassWant(_OLD_CLASS, note=True)),
    Case("never-created", "Synced=False, no remote PVC, no create attempted (a quota): "
         "nothing exists, so the cluster's class applies",
         PvcSeen(None, error="cannot create object: exceeded quota"),
         ClassWant(_NEW_CLASS, note=False)),
]  # fmt: skip


@table(CLASS_CASES)
def test_an_existing_pvc_keeps_its_storage_class(case: Case[PvcSeen | None, ClassWant]) -> None:
    """The InferenceCluster now reports another cache storage class: an existing PVC
    keeps the class it has (the request still grows in the same manifest), a PVC being
    created gets the cluster's, and the message names the PVC and both classes."""
    observed = {} if case.inputs is None else {"pvc": _pvc_seen(case.inputs)}
    cluster = inference_cluster(CLUSTER, storage_class=_NEW_CLASS)
    prev = prev_status("Ready", pvcUID="")
    rsp = run(request(hydration_xr(prev), observed=observed, required=resolved(cluster=[cluster])))
    assert not fatal(rsp)
    validate_all(rsp)
    spec_ = desired(rsp)["pvc"]["spec"]["forProvider"]["manifest"]["spec"]
    assert spec_.get("storageClassName", _ABSENT) == case.want.storage_class, case.reason
    assert spec_["resources"]["requests"]["storage"] == "4Gi", case.reason  # grown
    assert spec_["accessModes"] == ["ReadWriteMany"] and spec_["volumeMode"] == "Filesystem"
    message = status(rsp)["message"]
    pvc_name = cache_pvc_name(NAMESPACE, CACHE)
    said = f"PVC {pvc_name} keeps " in message
    assert said == case.want.note, (case.reason, message)
    if case.want.note:
        kept = case.want.storage_class
        has = f"storage class {kept}" if kept not in ("", _ABSENT) else "no storage class"
        assert f"PVC {pvc_name} keeps {has}: " in message, message
        assert f"InferenceCluster {CLUSTER} reports {_NEW_CLASS}" in message, message
        assert "created anew" in message, message
    validate_status(hydration_xr(prev), rsp)


def test_the_kept_class_is_stable_over_calls() -> None:
    """Applied and observed again, the kept PVC is a fixed point: the same manifest, the
    same message, no new event."""
    cluster = [inference_cluster(CLUSTER, storage_class=_NEW_CLASS)]
    observed = {"pvc": _pvc_seen(PvcSeen(_OLD_CLASS))}
    xr_ = hydration_xr(prev_status("Ready", pvcUID=""))
    first = run(request(xr_, observed=observed, required=resolved(cluster=cluster)))
    body = desired(first)["pvc"]
    again = {"pvc": observed_object(body, {"phase": "Bound"})}
    second = run(
        request(hydration_xr(status(first)), observed=again, required=resolved(cluster=cluster))
    )
    assert desired(second)["pvc"]["spec"] == body["spec"]
    assert status(second)["message"] == status(first)["message"]
    assert not warnings(first) and not warnings(second)


class Refusal(NamedTuple):
    """A PVC Object refused by the API server: its error, and the remote PVC's phase and
    request (the desired request is 4Gi)."""

    error: str
    phase: str = "Bound"
    request: str = "2Gi"


_EXPANSION = (
    'cannot patch object: persistentvolumeclaims "x" is forbidden: only dynamically '
    "provisioned pvc can be resized and the storageclass that provisions the pvc must "
    "support resize"
)

REFUSAL_CASES = [
    Case("expansion-refused", "a refusal of the larger request names the request",
         Refusal(_EXPANSION), (" (request 4Gi) not applied: ", None)),
    Case("immutable-spec", "the spec is immutable (an earlier manifest with another "
         "class): the request is not blamed, and the current manifest clears it",
         Refusal(_SPEC_IMMUTABLE), (" not applied: ", "earlier manifest")),
    Case("immutable-request-unbound", "a larger request while the claim is not bound "
         "(only a bound claim's request can change): says it applies once bound",
         Refusal(_SPEC_IMMUTABLE, phase="Pending"),
         (" not applied: ", "the request 4Gi (now 2Gi) can be applied only once the PVC "
          "is bound (Pending)")),
    Case("immutable-unbound-same-request", "not bound, the request unchanged: not the "
         "request's fault", Refusal(_SPEC_IMMUTABLE, phase="Pending", request="4Gi"),
         (" not applied: ", "earlier manifest")),
]  # fmt: skip


@table(REFUSAL_CASES)
def test_pvc_not_synced_says_what_was_refused(case: Case[Refusal, tuple[str, str | None]]) -> None:
    """``PVCNotSynced`` names the PVC and the error; "the request" only when the error is
    not the API server's "spec is immutable" (then what the function changes)."""
    seen = PvcSeen(
        _OLD_CLASS, error=case.inputs.error, phase=case.inputs.phase, request=case.inputs.request
    )
    rsp = run(
        request(hydration_xr(prev_status("Ready", pvcUID="")), observed={"pvc": _pvc_seen(seen)},
                required=resolved())
    )  # fmt: skip
    pvc_name = cache_pvc_name(NAMESPACE, CACHE)
    head, hint = case.want
    (warned,) = [w for w in warnings(rsp) if case.inputs.error in w]
    assert warned.startswith(f"PVC {pvc_name}{head}{case.inputs.error}"), (case.reason, warned)
    if hint is not None:
        assert "(request" not in warned and hint in warned, (case.reason, warned)
    assert f"PVCNotSynced: {warned[:100]}" in status(rsp)["message"]
