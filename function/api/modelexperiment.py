"""The ModelExperiment spec, validated with pydantic, and its canonical hash.

Shape (``modelplane.ai/v1alpha1`` ModelExperiment, namespaced)::

    spec:
      candidate:                  # a ModelDeployment's template.spec, plus backend
        backend: vllm             # engine the evaluation addresses: MODELS=<candidate>=<backend>
        clusterSelector: {...}    # optional, full LabelSelector
        modelCacheRef: {name: qwen-cache}
        tolerations: [...]
        serving: {...}
        engines: [...]            # as in ModelDeployment (members[], template, ...)
      gauntlet:
        templateRef: {name: eval} # a batch/v1 CronJob in the experiment's namespace
        env: [{name: TASKS, value: gsm8k}]   # <= 32 literal variables; MODELS is reserved
      timeout: 30m                # Go duration, > 0; default 30m
      suspend: false
      repeatAfter: "0"            # 0 = one-shot; otherwise a Go duration >= 1m
      historyLimit: 5             # 1..20; only with repeatAfter (default 5)
      artifactGate:
        modelCacheRef: {name: qwen-cache}
        requireValidation: false
        requirePublishedDigest: false
        requireSourceMatch: false

The same rules are enforced at admission by the XRD's CEL rules
(``compositions/modelexperiment/definition.yaml``); the function checks them again
because an XR may reach it without admission (render, an older XRD).

This module also owns the ModelExperiment's status contract (written by
:mod:`function.composers.experiment`): the :data:`VERDICT` condition and its reasons
(:data:`VERDICT_REASONS`), which the metrics labels read.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from function.api.fields import Ref, WholeInt
from function.api.modelreplica import Engine, NodeSelector
from function.core.errors import SpecError, pydantic_errors, quoted
from function.core.timeutil import parse_duration
from function.manifests.podrules import check_tolerations
from function.manifests.workloads import ENGINE_CONTAINER, check_template
from function.scheduling.selectors import LabelSelector
from function.serving.env import (
    MAX_LITERAL_ENV,
    LiteralEnvVar,
    check_literal_env,
)
from function.serving.flashloader import check_level

MAX_ENV = MAX_LITERAL_ENV
# Variables the function forces into every gauntlet container; a user may not set them.
ENV_MODELS = "MODELS"
ENV_ENDPOINT = "MODELPLANE_ENDPOINT"
RESERVED_ENV = (ENV_MODELS, ENV_ENDPOINT)
MIN_REPEAT_SECONDS = 60.0
DEFAULT_TIMEOUT = "30m"
# The Warning event when a value read back from the XR's status is not the one the
# function derives from trusted inputs (the spec, required and observed resources): the
# derived value is used. Status is not trusted (review 20b F1).
STATUS_IGNORED = "StatusIgnored"
DEFAULT_HISTORY_LIMIT = 5
MAX_HISTORY_LIMIT = 20


# ---- the served model name (issue 13) -------------------------------------------------

# The flag vLLM, SGLang and TGI take for the name a model is served (and addressed) as.
SERVED_NAME_FLAG = "--served-model-name"
SERVED_NAME_ENV = "MODELPLANE_SERVED_MODEL_NAME"
SERVED_NAME_REF = f"$({SERVED_NAME_ENV})"
_IN_STRING = re.compile(r"--served-model-name(?:=|\s+)[\'\"]?([^\s\'\"]+)")
_REFS = frozenset({SERVED_NAME_REF, f"${{{SERVED_NAME_ENV}}}", f"${SERVED_NAME_ENV}"})


def engine_words(template: Any, where: str) -> list[tuple[str, list[Any]]]:
    """``(path, list)`` of the ``command`` and ``args`` of a member's engine containers.

    The engine containers are those named ``engine``, or every container when none is
    (as the candidate's env injection picks them). ``where`` prefixes the paths
    (``engines[0].members[0]``).
    """
    pod = template.get("spec") if isinstance(template, dict) else None
    cs = pod.get("containers") if isinstance(pod, dict) else None
    containers = [
        (i, c) for i, c in enumerate(cs if isinstance(cs, list) else []) if isinstance(c, dict)
    ]
    engines = [(i, c) for i, c in containers if c.get("name") == ENGINE_CONTAINER] or containers
    out = []
    for ci, c in engines:
        for key in ("command", "args"):
            words = c.get(key)
            if isinstance(words, list):
                out.append((f"{where}.template.spec.containers[{ci}].{key}", words))
    return out


def served_name_in_strings(words: list[Any]) -> list[tuple[int, str]]:
    """``(index, name)`` where a string (a shell script) names another served model.

    ``--served-model-name`` as its own element, or ``--served-model-name=<v>``, can be
    forced (:func:`force_served_name`); inside a longer string it cannot, unless it
    already refers to ``$(MODELPLANE_SERVED_MODEL_NAME)`` (or ``$VAR``/``${VAR}``).
    """
    out = []
    for i, w in enumerate(words):
        if not isinstance(w, str) or SERVED_NAME_FLAG not in w:
            continue
        if w == SERVED_NAME_FLAG or w.startswith(SERVED_NAME_FLAG + "="):
            continue
        for m in _IN_STRING.finditer(w):
            if m.group(1) not in _REFS:
                out.append((i, m.group(1)))
    return out


def force_served_name(words: list[Any]) -> list[tuple[int, str]]:
    """Point every ``--served-model-name`` element of ``words`` at the candidate, in place.

    ``--served-model-name=<v>`` becomes ``--served-model-name=$(MODELPLANE_SERVED_MODEL_NAME)``;
    ``--served-model-name <v> [<more names>]`` gets its first value replaced (the engine
    reports and answers to the first name). Returns ``(index, old value)`` of each
    element changed.
    """
    changed = []
    for i, w in enumerate(words):
        if not isinstance(w, str):
            continue
        if w.startswith(SERVED_NAME_FLAG + "="):
            value = w[len(SERVED_NAME_FLAG) + 1 :]
            if value != SERVED_NAME_REF:
                words[i] = f"{SERVED_NAME_FLAG}={SERVED_NAME_REF}"
                changed.append((i, value))
        elif w == SERVED_NAME_FLAG and i + 1 < len(words):
            nxt = words[i + 1]
            if isinstance(nxt, str) and not nxt.startswith("-") and nxt != SERVED_NAME_REF:
                words[i + 1] = SERVED_NAME_REF
                changed.append((i + 1, nxt))
    return changed


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


BACKEND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")


class Candidate(_Model):
    """A ModelDeployment's ``template.spec`` plus ``backend``; unknown fields pass through.

    The ModelDeployment XRD and composer check the rest when the candidate is applied.
    """

    backend: StrictStr = Field(min_length=1, max_length=63)
    clusterSelector: dict[str, Any] | None = None
    modelCacheRef: Ref | None = None
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    serving: dict[str, Any] | None = None
    shmSizeLimit: StrictStr | None = None
    flashLoader: dict[str, Any] | None = None
    engines: list[Engine] = Field(min_length=1)

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        if not BACKEND.match(v):
            raise ValueError(
                "must be an engine name of letters, digits, '.', '_' or '-' (it is written "
                "into MODELS=<candidate>=<backend>)"
            )
        return v

    @model_validator(mode="after")
    def _served_name_addressable(self) -> Candidate:
        # A served model name the function cannot force (inside a shell string) blocks:
        # the gauntlet addresses the candidate by its own name.
        for ei, e in enumerate(self.engines):
            for mi, m in enumerate(e.members):
                for path, words in engine_words(m.template, f"engines[{ei}].members[{mi}]"):
                    for i, value in served_name_in_strings(words):
                        raise ValueError(
                            f"{path}[{i}] names the served model {quoted(value)} inside a string "
                            "the function cannot rewrite; the gauntlet addresses the "
                            "candidate by its own name: write "
                            f"{SERVED_NAME_FLAG}={SERVED_NAME_REF} there"
                        )
        return self

    @model_validator(mode="after")
    def _multi_node_needs_cache(self) -> Candidate:
        multi = any(m.role in ("Leader", "Worker") for e in self.engines for m in e.members)
        if multi and self.modelCacheRef is None:
            raise ValueError("a multi-node engine (a Leader with Workers) requires modelCacheRef")
        return self


class Gauntlet(_Strict):
    """The evaluation: a CronJob to copy and literal env to apply."""

    templateRef: Ref
    env: list[LiteralEnvVar] = Field(default_factory=list, max_length=MAX_ENV)

    @field_validator("env")
    @classmethod
    def _unique(cls, v: list[LiteralEnvVar]) -> list[LiteralEnvVar]:
        check_literal_env(
            v,
            RESERVED_ENV,
            "the function sets it to the candidate, so a production lane can never be "
            "evaluated and recorded as the candidate's verdict",
        )
        return v

    def sorted_env(self) -> list[tuple[str, str]]:
        """``(name, value)`` pairs in the deterministic order they are applied (by name)."""
        return sorted((e.name, e.value) for e in self.env)


class ArtifactGate(_Strict):
    """What must be true of a ModelCache before a candidate may claim hardware."""

    modelCacheRef: Ref
    requireValidation: StrictBool = False
    requirePublishedDigest: StrictBool = False
    requireSourceMatch: StrictBool = False


# What to write where a value of the wrong shape is easy to give (the error says it).
SHAPES = {
    "spec.gauntlet.templateRef": "an object {name: <CronJob>}",
    "spec.gauntlet.env": "a list [{name: <NAME>, value: <value>}]",
    "spec.gauntlet.env[]": "an object {name: <NAME>, value: <value>}",
    "spec.candidate.modelCacheRef": "an object {name: <ModelCache>}",
    "spec.artifactGate.modelCacheRef": "an object {name: <ModelCache>}",
}


class ExperimentSpec(BaseModel):
    """The validated ``spec`` of a ModelExperiment (see the module docstring).

    Unknown fields are ignored rather than rejected: Crossplane keeps its own
    machinery in every XR's ``spec.crossplane`` (composition reference,
    ``resourceRefs``), and the API server prunes any other unknown field.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    candidate: Candidate
    gauntlet: Gauntlet
    timeout: StrictStr = DEFAULT_TIMEOUT
    suspend: StrictBool = False
    repeatAfter: StrictStr = "0"
    historyLimit: WholeInt | None = Field(default=None, ge=1, le=MAX_HISTORY_LIMIT)
    artifactGate: ArtifactGate | None = None

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: str) -> str:
        if parse_duration(v) <= 0:
            raise ValueError("must be a positive duration such as 30m")
        return v

    @field_validator("repeatAfter")
    @classmethod
    def _repeat(cls, v: str) -> str:
        s = parse_duration(v)
        if 0 < s < MIN_REPEAT_SECONDS:
            raise ValueError("must be 0 (one-shot) or at least 1m")
        return v

    @property
    def timeout_seconds(self) -> float:
        """The timeout in seconds (> 0)."""
        return parse_duration(self.timeout)

    @property
    def repeat_seconds(self) -> float:
        """The cool-down between successful runs in seconds (0: one-shot)."""
        return parse_duration(self.repeatAfter)

    @property
    def history_limit(self) -> int:
        """How many earlier run records are kept."""
        return self.historyLimit if self.historyLimit is not None else DEFAULT_HISTORY_LIMIT


def drop_nulls(value: Any) -> Any:
    """Remove null fields, as the API server prunes them before storing an object."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def parse_spec(spec: dict[str, Any]) -> ExperimentSpec:
    """Validate a ModelExperiment spec.

    Raises:
        SpecError: naming the first invalid field (``spec.gauntlet.env[0].name``) and
            listing up to five problems.
    """
    try:
        parsed = ExperimentSpec.model_validate(drop_nulls(spec))
    except ValidationError as e:
        raise pydantic_errors("spec", e, SHAPES) from None
    except ValueError as e:  # a duration that does not parse inside a validator
        raise SpecError("spec", str(e)) from None
    if parsed.historyLimit is not None and parsed.repeat_seconds == 0:
        raise SpecError(
            "spec.historyLimit", "is only allowed with a non-zero spec.repeatAfter (remove it)"
        )
    if parsed.candidate.clusterSelector is not None:
        LabelSelector.parse(parsed.candidate.clusterSelector, "spec.candidate.clusterSelector")
    check_level(parsed.candidate.flashLoader, parsed.candidate.shmSizeLimit, "spec.candidate")
    check_tolerations(parsed.candidate.tolerations, "spec.candidate.tolerations")
    for ei, engine in enumerate(parsed.candidate.engines):
        for mi, member in enumerate(engine.members):
            # What the candidate's replicas would refuse, said here where it was written:
            # in the template as the candidate carries it (its pod labels are the
            # experiment's own, the function's, so none of the tenant's is checked).
            check_template(
                candidate_template(member.template, {}),
                f"spec.candidate.engines[{ei}].members[{mi}].template",
            )
            if member.nodeSelector is not None:
                _check_devices(
                    member.nodeSelector, f"spec.candidate.engines[{ei}].members[{mi}].nodeSelector"
                )
    return parsed


def candidate_template(template: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """A candidate member's pod template as the candidate ModelDeployment carries it:
    ``template`` with ``metadata.labels`` replaced by ``labels``, the experiment's own
    (:func:`function.composers.experiment.children.template_labels`), so no Service
    that selects production pods can select the candidate. The labels the tenant wrote
    there never reach a cluster; everything else is carried as written.

    Args:
        template: A member's ``template`` as written (a dict; not changed).
        labels: The pod labels to carry (``{}`` to check the tenant's parts alone).

    Returns:
        A new dict with a new ``metadata`` (also when ``template`` had none or one of
        the wrong type); its other values are ``template``'s own objects, not copies.
    """
    meta = template.get("metadata")
    return {
        **template,
        "metadata": {**(meta if isinstance(meta, dict) else {}), "labels": dict(labels)},
    }


def _check_devices(raw: dict[str, Any], field: str) -> None:
    """A candidate member's ``nodeSelector`` as its ModelDeployment would check it (the
    shape, then every CEL selector compiled): an experiment is not admitted with a
    candidate its deployment would refuse (``InvalidDeviceSelector``).

    Raises:
        SpecError: naming the field (``...nodeSelector.devices[0].selectors[0].cel``).
    """
    from function.scheduling.devices import InvalidSelector, compile_selector

    try:
        selector = NodeSelector.model_validate(raw)
    except ValidationError as e:
        raise pydantic_errors(field, e) from None
    for di, device in enumerate(selector.devices):
        for si, s in enumerate(device.selectors):
            path = f"{field}.devices[{di}].selectors[{si}].cel"
            try:
                compile_selector(s.cel, path)
            except InvalidSelector as e:
                raise SpecError(path, str(e)) from None


def definition_hash(spec: ExperimentSpec) -> str:
    """A canonical hash of what defines a run: candidate, gauntlet, timeout and gate.

    The experiment's ``status.specHash``: a change of it is a new run (as the backfill's
    ``function.api.modelbackfill.definition_hash`` is a new attempt).

    ``suspend``, ``repeatAfter`` and ``historyLimit`` are excluded: pausing or
    rescheduling is not a different experiment. Maps are hashed with sorted keys
    and env by name, so reordered fields are no change; defaults are applied
    first, so spelling out a default is no change either. Durations are compared
    by value (``90s`` == ``1m30s``).

    Returns:
        16 hex characters of a sha256.
    """
    doc = spec.model_dump(
        mode="json",
        exclude={"suspend", "repeatAfter", "historyLimit"},
        exclude_none=True,
    )
    doc["timeout"] = spec.timeout_seconds
    doc["gauntlet"]["env"] = [list(p) for p in spec.gauntlet.sorted_env()]
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


# ---- status contract (written by function.composers.experiment; read by the metrics
# labels, function.ops.metrics) ------------------------------------------------------

# The experiment's verdict condition; its reason is one of VERDICT_REASONS once decided.
VERDICT = "Verdict"
# The condition that says whether the run can go on (its reason: the phase or why not).
RUNNABLE = "Runnable"
# Verdict reasons (status.verdict.reason, the Verdict condition).
PASSED = "GauntletPassed"
FAILED = "GauntletFailed"
TIMED_OUT = "TimedOut"
CANDIDATE_FAILED = "CandidateFailed"
CANDIDATE_LOST = "CandidateLost"
VERDICT_REASONS = frozenset({PASSED, FAILED, TIMED_OUT, CANDIDATE_FAILED, CANDIDATE_LOST})
# Evaluating, while provider-kubernetes reports the gauntlet Job's Object Synced=False (the
# workload cluster refused the Job: quota, admission, validation; or cannot be reached):
# status.reason and the Verdict condition's reason, with one Warning event on entry.
GAUNTLET_NOT_SYNCED = "GauntletNotSynced"
# The gauntlet's CronJob (spec.gauntlet.templateRef) is missing or cannot template a Job:
# status.reason and Runnable=False, Blocked before admission, held after it.
TEMPLATE_NOT_FOUND = "TemplateNotFound"
TEMPLATE_INVALID = "TemplateInvalid"
TEMPLATE_REASONS = frozenset({TEMPLATE_NOT_FOUND, TEMPLATE_INVALID})
# The candidate's ModelCache (spec.candidate.modelCacheRef) does not exist: status.reason
# and Runnable=False, Blocked before admission (no candidate is composed, the clock has not
# started; the run is admitted once the cache exists), held for an edit. A cache deleted
# after admission is the candidate's own wait (its ReplicasScheduled CacheNotFound), which
# the run's deadline bounds.
CANDIDATE_CACHE_NOT_FOUND = "CandidateCacheNotFound"
# The artifact gate's condition, returned on every call (Crossplane keeps the last value
# of a condition type the function stops returning, so one left out stays stale: a held
# edit's False outlived the edit, review 16a). Before admission, and for a held edit, the
# spec's gate as evaluated (even when its CronJob blocks first): True (ArtifactGateOpen,
# or GATE_NOT_SET without spec.artifactGate) or False with the reason that closes it.
# From admission on, the gate the run opened with (status.gate): True ArtifactGateOpen,
# or GATE_NOT_SET for a run admitted without a gate. Unknown, GATE_NOT_EVALUATED, when
# the gate is not evaluated (suspended, the ModelCache not resolved yet, an invalid spec);
# the message says why.
ARTIFACT_GATE = "ArtifactGate"
GATE_OPEN = "ArtifactGateOpen"
GATE_NOT_SET = "NoArtifactGate"
GATE_NOT_EVALUATED = "ArtifactGateNotEvaluated"
