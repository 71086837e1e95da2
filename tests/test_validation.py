"""The validation helpers accept what the API server accepts and reject what it rejects.

Every validator other tests rely on gets a passing case and failing cases
here, so a validator that silently accepts everything cannot go unnoticed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.validation import (
    LWS_CRD,
    Schema,
    SchemaError,
    apply_defaults,
    cel_errors,
    openapi_to_jsonschema,
    validate_crd,
    validate_k8s,
    validate_manifest,
    validate_object,
    validate_xr,
    xr_cel_errors,
)

COMPOSITION_CRD = Schema("crossplane/apiextensions.crossplane.io_compositions.yaml")
XRD_CRD = Schema("crossplane/apiextensions.crossplane.io_compositeresourcedefinitions.yaml")


def _errors(fn, obj: Any, **kw: Any) -> list[str]:
    with pytest.raises(SchemaError) as exc:
        fn(obj, **kw)
    return exc.value.errors


# ---- Kubernetes built-ins -------------------------------------------------------


def job(**pod: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "download",
                "image": "xpkg.crossplane.io/modelplane/function-modelplane:v0.1.0",
                "command": ["python", "-m", "jobs.hydrate"],
                "env": [
                    {
                        "name": "HF_TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": "tok", "key": "HF_TOKEN"}},
                    }
                ],
                "volumeMounts": [{"name": "cache", "mountPath": "/mnt/models"}],
            }
        ],
        "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "c"}}],
    }
    spec.update(pod)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "modelcache-dl-1a2b3", "labels": {"modelplane.ai/cache": "qwen"}},
        "spec": {"backoffLimit": 3, "activeDeadlineSeconds": 3600, "template": {"spec": spec}},
    }


def test_a_valid_job_passes():
    out = validate_k8s(job())
    assert out["kind"] == "Job"


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda j: j["spec"].update(bogus=1), "bogus"),
        (lambda j: j["spec"].update(backoffLimit="three"), "spec.backoffLimit"),
        (lambda j: j["metadata"].update(name="Bad_Name"), "metadata.name"),
        (lambda j: j["metadata"].update(name="a" * 64), "metadata.name"),
        (lambda j: j["metadata"]["labels"].update(x="v" * 64), "metadata.labels[x]"),
        (lambda j: j["metadata"]["labels"].update({"bad key!": "v"}), "qualified name"),
        (
            lambda j: j["spec"]["template"]["spec"].update(restartPolicy="Always"),
            "restartPolicy",
        ),
        (
            lambda j: j["spec"]["template"]["spec"].update(volumes=[]),
            "no volume named 'cache'",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0]["env"].append(
                {"name": "HF_TOKEN", "value": "x"}
            ),
            "duplicate variable",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0].update(name="Engine"),
            "DNS-1123",
        ),
        (lambda j: j.update(apiVersion="batch/v9"), "no Kubernetes"),
    ],
)
def test_an_invalid_job_is_rejected(mutate, expected):
    j = job()
    mutate(j)
    errs = _errors(validate_k8s, j)
    assert any(expected in e for e in errs), errs


def test_service_names_are_dns1035_labels():
    svc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "0-starts-with-digit"},
        "spec": {"ports": [{"port": 8000}]},
    }
    assert any("metadata.name" in e for e in _errors(validate_k8s, svc))
    svc["metadata"]["name"] = "engine-0"
    validate_k8s(svc)


def test_dra_kinds_are_validated_at_the_release_that_has_them():
    rct: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpus"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            }
        },
    }
    validate_k8s(rct)
    rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    assert _errors(validate_k8s, rct)


# ---- CRDs, Objects, LWS ---------------------------------------------------------


def remote(manifest: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": "modelcache-ml-team-qwen-pvc", "namespace": "ml-team"},
        "spec": {
            "forProvider": {"manifest": manifest},
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "gpu-a"},
            **spec,
        },
    }


def token_secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "modelcache-ml-team-qwen-auth", "namespace": "modelplane"},
        "type": "Opaque",
    }


def test_an_object_with_a_valid_manifest_and_patches_from_passes():
    obj = remote(
        token_secret(),
        references=[
            {
                "patchesFrom": {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "name": "hf-token",
                    "namespace": "ml-team",
                    "fieldPath": "data.HF_TOKEN",
                },
                "toFieldPath": "data.HF_TOKEN",
            }
        ],
        readiness={"policy": "DeriveFromCelQuery", "celQuery": "object.status.phase == 'Bound'"},
    )
    out = validate_object(obj)
    # The CRD's defaults are applied (managementPolicies defaults to ["*"]).
    assert out["spec"]["managementPolicies"] == ["*"]


def test_an_object_is_rejected_for_its_own_fields_and_for_its_manifest():
    bad_object = remote(token_secret(), bogus=True)
    assert any("bogus" in e for e in _errors(validate_object, bad_object))

    bad_manifest = remote(job(restartPolicy="Sometimes"))
    errs = _errors(validate_object, bad_manifest)
    assert all(e.startswith("spec.forProvider.manifest: ") for e in errs), errs

    no_manifest = remote(token_secret())
    del no_manifest["spec"]["forProvider"]["manifest"]
    assert _errors(validate_object, no_manifest)


def test_object_cel_rules_run():
    # The Object CRD requires a celQuery when the readiness policy is DeriveFromCelQuery.
    obj = remote(token_secret(), readiness={"policy": "DeriveFromCelQuery"})
    errs = _errors(validate_object, obj)
    assert any("spec.readiness" in e for e in errs), errs


def lws(size: int = 3) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.8.5"}]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "chat-0"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": copy.deepcopy(pod),
                "workerTemplate": copy.deepcopy(pod),
            },
        },
    }


def test_leaderworkersets_are_validated_against_the_lws_crd():
    validate_crd(lws(), LWS_CRD)
    validate_object(remote(lws()))
    bad = lws()
    bad["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["bogus"] = 1
    errs = _errors(validate_object, remote(bad))
    assert any("bogus" in e for e in errs), errs
    no_volume = lws()
    leader = no_volume["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    leader["containers"][0]["volumeMounts"] = [{"name": "cache", "mountPath": "/mnt/models"}]
    errs = _errors(validate_object, remote(no_volume))
    assert any("leaderTemplate.spec.containers[0].volumeMounts[0].name" in e for e in errs), errs
    wrong_type = lws()
    wrong_type["spec"]["leaderWorkerTemplate"]["size"] = "three"
    assert _errors(validate_manifest, wrong_type)


def composition(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "compositeTypeRef": {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCache"},
        "mode": "Pipeline",
        "pipeline": [{"step": "compose", "functionRef": {"name": "function-modelplane"}}],
    }
    base.update(spec)
    return {
        "apiVersion": "apiextensions.crossplane.io/v1",
        "kind": "Composition",
        "metadata": {"name": "modelcaches.modelplane.ai"},
        "spec": base,
    }


def test_compositions_are_validated_with_schema_and_cel():
    validate_crd(composition(), COMPOSITION_CRD)
    assert _errors(validate_crd, composition(extra=1), crd_path=COMPOSITION_CRD)
    no_fn = composition(pipeline=[{"step": "compose"}])
    assert any("functionRef" in e for e in _errors(validate_crd, no_fn, crd_path=COMPOSITION_CRD))
    cluster_scoped = composition()
    cluster_scoped["metadata"]["namespace"] = "ml-team"
    assert any("cluster-scoped" in e for e in _errors(validate_manifest, cluster_scoped))
    wrong_kind = composition()
    wrong_kind["kind"] = "CompositionRevision"
    assert _errors(validate_crd, wrong_kind, crd_path=COMPOSITION_CRD)


def test_crd_transition_rules_run_only_with_an_old_object():
    xrd: dict[str, Any] = {
        "apiVersion": "apiextensions.crossplane.io/v2",
        "kind": "CompositeResourceDefinition",
        "metadata": {"name": "things.example.org"},
        "spec": {
            "group": "example.org",
            "names": {"kind": "Thing", "plural": "things"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "referenceable": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    validate_crd(xrd, XRD_CRD)
    renamed = copy.deepcopy(xrd)
    renamed["spec"]["group"] = "other.org"
    errs = _errors(validate_crd, renamed, crd_path=XRD_CRD, old=xrd)
    assert any("immutable" in e for e in errs), errs
    upper = copy.deepcopy(xrd)
    upper["spec"]["names"]["plural"] = "Things"
    assert any("lowercase" in e for e in _errors(validate_crd, upper, crd_path=XRD_CRD))
    claims = copy.deepcopy(xrd)
    claims["spec"]["claimNames"] = {"kind": "T", "plural": "ts"}
    assert any("Claims" in e for e in _errors(validate_crd, claims, crd_path=XRD_CRD))


# ---- Our XRs ----------------------------------------------------------------------


def model_cache(spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "source": "HuggingFace",
        "huggingFace": {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "sizeGiB": 2},
        "clusterSelector": {"matchLabels": {"modelplane.ai/gpu": "h100"}},
    }
    if spec is not None:
        base = spec
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": "qwen-cache", "namespace": "ml-team"},
        "spec": base,
        **extra,
    }


def test_a_model_cache_gets_its_defaults():
    mc = model_cache()
    mc["spec"]["huggingFace"]["authSecret"] = {"name": "hf-token"}
    out = validate_xr(mc)
    assert out["spec"]["huggingFace"]["revision"] == "main"
    assert out["spec"]["huggingFace"]["authSecret"]["key"] == "HF_TOKEN"


def test_a_model_cache_without_cluster_selector_is_rejected_by_cel_and_schema():
    spec = model_cache()["spec"]
    del spec["clusterSelector"]
    cel = xr_cel_errors("ModelCache", spec)
    assert len(cel) == 1 and cel[0].startswith("spec: spec.clusterSelector is required"), cel
    errs = _errors(validate_xr, model_cache(spec))
    assert any("'clusterSelector' is a required property" in e for e in errs), errs
    assert any("spec.clusterSelector is required" in e for e in errs), errs


def test_an_empty_cluster_selector_selects_everything_and_is_admitted():
    spec = model_cache()["spec"]
    spec["clusterSelector"] = {}
    assert xr_cel_errors("ModelCache", spec) == []
    validate_xr(model_cache(spec))


@pytest.mark.parametrize(
    "expression, expected",
    [
        ({"key": "region", "operator": "Near", "values": ["x"]}, "operator"),
        ({"key": "region", "operator": "In", "values": []}, "non-empty"),
        ({"key": "region", "operator": "NotIn"}, "non-empty"),
        ({"key": "drain", "operator": "Exists", "values": ["x"]}, "must be empty"),
        ({"operator": "Exists"}, "'key' is a required property"),
    ],
)
def test_malformed_match_expressions_are_rejected(expression, expected):
    spec = model_cache()["spec"]
    spec["clusterSelector"]["matchExpressions"] = [expression]
    errs = _errors(validate_xr, model_cache(spec))
    assert any(expected in e for e in errs), errs


def test_well_formed_match_expressions_pass():
    spec = model_cache()["spec"]
    spec["clusterSelector"]["matchExpressions"] = [
        {"key": "region", "operator": "In", "values": ["us-east", "us-west"]},
        {"key": "tier", "operator": "NotIn", "values": ["dev"]},
        {"key": "drain", "operator": "DoesNotExist"},
    ]
    assert xr_cel_errors("ModelCache", spec) == []
    validate_xr(model_cache(spec))


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda s: s.update(source="S3"), "spec.source"),
        (lambda s: s.pop("huggingFace"), "spec.huggingFace is required"),
        (lambda s: s["huggingFace"].update(repo="not a repo"), "spec.huggingFace.repo"),
        (lambda s: s["huggingFace"].update(sizeGiB=0), "spec.huggingFace.sizeGiB"),
        (lambda s: s["huggingFace"].pop("sizeGiB"), "'sizeGiB' is a required property"),
        (lambda s: s["huggingFace"].update(authSecret={"key": "k"}), "'name' is a required"),
        (lambda s: s["huggingFace"].update(token="hf_xxx"), "token"),
        (lambda s: s.update(flashLoader={"tmpfsSizeLimit": "lots"}), "tmpfsSizeLimit"),
        (lambda s: s.update(flashLoader={"concurrency": 0}), "concurrency"),
    ],
)
def test_an_invalid_model_cache_spec_is_rejected(mutate, expected):
    spec = model_cache()["spec"]
    mutate(spec)
    errs = _errors(validate_xr, model_cache(spec))
    assert any(expected in e for e in errs), errs


def test_model_cache_status_is_validated():
    ok = model_cache(
        status={
            "failed": [{"name": "gpu-b", "message": "BackoffLimitExceeded"}],
            "summary": {"ready": "1/1", "total": 1, "phases": {"Ready": 1, "Failed": 0}},
            "conditions": [
                {
                    "type": "ArtifactReady",
                    "status": "True",
                    "reason": "Ready",
                    "message": "1/1 clusters ready",
                    "lastTransitionTime": "2026-01-05T09:00:00Z",
                }
            ],
        }
    )
    validate_xr(ok)
    bad_phase = copy.deepcopy(ok)
    bad_phase["status"]["summary"]["phases"]["Ready"] = -1
    assert any("phases" in e for e in _errors(validate_xr, bad_phase))
    unnamed = copy.deepcopy(ok)
    del unnamed["status"]["failed"][0]["name"]
    assert any("name" in e for e in _errors(validate_xr, unnamed))
    bad_condition = copy.deepcopy(ok)
    del bad_condition["status"]["conditions"][0]["lastTransitionTime"]
    assert any("lastTransitionTime" in e for e in _errors(validate_xr, bad_condition))
    bad_summary = copy.deepcopy(ok)
    bad_summary["status"]["summary"]["ready"] = "one of one"
    assert _errors(validate_xr, bad_summary)


def test_crossplane_machinery_fields_are_allowed_on_xrs():
    mc = model_cache()
    mc["spec"]["crossplane"] = {
        "compositionRef": {"name": "modelcaches.modelplane.ai"},
        "resourceRefs": [
            {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCacheHydration", "name": "x"}
        ],
    }
    validate_xr(mc)
    mc["spec"]["crossplane"]["resourceRefs"][0]["namespace"] = "other"
    assert _errors(validate_xr, mc)  # namespaced XRs cannot reference other namespaces


def hydration(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "clusterName": "gpu-a",
        "cacheName": "qwen-cache",
        "source": "HuggingFace",
        "huggingFace": {
            "repo": "Qwen/Qwen2.5-0.5B-Instruct",
            "revision": "main",
            "sizeGiB": 2.0,
            "authSecret": {"name": "hf-token", "key": "HF_TOKEN"},
        },
    }
    base.update(spec)
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCacheHydration",
        "metadata": {"name": "modelcache-ml-team-qwen-cache-gpu-a-1b2c3"},
        "spec": base,
    }


def test_a_hydration_is_pinned_to_its_cluster():
    old = hydration()
    validate_xr(old)
    validate_xr(hydration(), old=old)
    errs = _errors(validate_xr, hydration(clusterName="gpu-b"), old=old)
    assert errs == ["spec.clusterName: spec.clusterName is immutable."]
    assert xr_cel_errors("ModelCacheHydration", hydration()["spec"]) == []


def test_a_hydration_carries_only_a_reference_to_the_token():
    h = hydration()
    h["spec"]["huggingFace"]["authSecret"]["value"] = "hf_fake"
    assert any("value" in e for e in _errors(validate_xr, h))


@pytest.mark.parametrize("phase, ok", [("Pending", True), ("Failed", True), ("Unknown", False)])
def test_hydration_phases(phase, ok):
    h = hydration()
    h["status"] = {"phase": phase, "message": "m", "source": {"repo": "a/b", "revision": "main"}}
    if ok:
        validate_xr(h)
    else:
        assert _errors(validate_xr, h)


def test_inference_clusters_are_cluster_scoped_and_follow_modelplane():
    ic: dict[str, Any] = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "gpu-a", "labels": {"tier": "prod"}},
        "spec": {
            "cluster": {"source": "Existing", "existing": {"secretRef": {"name": "kc"}}},
            "taints": [{"key": "maintenance", "effect": "NoSchedule"}],
            "nodePools": [{"name": "h100", "className": "h100-8x"}],
        },
        "status": {
            "providerConfigRef": {"name": "gpu-a"},
            "cache": {"storageClassName": "rwx"},
            "gateway": {"address": "203.0.113.10"},
            "gpuPools": [
                {
                    "name": "h100",
                    "nodes": 2,
                    "devices": [
                        {
                            "name": "gpu",
                            "driver": "gpu.nvidia.com",
                            "count": 8,
                            "attributes": {"productName": {"string": "H100"}},
                            "capacity": {"memory": {"value": "80Gi"}},
                        }
                    ],
                }
            ],
        },
    }
    out = validate_xr(ic)
    assert out["spec"]["cluster"]["existing"]["secretRef"]["key"] == "kubeconfig"
    assert out["spec"]["nodePools"][0]["nodeCount"] == 1
    namespaced = copy.deepcopy(ic)
    namespaced["metadata"]["namespace"] = "ml-team"
    assert any("cluster-scoped" in e for e in _errors(validate_xr, namespaced))
    gke = copy.deepcopy(ic)
    gke["spec"]["cluster"] = {"source": "GKE"}
    assert any("spec.cluster.gke is required" in e for e in _errors(validate_xr, gke))
    reserved = copy.deepcopy(ic)
    reserved["spec"]["placement"] = {"metadata": {"labels": {"modelplane.ai/x": "y"}}}
    assert any("reserved" in e for e in _errors(validate_xr, reserved))


def test_unknown_kinds_and_versions_are_rejected():
    assert _errors(validate_xr, {**model_cache(), "kind": "ModelCacheX"})
    assert _errors(validate_xr, {**model_cache(), "apiVersion": "modelplane.ai/v1"})
    with pytest.raises(SchemaError):
        validate_manifest({"apiVersion": "example.org/v1", "kind": "Widget"})


# ---- Translation of structural schemas ----------------------------------------------


def test_structural_schema_semantics():
    schema = {
        "type": "object",
        "properties": {
            "closed": {"type": "object", "properties": {"a": {"type": "string"}}},
            "open": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"a": {"type": "string"}},
            },
            "anything": {"x-kubernetes-preserve-unknown-fields": True},
            "port": {"x-kubernetes-int-or-string": True},
            "maybe": {"type": "string", "nullable": True},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "d": {"type": "string", "default": "x"},
        },
    }
    import jsonschema

    v = jsonschema.Draft7Validator(openapi_to_jsonschema(schema))
    ok = {
        "closed": {"a": "1"},
        "open": {"a": "1", "b": 2},
        "anything": [1, {"x": None}],
        "port": "http",
        "maybe": None,
        "map": {"k": 1},
    }
    assert list(v.iter_errors(ok)) == []
    assert not v.is_valid({"closed": {"b": 1}})
    assert not v.is_valid({"open": {"a": 1}})
    assert not v.is_valid({"port": 1.5})
    assert v.is_valid({"port": 8080})
    assert not v.is_valid({"map": {"k": "v"}})
    assert not v.is_valid({"unknown": 1})
    assert apply_defaults({}, schema) == {"d": "x"}
    assert apply_defaults({"d": "y"}, schema) == {"d": "y"}


def test_cel_escaping_and_evaluation_errors():
    schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.__namespace__ == 'a'", "message": "namespace must be a"},
            {"rule": "self.missing == 1", "message": "never reached"},
        ],
        "properties": {"namespace": {"type": "string"}, "missing": {"type": "integer"}},
    }
    errs = cel_errors(schema, {"namespace": "b"})
    assert errs[0] == "<root>: namespace must be a"
    assert "could not be evaluated" in errs[1]
    assert cel_errors(schema, {"namespace": "a", "missing": 1}) == []
    broken = {"x-kubernetes-validations": [{"rule": "self ==", "message": "m"}]}
    assert "does not compile" in cel_errors(broken, {})[0]


def test_timestamps_must_be_rfc3339():
    h = hydration()
    h["status"] = {"phase": "Pending", "pendingSince": "2026-01-05T09:00:00Z"}
    validate_xr(h)
    for bad in ("yesterday", "2026-01-05 09:00:00", "2026-13-05T09:00:00Z"):
        h["status"]["pendingSince"] = bad
        assert any("pendingSince" in e for e in _errors(validate_xr, h)), bad


def test_map_lists_reject_duplicate_keys():
    shard = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelCacheShard",
        "metadata": {"name": "qwen-cache-0", "namespace": "ml-team"},
        "spec": {
            "cacheName": "qwen-cache",
            "shard": 0,
            "huggingFace": {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "sizeGiB": 2},
        },
        "status": {
            "clusters": [
                {"name": "gpu-a", "phase": "Ready"},
                {"name": "gpu-a", "phase": "Failed"},
            ]
        },
    }
    errs = _errors(validate_xr, shard)
    assert any(e.startswith("status.clusters[1]: duplicate") for e in errs), errs
    twice = model_cache(
        status={
            "conditions": [
                {
                    "type": "A",
                    "status": "True",
                    "reason": "R",
                    "lastTransitionTime": "2026-01-05T09:00:00Z",
                },
                {
                    "type": "A",
                    "status": "False",
                    "reason": "R",
                    "lastTransitionTime": "2026-01-05T09:00:00Z",
                },
            ]
        }
    )
    assert any("duplicate" in e for e in _errors(validate_xr, twice))


# ---- messages say what the validator said, not pydantic's wrapper (review 13c) -------

def _example(kind: str) -> dict:
    from function.render import load_yaml
    from tests.support.crossplane import ROOT

    (doc,) = load_yaml([str(ROOT / "examples" / kind / "xr.yaml")])
    return doc


@pytest.mark.parametrize(
    ("kind", "path", "value", "field"),
    [
        ("modeldeployment", ("spec", "replicas"), 1.5, "spec.replicas"),
        ("modelcache", ("spec", "huggingFace", "sizeGiB"), 2.5, "spec.huggingFace.sizeGiB"),
        ("inferenceclass", ("spec", "devices", 0, "count"), 1.5, "spec.devices[0].count"),
    ],
)
def test_a_fatal_result_carries_no_pydantic_prefix(kind, path, value, field) -> None:
    from tests.support import harness as hh

    xr = _example(kind)
    node = xr
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    (msg,) = hh.fatal(hh.run(hh.request(xr)))
    assert field in msg, msg
    assert "Value error" not in msg and "Assertion failed" not in msg, msg


def test_a_cluster_scoped_xr_is_named_without_a_slash() -> None:
    """Found by review 13c: a deadline's fatal result named ``InferenceClass /c1``."""
    from crossplane.function.proto.v1 import run_function_pb2 as fnv1

    from function.edge.codec import xr_label
    from function.edge.pool import fatal_for
    from tests.support import harness as hh

    assert xr_label("InferenceClass", "", "c1") == "InferenceClass c1"
    assert xr_label("ModelCache", "ml-team", "q") == "ModelCache ml-team/q"
    xr = _example("inferenceclass")
    rsp = fnv1.RunFunctionResponse.FromString(
        fatal_for(hh.request(xr).SerializeToString(), "past its deadline")
    )
    (msg,) = [r.message for r in rsp.results]
    assert msg == f"InferenceClass {xr['metadata']['name']}: past its deadline", msg


# ---- review 20b F2: a pod template's lists with hundreds of thousands of items --------


def _container_with(field: str, value: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "engine", "image": "vllm", field: value}]}}


_HUGE = 400_000


@pytest.mark.parametrize(
    ("template", "field"),
    [
        (_container_with("resources", {"claims": [{}] * _HUGE}),
         "spec.containers[0].resources.claims"),
        (_container_with("resources", {"claims": [1] * _HUGE}),
         "spec.containers[0].resources.claims"),
        (_container_with("env", [1] * _HUGE), "spec.containers[0].env[0]"),
        (_container_with("ports", [{}] * _HUGE), "spec.containers[0].ports[0].containerPort"),
        (_container_with("args", [1] * _HUGE), "spec.containers[0].args[0]"),
        (_container_with("command", [1] * _HUGE), "spec.containers[0].command[0]"),
        (_container_with("volumeMounts", [{}] * _HUGE),
         "spec.containers[0].volumeMounts[0].mountPath"),
        ({"spec": {"containers": [1] * _HUGE}}, "spec.containers[0]"),
        ({"spec": {"containers": [{"name": "e"}], "initContainers": [1] * _HUGE}},
         "spec.initContainers[0]"),
        ({"spec": {"containers": [{"name": "e"}], "volumes": [{}] * _HUGE}},
         "spec.volumes[0].name"),
        ({"spec": {"containers": [{"name": "e"}], "tolerations": [1] * _HUGE}},
         "spec.tolerations[0]"),
        ({"spec": {"containers": [{"name": "e"}], "resourceClaims": [{}] * _HUGE}},
         "spec.resourceClaims"),
    ],
)  # fmt: skip
def test_a_huge_wrong_list_is_one_error(template: dict[str, Any], field: str) -> None:
    """pydantic stops at a list's first wrong item (or at its bound), so 400,000 wrong
    items make a handful of errors, not 400,000 (counted, not timed: each one cost
    seconds of CPU and hundreds of MiB); the message names the smallest path."""
    from pydantic import ValidationError

    from function.api.modelreplica import PodTemplate
    from function.core.errors import pydantic_errors

    with pytest.raises(ValidationError) as e:
        PodTemplate.model_validate(template)
    assert e.value.error_count() <= 2, e.value.error_count()
    err = pydantic_errors("t", e.value)
    assert err.field.startswith(f"t.{field}"), str(err)


@pytest.mark.parametrize("count", [1, 4, 5, 6, 50, 1000])
def test_the_smallest_errors_are_the_sorted_ones(count: int) -> None:
    """pydantic_errors keeps the few smallest errors (a heap), and gives the message a
    full sort gives, whatever order the map's entries came in."""
    import random

    from pydantic import BaseModel, StrictStr, ValidationError

    from function.core.errors import _messages, _order, pydantic_errors

    class M(BaseModel):
        labels: dict[str, StrictStr]
        items: list[StrictStr | int]

    keys = [f"k{i}" for i in range(count)]
    for seed in range(3):
        random.Random(seed).shuffle(keys)
        data = {"labels": {k: 1 for k in keys}, "items": [1.5] * count}
        with pytest.raises(ValidationError) as e:
            M.model_validate(data)
        want, first = _messages(sorted(e.value.errors(include_url=False), key=_order), "s", None)
        got = pydantic_errors("s", e.value)
        assert (got.field, str(got)) == (first, "; ".join(want))
