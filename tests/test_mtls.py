"""mTLS for real: certificates made here, a real ``python -m function`` process (issue 9).

Crossplane's function runtime mounts ``tls.crt``, ``tls.key`` and ``ca.crt`` and sets
``TLS_SERVER_CERTS_DIR``; it calls with a client certificate from that CA. Here:

- a client with a certificate from the configured CA gets a response;
- a client without a certificate, or with one from another CA, is refused (the
  TLS handshake fails, the call ends UNAVAILABLE), and so is a plaintext client;
- ``--insecure`` with ``TLS_SERVER_CERTS_DIR`` set serves plaintext only: a
  plaintext client works, a TLS client (even with a good certificate) fails.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tests.support.pki import make_ca, make_leaf, pem
from tests.support.reliability import seeds, settle
from tests.support.secret_guard import leaks


class PKI:
    """The certificates of one test session."""

    def __init__(self, root: Path) -> None:
        ca = make_ca("crossplane-root-ca")
        other = make_ca("someone-else-ca")
        self.ca_pem = pem(ca[0])
        self.other_ca_pem = pem(other[0])
        self.server = make_leaf(ca, "function-modelplane", server=True)
        self.client = make_leaf(ca, "crossplane", server=False)
        self.foreign_client = make_leaf(other, "intruder", server=False)
        self.dir = root / "tls"
        self.dir.mkdir()
        (self.dir / "tls.crt").write_bytes(self.server[0])
        (self.dir / "tls.key").write_bytes(self.server[1])
        (self.dir / "ca.crt").write_bytes(self.ca_pem)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(address: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"function exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("function did not listen within 20 seconds")


METRICS_PORTS: dict[int, int] = {}  # server pid -> its metrics port


def _process_tree(pid: int) -> set[int]:
    """``pid`` and every descendant (the worker processes), from /proc."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree = {pid}
    grew = True
    while grew:
        grew = False
        for child, parent in parents.items():
            if parent in tree and child not in tree:
                tree.add(child)
                grew = True
    return tree


def listening_ports(pid: int) -> set[int]:
    """TCP ports that ``pid`` or its descendants listen on (Linux /proc)."""
    inodes: set[str] = set()
    for p in _process_tree(pid):
        try:
            for fd in Path(f"/proc/{p}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def start(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    address = f"127.0.0.1:{_free_port()}"
    metrics_port = _free_port()
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("TLS_SERVER_CERTS_DIR", "INSECURE")
    }
    full_env.update(env)
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "function", *args, "--address", address,
             "--metrics-address", f"127.0.0.1:{metrics_port}"],
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )  # fmt: skip
    _wait_listening(address, proc, log)
    METRICS_PORTS[proc.pid] = metrics_port
    return proc, address


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, log.read_text()[-2000:]
    assert not leaks(log.read_bytes())


def call(channel: grpc.Channel) -> bool:
    """True when a RunFunction call over ``channel`` succeeds; False when refused."""
    req, _ = settle(seeds("ModelCache")[0])
    stub = grpcv1.FunctionRunnerServiceStub(channel)
    try:
        # A refused channel fails at once; the first call may wait for the compute
        # processes to start (a loaded machine: 5 s was too short once in CI-like runs).
        rsp = stub.RunFunction(req, timeout=60)
    except grpc.RpcError as e:
        assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), e
        return False
    assert rsp.meta.tag == req.meta.tag
    return True


def tls_channel(address: str, pki: PKI, cert: tuple[bytes, bytes] | None) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.ca_pem,
        private_key=cert[1] if cert else None,
        certificate_chain=cert[0] if cert else None,
    )
    return grpc.secure_channel(address, creds)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(pki: PKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("log") / "stderr"
    proc, address = start(["--tls-certs-dir", str(pki.dir)], {}, log)
    try:
        yield address
    finally:
        stop(proc, log)


def test_client_with_a_certificate_from_the_ca_succeeds(tls_server: str, pki: PKI) -> None:
    with tls_channel(tls_server, pki, pki.client) as ch:
        assert call(ch)


def test_client_without_a_certificate_is_refused(tls_server: str, pki: PKI) -> None:
    with tls_channel(tls_server, pki, None) as ch:
        assert not call(ch)


def test_client_with_a_certificate_from_another_ca_is_refused(tls_server: str, pki: PKI) -> None:
    with tls_channel(tls_server, pki, pki.foreign_client) as ch:
        assert not call(ch)


def test_plaintext_client_is_refused_by_the_tls_server(tls_server: str) -> None:
    with grpc.insecure_channel(tls_server) as ch:
        assert not call(ch)


def test_certs_dir_from_the_environment_enables_mtls(pki: PKI, tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    proc, address = start([], {"TLS_SERVER_CERTS_DIR": str(pki.dir)}, log)
    try:
        with tls_channel(address, pki, pki.client) as ch:
            assert call(ch)
        with tls_channel(address, pki, None) as ch:
            assert not call(ch)
    finally:
        stop(proc, log)


def test_insecure_with_certs_dir_set_serves_plaintext_only(pki: PKI, tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    proc, address = start(["--insecure"], {"TLS_SERVER_CERTS_DIR": str(pki.dir)}, log)
    try:
        with grpc.insecure_channel(address) as ch:
            assert call(ch)
        with tls_channel(address, pki, pki.client) as ch:
            assert not call(ch)
        # No second (TLS) listener anywhere in the process tree, unlike the SDK's
        # runtime.serve, which opens one when given both: only RunFunction and metrics.
        if Path("/proc/net/tcp").exists():
            grpc_port = int(address.rsplit(":", 1)[1])
            ports = listening_ports(proc.pid)
            assert grpc_port in ports, ports
            assert ports <= {grpc_port, METRICS_PORTS[proc.pid]}, ports
    finally:
        stop(proc, log)


def _run_to_exit(args: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """Run ``python -m function`` until it exits; (exit code, stderr)."""
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("TLS_SERVER_CERTS_DIR", "INSECURE")
    }
    full_env.update(env)
    address = f"127.0.0.1:{_free_port()}"
    proc = subprocess.run(
        [sys.executable, "-m", "function", *args, "--address", address, "--metrics-address="],
        env=full_env, capture_output=True, timeout=timeout, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stderr.decode()


def _bad_dir(pki: PKI, root: Path, **files: bytes) -> Path:
    d = root / "bad-tls"
    d.mkdir()
    for name, default in (("tls.crt", pki.server[0]), ("tls.key", pki.server[1]),
                          ("ca.crt", pki.ca_pem)):  # fmt: skip
        (d / name).write_bytes(files.get(name.replace(".", "_"), default))
    return d


# Found by a trial: gRPC refused the listener after the compute processes had started,
# and the process hung for ever (a pod Running, refusing every call) instead of exiting.
BAD_TLS = [
    ("a key that is not the certificate's", "tls_key", "tls.crt and tls.key"),
    ("a certificate that is not PEM", "tls_crt", "tls.crt and tls.key"),
    ("a CA file that is not PEM", "ca_crt", "ca.crt holds no PEM CA certificate"),
]


@pytest.mark.parametrize(("which", "says"), [pytest.param(w, s, id=i) for i, w, s in BAD_TLS])
def test_unusable_tls_files_exit_2_at_once_naming_them(
    pki: PKI, tmp_path: Path, which: str, says: str
) -> None:
    wrong = {"tls_key": pki.client[1], "tls_crt": b"not a certificate\n", "ca_crt": b"junk\n"}
    d = _bad_dir(pki, tmp_path, **{which: wrong[which]})
    started = time.monotonic()
    code, err = _run_to_exit(["--tls-certs-dir", str(d)], {})
    assert code == 2, err[-2000:]
    assert says in err and str(d) in err, err[-2000:]
    assert "Traceback" not in err
    assert time.monotonic() - started < 30


def test_a_port_left_in_time_wait_by_a_stopped_instance_is_free(tmp_path: Path) -> None:
    """Found by a trial: a restart within a minute of a stop (the connection Crossplane
    kept open left the port in TIME_WAIT on the server's side) was refused as "another
    instance running". The stopped instance is a listener that closes its accepted
    connection first, as a stopping server does."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        conn.close()  # the server's side closes first: it enters TIME_WAIT
        client.recv(1)
        client.close()
    time.sleep(0.2)
    if Path("/proc/net/tcp").exists():
        rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        assert any(f[3] == "06" and int(f[1].rsplit(":", 1)[1], 16) == port for f in rows), (
            "no TIME_WAIT on the port: the test would prove nothing"
        )
    log = tmp_path / "stderr"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "function", "--insecure", "--address", address,
             "--metrics-address="],
            stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        _wait_listening(address, proc, log)
        with grpc.insecure_channel(address) as ch:
            assert call(ch)
    finally:
        stop(proc, log)


def test_a_small_rsa_key_grpc_serves_is_not_refused_by_the_check(tmp_path: Path) -> None:
    """Found by a review: the start-up check refused a 1024-bit RSA key (OpenSSL's
    security level, not gRPC's) as "not a PEM certificate and its private key", though
    gRPC serves it. The check is about the files, not the policy."""
    from function.edge.server import _tls_problem

    ca = make_ca("small-ca")
    cert, key = make_leaf(ca, "function-modelplane", server=True, rsa_bits=1024)
    d = tmp_path / "tls"
    d.mkdir()
    (d / "tls.crt").write_bytes(cert)
    (d / "tls.key").write_bytes(key)
    (d / "ca.crt").write_bytes(pem(ca[0]))
    assert _tls_problem(str(d)) is None
