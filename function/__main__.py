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
import logging
import sys
from typing import Any

from function.core.errors import plain_text
from function.edge.server import BindError, ServerConfig, serve
from function.ops import logs
from function.ops.settings import (
    FLAGS,
    Settings,
    SettingsError,
    describe,
    load_settings,
    unit,
    unknown_text,
    unknown_variables,
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
        description=plain_text(__doc__),
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


class StartupError(Exception):
    """The function cannot start as configured; the message says what to give instead."""


def _server_config(settings: Settings) -> ServerConfig:
    """The gRPC server's configuration, checked before anything binds.

    Raises:
        StartupError: neither TLS certificates nor ``--insecure``, or a serving setting
            the server cannot use (``function.edge.server.check_serving_config``).
    """
    from function.edge.server import check_serving_config

    cfg = ServerConfig(
        address=settings.address,
        tls_certs_dir=settings.tls_server_certs_dir,
        insecure=settings.insecure,
        max_recv_mb=settings.max_recv_message_size,
        grace_seconds=settings.grace_seconds,
        deadline_cap_seconds=settings.call_deadline_seconds,
    )
    if not cfg.insecure and not cfg.tls_certs_dir:
        raise StartupError("give --tls-certs-dir (or TLS_SERVER_CERTS_DIR) or --insecure")
    problem = check_serving_config(cfg)
    if problem:
        raise StartupError(problem)
    return cfg


def _metrics_server(settings: Settings) -> tuple[Any, str | None]:
    """Start the Prometheus endpoint that serves every compute process's metrics.

    Calls are composed in compute processes (``function.edge.pool``): their metrics are
    aggregated with prometheus-client's multiprocess mode. They are spawned, so they see
    ``PROMETHEUS_MULTIPROC_DIR`` at import; a fresh directory is made when none is set.
    A previous run's files (the container restarted in place, its ``emptyDir`` kept) are
    prepared with :func:`~function.ops.metrics.resume_multiprocess_dir`: counters and
    histograms continue from their values, gauges are dropped.

    Returns:
        The running metrics server (None when ``--metrics-address`` is empty), and the
        directory made here (removed at exit), or None.

    Raises:
        StartupError: the address is not ``host:port`` or cannot be bound.
    """
    from function.ops import metrics

    multiproc_dir = settings.prometheus_multiproc_dir
    made = None
    if not multiproc_dir:
        import tempfile

        multiproc_dir = made = tempfile.mkdtemp(prefix="function-modelplane-metrics-")
    metrics.use_multiprocess_dir(multiproc_dir)
    # What the endpoint exposes and the archive keeps of the tenant-labelled series.
    metrics.configure_series(
        settings.metric_series_limit,
        metrics.series_stale_seconds(settings.default_ttl_seconds, settings.poll_seconds),
    )
    address = settings.metrics_address
    try:
        metrics.parse_address(address)
    except ValueError as e:
        raise StartupError(f"--metrics-address: {e}") from None
    metrics.resume_multiprocess_dir(multiproc_dir)
    try:
        return metrics.serve(address, multiproc_dir), made
    except OSError as e:
        raise StartupError(
            f"--metrics-address (METRICS_ADDRESS) {address}: cannot listen there: "
            f"{e.strerror or e} (is another process listening on it?)"
        ) from None


def _warn_unknown() -> None:
    """Log one warning per misspelt setting (``settings.unknown_variables``)."""
    for name, setting in unknown_variables():
        logging.getLogger(__name__).warning(unknown_text(name, setting))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code: 0; 2 for an invalid setting; 1 when
    ``config`` lists a misspelt setting (``settings.unknown_variables``)."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    flags = {f: v for f, v in vars(args).items() if f in FLAGS}
    try:
        settings = load_settings(flags, argv)
        if args.command == "config":
            from function.ops.config_report import report

            print(report(settings, flags=flags))
            # A misspelt setting is listed, and fails a CI check that runs config.
            return 1 if unknown_variables() else 0
        logs.configure(debug=settings.debug)
        _warn_unknown()
        cfg = _server_config(settings)
        from function.edge.server import default_processes

        processes = (
            settings.workers
            if settings.workers is not None
            else default_processes(settings.cache_budget_mib)
        )
        metrics_server, made = _metrics_server(settings)
    except (SettingsError, StartupError) as e:
        print(f"function-modelplane: {e}", file=sys.stderr)
        return 2
    try:
        serve(None, cfg, processes=processes, debug=settings.debug, settings=settings)
    except BindError as e:  # taken since it was checked (by the metrics endpoint, say)
        print(f"function-modelplane: {e}", file=sys.stderr)
        return 2
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
        if made is not None:  # a directory of this run's own: nothing reads it after
            import shutil

            shutil.rmtree(made, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
