"""Structured logging with structlog.

JSON lines at info level by default; readable console output with ``--debug``.
The runner binds the request tag and the XR's kind, namespace and name as
structlog context variables for the duration of each call, so every line written
during the call, by the runner or by a composer (``structlog.get_logger()``),
carries ``tag``, ``xr_kind``, ``xr_namespace`` and ``xr_name``.

Secrets: never pass a secret's value to a logger (tokens stay in Secrets and reach
remote clusters through ``patchesFrom``).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def configure(debug: bool = False, stream: TextIO | None = None) -> None:
    """Configure structlog (and the stdlib root logger) for the process.

    Args:
        debug: Console rendering at debug level when True; JSON at info otherwise.
        stream: Where lines go (default standard error).
    """
    out = stream if stream is not None else sys.stderr
    level = logging.DEBUG if debug else logging.INFO
    logging.basicConfig(stream=out, level=level, format="%(message)s")
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=_isatty(out))
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
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
