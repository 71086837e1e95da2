"""Suite-wide guard: the fake token never leaves the function (issue 9, "Secrets sealed").

Registered from ``tests/conftest.py`` (``pytest_plugins``), so it runs for every test
of the suite:

- an autouse fixture wraps ``FunctionRunner._call`` (behind ``run`` and ``run_wire``;
  the in-process
  runner of ``tests.support.harness.run`` and the servicer behind ``GrpcFunction``) and
  records every response whose serialized bytes contain the token;
- a ``pytest_runtest_makereport`` hook fails the test when a response leaked, or when
  any captured output of the test (stdout, stderr, log records: every log line the
  function wrote in-process) contains the token.

"The token" is :data:`tests.support.fixtures.FAKE_TOKEN` raw and base64-encoded (standard and
URL-safe alphabets, at each of the three byte alignments, so a token embedded in a
larger base64 value is found too). Tests that start ``python -m function`` as a
subprocess check that process's output themselves with :func:`leaks`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from function.edge.runner import FunctionRunner
from tests.support.fixtures import FAKE_TOKEN

_ATTR = "_modelplane_secret_leaks"


def token_forms(token: str = FAKE_TOKEN) -> dict[str, bytes]:
    """The byte strings that betray ``token``: raw, and base64 at every alignment.

    A token at byte offset ``k`` (mod 3) of a larger value encodes to a fixed run of
    base64 characters once the 4-character groups it shares with its neighbours are
    cut off; those runs are what is searched for (they are 40+ characters long for
    a 36-character token, so they cannot match by chance).
    """
    raw = token.encode()
    forms: dict[str, bytes] = {"raw": raw}
    for alphabet, enc in (("base64", base64.b64encode), ("base64url", base64.urlsafe_b64encode)):
        forms[alphabet] = enc(raw).rstrip(b"=")
        for k in (1, 2):
            encoded = enc(b"\0" * k + raw)
            forms[f"{alphabet}@{k}"] = encoded[4:-4]
        forms[f"{alphabet}@0"] = enc(raw)[:-4]
    return forms


_FORMS = token_forms()
# What the guard looked at in this session (reported at the end of the run).
CHECKED = {"responses": 0, "outputs": 0, "leaks": 0}


def leaks(data: bytes | str) -> list[str]:
    """Names of the forms of the fake token found in ``data`` (empty when clean)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return sorted({name.split("@")[0] for name, form in _FORMS.items() if form in data})


@pytest.fixture(autouse=True)
def _secret_guard(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Record every FunctionRunner response of this test that contains the fake token."""
    found: list[str] = []
    setattr(request.node, _ATTR, found)
    # Every call goes through FunctionRunner._call, whether the caller wants a message
    # (run) or the wire bytes the server sends (run_wire): check both forms it returns.
    original = FunctionRunner._call

    def call(self: FunctionRunner, req: Any, *args: Any, **kwargs: Any) -> Any:
        rsp, data = original(self, req, *args, **kwargs)
        CHECKED["responses"] += 1
        hit = sorted(set(leaks(rsp.SerializeToString())) | set(leaks(data)))
        if hit:
            xr = req.observed.composite.resource
            kind = xr["kind"] if "kind" in xr else "?"
            found.append(
                f"RunFunction response for {kind} contains the fake token ({', '.join(hit)})"
            )
        return rsp, data

    monkeypatch.setattr(FunctionRunner, "_call", call)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Fail a test whose responses or captured output contain the fake token."""
    outcome = yield
    report = outcome.get_result()
    if report.when not in ("call", "teardown") or hasattr(report, "wasxfail"):
        return
    problems: list[str] = list(getattr(item, _ATTR, ()))
    if problems:
        getattr(item, _ATTR).clear()
    # Each report carries the sections of the phases so far: look only at its own
    # (setup output is judged with the call), so a leak is reported once.
    phases = ("setup", "call") if report.when == "call" else ("teardown",)
    for section, content in report.sections:
        if not section.endswith(phases):
            continue
        CHECKED["outputs"] += 1
        hit = leaks(content)
        if hit:
            problems.append(f"{section} contains the fake token ({', '.join(hit)})")
    if not problems:
        return
    CHECKED["leaks"] += len(problems)
    message = "secret guard: the fake token leaked:\n  " + "\n  ".join(problems)
    if report.passed:
        report.outcome = "failed"
        report.longrepr = message
    else:
        report.sections.append(("secret guard", message))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line: how many responses and captured outputs the guard checked."""
    terminalreporter.write_line(
        f"secret guard: {CHECKED['responses']} RunFunction responses and "
        f"{CHECKED['outputs']} captured outputs checked for the fake token; "
        f"{CHECKED['leaks']} leak(s)"
    )
