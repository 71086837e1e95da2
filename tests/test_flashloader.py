"""Flash-loader and /dev/shm settings: the full precedence table and every invalid value.

Levels, lowest first: the function's environment defaults, the ModelCache's
``spec.flashLoader``, the deployment's ``spec.flashLoader``. A field unset at a
level inherits from the level below; ``enabled: false`` is a value, not "unset".
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from function.core.errors import SpecError
from function.ops.settings import Settings
from function.serving.flashloader import resolve_flash_loader, resolve_shm

ENV = {
    "DEFAULT_FLASH_LOADER_ENABLED": "false",
    "DEFAULT_FLASH_LOADER_IMAGE": "registry.example/flash:env",
    "DEFAULT_FLASH_LOADER_CONCURRENCY": "4",
    "DEFAULT_FLASH_LOADER_TMPFS_SIZE_LIMIT": "32Gi",
}
DEFAULTS = {"enabled": False, "image": "registry.example/flash:env", "concurrency": 4,
            "tmpfsSizeLimit": "32Gi"}  # fmt: skip
CACHE = {"enabled": True, "image": "registry.example/flash:cache", "concurrency": 16,
         "tmpfsSizeLimit": "128Gi"}  # fmt: skip
DEPLOY = {"enabled": False, "image": "registry.example/flash:deploy", "concurrency": 2,
          "tmpfsSizeLimit": "256Gi"}  # fmt: skip
FIELDS = ("enabled", "image", "concurrency", "tmpfsSizeLimit")
LEVEL = "ModelCache ml-team/qwen-cache spec.flashLoader"


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    return Settings()


def _as_dict(fl: Any) -> dict[str, Any]:
    return {
        "enabled": fl.enabled,
        "image": fl.image,
        "concurrency": fl.concurrency,
        "tmpfsSizeLimit": fl.tmpfs_size_limit,
    }


# Every field independently: unset at both levels, set at the cache only, at the
# deployment only, or at both: 4 x 4 fields = 256 combinations.
_STATES = ("none", "cache", "deploy", "both")


@pytest.mark.parametrize("states", list(itertools.product(_STATES, repeat=len(FIELDS))))
def test_full_precedence_table(settings: Settings, states: tuple[str, ...]):
    cache: dict[str, Any] = {}
    deploy: dict[str, Any] = {}
    want: dict[str, Any] = {}
    for field, state in zip(FIELDS, states, strict=True):
        if state in ("cache", "both"):
            cache[field] = CACHE[field]
        if state in ("deploy", "both"):
            deploy[field] = DEPLOY[field]
        want[field] = {"none": DEFAULTS, "cache": CACHE, "deploy": DEPLOY, "both": DEPLOY}[state][
            field
        ]
    got = resolve_flash_loader(settings, cache or None, deploy or None, cache_level=LEVEL)
    assert _as_dict(got) == want
    sources = dict(got.sources)
    for field, state in zip(FIELDS, states, strict=True):
        expect = {
            "none": "function default",
            "cache": LEVEL,
            "deploy": "the deployment",
            "both": "the deployment",
        }[state]
        assert sources[field].startswith(expect)


def test_null_inherits_and_false_does_not(settings: Settings):
    got = resolve_flash_loader(settings, {"enabled": True}, {"enabled": None})
    assert got.enabled is True
    got = resolve_flash_loader(settings, {"enabled": True}, {"enabled": False})
    assert got.enabled is False


def test_built_in_defaults_when_environment_is_empty():
    got = resolve_flash_loader(Settings(), None, None)
    assert got.enabled is False
    assert got.concurrency == 8 and got.tmpfs_size_limit == "64Gi"


def test_whole_float_concurrency_from_a_struct_is_an_int(settings: Settings):
    assert resolve_flash_loader(settings, {"concurrency": 12.0}, None).concurrency == 12


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("enabled", "yes"),
        ("enabled", 1),
        ("image", ""),
        ("image", "has space:1"),
        ("image", 7),
        ("concurrency", 0),
        ("concurrency", 1.5),
        ("concurrency", 100000),
        ("concurrency", True),
        ("tmpfsSizeLimit", "0"),
        ("tmpfsSizeLimit", "0Gi"),
        ("tmpfsSizeLimit", "lots"),
        ("tmpfsSizeLimit", "-1Gi"),
    ],
)
@pytest.mark.parametrize("level", ["cache", "deployment"])
def test_invalid_value_names_field_and_level(
    settings: Settings, field: str, value: Any, level: str
):
    cache = {field: value} if level == "cache" else None
    deploy = {field: value} if level == "deployment" else None
    with pytest.raises(SpecError) as e:
        resolve_flash_loader(settings, cache, deploy, cache_level=LEVEL)
    if level == "cache":
        assert e.value.field == f"{LEVEL}.{field}"
        assert f"level: {LEVEL}" in e.value.message
    else:
        assert e.value.field == f"spec.flashLoader.{field}"
        assert "level: the deployment" in e.value.message


def test_invalid_function_default_names_the_variable():
    bad = Settings.model_construct(default_flash_loader_concurrency=0)
    with pytest.raises(SpecError) as e:
        resolve_flash_loader(bad, None, None)
    assert e.value.field == "DEFAULT_FLASH_LOADER_CONCURRENCY"


# ---- /dev/shm ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "override", "want"),
    [
        (None, None, "8Gi"),
        ("16Gi", None, "16Gi"),
        (None, "2Gi", "2Gi"),
        ("16Gi", "64Gi", "64Gi"),
        ("16Gi", "512Mi", "512Mi"),
    ],
)
def test_shm_precedence(monkeypatch: pytest.MonkeyPatch, env: str | None, override, want: str):
    if env is not None:
        monkeypatch.setenv("DEFAULT_SHM_SIZE_LIMIT", env)
    assert resolve_shm(Settings(), override) == want


@pytest.mark.parametrize("value", ["0", "big", "-8Gi", "", True])
def test_shm_invalid_override(value: Any):
    with pytest.raises(SpecError) as e:
        resolve_shm(Settings(), value)
    assert e.value.field == "spec.shmSizeLimit" and "the deployment" in e.value.message


def test_shm_invalid_default():
    with pytest.raises(SpecError) as e:
        resolve_shm(Settings.model_construct(default_shm_size_limit="0Gi"), None)
    assert e.value.field == "DEFAULT_SHM_SIZE_LIMIT"
