"""``python -m jobs.hydrate`` against a local stand-in for the Hugging Face Hub.

The program runs as the Job runs it (a subprocess, ``python -m jobs.hydrate``)
with ``HF_ENDPOINT`` pointing at :class:`tests.support.fake_hf_hub.FakeHub` on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from function.naming import source_identity
from jobs import hydrate
from jobs.contract import (
    EXIT_PERMANENT,
    MARKER_FILE,
    PARTIAL_SUFFIX,
    PRUNING_SUFFIX,
    identity_dir,
)
from tests.support.fake_hf_hub import FakeHub, Repo
from tests.support.fake_kube_api import FakeKubeAPI

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_FAKEtokenForTheStandInHub0123456789"
SA_TOKEN = "eyJhbGciOiJSUzI1NiJ9.fake-service-account-token"
C1 = "1" * 40
C2 = "2" * 40
FILES_C1 = {
    "config.json": b'{"model_type": "qwen2"}',
    "model.safetensors": os.urandom(3 * 1024 * 1024 + 17),
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}
FILES_C2 = {
    "config.json": b'{"model_type": "qwen2", "v": 2}',
    "model-00001-of-00001.safetensors": b"w" * 4096,
}


LFS = frozenset({"model.safetensors", "model-00001-of-00001.safetensors"})


def make_hub(token: str | None = TOKEN, corrupt: frozenset[str] = frozenset()) -> FakeHub:
    return FakeHub(
        {
            "org/tiny": Repo(
                files={C1: FILES_C1, C2: FILES_C2},
                refs={"main": C1, "v2": C2},
                token=token,
                lfs=LFS,
                corrupt=corrupt,
            )
        }
    )


@pytest.fixture
def hub():
    with make_hub() as h:
        yield h


def expected_digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{path}\0{hashlib.sha256(files[path]).hexdigest()}\n".encode())
    return "sha256:" + h.hexdigest()


@pytest.fixture
def kube(tmp_path):
    """An HTTPS API server stand-in and the pod's view of it: the env and service account
    directory (token, namespace, ca.crt) that ``load_incluster_config`` reads."""
    sa = tmp_path / "sa"
    api = FakeKubeAPI(tls_dir=sa)
    (sa / "token").write_text(SA_TOKEN)
    (sa / "namespace").write_text("default\n")
    api.add_configmap("default", "result-cm")
    api.env = {  # type: ignore[attr-defined]
        "MODELPLANE_RESULT_CONFIGMAP": "result-cm",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(api.port),
        "MODELPLANE_SA_DIR": str(sa),
    }
    yield api
    api.close()


def bearer(authorization: str | None) -> str | None:
    """The credentials of an ``Authorization: Bearer`` header (the scheme is
    case-insensitive, RFC 7235 section 2.1; the kubernetes client sends ``bearer``)."""
    scheme, _, credentials = (authorization or "").partition(" ")
    return credentials if scheme.lower() == "bearer" else None


def idir(target: Path, revision: str = "main", repo: str = "org/tiny") -> Path:
    """The directory of ``repo@revision``'s identity under the mount ``target``."""
    return Path(identity_dir(str(target), source_identity(repo, revision)))


def tree(d: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``d``: content, inode and mtime (ns): "untouched" is all three."""
    return {
        p.relative_to(d).as_posix(): (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def run_program(
    endpoint: str,
    target: Path,
    *,
    revision: str = "main",
    token: str | None = TOKEN,
    repo: str = "org/tiny",
    identity: str | None = None,
    termination_log: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "MODELPLANE_", "KUBERNETES_SERVICE_"))
        and k != "TERMINATION_LOG"
    }
    env.update(extra_env or {})
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_OFFLINE="0",
        HF_HOME=str(target.parent / "hf-home"),
        TERMINATION_LOG=str(termination_log or target.parent / "termination-log"),
    )
    if token is not None:
        env["HF_TOKEN"] = token
    args = [sys.executable, "-m", "jobs.hydrate", "--repo", repo, "--revision", revision]
    args += ["--target", str(target)]
    if identity is not None:
        args += ["--identity", identity]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def model_files(target: Path) -> dict[str, bytes]:
    """Files of the model in ``target`` (without the marker and the hub's .cache)."""
    return {
        p.relative_to(target).as_posix(): p.read_bytes()
        for p in target.rglob("*")
        if p.is_file() and p.relative_to(target).parts[0] != ".cache" and p.name != MARKER_FILE
    }


def assert_no_token(proc: subprocess.CompletedProcess[str], *extra: str) -> None:
    b64 = base64.b64encode(TOKEN.encode()).decode()
    for text in (proc.stdout, proc.stderr, *extra):
        assert TOKEN not in text
        assert b64 not in text


def test_downloads_files_writes_marker_and_skips_second_run(hub, tmp_path) -> None:
    target = tmp_path / "models"
    proc = run_program(hub.endpoint, target)
    assert proc.returncode == 0, proc.stderr
    # The weights are in the identity's directory; nothing is left at the mount's root
    # but that directory (and the hub's cache of the download).
    d = idir(target)
    assert model_files(d) == FILES_C1
    assert sorted(p.name for p in target.iterdir()) == [d.name]
    marker = json.loads((d / MARKER_FILE).read_text())
    assert marker == {
        "repo": "org/tiny",
        "revision": "main",
        "identity": source_identity("org/tiny", "main"),
        "commit": C1,
        "digest": expected_digest(FILES_C1),
        "files": 3,
        "bytes": sum(len(v) for v in FILES_C1.values()),
        "validatedAt": marker["validatedAt"],
        "completedAt": marker["completedAt"],
    }
    assert marker["validatedAt"] == marker["completedAt"]
    assert hydrate.read_marker(d) == marker
    # The token went to the hub on every request, as a bearer token, and nowhere else.
    assert hub.requests
    assert {r.authorization for r in hub.requests} == {f"Bearer {TOKEN}"}
    term = (tmp_path / "termination-log").read_text()
    assert json.loads(term)["digest"] == expected_digest(FILES_C1)
    assert_no_token(proc, term, (d / MARKER_FILE).read_text())
    # Second run: the marker records this identity, nothing is fetched.
    seen = len(hub.requests)
    again = run_program(hub.endpoint, target)
    assert again.returncode == 0, again.stderr
    assert len(hub.requests) == seen
    assert "already hydrated" in again.stderr
    assert json.loads((tmp_path / "termination-log").read_text())["skipped"] is True
    assert_no_token(again)


def test_new_revision_hydrates_beside_the_old_one(tmp_path) -> None:
    """A revision edit never writes into the identity live replicas read: the new one
    downloads into ``<identity>.partial`` while the old directory stays byte for byte
    (same inodes, same mtimes), and appears under its final name only when complete."""
    target = tmp_path / "models"
    seen: list[tuple[bool, bool, dict[str, tuple[bytes, int, int]]]] = []
    old = idir(target, "main")
    new = idir(target, "v2")
    partial = new.with_name(new.name + PARTIAL_SUFFIX)

    def during(path: str) -> None:  # the hub is about to serve a file of the new commit
        seen.append((new.exists(), partial.is_dir(), tree(old)))

    with make_hub() as hub:
        assert run_program(hub.endpoint, target).returncode == 0
        before = tree(old)
        hub.on_resolve = during
        proc = run_program(hub.endpoint, target, revision="v2")
    assert proc.returncode == 0, proc.stderr
    assert seen, "the stand-in hub served no file of the new revision"
    for new_visible, partial_there, old_tree in seen:
        assert not new_visible, "the new identity was visible before it was complete"
        assert partial_there
        assert old_tree == before, "the old identity changed while the new one downloaded"
    # Side by side: both complete, each with its own marker; no partial left.
    assert tree(old) == before
    assert model_files(old) == FILES_C1 and model_files(new) == FILES_C2
    assert not partial.exists()
    assert hydrate.read_marker(old)["identity"] == source_identity("org/tiny", "main")
    marker = hydrate.read_marker(new)
    assert marker is not None
    assert (marker["commit"], marker["identity"]) == (C2, source_identity("org/tiny", "v2"))
    assert marker["digest"] == expected_digest(FILES_C2)


def test_an_identity_directory_is_never_written_into(hub, tmp_path) -> None:
    """An identity's directory without its marker (someone else's files) fails the run:
    the program never downloads into a directory under an identity's final name."""
    target = tmp_path / "models"
    d = idir(target)
    d.mkdir(parents=True)
    (d / "config.json").write_bytes(b"not ours")
    proc = run_program(hub.endpoint, target)
    assert proc.returncode == 1
    assert "never written into" in proc.stderr
    assert (d / "config.json").read_bytes() == b"not ours"
    assert not (d / MARKER_FILE).exists()


def test_publish_never_replaces_an_identity(tmp_path) -> None:
    partial, final = tmp_path / "a.partial", tmp_path / "a"
    partial.mkdir()
    final.mkdir()
    (final / "x").write_text("old")
    with pytest.raises(FileExistsError):
        hydrate.publish(partial, final)
    assert (final / "x").read_text() == "old" and partial.is_dir()
    final2 = tmp_path / "b"
    hydrate.publish(partial, final2)
    assert final2.is_dir() and not partial.exists()


def test_interrupted_download_is_completed(hub, tmp_path) -> None:
    """A ``.partial`` directory left by a killed pod (files, a truncated one, no marker)
    is resumed, and published when complete."""
    target = tmp_path / "models"
    d = idir(target)
    partial = d.with_name(d.name + PARTIAL_SUFFIX)
    partial.mkdir(parents=True)
    (partial / "config.json").write_bytes(FILES_C1["config.json"])
    (partial / "model.safetensors").write_bytes(FILES_C1["model.safetensors"][:100])
    (partial / "stale.bin").write_bytes(b"left by something else")
    (target / "lost+found").mkdir()
    proc = run_program(hub.endpoint, target)
    assert proc.returncode == 0, proc.stderr
    assert model_files(d) == FILES_C1
    assert not partial.exists()
    assert (target / "lost+found").is_dir()
    marker = hydrate.read_marker(d)
    assert marker is not None
    assert marker["digest"] == expected_digest(FILES_C1)


def test_gated_repo_without_token_fails_permanently(hub, tmp_path) -> None:
    target = tmp_path / "models"
    proc = run_program(hub.endpoint, target, token=None)
    assert proc.returncode == EXIT_PERMANENT, proc.stderr
    assert not idir(target).exists()
    assert {r.authorization for r in hub.requests} == {None}
    assert "permanent" in proc.stderr


def test_wrong_token_fails_and_is_not_logged(tmp_path) -> None:
    with make_hub(token="hf_the_right_one") as hub:
        proc = run_program(hub.endpoint, tmp_path / "models")
    assert proc.returncode == EXIT_PERMANENT
    assert_no_token(proc, (tmp_path / "termination-log").read_text())


@pytest.mark.parametrize(
    ("repo", "revision"), [("org/missing", "main"), ("org/tiny", "no-such-branch")]
)
def test_unknown_repo_or_revision_fails_permanently(hub, tmp_path, repo, revision) -> None:
    proc = run_program(hub.endpoint, tmp_path / "models", repo=repo, revision=revision)
    assert proc.returncode == EXIT_PERMANENT, proc.stderr
    assert not idir(tmp_path / "models", revision, repo).exists()


def test_hub_unreachable_is_retried(tmp_path) -> None:
    hub = make_hub()
    endpoint = hub.endpoint
    hub.close()
    proc = run_program(endpoint, tmp_path / "models")
    assert proc.returncode == 1, proc.stderr
    assert not idir(tmp_path / "models").exists()


@pytest.mark.parametrize("bad", ["model.safetensors", "config.json"])
def test_corrupted_file_fails_validation_and_is_removed(tmp_path, bad) -> None:
    """A file that does not match the hub's published checksum (LFS sha256 or git
    blob id) fails the run before the marker, and is removed so a retry fetches it."""
    target = tmp_path / "models"
    with make_hub(corrupt=frozenset({bad})) as hub:
        proc = run_program(hub.endpoint, target)
    assert proc.returncode == 1, proc.stderr
    assert "ChecksumError" in proc.stderr and bad in proc.stderr
    partial = idir(target).with_name(idir(target).name + PARTIAL_SUFFIX)
    assert not idir(target).exists(), "an unverified identity was published"
    assert not (partial / MARKER_FILE).exists()
    assert not (partial / bad).exists()
    # The hub serves the right bytes again: the retry completes.
    with make_hub() as hub:
        proc = run_program(hub.endpoint, target)
    assert proc.returncode == 0, proc.stderr
    assert model_files(idir(target)) == FILES_C1


def test_identity_mismatch_is_a_usage_error(hub, tmp_path) -> None:
    proc = run_program(hub.endpoint, tmp_path / "models", identity="0123456789")
    assert proc.returncode == 2
    assert not hub.requests


def test_marker_write_is_atomic(tmp_path, monkeypatch) -> None:
    path = tmp_path / MARKER_FILE
    path.write_text('{"identity": "old"}')

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(hydrate.os, "replace", boom)
    with pytest.raises(OSError):
        hydrate.write_atomically(path, b'{"identity": "new"}')
    assert path.read_text() == '{"identity": "old"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER_FILE]


def test_prune_keeps_marker_cache_and_lost_found(tmp_path) -> None:
    for rel in ("a.bin", "old/b.bin", ".cache/huggingface/x", "lost+found/y", MARKER_FILE):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    removed = hydrate.prune(tmp_path, {"a.bin"})
    assert removed == ["old/b.bin"]
    assert not (tmp_path / "old").exists()
    for rel in ("a.bin", ".cache/huggingface/x", "lost+found/y", MARKER_FILE):
        assert (tmp_path / rel).exists()


# Each row: the mount's entries, the keep-list, what prune removes (a reason per row).
PRUNE_ROWS = [
    pytest.param(["aaaaaaaaaaaa", "bbbbbbbbbbbb"], {"aaaaaaaaaaaa"}, ["bbbbbbbbbbbb"], id="old"),
    pytest.param(
        ["aaaaaaaaaaaa", "bbbbbbbbbbbb"],
        {"aaaaaaaaaaaa", "bbbbbbbbbbbb"},
        [],
        id="a-live-replica-still-serves-the-old-one",
    ),
    pytest.param(
        ["aaaaaaaaaaaa", "cccccccccccc.partial", "aaaaaaaaaaaa.partial"],
        {"aaaaaaaaaaaa"},
        ["cccccccccccc.partial"],
        id="an-abandoned-download-goes-a-kept-one-stays",
    ),
    pytest.param(
        ["aaaaaaaaaaaa", ".cache", "lost+found", "config.json", "weights", "ABCDEFABCDEF"],
        {"aaaaaaaaaaaa"},
        [],
        id="what-is-not-an-identity-is-left-alone",
    ),
]


PRUNE_ROWS += [
    pytest.param(
        ["aaaaaaaaaaaa", "bbbbbbbbbbbb.pruning", "aaaaaaaaaaaa.pruning"],
        {"aaaaaaaaaaaa"},
        ["aaaaaaaaaaaa.pruning", "bbbbbbbbbbbb.pruning"],
        id="pruning-leftovers-go-even-of-a-kept-identity",
    ),
    pytest.param(
        ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "bbbbbbbbbbbb.pruning"],
        {"aaaaaaaaaaaa"},
        ["bbbbbbbbbbbb", "bbbbbbbbbbbb.pruning"],
        id="a-leftover-of-the-pruned-identity-itself",
    ),
    pytest.param(
        ["aaaaaaaaaaaa", "model.safetensors", "tokenizer", MARKER_FILE, "lost+found"],
        {"aaaaaaaaaaaa"},
        [],
        id="root-layout-of-the-release-before-side-by-side-is-left-alone",
    ),
]


@pytest.mark.parametrize(("entries", "keep", "removed"), PRUNE_ROWS)
def test_prune_identities(tmp_path, entries, keep, removed) -> None:
    for name in entries:
        if (
            "." in name
            and not name.startswith(".")
            and not name.endswith((PARTIAL_SUFFIX, PRUNING_SUFFIX))
        ):
            (tmp_path / name).write_text("x")
        else:
            (tmp_path / name).mkdir()
            (tmp_path / name / "f").write_text("x")
    assert hydrate.prune_identities(tmp_path, keep) == removed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(entries) - set(removed))


def test_prune_program_keeps_what_it_is_told(hub, tmp_path) -> None:
    """``--prune-keep``: the Job the hydration composes once the new identity is Ready."""
    target = tmp_path / "models"
    assert run_program(hub.endpoint, target).returncode == 0
    assert run_program(hub.endpoint, target, revision="v2").returncode == 0
    old, new = idir(target, "main"), idir(target, "v2")
    kept = tree(new)
    cmd = [sys.executable, "-m", "jobs.hydrate", "--target", str(target), "--prune-keep"]
    env = {**os.environ, "TERMINATION_LOG": str(tmp_path / "prune-log")}
    proc = subprocess.run([*cmd, new.name], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not old.exists() and tree(new) == kept
    assert json.loads((tmp_path / "prune-log").read_text()) == {
        "kept": [new.name],
        "pruned": [old.name],
    }
    for bad in ("", "../etc", "ABC"):
        proc = subprocess.run([*cmd, bad], cwd=ROOT, env=env, capture_output=True, text=True)
        assert proc.returncode == 2, bad
    assert new.exists()


def test_redactor_hides_the_token_in_library_logs(caplog) -> None:
    import logging

    logger = logging.getLogger("huggingface_hub.test")
    handler_filter = hydrate._Redactor(TOKEN)
    record = logger.makeRecord("x", logging.WARNING, __file__, 1, "sent %s", (TOKEN,), None)
    assert handler_filter.filter(record)
    assert TOKEN not in record.getMessage()
    assert "***" in record.getMessage()


# ---- reporting the result to the control plane ------------------------------------


def test_reports_result_to_configmap_and_again_when_skipped(hub, kube, tmp_path) -> None:
    target = tmp_path / "models"
    proc = run_program(hub.endpoint, target, extra_env=kube.env)
    assert proc.returncode == 0, proc.stderr
    (req,) = kube.requests
    assert req["method"] == "PATCH"
    assert req["path"] == "/api/v1/namespaces/default/configmaps/result-cm"
    assert bearer(req["authorization"]) == SA_TOKEN
    assert req["content_type"] == "application/merge-patch+json"
    assert req["query"] == {"fieldManager": hydrate.FIELD_MANAGER}
    reported = json.loads(req["body"]["data"]["result"])
    assert reported == hydrate.read_marker(idir(target))
    assert reported["commit"] == C1 and reported["digest"] == expected_digest(FILES_C1)
    assert SA_TOKEN not in proc.stderr + proc.stdout
    # Already hydrated: nothing is downloaded, but the result is reported again.
    again = run_program(hub.endpoint, target, extra_env=kube.env)
    assert again.returncode == 0, again.stderr
    assert len(kube.requests) == 2
    assert json.loads(kube.requests[1]["body"]["data"]["result"]) == reported
    # The merge patch left everything else of the ConfigMap alone.
    cm = kube.configmaps[("default", "result-cm")]
    assert cm["metadata"] == {"name": "result-cm", "namespace": "default"}
    assert json.loads(cm["data"]["result"]) == reported


@pytest.fixture(autouse=True)
def _fresh_redactor():
    """report_result adds the service account token to the process-wide redactor."""
    saved = set(hydrate.REDACTOR.secrets)
    yield
    hydrate.REDACTOR.secrets = saved


@pytest.fixture
def plain_kube(monkeypatch):
    """An HTTP API server stand-in, used through an explicit client Configuration."""
    monkeypatch.setenv("MODELPLANE_RESULT_CONFIGMAP", "result-cm")
    monkeypatch.setenv("POD_NAMESPACE", "default")
    with FakeKubeAPI() as api:
        api.add_configmap("default", "result-cm")
        yield api


def test_report_is_retried_then_fails(plain_kube) -> None:
    kube = plain_kube
    kube.status = 403
    slept: list[float] = []
    with pytest.raises(OSError) as err:
        hydrate.report_result(
            {"identity": "x"},
            attempts=3,
            delay=1.0,
            sleep=slept.append,
            configuration=kube.configuration(SA_TOKEN),
        )
    assert len(kube.requests) == 3
    assert slept == [1.0, 2.0]
    assert isinstance(err.value, hydrate.ReportError)
    assert "HTTP 403" in str(err.value) and "default/result-cm" in str(err.value)


def test_report_patches_data_result_with_the_kubernetes_client(plain_kube) -> None:
    kube = plain_kube
    result = {"identity": "x", "commit": C1, "files": 3}
    assert hydrate.report_result(result, configuration=kube.configuration(SA_TOKEN)) is True
    (req,) = kube.requests
    assert req["method"] == "PATCH"
    assert req["path"] == "/api/v1/namespaces/default/configmaps/result-cm"
    assert req["content_type"] == "application/merge-patch+json"
    assert bearer(req["authorization"]) == SA_TOKEN
    assert req["body"] == {"data": {"result": json.dumps(result, sort_keys=True)}}
    assert json.loads(kube.configmaps[("default", "result-cm")]["data"]["result"]) == result


def test_report_waits_for_the_configmap_and_the_role(plain_kube) -> None:
    """404 (the ConfigMap not applied yet) and 403 (the RoleBinding not yet) are retried;
    the ConfigMap is never created (the Role cannot allow create by name)."""
    kube = plain_kube
    kube.statuses = [404, 403]
    slept: list[float] = []
    ok = hydrate.report_result(
        {"identity": "x"}, delay=0.5, sleep=slept.append, configuration=kube.configuration(SA_TOKEN)
    )
    assert ok is True
    assert [r["method"] for r in kube.requests] == ["PATCH", "PATCH", "PATCH"]
    assert slept == [0.5, 1.0]


def test_report_unreachable_api_fails_after_every_attempt(monkeypatch) -> None:
    monkeypatch.setenv("MODELPLANE_RESULT_CONFIGMAP", "result-cm")
    monkeypatch.setenv("POD_NAMESPACE", "default")
    api = FakeKubeAPI()
    configuration = api.configuration(SA_TOKEN)
    api.close()  # nothing listens on the port any more
    slept: list[float] = []
    with pytest.raises(hydrate.ReportError):
        hydrate.report_result(
            {"identity": "x"}, attempts=2, sleep=slept.append, configuration=configuration
        )
    assert slept == [2.0]


def test_report_never_logs_the_service_account_token(plain_kube, caplog) -> None:
    """Even when the API server echoes the request's Authorization in its error."""
    import logging

    kube = plain_kube
    kube.echo_authorization = True
    kube.statuses = [403]
    caplog.handler.addFilter(hydrate.REDACTOR)  # as main() installs it on the root handlers
    caplog.set_level(logging.DEBUG)
    try:
        assert hydrate.report_result(
            {"identity": "x"}, sleep=lambda _: None, configuration=kube.configuration(SA_TOKEN)
        )
    finally:
        caplog.handler.removeFilter(hydrate.REDACTOR)
    assert SA_TOKEN in json.dumps(kube.requests[0]["authorization"])  # it was sent...
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "reporting the result failed" in text and "***" in text
    assert SA_TOKEN not in text  # ...and never logged


def test_report_outside_a_cluster_is_a_retryable_failure(hub, tmp_path) -> None:
    """No service host: the weights stay, the exit code asks the Job to retry the report."""
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(SA_TOKEN)
    (sa / "ca.crt").write_text("not used")
    env = {"MODELPLANE_RESULT_CONFIGMAP": "result-cm", "POD_NAMESPACE": "default"}
    env["MODELPLANE_SA_DIR"] = str(sa)
    proc = run_program(hub.endpoint, tmp_path / "models", extra_env=env)
    assert proc.returncode == 1, proc.stderr
    assert "could not report the result" in proc.stderr
    assert hydrate.read_marker(idir(tmp_path / "models")) is not None
    assert SA_TOKEN not in proc.stderr + proc.stdout


def test_no_configmap_no_report(monkeypatch) -> None:
    monkeypatch.delenv("MODELPLANE_RESULT_CONFIGMAP", raising=False)
    assert hydrate.report_result({"identity": "x"}) is False


def test_reported_result_becomes_hydration_evidence(hub, kube, tmp_path) -> None:
    """End to end: what the program reports is what the composer records as evidence."""
    from tests.test_hydration import evidence_from_result

    proc = run_program(hub.endpoint, tmp_path / "models", extra_env=kube.env)
    assert proc.returncode == 0, proc.stderr
    result = kube.requests[0]["body"]["data"]["result"]
    marker = json.loads(result)
    evidence = evidence_from_result(result, repo="org/tiny", revision="main")
    assert evidence == {
        "commit": C1,
        "digest": marker["digest"],
        "validatedAt": marker["validatedAt"],
    }


def test_the_composed_job_runs_the_program(hub, kube, tmp_path) -> None:
    """The Job the composer emits, run as its container would: command, args and env."""
    from tests.support.harness import NAMESPACE, desired, request, run, xr

    cluster = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "gpu-a"},
        "status": {
            "providerConfigRef": {"name": "gpu-a", "kind": "ClusterProviderConfig"},
            "cache": {"storageClassName": "rwx"},
        },
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf-token", "namespace": NAMESPACE},
        "data": {"HF_TOKEN": base64.b64encode(TOKEN.encode()).decode()},
    }
    spec = {
        "clusterName": "gpu-a",
        "cacheName": "tiny",
        "source": "HuggingFace",
        "huggingFace": {
            "repo": "org/tiny",
            "revision": "main",
            "sizeGiB": 1,
            "authSecret": {"name": "hf-token", "key": "HF_TOKEN"},
        },
    }
    rsp = run(
        request(
            xr("ModelCacheHydration", "h", spec),
            required={"cluster": [cluster], "auth-secret": [secret]},
        )
    )
    (job,) = [
        v["spec"]["forProvider"]["manifest"]
        for k, v in desired(rsp).items()
        if k.startswith("job-")
    ]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    mount = container["volumeMounts"][0]["mountPath"]
    target = tmp_path / "pvc"
    args = [str(target) if a == mount else a for a in container["args"]]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MODELPLANE_"))}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = e["value"].replace("/tmp", str(tmp_path / "tmp"))
    # What the kubelet resolves: the token from the remote Secret, the pod's namespace.
    env["HF_TOKEN"] = TOKEN
    env["POD_NAMESPACE"] = "default"
    env.update(
        HF_ENDPOINT=hub.endpoint,
        KUBERNETES_SERVICE_HOST=kube.env["KUBERNETES_SERVICE_HOST"],
        KUBERNETES_SERVICE_PORT=kube.env["KUBERNETES_SERVICE_PORT"],
        MODELPLANE_SA_DIR=kube.env["MODELPLANE_SA_DIR"],
        TERMINATION_LOG=str(tmp_path / "termination-log"),
    )
    # The function composes the ConfigMap; the Job only patches it.
    kube.add_configmap("default", env["MODELPLANE_RESULT_CONFIGMAP"])
    assert container["command"][0] == "python"
    proc = subprocess.run(
        [sys.executable, *container["command"][1:], *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    # The weights land in the identity's directory, the one the serving workload reads.
    assert model_files(idir(target)) == FILES_C1
    (req,) = kube.requests
    cm = env["MODELPLANE_RESULT_CONFIGMAP"]
    assert req["path"] == f"/api/v1/namespaces/default/configmaps/{cm}"
    assert json.loads(req["body"]["data"]["result"])["digest"] == expected_digest(FILES_C1)
    assert_no_token(proc)


# ---- a prune killed half-way, damaged directories, abandoned downloads (issue 13) ----

OLD_ID = source_identity("org/tiny", "main")
NEW_ID = source_identity("org/tiny", "v2")


def test_a_prune_killed_half_way_never_leaves_a_gutted_identity(hub, tmp_path, monkeypatch) -> None:
    """The prune renames ``<identity>`` to ``<identity>.pruning`` before deleting it: a
    pod killed mid-delete leaves no directory under the identity's name, so a later
    download of that identity starts afresh (never skips on the marker of a gutted
    directory), and the leftover is removed by the next run."""
    target = tmp_path / "models"
    assert run_program(hub.endpoint, target).returncode == 0
    old = idir(target, "main")
    real_rmtree = hydrate.shutil.rmtree

    def killed(path, *a, **kw):  # deletes one file, then the pod is killed
        victim = Path(path) / "model.safetensors"
        victim.unlink()
        raise OSError("pod killed")

    monkeypatch.setattr(hydrate.shutil, "rmtree", killed)
    with pytest.raises(OSError, match="killed"):
        hydrate.prune_identities(target, {NEW_ID})
    monkeypatch.setattr(hydrate.shutil, "rmtree", real_rmtree)
    leftover = old.with_name(old.name + PRUNING_SUFFIX)
    assert not old.exists() and leftover.is_dir()
    assert (leftover / MARKER_FILE).exists()  # the marker survived; it is not trusted
    seen = len(hub.requests)
    proc = run_program(hub.endpoint, target)
    assert proc.returncode == 0, proc.stderr
    assert len(hub.requests) > seen and "already hydrated" not in proc.stderr
    assert model_files(old) == FILES_C1
    assert not leftover.exists()  # removed at the start of the download


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: (d / "model.safetensors").unlink(), id="a-file-gone"),
        pytest.param(lambda d: (d / "config.json").write_bytes(b"{}"), id="a-file-truncated"),
        pytest.param(lambda d: (d / "tokenizer" / "tokenizer.json").unlink(), id="in-a-subdir"),
        pytest.param(
            lambda d: (d / MARKER_FILE).write_text(json.dumps({"identity": OLD_ID, "commit": C1})),
            id="a-marker-that-counts-nothing",
        ),
    ],
)
def test_a_damaged_identity_is_never_skipped(hub, tmp_path, damage) -> None:
    """A marker alone does not decide the skip: a directory holding less than its
    marker counts fails the run (the Job fails; it is never written into)."""
    target = tmp_path / "models"
    assert run_program(hub.endpoint, target).returncode == 0
    d = idir(target)
    damage(d)
    with pytest.raises(RuntimeError, match="damaged"):
        hydrate.hydrate(
            hydrate.Source("org/tiny", "main", OLD_ID), target, token=None, endpoint=None
        )
    proc = run_program(hub.endpoint, target)
    assert proc.returncode == 1 and "damaged" in proc.stderr
    assert (d / MARKER_FILE).exists()  # nothing written into it


# Each row: what is on the mount before the download of ``revision``, what is left
# after it (identity directories by revision name, leftovers by suffix).
ABANDONED_ROWS = [
    pytest.param(
        "main",
        [NEW_ID + PARTIAL_SUFFIX],
        [OLD_ID],
        id="revert-after-a-failed-new-revision-removes-its-partial",
    ),
    pytest.param(
        "v2",
        ["cccccccccccc" + PARTIAL_SUFFIX, OLD_ID, "dddddddddddd" + PRUNING_SUFFIX],
        [NEW_ID, OLD_ID],
        id="a-third-edit-removes-the-abandoned-second-and-pruning-leftovers",
    ),
    pytest.param(
        "v2",
        [OLD_ID, "lost+found", "config.json", "model.safetensors"],
        [NEW_ID, OLD_ID, "config.json", "lost+found", "model.safetensors"],
        id="identity-directories-and-the-root-layout-stay",
    ),
]


@pytest.mark.parametrize(("revision", "before", "after"), ABANDONED_ROWS)
def test_a_download_removes_other_identities_abandoned_partials(
    hub, tmp_path, revision, before, after
) -> None:
    target = tmp_path / "models"
    target.mkdir()
    for name in before:
        if name == OLD_ID:
            assert run_program(hub.endpoint, target).returncode == 0
        elif name in ("config.json", "model.safetensors"):
            (target / name).write_bytes(b"root layout")
        else:
            (target / name).mkdir()
            (target / name / "model.safetensors").write_bytes(b"x" * 1024)
    kept = tree(idir(target, "main")) if OLD_ID in before else None
    proc = run_program(hub.endpoint, target, revision=revision)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in target.iterdir()) == sorted(after)
    if kept is not None:
        assert tree(idir(target, "main")) == kept  # another identity is never touched
