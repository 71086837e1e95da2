"""ModelExperiment: a bounded canary that turns a candidate model into a typed verdict.

A ModelExperiment deploys an isolated candidate ModelDeployment, evaluates it with
a one-shot Job copied from an existing CronJob (the "gauntlet"), records the
verdict, and releases the hardware. It never edits an existing ModelDeployment.

Lifecycle of one run (``status.phase``):

- ``Blocked``: nothing may claim a GPU yet, and no candidate exists. Reasons
  (condition ``Runnable=False``): ``InvalidSpec`` (the field is named; existing
  children are kept untouched, as for any bad input), ``TemplateNotFound`` /
  ``TemplateInvalid`` (the CronJob of ``spec.gauntlet.templateRef``), and the
  artifact-gate reasons ``ArtifactCacheNotFound``, ``ArtifactCacheFailed``,
  ``ArtifactCacheNotReady`` (with progress "2/3 clusters ready"),
  ``ArtifactSourceMismatch``, ``ArtifactValidationMissing``,
  ``ArtifactDigestMissing``. Not terminal: fixing the cause retries.
- ``Deploying``: the gate opened (at admission: the CronJob exists and the gate
  is open), so the candidate is composed: a ModelDeployment with one replica,
  named after the run, whose template and pod labels are only the experiment's
  own (no label of the candidate spec that a Service could select survives), with
  ``MODELPLANE_SERVED_MODEL_NAME=<candidate>`` in every engine container and the
  gate's evidence in annotations. The timeout clock starts here
  (``status.candidate.createdAt``/``deadline``), not while waiting at the gate.
- ``Serving``: the candidate is Ready (Crossplane's ``Ready`` condition, or
  ``ReplicasReady=True`` with a ready replica: see :func:`candidate_ready`); the
  function finds its endpoint and cluster from its ModelReplica (label
  ``modelplane.ai/deployment=<candidate>``) and the cluster's provider config.
- ``Evaluating``: the gauntlet Job runs on the candidate's cluster, as a
  provider-kubernetes Object. It is the CronJob's ``jobTemplate`` with
  ``gauntlet.env`` set by name in every regular container (sorted by name; an entry
  of the template with the same name is replaced in place), and
  ``MODELS=<candidate>=<backend>`` and ``MODELPLANE_ENDPOINT=<endpoint>`` forced
  first into every container, init containers included (any entry of those names
  in the template, such as a production lane's MODELS, is dropped). Its
  ``activeDeadlineSeconds`` is capped at the time left before the deadline;
  ``ttlSecondsAfterFinished`` and ``suspend`` are dropped (evidence is retained by
  the run history, not by a TTL).
- ``Succeeded`` / ``Failed``: ``status.verdict {pass, reason, summary, completedAt}``
  with reason ``GauntletPassed``, ``GauntletFailed``, ``TimedOut``,
  ``CandidateFailed`` (hydration failed, or a scheduling error that waiting cannot
  fix) or ``CandidateLost`` (the candidate disappeared after it was seen, or no longer
  has a replica on the cluster the gauntlet runs on). The
  candidate is released in the same call; the Job stays as evidence, switched to
  management policies ``[Observe, Delete]`` so provider-kubernetes never re-creates
  it if it disappears, and deletes it when its run leaves the history. A Job that
  finished before the deadline counts even if the function sees it later.
- ``Suspended``: ``spec.suspend`` removes the running candidate and Job (the run
  starts over, with a new clock, on resume); verdicts and evidence are kept.

Runs: ``status.run`` names the current or last run, ``status.runNumber`` counts
them. A change of the spec's canonical hash (``experiment_model.spec_hash``)
discards the current run's children (a finished run goes to history) and starts a
new run. With ``repeatAfter``, a passed run is repeated at ``status.nextRunAt``
(the response TTL brings the function back); a failed run is terminal (only a spec
change starts another). ``status.history[]`` keeps the earlier runs' verdicts, at
most ``historyLimit``; a record that falls off takes its evidence Job with it.
Run 1 uses plain names (the candidate is named like the experiment); run N > 1
uses ``<experiment>-r<N>``; every child carries ``modelplane.ai/experiment``,
``modelplane.ai/run`` and ``modelplane.ai/generation`` labels, and a Job whose
labels belong to another run never counts.

Composition-resource names: ``candidate-r<N>`` and ``gauntlet-r<N>`` (per run, so
an object of one run is never renamed into another's slot).
"""

from __future__ import annotations

import copy
import datetime
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.modelcache import read_rollup
from function.api.modelexperiment import (
    ENGINE_CONTAINER,
    ENV_ENDPOINT,
    ENV_MODELS,
    SERVED_NAME_ENV,
    SERVED_NAME_REF,
    ExperimentSpec,
    drop_nulls,
    engine_words,
    force_served_name,
    parse_spec,
    spec_hash,
)
from function.core import events, structs
from function.core.errors import SpecError
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.outcome import Outcome
from function.core.timeutil import format_time, parse_time
from function.manifests.jobs import job_from_cronjob
from function.manifests.objects import (
    observed_manifest,
    provider_config_ref,
    remote_object,
    sync_error,
)
from function.naming import (
    DNS1123_LABEL,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_EXPERIMENT,
    LABEL_GENERATION,
    LABEL_RUN,
    MAX_LABEL,
    REMOTE_NAMESPACE,
    child_name,
    label_value,
    labels_with_full,
    short_name,
    source_identity,
)

REQ_TEMPLATE = "gauntlet-template"
REQ_CACHE = "artifact-cache"
REQ_REPLICAS = "candidate-replicas"
REQ_CLUSTER = "candidate-cluster"

ENV_SERVED_MODEL_NAME = SERVED_NAME_ENV

# Annotations on the candidate that record what opened the artifact gate.
ANN_GATE_CACHE = "modelplane.ai/gate-cache"
ANN_GATE_CACHE_UID = "modelplane.ai/gate-cache-uid"
ANN_GATE_CACHE_GENERATION = "modelplane.ai/gate-cache-generation"
ANN_GATE_COMMIT = "modelplane.ai/gate-commit"
ANN_GATE_DIGEST = "modelplane.ai/gate-digest"
ANN_EXPERIMENT = "modelplane.ai/experiment"

# Job finished: the terminal conditions of a batch/v1 Job
# (https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions).
JOB_FINISHED_CEL = (
    "has(object.status) && has(object.status.conditions) && "
    'object.status.conditions.exists(c, (c.type == "Complete" || c.type == "Failed") '
    '&& c.status == "True")'
)
EVIDENCE_POLICIES = ["Observe", "Delete"]

COMMIT = re.compile(r"^[0-9a-f]{40}$")
# The ModelCache XRD accepts a digest with or without the ``sha256:`` prefix.
DIGEST = re.compile(r"^(sha256:)?[0-9a-f]{64}$")
# Cache clusters that belong to the footprint (modelcache: Unavailable clusters cannot
# host a cache; retained entries are outside the selector).
FOOTPRINT_PHASES = frozenset({"Pending", "Hydrating", "Ready", "Failed"})
# ModelDeployment ReplicasScheduled reasons that waiting cannot fix.
FATAL_SCHEDULING = frozenset({"InvalidDeviceSelector", "NoClusterInCacheFootprint"})
ACTIVE_PHASES = frozenset({"Deploying", "Serving", "Evaluating"})

PASSED = "GauntletPassed"
FAILED = "GauntletFailed"
TIMED_OUT = "TimedOut"
CANDIDATE_FAILED = "CandidateFailed"
CANDIDATE_LOST = "CandidateLost"


# ---- names -------------------------------------------------------------------


def run_name(experiment: str, number: int) -> str:
    """Name of run ``number``'s candidate ModelDeployment: ``child_name("modelexperiment",
    <experiment>, "r<N>")``.

    Hashed like every composed name, so it can collide neither with another run's
    candidate (experiment ``a`` run 2 and experiment ``a-r2`` run 1) nor with a
    ModelDeployment the user wrote. The candidate serves under this name (it is the
    served model name the gauntlet addresses).
    """
    return child_name("modelexperiment", experiment, f"r{max(number, 1)}")


def gauntlet_job_name(namespace: str, run: str) -> str:
    """Name of the gauntlet Job of ``run`` (the remote Job and its Object).

    Remote Jobs of every control-plane namespace share ``REMOTE_NAMESPACE`` on a
    workload cluster, so the hash covers the namespace too.
    """
    return short_name(MAX_LABEL, (run, "gauntlet"), (namespace,))


def candidate_key(number: int) -> str:
    """Composition-resource name of the candidate of run ``number``."""
    return f"candidate-r{number}"


def job_key(number: int) -> str:
    """Composition-resource name of the gauntlet Job Object of run ``number``."""
    return f"gauntlet-r{number}"


# ---- run state (read from and written to status) -----------------------------


def _whole(value: Any) -> Any:
    """Turn whole floats back into ints (a Struct holds only doubles: 3 reads as 3.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


VERDICT_REASONS = frozenset({PASSED, FAILED, TIMED_OUT, CANDIDATE_FAILED, CANDIDATE_LOST})
CANDIDATE_FIELDS = {
    "name": str,
    "createdAt": str,
    "deadline": str,
    "seen": bool,
    "releasedAt": str,
}
GATE_FIELDS = {"cache": str, "uid": str, "generation": int, "commit": str, "digest": str}
MAX_COUNT = 10**9


def _count(v: Any) -> int:
    """A non-negative whole number from status, 0 when it is anything else."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return 0
    if v != int(v) or not 0 <= v <= MAX_COUNT:
        return 0
    return int(v)


def _shape(v: Any, fields: dict[str, type]) -> dict[str, Any]:
    """The fields of ``v`` that have the expected type (others are dropped)."""
    if not isinstance(v, dict):
        return {}
    return {
        k: v[k]
        for k, t in fields.items()
        if k in v and isinstance(v[k], t) and not (t is int and isinstance(v[k], bool))
    }


def _gauntlet(v: Any) -> dict[str, Any]:
    """The recorded gauntlet Job, or {} unless every field it is rebuilt from is sound."""
    g = _shape(
        v,
        {
            "job": str,
            "cluster": str,
            "endpoint": str,
            "providerConfig": dict,
            "activeDeadlineSeconds": int,
            "startedAt": str,
        },
    )
    pc = _shape(g.get("providerConfig"), {"kind": str, "name": str})
    if not (g.get("job") and g.get("cluster") and g.get("endpoint") and pc.get("name")):
        return {}
    if not DNS1123_LABEL.match(g["job"]) or len(g["job"]) > MAX_LABEL:
        return {}
    g["providerConfig"] = {"kind": pc.get("kind") or "ClusterProviderConfig", "name": pc["name"]}
    g["activeDeadlineSeconds"] = max(1, min(int(g.get("activeDeadlineSeconds", 1)), MAX_COUNT))
    return g


def _verdict(v: Any) -> dict[str, Any]:
    """A recorded verdict, or {} when it is not one."""
    out = _shape(v, {"pass": bool, "reason": str, "summary": str, "completedAt": str})
    if "pass" not in out or out.get("reason") not in VERDICT_REASONS:
        return {}
    return out


def _record(v: Any) -> dict[str, Any]:
    """A history record, or {} when it is not one."""
    rec = _verdict(v)
    extra = _shape(v, {"run": str, "number": int, "job": str})
    if not rec or not extra.get("run") or not 1 <= extra.get("number", 0) <= MAX_COUNT:
        return {}
    return {
        "run": extra["run"],
        "number": extra["number"],
        **rec,
        **({"job": extra["job"]} if extra.get("job") else {}),
    }


@dataclass
class RunState:
    """What the XR's status remembers between calls (the function is stateless)."""

    number: int = 0
    name: str = ""
    spec_hash: str = ""
    generation: int = 0
    candidate: dict[str, Any] = field(default_factory=dict)
    gauntlet: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] = field(default_factory=dict)
    next_run_at: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    phase: str = ""

    @classmethod
    def read(cls, inputs: Inputs) -> RunState:
        """Read the run state from the XR's last written status.

        Status is input like any other: a field of the wrong shape (an edit by hand,
        an older version of the function) is treated as absent, never trusted.
        """

        def small(key: str) -> Any:
            return _whole(structs.to_py(inputs.status(key)))

        number = _count(inputs.status("runNumber"))
        hist = small("history")
        history = [h for h in (_record(x) for x in hist) if h] if isinstance(hist, list) else []
        return cls(
            number=number,
            name=run_name(inputs.name, number) if number else "",
            spec_hash=structs.get_str(inputs.xr, "status", "specHash"),
            generation=_count(inputs.status("runGeneration")),
            candidate=_shape(small("candidate"), CANDIDATE_FIELDS),
            gauntlet=_gauntlet(small("gauntlet")),
            gate=_shape(small("gate"), GATE_FIELDS),
            verdict=_verdict(small("verdict")),
            next_run_at=structs.get_str(inputs.xr, "status", "nextRunAt"),
            history=history,
            phase=structs.get_str(inputs.xr, "status", "phase"),
        )

    def start(self, experiment: str, number: int, hash_: str, generation: int) -> None:
        """Begin run ``number`` with nothing admitted yet."""
        self.number = number
        self.name = run_name(experiment, number)
        self.spec_hash = hash_
        self.generation = generation
        self.candidate = {}
        self.gauntlet = {}
        self.gate = {}
        self.verdict = {}
        self.next_run_at = ""

    def archive(self) -> None:
        """Move the current run's verdict into history (newest last)."""
        if not self.verdict:
            return
        rec = {"run": self.name, "number": self.number, **self.verdict}
        if self.gauntlet.get("job"):
            rec["job"] = self.gauntlet["job"]
        self.history.append(rec)

    def to_status(self) -> dict[str, Any]:
        """The status fields this composer owns (written in full on every call)."""
        st: dict[str, Any] = {
            "run": self.name,
            "runNumber": self.number,
            "runGeneration": self.generation,
            "specHash": self.spec_hash,
            "history": self.history,
        }
        for key, val in (
            ("candidate", self.candidate),
            ("gauntlet", self.gauntlet),
            ("gate", self.gate),
            ("verdict", self.verdict),
        ):
            if val:
                st[key] = val
        if self.next_run_at:
            st["nextRunAt"] = self.next_run_at
        return st


# ---- the artifact gate ---------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """The artifact gate's decision: open (``reason`` None) or closed with a reason."""

    reason: str | None
    message: str
    record: dict[str, Any] = field(default_factory=dict)


def _count_of(v: Any) -> int:
    """``v`` as a whole number when it is a finite number (not a bool), else 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or abs(v) == float("inf"):
        return 0
    return int(v)


def _names(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _digest(value: str) -> str:
    """A digest in ``sha256:<hex>`` form (the prefix is optional in evidence)."""
    return value if not value or value.startswith("sha256:") else f"sha256:{value}"


def evaluate_gate(spec: ExperimentSpec, namespace: str, cache: Any) -> Gate:
    """Decide whether the artifact gate is open.

    Args:
        spec: The validated spec (``artifactGate`` set).
        namespace: The experiment's namespace (the cache's too).
        cache: The ModelCache (Struct) or None when it does not exist.

    Returns:
        An open gate with the record ``{cache, uid, generation, commit?, digest?}``,
        or a closed gate whose reason is one of ``ArtifactSourceMismatch``,
        ``ArtifactCacheNotFound``, ``ArtifactCacheFailed``, ``ArtifactCacheNotReady``,
        ``ArtifactValidationMissing``, ``ArtifactDigestMissing``.

    A status whose ``source.identity`` is not the identity of the cache's
    ``spec.huggingFace`` (repo and revision; ``naming.source_identity``), or that
    names no source, describes other bytes (or is not known to describe these) and
    keeps the gate closed (``ArtifactCacheNotReady``), so a revision edit never opens
    the gate on the old hydrations' Ready. So does a status whose ``ArtifactReady``
    condition reports an ``observedGeneration`` older than the cache's
    ``metadata.generation``. The footprint and its evidence are the cache's roll-up
    (``function.api.modelcache.read_rollup``: ``summary.total``, ``summary.phases``,
    ``failed[]``, ``evidence[] {commit, digest, clusters, validated}``): ``commit`` 40
    lowercase hex, ``digest`` ``sha256:<64 hex>``, ``validated`` the clusters that
    recorded a checksum validation time.
    """
    gate = spec.artifactGate
    assert gate is not None
    ref = f"{namespace}/{gate.modelCacheRef.name}"
    if gate.requireSourceMatch:
        cand = spec.candidate.modelCacheRef
        if cand is None or cand.name != gate.modelCacheRef.name:
            got = f"{namespace}/{cand.name}" if cand is not None else "no cache"
            return Gate(
                "ArtifactSourceMismatch",
                f"requireSourceMatch: the candidate loads from {got}, not the gated "
                f"ModelCache {ref} (spec.candidate.modelCacheRef)",
            )
    if cache is None:
        return Gate("ArtifactCacheNotFound", f"ModelCache {ref} (spec.artifactGate) not found")
    repo = structs.get_str(cache, "spec", "huggingFace", "repo")
    revision = structs.get_str(cache, "spec", "huggingFace", "revision") or "main"
    reported = structs.get_str(cache, "status", "source", "identity")
    if not repo or reported != source_identity(repo, revision):
        wants = f"{repo}@{revision}" if repo else "a source its spec does not name"
        says = f"source identity {reported}" if reported else "no source"
        return Gate(
            "ArtifactCacheNotReady",
            f"ModelCache {ref} status describes {says}, not {wants}; waiting for it "
            "to report the current source",
        )
    roll = read_rollup(cache)  # the ModelCache's status contract (function.api.modelcache)
    total, ready = roll.total, roll.ready
    progress = f"{ready}/{total} clusters ready"
    if roll.failed_count:
        detail = [f"{n} ({m or 'Failed'})" for n, m in roll.failed]
        return Gate(
            "ArtifactCacheFailed",
            f"ModelCache {ref} failed on {roll.failed_count} cluster(s): {_names(detail)}; "
            f"{progress}",
        )
    generation = structs.get(cache, "metadata", "generation")
    artifact_ready = structs.conditions(cache).get("ArtifactReady")
    seen = structs.get(artifact_ready, "observedGeneration")
    if (
        isinstance(seen, (int, float))
        and isinstance(generation, (int, float))
        and not isinstance(seen, bool)
        and seen < generation
    ):
        # The status describes an older spec (a new revision, a wider footprint).
        return Gate(
            "ArtifactCacheNotReady",
            f"ModelCache {ref} status is for generation {int(seen)}, the cache is at "
            f"generation {int(generation)}; waiting for it to catch up",
        )
    cond_false = artifact_ready is not None and structs.get(artifact_ready, "status") != "True"
    if total == 0 or ready < total or cond_false:
        msg = f"ModelCache {ref} is not ready: {progress}"
        if roll.waiting:
            msg += f"; waiting for {_names(roll.waiting)}"
        elif total == 0:
            msg += "; it has no cluster in its footprint yet"
        elif cond_false:
            msg += "; ArtifactReady is " + (
                structs.get_str(artifact_ready, "message") or "not True"
            )
        return Gate("ArtifactCacheNotReady", msg)
    groups = [(c, _digest(d), n, v) for c, d, n, v in roll.evidence]
    if gate.requireValidation:
        validated = sum(v for _, _, _, v in groups)
        if not roll.evidence_complete or validated < total:
            return Gate(
                "ArtifactValidationMissing",
                f"requireValidation: no recorded checksum validation (evidence.validatedAt) "
                f"on {total - validated} of {total} clusters of ModelCache {ref}",
            )
    if gate.requirePublishedDigest:
        missing = sum(n for c, d, n, _ in groups if not COMMIT.match(c) or not DIGEST.match(d))
        if missing or not roll.evidence_complete or sum(n for *_, n, _ in groups) < total:
            return Gate(
                "ArtifactDigestMissing",
                f"requirePublishedDigest: no commit (40 hex) and sha256 digest recorded on "
                f"{missing or total} of {total} clusters of ModelCache {ref}",
            )
        if len(groups) > 1:
            pairs = [f"{n} cluster(s) {c[:12]}/{d[7:19]}" for c, d, n, _ in groups]
            return Gate(
                "ArtifactDigestMissing",
                f"requirePublishedDigest: clusters of ModelCache {ref} recorded different "
                f"artifacts ({_names(pairs)}); no single digest to certify",
            )
    record: dict[str, Any] = {
        "cache": gate.modelCacheRef.name,
        "uid": structs.get_str(cache, "metadata", "uid"),
        "generation": _count_of(structs.get(cache, "metadata", "generation")),
    }
    if len(groups) == 1 and COMMIT.match(groups[0][0]):
        record["commit"] = groups[0][0]
    if len(groups) == 1 and DIGEST.match(groups[0][1]):
        record["digest"] = groups[0][1]
    checks = [
        n
        for n, on in (
            ("validation", gate.requireValidation),
            ("published digest", gate.requirePublishedDigest),
            ("source match", gate.requireSourceMatch),
        )
        if on
    ]
    msg = f"ModelCache {ref} is ready ({progress})"
    if checks:
        msg += "; verified " + ", ".join(checks)
    return Gate(None, msg, record)


# ---- manifests -----------------------------------------------------------------


def child_labels(experiment: str, st: RunState) -> tuple[dict[str, str], dict[str, str]]:
    """Labels every child of the current run carries, and annotations for long values."""
    return labels_with_full(
        {
            LABEL_EXPERIMENT: experiment,
            LABEL_RUN: str(st.number),
            LABEL_GENERATION: str(st.generation),
        }
    )


# Labels of the candidate's replica and pod templates. The ModelDeployment XRD reserves
# the ``modelplane.ai/`` prefix in template labels for the function's own bookkeeping,
# so the experiment's own template labels live under a sub-domain of it.
TEMPLATE_LABEL_PREFIX = "experiment.modelplane.ai/"


def template_labels(experiment: str, st: RunState) -> dict[str, str]:
    """The only labels the candidate's replica and pod templates carry."""
    labels, _ = labels_with_full(
        {
            TEMPLATE_LABEL_PREFIX + "name": experiment,
            TEMPLATE_LABEL_PREFIX + "run": str(st.number),
            TEMPLATE_LABEL_PREFIX + "generation": str(st.generation),
        }
    )
    return labels


def inject_first(container: dict[str, Any], pairs: Sequence[tuple[str, str]]) -> None:
    """Put literal env ``pairs`` first in ``container["env"]``, then its other entries.

    First, because Kubernetes expands ``$(VAR)`` in an env value only from entries
    defined earlier (command and args may reference any entry); an entry of the same
    name elsewhere in the list is dropped, so applying twice gives the same list.
    (Like ``envinject.inject_env``, but tolerant of a malformed env list.)
    """
    names = {n for n, _ in pairs}
    old = container.get("env")
    env = old if isinstance(old, list) else []
    rest = [e for e in env if not (isinstance(e, dict) and e.get("name") in names)]
    container["env"] = [{"name": n, "value": v} for n, v in pairs] + rest


def served_name_overrides(spec_dict: dict[str, Any]) -> list[str]:
    """What :func:`candidate_body` forces: ``<field>: --served-model-name <old> replaced``."""
    out = []
    cand = spec_dict.get("candidate") if isinstance(spec_dict, dict) else None
    engines = cand.get("engines") if isinstance(cand, dict) else None
    for ei, engine in enumerate(engines if isinstance(engines, list) else []):
        members = engine.get("members") if isinstance(engine, dict) else None
        for mi, member in enumerate(members if isinstance(members, list) else []):
            if not isinstance(member, dict):
                continue
            where = f"spec.candidate.engines[{ei}].members[{mi}]"
            for path, words in engine_words(member.get("template"), where):
                for i, old in force_served_name(list(words)):
                    out.append(f"{path}[{i}] served {old!r}, forced to {SERVED_NAME_REF}")
    return out


def candidate_body(inputs: Inputs, spec_dict: dict[str, Any], st: RunState) -> dict[str, Any]:
    """The candidate ModelDeployment of the current run.

    The candidate spec passes through verbatim except: ``backend`` is dropped,
    ``replicas`` is 1, ``template.metadata.labels`` and every member's pod
    template labels are only the experiment's own, :func:`template_labels`
    (isolation: no Service that selects production pods can select the candidate), and
    ``MODELPLANE_SERVED_MODEL_NAME`` is set in every engine container, and a
    ``--served-model-name`` in an engine's ``command`` or ``args`` is forced to
    ``$(MODELPLANE_SERVED_MODEL_NAME)`` (``experiment_model.force_served_name``).
    """
    labels, ann = child_labels(inputs.name, st)
    tlabels = template_labels(inputs.name, st)
    cand = copy.deepcopy(drop_nulls(spec_dict.get("candidate") or {}))
    cand.pop("backend", None)
    # The spec was validated (engines and members are lists of objects, a member has a
    # template object); anything deeper is the ModelDeployment's to judge, so odd
    # shapes there are passed through, never trusted.
    for engine in cand.get("engines") or ():
        for member in engine.get("members") or ():
            tmpl = member["template"]
            if not isinstance(tmpl.get("metadata"), dict):
                tmpl["metadata"] = {}
            tmpl["metadata"]["labels"] = dict(tlabels)
            pod = tmpl.get("spec")
            containers = pod.get("containers") if isinstance(pod, dict) else None
            if not isinstance(containers, list):
                continue
            containers = [c for c in containers if isinstance(c, dict)]
            engines = [c for c in containers if c.get("name") == ENGINE_CONTAINER] or containers
            for c in engines:
                inject_first(c, [(ENV_SERVED_MODEL_NAME, st.name)])
            # The candidate serves under its own name: a --served-model-name in the
            # engine's command or args is forced to it (one inside a shell string
            # blocks at parse time: experiment_model.Candidate).
            for _path, words in engine_words(tmpl, ""):
                force_served_name(words)
    annotations = {**ann, ANN_EXPERIMENT: f"{inputs.namespace}/{inputs.name}"}
    if st.gate:
        annotations[ANN_GATE_CACHE] = str(st.gate.get("cache", ""))
        annotations[ANN_GATE_CACHE_UID] = str(st.gate.get("uid", ""))
        annotations[ANN_GATE_CACHE_GENERATION] = str(st.gate.get("generation", ""))
        if st.gate.get("commit"):
            annotations[ANN_GATE_COMMIT] = str(st.gate["commit"])
        if st.gate.get("digest"):
            annotations[ANN_GATE_DIGEST] = str(st.gate["digest"])
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelDeployment",
        "metadata": {
            "name": st.name,
            "namespace": inputs.namespace,
            "labels": {**labels, LABEL_COMPONENT: "candidate"},
            "annotations": annotations,
        },
        "spec": {
            "replicas": 1,
            "template": {"metadata": {"labels": dict(tlabels)}, "spec": cand},
        },
    }


def gauntlet_object(
    inputs: Inputs,
    spec: ExperimentSpec,
    st: RunState,
    cronjob: Any,
) -> dict[str, Any]:
    """The provider-kubernetes Object of the current run's gauntlet Job.

    Reads ``st.gauntlet`` (``job``, ``endpoint``, ``providerConfig``,
    ``activeDeadlineSeconds``) so that the body is the same on every call.

    Raises:
        ValueError: when the CronJob has no containers.
    """
    g = st.gauntlet
    labels, ann = child_labels(inputs.name, st)
    forced = [(ENV_MODELS, f"{st.name}={spec.candidate.backend}"), (ENV_ENDPOINT, g["endpoint"])]
    job = job_from_cronjob(
        cronjob,
        name=g["job"],
        namespace=REMOTE_NAMESPACE,
        labels={**labels, LABEL_COMPONENT: "gauntlet"},
        env=spec.gauntlet.sorted_env(),
        annotations={**ann, ANN_EXPERIMENT: f"{inputs.namespace}/{inputs.name}"},
    )
    js = job["spec"]
    js.pop("ttlSecondsAfterFinished", None)
    js.pop("suspend", None)
    cap = int(g["activeDeadlineSeconds"])
    own = _count(js.get("activeDeadlineSeconds"))
    js["activeDeadlineSeconds"] = min(cap, own) if own > 0 else cap
    pod = js["template"].get("spec") or {}
    for group in ("initContainers", "containers"):
        for c in pod.get(group) or ():
            if isinstance(c, dict):
                inject_first(c, forced)
    return remote_object(
        g["job"],
        inputs.namespace,
        g["providerConfig"],
        job,
        labels={**labels, LABEL_COMPONENT: "gauntlet"},
        annotations=ann or None,
        readiness_cel=JOB_FINISHED_CEL,
        # Deleting the Object (suspend, a spec change, a run leaving the history)
        # deletes the Job's pods too.
        deletion_policy="Background",
    )


def _evidence_body(obs: Struct) -> Struct:
    """An observed Job Object re-desired as evidence: observed and deleted, never re-created."""
    body = Struct()
    for key in ("apiVersion", "kind", "spec"):
        if key in obs:
            body[key] = obs[key]
    meta = structs.get(obs, "metadata")
    if isinstance(meta, Struct):
        out = body.get_or_create_struct("metadata")
        for key in ("name", "namespace", "labels", "annotations"):
            if key in meta:
                out[key] = meta[key]
    if isinstance(structs.get(body, "spec"), Struct) or "spec" not in body:
        body.get_or_create_struct("spec")["managementPolicies"] = EVIDENCE_POLICIES
    return body


# ---- observed state ---------------------------------------------------------------


@dataclass(frozen=True)
class JobResult:
    """A finished gauntlet Job: passed or not, when, and what it said."""

    passed: bool
    finished_at: datetime.datetime | None
    summary: str


def job_result(obj: Any, experiment: str, st: RunState) -> JobResult | None:
    """The result of the observed gauntlet Object, or None while it has none.

    Only a Job whose labels name this experiment and this run counts (fencing).
    ``Complete=True`` passes (at ``status.completionTime``); ``Failed=True`` fails
    (at the condition's ``lastTransitionTime``, with its reason and message).
    """
    job = observed_manifest(obj)
    if job is None:
        return None
    labels = structs.get_map(job, "metadata", "labels")
    if labels.get(LABEL_RUN) != str(st.number) or labels.get(LABEL_EXPERIMENT) != label_value(
        experiment
    ):
        return None
    conds = structs.conditions(job)
    name = structs.get_str(job, "metadata", "name")
    done = conds.get("Complete")
    if done is not None and structs.get(done, "status") == "True":
        at = parse_time(structs.get(job, "status", "completionTime")) or parse_time(
            structs.get(done, "lastTransitionTime")
        )
        n = _count(structs.get(job, "status", "succeeded"))
        return JobResult(True, at, f"gauntlet Job {name} completed ({n} pod(s) succeeded)")
    failed = conds.get("Failed")
    if failed is not None and structs.get(failed, "status") == "True":
        at = parse_time(structs.get(failed, "lastTransitionTime"))
        reason = structs.get_str(failed, "reason") or "Failed"
        msg = structs.get_str(failed, "message")
        return JobResult(
            False, at, f"gauntlet Job {name} failed: {reason}" + (f": {msg}" if msg else "")
        )
    return None


def candidate_ready(cand: Any) -> bool:
    """The candidate serves: Crossplane's ``Ready``, or ``ReplicasReady`` with a ready replica.

    The second form does not wait for composed resources that do not serve (the
    deployment's cache Usage) to report ready; the gauntlet still starts only once
    the replica reports an endpoint.
    """
    if cand is None:
        return False
    if structs.condition_is(cand, "Ready"):
        return True
    ready = _count(structs.get(cand, "status", "replicas", "ready"))
    return ready >= 1 and structs.condition_is(cand, "ReplicasReady")


def candidate_failure(cand: Any, replicas: Any) -> str | None:
    """Why the candidate can never become ready, or None.

    HydrationFailed on the deployment (``ReplicasReady``) or on any of its replicas
    (``ModelReady``), or a ``ReplicasScheduled`` reason that waiting cannot fix.
    """
    conds = structs.conditions(cand)
    rr = conds.get("ReplicasReady")
    if rr is not None and structs.get_str(rr, "reason") == "HydrationFailed":
        return "hydration failed: " + (structs.get_str(rr, "message") or "HydrationFailed")
    if isinstance(replicas, Resolved):
        for r in replicas.items:
            c = structs.conditions(r).get("ModelReady")
            if c is not None and structs.get_str(c, "reason") == "HydrationFailed":
                cluster = structs.get_str(r, "spec", "clusterName")
                return f"hydration failed on {cluster}: " + (
                    structs.get_str(c, "message") or "HydrationFailed"
                )
    rs = conds.get("ReplicasScheduled")
    if (
        rs is not None
        and structs.get(rs, "status") == "False"
        and structs.get_str(rs, "reason") in FATAL_SCHEDULING
    ):
        return (
            f"cannot be scheduled: {structs.get_str(rs, 'reason')}: "
            f"{structs.get_str(rs, 'message')}"
        )
    return None


def _candidate_progress(cand: Any) -> str:
    if cand is None:
        return "created; waiting for Crossplane to report it"
    ready = _count(structs.get(cand, "status", "replicas", "ready"))
    total = _count(structs.get(cand, "status", "replicas", "total"))
    parts = [f"{ready}/{total or 1} replicas ready"]
    for typ in ("Synced", "ReplicasScheduled", "ReplicasReady"):
        c = structs.conditions(cand).get(typ)
        if c is not None and structs.get(c, "status") != "True":
            parts.append(f"{typ}: {structs.get_str(c, 'reason')} {structs.get_str(c, 'message')}")
    return "; ".join(p.strip() for p in parts)


def _serving_replica(replicas: Resolved, candidate: str) -> tuple[str, str] | None:
    """``(cluster, endpoint)`` of the candidate's replica that serves, or None."""
    for r in sorted(replicas.items, key=lambda r: structs.get_str(r, "metadata", "name")):
        if structs.get_map(r, "metadata", "labels").get(LABEL_DEPLOYMENT) != label_value(candidate):
            continue
        endpoint = structs.get_str(r, "status", "endpoint")
        cluster = structs.get_str(r, "spec", "clusterName")
        if endpoint and cluster:
            return cluster, endpoint
    return None


# ---- the composer ---------------------------------------------------------------


def _job_message(st: RunState) -> str:
    g = st.gauntlet
    return f"gauntlet Job {g['job']} on {g['cluster']} against {g['endpoint']}"


def next_run(spec: ExperimentSpec, st: RunState) -> datetime.datetime | None:
    """When the next run starts: ``repeatAfter`` after a passed run's ``completedAt``.

    None for a one-shot experiment, a run without a verdict, or a failed run (failed
    runs are terminal). Computed from the current spec, so a changed ``repeatAfter``
    applies at once. A verdict without a readable time falls back to the recorded
    ``nextRunAt``, else is due now.
    """
    if spec.repeat_seconds <= 0 or st.verdict.get("pass") is not True:
        return None
    done = parse_time(st.verdict.get("completedAt"))
    if done is None:
        return parse_time(st.next_run_at) or datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return done + datetime.timedelta(seconds=spec.repeat_seconds)


class _Composer:
    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.out = Outcome()
        self.now = inputs.now
        self.poll = float(inputs.settings.poll_seconds or 30)
        self.prev_phase = structs.get_str(inputs.xr, "status", "phase")

    # -- helpers
    def set_phase(self, phase: str, reason: str, message: str) -> None:
        out = self.out
        out.status["phase"] = phase
        warn = phase in ("Failed", "Blocked")
        events.changed(
            out,
            (self.prev_phase, structs.get_str(self.inputs.xr, "status", "reason")),
            (phase, reason),
            f"{phase}: {message}",
            reason=reason,
            warning=warn,
        )
        out.status["reason"] = reason

    def keep_evidence(self, number: int) -> None:
        obs = self.inputs.observed_body(job_key(number))
        if obs is not None:
            self.out.add(job_key(number), _evidence_body(obs))

    def require_template(self, spec: ExperimentSpec) -> Any:
        self.out.require(
            REQ_TEMPLATE,
            "batch/v1",
            "CronJob",
            match_name=spec.gauntlet.templateRef.name,
            namespace=self.inputs.namespace,
        )
        return self.inputs.required(REQ_TEMPLATE)

    # -- entry point
    def compose(self) -> Outcome:
        inputs, out = self.inputs, self.out
        st = RunState.read(inputs)
        try:
            spec = parse_spec(inputs.spec)
        except SpecError as e:
            return self.invalid(st, e)
        h = spec_hash(spec)

        if st.number == 0:
            st.start(inputs.name, 1, h, inputs.generation)
        elif st.spec_hash != h:
            was = st.name
            st.archive()
            st.start(inputs.name, st.number + 1, h, inputs.generation)
            out.normal(
                f"spec changed: run {was} ends; run {st.name} starts", "ExperimentSpecChanged"
            )
        elif not spec.suspend and (due := next_run(spec, st)) is not None and self.now >= due:
            was = st.name
            st.archive()
            st.start(inputs.name, st.number + 1, h, inputs.generation)
            out.normal(f"cool-down after run {was} ended; run {st.name} starts", "RunStarted")

        # Earlier runs: at most historyLimit records; a dropped record takes its Job.
        limit = spec.history_limit
        while len(st.history) > limit:
            dropped = st.history.pop(0)
            out.normal(
                f"run {dropped.get('run')} left the history (historyLimit {limit}); "
                "its evidence Job is deleted",
                "RunPruned",
            )
        for rec in st.history:
            n = rec.get("number")
            if isinstance(n, (int, float)):
                self.keep_evidence(int(n))

        if st.verdict:
            self.finished(spec, st)
        elif spec.suspend:
            self.suspended(st)
        else:
            self.active(spec, st)

        out.status.update(st.to_status())
        self.keep_while_unresolved()
        phase = out.status.get("phase")
        last = st.verdict or (st.history[-1] if st.history else {})
        # Ready: the last verdict passed and nothing needs attention (a later run in
        # progress or a suspension does not un-certify; Blocked or Failed does).
        out.ready = phase == "Succeeded" or (
            phase in (*ACTIVE_PHASES, "Suspended") and last.get("pass") is True
        )
        return out

    def keep_while_unresolved(self) -> None:
        """A requirement not resolved yet is "not known": keep every observed child.

        Crossplane calls again with it resolved (its requirements loop), and only
        that last response is applied; until then nothing may be dropped.
        """
        if all(n in self.inputs.required_resources for n in self.out.requirements):
            return
        for key, child in self.inputs.observed.items():
            if key not in self.out.resources:
                self.out.keep(key, child.resource)

    # -- bad input: say so, change nothing
    def invalid(self, st: RunState, e: SpecError) -> Outcome:
        out = self.out
        for key, child in self.inputs.observed.items():
            out.keep(key, child.resource)
        msg = f"invalid spec: {e}"
        self.set_phase("Blocked", "InvalidSpec", msg)
        out.condition("Runnable", "False", "InvalidSpec", msg)
        out.condition("Verdict", "Unknown", "InvalidSpec", "no run while the spec is invalid")
        if st.number:
            out.status.update(st.to_status())
        out.ready = False
        return out

    # -- a run with a verdict: evidence only
    def finished(self, spec: ExperimentSpec, st: RunState) -> None:
        out, v = self.out, st.verdict
        self.keep_evidence(st.number)
        summary = str(v.get("summary") or v.get("reason") or "verdict recorded")
        if v.get("pass") is True:
            out.condition("Verdict", "True", str(v.get("reason", PASSED)), summary)
        else:
            out.condition("Verdict", "False", str(v.get("reason", FAILED)), summary)
        if spec.suspend:
            self.set_phase("Suspended", "Suspended", "spec.suspend is true; no new run starts")
            out.condition("Runnable", "False", "Suspended", "spec.suspend is true")
            return
        due = next_run(spec, st)
        if due is not None:
            st.next_run_at = format_time(due)
            out.requeue_after(max(1.0, (due - self.now).total_seconds()))
            self.set_phase(
                "Succeeded", PASSED, f"run {st.name} passed; next run at {st.next_run_at}"
            )
            out.condition("Runnable", "True", "CoolingDown", f"next run at {st.next_run_at}")
            return
        st.next_run_at = ""
        if v.get("pass") is True:
            self.set_phase("Succeeded", PASSED, f"run {st.name} passed: {summary}")
            out.condition("Runnable", "True", "Finished", f"run {st.name} finished")
        else:
            reason = str(v.get("reason") or FAILED)
            self.set_phase("Failed", reason, f"run {st.name} failed: {summary}")
            out.condition(
                "Runnable",
                "False",
                "Finished",
                f"run {st.name} failed; a failed run is terminal (change the spec to run again)",
            )

    # -- suspended: no candidate, no running Job
    def suspended(self, st: RunState) -> None:
        out = self.out
        if st.candidate or st.gauntlet:
            out.normal(
                f"spec.suspend: run {st.name} released its candidate and Job; "
                "it starts over on resume",
                "RunSuspended",
            )
        st.candidate, st.gauntlet, st.gate = {}, {}, {}
        self.set_phase("Suspended", "Suspended", "spec.suspend is true")
        out.condition("Runnable", "False", "Suspended", "spec.suspend is true")
        out.condition("Verdict", "Unknown", "Suspended", f"run {st.name} has no verdict yet")

    def blocked(self, st: RunState, reason: str, message: str) -> None:
        out = self.out
        if st.candidate:
            out.warning(f"run {st.name} released its candidate: {message}", "CandidateReleased")
        st.candidate, st.gauntlet, st.gate = {}, {}, {}
        self.set_phase("Blocked", reason, message)
        out.condition("Runnable", "False", reason, message)
        out.condition("Verdict", "Unknown", "Blocked", f"run {st.name} is blocked: {reason}")
        out.requeue_after(self.poll)

    def waiting(self, st: RunState, message: str) -> None:
        """A requirement is not resolved yet: keep what exists, decide nothing."""
        out = self.out
        for key, child in self.inputs.observed.items():
            if key not in out.resources:
                out.keep(key, child.resource)
        out.status["phase"] = self.prev_phase or "Deploying"
        if structs.get_str(self.inputs.xr, "status", "reason"):
            out.status["reason"] = structs.get_str(self.inputs.xr, "status", "reason")
        out.condition("Runnable", "Unknown", "Resolving", message)
        out.condition("Verdict", "Unknown", "Pending", f"run {st.name} has no verdict yet")

    # -- the current run, not suspended, no verdict yet
    def active(self, spec: ExperimentSpec, st: RunState) -> None:
        inputs, out = self.inputs, self.out
        admitted = parse_time(st.candidate.get("createdAt")) is not None
        if not admitted and not self.admit(spec, st):
            return
        created = parse_time(st.candidate.get("createdAt")) or self.now
        deadline = parse_time(st.candidate.get("deadline")) or (
            created + datetime.timedelta(seconds=spec.timeout_seconds)
        )
        cand_obs = inputs.observed_body(candidate_key(st.number))
        job_obs = inputs.observed_body(job_key(st.number))
        replicas: Any = UNRESOLVED
        if cand_obs is not None:
            out.require(
                REQ_REPLICAS,
                API_VERSION,
                "ModelReplica",
                match_labels={LABEL_DEPLOYMENT: label_value(st.name)},
                namespace=inputs.namespace,
            )
            replicas = inputs.required(REQ_REPLICAS)

        # 1. A finished Job decides, if it finished before the deadline.
        result = job_result(job_obs, inputs.name, st) if job_obs is not None else None
        if result is not None:
            if result.finished_at is not None and result.finished_at > deadline:
                self.verdict(
                    spec, st, False, TIMED_OUT,
                    f"{result.summary}, after the deadline {format_time(deadline)}",
                    result.finished_at,
                )  # fmt: skip
            else:
                self.verdict(
                    spec, st, result.passed, PASSED if result.passed else FAILED,
                    result.summary, result.finished_at or self.now,
                )  # fmt: skip
            return
        # 2. The deadline.
        if self.now >= deadline:
            if st.gauntlet:
                what = "the gauntlet did not finish"
            elif candidate_ready(cand_obs):
                what = "the candidate was Ready but its endpoint or cluster was never found"
            else:
                what = "the candidate never became Ready"
            self.verdict(
                spec, st, False, TIMED_OUT,
                f"{what} within {spec.timeout} (deadline {format_time(deadline)})",
                self.now,
            )  # fmt: skip
            return
        # 3. The candidate disappeared after it was seen.
        if cand_obs is None and st.candidate.get("seen"):
            self.verdict(
                spec, st, False, CANDIDATE_LOST,
                f"candidate ModelDeployment {st.name} disappeared", self.now,
            )  # fmt: skip
            return
        # 3b. The replica the gauntlet runs against left its cluster (moved or deleted).
        if st.gauntlet and isinstance(replicas, Resolved):
            on = [
                r
                for r in replicas.items
                if structs.get_str(r, "spec", "clusterName") == st.gauntlet["cluster"]
                and structs.get(r, "metadata", "deletionTimestamp") is None
            ]
            if not on:
                self.verdict(
                    spec, st, False, CANDIDATE_LOST,
                    f"candidate {st.name} no longer has a replica on {st.gauntlet['cluster']}, "
                    f"where the gauntlet runs against {st.gauntlet['endpoint']}",
                    self.now,
                )  # fmt: skip
                return
        # 4. The candidate can never become ready.
        if cand_obs is not None:
            why = candidate_failure(cand_obs, replicas)
            if why is not None:
                self.verdict(
                    spec, st, False, CANDIDATE_FAILED, f"candidate {st.name} {why}", self.now
                )
                return
            if not st.candidate.get("seen"):
                st.candidate["seen"] = True
        out.requeue_after(min(self.poll, max(1.0, (deadline - self.now).total_seconds())))
        # The deadline, not the time left: a condition message that changes on every call
        # would rewrite the XR's status on every reconcile.
        left = format_time(deadline)
        out.condition("Runnable", "True", "Admitted", self.admitted_message(st))
        out.add(candidate_key(st.number), candidate_body(inputs, inputs.spec, st))

        if st.gauntlet:
            # The Job was composed; keep it as it was (a Job's pod template is immutable).
            if job_obs is not None:
                out.keep(job_key(st.number), job_obs)
                err = sync_error(job_obs)
                msg = _job_message(st)
                if err:
                    msg += f" (provider reports: {err})"
            else:
                tmpl = self.require_template(spec)
                if tmpl is UNRESOLVED:
                    self.waiting(st, "waiting for Crossplane to resolve the gauntlet CronJob")
                    return
                assert isinstance(tmpl, Resolved)
                if not tmpl.items:
                    self.release_for_template(spec, st)
                    return
                try:
                    body = gauntlet_object(inputs, spec, st, tmpl.items[0])
                except ValueError as e:
                    self.release_for_template(spec, st, invalid=str(e))
                    return
                out.add(job_key(st.number), body)
                msg = _job_message(st)
            self.set_phase("Evaluating", "Evaluating", msg)
            out.condition("Verdict", "Unknown", "Evaluating", f"{msg}; deadline {left}")
            return

        ready = candidate_ready(cand_obs)
        if not ready:
            msg = f"candidate {st.name}: {_candidate_progress(cand_obs)}"
            self.set_phase("Deploying", "Deploying", msg)
            out.condition("Verdict", "Unknown", "Deploying", f"{msg}; deadline {left}")
            return

        # Ready: find where it serves, then compose the Job.
        self.serving(spec, st, replicas, deadline, left)

    def admitted_message(self, st: RunState) -> str:
        msg = f"run {st.name} admitted at {st.candidate.get('createdAt')}"
        forced = served_name_overrides(self.inputs.spec)
        if forced:
            msg += f"; the candidate serves as {st.name}: " + "; ".join(forced[:3])
        if st.gate:
            msg += f"; artifact gate opened by ModelCache {st.gate.get('cache')}"
            if st.gate.get("digest"):
                msg += f" ({st.gate['digest']})"
        return msg

    def serving(
        self,
        spec: ExperimentSpec,
        st: RunState,
        replicas: Any,
        deadline: datetime.datetime,
        left: str,
    ) -> None:
        inputs, out = self.inputs, self.out

        def wait(msg: str) -> None:
            self.set_phase("Serving", "Serving", msg)
            out.condition("Verdict", "Unknown", "Serving", f"{msg}; deadline {left}")

        if replicas is UNRESOLVED:
            self.waiting(st, "waiting for Crossplane to resolve the candidate's ModelReplicas")
            return
        assert isinstance(replicas, Resolved)
        found = _serving_replica(replicas, st.name)
        if found is None:
            wait(f"candidate {st.name} is Ready; waiting for its replica to report an endpoint")
            return
        cluster_name, endpoint = found
        out.require(REQ_CLUSTER, API_VERSION, "InferenceCluster", match_name=cluster_name)
        tmpl = self.require_template(spec)
        cluster = inputs.required(REQ_CLUSTER)
        if cluster is UNRESOLVED or tmpl is UNRESOLVED:
            self.waiting(st, "waiting for Crossplane to resolve the candidate's cluster")
            return
        assert isinstance(cluster, Resolved) and isinstance(tmpl, Resolved)
        if not tmpl.items:
            self.release_for_template(spec, st)
            return
        if not cluster.items:
            wait(f"candidate {st.name} serves on {cluster_name}: InferenceCluster not found")
            return
        pc = provider_config_ref(cluster.items[0])
        if pc is None:
            wait(f"candidate {st.name} serves on {cluster_name}: no status.providerConfigRef yet")
            return
        # Time before the recorded start counts as zero: a clock behind createdAt (skew)
        # never gives the Job more than the timeout.
        created = parse_time(st.candidate.get("createdAt")) or self.now
        remaining = min(
            math.ceil((deadline - max(self.now, created)).total_seconds()),
            math.ceil(spec.timeout_seconds),
        )
        st.gauntlet = {
            "job": gauntlet_job_name(inputs.namespace, st.name),
            "cluster": cluster_name,
            "endpoint": endpoint,
            "providerConfig": pc,
            "activeDeadlineSeconds": max(1, remaining),
            "startedAt": format_time(self.now),
        }
        try:
            body = gauntlet_object(inputs, spec, st, tmpl.items[0])
        except ValueError as e:
            st.gauntlet = {}
            self.release_for_template(spec, st, invalid=str(e))
            return
        out.add(job_key(st.number), body)
        msg = _job_message(st)
        self.set_phase("Evaluating", "Evaluating", msg)
        out.condition("Verdict", "Unknown", "Evaluating", f"{msg}; deadline {left}")

    def release_for_template(
        self, spec: ExperimentSpec, st: RunState, invalid: str | None = None
    ) -> None:
        """The CronJob vanished (or is unusable) before the Job exists: release the GPU."""
        out = self.out
        out.resources.pop(candidate_key(st.number), None)
        out.requirements.pop(REQ_CLUSTER, None)
        out.requirements.pop(REQ_REPLICAS, None)
        ref = f"{self.inputs.namespace}/{spec.gauntlet.templateRef.name}"
        if invalid:
            self.blocked(
                st, "TemplateInvalid", f"CronJob {ref} (spec.gauntlet.templateRef): {invalid}"
            )
        else:
            self.blocked(
                st, "TemplateNotFound", f"CronJob {ref} (spec.gauntlet.templateRef) not found"
            )

    def admit(self, spec: ExperimentSpec, st: RunState) -> bool:
        """Check the CronJob and the artifact gate; create the candidate when both pass.

        Returns:
            True when the candidate was admitted in this call.
        """
        inputs, out = self.inputs, self.out
        tmpl = self.require_template(spec)
        cache: Any = None
        if spec.artifactGate is not None:
            out.require(
                REQ_CACHE,
                API_VERSION,
                "ModelCache",
                match_name=spec.artifactGate.modelCacheRef.name,
                namespace=inputs.namespace,
            )
            cache = inputs.required(REQ_CACHE)
        if tmpl is UNRESOLVED or cache is UNRESOLVED:
            self.waiting(st, "waiting for Crossplane to resolve the CronJob and the ModelCache")
            return False
        assert isinstance(tmpl, Resolved)
        ref = f"{inputs.namespace}/{spec.gauntlet.templateRef.name}"
        if not tmpl.items:
            self.blocked(
                st, "TemplateNotFound", f"CronJob {ref} (spec.gauntlet.templateRef) not found"
            )
            return False
        containers = structs.get(
            tmpl.items[0], "spec", "jobTemplate", "spec", "template", "spec", "containers"
        )
        if not containers:
            self.blocked(
                st,
                "TemplateInvalid",
                f"CronJob {ref} (spec.gauntlet.templateRef) has no "
                "spec.jobTemplate.spec.template.spec.containers",
            )
            return False
        if spec.artifactGate is not None:
            assert isinstance(cache, Resolved)
            gate = evaluate_gate(spec, inputs.namespace, cache.items[0] if cache.items else None)
            if gate.reason is not None:
                out.condition("ArtifactGate", "False", gate.reason, gate.message)
                self.blocked(st, gate.reason, gate.message)
                return False
            out.condition("ArtifactGate", "True", "ArtifactGateOpen", gate.message)
            st.gate = gate.record
        deadline = self.now + datetime.timedelta(seconds=spec.timeout_seconds)
        st.candidate = {
            "name": st.name,
            "createdAt": format_time(self.now),
            "deadline": format_time(deadline),
        }
        return True

    def verdict(
        self,
        spec: ExperimentSpec,
        st: RunState,
        passed: bool,
        reason: str,
        summary: str,
        at: datetime.datetime,
    ) -> None:
        """Record the run's verdict; the candidate is released (not desired) from now on."""
        inputs, out = self.inputs, self.out
        st.verdict = {
            "pass": passed,
            "reason": reason,
            "summary": summary,
            "completedAt": format_time(at),
        }
        st.candidate.pop("seen", None)
        st.candidate["releasedAt"] = format_time(self.now)
        out.requirements.pop(REQ_REPLICAS, None)
        out.observe(
            "model_experiment_verdicts_total",
            {"namespace": inputs.namespace, "experiment": inputs.name, "reason": reason},
        )
        self.finished(spec, st)


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelExperiment (see the module docstring).

    Args:
        inputs: The request view; ``inputs.spec`` is validated by
            ``function.api.modelexperiment.parse_spec``.

    Returns:
        The outcome: the candidate (``candidate-r<N>``) and gauntlet Job Object
        (``gauntlet-r<N>``) of the current run, evidence Jobs of retained runs;
        status ``phase``, ``reason``, ``run``, ``runNumber``, ``runGeneration``,
        ``specHash``, ``candidate``, ``gauntlet``, ``gate``, ``verdict``,
        ``nextRunAt``, ``history[]``; conditions ``Runnable``, ``Verdict`` and, with
        an artifact gate, ``ArtifactGate``.
    """
    return _Composer(inputs).compose()


__all__ = [
    "candidate_body",
    "compose",
    "evaluate_gate",
    "gauntlet_job_name",
    "run_name",
]
