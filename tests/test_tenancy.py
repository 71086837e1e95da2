"""What a tenant's pod spec may hold on the workload cluster's shared namespace
(``function.manifests.tenancy``): what Baseline and the shared namespace allow passes,
each refusal names its field. The kinds' own tests (``POD_ACCESS_FAULTS``) cover the
refusals where the tenant writes them."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.struct_pb2 import Struct

from function.core.errors import SpecError
from function.manifests.jobs import cronjob_problem, job_from_cronjob
from function.manifests.tenancy import check_pod_access
from function.naming import REMOTE_OWN_PREFIX, cache_pvc_name, cache_secret_name
from tests.support.backfill_sim import eval_cronjob
from tests.support.fixtures import POD_ACCESS_FAULTS, put_fault

F = "spec"


def _pod(**extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.8.5"}], **extra}


def _container(**extra: Any) -> dict[str, Any]:
    return _pod(containers=[{"name": "engine", "image": "x", **extra}])


ALLOWED = [
    ("a platform's Secret by name", _container(
        env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-read", "key": "t"}}}],
        envFrom=[{"configMapRef": {"name": "engine-tuning"}}])),
    ("a PVC of the platform's", _pod(volumes=[
        {"name": "d", "persistentVolumeClaim": {"claimName": "datasets"}}])),
    ("host namespaces false", _pod(hostNetwork=False, hostPID=False, hostIPC=False)),
    ("Baseline's capabilities", _container(securityContext={
        "capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL"]},
        "privileged": False, "procMount": "Default"})),
    ("port 0 on the host", _container(ports=[{"containerPort": 8000, "hostPort": 0}])),
    ("RuntimeDefault and Localhost profiles", _pod(securityContext={
        "seccompProfile": {"type": "RuntimeDefault"},
        "appArmorProfile": {"type": "Localhost", "localhostProfile": "p"},
        "seLinuxOptions": {"type": "container_t", "level": "s0:c1"},
        "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}]})),
    ("emptyDir and projected token", _pod(volumes=[
        {"name": "s", "emptyDir": {"medium": "Memory"}},
        {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}])),
    ("a ServiceAccount of the platform's", _pod(serviceAccountName="inference")),
    ("the sysctls Kubernetes 1.32 and 1.37 made safe", _pod(securityContext={"sysctls": [
        {"name": "net.ipv4.tcp_rmem", "value": "4096 87380 16777216"},
        {"name": "net.ipv4.tcp_notsent_lowat", "value": "16384"}]})),
    ("procMount Unmasked in a user namespace", _pod(hostUsers=False, containers=[
        {"name": "engine", "securityContext": {"procMount": "Unmasked"}}])),
    ("probes and hooks on the pod's own address", _container(
        readinessProbe={"httpGet": {"path": "/health", "port": 8000, "host": ""}},
        livenessProbe={"tcpSocket": {"port": 8000}},
        lifecycle={"preStop": {"httpGet": {"path": "/drain", "port": 8000}}})),
    ("an ephemeral volume cloned from a PVC of the platform's, or a snapshot", _pod(volumes=[
        {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "dataSource": {"kind": "PersistentVolumeClaim", "name": "datasets"},
            "dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io",
                              "kind": "VolumeSnapshot", "name": "modelcache-snap"}}}}}])),
    ("parts of the wrong type (the shape checks name them)", _pod(
        volumes={"x": 1}, securityContext="x", imagePullSecrets=[3])),
]  # fmt: skip


@pytest.mark.parametrize("pod", [pytest.param(p, id=i) for i, p in ALLOWED])
def test_what_baseline_and_the_shared_namespace_allow_passes(pod: dict[str, Any]) -> None:
    check_pod_access(
        pod,
        F,
        {
            "annotations": {"container.apparmor.security.beta.kubernetes.io/engine": "localhost/p"},
            "labels": {
                "app": "chat",
                "example.com/modelplane.ai": "x",
                "modelplane.ai": "y",
                "experiment.modelplane.ai/name": "z",
            },
        },
    )


REFUSED = [
    ("hostNetwork", _pod(hostNetwork=True), "spec.hostNetwork"),
    ("hostIPC", _pod(hostIPC=True), "spec.hostIPC"),
    ("an ephemeral container privileged",
     _pod(ephemeralContainers=[{"name": "d", "securityContext": {"privileged": True}}]),
     "spec.ephemeralContainers[0].securityContext.privileged"),
    ("ALL capabilities", _container(securityContext={"capabilities": {"add": ["ALL"]}}),
     "spec.containers[0].securityContext.capabilities.add[0]"),
    ("a Windows host process",
     _pod(securityContext={"windowsOptions": {"hostProcess": True}}),
     "spec.securityContext.windowsOptions.hostProcess"),
    ("AppArmor Unconfined", _container(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
     "spec.containers[0].securityContext.appArmorProfile.type"),
    ("an SELinux type", _pod(securityContext={"seLinuxOptions": {"type": "spc_t"}}),
     "spec.securityContext.seLinuxOptions.type"),
    ("an SELinux user", _container(securityContext={"seLinuxOptions": {"user": "system_u"}}),
     "spec.containers[0].securityContext.seLinuxOptions.user"),
    ("the function's Secret as an image pull secret",
     _pod(imagePullSecrets=[{"name": cache_secret_name("ml-team", "qwen")}]),
     "spec.imagePullSecrets[0].name"),
    ("the function's PVC in a projected Secret's place",
     _pod(volumes=[{"name": "p", "projected": {"sources": [
         {"secret": {"name": cache_pvc_name("ml-team", "qwen")}}]}}]),
     "spec.volumes[0].projected.sources[0].secret.name"),
    ("the function's Secret as a CSI node publish secret",
     _pod(volumes=[{"name": "c", "csi": {"driver": "x", "nodePublishSecretRef": {
         "name": cache_secret_name("ml-team", "qwen")}}}]),
     "spec.volumes[0].csi.nodePublishSecretRef.name"),
    ("the function's Secret for an RBD volume",
     _pod(volumes=[{"name": "r", "rbd": {"image": "i", "monitors": ["m"], "secretRef": {
         "name": cache_secret_name("ml-team", "qwen")}}}]),
     "spec.volumes[0].rbd.secretRef.name"),
    ("the function's Secret for an Azure file share",
     _pod(volumes=[{"name": "a", "azureFile": {"shareName": "s",
         "secretName": cache_secret_name("ml-team", "qwen")}}]),
     "spec.volumes[0].azureFile.secretName"),
    ("a readiness probe's host", _container(readinessProbe={"httpGet": {
        "path": "/", "port": 80, "host": "169.254.169.254"}}),
     "spec.containers[0].readinessProbe.httpGet.host"),
    ("an init container's startup probe host",
     _pod(initContainers=[{"name": "i", "startupProbe": {"tcpSocket": {
         "port": 10250, "host": "10.0.0.1"}}}]),
     "spec.initContainers[0].startupProbe.tcpSocket.host"),
    ("a preStop hook's host", _container(lifecycle={"preStop": {"httpGet": {
        "path": "/", "port": 80, "host": "kubernetes.default"}}}),
     "spec.containers[0].lifecycle.preStop.httpGet.host"),
    ("an ephemeral volume cloned from a cache PVC",
     _pod(volumes=[{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {
         "dataSource": {"kind": "PersistentVolumeClaim",
                        "name": cache_pvc_name("ml-team", "qwen")}}}}}]),
     "spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSource.name"),
    ("an ephemeral volume's dataSourceRef to a cache PVC",
     _pod(volumes=[{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {
         "dataSourceRef": {"apiGroup": "", "kind": "PersistentVolumeClaim",
                           "name": cache_pvc_name("ml-team", "qwen")}}}}}]),
     "spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSourceRef.name"),
    ("an existing ResourceClaim, the 1.30 way",
     _pod(resourceClaims=[{"name": "g", "source": {"resourceClaimName": "theirs"}}]),
     "spec.resourceClaims[0].source.resourceClaimName"),
    # A review (14a): the only claim templates in the shared namespace are the function's,
    # named after another tenant's replica by the public contract.
    ("a claim template", _pod(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "g"}]),
     "spec.resourceClaims[0].resourceClaimTemplateName"),
    ("a claim template, the 1.30 way",
     _pod(resourceClaims=[{"name": "g", "source": {"resourceClaimTemplateName": "theirs"}}]),
     "spec.resourceClaims[0].source.resourceClaimTemplateName"),
    ("procMount Unmasked on the host's users", _container(securityContext={
        "procMount": "Unmasked"}), "spec.containers[0].securityContext.procMount"),
    ("the deprecated serviceAccount", _pod(serviceAccount=f"{REMOTE_OWN_PREFIX}rbac-x"),
     "spec.serviceAccount"),
    ("a ConfigMap of the function's in env",
     _container(env=[{"name": "R", "valueFrom": {"configMapKeyRef": {
         "name": f"{REMOTE_OWN_PREFIX}result-x", "key": "k"}}}]),
     "spec.containers[0].env[0].valueFrom.configMapKeyRef.name"),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "field"), [pytest.param(p, f, id=i) for i, p, f in REFUSED])
def test_each_refusal_names_its_field(pod: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        check_pod_access(pod, F)
    assert err.value.field == field


def test_an_apparmor_annotation_other_than_runtime_default_or_localhost_is_refused() -> None:
    key = "container.apparmor.security.beta.kubernetes.io/engine"
    with pytest.raises(SpecError) as err:
        check_pod_access(_pod(), "spec.template.spec", {"annotations": {key: "unconfined"}})
    assert err.value.field == f"spec.template.metadata.annotations[{key}]"
    check_pod_access(_pod(), "spec.template.spec", {"annotations": {key: "runtime/default"}})


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [pytest.param(p, v, f, id=i) for i, p, v, f in POD_ACCESS_FAULTS],
)
def test_a_cronjob_with_it_builds_no_job(path: tuple[Any, ...], value: Any, field: str) -> None:
    cj = eval_cronjob()
    put_fault(cj["spec"]["jobTemplate"]["spec"]["template"], path, value)
    with pytest.raises(SpecError) as err:
        job_from_cronjob(cj, name="j", namespace="default", labels={})
    assert err.value.field == f"spec.jobTemplate.spec.{field}"
    assert cronjob_problem(_struct(cj)).startswith(f"spec.jobTemplate.spec.{field}: ")
    assert cronjob_problem(_struct(eval_cronjob())) == ""


def _struct(body: dict[str, Any]) -> Struct:
    out = Struct()
    out.update(body)
    return out
