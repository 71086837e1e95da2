"""No opaque failure: malformed fields get a result that names them (issue 14).

Single-point mutations of every field under ``spec`` and ``status`` of the XR, of the
first item of every resolved requirement (a CronJob template, an InferenceCluster, a
ModelCache ...) and of observed children, each replaced by a value of every wrong type
(null, a number, a huge number, a string, an empty string, a list, an object), for
the example seeds of every kind. For every mutated request:

- no "internal error" (an exception in a composer);
- a fatal result names a field (``spec.``, ``status.``, ``metadata.``).

Found by it, and fixed: a CronJob template whose ``containers``, ``initContainers`` or
``env`` entries have the wrong shape, and ``spec.idleFor``/``spec.repeatAfter`` past
the longest duration, raised inside the ModelBackfill composer; so did a pod template
whose ``metadata`` is null and an empty member ``pool`` (ModelReplica), an
InferenceCluster whose ``status.gpuPools[].devices`` is not a list (ModelDeployment),
and a ModelCache whose ``status.clusters`` is not a list or whose
``metadata.generation`` is a string (ModelExperiment's artifact gate); and a bring-your-own
InferenceCluster whose ``spec.nodePools`` is not a list or whose ``nodeCount`` is null or
not a number (it also dropped its ProviderConfig: for the InferenceCluster, every observed
child must stay desired).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format

from function.render import build_request
from tests.support import golden
from tests.support.harness import fatal, run
from tests.support.reliability import available_kinds, seeds, settle

KINDS = (
    "InferenceCluster",
    "ModelReplica",
    "ModelBackfill",
    "ModelDeployment",
    "ModelExperiment",
    "ModelCache",
    "ModelCacheHydration",
)
WRONG = (None, 1.5, 10**12, "x", "", [], {"a": 1})


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:2]):
            yield from _paths(v, (*prefix, i))


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(obj)
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return out


def _cases() -> list[Any]:
    return [
        pytest.param(s, id=s.id)
        for k in KINDS
        if k in available_kinds()
        for s in seeds(k)
        if s.label.startswith("example")
    ]


@pytest.mark.parametrize("seed", _cases())
def test_malformed_fields_are_named_never_internal_errors(seed: Any) -> None:
    req, _ = settle(seed)
    bad = _attack(req)
    assert not bad, "\n".join(bad[:20])


# A bring-your-own InferenceCluster has no example of its own (the examples hold
# InferenceClusters only as required resources of other kinds): its recorded calls with
# every class resolved, Ready and with a missing class, are the requests attacked.
_CLUSTER_CASES = (
    "inferencecluster/test-byo-inferencecluster-from-nothing-to-ready-06",
    "inferencecluster/test-byo-inferencecluster-missing-class-is-not-ready-04",
)


@pytest.mark.parametrize("case", _CLUSTER_CASES)
def test_malformed_inferencecluster_fields_are_named_and_keep_children(case: str) -> None:
    """Before the fix, ``spec.nodePools[0].nodeCount: "x"`` raised in ``gpu_pools``."""
    req, _ = golden.load_request(golden.GOLDEN / case)
    assert req.observed.resources, "the case observes the ProviderConfig it composed"
    # Every optional field the composer reads, so that each is attacked too.
    spec = req.observed.composite.resource["spec"]
    spec.get_or_create_struct("gateway").update({"hostname": "gw.example.com"})
    existing = spec["cluster"]["existing"]
    existing.get_or_create_struct("cache").update({"storageClassName": "efs-rwx"})
    existing.get_or_create_struct("identitySecretRef").update(
        {"name": "gcp-identity", "key": "private_key", "type": "GoogleApplicationCredentials"}
    )
    bad = _attack(req, keep_observed=True)
    assert not bad, "\n".join(bad[:20])


def _attack(req: Any, *, keep_observed: bool = False) -> list[str]:
    """Every single-point mutation of ``req`` (see the module docstring); what went wrong.

    Args:
        req: A RunFunctionRequest as Crossplane sends it.
        keep_observed: Also require every observed child to stay desired (the kinds whose
            design keeps children on invalid input by name, not by a fatal result).
    """
    xr = json_format.MessageToDict(req.observed.composite.resource)
    required = {
        n: [json_format.MessageToDict(i.resource) for i in r.items]
        for n, r in req.required_resources.items()
    }
    observed = {k: json_format.MessageToDict(v.resource) for k, v in req.observed.resources.items()}
    targets: list[tuple[str | None, Any]] = [(None, xr)]
    targets += [(n, items[0]) for n, items in sorted(required.items()) if items]
    targets += [(f"observed:{k}", v) for k, v in sorted(observed.items())[:3]]
    bad: list[str] = []
    for name, body in targets:
        for path in _paths(body):
            if len(path) < 2 or path[0] not in ("spec", "status"):
                continue
            for value in WRONG:
                mutated = _set(body, path, value)
                if name is None:
                    rsp = run(build_request(mutated, observed, required))
                elif name.startswith("observed:"):
                    obs = {**observed, name.partition(":")[2]: mutated}
                    rsp = run(build_request(xr, obs, required))
                else:
                    req_map = {**required, name: [mutated, *required[name][1:]]}
                    rsp = run(build_request(xr, observed, req_map))
                where = f"{name or 'XR'}: {'.'.join(map(str, path))} = {value!r}"
                for msg in fatal(rsp):
                    if "internal error" in msg:
                        bad.append(f"{where}: {msg[:200]}")
                    elif not any(p in msg for p in ("spec.", "status.", "metadata.")):
                        bad.append(f"{where}: fatal names no field: {msg[:200]}")
                lost = set(observed) - set(rsp.desired.resources)
                if keep_observed and lost:
                    bad.append(f"{where}: observed children dropped: {sorted(lost)}")
    return bad


# The parts of a member's pod template that the ModelReplica composer merges into (the
# device claim, volumes and mounts, env, labels, scheduling): absent from the examples,
# so added first, then every one attacked as above. Before the fix, ``resources.claims``
# of the wrong type (or null), ``volumes: null``, ``volumeMounts: null`` and
# ``resources: null`` raised inside the composer ("internal error", naming no field).
_MERGED_INTO = {
    "metadata": {"labels": {"team": "ml"}, "annotations": {"note": "x"}},
    "spec": {
        "volumes": [{"name": "data", "emptyDir": {}}],
        "nodeSelector": {"zone": "a"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        # No claim reference: a tenant's template may name no claim or claim template
        # of the shared namespace (function.manifests.tenancy); the list is still merged.
        "resourceClaims": [{"name": "extra"}],
    },
    "container": {
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "resources": {"claims": [{"name": "extra"}], "limits": {"cpu": "1"}},
        "ports": [{"containerPort": 8000, "name": "http"}],
    },
}


@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(s, id=s.id)
        for s in (seeds("ModelReplica") if "ModelReplica" in available_kinds() else [])
        if s.label.startswith("example") and "-0-" in s.id and not s.id.endswith("-fresh")
    ],
)
def test_malformed_pod_template_parts_the_replica_merges_into(seed: Any) -> None:
    req, _ = settle(seed)
    spec = json_format.MessageToDict(req.observed.composite.resource)["spec"]
    for engine in spec["engines"]:
        for member in engine["members"]:
            tmpl = member["template"]
            tmpl.setdefault("metadata", {}).update(copy.deepcopy(_MERGED_INTO["metadata"]))
            tmpl["spec"].update(copy.deepcopy(_MERGED_INTO["spec"]))
            tmpl["spec"]["containers"][0].update(copy.deepcopy(_MERGED_INTO["container"]))
    req.observed.composite.resource["spec"].Clear()
    req.observed.composite.resource["spec"].update(spec)
    assert not fatal(run(req)), "the seed with every merged-into part is valid"
    bad = _attack(req)
    assert not bad, "\n".join(bad[:20])
