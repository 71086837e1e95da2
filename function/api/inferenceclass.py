"""InferenceClass: the hardware of a node pool (cluster-scoped, Modelplane's own kind).

A bring-your-own InferenceCluster (:mod:`function.composers.inferencecluster`) copies
the ``spec.devices`` of each of its pools' classes into ``status.gpuPools[].devices``,
which placement matches device selectors against. The class is declared in
``compositions/inferenceclass/definition.yaml``; this module checks the fields that are
copied, as declared there: ``spec`` an object; each of ``spec.devices`` an object with a
``name`` and a ``driver``, and a ``count`` (default 1) from 1 to 64. The API server
enforces the same schema; the function does not rely on it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from function.api.fields import WholeInt
from function.core.errors import pydantic_errors

KIND = "InferenceClass"


class Device(BaseModel):
    """``spec.devices[]``: one kind of device a node of the class has."""

    model_config = ConfigDict(extra="allow")

    name: StrictStr = Field(min_length=1)
    driver: StrictStr = Field(min_length=1)
    count: WholeInt = Field(default=1, ge=1, le=64)


class InferenceClassSpec(BaseModel):
    """The fields of an InferenceClass's ``spec`` that a cluster's status copies."""

    model_config = ConfigDict(extra="allow")

    devices: list[Device] = Field(default_factory=list)


def check(name: str, spec: Any) -> None:
    """Check the ``spec`` (plain Python; None: no devices) of InferenceClass ``name``.

    Raises:
        SpecError: naming the class and the first wrong field
            (``InferenceClass h100-8x: spec.devices[0].count``), listing up to five.
    """
    if spec is None:
        return
    try:
        InferenceClassSpec.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors(f"{KIND} {name}: spec", e) from None
