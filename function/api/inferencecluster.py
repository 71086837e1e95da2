"""InferenceCluster status: the one reader (and the field names its writer uses).

An InferenceCluster's status is written by Modelplane's own compositions for the
cloud sources and by :mod:`function.composers.inferencecluster` for ``source:
Existing`` (the writer of record in this package); it is declared in
``compositions/inferencecluster/definition.yaml``. Every other kind reads it only
through this module:

- ``status.providerConfigRef {kind, name}``: the provider-kubernetes provider config
  composed resources on the cluster are applied with; ``kind`` defaults to
  ``ClusterProviderConfig`` (:func:`provider_config`, :func:`provider_config_ref`).
- ``status.cache.storageClassName``: the RWX storage class of cache PVCs
  (:func:`cache_storage_class`).
- ``status.gpuPools[] {name, nodes, devices[], nodeSelector}``: the GPU pools
  placement fills (:func:`gpu_pools_value`, :func:`pools_by_name`).
- ``status.gateway``: how clients reach the cluster (echoed, not read here).
- condition ``Ready`` (set by Crossplane from the composed resources' readiness,
  https://docs.crossplane.io/latest/composition/compositions/): placement and
  hydration use only Ready clusters (:func:`is_ready`).

Readers take the XR as a protobuf ``Struct`` (or a plain dict where noted) and never
raise on malformed status: what is missing or of the wrong type reads as absent.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from google.protobuf.struct_pb2 import ListValue, Struct, Value
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from function.api.fields import WholeInt
from function.core import structs, versioned
from function.core.errors import pydantic_errors, quoted

KIND = "InferenceCluster"

# status field names (the writer, function.composers.inferencecluster, uses these too).
STATUS_GPU_POOLS = "gpuPools"
STATUS_PROVIDER_CONFIG_REF = "providerConfigRef"
STATUS_CACHE = "cache"
STATUS_STORAGE_CLASS = "storageClassName"
STATUS_GATEWAY = "gateway"
# The condition placement and hydration require (Crossplane's own readiness condition).
READY = "Ready"
# ``status.providerConfigRef.kind`` when the cluster does not say.
DEFAULT_PROVIDER_CONFIG_KIND = "ClusterProviderConfig"
# ``status.gpuPools[].devices[].claim`` (copied from the InferenceClass's
# ``spec.devices[].claim``, the same enum in both XRDs): a device the pods claim through
# DRA, or one placement matches and nothing claims. Absent: DRA (the XRDs' default).
CLAIM_DRA = "DRA"
CLAIM_SYNTHETIC = "Synthetic"
CLAIMS = (CLAIM_DRA, CLAIM_SYNTHETIC)


def is_ready(cluster: Struct | None) -> bool:
    """True when ``cluster`` has condition ``Ready`` with status ``True``.

    Hot path (placement reads every cluster of a fleet): scans ``status.conditions``
    through the field maps; the first ``Ready`` entry decides.
    """
    return _ready_in(structs.fields_of(cluster, "status"))


def _ready_in(status: Any) -> bool:
    """The Ready rule over a status field map: the first ``Ready`` condition decides.

    Reading ``list_value``, ``struct_value`` or ``string_value`` of a ``Value`` that holds
    another kind yields the empty default, so a malformed status reads as not Ready.
    """
    v = status.get("conditions")
    if v is None:
        return False
    for cv in v.list_value.values:
        c = cv.struct_value.fields
        t = c.get("type")
        if t is not None and t.string_value == READY:
            s = c.get("status")
            return s is not None and s.string_value == "True"
    return False


def provider_config(cluster: Any) -> tuple[str, str] | None:
    """``(kind, name)`` of ``status.providerConfigRef``, or None when it names none.

    Args:
        cluster: The InferenceCluster (Struct or dict).

    Returns:
        A hashable key (memoized builders take it); ``kind`` is
        :data:`DEFAULT_PROVIDER_CONFIG_KIND` when not reported.
    """
    name = structs.get_str(cluster, "status", STATUS_PROVIDER_CONFIG_REF, "name")
    if not name:
        return None
    kind = structs.get_str(cluster, "status", STATUS_PROVIDER_CONFIG_REF, "kind")
    return kind or DEFAULT_PROVIDER_CONFIG_KIND, name


def provider_config_ref(cluster: Any) -> dict[str, str] | None:
    """:func:`provider_config` as the ``providerConfigRef`` of a provider-kubernetes Object.

    Returns:
        ``{"kind": ..., "name": ...}`` or None when the cluster reports none yet.
    """
    pc = provider_config(cluster)
    return None if pc is None else {"kind": pc[0], "name": pc[1]}


def cache_storage_class(cluster: Any) -> str:
    """``status.cache.storageClassName`` (``""`` when not reported)."""
    return structs.get_str(cluster, "status", STATUS_CACHE, STATUS_STORAGE_CLASS)


def gpu_pools_value(cluster: Struct | None) -> Value | None:
    """The raw ``status.gpuPools`` Value (None when absent), for readers that key on it."""
    v: Value | None = structs.fields_of(cluster, "status").get(STATUS_GPU_POOLS)
    return v


def pools_by_name(gpu_pools: Any) -> dict[str, Any]:
    """``status.gpuPools[]`` entries (a ListValue or list) by ``name``.

    Entries without a name, and anything that is not a list, are ignored.
    """
    out: dict[str, Any] = {}
    for p in list(gpu_pools) if isinstance(gpu_pools, (ListValue, list)) else ():
        n = structs.get_str(p, "name")
        if n:
            out[n] = p
    return out


def unknown_claim(gpu_pools: Any, pools: Container[str] | None = None) -> str | None:
    """Where ``status.gpuPools`` (a ListValue or list) holds a device ``claim`` that is
    not one of :data:`CLAIMS` (absent reads as DRA), or None when none does.

    Such a pool is not known: its devices are neither claimable nor Synthetic for sure,
    so readers keep what exists on it as they do while ``status.gpuPools`` is absent.

    Args:
        gpu_pools: The ``status.gpuPools`` value.
        pools: Only the entries of these names (None: every entry).

    Returns:
        ``status.gpuPools[1].devices[0].claim is 'Dra', not DRA or Synthetic``, naming
        the first such device.
    """
    if not isinstance(gpu_pools, (ListValue, list)):
        return None
    for pi, p in enumerate(gpu_pools):
        if pools is not None and structs.get_str(p, "name") not in pools:
            continue
        for di, d in enumerate(structs.items(p, "devices")):
            claim = structs.get(d, "claim")
            if claim is None or claim in CLAIMS:
                continue
            got = repr(claim) if isinstance(claim, str) else f"a {type(claim).__name__}"
            return (
                f"status.{STATUS_GPU_POOLS}[{pi}].devices[{di}].claim is {got}, not "
                f"{' or '.join(CLAIMS)}"
            )
    return None


def cache_host_problem(cluster: Struct) -> str | None:
    """Why ``cluster`` cannot host a model cache, or None when it can.

    A cache needs a Ready cluster with a provider config and a cache storage class.

    Hot path (the ModelCache reads every cluster of its footprint on every call): the
    same verdict as :func:`is_ready`, :func:`provider_config` and
    :func:`cache_storage_class`, read through the field maps with ``status`` looked up
    once. Reading ``struct_value``, ``list_value`` or ``string_value`` of a ``Value``
    that holds another kind yields the empty default, so a malformed status reads as
    absent without a type check per step.
    """
    v = cluster.fields.get("status")
    if v is None:
        return "cluster is not Ready"
    status = v.struct_value.fields
    if not _ready_in(status):
        return "cluster is not Ready"
    v = status.get(STATUS_PROVIDER_CONFIG_REF)
    name = v.struct_value.fields.get("name") if v is not None else None
    if name is None or not name.string_value:
        return "cluster reports no status.providerConfigRef"
    v = status.get(STATUS_CACHE)
    sc = v.struct_value.fields.get(STATUS_STORAGE_CLASS) if v is not None else None
    if sc is None or not sc.string_value:
        return "cluster reports no status.cache.storageClassName"
    return None


@versioned.reading(65536, weight=11)
def host_problem(cluster: Struct) -> str:
    """:func:`cache_host_problem` of ``cluster`` as a string ("" when it can host a
    cache), read once per ``(uid, resourceVersion)`` (:mod:`function.core.versioned`).

    Pass the version when it is known: ``host_problem(cluster, version)``.
    """
    return cache_host_problem(cluster) or ""


# ``spec.cluster.source`` of a bring-your-own cluster (the others are Modelplane's own).
SOURCE_EXISTING = "Existing"
# The namespace of every Secret an Existing cluster's spec references, and the key of
# ``spec.cluster.existing.secretRef`` when the spec leaves it out (the XRD's default).
SECRET_NAMESPACE = "modelplane-system"
DEFAULT_KUBECONFIG_KEY = "kubeconfig"
# The field two InferenceClusters share when they reach one workload cluster.
KUBECONFIG_FIELD = "spec.cluster.existing.secretRef"


@versioned.reading(65536, weight=6)
def kubeconfig_secret(cluster: Struct) -> tuple[str, str] | None:
    """``(name, key)`` of the kubeconfig Secret (in :data:`SECRET_NAMESPACE`) an
    ``Existing`` cluster reaches its workload cluster through, or None.

    Read from ``spec.cluster.existing.secretRef {name, key}``; ``key`` defaults to
    :data:`DEFAULT_KUBECONFIG_KEY`. None for any other source and for a spec that does
    not name a Secret (or names it with a value of the wrong type: the cluster's own
    composer reports that, :func:`parse_existing`). Two clusters with the same pair
    reach the same workload cluster, where remote object names do not include the
    InferenceCluster (README, "One InferenceCluster per workload cluster").

    Hot path (the ModelCache reads every cluster it is sent): read through the field
    maps, once per ``(uid, resourceVersion)`` (pass the version when it is known).
    """
    c = _map(_map(cluster.fields, "spec"), "cluster")
    ref = _map(_map(c, "existing"), "secretRef")
    src, name, key = c.get("source"), ref.get("name"), ref.get("key")
    kind = key.WhichOneof("kind") if key is not None else None
    if (
        src is None
        or src.string_value != SOURCE_EXISTING
        or name is None
        or not name.string_value
        or kind not in (None, "null_value", "string_value")  # the composer refuses it
    ):
        return None
    # An empty key reads as the default, as the composer reads it
    # (function.composers.inferencecluster._provider_config).
    return name.string_value, (key.string_value if key is not None else "") or (
        DEFAULT_KUBECONFIG_KEY
    )


def _map(fields: Any, key: str) -> Any:
    """The field map of the object at ``fields[key]`` (empty when absent or not one)."""
    v = fields.get(key)
    return v.struct_value.fields if v is not None else _NO_FIELDS


_NO_FIELDS = Struct().fields


# ---- spec of a bring-your-own cluster (read by function.composers.inferencecluster) --
#
# The fields of ``spec`` the composer reads when ``spec.cluster.source`` is ``Existing``,
# as compositions/inferencecluster/definition.yaml declares them. Unknown fields are
# kept (the XRD declares more than the composer reads); a value of the wrong type is an
# error naming its field, never coerced (pydantic strict types, :mod:`function.api.fields`).


class _Declared(BaseModel):
    """A part of the spec: the fields read here are checked, the others kept."""

    model_config = ConfigDict(extra="allow")


class SecretRef(_Declared):
    """``spec.cluster.existing.secretRef``: the kubeconfig Secret (in modelplane-system)."""

    name: StrictStr = Field(min_length=1)
    key: StrictStr | None = None


# ``spec.cluster.existing.identitySecretRef``: the key read when the spec leaves it out,
# and the identity types the composer composes as a provider-kubernetes identity read
# from that Secret (``{source: Secret, type, secretRef}``), the first the default (the
# XRD's). These are the types of the XRD's enum that provider-kubernetes v1.3.1 accepts
# from a Secret (pkg/kube/client/client.go, ``restForProviderConfig``). The enum's
# third, ``AWSWebIdentityCredentials``, it accepts only with ``source: InjectedIdentity``
# (the provider pod's own IRSA role, no Secret), which a Secret reference with a required
# name cannot express: that type is refused.
DEFAULT_IDENTITY_KEY = "private_key"
IDENTITY_TYPES = ("GoogleApplicationCredentials", "NebiusServiceAccountCredentials")


class IdentitySecretRef(_Declared):
    """``spec.cluster.existing.identitySecretRef``: cloud credentials for IAM access.

    ``type`` is one of :data:`IDENTITY_TYPES` (absent: the first); any other is an error
    naming ``spec.cluster.existing.identitySecretRef.type`` and what to write.
    """

    name: StrictStr = Field(min_length=1)
    key: StrictStr | None = None
    type: StrictStr | None = None

    @field_validator("type")
    @classmethod
    def _read_from_a_secret(cls, kind: str | None) -> str | None:
        """Only a type provider-kubernetes builds an identity for from a Secret."""
        if kind is None or kind in IDENTITY_TYPES:
            return kind
        raise ValueError(
            f"got {quoted(kind)}: provider-kubernetes reads an identity from a Secret only "
            f"for {' and '.join(IDENTITY_TYPES)} (AWSWebIdentityCredentials only from its "
            f"own pod's injected identity, not from identitySecretRef); write "
            f"{' or '.join(IDENTITY_TYPES)}, or remove identitySecretRef and put the "
            "credentials in the kubeconfig of spec.cluster.existing.secretRef"
        )


class CacheStorage(_Declared):
    """``spec.cluster.existing.cache``: the RWX storage class of cache volumes."""

    storageClassName: StrictStr | None = None


class Existing(_Declared):
    """``spec.cluster.existing``."""

    secretRef: SecretRef
    identitySecretRef: IdentitySecretRef | None = None
    cache: CacheStorage | None = None


class Cluster(_Declared):
    """``spec.cluster`` of an Existing cluster."""

    existing: Existing


class NodePool(_Declared):
    """``spec.nodePools[]``: ``maxNodeCount`` nodes when the pool autoscales, else
    ``nodeCount`` (default 1), each as the InferenceClass ``className`` describes."""

    name: StrictStr
    className: StrictStr = Field(min_length=1)
    nodeCount: WholeInt | None = Field(default=None, ge=0)
    maxNodeCount: WholeInt | None = Field(default=None, ge=1)


class Gateway(_Declared):
    """``spec.gateway``."""

    hostname: StrictStr | None = None


class ExistingSpec(_Declared):
    """What the composer reads of the ``spec`` of an Existing cluster."""

    cluster: Cluster
    nodePools: list[NodePool] = Field(default_factory=list)
    gateway: Gateway | None = None

    @field_validator("nodePools")
    @classmethod
    def _names_unique(cls, pools: list[NodePool]) -> list[NodePool]:
        """Pool names are the list's key (``x-kubernetes-list-map-keys: [name]``)."""
        seen: set[str] = set()
        for p in pools:
            if p.name in seen:
                raise ValueError(f"pool names are unique; {quoted(p.name)} names two pools")
            seen.add(p.name)
        return pools


_SHAPES = {
    "spec.cluster.existing": "an object {secretRef: {name: <Secret>, key: kubeconfig}}",
    "spec.nodePools": "a list of node pools, each {name, className, nodeCount}",
    "spec.nodePools[]": "an object {name, className, nodeCount}",
}


def parse_existing(spec: Any) -> ExistingSpec:
    """Validate the ``spec`` (plain Python) of an ``Existing`` cluster.

    Raises:
        SpecError: naming the first wrong field (``spec.nodePools[0].nodeCount`` ...)
            and what to write, listing up to five problems.
    """
    try:
        return ExistingSpec.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors("spec", e, _SHAPES) from None
