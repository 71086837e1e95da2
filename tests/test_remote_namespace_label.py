"""Every remote manifest names the control-plane namespace that owns it (review 14a, 5).

On a workload cluster every remote object lives in ``default``, so two namespaces'
same-named caches (or deployments) look alike there unless each object says which
control-plane namespace owns it. Each manifest inside a provider-kubernetes Object
carries ``modelplane.ai/namespace: <the XR's namespace>`` in its own ``metadata.labels``
and nowhere else: not in a selector (a Deployment's or LeaderWorkerSet's is immutable,
a Service's would change traffic) and not in a pod template (a Deployment's or
LeaderWorkerSet's would roll the serving pods; a Job's is immutable, so an existing
Job would be refused).

The table is every kind that composes Objects; each seed of the kind
(:mod:`tests.support.reliability`) is settled both in its own namespace and moved to
:data:`NS` (its namespaced world moved with it), and every Object of the final response
is checked. A manifest re-desired unchanged from what is observed (a Job the backfill
keeps as it is) is the observed object, not one the function builds: it is skipped.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from function.composers import KINDS
from function.naming import LABEL_NAMESPACE, hydration_name
from tests.support.harness import desired, fatal
from tests.support.reliability import Seed, missing_reason, seeds, settle

NS = "team-b"

# The kinds that compose provider-kubernetes Objects, and the remote kinds each must
# have been seen composing across its seeds (so the table cannot pass by checking nothing).
TABLE: dict[str, set[str]] = {
    "ModelCacheHydration": {
        "PersistentVolumeClaim",
        "Secret",
        "ConfigMap",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Job",
    },
    "ModelReplica": {"Deployment", "LeaderWorkerSet", "Service", "ResourceClaimTemplate"},
    "ModelExperiment": {"Job"},
    "ModelBackfill": {"Job"},
}


def moved(seed: Seed, ns: str) -> Seed:
    """``seed`` with its XR and its namespaced world in ``ns`` (hydrations renamed for it)."""
    old = seed.xr["metadata"].get("namespace")
    xr = copy.deepcopy(seed.xr)
    xr["metadata"]["namespace"] = ns
    world = []
    for doc in copy.deepcopy(seed.world):
        meta = doc.setdefault("metadata", {})
        if meta.get("namespace") == old:
            meta["namespace"] = ns
            if doc.get("kind") == "ModelCacheHydration":
                spec = doc.get("spec") or {}
                meta["name"] = hydration_name(ns, spec["cacheName"], spec["clusterName"])
        world.append(doc)
    observed = {}
    for key, obs in copy.deepcopy(seed.observed).items():
        if (obs.get("metadata") or {}).get("namespace") == old:
            obs["metadata"]["namespace"] = ns
        observed[key] = obs
    return Seed(seed.kind, f"{seed.label}@{ns}", xr, world, observed)


def _manifest(body: dict[str, Any]) -> dict[str, Any]:
    return ((body.get("spec") or {}).get("forProvider") or {}).get("manifest") or {}


def _label_paths(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every path in ``value`` at which a map holds the key :data:`LABEL_NAMESPACE`."""
    out: list[tuple[str, ...]] = []
    if isinstance(value, dict):
        if LABEL_NAMESPACE in value:
            out.append(path)
        for k, v in value.items():
            out += _label_paths(v, (*path, str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _label_paths(v, (*path, str(i)))
    return out


def check(seed: Seed) -> Counter[str]:
    """Settle ``seed`` and check every Object's manifest; the remote kinds checked."""
    _, rsp = settle(seed)
    assert not fatal(rsp), f"{seed.id}: {fatal(rsp)}"
    ns = seed.xr["metadata"]["namespace"]
    seen: Counter[str] = Counter()
    for name, body in desired(rsp).items():
        if body.get("kind") != "Object":
            continue
        manifest = _manifest(body)
        if manifest and manifest == _manifest(seed.observed.get(name) or {}):
            continue  # the observed object kept as it is
        kind = manifest.get("kind", "?")
        labels = (manifest.get("metadata") or {}).get("labels") or {}
        assert labels.get(LABEL_NAMESPACE) == ns, (
            f"{seed.id}: {name} ({kind}) has {LABEL_NAMESPACE}={labels.get(LABEL_NAMESPACE)!r}, "
            f"want {ns!r}"
        )
        paths = _label_paths(manifest)
        assert paths == [("metadata", "labels")], (
            f"{seed.id}: {name} ({kind}) carries {LABEL_NAMESPACE} outside its own "
            f"metadata.labels: {['.'.join(p) for p in paths]}"
        )
        # The Object itself lives in the namespace; it needs no label for it.
        assert LABEL_NAMESPACE not in ((body.get("metadata") or {}).get("labels") or {})
        seen[kind] += 1
    return seen


@pytest.mark.parametrize("kind", sorted(TABLE))
def test_every_remote_manifest_names_its_namespace(kind: str) -> None:
    seen: Counter[str] = Counter()
    for seed in seeds(kind):
        seen += check(seed)
        seen += check(moved(seed, NS))
    assert TABLE[kind] <= set(seen), f"{kind}: never composed {sorted(TABLE[kind] - set(seen))}"


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in TABLE and not missing_reason(k)])
def test_the_table_lists_every_kind_that_composes_objects(kind: str) -> None:
    for seed in seeds(kind):
        _, rsp = settle(seed)
        objects = [n for n, b in desired(rsp).items() if b.get("kind") == "Object"]
        assert not objects, f"{kind} composes Objects {objects}: add it to TABLE"
