"""A required item whose ``metadata.namespace`` is present but not a string is not the
object asked for (review 15a, #6): it used to read as "no namespace" and pass as the
cluster-scoped object a requirement by name asks for. The API server never sends one;
a client that sends protobuf directly can."""

from __future__ import annotations

from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct

from benchmarks.scenarios import SCENARIOS
from function.core.inputs import admits, foreign_reason
from function.core.outcome import Requirement
from tests.support import harness as hh

CLUSTER_SCOPED = Requirement("modelplane.ai/v1alpha1", "InferenceCluster", match_name="c1")
NAMESPACED = Requirement(
    "modelplane.ai/v1alpha1", "ModelCache", match_name="c1", namespace="ml-team"
)
BY_LABELS = Requirement("modelplane.ai/v1alpha1", "InferenceCluster", match_labels=())


def _item(namespace: Any) -> Struct:
    s = Struct()
    meta: dict[str, Any] = {"name": "c1"}
    if namespace != "<absent>":
        meta["namespace"] = namespace
    kind = "InferenceCluster"
    s.update({"apiVersion": "modelplane.ai/v1alpha1", "kind": kind, "metadata": meta})
    return s


@pytest.mark.parametrize(
    ("asked", "namespace", "foreign"),
    [
        (CLUSTER_SCOPED, "<absent>", False),
        (CLUSTER_SCOPED, None, False),  # JSON null: no namespace
        (CLUSTER_SCOPED, "", False),
        (CLUSTER_SCOPED, "ml-team", True),
        (CLUSTER_SCOPED, 5, True),
        (CLUSTER_SCOPED, True, True),
        (CLUSTER_SCOPED, {"name": "ml-team"}, True),
        (CLUSTER_SCOPED, ["ml-team"], True),
        (NAMESPACED, "ml-team", False),
        (NAMESPACED, 5, True),
        (NAMESPACED, ["ml-team"], True),
        # a selection by labels alone spans namespaces, whatever the item says
        (BY_LABELS, 5, False),
        (BY_LABELS, "elsewhere", False),
    ],
)
def test_a_namespace_that_is_not_a_string_is_not_the_object_asked_for(
    asked: Requirement, namespace: Any, foreign: bool
) -> None:
    item = _item(namespace)
    if asked is NAMESPACED:
        item.fields["kind"].string_value = "ModelCache"
    why = foreign_reason(asked, item)
    assert (why is not None) == foreign, why
    if foreign:
        assert "namespace" in why
    # the fast check gives the same verdict, read from the fields or from the facts
    # memoized per (uid, resourceVersion)
    assert admits(asked)(item) is not foreign
    item.fields["metadata"].struct_value.update(
        {"uid": f"uid-{asked.kind}-{namespace!r}", "resourceVersion": f"v-{namespace!r}"}
    )
    assert admits(asked)(item) is not foreign


@pytest.mark.parametrize("kind", ["ModelReplica", "ModelCacheHydration"])
@pytest.mark.parametrize("namespace", [5.0, True, ["x"]])
def test_a_cluster_with_a_namespace_of_another_type_is_ignored_as_one_in_another_namespace(
    kind: str, namespace: Any
) -> None:
    """The cluster a replica or a hydration runs on, listed alone: a number namespace is
    ignored (the cluster is not found) exactly as a string one is."""
    steady = fnv1.RunFunctionRequest.FromString(SCENARIOS[kind](3)[1])

    def planted(value: Any, version: str) -> fnv1.RunFunctionResponse:
        req = fnv1.RunFunctionRequest()
        req.CopyFrom(steady)
        item = req.required_resources["cluster"].items[0].resource
        meta = item.fields["metadata"].struct_value
        meta.update({"namespace": value, "uid": f"uid-{version}", "resourceVersion": version})
        return hh.run(req)

    elsewhere = planted("elsewhere", "v-elsewhere")
    wrong_type = planted(namespace, f"v-{type(namespace).__name__}")
    assert hh.conditions(wrong_type) == hh.conditions(elsewhere)
    assert wrong_type.SerializeToString(deterministic=True) == elsewhere.SerializeToString(
        deterministic=True
    )
    assert hh.conditions(wrong_type) != hh.conditions(hh.run(steady))
