"""Timestamps and durations as Kubernetes writes them.

- Timestamps are RFC 3339 (``metav1.Time``: ``2026-11-29T09:00:00Z``); inputs may
  carry fractional seconds or a numeric offset, outputs are always whole seconds
  in UTC with ``Z`` so that status is byte-stable.
- Durations use Go's ``time.ParseDuration`` syntax as Kubernetes and Crossplane
  APIs do (``30m``, ``1h30m``, ``90s``, ``0``); results are seconds (float).
"""

from __future__ import annotations

import datetime
import re

from function.core.errors import quoted

# RFC 3339 section 5.6 date-time (what metav1.Time and metav1.MicroTime write): no ISO
# 8601 extras such as week dates, basic format, comma fractions or a missing offset.
_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_time(value: object) -> datetime.datetime | None:
    """Parse an RFC 3339 timestamp.

    Args:
        value: A string such as ``2026-11-29T09:00:00Z``, ``...00.123Z`` or ``...+02:00``.

    Returns:
        A timezone-aware UTC datetime, or None when ``value`` is not a valid
        RFC 3339 timestamp (callers treat that as "not known").
    """
    if not isinstance(value, str) or not _RFC3339.match(value):
        return None
    s = value
    if s[-1] in "zZ":
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.datetime.fromisoformat(s)
        return dt.astimezone(datetime.UTC)
    except (ValueError, OverflowError):  # 2026-02-30, or 0001-01-01T00:00:00+01:00
        return None


def format_time(dt: datetime.datetime) -> str:
    """Format ``dt`` as RFC 3339 in UTC, whole seconds, with ``Z``."""
    return dt.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Go's longest time.Duration (2^63 - 1 ns), in seconds: what Kubernetes could store, and
# what a date can be moved by without leaving Python's datetime range.
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9


def parse_duration(value: object) -> float:
    """Parse a Go-style duration into seconds.

    Args:
        value: ``"30m"``, ``"1h30m"``, ``"90s"``, ``"0"`` (or a number of seconds).

    Returns:
        The duration in seconds (>= 0).

    Raises:
        ValueError: for anything else, including negative durations and ones longer
            than :data:`MAX_DURATION_SECONDS` (Go's longest).
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {quoted(value)}")
    if isinstance(value, (int, float)):
        if not 0 <= value <= MAX_DURATION_SECONDS:  # NaN too
            raise ValueError(f"duration {quoted(value)} is negative or longer than 292 years")
        return float(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"invalid duration {quoted(value)}")
    if value == "0":
        return 0.0
    pos = 0
    total = 0.0
    for m in _DURATION_PART.finditer(value):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(value) or pos == 0:
        raise ValueError(
            f"invalid duration {quoted(value)} (use Go syntax such as 30m, 1h30m, 90s)"
        )
    if total > MAX_DURATION_SECONDS:
        raise ValueError(f"{quoted(value)} is longer than the longest duration (about 292 years)")
    return total


def elapsed(since: datetime.datetime | None, now: datetime.datetime) -> float:
    """Seconds from ``since`` to ``now``; 0 when ``since`` is unknown or in the future (skew)."""
    if since is None:
        return 0.0
    return max(0.0, (now - since).total_seconds())
