"""The ModelBackfill spec, and the checks that put a backfill in phase ``Blocked``.

Shape (``modelplane.ai/v1alpha1``, namespaced; see
``compositions/modelbackfill/definition.yaml``)::

    spec:
      modelRef: {name: chat}            # a ModelDeployment in the same namespace
      templateRef: {name: nightly-eval} # a batch/v1 CronJob in the same namespace
      idleFor: 10m                      # continuous foreground-idle window (Go duration, > 0)
      maxRunDuration: 30m               # the Job's activeDeadlineSeconds (>= 1s)
      repeatAfter: "0"                  # 0: one-shot; otherwise >= 1m of cool-down
      env: [{name: SUITE, value: mmlu}] # <= 32 literal variables
      suspend: false

Every violation is reported as a :class:`Blocked` (reason, field, message) rather than
raised: a ModelBackfill that the XRD's CEL rules would have rejected still gets a clear
phase, and any Job it runs is cancelled (a change of spec), instead of a fatal result
that would leave a running Job alone.

Env names follow the portable C-identifier rule (``[A-Za-z_][A-Za-z0-9_]*``): every
shell and every Kubernetes version accept it (Kubernetes relaxed its own rule in 1.32,
https://kubernetes.io/docs/tasks/inject-data-application/define-environment-variable-container/).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from function.core.errors import pydantic_errors
from function.core.timeutil import parse_duration
from function.naming import WORKLOAD_CLASS_ENV

MAX_ENV = 32
MIN_REPEAT_SECONDS = 60.0
DEFAULT_IDLE_FOR = "10m"
DEFAULT_MAX_RUN_DURATION = "30m"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Env the function injects into every container of a backfill Job; users may not set them.
ENDPOINT_ENV = "MODELPLANE_ENDPOINT"
RESERVED_ENV = frozenset({WORKLOAD_CLASS_ENV, ENDPOINT_ENV, "NVIDIA_VISIBLE_DEVICES"})
# Spec fields that do not define the work: toggling them is not a "change of the spec".
# ``crossplane`` is where Crossplane v2 keeps compositionRef and resourceRefs.
_NOT_HASHED = frozenset({"suspend", "crossplane"})


# What to write where a value of the wrong shape is easy to give (the error says it).
SHAPES = {
    "spec.modelRef": "an object {name: <ModelDeployment>}",
    "spec.modelRef.name": "a string (the ModelDeployment's name)",
    "spec.templateRef": "an object {name: <CronJob>}",
    "spec.templateRef.name": "a string (the CronJob's name)",
    "spec.env": "a list [{name: <NAME>, value: <value>}]",
    "spec.env[]": "an object {name: <NAME>, value: <value>}",
    "spec.idleFor": "a Go duration such as 10m",
    "spec.maxRunDuration": "a Go duration such as 30m",
    "spec.repeatAfter": 'a Go duration such as 24h, or "0"',
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Ref(_Model):
    """A reference by name in the ModelBackfill's namespace."""

    name: str = Field(min_length=1, max_length=253)


class EnvVar(_Model):
    """A literal env variable (no ``valueFrom``)."""

    name: str
    value: str = ""


class BackfillSpec(_Model):
    """The ModelBackfill spec as authored (durations are Go duration strings)."""

    modelRef: Ref
    templateRef: Ref
    idleFor: str | int = DEFAULT_IDLE_FOR
    maxRunDuration: str | int = DEFAULT_MAX_RUN_DURATION
    repeatAfter: str | int = "0"
    env: list[EnvVar] = Field(default_factory=list)
    suspend: bool = False


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a backfill cannot run: a CamelCase ``reason``, the ``field`` and a message."""

    reason: str
    field: str
    message: str


@dataclass(frozen=True, slots=True)
class Parsed:
    """A valid spec with durations in seconds."""

    spec: BackfillSpec
    idle_for: float
    max_run_seconds: int
    repeat_after: float

    @property
    def env(self) -> list[tuple[str, str]]:
        """The env overrides as ``(name, value)`` pairs, in order."""
        return [(e.name, e.value) for e in self.spec.env]


def spec_hash(spec: dict[str, Any], parsed: Parsed | None = None) -> str:
    """A stable digest of the fields that define the work (all but ``suspend``).

    Args:
        spec: The XR's spec as plain Python.
        parsed: :func:`parse` of ``spec`` when the caller has it (parsed here otherwise).

    Returns:
        16 hex characters of sha256. For a valid spec it is taken over canonical
        values, as the experiment's is: durations in seconds (``15m`` and ``900s``,
        or an omitted default and the default spelled out, hash alike), env sorted
        by name (names are unique), refs by name. For an invalid spec, over its
        canonical JSON (numbers normalised so that ``3`` and ``3.0`` hash alike).
    """
    if parsed is None:
        p = parse(spec)
        parsed = p if isinstance(p, Parsed) else None
    if parsed is not None:
        doc = {
            "modelRef": parsed.spec.modelRef.name,
            "templateRef": parsed.spec.templateRef.name,
            "idleFor": parsed.idle_for,
            "maxRunDuration": parsed.max_run_seconds,
            "repeatAfter": parsed.repeat_after,
            "env": sorted(parsed.env),
        }
        data = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(b"canonical\x00" + data.encode()).hexdigest()[:16]

    def norm(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    body = {k: norm(v) for k, v in spec.items() if k not in _NOT_HASHED}
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


# Go's longest time.Duration (2^63 - 1 ns), in seconds: what Kubernetes could store.
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9


def _duration(spec: BackfillSpec, field: str) -> float:
    try:
        seconds = parse_duration(getattr(spec, field))
    except ValueError as e:
        raise _Fail(Blocked("InvalidSpec", f"spec.{field}", f"spec.{field}: {e}")) from None
    if seconds > MAX_DURATION_SECONDS:
        raise _Fail(
            Blocked(
                "InvalidSpec",
                f"spec.{field}",
                f"spec.{field}: {getattr(spec, field)!r} is longer than the longest duration "
                "(about 292 years)",
            )
        )
    return seconds


class _Fail(Exception):
    def __init__(self, blocked: Blocked) -> None:
        super().__init__(blocked.message)
        self.blocked = blocked


def parse(raw: dict[str, Any]) -> Parsed | Blocked:
    """Validate ``raw`` (the XR's spec as plain Python).

    Returns:
        :class:`Parsed`, or the first :class:`Blocked` found, checked in this order:
        structure (``InvalidSpec``), durations (``InvalidSpec``), ``repeatAfter``
        (``InvalidRepeatAfter``), the number of env entries (``TooManyEnvVars``), env
        names (``InvalidEnvName``, including duplicates), reserved names
        (``ReservedEnvName``).
    """
    try:
        spec = BackfillSpec.model_validate(raw)
    except ValidationError as exc:
        err = pydantic_errors("spec", exc, SHAPES)
        return Blocked("InvalidSpec", err.field, str(err))
    try:
        idle = _duration(spec, "idleFor")
        run = _duration(spec, "maxRunDuration")
        repeat = _duration(spec, "repeatAfter")
    except _Fail as f:
        return f.blocked
    if idle <= 0:
        return Blocked("InvalidSpec", "spec.idleFor", "spec.idleFor must be longer than 0")
    if run < 1:
        return Blocked(
            "InvalidSpec", "spec.maxRunDuration", "spec.maxRunDuration must be at least 1s"
        )
    if 0 < repeat < MIN_REPEAT_SECONDS:
        return Blocked(
            "InvalidRepeatAfter",
            "spec.repeatAfter",
            f"spec.repeatAfter is {spec.repeatAfter}: use 0 for a one-shot backfill or at "
            f"least 1m between runs",
        )
    if len(spec.env) > MAX_ENV:
        return Blocked(
            "TooManyEnvVars",
            "spec.env",
            f"spec.env has {len(spec.env)} entries; at most {MAX_ENV} are allowed",
        )
    seen: set[str] = set()
    for i, var in enumerate(spec.env):
        where = f"spec.env[{i}].name"
        if not ENV_NAME.match(var.name):
            return Blocked(
                "InvalidEnvName",
                where,
                f"{where} {var.name!r} is not a valid env variable name "
                f"(letters, digits and _, not starting with a digit)",
            )
        if var.name in seen:
            return Blocked("InvalidEnvName", where, f"{where} {var.name!r} is declared twice")
        seen.add(var.name)
        if var.name in RESERVED_ENV:
            return Blocked(
                "ReservedEnvName",
                where,
                f"{where} {var.name!r} is reserved: the function sets "
                f"{', '.join(sorted(RESERVED_ENV))} in every backfill container",
            )
    return Parsed(spec, idle, max(1, math.ceil(run)), repeat)


# ---- The GPU guard -----------------------------------------------------------

# Extended-resource domains whose every resource is an accelerator, and resource names
# that are accelerators in any domain (device plugins: NVIDIA ``nvidia.com/gpu`` and
# ``nvidia.com/mig-<profile>``, AMD ``amd.com/gpu``, Intel ``gpu.intel.com/i915|xe``,
# Habana ``habana.ai/gaudi``, AWS ``aws.amazon.com/neuron*``, Google ``google.com/tpu``).
_ACCELERATOR_DOMAINS = frozenset({"nvidia.com", "amd.com", "gpu.intel.com", "habana.ai"})
_ACCELERATOR_NAME = re.compile(r"(gpu|mig-|neuron|tpu|gaudi|fpga)", re.IGNORECASE)


def is_accelerator(resource: str) -> bool:
    """True when the resource name ``resource`` (a requests/limits key) is an accelerator."""
    domain, sep, name = resource.rpartition("/")
    if not sep:
        return False  # cpu, memory, ephemeral-storage, hugepages-*: core resources
    return domain.lower() in _ACCELERATOR_DOMAINS or bool(_ACCELERATOR_NAME.search(name))


def _resource_uses(resources: Any, where: str) -> list[str]:
    found: list[str] = []
    if not isinstance(resources, dict):
        return found
    for kind in ("requests", "limits"):
        for key in sorted(_obj(resources.get(kind)).keys()):
            if is_accelerator(str(key)):
                found.append(f"{where}.resources.{kind}[{key}]")
    if resources.get("claims"):
        found.append(f"{where}.resources.claims")
    return found


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one (templates may be malformed)."""
    return value if isinstance(value, dict) else {}


def accelerator_uses(cronjob: dict[str, Any]) -> list[str]:
    """Every place where a CronJob's pod template asks for an accelerator.

    Looks at requests and limits of init and regular containers and of the pod
    (pod-level ``resources``), container ``resources.claims`` and the pod's
    ``resourceClaims`` (Dynamic Resource Allocation,
    https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/).
    A declaration counts even with a quantity of 0: backfill never declares devices.

    Returns:
        Field paths relative to the CronJob, sorted as found; empty when none.
    """
    base = "spec.jobTemplate.spec.template.spec"
    pod_spec = _obj(cronjob)
    for key in ("spec", "jobTemplate", "spec", "template", "spec"):
        pod_spec = _obj(pod_spec.get(key))
    found: list[str] = []
    for group in ("initContainers", "containers"):
        containers = pod_spec.get(group)
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(c, dict):
                name = c.get("name") or i
                found.extend(_resource_uses(c.get("resources"), f"{base}.{group}[{name}]"))
    found.extend(_resource_uses(pod_spec.get("resources"), base))
    if pod_spec.get("resourceClaims"):
        found.append(f"{base}.resourceClaims")
    return found
