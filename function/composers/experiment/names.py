"""ModelExperiment names: the run's candidate and gauntlet Job, composition-resource
names and requirement names (the verdict reasons are in ``function.api.modelexperiment``).

Run 1's candidate is ``child_name("modelexperiment", <experiment>, "r1")``; composed
resources are keyed ``candidate-r<N>`` and ``gauntlet-r<N>`` per run, so an object of
one run is never renamed into another's slot.
"""

from __future__ import annotations

import re

from function.naming import HASH_LEN, MAX_INDEXED_JOB_NAME, MAX_LABEL, child_name, short_name

REQ_TEMPLATE = "gauntlet-template"
REQ_CACHE = "artifact-cache"
# The candidate's ModelCache, when it is not the gated one (then REQ_CACHE answers both).
REQ_CANDIDATE_CACHE = "candidate-cache"
REQ_REPLICAS = "candidate-replicas"
REQ_CLUSTER = "candidate-cluster"


def run_name(experiment: str, number: int) -> str:
    """Name of run ``number``'s candidate ModelDeployment: ``child_name("modelexperiment",
    <experiment>, "r<N>")``.

    Hashed like every composed name, so it can collide neither with another run's
    candidate (experiment ``a`` run 2 and experiment ``a-r2`` run 1) nor, by accident,
    with a ModelDeployment the user wrote (the name is computable: someone who can
    write ModelDeployments in the namespace could take it on purpose). The candidate
    serves under this name (it is the served model name the gauntlet addresses).
    """
    return child_name("modelexperiment", experiment, f"r{max(number, 1)}")


def gauntlet_job_name(namespace: str, run: str, *, indexed: bool = False) -> str:
    """Name of the gauntlet Job of ``run`` (the remote Job and its Object).

    Remote Jobs of every control-plane namespace share ``REMOTE_NAMESPACE`` on a
    workload cluster, so the hash covers the namespace too. At most 63 characters, or,
    when the CronJob's ``jobTemplate`` is ``completionMode: Indexed`` (``indexed``),
    :data:`~function.naming.MAX_INDEXED_JOB_NAME` (52), so that every pod's hostname
    ``<job>-<index>`` fits 63 (review 14a: a 63-character Indexed Job was refused by the
    workload cluster). Same hash either way; the shorter head only renames Jobs that
    could never have been created, and a run keeps the name it recorded in
    ``status.gauntlet.job``.
    """
    cap = MAX_INDEXED_JOB_NAME if indexed else MAX_LABEL
    return short_name(cap, (run, "gauntlet"), (namespace,))


def candidate_key(number: int) -> str:
    """Composition-resource name of the candidate of run ``number``."""
    return f"candidate-r{number}"


def job_key(number: int) -> str:
    """Composition-resource name of the gauntlet Job Object of run ``number``."""
    return f"gauntlet-r{number}"


# What candidate_key and job_key write, for a run number from 1 to 10^9 (the most
# status.runNumber may hold: state.MAX_COUNT).
_CHILD_KEY = re.compile(r"^(?:candidate|gauntlet)-r([1-9][0-9]{0,8}|1000000000)$")


def key_run_number(key: str) -> int | None:
    """The run number of composition-resource name ``key`` (``candidate-r<N>`` or
    ``gauntlet-r<N>``, as :func:`candidate_key` and :func:`job_key` write it), or None
    for any other name."""
    m = _CHILD_KEY.match(key)
    return int(m.group(1)) if m else None


# The readable head of run_name's result ends in "-r<N>" unless the experiment's name
# truncated it; then the hash (child_name).
_RUN_HEAD = re.compile(rf"-r([1-9][0-9]{{0,8}}|1000000000)-[0-9a-f]{{{HASH_LEN}}}$")


def run_number(experiment: str, run: str, *guesses: int) -> int | None:
    """The number N of the run named ``run`` (``status.run``: :func:`run_name` of
    ``experiment`` and N), or None when no number tried gives that name.

    Tried: the ``r<N>`` in the name's readable head (absent when a long experiment name
    truncated it), then ``guesses`` (the run after the history's, say). A number is
    taken only when :func:`run_name` gives ``run`` back exactly, so a name written by
    hand or for another experiment is never read as one of this experiment's runs."""
    m = _RUN_HEAD.search(run)
    tried = ((int(m.group(1)),) if m else ()) + guesses
    for n in tried:
        if 1 <= n <= 10**9 and run_name(experiment, n) == run:
            return n
    return None
