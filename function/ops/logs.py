"""Structured logging with structlog.

JSON lines at info level by default; readable console output with ``--debug``.
The runner sets :data:`CALL` (the request tag and the XR's kind, namespace and
name) for the duration of each call, and :func:`merge_call_context` adds it to
every line written meanwhile, by the runner or by a composer
(``structlog.get_logger()``): ``tag``, ``xr_kind``, ``xr_namespace``, ``xr_name``.
One context variable holding a dict costs about a microsecond per call, several
times less than binding each key (``structlog.contextvars``).

Secrets: never pass a secret's value to a logger (tokens stay in Secrets and reach
remote clusters through ``patchesFrom``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar
from typing import Any, TextIO

import structlog

CALL: ContextVar[Mapping[str, str] | None] = ContextVar("modelplane_call", default=None)


def merge_call_context(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: add the current call's fields (:data:`CALL`) to a line."""
    ctx = CALL.get()
    if ctx:
        for k, v in ctx.items():
            event_dict.setdefault(k, v)
    return event_dict


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
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=_isatty(out))
        if debug
        else structlog.processors.JSONRenderer(sort_keys=True)
    )
    # Lines logged through the standard library (ours, and libraries' such as the OTLP
    # exporter's) are rendered as structlog's are: one JSON object per line.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            merge_call_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
