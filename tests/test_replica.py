"""ModelReplica composer: workloads, env injection, hydration gating, /dev/shm, flash loader.

Table-driven in-process tests, the same cases replayed over a real gRPC channel,
and every emitted manifest validated: the Object against the provider-kubernetes
CRD, Deployments, Services and ResourceClaimTemplates against Kubernetes' schemas
(1.34, the first release with DRA's ``resource.k8s.io/v1``), LeaderWorkerSets
against the LWS CRD, plus the API server's pod-spec checks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import pytest
from google.protobuf.struct_pb2 import Struct

from function import naming
from function.api.modelreplica import pods_answer
from function.composers.replica import CONDITION
from function.composers.replica.names import ANNOTATION_REPLACES
from function.core.k8svalidation import DNS1123_LABEL
from function.core.numbers import ints_from_doubles
from function.manifests import workloads as wl
from function.ops.settings import Settings
from function.render import World, load_yaml
from jobs.contract import CACHE_MOUNT_PATH, FLASH_MOUNT_PATH
from tests.support import harness as h
from tests.support.fixtures import POD_API_FAULTS, put_fault
from tests.support.reliability import resolve
from tests.support.replica_fixtures import (
    CACHE,
    MODEL_DIR,
    MULTI_COMMAND,
    POOL,
    TOLERATIONS,
    USER_ARGS,
    USER_ENV,
    claim_of,
    cluster,
    engine_template,
    hydration,
    model_cache,
    multi_spec,
    observed_object,
    ready_required,
    replica,
    required,
    single_spec,
)
from tests.support.table import Case, table
from tests.support.validation import (
    LWS_CRD,
    OBJECT_CRD,
    _pod_templates,
    pod_spec_errors,
    validate_crd,
    validate_k8s,
)

NS = h.NAMESPACE
PVC = naming.cache_pvc_name(NS, CACHE)
POLL = 30


# ---- helpers ----------------------------------------------------------------------


def validate_all(rsp: Any) -> dict[str, dict[str, Any]]:
    """Validate every desired Object and its manifest; return the desired resources."""
    out = h.desired(rsp)
    for key, obj in out.items():
        validate_crd(obj, OBJECT_CRD)
        m = obj["spec"]["forProvider"]["manifest"]
        if m["kind"] == "LeaderWorkerSet":
            validate_crd(m, LWS_CRD)
            errors = [e for where, pod in _pod_templates(m) for e in pod_spec_errors(pod, where)]
            assert not errors, f"{key}: {errors}"
        else:
            validate_k8s(m, version="1.34")
    return out


def manifest(rsp_or_desired: Any, key: str) -> dict[str, Any]:
    d = rsp_or_desired if isinstance(rsp_or_desired, dict) else h.desired(rsp_or_desired)
    return d[key]["spec"]["forProvider"]["manifest"]


def engine_of(pod_template: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod_template["spec"]["containers"] if c["name"] == "engine")


def run(
    spec: dict[str, Any],
    req: dict[str, Any],
    *,
    observed: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    settings: Settings | None = None,
) -> Any:
    return h.run(
        h.request(replica(spec, status=status), observed=observed, required=req),
        settings=settings,
    )


# Struct numbers come back as floats: compare as plain JSON would.
ints = ints_from_doubles


# ---- requirements -------------------------------------------------------------------


def test_first_call_asks_for_cluster_cache_and_hydration_and_composes_nothing():
    rsp = run(single_spec(), required())
    reqs = h.requirements(rsp)
    assert reqs["cluster"] == {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "matchName": "gpu-a",
    }
    assert reqs["cache"]["matchName"] == CACHE and reqs["cache"]["namespace"] == NS
    assert reqs["hydration"] == {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCacheHydration",
        "matchName": naming.hydration_name(NS, CACHE, "gpu-a"),
        "namespace": NS,
    }
    assert h.desired(rsp) == {}
    assert h.conditions(rsp)[CONDITION]["status"] == "Unknown"
    assert not h.fatal(rsp)


def test_without_cache_only_the_cluster_is_required():
    rsp = run(single_spec(cache=False), required())
    assert set(h.requirements(rsp)) == {"cluster"}


# ---- single-node --------------------------------------------------------------------


def test_single_node_with_cache_composes_deployment_service_and_claim():
    rsp = run(single_spec(copies=2), ready_required())
    assert not h.fatal(rsp)
    d = validate_all(rsp)
    ckey = claim_of(d, "vllm", "Standalone")
    assert set(d) == {"workload-vllm", ckey, "service"}
    obj = d["workload-vllm"]
    assert obj["spec"]["providerConfigRef"] == {
        "kind": "ClusterProviderConfig",
        "name": "gpu-a-kubeconfig",
    }
    assert obj["spec"]["readiness"] == {
        "policy": "DeriveFromCelQuery",
        "celQuery": wl.DEPLOYMENT_READY_CEL,
    }
    dep = manifest(d, "workload-vllm")
    assert dep["kind"] == "Deployment" and dep["apiVersion"] == "apps/v1"
    assert dep["metadata"]["namespace"] == naming.REMOTE_NAMESPACE
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"] == {
        naming.LABEL_WORKLOAD: pod["metadata"]["labels"][naming.LABEL_WORKLOAD]
    }
    spec = pod["spec"]
    assert spec["nodeSelector"] == {naming.LABEL_POOL: POOL}
    assert spec["tolerations"] == [*TOLERATIONS, wl.GPU_TOLERATION]
    rct = manifest(d, ckey)
    claim_name = rct["metadata"]["name"]
    # Named by what it asks for (its spec is immutable), within 63 characters.
    digest = naming.claim_requests_hash(ints(rct["spec"]["spec"]["devices"]["requests"]))
    assert ckey == f"claim-vllm-standalone-{digest}"
    assert claim_name == f"{dep['metadata']['name']}-standalone-{digest}"
    assert len(claim_name) <= naming.MAX_LABEL
    assert spec["resourceClaims"] == [
        {"name": wl.POD_CLAIM, "resourceClaimTemplateName": claim_name}
    ]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols[wl.VOLUME_CACHE]["persistentVolumeClaim"] == {"claimName": PVC, "readOnly": True}
    assert vols[wl.VOLUME_SHM]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    eng = engine_of(pod)
    mounts = {m["mountPath"]: m for m in eng["volumeMounts"]}
    assert mounts[CACHE_MOUNT_PATH]["readOnly"] is True
    assert "/dev/shm" in mounts
    assert eng["resources"]["claims"] == [{"name": wl.POD_CLAIM}]
    # MODELPLANE_MODEL first, then the user's entries byte for byte, args untouched.
    assert eng["env"][0] == {"name": "MODELPLANE_MODEL", "value": MODEL_DIR}
    assert eng["env"][1:] == USER_ENV
    assert eng["args"] == USER_ARGS
    assert "command" not in eng
    # The claim carries the placement's device request and the pool's class.
    assert ints(rct["spec"]["spec"]["devices"]["requests"]) == [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 8,
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.capacity["gpu.nvidia.com"].memory'
                            '.compareTo(quantity("80Gi")) >= 0'
                        }
                    }
                ],
            },
        }
    ]
    svc = manifest(d, "service")
    assert svc["spec"]["selector"] == {naming.LABEL_SERVING: svc["metadata"]["name"]}
    assert pod["metadata"]["labels"][naming.LABEL_SERVING] == svc["metadata"]["name"]
    assert ints(svc["spec"]["ports"]) == [
        {"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}
    ]
    # Not observed yet: starting, explicitly not ready, called again.
    assert h.conditions(rsp)[CONDITION]["reason"] == "Starting"
    assert h.xr_ready(rsp) == "READY_FALSE"
    assert rsp.meta.ttl.seconds == POLL
    assert "endpoint" not in h.status(rsp)


def test_single_node_without_cache_mounts_nothing_and_injects_nothing():
    tmpl = engine_template(args=["--model=Qwen/Qwen2.5-0.5B-Instruct"], env=[])
    rsp = run(single_spec(cache=False, template=tmpl), required(cluster_items=[cluster()]))
    d = validate_all(rsp)
    pod = manifest(d, "workload-vllm")["spec"]["template"]
    eng = engine_of(pod)
    assert eng["args"] == ["--model=Qwen/Qwen2.5-0.5B-Instruct"]
    assert eng.get("env", []) == []
    assert {v["name"] for v in pod["spec"]["volumes"]} == {wl.VOLUME_SHM}
    assert "hydration" not in h.status(rsp)
    assert not [r for r in h.results(rsp) if r[0] == "Warning"]


def test_reference_to_model_without_cache_warns_that_kubernetes_leaves_it_literal():
    rsp = run(single_spec(cache=False), required(cluster_items=[cluster()]))
    warnings = [m for s, m in h.results(rsp) if s == "Warning"]
    assert any("$(MODELPLANE_MODEL)" in w and "no modelCacheRef" in w for w in warnings)
    # ...and still passes the args through untouched.
    assert engine_of(manifest(rsp, "workload-vllm")["spec"]["template"])["args"] == USER_ARGS


def test_serving_deployment_sets_endpoint_and_ready():
    spec = single_spec()
    first = h.desired(run(spec, ready_required()))
    observed = {
        "workload-vllm": observed_object(
            first["workload-vllm"],
            {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1},
        )
    }
    rsp = run(spec, ready_required(), observed=observed)
    svc = manifest(rsp, "service")["metadata"]["name"]
    url = f"http://{svc}.default.svc.cluster.local:8000"
    assert h.status(rsp)["endpoint"] == url
    assert h.status(rsp)["phase"] == "Serving"
    cond = h.conditions(rsp)[CONDITION]
    assert cond["status"] == "True" and cond["reason"] == "Serving" and url in cond["message"]
    assert h.xr_ready(rsp) == "READY_TRUE"


def test_sync_error_of_the_workload_is_reported():
    spec = single_spec()
    first = h.desired(run(spec, ready_required()))
    obs = observed_object(first["workload-vllm"], {})
    obs["status"]["conditions"] = [
        {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": "forbidden"}
    ]
    rsp = run(spec, ready_required(), observed={"workload-vllm": obs})
    assert "forbidden" in h.conditions(rsp)[CONDITION]["message"]
    assert h.xr_ready(rsp) == "READY_FALSE"


def test_engine_port_comes_from_the_user_container():
    tmpl = engine_template()
    tmpl["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 30000}]
    first = h.desired(run(single_spec(template=tmpl), ready_required()))
    svc = manifest(first, "service")
    assert ints(svc["spec"]["ports"][0]["port"]) == 30000
    eng = engine_of(manifest(first, "workload-vllm")["spec"]["template"])
    assert ints(eng["readinessProbe"]["httpGet"]["port"]) == 30000


# ---- multi-node ---------------------------------------------------------------------


@pytest.mark.parametrize("cache", [True, False])
def test_multi_node_composes_a_leader_worker_set(cache: bool):
    req = ready_required() if cache else required(cluster_items=[cluster()])
    rsp = run(multi_spec(cache=cache, nodes=2, copies=3), req)
    assert not h.fatal(rsp)
    d = validate_all(rsp)
    leader, worker = claim_of(d, "kimi", "Leader"), claim_of(d, "kimi", "Worker")
    assert leader and worker
    assert set(d) == {"workload-kimi", leader, worker, "service"}
    assert d["workload-kimi"]["spec"]["readiness"]["celQuery"] == wl.LWS_READY_CEL
    lws = manifest(d, "workload-kimi")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["replicas"] == 3
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 3
    svc = manifest(d, "service")["metadata"]["name"]
    for key in ("leaderTemplate", "workerTemplate"):
        pod = lwt[key]
        eng = engine_of(pod)
        names = [e["name"] for e in eng["env"]]
        injected = ["MODELPLANE_LEADER_ADDRESS", "MODELPLANE_RANK"]
        if cache:
            injected = ["MODELPLANE_MODEL", *injected]
        assert names[: len(injected)] == injected
        assert eng["env"][len(injected) :] == USER_ENV
        assert eng["command"] == MULTI_COMMAND
        by = {e["name"]: e for e in eng["env"]}
        assert by["MODELPLANE_LEADER_ADDRESS"]["value"] == "$(LWS_LEADER_ADDRESS)"
        assert by["MODELPLANE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"
        )
        vols = {v["name"] for v in pod["spec"]["volumes"]}
        assert (wl.VOLUME_CACHE in vols) is cache
        assert pod["spec"]["nodeSelector"] == {naming.LABEL_POOL: POOL}
        assert pod["spec"]["tolerations"] == [*TOLERATIONS, wl.GPU_TOLERATION]
        serving = pod["metadata"]["labels"].get(naming.LABEL_SERVING)
        # Only the leader serves the OpenAI API; the Service never routes to workers.
        assert serving == (svc if key == "leaderTemplate" else None)
    assert not [m for s, m in h.results(rsp) if s == "Warning" and "MODELPLANE_RANK" in m]


def test_coordinator_only_leader_claims_nothing_and_rides_the_worker_pool():
    spec = multi_spec()
    leader = spec["engines"][0]["members"][0]
    del leader["nodeSelector"]
    del leader["pool"]
    d = validate_all(run(spec, ready_required()))
    assert not claim_of(d, "kimi", "Leader") and claim_of(d, "kimi", "Worker")
    lt = manifest(d, "workload-kimi")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert "resourceClaims" not in lt["spec"]
    assert lt["spec"]["nodeSelector"] == {naming.LABEL_POOL: POOL}


def test_synthetic_device_is_placement_only():
    spec = single_spec()
    spec["engines"][0]["members"][0]["nodeSelector"]["devices"].append(
        {"name": "efa", "count": 4, "selectors": [{"cel": 'device.driver == "efa.amazonaws.com"'}]}
    )
    d = validate_all(run(spec, ready_required()))
    reqs = manifest(d, claim_of(d, "vllm", "Standalone"))["spec"]["spec"]["devices"]["requests"]
    assert [r["name"] for r in reqs] == ["gpu"]


# ---- env: reserved names, byte-for-byte, idempotence -------------------------------------


@pytest.mark.parametrize(
    "name", ["MODELPLANE_MODEL", "MODELPLANE_LEADER_ADDRESS", "MODELPLANE_RANK"]
)
@pytest.mark.parametrize("make", [single_spec, multi_spec])
def test_user_env_that_sets_a_reserved_name_is_rejected(name: str, make: Any):
    spec = make()
    member = spec["engines"][0]["members"][-1]
    member["template"]["spec"]["containers"][0]["env"] = [
        {"name": "A", "value": "1"},
        {"name": name, "value": "/somewhere"},
    ]
    observed = {"service": {"apiVersion": "v1", "kind": "Object", "metadata": {"name": "x"}}}
    rsp = run(spec, ready_required(), observed=observed)
    [msg] = h.fatal(rsp)
    mi = len(spec["engines"][0]["members"]) - 1
    assert f"spec.engines[0].members[{mi}].template.spec.containers[0].env[1].name" in msg
    assert name in msg
    # A fatal result applies nothing: Crossplane leaves existing children as they are.
    assert h.desired(rsp) == {}


def test_other_modelplane_names_are_the_users():
    tmpl = engine_template(env=[{"name": "MODELPLANE_SERVED_MODEL_NAME", "value": "qwen"}])
    rsp = run(single_spec(template=tmpl), ready_required())
    assert not h.fatal(rsp)


def test_compose_is_deterministic_and_idempotent():
    req = h.request(replica(multi_spec()), required=ready_required())
    a = h.run(req).SerializeToString(deterministic=True)
    b = h.run(req).SerializeToString(deterministic=True)
    assert a == b


# ---- hydration gating -------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A replica's spec and its ``required`` map (see
    :func:`tests.support.replica_fixtures.required`)."""

    spec: dict[str, Any]
    required: dict[str, Any]


@dataclass(frozen=True)
class Gated:
    """A gated call: the ``ModelReady`` reason, ``status.phase``, whether a Warning is
    emitted, what the message names, and ``status.hydration.phase`` (None: not written)."""

    reason: str
    phase: str
    warns: bool
    names: tuple[str, ...] = ()
    hydration: str | None = None


def _needs_16_devices() -> dict[str, Any]:
    spec = single_spec()
    spec["engines"][0]["members"][0]["nodeSelector"]["devices"][0]["count"] = 16
    return spec


WAIT = "pods must not start on a half-filled volume: nothing is composed until it is Ready"

GATES: list[Case[Request, Gated]] = [
    Case("hydration pending", WAIT, Request(single_spec(), ready_required("Pending")),
         Gated("Hydrating", "Hydrating", False, ("gpu-a", "Pending"), "Pending")),
    Case("hydrating", WAIT, Request(single_spec(), ready_required("Hydrating")),
         Gated("Hydrating", "Hydrating", False, ("gpu-a", "Hydrating"), "Hydrating")),
    Case("hydration pending, multi-node", WAIT, Request(multi_spec(), ready_required("Pending")),
         Gated("Hydrating", "Hydrating", False, ("gpu-a", "Pending"), "Pending")),
    Case("hydrating, multi-node", WAIT, Request(multi_spec(), ready_required("Hydrating")),
         Gated("Hydrating", "Hydrating", False, ("gpu-a", "Hydrating"), "Hydrating")),
    Case("hydration failed",
         "a failed hydration fails the replica, naming the cluster and the hydration's message",
         Request(single_spec(), ready_required("Failed", message="Job DeadlineExceeded")),
         Gated("HydrationFailed", "Failed", True, ("gpu-a", "Job DeadlineExceeded"), "Failed")),
    Case("hydration not found", "the cluster is outside the cache's footprint or not staged yet",
         Request(single_spec(), required(cluster_items=[cluster()], cache_items=[model_cache()],
                                         hydration_items=[])),
         Gated("HydrationNotFound", "Pending", False, ("gpu-a",), "NotFound")),
    Case("cluster not found", "the placed InferenceCluster is gone",
         Request(single_spec(), required(cluster_items=[], cache_items=[], hydration_items=[])),
         Gated("ClusterNotFound", "Pending", True, ("gpu-a",))),
    Case("cluster without provider config", "no status.providerConfigRef: nowhere to apply",
         Request(single_spec(cache=False), required(cluster_items=[cluster(provider_config=None)])),
         Gated("ClusterNotReady", "Pending", False, ("providerConfigRef",))),
    Case("cache not found", "the referenced ModelCache is gone",
         Request(single_spec(), required(cluster_items=[cluster()], cache_items=[],
                                         hydration_items=[hydration("gpu-a", "Ready")])),
         Gated("CacheNotFound", "Pending", True, (CACHE,))),
    Case("pool not in the cluster's status", "the placed pool left status.gpuPools",
         Request(single_spec(), {**ready_required(), "cluster": [
             cluster(pools=[{"name": "a100-pool", "nodes": 2, "devices": []}])]}),
         Gated("PoolNotFound", "Pending", True, (POOL,), "Ready")),
    Case("device no longer met", "no device of the pool has 16 units any more",
         Request(_needs_16_devices(), ready_required()),
         Gated("DeviceNotFound", "Pending", True, ("count 16",), "Ready")),
]  # fmt: skip


@table(GATES)
def test_a_gate_composes_nothing_and_says_why(case: Case[Request, Gated]):
    rsp = run(case.inputs.spec, case.inputs.required)
    want = case.want
    assert h.desired(rsp) == {}, case.reason
    cond = h.conditions(rsp)[CONDITION]
    assert (cond["status"], cond["reason"]) == ("False", want.reason), case.reason
    assert all(n in cond["message"] for n in want.names), cond["message"]
    st = h.status(rsp)
    assert st["phase"] == want.phase
    assert st.get("hydration", {}).get("phase") == want.hydration
    assert any(s == "Warning" for s, _ in h.results(rsp)) is want.warns
    assert h.xr_ready(rsp) == "READY_FALSE"
    assert rsp.meta.ttl.seconds == POLL


@pytest.mark.parametrize(
    "which", ["cluster", "cache", "hydration"], ids=["cluster", "cache", "hydration"]
)
def test_unresolved_requirement_keeps_existing_children_exactly(which: str):
    spec = single_spec()
    first = h.desired(run(spec, ready_required()))
    observed = {k: observed_object(v, {}) for k, v in first.items()}
    req = ready_required()
    req[which] = None
    status = {"phase": "Serving", "endpoint": "http://x.default.svc.cluster.local:8000"}
    rsp = run(spec, req, observed=observed, status=status)
    kept = h.desired(rsp)
    assert set(kept) == set(first)
    for k in first:
        assert kept[k]["spec"] == first[k]["spec"]
    assert h.status(rsp)["endpoint"] == status["endpoint"]
    assert not h.fatal(rsp)


KEPT = "a workload composed before is kept exactly: nothing rolls onto a volume being rewritten"

REGRESSIONS: list[Case[str, str]] = [
    Case("hydrating again", KEPT, "Hydrating", "Hydrating"),
    Case("pending again", KEPT, "Pending", "Hydrating"),
    Case("failed after serving",
         "the loaded weights keep serving; the failure is reported, not acted on", "Failed",
         "HydrationFailed"),
]  # fmt: skip


@table(REGRESSIONS)
def test_existing_workload_is_kept_when_hydration_regresses(case: Case[str, str]):
    spec = single_spec()
    first = h.desired(run(spec, ready_required()))
    observed = {k: observed_object(v, {}) for k, v in first.items()}
    # The deployment changes the image meanwhile: nothing rolls onto the volume.
    spec2 = copy.deepcopy(spec)
    spec2["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["image"] = "vllm:new"
    rsp = run(spec2, ready_required(case.inputs, message="re-hydrating"), observed=observed)
    kept = h.desired(rsp)
    assert set(kept) == set(first)
    for k in first:
        assert kept[k]["spec"] == first[k]["spec"], case.reason
    cond = h.conditions(rsp)[CONDITION]
    assert cond["reason"] == case.want and "kept" in cond["message"]
    assert h.xr_ready(rsp) == "READY_FALSE"


def test_pool_missing_from_cluster_status_keeps_what_exists():
    spec = single_spec()
    first = h.desired(run(spec, ready_required()))
    observed = {k: observed_object(v, {}) for k, v in first.items()}
    req = ready_required()
    req["cluster"] = [cluster(pools=[{"name": "a100-pool", "nodes": 2, "devices": []}])]
    rsp = run(spec, req, observed=observed)
    assert set(h.desired(rsp)) == set(first)
    cond = h.conditions(rsp)[CONDITION]
    assert cond["reason"] == "PoolNotFound" and POOL in cond["message"]


@pytest.mark.parametrize(
    "cel",
    [
        'device.attributes["gpu.nvidia.com"].noSuchAttribute == "x"',
        "1 / 0 == 1",
        "dyn(device.driver)",  # a non-boolean result known only when it runs
    ],
)
def test_device_selector_failing_at_evaluation_is_fatal_naming_it(cel: str):
    """Issue 13: an evaluation error is not "no device": a fatal result (nothing applied,
    every child kept) naming the field and the error."""
    spec = single_spec()
    spec["engines"][0]["members"][0]["nodeSelector"]["devices"][0]["selectors"] = [{"cel": cel}]
    [msg] = h.fatal(run(spec, ready_required()))
    assert "spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel" in msg
    assert "fails on device" in msg and cel in msg


def test_invalid_device_selector_is_fatal_naming_it():
    spec = single_spec()
    spec["engines"][0]["members"][0]["nodeSelector"]["devices"][0]["selectors"] = [
        {"cel": "device.driver =="}
    ]
    [msg] = h.fatal(run(spec, ready_required()))
    assert "spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel" in msg


def _edit(path: str, **fields: Any) -> Any:
    """An edit of the single-node spec: ``fields`` set on the object at ``path``
    (``"."`` the spec, ``"engine"``, ``"member"``, ``"container"``, ``"device"``)."""

    def apply(s: dict[str, Any]) -> None:
        member = s["engines"][0]["members"][0]
        at = {
            ".": s,
            "engine": s["engines"][0],
            "member": member,
            "container": member["template"]["spec"]["containers"][0],
            "device": member["nodeSelector"]["devices"][0],
        }[path]
        at.update(fields)

    return apply


def _second_standalone(s: dict[str, Any]) -> None:
    s["engines"][0]["members"].append(copy.deepcopy(s["engines"][0]["members"][0]))


STRICT = "a type the XRD states, which pydantic's lax mode alone would coerce"
M0 = "spec.engines[0].members[0]"

INVALID: list[Case[Any, str]] = [
    Case("no cluster", "spec.clusterName is required", lambda s: s.pop("clusterName"),
         "spec.clusterName"),
    Case("zero copies", "an engine runs at least one copy", _edit("engine", copies=0),
         "spec.engines[0].copies"),
    Case("no engine container", "the pod template must name the engine container",
         _edit("container", name="vllm"), f"{M0}.template.spec.containers"),
    Case("two standalone members", "an engine is one Standalone member, or a Leader and a Worker",
         _second_standalone, "spec.engines[0].members"),
    Case("no pool", "placement chose no pool for the member",
         lambda s: s["engines"][0]["members"][0].pop("pool"), f"{M0}.pool"),
    Case("index as a string", STRICT, _edit(".", index="0"), "spec.index"),
    Case("flashLoader.enabled as a string", STRICT, _edit(".", flashLoader={"enabled": "yes"}),
         "spec.flashLoader.enabled"),
    Case("toleration key as a number", STRICT, lambda s: s["tolerations"][0].update(key=7),
         "spec.tolerations[0].key"),
    Case("unknown serving mode", "serving.mode is an enum", _edit(".", serving={"mode": "Split"}),
         "spec.serving.mode"),
    Case("fractional copies", STRICT, _edit("engine", copies=1.5), "spec.engines[0].copies"),
    Case("selectors not a list", STRICT, _edit("device", selectors=3),
         f"{M0}.nodeSelector.devices[0].selectors"),
    Case("a number among the args", "container args are strings (Kubernetes)",
         _edit("container", args=["--x", 5]), f"{M0}.template.spec.containers[0].args[1]"),
    # Review 16b F4: tolerations the replica adds to every pod, which the workload
    # cluster's API server refuses (ValidateTolerations).
    Case("a toleration key that is no qualified name", "a toleration key is a qualified name",
         lambda s: s["tolerations"][0].update(key="bad key!"), "spec.tolerations[0].key"),
    Case("a toleration value of 64 characters", "an Equal toleration's value is a label value",
         lambda s: s["tolerations"][0].update(value="v" * 64), "spec.tolerations[0].value"),
    Case("tolerationSeconds without NoExecute", "tolerationSeconds needs effect NoExecute",
         lambda s: s["tolerations"][0].update(tolerationSeconds=30), "spec.tolerations[0].effect"),
]  # fmt: skip


@table(INVALID)
def test_invalid_spec_is_fatal_naming_the_field(case: Case[Any, str]):
    spec = single_spec()
    case.inputs(spec)
    [msg] = h.fatal(run(spec, ready_required()))
    assert case.want in msg, case.reason


# What the workload cluster's API server refuses in a member's pod template
# (POD_API_FAULTS; review 16b F4): the replica refuses it too, naming the field, with a
# fatal result (Crossplane applies nothing: its workload stays as it is).


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [pytest.param(p, v, f, id=i) for i, p, v, f in POD_API_FAULTS],
)
def test_a_pod_template_the_api_server_refuses_is_fatal_naming_it(
    path: tuple[Any, ...], value: Any, field: str
) -> None:
    spec = single_spec()
    put_fault(spec["engines"][0]["members"][0]["template"], path, value)
    observed = {"service": {"apiVersion": "v1", "kind": "Object", "metadata": {"name": "x"}}}
    rsp = run(spec, ready_required(), observed=observed)
    [msg] = h.fatal(rsp)
    assert f"{M0}.{field}: " in msg, msg
    assert "API server refuses it" in msg and len(msg) < 800, msg
    assert h.desired(rsp) == {}


# ---- flash loader and /dev/shm --------------------------------------------------------


def test_flash_loader_from_cache_level_copies_into_memory_and_points_model_there():
    fl = {"enabled": True, "concurrency": 16, "tmpfsSizeLimit": "200Gi"}
    rsp = run(multi_spec(), ready_required(flash_loader=fl))
    d = validate_all(rsp)
    lwt = manifest(d, "workload-kimi")["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        pod = lwt[key]
        [init] = pod["spec"]["initContainers"]
        assert init["name"] == wl.FLASH_CONTAINER
        assert "--concurrency=16" in init["args"]
        assert f"--source={MODEL_DIR}" in init["args"]
        mounts = {m["mountPath"]: m for m in init["volumeMounts"]}
        assert mounts[CACHE_MOUNT_PATH]["readOnly"] is True
        assert FLASH_MOUNT_PATH in mounts
        vols = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert vols[wl.VOLUME_FLASH]["emptyDir"] == {"medium": "Memory", "sizeLimit": "200Gi"}
        eng = engine_of(pod)
        assert eng["env"][0] == {"name": "MODELPLANE_MODEL", "value": FLASH_MOUNT_PATH}


def test_deployment_disables_what_the_cache_enables():
    spec = single_spec(flashLoader={"enabled": False})
    d = validate_all(run(spec, ready_required(flash_loader={"enabled": True})))
    pod = manifest(d, "workload-vllm")["spec"]["template"]
    assert "initContainers" not in pod["spec"]
    assert engine_of(pod)["env"][0]["value"] == MODEL_DIR


def test_invalid_flash_loader_at_cache_level_names_field_and_level():
    rsp = run(single_spec(), ready_required(flash_loader={"enabled": True, "concurrency": 0}))
    [msg] = h.fatal(rsp)
    assert f"ModelCache {NS}/{CACHE} spec.flashLoader.concurrency" in msg
    assert "level" in msg


SHM: list[Case[tuple[dict[str, str], str | None], str]] = [
    Case("default", "8Gi unless the operator or the spec says otherwise", ({}, None), "8Gi"),
    Case("operator default", "DEFAULT_SHM_SIZE_LIMIT applies to every replica",
         ({"DEFAULT_SHM_SIZE_LIMIT": "32Gi"}, None), "32Gi"),
    Case("spec over operator", "spec.shmSizeLimit wins over the operator's default",
         ({"DEFAULT_SHM_SIZE_LIMIT": "32Gi"}, "64Gi"), "64Gi"),
    Case("spec smaller", "a smaller override is honoured too", ({}, "1Gi"), "1Gi"),
]  # fmt: skip


@table(SHM)
def test_shm_size_limit_precedence_in_the_pod(case: Case[tuple[dict[str, str], str | None], str]):
    settings, override = case.inputs
    s = Settings(**settings)
    extra = {"shmSizeLimit": override} if override else {}
    d = validate_all(run(single_spec(**extra), ready_required(), settings=s))
    vols = {
        v["name"]: v for v in manifest(d, "workload-vllm")["spec"]["template"]["spec"]["volumes"]
    }
    assert vols[wl.VOLUME_SHM]["emptyDir"] == {"medium": "Memory", "sizeLimit": case.want}


def test_invalid_shm_override_is_fatal():
    [msg] = h.fatal(run(single_spec(shmSizeLimit="lots"), ready_required()))
    assert "spec.shmSizeLimit" in msg


# ---- readiness CEL agrees with the composer's own reading ------------------------------

ROLLED = "every replica updated and available at the observed generation (kubectl rollout status)"

DEPLOYMENT_READY: list[Case[dict[str, Any], bool]] = [
    Case("no status", "nothing reported yet", {}, False),
    Case("rolled out", ROLLED,
         {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2}, True),
    Case("one available", ROLLED,
         {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 1}, False),
    Case("old generation", "the status describes an older spec",
         {"observedGeneration": 0, "updatedReplicas": 2, "availableReplicas": 2}, False),
    Case("one updated", ROLLED,
         {"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 2}, False),
]  # fmt: skip
LWS_READY: list[Case[dict[str, Any], bool]] = [
    Case("no status", "nothing reported yet", {}, False),
    Case("available, all groups ready", "Available=True and every group ready",
         {"readyReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]}, True),
    Case("one group ready", "every group must be ready",
         {"readyReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]}, False),
    Case("not available", "Available=False",
         {"readyReplicas": 2, "conditions": [{"type": "Available", "status": "False"}]}, False),
    Case("no Available condition", "Available must be reported", {"readyReplicas": 2}, False),
]  # fmt: skip


def _cel(expr: str, obj: dict[str, Any]) -> bool:
    env = celpy.Environment()
    prog = env.program(env.compile(expr))
    return bool(prog.evaluate({"object": celpy.json_to_cel(obj)}))


@table(DEPLOYMENT_READY)
def test_deployment_readiness_cel_matches_python(case: Case[dict[str, Any], bool]):
    obj = {"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": case.inputs}
    assert _cel(wl.DEPLOYMENT_READY_CEL, obj) is case.want, case.reason
    assert wl.deployment_serving(obj) is case.want


@table(LWS_READY)
def test_lws_readiness_cel_matches_python(case: Case[dict[str, Any], bool]):
    obj = {"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": case.inputs}
    assert _cel(wl.LWS_READY_CEL, obj) is case.want, case.reason
    assert wl.lws_serving(obj) is case.want


# ---- cases C5 and C7 (the replica half) ----------------------------------------------


def test_c5_replica_on_hydrating_cluster_waits_ready_cluster_serves():
    """C5: gpu-a Ready, gpu-b Hydrating: only gpu-a's replica composes a workload."""
    on_a = run(single_spec(cluster_name="gpu-a"), ready_required("Ready", "gpu-a"))
    on_b = run(single_spec(cluster_name="gpu-b"), ready_required("Hydrating", "gpu-b"))
    assert "workload-vllm" in h.desired(on_a)
    assert h.desired(on_b) == {}
    assert h.conditions(on_b)[CONDITION]["reason"] == "Hydrating"
    assert h.xr_ready(on_b) == "READY_FALSE"
    # Once gpu-b is Ready, its replica composes.
    on_b = run(single_spec(cluster_name="gpu-b"), ready_required("Ready", "gpu-b"))
    assert "workload-vllm" in h.desired(on_b)


def test_c7_failed_cluster_fails_only_its_replica():
    """C7: gpu-c Failed ("Job DeadlineExceeded"); gpu-a and gpu-b unaffected."""
    results = {
        c: run(
            single_spec(cluster_name=c),
            ready_required(p, c, message="Job DeadlineExceeded" if p == "Failed" else ""),
        )
        for c, p in (("gpu-a", "Ready"), ("gpu-b", "Ready"), ("gpu-c", "Failed"))
    }
    for c in ("gpu-a", "gpu-b"):
        assert "workload-vllm" in h.desired(results[c])
        assert h.conditions(results[c])[CONDITION]["reason"] == "Starting"
    cond = h.conditions(results["gpu-c"])[CONDITION]
    assert cond["reason"] == "HydrationFailed"
    assert "gpu-c" in cond["message"] and "Job DeadlineExceeded" in cond["message"]


# ---- the same over gRPC, through Crossplane's requirements loop -----------------------

_GRPC_CASES = {
    "single-ready": (single_spec(), "Ready", "Starting"),
    "multi-ready": (multi_spec(), "Ready", "Starting"),
    "single-hydrating": (single_spec(), "Hydrating", "Hydrating"),
    "multi-failed": (multi_spec(), "Failed", "HydrationFailed"),
    "no-cache": (single_spec(cache=False), None, "Starting"),
}


@pytest.mark.parametrize("case", sorted(_GRPC_CASES))
def test_replayed_over_grpc_through_the_requirements_loop(grpc_function: Any, case: str):
    spec, phase, reason = _GRPC_CASES[case]
    world = [cluster(), cluster("gpu-b"), model_cache()]
    if phase is not None:
        world.append(hydration("gpu-a", phase, "Job DeadlineExceeded"))
    xr = replica(spec)
    rsp, calls = grpc_function.drive(xr, h.World(world))
    assert calls == 2
    assert h.conditions(rsp)[CONDITION]["reason"] == reason
    req = ready_required(phase or "Ready", message="Job DeadlineExceeded")
    if phase is None:
        req = required(cluster_items=[cluster()])
    local = h.run(h.request(xr, required=req))
    assert h.desired(rsp) == h.desired(local)
    assert h.status(rsp) == h.status(local)
    validate_all(rsp)


def test_partially_available_deployment_says_how_far():
    spec = single_spec(copies=2)
    first = h.desired(run(spec, ready_required()))
    obs = observed_object(
        first["workload-vllm"],
        {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 1},
    )
    rsp = run(spec, ready_required(), observed={"workload-vllm": obs})
    cond = h.conditions(rsp)[CONDITION]
    assert cond["reason"] == "Starting" and "1/2 pods available" in cond["message"]
    assert "endpoint" not in h.status(rsp)


def test_serving_leader_worker_set_sets_endpoint():
    spec = multi_spec(copies=2)
    first = h.desired(run(spec, ready_required()))
    not_yet = observed_object(first["workload-kimi"], {"readyReplicas": 1})
    rsp = run(spec, ready_required(), observed={"workload-kimi": not_yet})
    assert "1/2 groups ready" in h.conditions(rsp)[CONDITION]["message"]
    serving = observed_object(
        first["workload-kimi"],
        {"readyReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]},
    )
    rsp = run(spec, ready_required(), observed={"workload-kimi": serving})
    assert h.conditions(rsp)[CONDITION]["reason"] == "Serving"
    assert h.status(rsp)["endpoint"].endswith(".default.svc.cluster.local:8000")
    assert h.xr_ready(rsp) == "READY_TRUE"


def test_flash_loader_smaller_than_the_weights_warns():
    # qwen-cache holds 2 GiB of weights; a 1Gi memory volume cannot hold them.
    rsp = run(
        single_spec(), ready_required(flash_loader={"enabled": True, "tmpfsSizeLimit": "1Gi"})
    )
    warnings = [m for s, m in h.results(rsp) if s == "Warning"]
    assert any("tmpfsSizeLimit 1Gi" in w and "2 GiB" in w for w in warnings)
    rsp = run(
        single_spec(), ready_required(flash_loader={"enabled": True, "tmpfsSizeLimit": "3Gi"})
    )
    assert not [m for s, m in h.results(rsp) if s == "Warning"]


def test_worker_without_worker_settings_spans_one_node():
    spec = multi_spec()
    del spec["engines"][0]["members"][1]["worker"]
    d = validate_all(run(spec, ready_required()))
    assert manifest(d, "workload-kimi")["spec"]["leaderWorkerTemplate"]["size"] == 2


@pytest.mark.parametrize("flash", [False, True])
def test_no_engine_flag_is_ever_added(flash: bool):
    """Modelplane appends --model=<mount>; this function only sets MODELPLANE_MODEL."""
    args = ["--served-model-name=qwen", "--max-model-len=8192"]
    tmpl = engine_template(args=args, env=[])
    fl = {"enabled": flash}
    rsp = run(single_spec(template=tmpl), ready_required(flash_loader=fl))
    eng = engine_of(manifest(rsp, "workload-vllm")["spec"]["template"])
    assert eng["args"] == args
    assert "command" not in eng
    assert eng["env"] == [
        {"name": "MODELPLANE_MODEL", "value": FLASH_MOUNT_PATH if flash else MODEL_DIR}
    ]


def test_a_multi_node_engine_named_svc_is_fatal_naming_it():
    """Review 14a: its LeaderWorkerSet would take the replica's Service name (see
    ``naming.replica_service_name``); the spec is refused, naming the engine."""
    from tests.support.validation import xr_cel_errors

    spec = multi_spec()
    spec["engines"][0]["name"] = naming.SERVICE_PART
    [msg] = h.fatal(run(spec, ready_required()))
    assert "spec.engines[0]" in msg and "'svc' is reserved" in msg, msg
    assert any("may not be named svc" in e for e in xr_cel_errors("ModelReplica", spec))


@pytest.mark.parametrize("gate", ["PoolNotFound", "ClusterNotFound"])
def test_a_gated_replica_says_its_kept_workload_still_answers(gate: str):
    """Found by review 14d: a replica gated while its workload is kept (its pool left
    ``gpuPools``, its cluster left the list) wrote no ``status.engines``, so the
    deployment moving it make-before-break read it as not serving and removed it one
    call later, before its replacement served. Its kept workload's pods still answer:
    ``available`` says so, ``ready`` stays false (the gate holds it)."""
    from google.protobuf.struct_pb2 import Struct

    from function.api.modelreplica import pods_answer

    spec = single_spec()
    first = h.desired(run(spec, ready_required()))
    serving = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}
    observed = {k: observed_object(v, serving if k == "workload-vllm" else {})
                for k, v in first.items()}  # fmt: skip
    req = ready_required()
    if gate == "PoolNotFound":
        req["cluster"] = [cluster(pools=[{"name": "a100-pool", "nodes": 2, "devices": []}])]
    else:
        req["cluster"] = []
    rsp = run(spec, req, observed=observed)
    assert h.conditions(rsp)[CONDITION]["reason"] == gate
    engines = h.status(rsp)["engines"]
    assert [(e["name"], e["ready"], e["available"]) for e in engines] == [("vllm", False, True)]
    replica = Struct()
    replica.update({"status": h.status(rsp)})
    assert pods_answer(replica)
    # A workload not answering is said so too.
    observed["workload-vllm"] = observed_object(first["workload-vllm"], {})
    rsp = run(spec, req, observed=observed)
    assert [e["available"] for e in h.status(rsp)["engines"]] == [False]


# (device 0's claim in the cluster's status, the pool is known): review 15a.
CLAIMS = [
    ("DRA", True),
    (None, True),  # absent: the XRD's default, DRA
    ("Dra", False),
    ("", False),
    (5, False),
]


@pytest.mark.parametrize(("claim", "known"), CLAIMS, ids=[repr(c) for c, _ in CLAIMS])
def test_a_device_claim_not_known_keeps_the_workload_as_it_is(claim, known):
    """Found by review 15a: a claim the function does not know (``Dra``, from a class
    with a typo) was read as Synthetic: the replica dropped its ResourceClaimTemplate
    and rewrote its Deployment without the GPU claim, still Serving. Now its pool is
    not known: everything is kept as it is (``Resolving``), the field named."""
    spec = single_spec()
    first = h.desired(run(spec, ready_required()))
    assert claim_of(first, "vllm", "Standalone")
    observed = {k: observed_object(v, {}) for k, v in first.items()}
    req = ready_required()
    c = cluster()
    device = c["status"]["gpuPools"][0]["devices"][0]
    if claim is None:
        del device["claim"]
    else:
        device["claim"] = claim
    req["cluster"] = [c]
    rsp = run(spec, req, observed=observed)
    assert h.desired(rsp) == first
    cond = h.conditions(rsp)[CONDITION]
    if known:
        assert cond["reason"] != "Resolving", cond
    else:
        assert cond["reason"] == "Resolving", cond
        assert "status.gpuPools[0].devices[0].claim" in cond["message"], cond
        assert "DRA or Synthetic" in cond["message"], cond


@pytest.mark.parametrize(("pools", "reason"), [(None, "Resolving"), ([], "PoolNotFound")])
def test_gpu_pools_absent_is_not_known_not_empty(pools, reason):
    """Found by review 14d: with ``status.gpuPools`` absent (not written yet, or lost in
    a restore) the deployment keeps the replica as "not known", but the replica said
    ``PoolNotFound`` with a Warning that the pool was gone. Now it waits, keeping
    everything; ``[]`` is known: no pool."""
    spec = single_spec()
    first = h.desired(run(spec, ready_required()))
    observed = {k: observed_object(v, {}) for k, v in first.items()}
    req = ready_required()
    c = cluster()
    if pools is None:
        del c["status"]["gpuPools"]
    else:
        c["status"]["gpuPools"] = pools
    req["cluster"] = [c]
    rsp = run(spec, req, observed=observed)
    assert set(h.desired(rsp)) == set(first)
    cond = h.conditions(rsp)[CONDITION]
    assert cond["reason"] == reason, cond
    if pools is None:
        assert "reports no status.gpuPools" in cond["message"]
        assert not [m for s, m in h.results(rsp) if s == "Warning"], h.results(rsp)


# The ModelReplica example the fuzzer seeded (tests/test_fuzz.py::test_fuzz[ModelReplica],
# case 573 of the m17 run): examples/modelreplica/xr-multi-node-failed.yaml and its
# required/ world, every requirement resolved from it, one thing of its InferenceCluster
# not known.
EXAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples" / "modelreplica"


def _no_pools(c: dict[str, Any]) -> None:
    del c["status"]["gpuPools"]


def _claim(value: Any) -> Callable[[dict[str, Any]], None]:
    def put(c: dict[str, Any]) -> None:
        c["status"]["gpuPools"][0]["devices"][0]["claim"] = value

    return put


NOT_KNOWN = [
    Case("fuzz-573", "a device claim the fuzzer made a number", _claim(123), "a float"),
    Case("claim-typo", "a device claim neither DRA nor Synthetic", _claim("Dra"), "Dra"),
    Case("pools-absent", "status.gpuPools absent", _no_pools, "reports no status.gpuPools"),
]  # fmt: skip


@table(NOT_KNOWN)
def test_a_cluster_not_known_states_the_replica_is_not_ready(
    case: Case[Callable[[dict[str, Any]], None], str],
):
    """Found by the fuzzer (m17, case 573): with every requirement resolved but the
    cluster's pools not known, the replica said ``ModelReady=Unknown Resolving`` and
    left ``desired.composite.ready`` unspecified, so Crossplane derived the XR's
    readiness from its children (the function's rule: every composer states it). Only
    the call that still waits for Crossplane got READY_FALSE (from the runner). Now
    not known is not ready, stated."""
    (xr,) = load_yaml([str(EXAMPLE_DIR / "xr-multi-node-failed.yaml")])
    world = World(load_yaml([str(EXAMPLE_DIR / "required")]))
    first = h.run(h.request(xr))
    assert h.xr_ready(first) == "READY_FALSE"  # the loop's first call: the runner's rule
    resolved = resolve(first, world)
    (c,) = resolved["cluster"]
    case.inputs(c)
    rsp = h.run(h.request(xr, required=resolved))
    assert not h.fatal(rsp) and not h.requirements(rsp).keys() - resolved.keys()
    cond = h.conditions(rsp)[CONDITION]
    assert (cond["status"], cond["reason"]) == ("Unknown", "Resolving"), cond
    assert case.want in cond["message"], cond
    assert h.xr_ready(rsp) == "READY_FALSE", case.reason


# ---- an engine renamed: make-before-break (review 17n C) --------------------------------

# An engine's name is part of its workload's remote name (function.naming.workload_name)
# and composition-resource name: renaming it composes a new workload. Found by review
# 17n: the old one (and its claim templates) stopped being desired in the same call, so
# Crossplane deleted every replica's serving workload at once.
DEP_SERVES = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}
LWS_SERVES = {"replicas": 1, "readyReplicas": 1,
              "conditions": [{"type": "Available", "status": "True"}]}  # fmt: skip
STARTS = {"observedGeneration": 1, "replicas": 1}  # applied, no pod available yet


@dataclass(frozen=True)
class Renamed:
    """``engines[0]`` renamed (``multi``: the LeaderWorkerSet engine ``kimi``, else the
    Deployment ``vllm``); the old workload's remote state (``serves``, ``down``); the new
    one's (None: not created yet, ``starts``, ``serves``); the old Object being deleted;
    the new one's being deleted (observed with no annotation, its remote status as
    ``new`` says: the name was renamed back, or onto an engine removed, while Crossplane
    still deletes its earlier workload); ``between``: renamed twice, the remote state of
    the workload of the name in between (``<old>1``), applied before the second rename."""

    multi: bool
    old: str
    new: str | None
    old_deleting: bool = False
    new_deleting: bool = False
    between: str | None = None


@dataclass(frozen=True)
class Handover:
    """Whether the old engine's workload and claim templates are still desired (exactly
    as observed), ``ModelReady`` True, and the new engine's ``status.engines[].available``
    (the replica's pods answer, whichever workload runs them: the deployment's moves
    read it); whether the in-between engine's are still desired."""

    kept: bool
    ready: bool
    available: bool
    between_kept: bool = False


def _remote(kind: str, state: str | None) -> dict[str, Any]:
    if state == "serves":
        return LWS_SERVES if kind == "LeaderWorkerSet" else DEP_SERVES
    return STARTS if state == "starts" else {}


RENAMES = [
    Case("not-created", "the new workload is only desired: the old one keeps serving",
         Renamed(False, "serves", None), Handover(True, False, True)),
    Case("starting", "the new workload runs no available pod yet: the old one keeps serving "
         "(the annotation on the new Object remembers what it replaces)",
         Renamed(False, "serves", "starts"), Handover(True, False, True)),
    Case("serving", "the new workload serves: the old one goes, the replica is Ready",
         Renamed(False, "serves", "serves"), Handover(False, True, True)),
    Case("old-down", "the old workload does not answer: still kept (nothing running is "
         "deleted before its replacement serves), and nothing answers",
         Renamed(False, "down", "starts"), Handover(True, False, False)),
    Case("old-deleting", "an old Object already being deleted is not desired again",
         Renamed(False, "serves", "starts", old_deleting=True), Handover(False, False, False)),
    Case("lws-starting", "a multi-node engine: its LeaderWorkerSet and both claim templates",
         Renamed(True, "serves", "starts"), Handover(True, False, True)),
    Case("lws-serving", "a multi-node engine whose new LeaderWorkerSet serves",
         Renamed(True, "serves", "serves"), Handover(False, True, True)),
    # Review 17g F1: renamed back (or onto an engine removed) while Crossplane still
    # deletes the new name's earlier Object: its stale status read as serving, and an
    # Object observed counted as created, so the only serving workload was dropped.
    Case("new-deleting-reads-serving", "the new name's Object is being deleted, its stale "
         "status still serving: it does not serve, the old one is kept",
         Renamed(False, "serves", "serves", new_deleting=True), Handover(True, False, True)),
    Case("new-deleting-reads-down", "the new name's Object is being deleted, no pod: the "
         "old one is kept",
         Renamed(False, "serves", "starts", new_deleting=True), Handover(True, False, True)),
    Case("lws-new-deleting", "a multi-node engine renamed back while its LeaderWorkerSet "
         "is being deleted",
         Renamed(True, "serves", "serves", new_deleting=True), Handover(True, False, True)),
    # Review 17g F2: renamed twice before the first new name served.
    Case("twice", "renamed again before the name in between served: the old one answers, "
         "so the one in between (it never answered) goes, room for one copy only",
         Renamed(False, "serves", None, between="starts"), Handover(True, False, True)),
    Case("twice-starting", "the same once the newest workload is applied",
         Renamed(False, "serves", "starts", between="starts"), Handover(True, False, True)),
    Case("twice-old-down", "neither earlier workload answers: both kept (nothing running is "
         "deleted before its replacement serves)",
         Renamed(False, "down", "starts", between="starts"), Handover(True, False, False, True)),
    Case("twice-between-answers", "only the one in between answers: both kept (the old "
         "one served before; only one that never served goes)",
         Renamed(False, "down", "starts", between="serves"), Handover(True, False, True, True)),
    Case("twice-both-answer", "both earlier workloads answer: both kept, available",
         Renamed(False, "serves", "starts", between="serves"), Handover(True, False, True, True)),
    Case("twice-serving", "the newest workload serves: both earlier ones go",
         Renamed(False, "serves", "serves", between="starts"), Handover(False, True, True)),
]  # fmt: skip


def _applied(
    observed: dict[str, Any], created: dict[str, Any], kind: str, state: str | None
) -> dict[str, Any]:
    """Add what a call ``created`` (not observed yet) to ``observed``, as Crossplane
    applied it, its workload's remote state ``state``; returns what was added."""
    added = {}
    for k, v in created.items():
        if k not in observed:
            remote = _remote(kind, state) if k.startswith("workload-") else {}
            observed[k] = added[k] = observed_object(v, remote)
    return added


@table(RENAMES)
def test_a_renamed_engine_keeps_its_workload_until_the_new_one_serves(
    case: Case[Renamed, Handover],
):
    given, want = case.inputs, case.want
    spec = multi_spec() if given.multi else single_spec()
    old = spec["engines"][0]["name"]
    new, between = f"{old}2", f"{old}1"
    first = h.desired(run(spec, ready_required()))
    olds = {k for k in first if k != "service"}
    assert f"workload-{old}" in olds and any(k.startswith(f"claim-{old}-") for k in olds)
    kind = manifest(first, f"workload-{old}")["kind"]
    observed = {
        k: observed_object(v, _remote(kind, given.old) if k.startswith("workload-") else {})
        for k, v in first.items()
    }
    if given.old_deleting:
        observed[f"workload-{old}"]["metadata"]["deletionTimestamp"] = "2026-01-05T10:00:00Z"
    mids: dict[str, Any] = {}
    if given.between is not None:
        middle = copy.deepcopy(spec)
        middle["engines"][0]["name"] = between
        made = h.desired(run(middle, ready_required(), observed=observed))
        mids = _applied(observed, made, kind, given.between)
        assert f"workload-{between}" in mids
    renamed = copy.deepcopy(spec)
    renamed["engines"][0]["name"] = new
    if given.new_deleting:
        # Its earlier Object (it served once: no annotation), still being deleted.
        earlier = h.desired(run(renamed, ready_required()))
        for k in _applied(observed, earlier, kind, given.new):
            observed[k]["metadata"]["deletionTimestamp"] = "2026-01-05T10:00:00Z"
    elif given.new is not None:
        # What the rename call desired, as Crossplane applied it.
        created = h.desired(run(renamed, ready_required(), observed=observed))
        _applied(observed, created, kind, given.new)
    rsp = run(renamed, ready_required(), observed=observed)
    desired = validate_all(rsp)
    assert not h.fatal(rsp)
    news = {k.replace(f"-{old}", f"-{new}", 1) for k in olds}
    assert news <= set(desired) and "service" in desired
    if want.kept:
        for k in olds:
            assert desired[k]["spec"] == first[k]["spec"], (case.reason, k)
    else:
        assert not olds & set(desired), case.reason
    if want.between_kept:
        for k, v in mids.items():
            assert desired[k]["spec"] == v["spec"], (case.reason, k)
    else:
        assert not set(mids) & set(desired), case.reason
    cond = h.conditions(rsp)[CONDITION]
    assert (cond["status"] == "True") == want.ready, (case.reason, cond)
    [entry] = h.status(rsp)["engines"]
    assert (entry["name"], entry["available"]) == (new, want.available), case.reason
    if given.new_deleting:
        assert "being deleted" in entry["message"], entry
    # The new workload's Object names what it replaces while it does not serve yet.
    kept = sorted(n for n, k in ((old, want.kept), (between, want.between_kept)) if k)
    notes = desired[f"workload-{new}"]["metadata"].get("annotations") or {}
    assert notes.get(ANNOTATION_REPLACES) == (",".join(kept) or None), (case.reason, notes)
    for name in kept:
        wname = manifest(desired, f"workload-{name}")["metadata"]["name"]
        assert f"engine {name}" in cond["message"] and wname in cond["message"], cond
    # The deployment's make-before-break moves read whether the replica's pods answer.
    xr = Struct()
    xr.update({"status": h.status(rsp)})
    assert pods_answer(xr) == want.available, case.reason
    # A fixed point: the same world, the status written back, gives the same answer.
    again = run(renamed, ready_required(), observed=observed, status=h.status(rsp))
    assert h.desired(again) == h.desired(rsp) and h.status(again) == h.status(rsp)


def test_two_engines_renamed_at_once_keep_both_old_workloads():
    """Both engines renamed in one edit: each new engine replaces both old ones (which
    was which is not known). The one that does not answer served before (its Object
    names nothing it replaced), so it is kept though the other answers: only an engine
    renamed away before it ever served goes while another kept one answers."""
    spec = single_spec()
    second = copy.deepcopy(spec["engines"][0])
    second["name"] = "vllm-b"
    spec["engines"].append(second)
    first = h.desired(run(spec, ready_required()))
    observed = {
        k: observed_object(v, STARTS if k == "workload-vllm-b" else DEP_SERVES)
        for k, v in first.items()
    }
    renamed = copy.deepcopy(spec)
    renamed["engines"][0]["name"], renamed["engines"][1]["name"] = "vllm2", "vllm-b2"
    rsp = run(renamed, ready_required(), observed=observed)
    desired = h.desired(rsp)
    for k in first:
        assert desired[k]["spec"] == first[k]["spec"], k
    for e in ("vllm2", "vllm-b2"):
        notes = desired[f"workload-{e}"]["metadata"]["annotations"]
        assert notes[ANNOTATION_REPLACES] == "vllm,vllm-b", notes


def test_an_engine_removed_goes_at_once():
    """Removing an engine (no new engine beside it) deletes its workload in the same
    call, as before, even while another engine is not serving: the room it frees may be
    what that engine waits for."""
    spec = single_spec()
    second = copy.deepcopy(spec["engines"][0])
    second["name"] = "vllm-b"
    spec["engines"].append(second)
    first = h.desired(run(spec, ready_required()))
    assert "workload-vllm-b" in first and claim_of(first, "vllm-b", "Standalone")
    observed = {
        k: observed_object(v, STARTS if k == "workload-vllm" else DEP_SERVES)
        for k, v in first.items()
    }
    spec["engines"].pop()
    rsp = run(spec, ready_required(), observed=observed)
    kept = {"workload-vllm", claim_of(first, "vllm", "Standalone"), "service"}
    assert set(h.desired(rsp)) == kept


# ---- an engine's members changed role under the same name ------------------------------

# One Standalone member <-> a Leader and a Worker needs a LeaderWorkerSet in place of a
# Deployment (or back) under the same composition-resource name. provider-kubernetes
# reads an Object's workload by its manifest's kind: given the new kind it creates the new
# workload and never reads, updates or deletes the old one, which would run on (holding
# its devices) with no Object managing it (left open since review 17n; confirmed against
# provider-kubernetes' namespaced Object controller, Observe). So the old workload is
# kept, nothing new is composed for the engine, and the condition says how to switch.


def _roles_of(spec: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its engine's members (and the engine's shape) taken from ``other``'s
    engine, under ``spec``'s engine name."""
    changed = copy.deepcopy(spec)
    name = changed["engines"][0]["name"]
    changed["engines"][0] = copy.deepcopy(other["engines"][0]) | {"name": name}
    return changed


@dataclass(frozen=True)
class RoleChange:
    """The engine starts ``multi`` (a LeaderWorkerSet) or not; its old workload's remote
    state; its Object being deleted; ``renamed``: the engine is renamed in the same edit."""

    multi: bool
    old: str = "serves"
    deleting: bool = False
    renamed: bool = False


ROLE_CHANGES = [
    Case("to-gang", "Standalone -> Leader/Worker: the Deployment and its claim template are "
         "kept as observed, no LeaderWorkerSet is composed", RoleChange(False), "kept"),
    Case("to-standalone", "Leader/Worker -> Standalone: the LeaderWorkerSet and both claim "
         "templates are kept", RoleChange(True), "kept"),
    Case("old-down", "the old workload does not answer: still kept, not available",
         RoleChange(False, old="down"), "kept"),
    Case("old-deleting", "the old Object is being deleted: kept until gone (the new kind's "
         "manifest would have the provider delete the new kind, not the old)",
         RoleChange(False, deleting=True), "kept"),
    Case("renamed", "renamed in the same edit: the rename's make-before-break, no refusal",
         RoleChange(False, renamed=True), "handover"),
]  # fmt: skip


@table(ROLE_CHANGES)
def test_an_engine_whose_members_change_role_keeps_its_workload(case: Case[RoleChange, str]):
    given = case.inputs
    before, after = (multi_spec(), single_spec()) if given.multi else (single_spec(), multi_spec())
    name = before["engines"][0]["name"]
    first = h.desired(run(before, ready_required()))
    old_kind = manifest(first, f"workload-{name}")["kind"]
    new_kind = "Deployment" if given.multi else "LeaderWorkerSet"
    remote = _remote(old_kind, given.old)
    observed = {
        k: observed_object(v, remote if k.startswith("workload-") else {}) for k, v in first.items()
    }
    if given.deleting:
        observed[f"workload-{name}"]["metadata"]["deletionTimestamp"] = "2026-01-05T10:00:00Z"
    changed = _roles_of(before, after)
    if given.renamed:
        changed["engines"][0]["name"] = f"{name}2"
    rsp = run(changed, ready_required(), observed=observed)
    assert not h.fatal(rsp), h.fatal(rsp)
    desired = validate_all(rsp)
    olds = {k for k in first if k != "service"}
    # The old workload and its claim templates: desired exactly as observed.
    for k in olds:
        assert desired[k]["spec"] == first[k]["spec"], (case.reason, k)
    cond = h.conditions(rsp)[CONDITION]
    [entry] = h.status(rsp)["engines"]
    if case.want == "handover":
        new = f"{name}2"
        assert manifest(desired, f"workload-{new}")["kind"] == new_kind
        assert cond["reason"] != "WorkloadKindChanged", cond
        assert desired[f"workload-{new}"]["metadata"]["annotations"][ANNOTATION_REPLACES] == name
        return
    # Nothing new for the engine: no workload of the new kind, no claim template of a new
    # role (the old keys are the only ones of the engine).
    assert {k for k in desired if k != "service"} == olds, (case.reason, sorted(desired))
    assert manifest(desired, f"workload-{name}")["kind"] == old_kind
    assert (cond["status"], cond["reason"]) == ("False", "WorkloadKindChanged"), cond
    wname = manifest(first, f"workload-{name}")["metadata"]["name"]
    msg = cond["message"]
    assert f"spec.engines[0] ({name})" in msg
    if given.deleting:  # going already: the new kind follows with no edit (review 18a F2)
        assert f"its {old_kind} {wname} is being deleted; its {new_kind} is composed" in msg
        assert "rename" not in msg, msg
    else:
        assert f"{new_kind} in place of its {old_kind} {wname}" in msg
        assert "rename the engine" in msg, msg
    assert (entry["name"], entry["kind"], entry["workload"], entry["ready"]) == (
        name, old_kind, wname, False,
    )  # fmt: skip
    assert entry["available"] == (given.old == "serves" and not given.deleting), entry
    assert ("being deleted" in entry["message"]) == given.deleting, entry
    xr = Struct()
    xr.update({"status": h.status(rsp)})
    assert pods_answer(xr) == entry["available"], case.reason
    # A Warning once per change: none when the status already says it.
    assert ("Warning", msg) in h.results(rsp), h.results(rsp)
    written = h.status(rsp) | {"conditions": [{"type": CONDITION, **cond}]}
    again = run(changed, ready_required(), observed=observed, status=written)
    assert h.desired(again) == h.desired(rsp) and h.status(again) == h.status(rsp)
    assert not [m for s, m in h.results(again) if s == "Warning" and m == msg]


def test_an_engine_composes_its_new_kind_once_the_old_workload_is_gone():
    """Once the old workload's Object is gone (its roles restored, or the old Object
    deleted by hand), the engine composes the kind its members need, and restoring the
    roles while it is kept needs nothing more."""
    before, after = single_spec(), multi_spec()
    first = h.desired(run(before, ready_required()))
    changed = _roles_of(before, after)
    # Nothing of the engine observed: the LeaderWorkerSet is composed.
    observed = {"service": observed_object(first["service"], {})}
    rsp = run(changed, ready_required(), observed=observed)
    desired = h.desired(rsp)
    assert manifest(desired, "workload-vllm")["kind"] == "LeaderWorkerSet"
    assert claim_of(desired, "vllm", "Leader") and claim_of(desired, "vllm", "Worker")
    assert h.conditions(rsp)[CONDITION]["reason"] != "WorkloadKindChanged"
    # Roles restored while the Deployment is kept: it is desired as the spec says again.
    observed = {
        k: observed_object(v, DEP_SERVES if k.startswith("workload-") else {})
        for k, v in first.items()
    }
    rsp = run(before, ready_required(), observed=observed)
    assert h.desired(rsp) == first
    assert h.conditions(rsp)[CONDITION]["status"] == "True"


# ---- modelCacheRef removed: the replica rolls off its cache (review 17k F3 follow-up) ---

# A single-node engine may serve without a cache. With modelCacheRef removed, readiness
# read only "available": the old pods answered, so the replica was Ready at once, wrote
# no status.cacheIdentities, and its ModelDeployment dropped the leaving-cache label (and
# the cache its Usage) while pods still read the cache's PVC.
ROLLING = {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1}
NO_COUNTS = {
    "observedGeneration": 1,
    "updatedReplicas": 1,
    "availableReplicas": 1,
}  # no status.replicas


@dataclass(frozen=True)
class OffCache:
    """The observed workload's template (``old``: it still reads the cache; ``new``: the
    template without it) and its remote status; ``had``: the replica's last status
    names the identity it served (it was on a cache)."""

    template: str
    remote: dict[str, Any]
    had: bool = True


@dataclass(frozen=True)
class OffCacheWant:
    """ModelReady, the engine message's start, ``status.cacheIdentities``; the reason
    while not ready."""

    ready: bool
    why: str | None
    identities: list[str] | None
    reason: str = "Starting"


# The roll's surge pod never became available (no GPU room): the Deployment says so.
STALLED = ROLLING | {
    "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
}


OFF_CACHE = [
    Case("old-template", "the old template still reads the identity (the new one not "
         "applied yet): not ready, the identity kept",
         OffCache("old", DEP_SERVES),
         OffCacheWant(False, "rolling off the cache: the observed pods read identity", ["ID"])),
    Case("rolling", "the new template applied, pods of the old one still run",
         OffCache("new", ROLLING),
         OffCacheWant(False, "rolling off the cache: pods of the previous template", ["ID"])),
    Case("stalled", "the roll off the cache stalled: RolloutStalled, warned once (review "
         "18a F3: it read Starting for as long as the stall lasted)",
         OffCache("new", STALLED),
         OffCacheWant(False, "rolling off the cache: pods of the previous template", ["ID"],
                      "RolloutStalled")),
    Case("rolled", "every pod runs the new template: ready, nothing kept",
         OffCache("new", DEP_SERVES), OffCacheWant(True, None, None)),
    Case("not-known", "rollout counts not reported: ready (readiness waits on what is "
         "known), the identity kept (never released on an unknown state)",
         OffCache("new", NO_COUNTS), OffCacheWant(True, None, ["ID"])),
    Case("never-cached", "a replica that never had a cache rolling a new template: ready "
         "as before", OffCache("new", ROLLING, had=False), OffCacheWant(True, None, None)),
]  # fmt: skip


@table(OFF_CACHE)
def test_a_replica_whose_cache_was_removed_is_ready_once_its_pods_rolled_off_it(
    case: Case[OffCache, OffCacheWant],
):
    given, want = case.inputs, case.want
    on = h.desired(run(single_spec(), ready_required()))
    on_status = h.status(run(single_spec(), ready_required()))
    identity = on_status["hydration"]["identity"]
    off = single_spec(cache=False)
    plain = h.desired(run(off, required(cluster_items=[cluster("gpu-a")])))
    source = on if given.template == "old" else plain
    observed = {
        k: observed_object(v, given.remote if k.startswith("workload-") else {})
        for k, v in source.items()
    }
    status = (
        {"hydration": on_status["hydration"], "cacheIdentities": [identity]} if given.had else {}
    )
    rsp = run(off, required(cluster_items=[cluster("gpu-a")]), observed=observed, status=status)
    assert not h.fatal(rsp), h.fatal(rsp)
    assert h.desired(rsp) == plain  # the template without the cache is what is composed
    cond = h.conditions(rsp)[CONDITION]
    assert (cond["status"] == "True") == want.ready, (case.reason, cond)
    [entry] = h.status(rsp)["engines"]
    if want.why is None:
        assert entry["ready"] and "message" not in entry, entry
    else:
        assert not entry["ready"] and entry["message"].startswith(want.why), entry
        assert entry["available"] is True, entry  # the old pods answer meanwhile
        assert cond["reason"] == want.reason, cond
        warned = [m for s, m in h.results(rsp) if s == "Warning" and "stalled" in m]
        assert bool(warned) == (want.reason == "RolloutStalled"), h.results(rsp)
        if warned:
            assert "rollout off the cache (spec.modelCacheRef removed) stalled" in warned[0]
            assert f"its old pods still serve identity {identity}" in warned[0], warned
    ids = h.status(rsp).get("cacheIdentities")
    assert ids == ([identity] if want.identities else None), (case.reason, ids)
    # Carried in status, the identity stays until the roll is known to be done.
    again = run(
        off, required(cluster_items=[cluster("gpu-a")]), observed=observed, status=h.status(rsp)
    )
    assert h.status(again).get("cacheIdentities") == ids, case.reason


# ---- device requests: a ResourceClaimTemplate's spec is immutable (review 20a F1) ------

REFUSED_RCT = (
    'update failed: cannot apply object: ResourceClaimTemplate.resource.k8s.io "{name}" is '
    'invalid: spec: Invalid value: {{"spec":{{"devices":{{"requests":[{{"exactly":{{"count":4'
    + "}}}}]}}}}}}: field is immutable"
)
ROLLING = {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1}


def _counted(n: int, cache: bool = True) -> dict[str, Any]:
    """The single-node spec, its member asking for ``n`` GPUs."""
    spec = single_spec(cache=cache)
    spec["engines"][0]["members"][0]["nodeSelector"]["devices"][0]["count"] = n
    return spec


def _legacy(desired: dict[str, Any]) -> dict[str, Any]:
    """``desired`` as the release before composed it: the claim template's key and remote
    name without the digest of its requests, and the pod template naming it."""
    out = copy.deepcopy(desired)
    key = claim_of(out, "vllm", "Standalone")
    body = out.pop(key)
    m = body["spec"]["forProvider"]["manifest"]
    m["metadata"]["name"] = m["metadata"]["name"].rsplit("-", 1)[0]
    body["metadata"]["name"] = naming.child_name(body["metadata"]["name"].rsplit("-", 2)[0])
    out["claim-vllm-standalone"] = body
    pod = manifest(out, "workload-vllm")["spec"]["template"]
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = m["metadata"]["name"]
    return out


def _observed_all(desired: dict[str, Any], workload: dict[str, Any] = DEP_SERVES) -> dict[str, Any]:
    return {
        k: observed_object(v, workload if k.startswith("workload-") else {})
        for k, v in desired.items()
    }


def _refuse(obs: dict[str, Any], key: str, message: str) -> None:
    """The Object ``key`` reports the workload cluster's refusal of its last apply."""
    name = obs[key]["spec"]["forProvider"]["manifest"]["metadata"]["name"]
    obs[key]["status"]["conditions"] = [
        {"type": "Synced", "status": "False", "reason": "ReconcileError",
         "message": message.format(name=name)}
    ]  # fmt: skip


def _upgraded_same() -> tuple[dict[str, Any], dict[str, Any]]:
    return _counted(8), _observed_all(_legacy(h.desired(run(_counted(8), ready_required()))))


def _upgraded_edited() -> tuple[dict[str, Any], dict[str, Any]]:
    return _counted(4), _observed_all(_legacy(h.desired(run(_counted(8), ready_required()))))


def _upgraded_refused() -> tuple[dict[str, Any], dict[str, Any]]:
    """The release before rewrote the template in place (count 4) and was refused: the
    remote object still asks for 8."""
    old = _legacy(h.desired(run(_counted(8), ready_required())))
    obs = _observed_all(old)
    rewritten = copy.deepcopy(old["claim-vllm-standalone"])
    reqs = rewritten["spec"]["forProvider"]["manifest"]["spec"]["spec"]["devices"]["requests"]
    reqs[0]["exactly"]["count"] = 4
    obs["claim-vllm-standalone"]["spec"] = rewritten["spec"]
    _refuse(obs, "claim-vllm-standalone", REFUSED_RCT)
    return _counted(4), obs


def _edited(
    workload: dict[str, Any], cache: bool = True
) -> Callable[[], tuple[dict[str, Any], dict[str, Any]]]:
    """Count 8 -> 4 under this release, the new template and workload applied, the
    workload in state ``workload``; the count-8 template still observed."""

    def build() -> tuple[dict[str, Any], dict[str, Any]]:
        req = ready_required()
        old = _observed_all(h.desired(run(_counted(8, cache), req)))
        obs = _observed_all(h.desired(run(_counted(4, cache), req)), workload)
        return _counted(4, cache), {**old, **obs}

    return build


def _refused(key: str) -> Callable[[], tuple[dict[str, Any], dict[str, Any]]]:
    def build() -> tuple[dict[str, Any], dict[str, Any]]:
        obs = _observed_all(h.desired(run(_counted(8), ready_required())))
        _refuse(obs, claim_of(obs, "vllm", "Standalone") if key == "claim" else key,
                "update failed: cannot apply object: {name}: forbidden")  # fmt: skip
        return _counted(8), obs

    return build


@dataclass(frozen=True)
class Claims:
    """What a replica composes for its member's claim: the claim template keys it
    desires (``legacy``: the one it names is the release-before's key; ``digest``: named
    by the count's digest; ``old``: the count-8 template, "kept" as observed, "deleted"
    (no longer desired) or "" when there is none), whether its workload manifest is the
    one observed (no roll), the ModelReady reason, the engine's ``available``, what the
    condition's message says."""

    legacy: bool
    digest: bool
    old: str
    same_workload: bool
    reason: str
    available: bool = True
    says: str = ""


DEVICE_EDITS = [
    Case("upgraded, same requests", "the release-before's template asks for what the spec "
         "asks: its name is kept, nothing rolls on upgrade", _upgraded_same,
         Claims(True, False, "", True, "Serving")),
    Case("upgraded, count edited", "another count is another template under a digest name; "
         "the old one is kept as observed until the workload rolls", _upgraded_edited,
         Claims(False, True, "kept", False, "Starting",
                says="rolling onto ResourceClaimTemplate")),
    Case("upgraded, rewritten in place and refused", "the remote template, not the refused "
         "manifest, says what it asks for: the edit applies by a roll", _upgraded_refused,
         Claims(False, True, "kept", False, "Starting")),
    Case("edited, rolling", "the workload names the new template and rolls: the old one is "
         "kept", _edited(ROLLING),
         Claims(False, True, "kept", True, "Starting", says="is kept")),
    Case("edited, rolled", "the roll is complete: the old template goes", _edited(DEP_SERVES),
         Claims(False, True, "deleted", True, "Serving")),
    Case("no cache, rolling", "without a cache too, pods of the old template still run: "
         "not Serving yet", _edited(ROLLING, cache=False),
         Claims(False, True, "kept", True, "Starting",
                says="rolling onto ResourceClaimTemplate chat-0-vllm-")),
    Case("no cache, roll stalled", "a surge pod that finds no room for the new devices",
         _edited({**ROLLING, "conditions": [{"type": "Progressing", "status": "False",
                  "reason": "ProgressDeadlineExceeded"}]}, cache=False),
         Claims(False, True, "kept", True, "RolloutStalled", says="(a device request edited)")),
    Case("claim template refused", "a claim template that does not apply keeps the replica "
         "from Serving, named with the provider's message", _refused("claim"),
         Claims(False, True, "", True, "ObjectNotSynced",
                says="ResourceClaimTemplate chat-0-vllm-")),
    Case("service refused", "so does the Service", _refused("service"),
         Claims(False, True, "", True, "ObjectNotSynced", says="Service chat-0-svc-")),
]  # fmt: skip


@table(DEVICE_EDITS)
def test_a_device_request_edit_rolls_onto_a_new_claim_template(case: Case[Any, Claims]):
    spec, observed = case.inputs()
    req = ready_required() if "modelCacheRef" in spec else required(cluster_items=[cluster()])
    rsp = run(spec, req, observed=observed)
    want = case.want
    d = validate_all(rsp)
    claims = {k for k in d if k.startswith("claim-")}
    # The template the pod template names asks for the spec's count.
    pod = manifest(d, "workload-vllm")["spec"]["template"]["spec"]
    named = pod["resourceClaims"][0]["resourceClaimTemplateName"]
    (current,) = [k for k in claims if manifest(d, k)["metadata"]["name"] == named]
    count = spec["engines"][0]["members"][0]["nodeSelector"]["devices"][0]["count"]
    reqs = ints(manifest(d, current)["spec"]["spec"]["devices"]["requests"])
    assert reqs[0]["exactly"]["count"] == count
    assert (current == "claim-vllm-standalone") is want.legacy
    assert (current != "claim-vllm-standalone") is want.digest
    assert current == claim_of([current], "vllm", "Standalone")
    kept = claims - {current}
    for k in kept:  # an old template is kept exactly as observed
        assert d[k]["spec"] == observed[k]["spec"], k
    deleted = {k for k in observed if k.startswith("claim-") and k not in claims}
    assert (want.old == "kept") is bool(kept) and (want.old == "deleted") is bool(deleted)
    same = manifest(d, "workload-vllm") == observed["workload-vllm"]["spec"]["forProvider"][
        "manifest"]  # fmt: skip
    assert same is want.same_workload
    cond = h.conditions(rsp)[CONDITION]
    assert cond["reason"] == want.reason, cond
    assert h.xr_ready(rsp) == ("READY_TRUE" if want.reason == "Serving" else "READY_FALSE")
    (engine,) = h.status(rsp)["engines"]
    assert engine["available"] is want.available, engine
    if want.says:
        assert want.says in cond["message"], cond
    if want.reason == "ObjectNotSynced":
        assert "(Object modelreplica-" in cond["message"]
        assert "'update failed: cannot apply object: " in cond["message"]
        assert ("Warning", cond["message"]) in h.results(rsp)
        assert engine["ready"] is (case.name == "service refused")


def test_a_refused_apply_is_warned_once_and_quoted_within_bounds():
    """A provider's message can hold the whole refused object: the condition quotes its
    two ends (the rule is at the end, "field is immutable"), and the Warning is emitted
    when the replica enters ObjectNotSynced, not on every reconcile."""
    spec, observed = _refused("claim")()
    key = claim_of(observed, "vllm", "Standalone")
    huge = "update failed: cannot apply object: " + "x" * 100_000 + ": field is immutable"
    observed[key]["status"]["conditions"][0]["message"] = huge
    rsp = run(spec, ready_required(), observed=observed)
    cond = h.conditions(rsp)[CONDITION]
    assert cond["reason"] == "ObjectNotSynced"
    assert len(cond["message"]) < 2000 and "field is immutable" in cond["message"]
    assert f"({len(huge)} characters)" in cond["message"]
    status = {"conditions": [{"type": CONDITION, "status": "False", "reason": "ObjectNotSynced"}]}
    again = run(spec, ready_required(), observed=observed, status=status)
    assert h.conditions(again)[CONDITION]["reason"] == "ObjectNotSynced"
    assert not [m for s, m in h.results(again) if s == "Warning"]


def test_claim_template_names_fit_at_the_longest_workload_name():
    """The longest workload name (40) with the longest role and the digest stays a
    DNS-1123 label."""
    longest = naming.workload_name("n" * 63, "r" * 253, "d" * 253, 2**31 - 1, "e" * 63)
    assert len(longest) == naming.MAX_WORKLOAD_NAME
    digest = naming.claim_requests_hash([{"name": "gpu"}])
    name = naming.claim_template_name(longest, "Standalone", digest)
    assert len(name) <= naming.MAX_LABEL and DNS1123_LABEL.match(name), name
    # Canonical: the order of keys does not count, the values do.
    a = [{"name": "gpu", "exactly": {"count": 2, "deviceClassName": "g"}}]
    b = [{"exactly": {"deviceClassName": "g", "count": 2}, "name": "gpu"}]
    assert naming.claim_requests_hash(a) == naming.claim_requests_hash(b)
    a[0]["exactly"]["count"] = 4
    assert naming.claim_requests_hash(a) != naming.claim_requests_hash(b)
