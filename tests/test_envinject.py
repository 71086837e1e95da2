"""$(VAR)-aware env injection: references, order, byte-for-byte passthrough, idempotence."""

from __future__ import annotations

import copy

import pytest

from function.core.errors import SpecError
from function.manifests import workloads as wl
from function.serving.env import (
    check_reserved,
    gang_env,
    model_env,
    references,
    set_env,
    unresolved,
)
from jobs.contract import CACHE_MOUNT_PATH

# Kubernetes' expansion rules (third_party/forked/golang/expansion): $$ escapes a
# $, $( without ) is literal, an unknown $(X) stays as written.
_REFS = [
    ("--model=$(MODELPLANE_MODEL)", ["MODELPLANE_MODEL"]),
    ("$$(MODELPLANE_MODEL)", []),
    ("$$$(A)", ["A"]),
    ("$(A)$(B) $C ${D}", ["A", "B"]),
    ("$(unterminated", []),
    ("cost $5", []),
    ("trailing $", []),
    ("", []),
]


@pytest.mark.parametrize(("text", "want"), _REFS)
def test_references_follow_kubernetes_expansion(text: str, want: list[str]):
    assert references(text) == want


def test_injected_first_and_user_entries_unchanged_and_idempotent():
    user = [
        {"name": "HF_HOME", "value": "$(MODELPLANE_MODEL)/.hf"},
        {"name": "ESCAPED", "value": "$$(MODELPLANE_MODEL) and $$HOME"},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    c = {"name": "engine", "env": copy.deepcopy(user), "args": ["--model=$(MODELPLANE_MODEL)"]}
    injected = [model_env(CACHE_MOUNT_PATH), *gang_env()]
    set_env(c, injected, first=True)
    assert [e["name"] for e in c["env"][:3]] == [
        "MODELPLANE_MODEL",
        "MODELPLANE_LEADER_ADDRESS",
        "MODELPLANE_RANK",
    ]
    assert c["env"][3:] == user
    assert c["args"] == ["--model=$(MODELPLANE_MODEL)"]
    once = copy.deepcopy(c)
    set_env(c, injected, first=True)
    assert c == once


def test_nothing_injected_leaves_container_alone():
    c = {"name": "engine", "args": ["x"]}
    set_env(c, [], first=True)
    assert c == {"name": "engine", "args": ["x"]}


def test_reserved_names_rejected_with_path():
    with pytest.raises(SpecError) as e:
        check_reserved([{"name": "X"}, {"name": "MODELPLANE_RANK", "value": "0"}], "c.env")
    assert e.value.field == "c.env[1].name"
    assert "MODELPLANE_RANK" in e.value.message
    check_reserved([{"name": "MODELPLANE_SERVED_MODEL_NAME", "value": "x"}], "c.env")
    check_reserved(None, "c.env")


def test_unresolved_reports_reserved_references_not_injected():
    c = {
        "command": ["sh", "-c", "run --rank $(MODELPLANE_RANK)"],
        "args": ["--model=$(MODELPLANE_MODEL)", "$$(MODELPLANE_LEADER_ADDRESS)"],
        "env": [{"name": "X", "value": "$(OTHER)"}],
    }
    assert unresolved(c, set()) == ["MODELPLANE_MODEL", "MODELPLANE_RANK"]
    assert unresolved(c, {"MODELPLANE_MODEL", "MODELPLANE_RANK"}) == []


def _plan(**kw):
    base = dict(
        labels={"modelplane.ai/replica": "r"},
        serving="svc",
        node_selector={"modelplane.ai/pool": "p"},
        cache_pvc="pvc",
        cache_identity="0123456789ab",
    )
    base.update(kw)
    return wl.PodPlan(**base)


def _template():
    return {
        "spec": {
            "containers": [
                {"name": "sidecar", "image": "busybox", "env": [{"name": "MODELPLANE_MODEL"}]},
                {
                    "name": "engine",
                    "image": "vllm",
                    "args": ["--model=$(MODELPLANE_MODEL)", "--x=$$y"],
                    "env": [{"name": "A", "value": "$(MODELPLANE_MODEL)"}],
                },
            ]
        }
    }


def test_pod_template_only_touches_the_engine_container():
    t = _template()
    out = wl.pod_template(t, _plan(), "tmpl")
    assert t == _template()  # the input is not modified
    sidecar, engine = out["spec"]["containers"]
    assert sidecar == _template()["spec"]["containers"][0]
    assert engine["args"] == ["--model=$(MODELPLANE_MODEL)", "--x=$$y"]
    assert engine["env"][1:] == [{"name": "A", "value": "$(MODELPLANE_MODEL)"}]
    # The same inputs give the same template (no state carried between calls).
    assert wl.pod_template(_template(), _plan(), "tmpl") == out


def test_user_volume_or_mount_colliding_with_ours_is_rejected():
    t = _template()
    t["spec"]["volumes"] = [{"name": wl.VOLUME_SHM, "emptyDir": {}}]
    with pytest.raises(SpecError) as e:
        wl.pod_template(t, _plan(), "tmpl")
    assert e.value.field == "tmpl.spec.volumes[0].name"
    t = _template()
    t["spec"]["containers"][1]["volumeMounts"] = [{"name": "x", "mountPath": "/dev/shm"}]
    with pytest.raises(SpecError) as e:
        wl.pod_template(t, _plan(), "tmpl")
    assert e.value.field == "tmpl.spec.containers[1].volumeMounts[0].mountPath"


def test_gpu_toleration_added_once():
    out = wl.pod_template(_template(), _plan(tolerations=[dict(wl.GPU_TOLERATION)]), "tmpl")
    assert out["spec"]["tolerations"] == [wl.GPU_TOLERATION]
    out = wl.pod_template(_template(), _plan(), "tmpl")
    assert out["spec"]["tolerations"] == [wl.GPU_TOLERATION]


@pytest.mark.parametrize("name", ["SUITE\n", "TASKS\n", "A\nB"])
def test_a_name_with_a_newline_is_not_an_env_name(name: str) -> None:
    """Found by a review: Python's ``$`` matches before a final newline, so ``SUITE\\n``
    passed the function's check (the XRD's RE2 and the API server refuse it)."""
    from function.serving.env import env_name_problem

    assert env_name_problem(name) is not None


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        ("function.naming:DNS1123_LABEL", "abc\n"),
        ("function.naming:LABEL_VALUE", "abc\n"),
        ("function.api.modelcache:_REPO", "org/name\n"),
        ("function.core.k8svalidation:DNS1123_SUBDOMAIN", "hf-token\n"),
        ("function.api.modelexperiment:BACKEND", "vllm\n"),
        ("function.core.k8svalidation:QUALIFIED_NAME_PART", "gpu\n"),
    ],
)
def test_whole_string_patterns_refuse_a_trailing_newline(pattern: str, value: str) -> None:
    import importlib

    module, name = pattern.split(":")
    regex = getattr(importlib.import_module(module), name)
    assert regex.match(value) is None and regex.match(value.rstrip("\n")) is not None
