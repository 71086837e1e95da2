"""Each spec model agrees with its XRD: one schema per kind, checked, never a second copy.

The pydantic models in ``function/api`` validate what a composer reads; the XRDs in
``compositions/<kind>/definition.yaml`` are what the API server enforces. For every
field a model declares, the XRD must declare the same field at the same path with the
same JSON type (``string``, ``integer``, ``boolean``, ``number``, ``object``,
``array``), the same enum values for a ``Literal``, and a field the model requires must
be required by the XRD (or defaulted, or demanded by a CEL ``has(self.<field>)`` rule),
and the other way round. So a model never demands or accepts a shape the API server
would not store.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from function.api.fields import Ref
from function.api.modelbackfill import BackfillSpec
from function.api.modelcache import CacheSource
from function.api.modeldeployment import DeploymentSpec
from function.api.modelexperiment import ExperimentSpec
from function.api.modelreplica import ModelReplicaSpec

ROOT = Path(__file__).resolve().parent.parent


def _spec_schema(kind: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "compositions" / kind / "definition.yaml").read_text())
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """The annotation without ``Annotated`` and ``None``; whether None was allowed."""
    optional = False
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(tp))
            if len(args) != 1:
                return tuple(args), optional  # a union of scalars (str | int)
            tp = args[0]
        else:
            return tp, optional


_SCALARS = {str: "string", int: "integer", bool: "boolean", float: "number"}


def _check(tp: Any, schema: dict[str, Any], path: str, problems: list[str]) -> None:
    tp, _ = _unwrap(tp)
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return  # the XRD passes it through (a pod template): the model may look inside
    want = schema.get("type")
    if isinstance(tp, tuple):  # str | int: the XRD says x-kubernetes-int-or-string
        if not schema.get("x-kubernetes-int-or-string") and want not in (
            _SCALARS.get(t) for t in tp
        ):
            problems.append(f"{path}: model {tp} vs XRD {want}")
        return
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        enum = schema.get("enum")
        if want != "string" or (enum is not None and set(typing.get_args(tp)) != set(enum)):
            problems.append(f"{path}: model {typing.get_args(tp)} vs XRD {want} {enum}")
        return
    if origin is list:
        if want != "array":
            problems.append(f"{path}: model list vs XRD {want}")
            return
        _check(typing.get_args(tp)[0], schema.get("items") or {}, f"{path}[]", problems)
        return
    if origin is dict or tp is dict:
        if want != "object":
            problems.append(f"{path}: model object vs XRD {want}")
        return
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if want != "object":
            problems.append(f"{path}: model object vs XRD {want}")
            return
        _check_model(tp, schema, path, problems)
        return
    if tp in _SCALARS and want != _SCALARS[tp]:
        problems.append(f"{path}: model {_SCALARS[tp]} vs XRD {want}")


def _check_model(
    model: type[BaseModel], schema: dict[str, Any], path: str, problems: list[str]
) -> None:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    rules = " ".join(str(r.get("rule", "")) for r in schema.get("x-kubernetes-validations") or ())
    hints = typing.get_type_hints(model, include_extras=True)
    for name, field in model.model_fields.items():
        key = field.alias or name
        where = f"{path}.{key}"
        if key not in props:
            problems.append(f"{where}: declared by the model, not by the XRD")
            continue
        demanded = key in required or "default" in props[key] or f"has(self.{key})" in rules
        if field.is_required() and not demanded:
            problems.append(f"{where}: required by the model, optional in the XRD")
        _check(hints[name], props[key], where, problems)
    for key in required:
        declared = model.model_fields.get(key)
        if declared is not None and not declared.is_required() and "default" not in props[key]:
            problems.append(f"{path}.{key}: required by the XRD, optional in the model")


@pytest.mark.parametrize(
    ("kind", "model"),
    [
        ("modelreplica", ModelReplicaSpec),
        ("modelexperiment", ExperimentSpec),
        ("modelbackfill", BackfillSpec),
        ("modelcache", CacheSource),
        ("modelcachehydration", CacheSource),
        ("modeldeployment", DeploymentSpec),
    ],
)
def test_spec_model_agrees_with_its_xrd(kind: str, model: type[BaseModel]) -> None:
    problems: list[str] = []
    _check_model(model, _spec_schema(kind), "spec", problems)
    assert problems == []


def test_a_mismatch_is_reported() -> None:
    """The checker itself: a field missing from, or typed otherwise by, the XRD is named."""
    problems: list[str] = []
    schema = {"type": "object", "required": ["name"], "properties": {"name": {"type": "integer"}}}
    _check_model(Ref, schema, "spec.ref", problems)
    assert problems == ["spec.ref.name: model string vs XRD integer"]
    problems = []
    _check_model(Ref, {"type": "object", "properties": {}}, "spec.ref", problems)
    assert problems == ["spec.ref.name: declared by the model, not by the XRD"]
