"""The contract between the function and the programs that run in pods.

The function builds the download Job (:mod:`function.manifests.hydration`) and the
flash loader init container (:mod:`function.manifests.workloads`) from these names, and
reads the download's result back (:mod:`function.composers.hydration`); the programs
(:mod:`jobs.hydrate`, :mod:`jobs.flashload`) take their arguments, environment and
files by the same names. Constants and pure helpers only: the server imports this module without
the programs' dependencies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# ---- commands (the image's ``python`` is the virtual environment's) -----------------

HYDRATE_COMMAND = ("python", "-m", "jobs.hydrate")
FLASHLOAD_COMMAND = ("python", "-m", "jobs.flashload")

# The prune program's flag: ``--prune-keep <identity>[,<identity>...]`` (the identities
# to keep; every other identity directory on the PVC goes).
PRUNE_KEEP_FLAG = "--prune-keep"


def prune_keep_arg(keep: Iterable[str]) -> str:
    """The value of :data:`PRUNE_KEEP_FLAG` for identities ``keep``: comma-separated."""
    return ",".join(keep)


def parse_prune_keep(value: str) -> tuple[set[str], list[str]]:
    """``(identities, malformed)`` of a :data:`PRUNE_KEEP_FLAG` value: the entries that
    match :data:`IDENTITY_PATTERN` and, sorted, those that do not (empty entries are
    skipped)."""
    entries = {k for k in value.split(",") if k}
    good = {k for k in entries if IDENTITY_PATTERN.fullmatch(k)}
    return good, sorted(entries - good)


# ---- mount paths ---------------------------------------------------------------------

# Where the cache PVC is mounted: read-write in the download Job, read-only in every
# engine container and in the flash loader. The weights of each source identity live in
# their own directory under it (:func:`identity_dir`), never at the root.
CACHE_MOUNT_PATH = "/mnt/models"
# A download in progress: ``<mount>/<identity>.partial``, renamed to
# ``<mount>/<identity>`` only once complete and verified (``rename(2)`` is atomic), so
# a half-written identity is never visible under its final name.
PARTIAL_SUFFIX = ".partial"
# An identity being removed by the prune Job: ``<mount>/<identity>`` is first renamed to
# ``<mount>/<identity>.pruning`` (atomic) and only then deleted, so a half-deleted
# identity is never visible under its name; a leftover of that form (a prune pod killed
# half-way) is never read and is removed by the next download or prune.
PRUNING_SUFFIX = ".pruning"
# Where the flash loader's node-local copy (a memory-backed emptyDir) is mounted.
FLASH_MOUNT_PATH = "/mnt/flash-models"


def identity_dir(mount: str, identity: str) -> str:
    """The directory of source ``identity``'s weights under the cache mount ``mount``.

    The one path rule the download Job (:mod:`jobs.hydrate`, which writes it), the
    prune step (which removes the directories no live replica uses) and the serving
    workload (``MODELPLANE_MODEL``, the flash loader's ``--source``) share:
    ``<mount>/<identity>``, ``identity`` being ``function.naming.source_identity`` (12
    lowercase hex characters, so it never contains ``/`` or ``..``).

    Raises:
        ValueError: ``identity`` is not a source identity.
    """
    if not IDENTITY_PATTERN.fullmatch(identity):
        raise ValueError(f"not a source identity: {identity!r}")
    return f"{mount.rstrip('/')}/{identity}"


# What ``function.naming.source_identity`` returns (``name_hash``: 12 lowercase hex).
IDENTITY_PATTERN = re.compile(r"[0-9a-f]{12}")

# ---- markers -------------------------------------------------------------------------

# Written last by jobs.hydrate inside the identity's directory (before the rename that
# publishes it): JSON {repo, revision, identity, commit, digest, files, bytes,
# validatedAt, completedAt}.
MARKER_FILE = ".modelplane-hydrated"
# Written last by jobs.flashload in the destination once every file is copied.
FLASH_DONE_FILE = ".modelplane-flash-loaded"

# ---- exit codes of jobs.hydrate ------------------------------------------------------

EXIT_OK = 0
EXIT_RETRY = 1  # worth retrying: network, hub 5xx, disk
EXIT_USAGE = 2  # bad arguments
# Permanent (repository or revision not found, access denied): the Job's
# podFailurePolicy turns it into Failed at once instead of retrying.
EXIT_PERMANENT = 3

# ---- environment of the download Job -------------------------------------------------

ENV_HF_TOKEN = "HF_TOKEN"  # the hub token, from the remote Secret by secretKeyRef
ENV_HF_ENDPOINT = "HF_ENDPOINT"  # the hub's base URL (tests point it at a stand-in)
ENV_RESULT_CONFIGMAP = "MODELPLANE_RESULT_CONFIGMAP"  # the ConfigMap to report to
ENV_POD_NAMESPACE = "POD_NAMESPACE"  # that ConfigMap's namespace (downward API)

# ---- the result ConfigMap ------------------------------------------------------------

# jobs.hydrate merge-patches ``data[RESULT_DATA_KEY]`` with the marker's JSON; the
# hydration composer reads these fields of it back into ``status.evidence``.
RESULT_DATA_KEY = "result"
RESULT_IDENTITY = "identity"
RESULT_COMMIT = "commit"
RESULT_DIGEST = "digest"
RESULT_VALIDATED_AT = "validatedAt"
