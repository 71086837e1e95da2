"""Strict checks of a ModelReplica spec, as the XRD's structural schema states it.

``function.api.modelreplica`` is the typed contract both composers share; its models
are lenient on purpose (pydantic's lax mode turns ``"3"`` into ``3`` and
``"yes"`` into ``True``, and pod templates are plain dicts). The API server would
reject such values, and a composer called with them anyway (a stale XRD, a
hand-made request) must say which field is wrong instead of guessing or
crashing. :func:`check_spec` applies the XRD's types
(``compositions/modelreplica/definition.yaml``) and the parts of each member's pod
template the function reads or extends, and raises a
:class:`~function.core.errors.SpecError` naming the first wrong field.

Numbers arrive as protobuf doubles, so an integer field accepts ``3.0`` but not
``3.5``, ``"3"`` or ``true``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
)

from function.core.errors import SpecError, pydantic_errors


def _whole(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("must be an integer")
    if v != int(v):
        raise ValueError("must be a whole number")
    return int(v)


Whole = Annotated[int, BeforeValidator(_whole)]


class _M(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Toleration(_M):
    key: StrictStr | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: StrictStr | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: Whole | None = None


class _Ref(_M):
    name: StrictStr = Field(min_length=1)


class _Serving(_M):
    mode: Literal["Unified", "PrefillDecode"] = "Unified"


class _FlashLoader(_M):
    enabled: StrictBool | None = None
    image: StrictStr | None = None
    concurrency: Whole | None = None
    tmpfsSizeLimit: StrictStr | None = None


class _Selector(_M):
    cel: StrictStr = Field(min_length=1)


class _DeviceRequest(_M):
    name: StrictStr = Field(min_length=1, max_length=63)
    count: Whole = Field(default=1, ge=1)
    selectors: list[_Selector] = Field(default_factory=list)
    deviceClassName: StrictStr | None = None


class _NodeSelector(_M):
    devices: list[_DeviceRequest] = Field(min_length=1)


class _Worker(_M):
    nodes: Whole = Field(default=1, ge=1)


class _EnvVar(_M):
    name: StrictStr = Field(min_length=1)
    value: StrictStr | None = None
    valueFrom: dict[str, Any] | None = None


class _Port(_M):
    containerPort: Whole = Field(ge=1, le=65535)
    name: StrictStr | None = None


class _Mount(_M):
    name: StrictStr = Field(min_length=1)
    mountPath: StrictStr = Field(min_length=1)


class _Container(_M):
    name: StrictStr = Field(min_length=1)
    image: StrictStr | None = None
    command: list[StrictStr] | None = None
    args: list[StrictStr] | None = None
    env: list[_EnvVar] | None = None
    ports: list[_Port] | None = None
    volumeMounts: list[_Mount] | None = None
    resources: dict[str, Any] | None = None


class _Named(_M):
    name: StrictStr = Field(min_length=1)


class _PodSpec(_M):
    containers: list[_Container] = Field(min_length=1)
    initContainers: list[_Container] | None = None
    volumes: list[_Named] | None = None
    tolerations: list[_Toleration] | None = None
    nodeSelector: dict[str, StrictStr] | None = None
    resourceClaims: list[_Named] | None = None


class _PodMeta(_M):
    labels: dict[str, StrictStr] | None = None
    annotations: dict[str, StrictStr] | None = None


class _Template(_M):
    metadata: _PodMeta | None = None
    spec: _PodSpec


class _Member(_M):
    role: Literal["Standalone", "Leader", "Worker"] = "Standalone"
    worker: _Worker | None = None
    pool: StrictStr | None = None
    nodeSelector: _NodeSelector | None = None
    template: _Template


class _Engine(_M):
    name: StrictStr = Field(min_length=1, max_length=63)
    copies: Whole = Field(default=1, ge=1)
    phase: Literal["Prefill", "Decode"] | None = None
    members: list[_Member] = Field(min_length=1)


class _Spec(_M):
    deploymentName: StrictStr = Field(min_length=1)
    index: Whole = Field(ge=0)
    clusterName: StrictStr = Field(min_length=1)
    modelCacheRef: _Ref | None = None
    tolerations: list[_Toleration] | None = None
    serving: _Serving | None = None
    shmSizeLimit: StrictStr | None = None
    flashLoader: _FlashLoader | None = None
    engines: list[_Engine] = Field(min_length=1)


def check_spec(spec: Any) -> None:
    """Check ``spec`` against the XRD's types and the pod-template parts the function uses.

    Raises:
        SpecError: naming the first wrong field (``spec.engines[0].copies`` ...)
            and listing up to five problems.
    """
    if not isinstance(spec, dict):
        raise SpecError("spec", "must be an object")
    try:
        _Spec.model_validate(spec)
    except ValidationError as e:
        raise pydantic_errors("spec", e) from None
