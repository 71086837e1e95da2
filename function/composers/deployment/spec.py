"""The ModelDeployment spec: validation (field-named errors) and the placement engines
compiled from it (CEL selectors checked here, where the user wrote them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import ValidationError

from function import API_GROUP
from function.api.modeldeployment import DeploymentSpec, TemplateSpec
from function.api.modelreplica import Engine as EngineSpec
from function.api.modelreplica import Member as MemberSpec
from function.core import structs
from function.core.errors import SpecError, pydantic_errors
from function.core.inputs import Inputs
from function.core.memo import memo
from function.manifests.podrules import check_tolerations
from function.manifests.workloads import check_template
from function.scheduling.devices import (
    DeviceRequest,
    InvalidSelector,
    compile_selector,
    normalize,
)
from function.scheduling.placement import (
    Engine,
    Member,
)
from function.scheduling.selectors import LabelSelector
from function.scheduling.tolerations import Toleration, parse_tolerations
from function.serving.flashloader import check_level


class Parsed(NamedTuple):
    """The validated spec and what the composer reads of it (:func:`_parse`).

    Attributes:
        key: The spec's canonical form (:func:`function.core.structs.canonical`).
        spec: The validated model.
        selector: ``spec.template.spec.clusterSelector``.
        tolerations: ``spec.template.spec.tolerations`` as placement reads them.
        raw_engines: ``spec.template.spec.engines`` as plain Python (what :func:`_engines`
            and :func:`_selector_fields` read).
    """

    key: bytes
    spec: DeploymentSpec
    selector: LabelSelector
    tolerations: tuple[Toleration, ...]
    raw_engines: list[Any]


def _parse(inputs: Inputs) -> Parsed:
    """Validate the spec (:func:`_parsed` of its canonical form); raises SpecError naming
    the field."""
    return _parsed(structs.canonical(inputs.xr, "spec"))


@memo(1024, weight=2)
def _parsed(spec_key: bytes) -> Parsed:
    """:class:`Parsed` of the spec whose canonical form (:func:`function.core.structs.
    canonical`) is ``spec_key``: memoized, as Crossplane calls again with the same spec
    on every reconcile. Shared between calls: read it, never change it.

    Raises:
        SpecError: naming the first invalid field (not memoized: raised on every call).
    """
    raw = structs.plain_object(spec_key)
    spec, selector = _validate(raw)
    tolerations = parse_tolerations(
        [t.model_dump(exclude_none=True) for t in spec.template.spec.tolerations]
    )
    raw_engines = raw.get("template", {}).get("spec", {}).get("engines") or []
    return Parsed(spec_key, spec, selector, tolerations, raw_engines)


class Compiled(NamedTuple):
    """The placement engines of a spec (:func:`_compiled`).

    Attributes:
        engines: The engines, every CEL selector compiled.
        bad: For selectors that do not compile, messages naming them.
        paths: Normalized selector (:func:`function.scheduling.devices.normalize`) -> the
            first field that holds it, for a deadline message to name
            (:func:`function.scheduling.devices.note_paths`, on every call).
    """

    engines: tuple[Engine, ...]
    bad: list[str]
    paths: dict[str, str]


@memo(1024, weight=2)
def _compiled(spec_key: bytes) -> Compiled:
    """:func:`_engines` of the spec whose canonical form is ``spec_key`` (memoized like
    :func:`_parsed`; shared between calls: never change the result)."""
    return _engines(_parsed(spec_key).raw_engines)


def _validate(raw: dict[str, Any]) -> tuple[DeploymentSpec, LabelSelector]:
    """Validate the spec (plain Python); raises SpecError naming the field."""
    try:
        spec = DeploymentSpec.model_validate(raw)
    except ValidationError as err:
        raise pydantic_errors("spec", err) from None
    ts = spec.template.spec
    selector = LabelSelector.parse(ts.clusterSelector or {}, "spec.template.spec.clusterSelector")
    check_tolerations(
        (raw.get("template") or {}).get("spec", {}).get("tolerations"),
        "spec.template.spec.tolerations",
    )
    for ei, e in enumerate(ts.engines):
        f = f"spec.template.spec.engines[{ei}]"
        _check_roles(ts, e, f)
        for mi, m in enumerate(e.members):
            _check_member(m, f"{f}.members[{mi}]")
    loader = ts.flashLoader.model_dump() if ts.flashLoader is not None else None
    check_level(loader, ts.shmSizeLimit, "spec.template.spec")
    # Sorted: the smallest reserved key is named, whatever order the map arrived in.
    for k in sorted(spec.template.metadata.labels if spec.template.metadata else {}):
        if k.startswith(f"{API_GROUP}/"):
            raise SpecError("spec.template.metadata.labels", f"key {k} uses the reserved prefix")
    names = [e.name for e in ts.engines]
    if len(set(names)) != len(names):
        raise SpecError("spec.template.spec.engines", "engine names must be unique")
    return spec, selector


def _check_roles(ts: TemplateSpec, e: EngineSpec, f: str) -> None:
    """An engine is one Standalone member or a gang (one Leader and Workers); a gang
    needs a cache (every pod of it mounts the cache). ``f`` is the engine's field."""
    roles = [m.role for m in e.members]
    if not ("Leader" in roles or "Worker" in roles):
        if roles != ["Standalone"]:
            raise SpecError(f"{f}.members", "an engine is one Standalone member or a gang")
        return
    if roles.count("Leader") != 1 or "Worker" not in roles or "Standalone" in roles:
        raise SpecError(f"{f}.members", "a gang needs exactly one Leader and Workers")
    if ts.modelCacheRef is None:
        raise SpecError(
            "spec.template.spec.modelCacheRef",
            f"engine {e.name} spans several nodes (Leader and Workers): every pod of "
            f"the gang mounts the cache, so a modelCacheRef is required",
        )


def _check_member(m: MemberSpec, f: str) -> None:
    """What the replicas would reject, said here where the user wrote it, beyond the
    member's model (its pod template and nodeSelector, :class:`function.api.modelreplica.
    Member`): ``worker`` on a non-Worker, and what the pod template may not hold
    (:func:`function.manifests.workloads.check_template`). ``f`` is the member's
    field."""
    if m.worker is not None and m.role != "Worker":
        raise SpecError(f"{f}.worker", "only a Worker member has worker")
    check_template(m.template, f"{f}.template")


def _engines(raw_engines: list[dict[str, Any]]) -> Compiled:
    """Placement engines from the template, compiling every CEL selector (see
    :class:`Compiled`)."""
    out: list[Engine] = []
    bad: list[str] = []
    paths: dict[str, str] = {}
    for ei, e in enumerate(raw_engines):
        members: list[Member] = []
        for mi, m in enumerate(e.get("members") or []):
            role = m.get("role") or "Standalone"
            pods = int((m.get("worker") or {}).get("nodes") or 1) if role == "Worker" else 1
            reqs: list[DeviceRequest] = []
            for di, d in enumerate(((m.get("nodeSelector") or {}).get("devices")) or []):
                sels: list[str] = []
                for si, s in enumerate(d.get("selectors") or []):
                    expr = s.get("cel") if isinstance(s, Mapping) else None
                    if not isinstance(expr, str):
                        continue
                    where = (
                        f"spec.template.spec.engines[{ei}].members[{mi}].nodeSelector."
                        f"devices[{di}].selectors[{si}].cel"
                    )
                    try:
                        compile_selector(expr, where)
                    except InvalidSelector as err:
                        bad.append(f"{where}: {err}")
                        continue
                    sels.append(expr)
                    paths.setdefault(normalize(expr), where)
                reqs.append(
                    DeviceRequest(str(d.get("name", "")), int(d.get("count") or 1), tuple(sels))
                )
            members.append(Member(role, pods, tuple(reqs)))
        out.append(Engine(str(e.get("name")), int(e.get("copies") or 1), tuple(members)))
    return Compiled(tuple(out), bad, paths)


def _selector_fields(raw_engines: list[dict[str, Any]]) -> dict[str, list[str]]:
    """CEL expression -> the field paths that hold it (error path only)."""
    out: dict[str, list[str]] = {}
    for ei, e in enumerate(raw_engines):
        for mi, m in enumerate(e.get("members") or []):
            for di, d in enumerate(((m.get("nodeSelector") or {}).get("devices")) or []):
                for si, s in enumerate(d.get("selectors") or []):
                    expr = s.get("cel") if isinstance(s, Mapping) else None
                    if isinstance(expr, str):
                        out.setdefault(expr, []).append(
                            f"spec.template.spec.engines[{ei}].members[{mi}].nodeSelector."
                            f"devices[{di}].selectors[{si}].cel"
                        )
    return out
