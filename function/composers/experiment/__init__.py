"""ModelExperiment: a bounded canary that turns a candidate model into a typed verdict.

A ModelExperiment deploys an isolated candidate ModelDeployment, evaluates it with
a one-shot Job copied from an existing CronJob (the "gauntlet"), records the
verdict, and releases the hardware. It never edits an existing ModelDeployment.

Lifecycle of one run (``status.phase``):

- ``Blocked``: nothing may claim a GPU yet, and no candidate exists; except an
  admitted run that is held (its candidate kept): by a spec edit that cannot start,
  or by its CronJob deleted or unusable before its gauntlet Job is observed
  (``_Composer.template_unusable``; its deadline still ends it). Reasons
  (condition ``Runnable=False``): ``InvalidSpec`` (the field is named; existing
  children are kept untouched, as for any bad input), ``TemplateNotFound`` /
  ``TemplateInvalid`` (the CronJob of ``spec.gauntlet.templateRef``), and the
  artifact-gate reasons ``ArtifactCacheNotFound``, ``ArtifactCacheFailed``,
  ``ArtifactCacheNotReady`` (with progress "2/3 clusters ready"),
  ``ArtifactSourceMismatch``, ``ArtifactValidationMissing``,
  ``ArtifactDigestMissing``; and ``CandidateCacheNotFound`` (the ModelCache of
  ``spec.candidate.modelCacheRef`` does not exist; admitted once it does). Not
  terminal: fixing the cause retries.
- ``Deploying``: the gate opened (at admission: the CronJob exists, the gate is
  open and the candidate's ModelCache exists), so the candidate is composed: a
  ModelDeployment with one replica, named after the run, whose template and pod
  labels are only the experiment's own (no label of the candidate spec that a
  Service could select survives), with
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
  the run history, not by a TTL). While provider-kubernetes reports the Job's Object
  ``Synced=False`` (the workload cluster refused it), the reason is
  ``GauntletNotSynced``, with its error and one Warning event on entry.
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
them. A change of the spec's canonical hash (``function.api.modelexperiment.definition_hash``)
discards the current run's children (a finished run goes to history) and starts a
new run. With ``repeatAfter``, a passed run is repeated at ``status.nextRunAt``
(the response TTL brings the function back); a failed run is terminal (only a spec
change starts another). ``status.history[]`` keeps the earlier runs' verdicts, at
most ``historyLimit``; a record that falls off takes its evidence Job with it.
Run 1 uses plain names (the candidate is named like the experiment); run N > 1
uses ``<experiment>-r<N>``; every child carries ``modelplane.ai/experiment``,
``modelplane.ai/run`` and ``modelplane.ai/generation`` labels, and a Job whose
labels belong to another run never counts. A status without ``runNumber`` (lost or
rewritten) is recovered: the run ``status.run`` names goes on as status records it
(:attr:`.state.RunState.recorded`: a decided run stays decided), else the current run is
the highest one whose candidate or gauntlet Job is observed (:func:`.run.observed_run`).
A run whose admission is not recorded is admitted again, or held when its spec cannot
start it, with ``timeout`` after its children's ``metadata.creationTimestamp`` as its
deadline (:func:`.run.children_deadline`). Observed children of a run status does not
record (an earlier run's evidence Job, its history lost) are kept as observed
(``_Composer.keep_unrecorded``).

Composition-resource names: ``candidate-r<N>`` and ``gauntlet-r<N>`` (per run, so
an object of one run is never renamed into another's slot).

Modules: :mod:`.names` (names and reasons), :mod:`.state` (run state kept in status),
:mod:`.gate` (the artifact gate), :mod:`.observed` (reading the candidate, its replicas
and the Job), :mod:`.children` (the composed resources' bodies), :mod:`.compose` and
:mod:`.run` (the decisions).
"""

from function.api.modelexperiment import ARTIFACT_GATE, RUNNABLE, VERDICT
from function.composers.experiment.children import candidate_body
from function.composers.experiment.compose import compose
from function.composers.experiment.gate import evaluate_gate
from function.composers.experiment.names import gauntlet_job_name, run_name
from function.composers.experiment.observed import candidate_ready

# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (RUNNABLE, VERDICT, ARTIFACT_GATE)

__all__ = [
    "CONDITION_TYPES",
    "candidate_body",
    "candidate_ready",
    "compose",
    "evaluate_gate",
    "gauntlet_job_name",
    "run_name",
]
