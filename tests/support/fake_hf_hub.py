"""A local stand-in for the Hugging Face Hub on 127.0.0.1, enough for ``snapshot_download``.

Implements the endpoints ``huggingface_hub`` (2.x) calls to download a model
repository, with the headers it reads:

- ``GET /api/models/{repo}/revision/{revision}``: model info with ``sha`` (the
  commit) and ``siblings`` (``HfApi.model_info`` / ``repo_info``).
- ``GET /api/models/{repo}/tree/{revision}[/{path}]``: the file listing
  (``HfApi.list_repo_tree``), entries ``{type, oid, size, path}``.
- ``HEAD``/``GET /{repo}/resolve/{revision}/{path}``: a file, with ``X-Repo-Commit``,
  ``ETag`` (the git blob id) and ``Content-Length``
  (``file_download.get_hf_file_metadata`` and ``http_get``).

A repo may be gated: then every request needs ``Authorization: Bearer <token>``
and gets 401 otherwise (the hub answers gated repos with 401/403 and the
``X-Error-Code: GatedRepo`` header). Every request is recorded in
:attr:`FakeHub.requests` with its Authorization header.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


def git_blob_id(content: bytes) -> str:
    """The git blob sha1 of ``content`` (what the hub reports as a file's ``oid``)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class Repo:
    """One model repository: revisions (branch or tag -> commit) and files per commit."""

    files: dict[str, dict[str, bytes]]  # commit -> {path: content}
    refs: dict[str, str]  # branch/tag -> commit
    token: str | None = None  # gated: this token is required
    # Paths stored with Git LFS: the tree publishes their sha256 (``lfs.oid``).
    lfs: frozenset[str] = frozenset()
    # Paths served with one byte changed (same size) while the tree publishes the
    # checksum of the true content: a corrupted transfer.
    corrupt: frozenset[str] = frozenset()


@dataclass
class Request:
    method: str
    path: str
    authorization: str | None


@dataclass
class FakeHub:
    """Serve ``repos`` on 127.0.0.1 until :meth:`close`."""

    repos: dict[str, Repo]
    requests: list[Request] = field(default_factory=list)
    # Called with a file's path before it is served (tests look at the disk while a
    # download is in progress).
    on_resolve: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                hub._handle(self, body=True)

            def do_HEAD(self) -> None:
                hub._handle(self, body=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """Base URL to put in ``HF_ENDPOINT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- request handling ---------------------------------------------------------

    def _find(self, parts: list[str]) -> tuple[str, Repo, list[str]] | None:
        """Split ``org/name/rest...`` (or ``name/rest...``) into a known repo and the rest."""
        for n in (2, 1):
            repo_id = "/".join(parts[:n])
            if repo_id in self.repos:
                return repo_id, self.repos[repo_id], parts[n:]
        return None

    def _handle(self, h: BaseHTTPRequestHandler, *, body: bool) -> None:
        url = urlsplit(h.path)
        auth = h.headers.get("Authorization")
        self.requests.append(Request(h.command, h.path, auth))
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts[:2] == ["api", "models"]:
            found = self._find(parts[2:])
            if found is None:
                return self._error(h, 404, "RepoNotFound", "Repository not found")
            repo_id, repo, rest = found
            if not self._authorized(repo, auth):
                return self._error(h, 401, "GatedRepo", "Access to this repo is restricted")
            if len(rest) >= 2 and rest[0] == "revision":
                return self._model_info(h, repo_id, repo, "/".join(rest[1:]), body)
            if len(rest) >= 2 and rest[0] == "tree":
                return self._tree(h, repo, rest[1], "/".join(rest[2:]), body)
            return self._error(h, 404, "EntryNotFound", "unknown API route")
        found = self._find(parts)
        if found is None:
            return self._error(h, 404, "RepoNotFound", "Repository not found")
        _, repo, rest = found
        if len(rest) >= 3 and rest[0] == "resolve":
            if not self._authorized(repo, auth):
                return self._error(h, 401, "GatedRepo", "Access to this repo is restricted")
            return self._resolve(h, repo, rest[1], "/".join(rest[2:]), body)
        return self._error(h, 404, "EntryNotFound", "unknown route")

    @staticmethod
    def _authorized(repo: Repo, auth: str | None) -> bool:
        return repo.token is None or auth == f"Bearer {repo.token}"

    @staticmethod
    def _commit(repo: Repo, revision: str) -> str | None:
        if revision in repo.files:
            return revision
        return repo.refs.get(revision)

    def _send(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        payload: bytes,
        headers: dict[str, str],
        body: bool,
    ) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if body:
            h.wfile.write(payload)

    def _json(self, h: BaseHTTPRequestHandler, data: Any, body: bool) -> None:
        payload = json.dumps(data).encode()
        self._send(h, 200, payload, {"Content-Type": "application/json"}, body)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        payload = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Code": code}
        self._send(h, status, payload, headers, h.command != "HEAD")

    def _model_info(
        self, h: BaseHTTPRequestHandler, repo_id: str, repo: Repo, revision: str, body: bool
    ) -> None:
        commit = self._commit(repo, revision)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        siblings = [{"rfilename": p} for p in sorted(repo.files[commit])]
        self._json(
            h,
            {
                "id": repo_id,
                "modelId": repo_id,
                "sha": commit,
                "siblings": siblings,
                "private": False,
            },
            body,
        )

    def _tree(
        self, h: BaseHTTPRequestHandler, repo: Repo, revision: str, prefix: str, body: bool
    ) -> None:
        commit = self._commit(repo, revision)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        entries = []
        dirs: set[str] = set()
        for path, content in sorted(repo.files[commit].items()):
            if prefix and not path.startswith(prefix.rstrip("/") + "/"):
                continue
            parent = path.rsplit("/", 1)[0] if "/" in path else ""
            while parent and parent not in dirs:
                dirs.add(parent)
                parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
            entry: dict[str, Any] = {
                "type": "file",
                "oid": git_blob_id(content),
                "size": len(content),
                "path": path,
            }
            if path in repo.lfs:
                sha = hashlib.sha256(content).hexdigest()
                entry["lfs"] = {"oid": sha, "size": len(content), "pointerSize": 134}
            entries.append(entry)
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in dirs]
        self._json(h, sorted(entries, key=lambda e: e["path"]), body)

    def _resolve(
        self, h: BaseHTTPRequestHandler, repo: Repo, revision: str, path: str, body: bool
    ) -> None:
        commit = self._commit(repo, revision)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        content = repo.files[commit].get(path)
        if content is None:
            return self._error(h, 404, "EntryNotFound", f"{path} does not exist")
        if self.on_resolve is not None and body:
            self.on_resolve(path)
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": commit,
            "ETag": f'"{git_blob_id(content)}"',
        }
        if path in repo.lfs:
            # LFS files: the hub names the content's sha256 in X-Linked-Etag.
            headers["X-Linked-Etag"] = f'"{hashlib.sha256(content).hexdigest()}"'
            headers["X-Linked-Size"] = str(len(content))
        if path in repo.corrupt:
            content = bytes([content[0] ^ 0xFF]) + content[1:]
        self._send(h, 200, content, headers, body)
