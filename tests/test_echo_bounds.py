"""A tenant's invalid string is quoted as a bounded excerpt, never whole (review 16b F3).

A label key or value, an operator, an env name, a duration can be as long as the XR
(etcd's 1.5 MiB). The fatal message is copied into the XR's ``Synced`` condition and an
event, and logged at info on every reconcile: the field is named, the string is quoted
as its first :data:`~function.core.errors.EXCERPT_CHARS` characters and its length.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from function.core.errors import quoted
from tests.support import harness as h
from tests.support.fixtures import cache_spec, inference_cluster
from tests.test_deployment import deployment, engine, ic

BIG = "A" * 200_000 + "!"
# The field path, the excerpt and the sentence around them: far under the string.
MAX_MESSAGE = 1024


def _cache(selector: dict[str, Any]) -> tuple[dict[str, Any], h.World]:
    xr = h.xr("ModelCache", "c", cache_spec(selector))
    return xr, h.World([inference_cluster("gpu-a", {"gpu": "h100"})])


def _deployment(mutate: Callable[[dict[str, Any]], None]) -> tuple[dict[str, Any], h.World]:
    xr = deployment(1, cache_name=None, engines=[engine()])
    mutate(xr["spec"]["template"]["spec"])
    return xr, h.World([ic("gpu-0", nodes=8)])


def _selector(selector: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda ts: ts.__setitem__("clusterSelector", copy.deepcopy(selector))


def _pod(mutate: Callable[[dict[str, Any], dict[str, Any]], None]) -> Callable[[Any], None]:
    """Mutate the first member's pod template and its first container."""

    def apply(ts: dict[str, Any]) -> None:
        template = ts["engines"][0]["members"][0]["template"]
        mutate(template, template["spec"]["containers"][0])

    return apply


def _backfill(**spec: Any) -> tuple[dict[str, Any], h.World]:
    base = {"modelRef": {"name": "chat"}, "templateRef": {"name": "eval"}}
    return h.xr("ModelBackfill", "b", {**base, **spec}), h.World([])


CASES: dict[str, tuple[Callable[[], tuple[dict[str, Any], h.World]], str]] = {
    "cache matchLabels key": (
        lambda: _cache({"matchLabels": {BIG: "x"}}),
        "spec.clusterSelector.matchLabels.AAAA",
    ),
    "cache matchLabels key prefix": (
        lambda: _cache({"matchLabels": {BIG + "/x": "x"}}),
        "invalid label key",
    ),
    "cache matchLabels value": (
        lambda: _cache({"matchLabels": {"gpu": BIG}}),
        "spec.clusterSelector.matchLabels.gpu",
    ),
    "cache matchExpressions key": (
        lambda: _cache({"matchExpressions": [{"key": BIG, "operator": "Exists"}]}),
        "spec.clusterSelector.matchExpressions[0].key",
    ),
    "cache matchExpressions operator": (
        lambda: _cache({"matchExpressions": [{"key": "gpu", "operator": BIG, "values": ["x"]}]}),
        "spec.clusterSelector.matchExpressions[0].operator",
    ),
    "cache matchExpressions value": (
        lambda: _cache(
            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["ok", BIG]}]}
        ),
        "spec.clusterSelector.matchExpressions[0].values[1]",
    ),
    "deployment matchLabels value": (
        lambda: _deployment(_selector({"matchLabels": {"gpu": BIG}})),
        "spec.template.spec.clusterSelector.matchLabels.gpu",
    ),
    "deployment matchExpressions key": (
        lambda: _deployment(_selector({"matchExpressions": [{"key": BIG, "operator": "Exists"}]})),
        "spec.template.spec.clusterSelector.matchExpressions[0].key",
    ),
    "deployment capability": (
        lambda: _deployment(
            _pod(lambda t, c: c.__setitem__("securityContext", {"capabilities": {"add": [BIG]}}))
        ),
        "containers[0].securityContext.capabilities.add[0]",
    ),
    "deployment secret name": (
        lambda: _deployment(
            _pod(
                lambda t, c: c.__setitem__(
                    "envFrom", [{"secretRef": {"name": "modelcache-" + BIG[11:]}}]
                )
            )
        ),
        "containers[0].envFrom[0].secretRef.name",
    ),
    "deployment pod label key": (
        lambda: _deployment(
            _pod(
                lambda t, c: t.setdefault("metadata", {}).__setitem__(
                    "labels", {"modelplane.ai/" + BIG[14:]: "x"}
                )
            )
        ),
        "metadata.labels[modelplane.ai/AAAA",
    ),
    "backfill env name": (
        lambda: _backfill(env=[{"name": BIG, "value": "v"}]),
        "spec.env[0].name",
    ),
    "backfill duration": (lambda: _backfill(idleFor=BIG), "spec.idleFor"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_invalid_tenant_string_is_quoted_bounded(
    case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    build, field = CASES[case]
    xr, world = build()
    rsp, _ = h.drive(h.run, xr, None, world)
    (msg,) = h.fatal(rsp)
    assert field in msg, msg
    assert len(msg) < MAX_MESSAGE, f"fatal message of {len(msg)} characters: {msg[:300]}"
    assert "(200001 characters)" in msg or "(200003 characters)" in msg, msg
    logged = capsys.readouterr()
    longest = max(map(len, (logged.out + logged.err).splitlines()), default=0)
    assert longest < MAX_MESSAGE + 200, f"a log line of {longest} characters"


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("gpu", "'gpu'"),
        ("x" * 64, repr("x" * 64)),
        ("x" * 65, repr("x" * 64) + "... (65 characters)"),
        (BIG, repr("A" * 64) + "... (200001 characters)"),
        (12, "12"),
        (None, "None"),
        ({"a": BIG}, "an object"),
        ([BIG], "a list"),
    ],
)
def test_quoted(value: Any, want: str) -> None:
    assert quoted(value) == want
