"""The ModelReplica spec, validated: ``function.api.modelreplica`` (one strict pass) plus
the shape of each engine (one Standalone member, or one Leader and one Worker; a pool
for every member)."""

from __future__ import annotations

from typing import Any

from function import naming
from function.api.modelreplica import ModelReplicaSpec, parse
from function.api.modelreplica import ReplicaEngine as Engine
from function.api.modelreplica import ReplicaMember as Member
from function.core.errors import SpecError, quoted
from function.manifests import workloads as wl
from function.manifests.podrules import check_tolerations


def parse_spec(spec: dict[str, Any]) -> ModelReplicaSpec:
    """Validate the replica's spec, its tolerations as the workload cluster's API server
    would (:func:`function.manifests.podrules.check_tolerations`: the replica adds them to
    every pod), and the shape of each engine.

    Raises:
        SpecError: naming the first invalid field.
    """
    parsed = parse(spec)
    check_tolerations(parsed.tolerations, "spec.tolerations")
    seen: set[str] = set()
    for ei, engine in enumerate(parsed.engines):
        if engine.name in seen:
            raise SpecError(
                f"spec.engines[{ei}].name", f"duplicate engine name {quoted(engine.name)}"
            )
        seen.add(engine.name)
        if not naming.DNS1123_LABEL.match(engine.name):
            raise SpecError(f"spec.engines[{ei}].name", "must be a DNS-1123 label")
        roles = [m.role for m in engine.members]
        if roles != ["Standalone"] and sorted(roles) != ["Leader", "Worker"]:
            raise SpecError(
                f"spec.engines[{ei}].members",
                f"an engine is one Standalone member, or one Leader and one Worker; got {roles}",
            )
        for mi, m in enumerate(engine.members):
            base = f"spec.engines[{ei}].members[{mi}]"
            if m.role != "Worker" and m.worker is not None:
                raise SpecError(f"{base}.worker", "may only be set on a Worker member")
            if not isinstance(m.template.get("spec"), dict):
                raise SpecError(f"{base}.template.spec", "is required")
            wl.engine_index(m.template, f"{base}.template")
            if not m.pool and not any(o.pool for o in engine.members):
                raise SpecError(f"{base}.pool", "is required: placement chose no pool")
    return parsed


def member_of(engine: Engine, role: str) -> tuple[int, Member]:
    for i, m in enumerate(engine.members):
        if m.role == role:
            return i, m
    raise KeyError(role)  # parse_spec guarantees the roles


def pool_of(engine: Engine, member: Member) -> str:
    return member.pool or next(m.pool for m in engine.members if m.pool)  # type: ignore[return-value]
