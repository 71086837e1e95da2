"""Command line: ``python -m function [serve] [flags]`` and ``python -m function config``.

Flags and environment variables are those Crossplane's function runtime passes
(``--address``/``ADDRESS``, ``--tls-certs-dir``/``TLS_SERVER_CERTS_DIR``,
``--insecure``/``INSECURE``, ``--debug``/``DEBUG``, ``--max-recv-message-size``/
``MAX_RECV_MESSAGE_SIZE`` in MiB), plus ``--metrics-address`` (Prometheus metrics,
default ``METRICS_ADDRESS`` or ``:8080``, the metrics port Crossplane declares on
function pods; empty turns serving off). Every other setting comes from the
environment (``function.settings``); a bad value stops start-up with exit code 2 and
a message naming the variable. Tracing is opt-in (``function.tracing``).
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
        default=os.environ.get("MAX_RECV_MESSAGE_SIZE", DEFAULT_MAX_RECV_MB),
        help="largest request accepted, in MiB (default MAX_RECV_MESSAGE_SIZE or 256)",
    )
    p.add_argument("--grace-seconds", type=float, default=20.0)
    p.add_argument(
        "--workers",
        type=int,
        default=os.environ.get("WORKERS") or None,
        help="worker processes sharing the port with SO_REUSEPORT "
        "(default: WORKERS or the CPUs available, at most 8)",
    )
    p.add_argument(
        "--metrics-address",
        default=None,
        help="[host]:port for Prometheus metrics (default: METRICS_ADDRESS or :8080); "
        "empty to disable",
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
    if not 1 <= args.max_recv_message_size <= 2048:
        print(
            "function-modelplane: --max-recv-message-size must be 1 to 2048 (MiB)", file=sys.stderr
        )
        return 2
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
    from function.server import check_serving_config

    problem = check_serving_config(cfg)
    if problem:
        print(f"function-modelplane: {problem}", file=sys.stderr)
        return 2
    from function import metrics, tracing
    from function.server import default_workers, serve_workers

    workers = args.workers if args.workers is not None else default_workers()
    if workers < 1:
        print("function-modelplane: --workers must be at least 1", file=sys.stderr)
        return 2
    multiproc_dir = settings.prometheus_multiproc_dir
    if workers > 1 and not multiproc_dir:
        # Several processes: aggregate their metrics with prometheus-client's
        # multiprocess mode. Workers are spawned, so they see this variable at import.
        import tempfile

        multiproc_dir = tempfile.mkdtemp(prefix="function-modelplane-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc_dir
    address = settings.metrics_address if args.metrics_address is None else args.metrics_address
    try:
        metrics.parse_address(address)
    except ValueError as e:
        print(f"function-modelplane: --metrics-address: {e}", file=sys.stderr)
        return 2
    if multiproc_dir:
        # This process serves the metrics of every worker; stale files of a previous
        # run would be summed in (prometheus-client multiprocess mode).
        metrics.clear_multiprocess_dir(multiproc_dir)
    try:
        metrics_server = metrics.serve(address, multiproc_dir)
    except OSError as e:
        print(f"function-modelplane: --metrics-address {address}: {e}", file=sys.stderr)
        return 2
    if workers > 1:
        try:
            return serve_workers(cfg, workers, debug=args.debug)
        finally:
            if metrics_server is not None:
                metrics_server.shutdown()
    traces = tracing.configure(settings)
    try:
        serve(FunctionRunner(settings=settings, tracing=traces), cfg)
    finally:
        traces.shutdown()
        if metrics_server is not None:
            metrics_server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
