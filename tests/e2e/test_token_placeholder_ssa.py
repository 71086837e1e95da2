"""The token provider-kubernetes persists in the token-secret Object is taken back by
Crossplane's next apply of it (review 19d F1).

provider-kubernetes v1.3.1 patches the token into the in-memory Object's
``spec.forProvider.manifest`` (``patchesFrom``), and crossplane-runtime v2.4.0 persists
that object with ``Update`` around a create. Crossplane v2.4.0 applies composed
resources with forced server-side apply under a per-XR field owner; the function's
desired manifest declares the patched key empty, so that apply resets it. The replay
runs on the API server's own field manager (``scripts/ssa-check``, built by
``scripts/crossplane-tools``), for every token-secret Object the golden responses hold
(composed anew and kept as observed).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from function.composers.hydration.keys import SECRET_KEY
from tests.support import crossplane

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# What the provider writes in the replay: a marker, not a secret.
PATCHED = "value-patched-by-the-provider"


def _replay(xp: crossplane.Tools, desired: dict[str, Any], path: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [str(xp.ssa_check)],
        input=json.dumps({"desired": desired, "path": path, "value": PATCHED}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(done.stdout)
    assert isinstance(result, dict), done.stdout
    return result


def _token_objects() -> dict[str, dict[str, Any]]:
    """Each distinct desired token-secret Object of the golden responses, with where."""
    seen: dict[str, dict[str, Any]] = {}
    for path in sorted(GOLDEN.rglob("want.yaml")):
        want = yaml.safe_load(path.read_text()) or {}
        child = ((want.get("desired") or {}).get("resources") or {}).get(SECRET_KEY)
        if child:
            body = child["resource"]
            key = json.dumps(body, sort_keys=True)
            seen.setdefault(key, {"at": path.parent.name, "body": body})
    return {v["at"]: v["body"] for v in seen.values()}


def test_the_replay_keeps_a_field_only_the_provider_wrote(xp: crossplane.Tools) -> None:
    """The premise: a field the desired object does not declare keeps the provider's
    value after the next apply (the defect, as it was before the placeholder)."""
    obj = {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "Secret"}}},
    }
    path = ["spec", "forProvider", "manifest", "data", "HF_TOKEN"]
    assert _replay(xp, obj, path) == {"afterUpdate": PATCHED, "afterApply": PATCHED}


def test_crossplane_takes_the_persisted_token_back(xp: crossplane.Tools) -> None:
    objects = _token_objects()
    assert objects, "the golden responses hold no token-secret Object: the scan is broken"
    for at, body in objects.items():
        (ref,) = body["spec"]["references"]
        path = ["spec", "forProvider", "manifest", *ref["toFieldPath"].split(".")]
        got = _replay(xp, body, path)
        assert got == {"afterUpdate": PATCHED, "afterApply": ""}, (at, got)
