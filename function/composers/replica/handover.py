"""An engine renamed: its old workload serves until the new one does (make-before-break).

An engine's name is part of its workload's remote name
(:func:`function.naming.workload_name`) and of the composition-resource names of its
workload and claim templates (:mod:`.names`), so renaming ``spec.engines[i].name``
composes a new workload beside the old one; were the old one no longer desired,
Crossplane would delete it in the same call (review 17n C: every replica of a
deployment at once). So:

- A *retired* engine is one no longer in the spec whose workload Object is observed
  and not being deleted; its claim templates go with it.
- An engine whose workload Object is not observed yet (the call of the rename), or is
  observed being deleted (renamed back, or onto an engine removed, while Crossplane
  still deletes that name's earlier workload: it is on its way out and re-created once
  gone; review 17g F1), *replaces* every retired engine, and its Object carries their
  names in the annotation :data:`.names.ANNOTATION_REPLACES`: the annotation is applied
  with the Object that creates the workload, so later calls read it there (never from
  the XR's status, which a failed apply may leave unwritten).
- While an engine that replaces it does not serve, a retired engine's workload and
  claim templates are kept exactly as observed. Once it serves, the annotation is
  dropped and the retired engine, no longer desired, is deleted.
- Renamed again before the new name served (a -> b -> c), more than one retired engine
  is replaced. A retired engine whose Object still carries the annotation never served
  (it is dropped once an engine serves): while another kept engine answers, such an
  engine that does not answer goes (b would hold the room c needs: the handover needs
  room for one more copy, not one per rename; review 17g F2). While none answers, all
  are kept (nothing that may come up is deleted before a replacement serves), and an
  engine that served before (no annotation) is kept though it does not answer, as with
  one rename. One that goes is being deleted from then on, so it is never kept again.
- An engine removed with no new engine beside it is replaced by none: its workload
  goes at once, as before (the room it frees may be what another engine waits for).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.struct_pb2 import Struct

from function.composers.replica.desired import EnginePlan
from function.composers.replica.names import (
    ANNOTATION_REPLACES,
    engine_of_key,
    workload_key,
)
from function.composers.replica.observed import observed_workload, read_workload
from function.core import structs
from function.core.inputs import Inputs


@dataclass(frozen=True, slots=True)
class Retired:
    """An engine no longer in the spec whose workload is observed.

    Attributes:
        engine: Its name.
        keys: The composition-resource names of its workload and claim templates that
            are observed and not being deleted, workload first.
        kind: Its workload's kind (``Deployment`` or ``LeaderWorkerSet``), as its
            desired manifest names it.
        workload: Its workload's remote name.
        answers: Whether its workload answers (all its pods, or groups, available).
        never_served: Whether its workload Object carries :data:`.names.ANNOTATION_REPLACES`:
            it replaced other engines and was renamed away before it served.
    """

    engine: str
    keys: tuple[str, ...]
    kind: str
    workload: str
    answers: bool
    never_served: bool = False


def retired(inputs: Inputs, current: Sequence[EnginePlan]) -> dict[str, Retired]:
    """The retired engines of this call by name (empty in the steady state).

    Args:
        inputs: The call's inputs (their observed composed resources).
        current: The engines the spec composes.
    """
    names = {e.name for e in current}
    keys: dict[str, list[str]] = {}
    for key in sorted(inputs.observed):
        engine = engine_of_key(key)
        if engine is None or engine in names:
            continue
        body = inputs.observed_body(key)
        if body is None or structs.being_deleted(body):
            continue
        keys.setdefault(engine, []).append(key)
    out: dict[str, Retired] = {}
    for engine, found in keys.items():
        wkey = workload_key(engine)
        body = inputs.observed_body(wkey)
        if body is None or wkey not in found:
            continue  # its workload is gone (or going): nothing serves to keep
        manifest = structs.get(structs.sub(body, "spec"), "forProvider", "manifest")
        kind = structs.get_str(manifest, "kind") or "Deployment"
        w = observed_workload(body)
        if w.kind != kind:
            w = read_workload(body, kind)
        others = tuple(k for k in found if k != wkey)
        out[engine] = Retired(
            engine,
            (wkey, *others),
            kind,
            structs.get_str(manifest, "metadata", "name"),
            not w.malformed and w.serving,
            bool(structs.get_str(body, "metadata", "annotations", ANNOTATION_REPLACES)),
        )
    return out


def replaced(
    inputs: Inputs,
    current: Sequence[EnginePlan],
    serving: Mapping[str, bool],
    gone: Mapping[str, Retired],
) -> dict[str, tuple[Retired, ...]]:
    """Per engine of the spec that does not serve yet, the retired engines it replaces
    and keeps (only those with any), by name: while any of them answers, all but those
    that never served (:attr:`Retired.never_served`) and do not answer; else all.

    An engine whose own workload Object is not observed, or is being deleted
    (:func:`function.core.structs.being_deleted`), replaces every retired engine; one
    whose Object is live replaces those its :data:`.names.ANNOTATION_REPLACES` names.

    Args:
        inputs: The call's inputs.
        current: The engines the spec composes.
        serving: Whether each of them serves, by name (an Object being deleted does not).
        gone: :func:`retired`.
    """
    if not gone:
        return {}
    out: dict[str, tuple[Retired, ...]] = {}
    for e in current:
        if serving.get(e.name, False):
            continue
        own = inputs.observed_body(e.key)
        if own is None or structs.being_deleted(own):
            names = set(gone)
        else:
            said = structs.get_str(own, "metadata", "annotations", ANNOTATION_REPLACES)
            names = {n for n in said.split(",") if n in gone}
        olds = tuple(gone[n] for n in sorted(names))
        if any(r.answers for r in olds):
            olds = tuple(r for r in olds if r.answers or not r.never_served)
        if olds:
            out[e.name] = olds
    return out


def annotated(body: bytes, replaces: Sequence[Retired]) -> Struct:
    """The serialized workload Object ``body`` with :data:`.names.ANNOTATION_REPLACES`
    naming ``replaces``."""
    obj = Struct()
    obj.ParseFromString(body)
    ann = obj.get_or_create_struct("metadata").get_or_create_struct("annotations")
    ann[ANNOTATION_REPLACES] = ",".join(r.engine for r in replaces)
    return obj


def kept_message(replaces: Sequence[Retired]) -> str:
    """What an engine's ``status.engines[].message`` adds while it replaces ``replaces``."""
    return "; ".join(
        f"until it serves, the {r.kind} {r.workload} of engine {r.engine} (no longer in "
        "spec.engines) is kept"
        + (" and answers" if r.answers else ", though it does not answer either")
        for r in replaces
    )
