"""BYO InferenceCluster: the status placement reads, from node pools and classes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from function import API_VERSION
from function.composers.inferencecluster import gpu_pools
from tests.support import harness as h
from tests.support.modelplane_examples_paths import KIND_LOCAL_CPU
from tests.support.validation import ROOT, load_documents, validate_manifest, validate_xr

DOCS = load_documents(KIND_LOCAL_CPU)
CLASSES = [d for d in DOCS if d["kind"] == "InferenceClass"]
CLUSTER = next(d for d in DOCS if d["kind"] == "InferenceCluster")


def cluster_xr(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None):
    body = copy.deepcopy(CLUSTER)
    if spec is not None:
        body["spec"] = spec
    body["metadata"] = {**body["metadata"], "uid": "uid-ic"}
    if status is not None:
        body["status"] = status
    return body


def test_gpu_pools_rule() -> None:
    classes = {c["metadata"]["name"]: c for c in CLASSES}
    pools, missing = gpu_pools(
        [
            {"name": "a", "className": "fake-a100", "nodeCount": 3, "maxNodeCount": 5},
            {"name": "b", "className": "fake-l4"},
            {"name": "c", "className": "nope", "nodeCount": 2},
        ],
        classes,
    )
    assert missing == ["nope"]
    assert [(p["name"], p["nodes"]) for p in pools] == [("a", 5), ("b", 1)]
    assert pools[0]["devices"] == [
        {
            "claim": "DRA",
            "count": 1,
            "name": "gpu",
            "driver": "gpu.example.com",
            "deviceClassName": "gpu.example.com",
            "capacity": {"memory": {"value": "40Gi"}},
        }
    ]


def test_requires_each_class_and_keeps_status_until_resolved() -> None:
    last = {"gpuPools": [{"name": "old", "nodes": 1}]}
    rsp = h.run(h.request(cluster_xr(status=last)))
    req = h.requirements(rsp)
    assert req == {
        "class-fake-a100": {
            "apiVersion": API_VERSION,
            "kind": "InferenceClass",
            "matchName": "fake-a100",
        },
        "class-fake-l4": {
            "apiVersion": API_VERSION,
            "kind": "InferenceClass",
            "matchName": "fake-l4",
        },
    }
    assert h.status(rsp)["gpuPools"] == last["gpuPools"]
    assert h.conditions(rsp)["PoolsResolved"]["status"] == "Unknown"


def test_status_from_pools_and_classes_over_grpc(grpc_function: h.GrpcFunction) -> None:
    xr = cluster_xr()
    validate_xr(xr)
    rsp, calls = grpc_function.drive(xr, h.World(CLASSES))
    assert calls == 2
    st = h.status(rsp)
    assert [(p["name"], p["nodes"]) for p in st["gpuPools"]] == [("fake-l4", 1), ("fake-a100", 1)]
    pc = h.desired(rsp)["provider-config"]
    assert st["providerConfigRef"] == {
        "name": pc["metadata"]["name"],
        "kind": "ClusterProviderConfig",
    }
    assert pc["spec"]["credentials"] == {
        "source": "Secret",
        "secretRef": {
            "namespace": "modelplane-system",
            "name": "mp-fleet-kubeconfig",
            "key": "kubeconfig",
        },
    }
    validate_manifest(pc)
    assert h.conditions(rsp)["PoolsResolved"] == {
        "status": "True",
        "reason": "Resolved",
        "message": "2 node pools resolved (2 nodes)",
    }
    # Not ready until the ProviderConfig exists; then ready.
    assert h.xr_ready(rsp) == "READY_FALSE"
    rsp, _ = grpc_function.drive(xr, h.World(CLASSES), {"provider-config": pc})
    assert h.xr_ready(rsp) == "READY_TRUE"
    assert h.desired_ready(rsp)["provider-config"] == "READY_TRUE"


def test_missing_class_is_named_and_its_pool_left_out() -> None:
    rsp, _ = h.drive(h.run, cluster_xr(), None, h.World(CLASSES[:1]))
    c = h.conditions(rsp)["PoolsResolved"]
    assert (c["status"], c["reason"]) == ("False", "ClassNotFound")
    assert "fake-a100" in c["message"] and "1 of 2 node pools" in c["message"]
    assert [p["name"] for p in h.status(rsp)["gpuPools"]] == ["fake-l4"]
    assert h.xr_ready(rsp) == "READY_FALSE"


def test_identity_and_storage_class() -> None:
    spec = copy.deepcopy(CLUSTER["spec"])
    spec["cluster"]["existing"]["identitySecretRef"] = {
        "name": "gcp-sa",
        "type": "GoogleApplicationCredentials",
    }
    spec["cluster"]["existing"]["cache"] = {"storageClassName": "filestore-rwx"}
    rsp, _ = h.drive(h.run, cluster_xr(spec), None, h.World(CLASSES))
    pc = h.desired(rsp)["provider-config"]
    assert pc["spec"]["identity"] == {
        "source": "Secret",
        "type": "GoogleApplicationCredentials",
        "secretRef": {"namespace": "modelplane-system", "name": "gcp-sa", "key": "private_key"},
    }
    validate_manifest(pc)
    assert h.status(rsp)["cache"] == {"storageClassName": "filestore-rwx"}


# provider-kubernetes v1.3.1 pkg/kube/client/client.go, restForProviderConfig: the
# (identity type, identity source) pairs its switch builds a REST config for; every other
# pair returns "<source> is not supported as identity source for identity type <type>"
# or "unknown identity type", and each Object using the provider config fails to connect.
PROVIDER_ACCEPTS = {
    ("GoogleApplicationCredentials", "InjectedIdentity"),
    ("GoogleApplicationCredentials", "Secret"),
    ("AzureServicePrincipalCredentials", "Secret"),
    ("AzureWorkloadIdentityCredentials", "Secret"),
    ("UpboundTokens", "Secret"),
    ("AWSWebIdentityCredentials", "InjectedIdentity"),
    ("NebiusServiceAccountCredentials", "Secret"),
}
# Every identity type the InferenceCluster XRD's enum allows, and what the function does
# with it: compose it read from the Secret identitySecretRef names, or refuse it (the
# provider reads AWSWebIdentityCredentials only from its own pod's injected identity,
# which identitySecretRef, a Secret with a required name, cannot express).
IDENTITY_TYPES = {
    "GoogleApplicationCredentials": "composed",
    "AWSWebIdentityCredentials": "refused",
    "NebiusServiceAccountCredentials": "composed",
}


def _xrd_identity_types() -> list[str]:
    xrd = next(
        d
        for d in load_documents(ROOT / "compositions" / "inferencecluster" / "definition.yaml")
        if d["kind"] == "CompositeResourceDefinition"
    )
    props = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    existing = props["spec"]["properties"]["cluster"]["properties"]["existing"]
    ident = existing["properties"]["identitySecretRef"]["properties"]["type"]
    return list(ident["enum"])


def test_every_identity_type_of_the_xrd_is_decided() -> None:
    assert sorted(_xrd_identity_types()) == sorted(IDENTITY_TYPES)


@pytest.mark.parametrize(("kind", "outcome"), sorted(IDENTITY_TYPES.items()))
def test_identity_types_compose_only_what_provider_kubernetes_accepts(
    kind: str, outcome: str
) -> None:
    """Review 19d F2: each type the XRD allows is composed as a provider config
    provider-kubernetes accepts, or refused naming the field (the provider config and the
    XR's readiness kept); never composed as one every Object then fails to connect with."""
    good, _ = h.drive(h.run, cluster_xr(), None, h.World(CLASSES))
    pc = h.desired(good)["provider-config"]
    last = h.status(good)
    ready = {"type": "Ready", "status": "True", "reason": "Available"}
    spec = _with(
        ("cluster", "existing", "identitySecretRef"), {"name": "cloud-identity", "type": kind}
    )
    xr = cluster_xr(spec, status={**last, "conditions": [*last.get("conditions", []), ready]})
    rsp, _ = h.drive(h.run, xr, {"provider-config": pc}, h.World(CLASSES))
    got = h.desired(rsp)["provider-config"]
    ident = got["spec"].get("identity")
    c = h.conditions(rsp)["PoolsResolved"]
    if outcome == "composed":
        assert (ident["type"], ident["source"]) in PROVIDER_ACCEPTS, ident
        assert ident == {
            "source": "Secret",
            "type": kind,
            "secretRef": {
                "namespace": "modelplane-system",
                "name": "cloud-identity",
                "key": "private_key",
            },
        }
        validate_manifest(got)
        assert c["reason"] == "Resolved", c
    else:
        assert got == pc, "the provider config composed before is kept as it was"
        assert (c["status"], c["reason"]) == ("False", "InvalidSpec"), c
        assert c["message"].startswith("spec.cluster.existing.identitySecretRef.type:"), c
        assert kind in c["message"], c
        assert h.xr_ready(rsp) == "READY_TRUE"


def test_other_sources_are_not_served() -> None:
    spec = {"cluster": {"source": "GKE", "gke": {"region": "us-central1"}}}
    rsp = h.run(h.request(cluster_xr(spec)))
    assert h.desired(rsp) == {}
    assert h.conditions(rsp)["PoolsResolved"]["reason"] == "SourceNotServed"
    # Nothing composed: unless the XR is explicitly not ready, Crossplane reads it Ready.
    assert h.xr_ready(rsp) == "READY_FALSE"


def test_composed_status_drives_placement() -> None:
    """The BYO composer's output is what the deployment places against."""
    rsp, _ = h.drive(h.run, cluster_xr(), None, h.World(CLASSES))
    cluster = cluster_xr(
        status={
            **h.status(rsp),
            "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
        }
    )
    dep = next(d for d in DOCS if d["kind"] == "ModelDeployment")
    out, _ = h.drive(h.run, dep, None, h.World([cluster]))
    reps = [b for b in h.desired(out).values() if b["kind"] == "ModelReplica"]
    assert [
        (r["spec"]["clusterName"], r["spec"]["engines"][0]["members"][0]["pool"]) for r in reps
    ] == [("mp-fleet", "fake-a100")]


# Issue 13: bad input keeps the ClusterProviderConfig (replicas and hydrations use it).
def _without(path: tuple[str, ...]) -> dict[str, Any]:
    spec = copy.deepcopy(CLUSTER["spec"])
    node = spec
    for k in path[:-1]:
        node = node[k]
    node.pop(path[-1])
    return spec


def _with(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(CLUSTER["spec"])
    node = spec
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return spec


BAD_INPUT = [
    ("source missing", _without(("cluster", "source")), "spec.cluster.source", "got nothing"),
    (
        "source misspelt",
        _with(("cluster", "source"), "existing"),
        "spec.cluster.source",
        "'existing'",
    ),
    (
        "cluster not an object",
        _with(("cluster",), "Existing"),
        "spec.cluster",
        "expected an object {source: Existing",
    ),
    (
        "kubeconfig Secret name not a string",
        _with(("cluster", "existing", "secretRef", "name"), 5),
        "spec.cluster.existing.secretRef.name",
        "expected a string",
    ),
    (
        "kubeconfig Secret not named",
        _without(("cluster", "existing", "secretRef")),
        "spec.cluster.existing.secretRef.name",
        "{secretRef: {name: <Secret>",
    ),
    (
        "node count not a number",
        _with(("nodePools", 0, "nodeCount"), "three"),
        "spec.nodePools[0].nodeCount",
        "must be an integer",
    ),
    (
        "pool names repeated",
        _with(("nodePools", 1, "name"), "fake-l4"),
        "spec.nodePools",
        "pool names are unique",
    ),
    (
        "gateway not an object",
        _with(("gateway",), "gw.example.com"),
        "spec.gateway",
        "expected an object",
    ),
    # Review 19d F2: the XRD's enum allows it, provider-kubernetes refuses it from a Secret.
    (
        "identity type provider-kubernetes reads from no Secret",
        _with(
            ("cluster", "existing", "identitySecretRef"),
            {"name": "eks-irsa", "type": "AWSWebIdentityCredentials"},
        ),
        "spec.cluster.existing.identitySecretRef.type",
        "write GoogleApplicationCredentials or NebiusServiceAccountCredentials",
    ),
]


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", ""), ("nodeCount", 2**60), ("maxNodeCount", 2**62)],
)
def test_values_the_xrd_allows_are_not_refused(field: str, value: Any) -> None:
    """An empty pool name (the XRD sets no minLength) and int64 counts are valid."""
    rsp, _ = h.drive(
        h.run, cluster_xr(_with(("nodePools", 0, field), value)), None, h.World(CLASSES)
    )
    assert h.conditions(rsp)["PoolsResolved"]["reason"] == "Resolved", h.conditions(rsp)


def test_a_source_switched_away_from_existing_keeps_the_provider_config() -> None:
    """Another source on this composition composes nothing new, and deletes nothing:
    replicas and hydrations use the ProviderConfig composed while it was Existing."""
    good, _ = h.drive(h.run, cluster_xr(), None, h.World(CLASSES))
    pc = h.desired(good)["provider-config"]
    spec = {"cluster": {"source": "GKE", "gke": {"region": "us-central1"}}}
    rsp = h.run(
        h.request(cluster_xr(spec, status=h.status(good)), observed={"provider-config": pc})
    )
    assert h.desired(rsp)["provider-config"] == pc
    assert h.conditions(rsp)["PoolsResolved"]["reason"] == "SourceNotServed"
    assert h.xr_ready(rsp) == "READY_FALSE"


@pytest.mark.parametrize("was_ready", [True, False], ids=["was-ready", "was-not-ready"])
@pytest.mark.parametrize("transport", ["in-process", "grpc"])
@pytest.mark.parametrize(
    ("case", "spec", "field", "hint"), BAD_INPUT, ids=[c[0] for c in BAD_INPUT]
)
def test_invalid_source_keeps_the_provider_config(
    grpc_function: h.GrpcFunction,
    transport: str,
    was_ready: bool,
    case: str,
    spec: Any,
    field: str,
    hint: str,
) -> None:
    good, _ = grpc_function.drive(cluster_xr(), h.World(CLASSES))
    pc = h.desired(good)["provider-config"]
    last = h.status(good)
    # The Ready condition Crossplane set from the last reconcile.
    ready = {"type": "Ready", "status": "True" if was_ready else "False", "reason": "Available"}
    xr = cluster_xr(spec, status={**last, "conditions": [*last.get("conditions", []), ready]})
    if transport == "grpc":
        rsp, _ = grpc_function.drive(xr, h.World(CLASSES), {"provider-config": pc})
    else:
        rsp, _ = h.drive(h.run, xr, {"provider-config": pc}, h.World(CLASSES))
    assert h.desired(rsp)["provider-config"] == pc, case
    st = h.status(rsp)
    assert st["providerConfigRef"] == last["providerConfigRef"]
    assert st["gpuPools"] == last["gpuPools"]
    c = h.conditions(rsp)["PoolsResolved"]
    assert (c["status"], c["reason"]) == ("False", "InvalidSpec")
    assert c["message"].startswith(field + ":") and hint in c["message"], c["message"]
    assert not h.fatal(rsp)
    # Readiness as it was: a typo neither takes a working cluster out of placement nor
    # puts one in that was out (the kept ProviderConfig is ready as observed).
    assert h.desired_ready(rsp)["provider-config"] == "READY_TRUE"
    assert h.xr_ready(rsp) == ("READY_TRUE" if was_ready else "READY_FALSE")


# What the class's own composer refuses (review 13c: the cluster copied these, and
# every deployment selecting on the device failed with InvalidDeviceSelector).
BROKEN_CLASSES = [
    ("count-zero", ("count",), 0, "spec.devices[0].count"),
    ("capacity-not-a-quantity", ("capacity", "memory", "value"), "80 GB",
     "spec.devices[0].capacity"),
    ("version-not-semver", ("attributes", "cuda", "version"), "9.0", "spec.devices[0].attributes"),
    # review 15a: copied, and every replica on the cluster read the device as Synthetic
    ("claim-not-known", ("claim",), "Dra", "spec.devices[0].claim"),
]  # fmt: skip


@pytest.mark.parametrize("was_ready", [True, False], ids=["was-ready", "was-not-ready"])
@pytest.mark.parametrize(
    ("path", "value", "field"), [b[1:] for b in BROKEN_CLASSES], ids=[b[0] for b in BROKEN_CLASSES]
)
def test_a_malformed_class_is_named_and_keeps_what_exists(
    was_ready: bool, path: tuple[str, ...], value: Any, field: str
) -> None:
    """An InferenceClass a pool names whose devices are not what its CRD declares:
    reason ClassInvalid, naming the class and the field; the ProviderConfig, the last
    status and the XR's readiness stay as they were."""
    good, _ = h.drive(h.run, cluster_xr(), None, h.World(CLASSES))
    pc = h.desired(good)["provider-config"]
    last = h.status(good)
    ready = {"type": "Ready", "status": "True" if was_ready else "False", "reason": "Available"}
    xr = cluster_xr(status={**last, "conditions": [*last.get("conditions", []), ready]})
    broken = copy.deepcopy(CLASSES)
    node = broken[0]["spec"]["devices"][0]
    for p in path[:-1]:
        node = node.setdefault(p, {})
    node[path[-1]] = value
    name = broken[0]["metadata"]["name"]
    # The class's own composer refuses it the same way.
    assert field in h.fatal(h.run(h.request(broken[0])))[0]
    rsp, _ = h.drive(h.run, xr, {"provider-config": pc}, h.World(broken))
    c = h.conditions(rsp)["PoolsResolved"]
    assert (c["status"], c["reason"]) == ("False", "ClassInvalid"), c
    assert c["message"].startswith(f"InferenceClass {name}: {field}"), c
    assert h.desired(rsp)["provider-config"] == pc
    assert h.status(rsp)["gpuPools"] == last["gpuPools"]
    assert h.xr_ready(rsp) == ("READY_TRUE" if was_ready else "READY_FALSE")
    assert not h.fatal(rsp)


def test_a_warning_is_emitted_once_per_change_not_per_reconcile() -> None:
    """Found by review 13c: ClassNotFound, InvalidSpec and ClassInvalid warned on every
    reconcile. Now a Warning goes out when PoolsResolved changes to it, once."""
    broken = copy.deepcopy(CLASSES)
    broken[0]["spec"]["devices"][0]["count"] = 0
    xr = cluster_xr()
    for world, reason in ((broken, "ClassInvalid"), (CLASSES[1:], "ClassNotFound")):
        warned = []
        for _ in range(3):
            rsp, _ = h.drive(h.run, xr, None, h.World(world))
            assert h.conditions(rsp)["PoolsResolved"]["reason"] == reason
            warned.append([m for s, m in h.results(rsp) if s == "Warning"])
            conds = [{"type": t, **c} for t, c in h.conditions(rsp).items()]
            xr = cluster_xr(status={**h.status(rsp), "conditions": conds})
        assert len(warned[0]) == 1 and warned[1:] == [[], []], (reason, warned)
