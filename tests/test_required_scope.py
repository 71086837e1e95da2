"""Required resources are used only if they are what was asked for (issue 14).

Crossplane scopes its answers to a requirement today; the function must not depend on
it. For every seed of every kind (``tests/support/reliability.py``), the requirements loop is
settled, and then, for every requirement that resolved to something, a same-named
foreign object is planted under that requirement's name:

- in another namespace (or, for a cluster-scoped object asked for by name, with a
  namespace), and
- of another kind (same name, namespace and labels);

once **listed first** (before what Crossplane resolved) and once **alone**. Listed
first, the response must be exactly the response without it; alone, exactly the
response to "resolved, nothing matched". Kinds that act only on a final iteration
(ModelExperiment, ModelBackfill) take such a call for not final (it is never
Crossplane's applied one) and decide nothing on it: their response must not depend on
the foreign object (another one in its place gives the same bytes). Composers that
take a requirement's first item, or index items by name, would otherwise use the
foreign object.

Each check runs twice: with the items as the seed has them, and with a ``uid`` and a
``resourceVersion`` on every item as the API server returns them (a foreign object is
another object: it has its own uid), so the readings memoized by version
(``function.core.versioned``) are checked on a cold and a warm memo.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from function.core.outcome import Requirement
from function.render import build_request
from tests.support.harness import run
from tests.support.reliability import available_kinds, seeds, settle

ELSEWHERE = "elsewhere"


def _items(req: fnv1.RunFunctionRequest) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [json_format.MessageToDict(i.resource) for i in r.items]
        for name, r in req.required_resources.items()
    }


def _with(
    req: fnv1.RunFunctionRequest, name: str | None, items: list[dict[str, Any]] | None = None
) -> Any:
    required = _items(req)
    if name is not None:
        required[name] = items or []
    xr = json_format.MessageToDict(req.observed.composite.resource)
    observed = {k: json_format.MessageToDict(v.resource) for k, v in req.observed.resources.items()}
    return build_request(xr, observed, required, tag=req.meta.tag)


def _bytes(rsp: fnv1.RunFunctionResponse) -> bytes:
    return rsp.SerializeToString(deterministic=True)


def _stored(req: fnv1.RunFunctionRequest, seed: str) -> Any:
    """``req`` with every required item as the API server returns it: a uid of its own
    (seed, requirement, position) and a resourceVersion that changes with its content."""
    out = _with(req, None)
    for name, r in out.required_resources.items():
        for i, it in enumerate(r.items):
            meta = it.resource.fields["metadata"].struct_value
            if not meta.fields["uid"].string_value:
                meta.fields["uid"].string_value = f"uid-{seed}-{name}-{i}"
            meta.fields.pop("resourceVersion", None)
            content = it.resource.SerializeToString(deterministic=True)
            meta.fields["resourceVersion"].string_value = hashlib.sha256(content).hexdigest()[:12]
    return out


def _foreign(
    item: dict[str, Any], sel: fnv1.ResourceSelector
) -> Iterator[tuple[str, dict[str, Any]]]:
    meta = item.get("metadata") or {}
    by_name = sel.WhichOneof("match") == "match_name"
    if sel.HasField("namespace") or by_name:
        moved = copy.deepcopy(item)
        moved.setdefault("metadata", {})["namespace"] = (
            ELSEWHERE if meta.get("namespace") != ELSEWHERE else ELSEWHERE + "-2"
        )
        yield "other-namespace", _another(moved, "other-namespace")
    other = copy.deepcopy(item)
    other["kind"] = "ConfigMap" if item.get("kind") != "ConfigMap" else "Secret"
    yield "other-kind", _another(other, "other-kind")


def _another(obj: dict[str, Any], label: str) -> dict[str, Any]:
    """``obj`` as another object: its own uid (when it has one)."""
    meta = obj.get("metadata") or {}
    if meta.get("uid"):
        meta["uid"] = f"{label}-{meta['uid']}"
    return obj


def _resolves_something(seed: Any) -> bool:
    req, rsp = settle(seed)
    return any(
        resolved and name in rsp.requirements.resources
        for name, resolved in _items(req).items()
    )


def _cases() -> list[Any]:
    """Every seed whose settled request has a requirement resolved to at least one object.

    A seed that requires nothing that exists (an InferenceCluster with no secrets, say)
    has nothing a foreign object could stand in for; it is left out rather than skipped.
    """
    out = []
    for kind in available_kinds():
        for seed in seeds(kind):
            if _resolves_something(seed):
                out.append(pytest.param(seed, id=seed.id))
    return out


def test_every_kind_that_requires_has_a_seed_to_check() -> None:
    # A steady ModelCacheShard requires nothing at all (ModelReplicas only while a
    # hydration leaves it, which tests/test_modelcacheshard.py covers); an InferenceClass
    # requires nothing. InferenceCluster (bring your own, examples/inferencecluster)
    # requires its InferenceClasses by name: cluster-scoped, checked by name and kind.
    kinds = {str(p.id).split(":")[0] for p in _cases()}
    unrequiring = {"ModelCacheShard", "InferenceClass"}
    assert kinds == set(available_kinds()) - unrequiring, kinds


@pytest.mark.parametrize("versions", [False, True], ids=["as-seeded", "with-versions"])
@pytest.mark.parametrize("seed", _cases())
def test_foreign_required_items_are_ignored(seed: Any, versions: bool) -> None:
    req, rsp = settle(seed)
    if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
        pytest.skip("the seed settles on a fatal result: nothing is composed from requirements")
    if versions:
        req = _stored(req, seed.id)
    want = _bytes(run(req))
    kind = str(seed.id).split(":")[0]
    checked = 0
    for name, resolved in _items(req).items():
        sel = rsp.requirements.resources.get(name)
        if sel is None or not resolved:
            continue
        empty = _bytes(run(_with(req, name, [])))
        for label, foreign in _foreign(resolved[0], sel):
            first = _bytes(run(_with(req, name, [foreign, *resolved])))
            alone = _bytes(run(_with(req, name, [foreign])))
            if kind in DECIDE_ON_FINAL:
                # Not the final call: what it holds is not what the requirement asks
                # for, so nothing is decided on it, and the foreign object's content
                # (another one in its place) changes nothing.
                other = _renamed(foreign)
                assert first == _bytes(run(_with(req, name, [other, *resolved]))), (
                    f"{name}: foreign object ({label}) listed first used"
                )
                assert alone == _bytes(run(_with(req, name, [other]))), (
                    f"{name}: a foreign object ({label}) alone was used"
                )
            else:
                assert first == want, f"{name}: foreign object ({label}) listed first used"
                assert alone == empty, f"{name}: a foreign object ({label}) alone was used"
            checked += 1
    assert checked, "no requirement of this seed resolves to anything"


DECIDE_ON_FINAL = {"ModelExperiment", "ModelBackfill"}
"""Kinds that act only on a final iteration (``Outcome.final_iteration``): a request
holding, under a name, an item the requirement does not select is never Crossplane's
applied call (review 14c #1: v2.4 seeds the first call with last reconcile's
requirements), so they decide nothing on it instead of deciding without the item."""


def _renamed(obj: dict[str, Any]) -> dict[str, Any]:
    """Another foreign object in ``obj``'s place: its own name, uid and labels."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta["name"] = f"{meta.get('name', '')}-other"
    meta["labels"] = {**(meta.get("labels") or {}), "modelplane.test/other": "true"}
    if meta.get("uid"):
        meta["uid"] = f"other-{meta['uid']}"
    return out


def _req(**kw: Any) -> Requirement:
    base: dict[str, Any] = {"api_version": "modelplane.ai/v1alpha1", "kind": "ModelCache"}
    base.update(kw)
    return Requirement(**base)


def _obj(kind: str = "ModelCache", name: str = "c", ns: str | None = "ml", **labels: str) -> Any:
    from google.protobuf.struct_pb2 import Struct

    s = Struct()
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if ns is not None:
        meta["namespace"] = ns
    s.update({"apiVersion": "modelplane.ai/v1alpha1", "kind": kind, "metadata": meta})
    return s


@pytest.mark.parametrize(
    ("asked", "item", "why"),
    [
        (_req(match_name="c", namespace="ml"), _obj(), None),
        (_req(match_name="c", namespace="ml"), _obj(ns="other"), "namespace is other, not ml"),
        (_req(match_name="c", namespace="ml"), _obj(name="d"), "name is d, not c"),
        (_req(match_name="c", namespace="ml"), _obj("Secret"), "kind is Secret, not ModelCache"),
        (_req(kind="InferenceCluster", match_name="c"), _obj("InferenceCluster", ns=None), None),
        (
            _req(kind="InferenceCluster", match_name="c"),
            _obj("InferenceCluster"),
            "namespace is ml, but a cluster-scoped object was asked for",
        ),
        (_req(match_labels=(("a", "1"),), namespace="ml"), _obj(a="1"), None),
        (_req(match_labels=(("a", "1"),), namespace="ml"), _obj(a="2"), "label a is '2', not '1'"),
        (_req(match_labels=(), namespace=None), _obj(ns="anywhere"), None),
        (
            _req(api_version="other.io/v1", match_name="c", namespace="ml"),
            _obj(),
            "API group is modelplane.ai, not other.io",
        ),
    ],
)
def test_foreign_reason(asked: Requirement, item: Any, why: str | None) -> None:
    from function.core.inputs import admits, foreign_reason

    assert foreign_reason(asked, item) == why
    assert admits(asked)(item) is (why is None)  # the fast test agrees
