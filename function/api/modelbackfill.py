"""The ModelBackfill spec, validated with pydantic, and its definition hash.

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

An invalid spec (one the XRD's CEL rules reject at admission) is a
:class:`~function.core.errors.SpecError` naming the field, as for every other kind:
the runner returns a fatal result, so Crossplane applies nothing and every composed
resource (a running Job included, bounded by its ``activeDeadlineSeconds``) stays as
it is until the spec is valid again.

Env names follow the one rule of :mod:`function.serving.env` (a C identifier);
``MODELPLANE_WORKLOAD_CLASS``, ``MODELPLANE_ENDPOINT`` and ``NVIDIA_VISIBLE_DEVICES``
are reserved: the function sets them in every container of a backfill Job.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
)

from function.api.fields import Ref
from function.core.errors import SpecError, pydantic_errors
from function.core.timeutil import parse_duration
from function.naming import WORKLOAD_CLASS_ENV
from function.serving.env import MAX_LITERAL_ENV, LiteralEnvVar, check_literal_env

MAX_ENV = MAX_LITERAL_ENV
MIN_REPEAT_SECONDS = 60.0
DEFAULT_IDLE_FOR = "10m"
DEFAULT_MAX_RUN_DURATION = "30m"
# Env the function injects into every container of a backfill Job; users may not set them.
ENDPOINT_ENV = "MODELPLANE_ENDPOINT"
RESERVED_ENV = frozenset({WORKLOAD_CLASS_ENV, ENDPOINT_ENV, "NVIDIA_VISIBLE_DEVICES"})


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


class BackfillSpec(BaseModel):
    """The ModelBackfill spec as authored (durations are Go duration strings).

    Unknown fields are ignored: Crossplane keeps its own machinery in every XR's
    ``spec.crossplane``, and the API server prunes any other unknown field.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    modelRef: Ref
    templateRef: Ref
    idleFor: StrictStr = DEFAULT_IDLE_FOR
    maxRunDuration: StrictStr = DEFAULT_MAX_RUN_DURATION
    repeatAfter: StrictStr = "0"
    env: list[LiteralEnvVar] = Field(default_factory=list, max_length=MAX_ENV)
    suspend: StrictBool = False

    @field_validator("env")
    @classmethod
    def _env(cls, v: list[LiteralEnvVar]) -> list[LiteralEnvVar]:
        check_literal_env(
            v,
            RESERVED_ENV,
            f"the function sets {', '.join(sorted(RESERVED_ENV))} in every backfill container",
        )
        return v


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


def definition_hash(parsed: Parsed) -> str:
    """A stable digest of what defines the work (every field but ``suspend``).

    Taken over canonical values, as the experiment's is
    (``function.api.modelexperiment.definition_hash``): durations in seconds (``15m``
    and ``900s``, or an omitted default and the default spelled out, hash alike), env
    sorted by name (names are unique), refs by name. A change of it cancels the
    attempt in progress (``status.specHash``).

    Returns:
        16 hex characters of sha256.
    """
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


def _duration(spec: BackfillSpec, field: str) -> float:
    """``spec.<field>`` in seconds (at most Go's longest duration: parse_duration)."""
    try:
        return parse_duration(getattr(spec, field))
    except ValueError as e:
        raise SpecError(f"spec.{field}", str(e)) from None


def parse(raw: object) -> Parsed:
    """Validate ``raw`` (the XR's spec as plain Python).

    Raises:
        SpecError: naming the first invalid field: the structure and the env (names,
            duplicates, reserved names, at most 32), then the durations (``idleFor``
            more than 0, ``maxRunDuration`` at least 1s, ``repeatAfter`` 0 or at
            least 1m).
    """
    try:
        spec = BackfillSpec.model_validate(raw)
    except ValidationError as exc:
        raise pydantic_errors("spec", exc, SHAPES) from None
    idle = _duration(spec, "idleFor")
    run = _duration(spec, "maxRunDuration")
    repeat = _duration(spec, "repeatAfter")
    if idle <= 0:
        raise SpecError("spec.idleFor", "must be longer than 0")
    if run < 1:
        raise SpecError("spec.maxRunDuration", "must be at least 1s")
    if 0 < repeat < MIN_REPEAT_SECONDS:
        raise SpecError(
            "spec.repeatAfter",
            f"is {spec.repeatAfter}: use 0 for a one-shot backfill or at least 1m between runs",
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
