"""``python -m jobs.hydrate``: download a Hugging Face model into the cache PVC.

This is the program the ModelCacheHydration Job runs (see
``function.manifests.hydration.hydration_job``), from the function's own image,
which installs the ``jobs`` extra (``huggingface_hub``, ``kubernetes``): nothing is
installed at run time. Names it shares with the function are in :mod:`jobs.contract`.

    python -m jobs.hydrate --repo Qwen/Qwen2.5-0.5B-Instruct --revision main \\
        --identity <naming.source_identity(repo, revision)> --target /mnt/models
    python -m jobs.hydrate --target /mnt/models --prune-keep <identity>[,<identity>...]

Environment:
    MODELPLANE_RESULT_CONFIGMAP  The ConfigMap to report the result to (optional),
                 in ``POD_NAMESPACE``, through the API server of the pod's own
                 cluster (``KUBERNETES_SERVICE_HOST``/``_PORT`` and the service
                 account's token and CA, as every in-cluster client reads them;
                 ``MODELPLANE_SA_DIR`` overrides the service account directory).
    HF_TOKEN     The hub token (optional; from the remote Secret via secretKeyRef).
                 Sent as ``Authorization: Bearer``; never logged.
    HF_ENDPOINT  The hub's base URL (default https://huggingface.co).

What it does:

Each source identity has its own directory on the PVC,
``<target>/<identity>`` (``jobs.contract.identity_dir``), so a new revision
hydrates beside the old one while replicas keep reading the old one.

0. It removes what other runs left behind and no replica ever reads: the
   ``<other identity>.partial`` downloads of every other identity (a download
   abandoned when the source changed again, or failed) and every
   ``<identity>.pruning`` (a prune pod killed half-way). Identity directories are
   never touched. A failure here is logged, never fails the download.
1. If ``<target>/<identity>/.modelplane-hydrated`` exists, records the same source
   identity and the directory holds the files and bytes the marker counts, the
   weights are already there: exit 0 without contacting the hub. A directory that
   holds less than its marker counts is damaged: the run fails (it is never written
   into; remove it to hydrate again).
2. Otherwise it resolves ``revision`` to a commit (``HfApi.model_info``), downloads
   that commit with ``snapshot_download(local_dir=<target>/<identity>.partial)``
   (resumable: files already complete are not downloaded again), and removes files
   the commit does not contain from that directory. No other directory is written.
3. It checks every file of the commit against the checksum the hub publishes in
   its tree listing (the LFS ``sha256``, or the git blob id of a regular file); a
   mismatching file is deleted and the run fails (retried by the Job). It hashes
   the snapshot (sha256 over sorted ``path``/``sha256`` lines), writes the marker
   atomically (temporary file, fsync, ``os.replace``, fsync of the directory) and
   last renames ``<identity>.partial`` to ``<identity>`` (atomic: the identity is
   visible whole or not at all). The marker, as JSON::

       {"repo", "revision", "identity", "commit", "digest": "sha256:<hex>",
        "files", "bytes", "validatedAt", "completedAt"}

   A summary goes to the container's termination message
   (``/dev/termination-log``, or ``$TERMINATION_LOG``) when writable.
4. It reports the marker to the control plane: with ``$MODELPLANE_RESULT_CONFIGMAP``
   set, it merge-patches ``data.result`` of that ConfigMap on its own cluster with
   the official ``kubernetes`` client (see :func:`report_result`); the function
   reads it back through the Object it
   composed for the ConfigMap and records ``status.evidence``. This also runs
   when the marker was already there, so a lost report is repeated.

With ``--prune-keep`` it downloads nothing: it removes every identity directory
(and ``.partial`` download) under ``--target`` whose identity is not listed, and every
``.pruning`` leftover, and leaves everything else alone (the hydration composes this
Job once its current identity is Ready, with the identities live replicas still
serve). An identity directory is first renamed to ``<identity>.pruning`` (atomic) and
then deleted, so a half-deleted identity is never visible under its name (a download
of that identity then starts afresh instead of trusting a marker in a gutted
directory).

Exit codes: 0 done (or skipped); 1 a failure worth retrying (network, hub 5xx,
disk); 2 bad arguments; 3 a permanent failure (repository or revision not found,
access denied), which the Job's ``podFailurePolicy`` turns into ``Failed`` at once
instead of retrying.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.contract import (
    ENV_HF_ENDPOINT,
    ENV_HF_TOKEN,
    ENV_POD_NAMESPACE,
    ENV_RESULT_CONFIGMAP,
    EXIT_OK,
    EXIT_PERMANENT,
    EXIT_RETRY,
    EXIT_USAGE,
    IDENTITY_PATTERN,
    MARKER_FILE,
    PARTIAL_SUFFIX,
    PRUNE_KEEP_FLAG,
    PRUNING_SUFFIX,
    RESULT_COMMIT,
    RESULT_DATA_KEY,
    RESULT_DIGEST,
    RESULT_IDENTITY,
    RESULT_VALIDATED_AT,
    identity_dir,
    parse_prune_keep,
)

if TYPE_CHECKING:
    from kubernetes.client import Configuration

# Directories at the target's root that are not part of the model.
KEEP_DIRS = frozenset({".cache", "lost+found"})
_CHUNK = 8 * 1024 * 1024

log = logging.getLogger("modelplane.hydrate")


class ChecksumError(RuntimeError):
    """A downloaded file does not match the checksum the hub publishes for it."""


class ReportError(OSError):
    """The result could not be reported to the ConfigMap (after every attempt)."""


class _Redactor(logging.Filter):
    """Replaces secrets (the hub token, the service account token) in every log record,
    ours and the libraries' (huggingface_hub, kubernetes, urllib3)."""

    def __init__(self, *secrets: str | None) -> None:
        super().__init__()
        self.secrets = {s for s in secrets if s}

    def add(self, secret: str | None) -> None:
        """Redact ``secret`` from now on too."""
        if secret:
            self.secrets.add(secret)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            msg = record.getMessage()
            hidden = msg
            for secret in self.secrets:
                hidden = hidden.replace(secret, "***")
            if hidden != msg:
                record.msg = hidden
                record.args = None
        return True


# Installed on the root log handlers by :func:`main`; :func:`report_result` adds the
# service account token to it.
REDACTOR = _Redactor()


def source_identity(repo: str, revision: str) -> str:
    """The source identity, as ``function.naming.source_identity`` computes it."""
    # Imported lazily so the program does not need the function's dependencies.
    from function.naming import source_identity as _identity

    return _identity(repo, revision)


def read_marker(target: Path) -> dict[str, Any] | None:
    """The completion marker of ``target`` as a dict, or None (absent or not JSON)."""
    try:
        data = json.loads((target / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_atomically(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` so readers see the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _published(entry: Any) -> tuple[str, str]:
    """``(algorithm, hex)`` the hub publishes for a tree entry: LFS sha256, else git blob sha1."""
    lfs = getattr(entry, "lfs", None)
    if lfs is not None:
        sha = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)
        if sha:
            return "sha256", str(sha)
    return "git-sha1", str(entry.blob_id)


def verify_and_digest(target: Path, published: dict[str, tuple[str, str]]) -> tuple[str, int]:
    """Check every file against the checksum the hub publishes, and digest the snapshot.

    Args:
        target: The downloaded directory.
        published: ``path -> (algorithm, hex)``: ``sha256`` of an LFS file
            (``lfs.oid`` of the hub's tree listing) or ``git-sha1``, the git blob id
            (``oid``) of a regular file (sha1 of ``b"blob <size>\\0" + content``).

    Returns:
        ``("sha256:<hex>", total bytes)``. The digest hashes one line
        ``<path>\\0<sha256 of the file>\\n`` per file in sorted path order, so it
        identifies the exact content of the snapshot.

    Raises:
        ChecksumError: listing the files whose content does not match (they are
            deleted, so a retry downloads them again).
    """
    h = hashlib.sha256()
    total = 0
    bad: list[str] = []
    for rel in sorted(published):
        p = target / rel
        size = p.stat().st_size
        sha256 = hashlib.sha256()
        sha1 = hashlib.sha1(b"blob %d\0" % size)
        with p.open("rb") as f:
            while chunk := f.read(_CHUNK):
                sha256.update(chunk)
                sha1.update(chunk)
        algorithm, want = published[rel]
        got = sha256.hexdigest() if algorithm == "sha256" else sha1.hexdigest()
        if got != want:
            bad.append(rel)
        h.update(f"{rel}\0{sha256.hexdigest()}\n".encode())
        total += size
    if bad:
        for rel in bad:
            (target / rel).unlink(missing_ok=True)
            (target / ".cache" / "huggingface" / "download" / f"{rel}.metadata").unlink(
                missing_ok=True
            )
        raise ChecksumError(
            f"{len(bad)} files do not match the hub's checksums (removed for a retry): "
            + ", ".join(bad[:5])
        )
    return "sha256:" + h.hexdigest(), total


def prune(target: Path, keep: set[str]) -> list[str]:
    """Remove files under ``target`` that are not in ``keep`` (relative paths).

    The marker, its temporary files, and the directories in :data:`KEEP_DIRS` at
    the root are left alone; directories emptied by the removal are removed.

    Returns:
        The removed relative paths, sorted.
    """
    removed: list[str] = []
    for root, dirs, names in os.walk(target, topdown=True):
        rel_root = Path(root).relative_to(target)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d not in KEEP_DIRS]
        for name in names:
            rel = (rel_root / name).as_posix()
            if rel == MARKER_FILE or rel.startswith(f".{MARKER_FILE}."):
                continue
            if rel not in keep:
                (target / rel).unlink()
                removed.append(rel)
    for root, _dirs, _names in os.walk(target, topdown=False):
        p = Path(root)
        if p != target and p.relative_to(target).parts[0] not in KEEP_DIRS:
            with contextlib.suppress(OSError):  # not empty
                p.rmdir()
    return sorted(removed)


def termination_message(payload: dict[str, Any]) -> None:
    """Write ``payload`` to the container's termination message file, if writable."""
    path = Path(os.environ.get("TERMINATION_LOG", "/dev/termination-log"))
    try:
        with path.open("w") as f:
            json.dump(payload, f, sort_keys=True)
    except OSError:
        pass


SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
FIELD_MANAGER = "modelplane-hydrate"


def in_cluster_configuration() -> Configuration:
    """The ``kubernetes`` client configuration of the pod's own cluster.

    ``kubernetes.config.load_incluster_config`` (``KUBERNETES_SERVICE_HOST``/``_PORT``,
    the service account's ``token`` and ``ca.crt``; the token is re-read every minute,
    as kubelet rotates projected tokens). ``$MODELPLANE_SA_DIR`` points the same
    loader at another service account directory.

    Raises:
        kubernetes.config.ConfigException: not in a cluster (no service host or token).
    """
    from kubernetes import client, config
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = client.Configuration()
    sa_dir = os.environ.get("MODELPLANE_SA_DIR")
    if sa_dir:
        InClusterConfigLoader(
            token_filename=str(Path(sa_dir) / "token"),
            cert_filename=str(Path(sa_dir) / "ca.crt"),
        ).load_and_set(configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    return configuration


def _describe(exc: BaseException) -> str:
    """A log-safe description of a report failure (never request headers)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        message = ""
        try:
            status = json.loads(exc.body or "")
            message = status.get("message", "") if isinstance(status, dict) else ""
        except ValueError:
            pass
        return f"HTTP {exc.status} {exc.reason or ''}".rstrip() + (
            f": {message}" if message else ""
        )
    return f"{type(exc).__name__}: {exc}"


def report_result(
    result: dict[str, Any],
    *,
    attempts: int = 6,
    delay: float = 2.0,
    sleep: Any = time.sleep,
    configuration: Configuration | None = None,
) -> bool:
    """Merge-patch ``data.result`` of the result ConfigMap with ``result`` (JSON).

    The ConfigMap is named by ``$MODELPLANE_RESULT_CONFIGMAP`` in ``$POD_NAMESPACE``
    (else the service account's namespace); without that variable nothing is
    reported. It uses the official ``kubernetes`` client,
    ``CoreV1Api.patch_namespaced_config_map`` with ``application/merge-patch+json``
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#patch-and-apply),
    so only ``data.result`` changes. The ConfigMap is never created here: the
    function composes it, and the Role allows only ``get`` and ``patch`` of that
    one name (RBAC cannot limit ``create`` by name). A missing ConfigMap (404, not
    applied yet) or a denied request (403, the RoleBinding may be created just
    after the pod starts) is retried ``attempts`` times with doubling delays, like
    any other failure. The service account token is redacted from every log line.

    Args:
        result: The marker (JSON-serializable).
        attempts: Requests before giving up.
        delay: Seconds before the second attempt; doubles after each failure.
        sleep: Called with the delay (tests pass a recorder).
        configuration: The client configuration; None: :func:`in_cluster_configuration`.

    Returns:
        True when reported, False when there is nothing to report to.

    Raises:
        ReportError: the last failure (an API error or a connection error), after
            every attempt.
        kubernetes.config.ConfigException: no in-cluster configuration.
    """
    name = os.environ.get(ENV_RESULT_CONFIGMAP)
    if not name:
        return False
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    sa_dir = Path(os.environ.get("MODELPLANE_SA_DIR") or SERVICE_ACCOUNT_DIR)
    namespace = os.environ.get(ENV_POD_NAMESPACE) or (sa_dir / "namespace").read_text().strip()
    if configuration is None:
        configuration = in_cluster_configuration()
    for key in ("BearerToken", "authorization"):
        token = configuration.api_key.get(key)
        if token:
            REDACTOR.add(token.split(" ", 1)[-1].strip())
    api = client.CoreV1Api(client.ApiClient(configuration))
    body = {"data": {RESULT_DATA_KEY: json.dumps(result, sort_keys=True)}}
    for attempt in range(1, attempts + 1):
        try:
            api.patch_namespaced_config_map(
                name,
                namespace,
                body,
                field_manager=FIELD_MANAGER,
                _content_type="application/merge-patch+json",
                _request_timeout=30,
            )
            log.info("reported the result to ConfigMap %s/%s", namespace, name)
            return True
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            if attempt == attempts:
                raise ReportError(
                    f"could not patch ConfigMap {namespace}/{name}: {_describe(e)}"
                ) from e
            log.warning("reporting the result failed (attempt %d): %s", attempt, _describe(e))
            sleep(delay * 2 ** (attempt - 1))
    return False


def _permanent(exc: BaseException) -> bool:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, (RepositoryNotFoundError, RevisionNotFoundError, GatedRepoError)):
        return True
    if isinstance(exc, HfHubHTTPError):
        code = getattr(exc.response, "status_code", None)
        return code in (401, 403, 404)
    return False


@dataclass(frozen=True)
class Source:
    """What to download: a Hugging Face ``repo`` (``org/name``) at ``revision`` (branch,
    tag or commit), and its source identity (:func:`source_identity`; the marker
    records it)."""

    repo: str
    revision: str
    identity: str


def _split(name: str) -> tuple[str, str]:
    """``(identity, suffix)`` of a mount entry named ``<identity>``, ``<identity>.partial``
    or ``<identity>.pruning`` (suffix ``""``, :data:`PARTIAL_SUFFIX`,
    :data:`PRUNING_SUFFIX`); ``("", "")`` for anything else."""
    for suffix in (PARTIAL_SUFFIX, PRUNING_SUFFIX):
        if name.endswith(suffix):
            ident = name[: -len(suffix)]
            return (ident, suffix) if IDENTITY_PATTERN.fullmatch(ident) else ("", "")
    return (name, "") if IDENTITY_PATTERN.fullmatch(name) else ("", "")


def _identity_entries(root: Path) -> list[tuple[Path, str, str]]:
    """``(entry, identity, suffix)`` of the directories under the mount ``root`` named
    after an identity (:func:`_split`), sorted; symlinks, files and every other name are
    left out (nothing else under the mount is ever removed). Empty without ``root``."""
    if not root.is_dir():
        return []
    out = []
    for entry in sorted(root.iterdir()):
        ident, suffix = _split(entry.name)
        if ident and not entry.is_symlink() and entry.is_dir():
            out.append((entry, ident, suffix))
    return out


def _fsync_dir(d: Path) -> None:
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _remove_tree(path: Path) -> None:
    """Remove the directory tree ``path``; entries another pod removed meanwhile (two
    cleanups of the same leftover) are not an error."""
    for _ in range(3):
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            if not path.exists():
                return
    shutil.rmtree(path)


def _retire(entry: Path) -> None:
    """Remove the identity directory ``entry``: rename it to ``<identity>.pruning``
    (``rename(2)`` is atomic; the parent is fsynced so the rename survives a crash),
    then delete that. A reader sees the whole identity or none of it."""
    doomed = entry.with_name(entry.name + PRUNING_SUFFIX)
    if doomed.exists():
        _remove_tree(doomed)
    os.rename(entry, doomed)
    _fsync_dir(entry.parent)
    _remove_tree(doomed)


def remove_abandoned(root: Path, current: str) -> list[str]:
    """Remove the leftovers under the mount ``root`` that no replica ever reads: the
    ``<identity>.partial`` download of every identity but ``current`` (abandoned: the
    source changed again before it completed, or it failed) and every
    ``<identity>.pruning`` (a prune pod killed half-way). Identity directories and
    anything not named after an identity are left alone.

    Returns:
        The removed entry names, sorted.

    Raises:
        OSError: a removal failed (the caller logs it and carries on).
    """
    removed: list[str] = []
    for entry, ident, suffix in _identity_entries(root):
        if not suffix or (suffix == PARTIAL_SUFFIX and ident == current):
            continue
        _remove_tree(entry)
        removed.append(entry.name)
    return removed


def damaged(d: Path, marker: dict[str, Any]) -> str | None:
    """Why the identity directory ``d`` does not hold what its ``marker`` counts, or None.

    Compares the model's files (every regular file but the marker, its temporary
    files and the hub's ``.cache`` at the top) and their total size with the
    marker's ``files`` and ``bytes`` (every marker this program writes has them: one
    without is not trusted). Only ``stat`` is called, no file is read.
    """
    files, size = marker.get("files"), marker.get("bytes")
    if not isinstance(files, int) or not isinstance(size, int):
        return "has a marker without the files and bytes it counts"
    n = total = 0
    for root, dirs, names in os.walk(d):
        if Path(root) == d:
            dirs[:] = [x for x in dirs if x != ".cache"]
        for name in names:
            if Path(root) == d and (name == MARKER_FILE or name.startswith(f".{MARKER_FILE}.")):
                continue
            p = Path(root) / name
            if p.is_file() and not p.is_symlink():
                n += 1
                total += p.stat().st_size
    if (n, total) == (files, size):
        return None
    return f"holds {n} files ({total} bytes), its marker counts {files} ({size} bytes)"


def hydrate(
    source: Source,
    root: Path,
    *,
    token: str | None,
    endpoint: str | None,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """Download ``source`` into its identity's directory under ``root`` unless done.

    The weights go to ``<root>/<identity>.partial`` (resumable: a retried pod finds
    what the last one downloaded) and are published by renaming that directory to
    ``<root>/<identity>`` (:func:`jobs.contract.identity_dir`) once complete and
    verified, the marker inside: ``rename(2)`` is atomic, so a reader sees the whole
    identity or none of it. An existing identity directory is never written into;
    other identities' directories (the weights live replicas may still read) are not
    touched; their abandoned ``.partial`` downloads and any ``.pruning`` leftover are
    removed first (:func:`remove_abandoned`).

    Returns:
        The marker (dict); ``skipped`` is True when the identity's directory already
        holds a marker recording ``identity``, and the files and bytes it counts, and
        nothing was downloaded.

    Raises:
        huggingface_hub errors for the hub, OSError for the disk, RuntimeError for an
        identity directory without its marker (written by someone else: never used)
        or holding less than its marker counts (damaged: never written into).
    """
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.hf_api import RepoFile

    repo, revision, identity = source.repo, source.revision, source.identity
    final = Path(identity_dir(str(root), identity))
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    root.mkdir(parents=True, exist_ok=True)
    try:
        cleaned = remove_abandoned(root, identity)
    except OSError as e:  # a leftover stays until the next run; the download goes on
        log.warning("could not remove abandoned downloads: %s", e)
    else:
        if cleaned:
            log.info("removed abandoned downloads: %s", ", ".join(cleaned))
    marker = read_marker(final)
    if marker is not None and marker.get("identity") == identity:
        why = damaged(final, marker)
        if why is not None:
            raise RuntimeError(
                f"{final} {why}: damaged; it is never written into (remove it to hydrate again)"
            )
        log.info("already hydrated: %s@%s commit %s", repo, revision, marker.get("commit"))
        return {**marker, "skipped": True}
    if final.exists():
        raise RuntimeError(
            f"{final} exists without the marker of identity {identity}; it is never written "
            "into (remove it to hydrate again)"
        )
    partial.mkdir(exist_ok=True)
    (partial / MARKER_FILE).unlink(missing_ok=True)

    api = HfApi(endpoint=endpoint, token=token or False)
    info = api.model_info(repo, revision=revision)
    commit = info.sha
    if not commit:
        raise RuntimeError(f"the hub returned no commit for {repo}@{revision}")
    log.info("downloading %s@%s (commit %s) into %s", repo, revision, commit, partial)
    snapshot_download(
        repo_id=repo,
        revision=commit,
        local_dir=partial,
        token=token or False,
        endpoint=endpoint,
    )
    published = {
        entry.path: _published(entry)
        for entry in api.list_repo_tree(repo, revision=commit, recursive=True)
        if isinstance(entry, RepoFile)
    }
    missing = sorted(f for f in published if not (partial / f).is_file())
    if missing:
        raise RuntimeError(f"download incomplete: {len(missing)} files missing, first {missing[0]}")
    removed = prune(partial, set(published))
    if removed:
        log.info("removed %d files that commit %s does not contain", len(removed), commit)
    digest, total = verify_and_digest(partial, published)
    when = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = {
        "repo": repo,
        "revision": revision,
        RESULT_IDENTITY: identity,
        RESULT_COMMIT: commit,
        RESULT_DIGEST: digest,
        "files": len(published),
        "bytes": total,
        RESULT_VALIDATED_AT: when,
        "completedAt": when,
    }
    write_atomically(partial / MARKER_FILE, json.dumps(result, sort_keys=True).encode() + b"\n")
    publish(partial, final)
    n = len(published)
    log.info("hydrated %s@%s: %d files, %d bytes, %s", repo, revision, n, total, digest)
    return {**result, "skipped": False}


def publish(partial: Path, final: Path) -> None:
    """Rename the complete ``partial`` directory to ``final``, atomically and durably.

    ``os.rename`` of a directory onto a name that does not exist is atomic
    (``rename(2)``); the parent directory is fsynced so the new name survives a crash.

    Raises:
        OSError: ``final`` exists (never replaced), or the rename failed.
    """
    if final.exists():
        raise FileExistsError(f"{final} exists; it is never replaced")
    os.rename(partial, final)
    _fsync_dir(final.parent)


def prune_identities(root: Path, keep: set[str]) -> list[str]:
    """Remove the identity directories under ``root`` whose identity is not in ``keep``.

    Only entries named as an identity (``jobs.contract.IDENTITY_PATTERN``), an
    identity's download in progress (``<identity>.partial``) or an identity being
    removed (``<identity>.pruning``) are candidates; anything else under the mount
    (``.cache``, ``lost+found``, the files a release before side-by-side revisions
    wrote at the root, files someone else put there) is left alone. A kept identity's
    ``.partial`` directory is kept too (its download may be running); every
    ``.pruning`` leftover goes. An identity directory is renamed to
    ``<identity>.pruning`` (atomic) before it is deleted (:func:`_retire`), so a pod
    killed half-way never leaves a gutted directory under the identity's name.

    Args:
        root: The cache mount.
        keep: The identities in use: the current source's and every identity a live
            replica on this cluster may read (the hydration composes the list).

    Returns:
        The removed entry names, sorted (a ``.pruning`` leftover by its own name).
    """
    removed: list[str] = []
    entries = _identity_entries(root)
    for entry, _, suffix in entries:  # leftovers first: a retire may reuse the name
        if suffix == PRUNING_SUFFIX:
            _remove_tree(entry)
            removed.append(entry.name)
    for entry, ident, suffix in entries:
        if suffix == PRUNING_SUFFIX or ident in keep:
            continue
        if suffix == PARTIAL_SUFFIX:
            _remove_tree(entry)  # never read by a replica: no need to rename first
        else:
            _retire(entry)
        removed.append(entry.name)
    return sorted(removed)


def _prune_main(target: Path, keep_arg: str) -> int:
    """``--prune-keep``: remove the identities not kept; exit code as for a download."""
    keep, bad = parse_prune_keep(keep_arg)
    if not keep or bad:
        print(f"--prune-keep: expected source identities, got {keep_arg!r}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    try:
        removed = prune_identities(target, keep)
    except OSError as e:
        log.error("pruning failed (retry): %s", e)
        return EXIT_RETRY
    log.info("pruned %s; kept %s", ", ".join(removed) or "nothing", ", ".join(sorted(keep)))
    termination_message({"pruned": removed, "kept": sorted(keep)})
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m jobs.hydrate", description=__doc__)
    parser.add_argument("--repo", help="Hugging Face repo id (org/name)")
    parser.add_argument("--revision", default="main", help="branch, tag or commit")
    parser.add_argument("--identity", help="source identity (default: computed)")
    parser.add_argument("--target", required=True, type=Path, help="the cache mount")
    parser.add_argument(
        PRUNE_KEEP_FLAG,
        metavar="IDENTITY[,IDENTITY...]",
        help="prune instead of downloading: remove every identity directory under "
        "--target except these (the current one and those live replicas serve)",
    )
    args = parser.parse_args(argv)
    if args.prune_keep is not None:
        return _prune_main(args.target, args.prune_keep)
    if not args.repo:
        parser.error("--repo is required (unless --prune-keep)")

    token = os.environ.get(ENV_HF_TOKEN) or None
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    REDACTOR.add(token)
    for handler in logging.getLogger().handlers:
        handler.addFilter(REDACTOR)
    logging.getLogger("huggingface_hub").setLevel(logging.WARNING)
    for noisy in ("httpx", "httpx2", "httpcore", "kubernetes", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    expected = source_identity(args.repo, args.revision)
    identity = args.identity or expected
    if identity != expected:
        log.error("--identity %s does not match %s@%s", identity, args.repo, args.revision)
        return EXIT_USAGE
    endpoint = os.environ.get(ENV_HF_ENDPOINT) or None
    log.info(
        "hydrating %s@%s into %s (token %s)",
        args.repo,
        args.revision,
        args.target,
        "set" if token else "not set",
    )
    try:
        result = hydrate(
            Source(args.repo, args.revision, identity),
            args.target,
            token=token,
            endpoint=endpoint,
        )
    except Exception as e:  # report and choose the exit code; never print the token
        text = f"{type(e).__name__}: {e}"
        if token:
            text = text.replace(token, "***")
        code = EXIT_PERMANENT if _permanent(e) else EXIT_RETRY
        log.error(
            "hydration failed (%s): %s", "permanent" if code == EXIT_PERMANENT else "retry", text
        )
        termination_message({"error": text[:2000], "identity": identity})
        return code
    summary = {
        k: result.get(k)
        for k in ("commit", "digest", "identity", "repo", "revision", "skipped", "validatedAt")
    }
    termination_message(summary)
    try:
        report_result({k: v for k, v in result.items() if k != "skipped"})
    except Exception as e:  # the weights are in place; the retry only reports again
        log.error("could not report the result: %s", _describe(e))
        return EXIT_RETRY
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
