"""Command line: ``python -m function [serve] [flags]`` and ``python -m function config``.

Flags and environment variables are those Crossplane's function runtime passes
(``--address``/``ADDRESS``, ``--tls-certs-dir``/``TLS_SERVER_CERTS_DIR``,
``--insecure``/``INSECURE``, ``--debug``/``DEBUG``, ``--max-recv-message-size``/
``MAX_RECV_MESSAGE_SIZE`` in MiB), plus ``--processes`` (alias ``--workers``: compute
processes behind the one gRPC acceptor, ``function.edge.pool``), ``--grace-seconds`` and
``--metrics-address``. A flag wins over its variable. Every other setting comes from
the environment. All of them are defined once, in ``function.ops.settings`` (type, unit,
default, bounds, description): ``--help`` and ``config`` print those descriptions,
and a bad value stops start-up (and ``config``) with exit code 2 and a message naming
the variable or flag. Tracing is opt-in (``function.ops.tracing``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from function.edge.server import ServerConfig, serve
from function.ops import logs
from function.ops.settings import (
    FLAGS,
    Settings,
    SettingsError,
    describe,
    load_settings,
    unit,
    variable,
)


def parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests).

    Each flag's help is its setting's one-line description (``function.ops.settings``); a
    flag that is not given is absent from the parsed namespace, so the variable or the
    default applies.
    """
    p = argparse.ArgumentParser(
        prog="python -m function",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "command",
        nargs="?",
        default="serve",
        choices=["serve", "config"],
        help="serve RunFunction (default), or print every setting, its value and source",
    )
    for field, names in FLAGS.items():
        info = Settings.model_fields[field]
        kw: dict[str, Any] = {
            "dest": field,
            "default": argparse.SUPPRESS,
            "help": f"{describe(field)}; env {variable(field)}".replace("%", "%%"),
        }
        if info.annotation is bool:
            kw.update(action="store_const", const=True)
        elif info.annotation in (int, int | None):
            kw.update(type=int, metavar="N")
        elif info.annotation is float:
            kw.update(type=float, metavar="SECONDS")
        else:
            kw.update(metavar={"path": "DIR"}.get(unit(field), "HOST:PORT"))
        p.add_argument(*names, **kw)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    flags = {f: v for f, v in vars(args).items() if f in FLAGS}
    try:
        settings = load_settings(flags, argv)
    except SettingsError as e:
        print(f"function-modelplane: {e}", file=sys.stderr)
        return 2
    if args.command == "config":
        from function.ops.config_report import report

        print(report(settings, flags=flags))
        return 0
    logs.configure(debug=settings.debug)
    cfg = ServerConfig(
        address=settings.address,
        tls_certs_dir=settings.tls_server_certs_dir,
        insecure=settings.insecure,
        max_recv_mb=settings.max_recv_message_size,
        grace_seconds=settings.grace_seconds,
        deadline_cap_seconds=settings.call_deadline_seconds,
    )
    if not cfg.insecure and not cfg.tls_certs_dir:
        print(
            "function-modelplane: give --tls-certs-dir (or TLS_SERVER_CERTS_DIR) or --insecure",
            file=sys.stderr,
        )
        return 2
    from function.edge.server import check_serving_config

    problem = check_serving_config(cfg)
    if problem:
        print(f"function-modelplane: {problem}", file=sys.stderr)
        return 2
    from function.edge.server import default_processes
    from function.ops import metrics

    processes = settings.workers if settings.workers is not None else default_processes()
    multiproc_dir = settings.prometheus_multiproc_dir
    if not multiproc_dir:
        # Calls are composed in compute processes (function.edge.pool): aggregate their
        # metrics with prometheus-client's multiprocess mode. They are spawned, so they
        # see this variable at import.
        import tempfile

        multiproc_dir = tempfile.mkdtemp(prefix="function-modelplane-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc_dir
    address = settings.metrics_address
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
    try:
        serve(None, cfg, processes=processes, debug=settings.debug)
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
