"""Field types every spec model shares (one declaration each).

- :class:`Ref`: a reference by name to an object in the XR's own namespace
  (``modelCacheRef``, ``modelRef``, ``templateRef``); a namespaced XR never names
  another namespace, so a spec cannot make the function read across namespaces.
- :data:`WholeInt`: an XRD ``integer`` as a Struct carries it (a double), from
  :mod:`function.core.numbers`.
- :func:`checked`: a plain ``dict`` field that must also fit a model (a pod template
  the function reads parts of): validated against the model, kept as written.

The policy is strict everywhere (pydantic strict types): a value of the wrong JSON
type is an error naming the field, as the XRD's structural schema makes it for the
API server, never coerced.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidatorFunctionWrapHandler
from pydantic.functional_validators import WrapValidator

from function.core.numbers import WholeInt

__all__ = ["Ref", "WholeInt", "checked"]


class Ref(BaseModel):
    """A reference by ``name`` (a Kubernetes object name) in the XR's own namespace."""

    model_config = ConfigDict(extra="allow")

    name: StrictStr = Field(min_length=1, max_length=253)


def checked(model: type[BaseModel]) -> WrapValidator:
    """A validator that checks a value against ``model`` and keeps the value as written.

    Use as ``Annotated[dict[str, Any], checked(PodTemplate)]``: errors carry the path
    inside the value (``template.spec.containers[0].name``); the parsed field is the
    original dict (None passes through), so what the function copies is byte for
    byte what the author wrote.
    """

    def _check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if value is not None:
            model.model_validate(value)
        return handler(value)

    return WrapValidator(_check)
