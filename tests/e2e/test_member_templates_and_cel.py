"""Session 10's trial findings through Crossplane's own engine.

- A member pod template that every replica would refuse (``resources.claims`` of the
  wrong type) is refused by the ModelDeployment itself: ``crossplane render`` exits with
  the function's fatal result naming the field, so Crossplane applies nothing and every
  replica stays as it was (before, each replica failed with an internal error).
- A device selector written with Kubernetes' CEL libraries (``lowerAscii``, ``split``,
  ``isSemver``, ``sets.contains``, cross-type comparisons) places and keeps replicas as
  the plain selector does (before, "unknown function": nothing could be placed).
"""

from __future__ import annotations

import copy

import pytest

from tests.e2e.test_modeldeployment_lifecycle import Deployment, fleet_resources

CLAIMS = "spec.template.spec.engines[0].members[0].template.spec.containers[0].resources.claims"

LIBRARY_SELECTORS = [
    'device.attributes["gpu.nvidia.com"].architecture.lowerAscii() == "hopper"',
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.major() >= 9 && '
    'isSemver("v9.0", true)',
    'sets.contains(["Hopper", "Blackwell"], [device.attributes["gpu.nvidia.com"]'
    '.architecture]) && device.driver.split(".")[0] == "gpu"',
    'device.capacity["gpu.nvidia.com"].memory.asApproximateFloat() > 40.5e9 && '
    "type(device.driver) == string",
]


def _steady(render) -> Deployment:
    d = Deployment(render)
    d.required = fleet_resources(hydrating=False)
    d.step()
    d.step()
    assert d.dep.reconcile().is_ready()
    return d


def test_a_pod_template_every_replica_would_refuse_is_refused_by_the_deployment(render):
    d = _steady(render)
    xr = copy.deepcopy(d.dep.xr)
    container = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"][
        "containers"
    ][0]
    container["resources"] = {"claims": "gpu"}
    out = render(xr, observed=list(d.dep.observed.values()), required=d.required)
    assert out.exit_code != 0, out.stdout
    assert CLAIMS in out.stderr and "internal error" not in out.stderr, out.stderr


@pytest.mark.parametrize("selector", LIBRARY_SELECTORS, ids=range(len(LIBRARY_SELECTORS)))
def test_a_selector_of_kubernetes_cel_libraries_places_and_keeps_replicas(render, selector):
    d = _steady(render)
    before = set(d.dep.observed)
    member = d.dep.xr["spec"]["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"] = [{"cel": selector}]
    out = d.dep.reconcile()
    assert out.deleted(d.dep.observed.values()) == set()
    assert d.condition("ReplicasScheduled")["status"] == "True", d.condition("ReplicasScheduled")
    assert before <= set(out.composed)
    assert out.is_ready()
