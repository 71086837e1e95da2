"""Command line: ``python -m function [serve] [flags]`` and ``python -m function config``.

Flags and environment variables are those Crossplane's function runtime passes
(``--address``/``ADDRESS``, ``--tls-certs-dir``/``TLS_SERVER_CERTS_DIR``,
``--insecure``/``INSECURE``, ``--debug``/``DEBUG``, ``--max-recv-message-size``/
``MAX_RECV_MESSAGE_SIZE`` in MiB).
"""

from __future__ import annotations

import argparse
import os
import sys

from function import logs
from function.server import DEFAULT_ADDRESS, DEFAULT_MAX_RECV_MB, ServerConfig, serve
from function.settings import SettingsError, load_settings


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


def parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests)."""
    p = argparse.ArgumentParser(prog="python -m function", description=__doc__)
    p.add_argument("command", nargs="?", default="serve", choices=["serve", "config"])
    p.add_argument("--address", default=os.environ.get("ADDRESS", DEFAULT_ADDRESS))
    p.add_argument(
        "--tls-certs-dir",
        "--tls-server-certs-dir",
        dest="tls_certs_dir",
        default=os.environ.get("TLS_SERVER_CERTS_DIR") or None,
    )
    p.add_argument("--insecure", action="store_true", default=_truthy(os.environ.get("INSECURE")))
    p.add_argument("--debug", "-d", action="store_true", default=_truthy(os.environ.get("DEBUG")))
    p.add_argument(
        "--max-recv-message-size",
        type=int,
        default=int(os.environ.get("MAX_RECV_MESSAGE_SIZE", DEFAULT_MAX_RECV_MB)),
        help="largest request accepted, in MiB",
    )
    p.add_argument("--grace-seconds", type=float, default=20.0)
    p.add_argument(
        "--metrics-address",
        default=os.environ.get("METRICS_ADDRESS", ":8080"),
        help="host:port for Prometheus metrics; empty to disable",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as e:
        print(f"function-modelplane: {e}", file=sys.stderr)
        return 2
    if args.command == "config":
        from function.config_report import report

        print(report(settings))
        return 0
    logs.configure(debug=args.debug)
    from function.runner import FunctionRunner

    cfg = ServerConfig(
        address=args.address,
        tls_certs_dir=args.tls_certs_dir,
        insecure=args.insecure,
        max_recv_mb=args.max_recv_message_size,
        grace_seconds=args.grace_seconds,
    )
    if not cfg.insecure and not cfg.tls_certs_dir:
        print(
            "function-modelplane: give --tls-certs-dir (or TLS_SERVER_CERTS_DIR) or --insecure",
            file=sys.stderr,
        )
        return 2
    serve(FunctionRunner(settings=settings), cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
