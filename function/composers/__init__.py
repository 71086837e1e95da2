"""One pure composer per XR kind: ``Inputs -> Outcome``.

A composer does no I/O, reads no globals and no wall clock, and touches no gRPC
types. :data:`KINDS` maps each served kind of ``modelplane.ai/v1alpha1`` to the
module whose ``compose(inputs) -> Outcome`` composes it; modules are imported on
first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from function import API_VERSION
from function.core.inputs import Inputs
from function.core.outcome import Outcome

Composer = Callable[[Inputs], Outcome]

# kind -> module under function.composers that defines ``compose``.
KINDS: dict[str, str] = {
    "ModelCache": "modelcache",
    "ModelCacheShard": "modelcacheshard",
    "ModelCacheHydration": "hydration",
    "ModelDeployment": "deployment",
    "ModelReplica": "replica",
    "ModelExperiment": "experiment",
    "ModelBackfill": "backfill",
    "InferenceCluster": "inferencecluster",
    "InferenceClass": "inferenceclass",
}

_loaded: dict[str, Composer] = {}


def served() -> str:
    """The served kinds for people: ``modelplane.ai/v1alpha1 ModelCache, ..., and
    InferenceCluster`` (every key of :data:`KINDS`, in its order)."""
    names = list(KINDS)
    return f"{API_VERSION} " + ", ".join(names[:-1]) + f" and {names[-1]}"


def condition_types(api_version: str, kind: str) -> frozenset[str]:
    """The condition types the composer of XR ``(api_version, kind)`` writes on the XR
    (its module's ``CONDITION_TYPES``); empty when this function does not serve it.

    A fatal response sends back only these (``function.edge.codec.keep_conditions``):
    a condition of another type belongs to another step of the pipeline, whose value of
    this reconcile Crossplane would otherwise overwrite with the observed one (it
    applies the steps' conditions in order, the last one winning)."""
    module = _module(api_version, kind)
    return frozenset(getattr(module, "CONDITION_TYPES", ())) if module is not None else frozenset()


def spec_condition(api_version: str, kind: str) -> str | None:
    """The condition type that says whether the XR's spec is valid, for a kind that has
    one (its module's ``SPEC_CONDITION``: ModelBackfill's ``SpecValid``), else None."""
    module = _module(api_version, kind)
    return getattr(module, "SPEC_CONDITION", None) if module is not None else None


def _module(api_version: str, kind: str) -> Any:
    """The module that composes XR ``(api_version, kind)``, or None."""
    if api_version != API_VERSION or kind not in KINDS:
        return None
    try:
        return importlib.import_module(f"function.composers.{KINDS[kind]}")
    except ModuleNotFoundError:
        return None


def composer_for(api_version: str, kind: str) -> Composer | None:
    """The composer of XR ``(api_version, kind)``, or None if this function does not serve it."""
    if api_version != API_VERSION or kind not in KINDS:
        return None
    fn = _loaded.get(kind)
    if fn is None:
        module = _module(api_version, kind)
        if module is None:
            return None
        fn = _loaded[kind] = module.compose
    return fn
