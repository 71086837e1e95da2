"""InferenceClass: the hardware of a node pool (cluster-scoped, Modelplane's own kind).

A bring-your-own InferenceCluster (:mod:`function.composers.inferencecluster`) copies
the ``spec.devices`` of each of its pools' classes into ``status.gpuPools[].devices``,
which placement matches device selectors against. The class is declared in
``compositions/inferenceclass/definition.yaml``; this module checks the fields that are
copied, as declared there: ``spec`` an object; each of ``spec.devices`` an object with a
``name`` and a ``driver``, a ``count`` (default 1) from 1 to 64, and a ``claim``
(default DRA) ``DRA`` or ``Synthetic``. The API server enforces the same schema; the
function does not rely on it.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
)

from function.api.fields import WholeInt
from function.api.inferencecluster import CLAIMS
from function.core.errors import pydantic_errors, quoted
from function.scheduling.devices import INT64_LIMIT, Semver, decoded_quantity_problem

KIND = "InferenceClass"


class Device(BaseModel):
    """``spec.devices[]``: one kind of device a node of the class has."""

    model_config = ConfigDict(extra="allow")

    name: StrictStr = Field(min_length=1)
    driver: StrictStr = Field(min_length=1)
    count: WholeInt = Field(default=1, ge=1, le=64)


def check(name: str, spec: Any) -> None:
    """Check the ``spec`` (plain Python; None: no devices) of InferenceClass ``name``.

    Raises:
        SpecError: naming the class and the first wrong field
            (``InferenceClass h100-8x: spec.devices[0].count``), listing up to five.
    """
    if spec is None:
        return
    try:
        # The class's own check (parse_declared): a class its composer refuses never
        # reaches placement through a cluster's status (review 13c: a capacity "80 GB"
        # was copied, and every deployment selecting on it failed).
        DeclaredSpec.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors(f"{KIND} {name}: spec", e) from None


# ---- the whole spec, as the XRD declares its types (the InferenceClass's own check) ----


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")




class _Attribute(_Open):
    string: StrictStr | None = None
    version: StrictStr | None = None
    bool: StrictBool | None = None
    int: WholeInt | None = None

    @field_validator("version")
    @classmethod
    def _semver(cls, v: str | None) -> str | None:
        # DRA's version attribute is a semantic version (placement compares them); one
        # that is not would be read as a string and fail every version comparison.
        if v is not None:
            Semver.parse(v)
        return v

    @field_validator("int")
    @classmethod
    def _int64(cls, v: Any) -> Any:
        if v == INT64_LIMIT:  # INT64_MAX: a Struct's number (a double) rounds it to 2**63
            return INT64_LIMIT - 1
        if v is not None and not -INT64_LIMIT <= v < INT64_LIMIT:
            raise ValueError("must fit in 64 bits (the XRD's format: int64)")
        return v


class _Capacity(_Open):
    value: StrictStr

    @field_validator("value")
    @classmethod
    def _quantity(cls, v: str) -> str:
        # Placement reads a capacity as the API server decodes a ResourceSlice's
        # (trimmed, then resource.ParseQuantity); one that is not would be absent.
        problem = decoded_quantity_problem(v)
        if problem is not None:
            raise ValueError(
                f"must be a Kubernetes quantity such as 80Gi, 500m or 1e3, not {quoted(v)} "
                f"(Kubernetes' parser: {problem})"
            )
        return v


class _DeclaredDevice(Device):
    """A device as the XRD types it: what InferenceClusters copy (:class:`Device`, its
    bounds too) and the rest."""

    claim: StrictStr | None = None
    deviceClassName: StrictStr | None = None
    attributes: dict[str, _Attribute] | None = None
    capacity: dict[str, _Capacity] | None = None

    @field_validator("claim")
    @classmethod
    def _claim(cls, v: str | None) -> str | None:
        # The XRD's enum. Any other value was copied into clusters' status and read as
        # Synthetic: every replica there dropped its GPU claim (review 15a).
        if v is not None and v not in CLAIMS:
            raise ValueError(
                f"must be DRA (the pods claim the device through DRA) or Synthetic "
                f"(placement matches it, nothing claims it), got {quoted(v)}"
            )
        return v


class _Provisioning(_Open):
    provider: StrictStr
    gke: dict[str, Any] | None = None
    eks: dict[str, Any] | None = None
    aks: dict[str, Any] | None = None
    nebius: dict[str, Any] | None = None
    vultr: dict[str, Any] | None = None


class DeclaredSpec(_Open):
    """An InferenceClass's ``spec`` with the types and required fields its XRD declares
    (its enums, bounds and CEL rules are the API server's); unknown fields pass, as the
    API server prunes them."""

    description: StrictStr | None = None
    provisioning: _Provisioning | None = None
    devices: list[_DeclaredDevice]


def parse_declared(spec: dict[str, Any]) -> DeclaredSpec:
    """Check a class's whole ``spec`` as its XRD types it, its devices as :func:`check`
    does too (what InferenceClusters copy: :class:`Device`).

    Raises:
        SpecError: naming the first wrong field (``spec.devices[0].driver``), listing
            up to five.
    """
    try:
        return DeclaredSpec.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors("spec", e) from None
