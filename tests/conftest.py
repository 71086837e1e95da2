"""Fixtures shared by every test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.harness import Clock, GrpcFunction

# Suite-wide check that the fake token never leaves the function (issue 9).
pytest_plugins = ["tests.support.secret_guard"]


@pytest.fixture
def clock() -> Clock:
    """A controllable clock starting at harness.NOW."""
    return Clock()


@pytest.fixture
def grpc_function(clock: Clock) -> Iterator[GrpcFunction]:
    """A FunctionRunner served on a real gRPC channel on 127.0.0.1, using ``clock``."""
    with GrpcFunction(clock=clock) as fn:
        yield fn
