"""InferenceClass: the hardware of a node pool, a data-only XR.

An InferenceClass composes nothing: InferenceClusters read it (a bring-your-own cluster
copies its ``spec.devices`` into ``status.gpuPools[].devices``, which placement matches
device selectors against; :mod:`function.composers.inferencecluster`). Crossplane
reconciles every XR of an XRD through a Composition, and without one reports each class
``Synced=False`` ("cannot select Composition") and retries for ever; so the
Configuration ships one, and this composer checks the class where it is written:

- a ``spec`` of the wrong types or without the fields its XRD requires
  (:func:`function.api.inferenceclass.parse_declared`), or one the readers refuse
  (``spec.devices[].count`` not a whole number from 1 to 64: what
  :func:`function.api.inferenceclass.check` checks) is a fatal result naming the field,
  so the
  class shows ``Synced=False`` with it, and ``DevicesValid=False`` (reason
  ``InvalidSpec``) with the same message (the InferenceClusters that name it report
  ``ClassInvalid`` too);
- otherwise the XR is stated Ready (nothing to wait for), with condition
  ``DevicesValid`` naming the devices a node of the class has.

The provisioning blocks of Modelplane's InferenceClass are kept as given: this function
provisions nothing. Where Modelplane's own compositions are installed too, select one
with ``spec.crossplane.compositionSelector`` (this one is labelled
``modelplane.ai/function: function-modelplane``).
"""

from __future__ import annotations

from function.api import inferenceclass
from function.core.inputs import Inputs
from function.core.outcome import Outcome

CONDITION = "DevicesValid"
# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (CONDITION,)
# DevicesValid is the class's spec condition: a fatal result for an invalid spec sends it
# False, reason InvalidSpec, naming the field (function.edge.codec.keep_conditions), not
# the last call's True describing the devices before the edit (review 19b).
SPEC_CONDITION = CONDITION


def compose(inputs: Inputs) -> Outcome:
    """Check the class's ``spec`` and state it Ready (see the module docstring).

    Raises:
        SpecError: naming the first wrong field of ``spec.devices`` (a fatal result).
    """
    declared = inferenceclass.parse_declared(inputs.spec)  # inputs.spec: an object
    devices = declared.devices
    each = [f"{d.count}x {d.name} ({d.driver})" for d in devices[:8]]
    more = f" and {len(devices) - 8} more" if len(devices) > 8 else ""
    out = Outcome()
    out.condition(
        CONDITION,
        "True",
        "Valid",
        (f"a node has {', '.join(each)}{more}" if each else "no devices declared")
        + "; InferenceClusters copy them into status.gpuPools[].devices",
    )
    out.ready = True
    return out
