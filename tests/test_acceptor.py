"""What the acceptor shows an operator of the calls it holds (review 16d F1-F3).

Every test starts ``python -m function`` (the acceptor and its compute processes,
``function.edge.pool``) with the selector cost limit lifted and a 2 s compute deadline
cap (``LIFTED``), talks to it over one gRPC channel and scrapes its ``/metrics``:

- every call is in ``modelplane_function_run_seconds`` once, timed as the acceptor saw it
  (arrival to answer: what Crossplane waits), the wait in the acceptor's queue
  included, and that wait is in ``modelplane_function_queue_seconds`` too;
- a call whose caller gave up (its gRPC deadline passed, or it cancelled) while it was
  queued or composing is counted ``cancelled`` and logged with its XR;
- the lines logged for a compute process that died or was killed mid-call name the XR,
  the pid and how the process ended (its signal, read once it is reaped).

Two runaway selectors, each distinct (so no memo answers them), hold both regular
compute processes for the 2 s cap; the calls sent behind them wait in the queue.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.harness import fatal
from tests.support.reliability import start_process
from tests.test_serving import (
    LIFTED,
    RUNAWAY,
    _busy,
    _children,
    _compute,
    _settled_pids,
    _stub,
    runaway_request,
    small_request,
)


class Server:
    """``python -m function --processes 2`` with its metrics on a port of its own."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.metrics_port = s.getsockname()[1]
        files = tmp_path / "metrics"
        files.mkdir()
        self.log = tmp_path / "stderr"
        self.proc, self.address = start_process(
            self.log, "--processes", "2", "--metrics-address",
            f"127.0.0.1:{self.metrics_port}",
            env={**LIFTED, "PROMETHEUS_MULTIPROC_DIR": str(files), "METRICS_ADDRESS": "", **env},
        )  # fmt: skip

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }

    def lines(self, event: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                rec = json.loads(line)
                if rec.get("event") == event:
                    out.append(rec)
        return out

    def busy_compute(self) -> int:
        """The compute process whose CPU time grows (the one composing a runaway)."""
        for _ in range(100):
            time.sleep(0.05)
            found = [p for p in _children(self.proc.pid) if _compute(p) and _busy(p)]
            if found:
                return found[0]
        raise AssertionError("no compute process is composing")

    def settle(self) -> None:
        """Until the same 3 compute processes have been up and idle for a second: one
        replaced has exited and its replacement has warmed up (it uses CPU meanwhile)."""
        quiet, last = 0, set()
        for _ in range(300):
            now = _settled_pids(self.proc.pid)
            idle = not any(_busy(p) for p in now)
            quiet = quiet + 1 if idle and now == last else 0
            if quiet >= 5:
                return
            last = now
            time.sleep(0.2)
        raise AssertionError("the compute processes never went idle")


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    srv = Server(tmp_path, getattr(request, "param", {}))
    try:
        yield srv
    finally:
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(timeout=60)
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()


def _fresh_runaway(tag: str) -> Any:
    """A runaway of its own (no memo answers it): held until the 2 s deadline."""
    return runaway_request(tag, selector=f'{RUNAWAY} && "{uuid.uuid4()}" != ""')


def _series(samples: dict[Any, float], name: str, **labels: str) -> float:
    return sum(
        v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()
    )


RUN = "modelplane_function_run_seconds"
QUEUE = "modelplane_function_queue_seconds"


def test_every_call_is_timed_as_the_caller_waits_it_queue_wait_included(server: Server) -> None:
    """Found by review 16d: the histogram held compute time only; calls that waited
    seconds behind two runaways read milliseconds (and ModelplaneFunctionSlowCalls, on
    the p99 of it, could not fire)."""
    with grpc.insecure_channel(server.address) as ch:
        call = _stub(ch)
        for i in range(2):  # warm: both processes have composed a ModelReplica
            assert not fatal(call(small_request(f"warm-{i}"), timeout=60))
        server.settle()
        before = server.samples()
        hogs = [call.future(_fresh_runaway(f"hog-{i}"), timeout=60) for i in range(2)]
        server.busy_compute()
        waited = []
        smalls = []
        for i in range(4):
            smalls.append((time.monotonic(), call.future(small_request(f"q-{i}"), timeout=60)))
        for sent, f in smalls:
            assert not fatal(f.result())
            waited.append(time.monotonic() - sent)
        for f in hogs:
            assert fatal(f.result())
        after = server.samples()
    replica = {"kind": "ModelReplica", "result": "success"}
    count = _series(after, f"{RUN}_count", **replica) - _series(before, f"{RUN}_count", **replica)
    total = _series(after, f"{RUN}_sum", **replica) - _series(before, f"{RUN}_sum", **replica)
    assert count == 4
    # What the acceptor saw is what the client saw, less the network (on one host).
    assert 0.8 * sum(waited) <= total <= sum(waited), (total, waited)
    queued = _series(after, f"{QUEUE}_sum") - _series(before, f"{QUEUE}_sum")
    assert _series(after, f"{QUEUE}_count") - _series(before, f"{QUEUE}_count") == 6
    assert queued >= 0.8 * sum(waited) - 4 * 0.1, (queued, waited)  # the small calls' waits


def test_a_call_whose_caller_gave_up_is_counted_once_and_logged_with_its_xr(
    server: Server,
) -> None:
    """Found by review 16d: calls whose gRPC deadline passed while they waited in the
    queue were counted nowhere and logged nowhere (Crossplane saw them fail; the error
    ratio read 0)."""
    with grpc.insecure_channel(server.address) as ch:
        call = _stub(ch)
        assert not fatal(call(small_request("warm"), timeout=60))
        server.settle()
        before = server.samples()
        hogs = [call.future(_fresh_runaway(f"hog-{i}"), timeout=60) for i in range(2)]
        server.busy_compute()
        late = [call.future(small_request(f"late-{i}"), timeout=0.5) for i in range(3)]
        for f in late:
            with pytest.raises(grpc.RpcError) as e:
                f.result()
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        for f in hogs:
            assert fatal(f.result())
        # A call cancelled by its caller while it composes.
        server.settle()
        composing = call.future(_fresh_runaway("dropped"), timeout=60)
        server.busy_compute()
        composing.cancel()
        time.sleep(2.5)  # its process reaches the deadline and answers: dropped
        after = server.samples()

    def delta(name: str, **labels: str) -> float:
        return _series(after, name, **labels) - _series(before, name, **labels)

    assert delta(f"{RUN}_count", kind="ModelReplica", result="cancelled") == 3
    assert delta(f"{RUN}_sum", kind="ModelReplica", result="cancelled") >= 3 * 0.45
    assert delta(f"{RUN}_count", kind="ModelReplica") == 3  # nothing else, nothing twice
    assert delta(f"{RUN}_count", kind="ModelDeployment", result="cancelled") == 1
    assert delta(f"{RUN}_count", kind="ModelDeployment") == 3  # the 2 hogs' deadlines, once
    lines = {rec["tag"]: rec for rec in server.lines("call cancelled by its caller")}
    assert set(lines) == {"late-0", "late-1", "late-2", "dropped"}, lines
    for tag, rec in lines.items():
        assert rec["level"] == "warning"
        assert rec["xr_kind"] in ("ModelReplica", "ModelDeployment") and rec["xr_name"]
        assert rec["xr_namespace"] == "ml-team", rec
        if tag != "dropped":  # waited in the queue until its deadline
            assert rec["seconds"] >= 0.45 and rec["queued_seconds"] == rec["seconds"], rec
        assert rec["state"] == ("composing" if tag == "dropped" else "queued"), rec


def test_a_compute_process_that_died_or_was_killed_is_logged_with_the_xr_pid_and_signal(
    server: Server,
) -> None:
    """Found by review 16d: 'compute process died' named no XR nor pid, and its exit
    code, read before the process could be reaped, was often None ('code None' in the
    XR's Synced message: an OOM kill could not be told from a crash); 'killed past its
    deadline' named no XR. Three kills in a row: the review saw None in 1 of 6."""
    with grpc.insecure_channel(server.address) as ch:
        call = _stub(ch)
        kills = []
        for i in range(3):
            server.settle()
            start = _settled_pids(server.proc.pid)
            busy = call.future(_fresh_runaway(f"oom-{i}"), timeout=60)
            victim = server.busy_compute()
            os.kill(victim, signal.SIGKILL)
            kills.append(victim)
            msgs = fatal(busy.result())
            assert msgs and "was killed by signal 9 (SIGKILL: out of memory?)" in msgs[0], msgs
            _settled_pids(server.proc.pid, replaced_from=start)
        server.settle()
        start = _settled_pids(server.proc.pid)
        stuck = call.future(_fresh_runaway("stuck"), timeout=60)
        victim = server.busy_compute()
        os.kill(victim, signal.SIGSTOP)  # answers nothing: the acceptor kills it
        msgs = fatal(stuck.result())
        assert msgs and "did not stop" in msgs[0], msgs
        _settled_pids(server.proc.pid, replaced_from=start)
    died = server.lines("compute process died")
    assert [(d["tag"], d["pid"], d["exitcode"]) for d in died] == [
        (f"oom-{i}", pid, -9) for i, pid in enumerate(kills)
    ], died
    for d in died:
        assert d["level"] == "error"
        assert d["ended"] == "was killed by signal 9 (SIGKILL: out of memory?)"
        assert (d["xr_kind"], d["xr_namespace"]) == ("ModelDeployment", "ml-team"), d
        assert d["xr_name"]
    (killed,) = server.lines("compute process killed past its deadline")
    assert (killed["tag"], killed["pid"], killed["exitcode"]) == ("stuck", victim, -9), killed
    assert killed["xr_kind"] == "ModelDeployment" and killed["xr_name"], killed
    assert killed["ended"].startswith("was killed by signal 9"), killed


def test_calls_cut_by_the_function_s_own_stop_are_not_blamed_on_their_callers(
    tmp_path: Path,
) -> None:
    """Found by review 16e (F3): at SIGTERM, the calls still held when the grace period
    ended were counted ``cancelled`` and logged ``call cancelled by its caller``, which
    the troubleshooting table reads as Crossplane giving up on a slow call. Now they are
    ``stopped`` (logged as the function stopping); a caller whose own deadline passes
    during the grace period is still ``cancelled``."""
    from function.ops import metrics

    server = Server(tmp_path, {"MODELPLANE_CALL_DEADLINE_SECONDS": "30",
                               "MODELPLANE_GRACE_SECONDS": "3"})  # fmt: skip
    try:
        with grpc.insecure_channel(server.address) as ch:
            call = _stub(ch)
            held = [call.future(_fresh_runaway("held-0"), timeout=60)]
            server.busy_compute()
            held.append(call.future(_fresh_runaway("held-1"), timeout=60))
            time.sleep(1)  # both regular processes compose; the next one waits
            held.append(call.future(_fresh_runaway("held-2"), timeout=60))
            late = call.future(small_request("late"), timeout=1.5)  # gives up in the grace
            time.sleep(0.2)
            server.proc.send_signal(signal.SIGTERM)
            for f in [*held, late]:
                with pytest.raises(grpc.RpcError):
                    f.result()
        assert server.proc.wait(timeout=60) == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
    text = generate_latest(metrics.exposition_registry(str(tmp_path / "metrics")))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text.decode())
        for s in fam.samples
    }
    counts = {
        (kind, result): _series(samples, f"{RUN}_count", kind=kind, result=result)
        for kind in ("ModelDeployment", "ModelReplica")
        for result in ("cancelled", "stopped")
    }
    assert counts == {("ModelDeployment", "cancelled"): 0, ("ModelDeployment", "stopped"): 3,
                      ("ModelReplica", "cancelled"): 1, ("ModelReplica", "stopped"): 0}  # fmt: skip
    stopped = {r["tag"]: r for r in server.lines("call stopped: the function is stopping")}
    assert sorted(stopped) == ["held-0", "held-1", "held-2"], stopped
    assert sorted(r["state"] for r in stopped.values()) == ["composing", "composing", "queued"]
    assert all(r["level"] == "warning" and r["xr_name"] for r in stopped.values())
    assert [r["tag"] for r in server.lines("call cancelled by its caller")] == ["late"]
