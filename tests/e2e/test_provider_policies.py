"""Every ``spec.managementPolicies`` set the function writes on a provider-kubernetes
Object is one provider-kubernetes accepts.

provider-kubernetes' Object reconciler checks the set with crossplane-runtime's
resolver against the runtime's default supported list; a set outside it leaves the
Object ``Synced=False``, no longer observed, and skips its deletion (review 19b: the
backfill's ``[Observe, Update, LateInitialize, Delete]`` froze its Job Object, so a
cancelled backfill's Job was never deleted). The verdicts come from that resolver
itself: ``scripts/policy-check``, built by ``scripts/crossplane-tools`` against the
crossplane-runtime the pinned provider-kubernetes requires. Its ``missing`` and
``deleting`` modes run that runtime's managed reconciler once, to check what the
simulated provider (``tests.support.world``) says a set does with a remote Job deleted
on the cluster, and with the Object's own deletion.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from function.core.structfill import struct_from
from function.manifests.objects import (
    MESSAGE_REMOTE_NOT_FOUND,
    OBSERVE_DELETE_POLICIES,
    OBSERVE_ONLY_POLICIES,
    remote_not_found,
)
from tests.support import crossplane, world

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _policies(doc: Any) -> Iterator[tuple[str, ...]]:
    """Every ``spec.managementPolicies`` list anywhere in a YAML document."""
    if isinstance(doc, dict):
        spec = doc.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("managementPolicies"), list):
            yield tuple(spec["managementPolicies"])
        for v in doc.values():
            yield from _policies(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _policies(v)


def _written() -> tuple[dict[tuple[str, ...], str], int]:
    """Each set the function writes, with where it was seen: the constants that hold
    them, and every one in the desired composed resources of the golden responses
    (recorded from Crossplane's calls), but for a resource whose spec is kept exactly
    as observed (a call that decides nothing keeps what exists); and how many of the
    golden composed resources carry one."""
    hits = 0
    seen = {
        tuple(OBSERVE_DELETE_POLICIES): "objects.OBSERVE_DELETE_POLICIES",
        tuple(OBSERVE_ONLY_POLICIES): "objects.OBSERVE_ONLY_POLICIES",
    }
    for path in sorted(GOLDEN.rglob("want.yaml")):
        want = yaml.safe_load(path.read_text()) or {}
        seen_file = path.parent / "observed.yaml"
        observed = (yaml.safe_load(seen_file.read_text()) if seen_file.exists() else None) or {}
        for key, child in ((want.get("desired") or {}).get("resources") or {}).items():
            body = child.get("resource")
            was = (observed.get(key) or {}).get("resource") or {}
            if body.get("spec") == was.get("spec"):
                continue
            for s in _policies(body):
                hits += 1
                seen.setdefault(s, f"{path.parent.relative_to(GOLDEN)} {key}")
    return seen, hits


def _verdicts(tools: crossplane.Tools, sets: list[tuple[str, ...]], *mode: str) -> list[Any]:
    """``scripts/policy-check`` (``mode``: none, ``missing`` or ``deleting``) on ``sets``."""
    done = subprocess.run(
        [str(tools.policy_check), *mode],
        input=json.dumps([list(s) for s in sets]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    verdicts = json.loads(done.stdout)
    assert isinstance(verdicts, list) and len(verdicts) == len(sets), done.stdout
    return verdicts


def test_the_checker_is_crossplane_runtimes_resolver(xp: crossplane.Tools) -> None:
    """The premise: the resolver refuses the set review 19b found, accepts the default
    and the sets the docs name."""
    got = _verdicts(
        xp,
        [
            ("Observe", "Update", "LateInitialize", "Delete"),
            ("*",),
            ("Observe",),
            ("Observe", "Delete"),
        ],
    )
    assert "not supported" in got[0], got
    assert got[1:] == ["", "", ""], got


def test_every_policy_set_the_function_writes_is_accepted(xp: crossplane.Tools) -> None:
    written, hits = _written()
    assert hits > 0, "the golden responses hold no management policies: the scan is broken"
    sets = sorted(written)
    refused = {
        f"{list(s)} ({written[s]})": v for s, v in zip(sets, _verdicts(xp, sets), strict=True) if v
    }
    assert not refused, refused


def test_kept_objects_still_delete() -> None:
    """A Job the function keeps as observed (a backfill's once created, an experiment's
    evidence) is still deleted with its Object (a cancel must remove the remote Job), and
    is never created again behind the function's back."""
    assert "Delete" in OBSERVE_DELETE_POLICIES
    assert "Create" not in OBSERVE_DELETE_POLICIES and "*" not in OBSERVE_DELETE_POLICIES


# The sets whose handling of a missing or deleted remote object matters: the backfill's
# Job observer, its Job Object once the Job exists, and the Object CRD's default.
GONE_SETS = [tuple(OBSERVE_ONLY_POLICIES), tuple(OBSERVE_DELETE_POLICIES), ("*",)]


def _object(policies: tuple[str, ...]) -> dict[str, Any]:
    """A Job's Object with ``policies``, as provider-kubernetes last reported it."""
    body = {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": "o", "namespace": "ml-team"},
        "spec": {
            "forProvider": {"manifest": {"apiVersion": "batch/v1", "kind": "Job",
                                         "metadata": {"name": "j", "namespace": "default"}}},
            "managementPolicies": list(policies),
        },
    }  # fmt: skip
    return world.observed_object(body, remote=world.job_running(), ready=False)


def test_a_deleted_remote_job_is_reported_as_the_runtime_reports_it(xp: crossplane.Tools) -> None:
    """The simulated provider (``world.remote_gone``) against crossplane-runtime's own
    managed reconciler (``scripts/policy-check missing``: one reconcile of a managed
    resource whose external client observes nothing): for each set, whether it creates
    the remote object again and the ``Synced`` condition it writes. Only ``[Observe]``
    reports the Job gone, with the message the function reads
    (``objects.MESSAGE_REMOTE_NOT_FOUND``); ``[Observe, Delete]`` reports nothing (the
    gap the backfill's observer closes)."""
    real = _verdicts(xp, GONE_SETS, "missing")
    for policies, got in zip(GONE_SETS, real, strict=True):
        sim = world.remote_gone(_object(policies))
        synced = next(c for c in sim["status"]["conditions"] if c["type"] == "Synced")
        want = {k: synced.get(k, "") for k in ("status", "reason", "message")}
        assert got["synced"] == want, (policies, got)
        assert got["created"] == world.creates(sim), (policies, got)
        assert remote_not_found(struct_from(sim)) == (policies == tuple(OBSERVE_ONLY_POLICIES))
    assert real[0]["synced"]["message"] == MESSAGE_REMOTE_NOT_FOUND
    assert world.RECONCILE_ERROR_NOT_EXIST == MESSAGE_REMOTE_NOT_FOUND


def test_deleting_the_observer_leaves_the_job(xp: crossplane.Tools) -> None:
    """crossplane-runtime's reconciler deleting a managed resource whose remote object
    exists (``scripts/policy-check deleting``): the observer (``[Observe]``) never deletes
    the Job, the Job's Object (``[Observe, Delete]``) does; ``world.deletes`` (the
    simulated provider) agrees."""
    real = _verdicts(xp, GONE_SETS, "deleting")
    assert [r["deleted"] for r in real] == [False, True, True], real
    assert [world.deletes(_object(p)) for p in GONE_SETS] == [False, True, True]
