"""One pure composer per XR kind: ``Inputs -> Outcome``.

A composer does no I/O, reads no globals and no wall clock, and touches no gRPC
types. :data:`KINDS` maps each served kind of ``modelplane.ai/v1alpha1`` to the
module whose ``compose(inputs) -> Outcome`` composes it; modules are imported on
first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

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


def composer_for(api_version: str, kind: str) -> Composer | None:
    """The composer of XR ``(api_version, kind)``, or None if this function does not serve it."""
    if api_version != API_VERSION or kind not in KINDS:
        return None
    fn = _loaded.get(kind)
    if fn is None:
        try:
            module = importlib.import_module(f"function.composers.{KINDS[kind]}")
        except ModuleNotFoundError:
            return None
        fn = module.compose
        _loaded[kind] = fn
    return fn
