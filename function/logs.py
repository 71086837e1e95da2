"""Structured logging with structlog.

JSON lines at info level by default; readable console output with ``--debug``.
The runner binds the request tag and the XR's kind, namespace and name to every
line it writes.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(debug: bool = False) -> None:
    """Configure structlog (and the stdlib root logger) for the process.

    Args:
        debug: Console rendering at debug level when True; JSON at info otherwise.
    """
    level = logging.DEBUG if debug else logging.INFO
    logging.basicConfig(stream=sys.stderr, level=level, format="%(message)s")
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer()
        if debug
        else structlog.processors.JSONRenderer(sort_keys=True)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
