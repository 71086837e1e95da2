"""The lifecycle harness refuses what the workload cluster's API server refuses on update
(review 20a F3): an immutable field rewritten in place is answered ``Synced=False`` with
the provider's error and the remote object keeps its manifest, so every lifecycle test
checks that the function never rewrites one."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.support import world
from tests.support.table import Case, table


def _rct(count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "w-standalone", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "g", "count": count}}]}}},
    }  # fmt: skip


def _pvc() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "modelcache-pvc-x"},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "efs-rwx",
                 "resources": {"requests": {"storage": "4Gi"}}},
    }  # fmt: skip


def _job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"backoffLimit": 3, "template": {"spec": {"containers": [{"name": "c"}]}},
                 "podFailurePolicy": {"rules": []}},
    }  # fmt: skip


def _deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}},
    }  # fmt: skip


def _rolebinding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "rb"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa"}],
    }


def _secret(immutable: bool) -> dict[str, Any]:
    out = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}}
    if immutable:
        out["immutable"] = True
    return out


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(m: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node = m
        for p in head:
            node = node[p]
        node[last] = value

    return edit


Edit = tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None]]

UPDATES: list[Case[Edit, str | None]] = [
    Case("claim template count", "resource.k8s.io/v1: a ResourceClaimTemplate's spec is "
         "immutable", (lambda: _rct(1), lambda m: m.update(_rct(2))),
         'ResourceClaimTemplate.resource.k8s.io "w-standalone" is invalid: spec: Invalid '
         'value: {"spec":{"devices":{"requests":[{"exactly":{"count":2,"deviceClassName":"g"},'
         '"name":"gpu"}]}}}: field is immutable'),
    Case("claim template labels", "metadata is not spec", (lambda: _rct(1),
         _set("metadata.labels", {"a": "b"})), None),
    Case("pvc storage class", "a PVC's spec but resources and volumeAttributesClassName",
         (_pvc, _set("spec.storageClassName", "fsx")),
         "spec: Forbidden: spec is immutable after creation except resources.requests"),
    Case("pvc grown", "a bound claim's request may grow",
         (_pvc, _set("spec.resources", {"requests": {"storage": "8Gi"}})), None),
    Case("job template", "a Job's pod template", (_job, _set("spec.template",
         {"spec": {"containers": [{"name": "c2"}]}})),
         'Job.batch "j" is invalid: spec.template: Invalid value: '),
    Case("job pod failure policy", "Kubernetes 1.35 ValidateJobSpecUpdate",
         (_job, _set("spec.podFailurePolicy", {"rules": [{"action": "FailJob"}]})),
         "spec.podFailurePolicy: Invalid value: "),
    Case("job backoff limit", "mutable", (_job, _set("spec.backoffLimit", 6)), None),
    Case("deployment selector", "apps/v1", (_deployment, _set("spec.selector",
         {"matchLabels": {"a": "c"}})), "spec.selector: Invalid value: "),
    Case("deployment image", "a template change rolls", (_deployment, _set("spec.template",
         {"spec": {"containers": [{"name": "c", "image": "i:2"}]}})), None),
    Case("rolebinding roleRef", "rbac", (_rolebinding, _set("roleRef.name", "r2")),
         "roleRef: Invalid value: "),
    Case("immutable secret", "immutable: true freezes data", (lambda: _secret(True),
         _set("data", {"k": "eA=="})), "data: Forbidden: field is immutable when"),
    Case("mutable secret", "by default data changes", (lambda: _secret(False),
         _set("data", {"k": "eA=="})), None),
]  # fmt: skip


def _object(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": "o", "namespace": "ns"},
        "spec": {"forProvider": {"manifest": manifest}},
    }


@table(UPDATES)
def test_an_update_is_applied_or_refused_as_the_api_server_does(case: Case[Edit, str | None]):
    make, edit = case.inputs
    before = world.observed_object(_object(make()))
    changed = make()
    edit(changed)
    after = world.observed_object(_object(changed), previous=before)
    msg = world.refusal(after)
    got = after["status"]["atProvider"]["manifest"]
    if case.want is None:
        assert msg is None
        assert {k: v for k, v in got.items() if k != "metadata"} == {
            k: v for k, v in changed.items() if k != "metadata"
        }
        return
    assert msg is not None and msg.startswith("update failed: cannot apply object: "), msg
    assert case.want in msg, msg
    # Refused: the remote object keeps what it had; the Object asks for the new one.
    assert got == before["status"]["atProvider"]["manifest"]
    assert after["spec"]["forProvider"]["manifest"] == changed


def test_an_object_that_may_not_update_keeps_its_remote_object_and_says_synced():
    """managementPolicies without Update: the provider sends nothing, refuses nothing."""
    before = world.observed_object(_object(_rct(1)))
    obj = _object(_rct(2))
    obj["spec"]["managementPolicies"] = ["Observe", "Create", "Delete"]
    after = world.observed_object(obj, previous=copy.deepcopy(before))
    assert world.refusal(after) is None
    assert after["status"]["atProvider"]["manifest"]["spec"] == _rct(1)["spec"]
