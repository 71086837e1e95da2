"""A stand-in for the Kubernetes API server's ConfigMap endpoints, on 127.0.0.1.

It serves what ``python -m jobs.hydrate`` uses to report its result:
``PATCH``/``GET`` of ``/api/v1/namespaces/<ns>/configmaps/<name>`` (and ``POST`` to
the collection, so a client that creates is seen too). Each request is recorded
(method, path, query, ``Authorization``, ``Content-Type``, JSON body). A PATCH
applies a JSON merge patch (RFC 7386) to the stored ConfigMap and answers with it,
as the API server does; ``statuses`` makes the next requests fail with a
``metav1.Status`` body instead.

With ``tls_dir`` it serves HTTPS with a certificate for ``127.0.0.1`` signed by a
fresh CA written to ``<tls_dir>/ca.crt``, so the in-cluster configuration of the
``kubernetes`` client (``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``,
the service account's ``ca.crt``) can be used unchanged.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_REASONS = {403: "Forbidden", 404: "NotFound", 409: "AlreadyExists", 500: "InternalError"}


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def write_tls(tls_dir: Path) -> tuple[Path, Path, Path]:
    """A CA (``ca.crt``) and a server certificate for 127.0.0.1 it signed (``tests.support.pki``).

    Returns:
        ``(ca.crt, server.crt, server.key)`` paths in ``tls_dir``.
    """
    from tests.support.pki import make_ca, make_leaf, pem

    ca = make_ca("fake-kube-ca")
    cert, key = make_leaf(ca, "kube-apiserver", server=True)
    tls_dir.mkdir(parents=True, exist_ok=True)
    ca_path, cert_path, key_path = (
        tls_dir / "ca.crt",
        tls_dir / "server.crt",
        tls_dir / "server.key",
    )
    ca_path.write_bytes(pem(ca[0]))
    cert_path.write_bytes(cert)
    key_path.write_bytes(key)
    return ca_path, cert_path, key_path


class FakeKubeAPI:
    """ConfigMap GET/PATCH/POST on 127.0.0.1 (HTTP, or HTTPS with ``tls_dir``).

    Attributes:
        requests: What each request carried, in order.
        configmaps: Stored ConfigMaps by ``(namespace, name)``; PATCH of a missing
            one answers 404, as the API server does.
        statuses: HTTP statuses to answer the next requests with (consumed in order);
            ``status`` answers every later one.
        echo_authorization: Put the request's ``Authorization`` header into failure
            messages (a server that leaks what it got, for redaction tests).
    """

    def __init__(self, status: int = 200, *, tls_dir: Path | None = None) -> None:
        self.status = status
        self.statuses: list[int] = []
        self.echo_authorization = False
        self.requests: list[dict[str, Any]] = []
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length) if length else b""
                url = urllib.parse.urlsplit(self.path)
                record = {
                    "method": method,
                    "path": url.path,
                    "query": dict(urllib.parse.parse_qsl(url.query)),
                    "authorization": self.headers.get("Authorization"),
                    "content_type": self.headers.get("Content-Type"),
                    "body": json.loads(raw) if raw else None,
                }
                with api.lock:
                    api.requests.append(record)
                    code, payload = api._answer(record)
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_PATCH(self) -> None:
                self._serve("PATCH")

            def do_POST(self) -> None:
                self._serve("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        self.ca_file: Path | None = None
        if tls_dir is not None:
            self.ca_file, cert, key = write_tls(tls_dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.port = self.server.server_address[1]
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _answer(self, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        code = self.statuses.pop(0) if self.statuses else self.status
        parts = req["path"].strip("/").split("/")
        # api/v1/namespaces/<ns>/configmaps[/<name>]
        if len(parts) < 5 or parts[:3] != ["api", "v1", "namespaces"] or parts[4] != "configmaps":
            return self._status(404, "the server could not find the requested resource", req)
        namespace = parts[3]
        name = parts[5] if len(parts) > 5 else (req["body"] or {}).get("metadata", {}).get("name")
        if code >= 300:
            return self._status(code, f'configmaps "{name}" request refused', req)
        key = (namespace, name)
        if req["method"] == "POST":
            if key in self.configmaps:
                return self._status(409, f'configmaps "{name}" already exists', req)
            body = dict(req["body"] or {})
            body["metadata"] = {**body.get("metadata", {}), "namespace": namespace}
            self.configmaps[key] = {"apiVersion": "v1", "kind": "ConfigMap", **body}
            return 201, self.configmaps[key]
        if key not in self.configmaps:
            return self._status(404, f'configmaps "{name}" not found', req)
        if req["method"] == "PATCH":
            self.configmaps[key] = _merge(self.configmaps[key], req["body"])
        return 200, self.configmaps[key]

    def _status(self, code: int, message: str, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.echo_authorization:
            message += f" (got Authorization: {req['authorization']})"
        return code, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": _REASONS.get(code, "Unknown"),
            "code": code,
        }

    def add_configmap(self, namespace: str, name: str) -> None:
        """Store an empty ConfigMap, as the function's composed Object creates it."""
        self.configmaps[(namespace, name)] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
        }

    def configuration(self, token: str) -> Any:
        """A ``kubernetes.client.Configuration`` for this server with bearer ``token``."""
        from kubernetes import client

        c = client.Configuration(
            host=self.url,
            api_key={"BearerToken": token},
            api_key_prefix={"BearerToken": "Bearer"},
        )
        if self.ca_file is not None:
            c.ssl_ca_cert = str(self.ca_file)
        return c

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeKubeAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
