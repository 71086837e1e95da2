"""InferenceClass: a data-only XR checked where it is written (issue found by a trial:
with no Composition, Crossplane reported every class Synced=False and retried for ever).

The composer composes nothing, states the XR Ready with ``DevicesValid``, and refuses a
spec of the wrong types, or one the InferenceClusters that copy its devices would
refuse, with a fatal result naming the field.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from function.render import load_yaml
from tests.support.crossplane import ROOT
from tests.support.harness import conditions, desired, fatal, request, run

EXAMPLE = load_yaml([str(ROOT / "examples" / "inferenceclass" / "xr.yaml")])[0]


def _class(change: Any = None) -> dict[str, Any]:
    xr = copy.deepcopy(EXAMPLE)
    if change is not None:
        change(xr["spec"])
    return xr


def test_a_valid_class_is_ready_and_composes_nothing() -> None:
    rsp = run(request(_class()))
    assert not fatal(rsp) and not desired(rsp)
    assert rsp.desired.composite.ready == 1  # READY_TRUE
    c = conditions(rsp)["DevicesValid"]
    assert c["status"] == "True" and "8x gpu (gpu.nvidia.com)" in c["message"], c



def test_an_int_attribute_of_int64_max_is_valid() -> None:
    """Found by review 15e: INT64_MAX (a common "unlimited") reaches the function as the
    double 2**63 (a Struct's numbers are doubles) and was refused as not fitting 64
    bits; it reads as INT64_MAX. One past it (1e19) is still refused."""
    ok = run(request(_class(lambda s: s["devices"][0]["attributes"].update(
        maxBatch={"int": 9223372036854775807})))) # fmt: skip
    assert not fatal(ok), fatal(ok)
    bad = run(request(_class(lambda s: s["devices"][0]["attributes"].update(
        maxBatch={"int": 1e19}))))  # fmt: skip
    assert fatal(bad) and "attributes.maxBatch" in fatal(bad)[0], fatal(bad)

BAD = [
    ("no devices", lambda s: s.pop("devices"), "spec.devices"),
    ("a device without a driver", lambda s: s["devices"][0].pop("driver"),
     "spec.devices[0].driver"),
    ("a count of zero", lambda s: s["devices"][0].update(count=0), "spec.devices[0].count"),
    ("a count that is a string", lambda s: s["devices"][0].update(count="8"),
     "spec.devices[0].count"),
    ("an attribute that is not an object", lambda s: s["devices"][0]["attributes"].update(
        architecture="Hopper"), "spec.devices[0].attributes.architecture"),
    ("a capacity without a value", lambda s: s["devices"][0]["capacity"].update(memory={}),
     "spec.devices[0].capacity.memory.value"),
    ("provisioning without a provider", lambda s: s.update(provisioning={"gke": {}}),
     "spec.provisioning.provider"),
    # A review: what placement cannot read was reported Valid (a selector on it then
    # failed, blaming the deployment's own CEL).
    ("a capacity that is no quantity", lambda s: s["devices"][0]["capacity"].update(
        memory={"value": "lots"}), "spec.devices[0].capacity.memory.value"),
    ("a version that is no semantic version", lambda s: s["devices"][0]["attributes"].update(
        cudaComputeCapability={"version": "9.0"}),
     "spec.devices[0].attributes.cudaComputeCapability.version"),
    ("an int past 64 bits", lambda s: s["devices"][0]["attributes"].update(
        cores={"int": 1e30}), "spec.devices[0].attributes.cores.int"),
    # Review 15a: a claim the XRD's enum does not hold was Valid, copied into clusters,
    # and read as Synthetic by every replica there (which dropped its GPU claim).
    ("a claim that is not DRA or Synthetic", lambda s: s["devices"][0].update(claim="Dra"),
     "spec.devices[0].claim: must be DRA"),
    ("an empty claim", lambda s: s["devices"][0].update(claim=""), "spec.devices[0].claim"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "field"), [pytest.param(c, f, id=i) for i, c, f in BAD])
def test_a_class_its_readers_would_refuse_is_fatal_naming_the_field(change, field) -> None:
    rsp = run(request(_class(change)))
    (msg,) = fatal(rsp)
    assert field in msg and "internal error" not in msg, msg
    assert not desired(rsp)
