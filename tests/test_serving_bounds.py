"""The serving benchmark's scaling bounds (``benchmarks.run.scaling_bounds``), its
measure of the compute alone (``benchmarks.run.compute_alone``) and its throughput
measure in turns (``benchmarks.run._throughput_in_turns``): the arithmetic the README's
throughput figures rest on, and real runs of the measures (not their timings)."""

from __future__ import annotations

import grpc
import pytest

from benchmarks import run as bench
from benchmarks.run import compute_alone, scaling_bounds
from benchmarks.scenarios import SCENARIOS
from function.render import start_function


@pytest.mark.parametrize(
    ("processes", "one", "many", "want"),
    [
        # Compute only, no slowdown: the processes scale fully.
        (2, {"compute": 5.0}, {"compute": 5.0, "acceptor": 0.0, "client": 0.0},
         {"from_cpu": 2.0, "no_acceptor_no_slowdown": 2.0}),
        # The final run of session 7 (Go client): 2 x 4.89 / (5.79 + 1.41 + 0.73).
        (2, {"compute": 4.89}, {"compute": 5.79, "acceptor": 1.41, "client": 0.73},
         {"from_cpu": 1.23, "no_acceptor_no_slowdown": 1.74}),
        # A client as costly as the call halves what a second process can add.
        (2, {"compute": 2.0}, {"compute": 2.0, "acceptor": 0.0, "client": 2.0},
         {"from_cpu": 1.0, "no_acceptor_no_slowdown": 1.0}),
        (4, {"compute": 3.0}, {"compute": 3.0, "acceptor": 1.0, "client": 0.0},
         {"from_cpu": 3.0, "no_acceptor_no_slowdown": 4.0}),
        # Nothing measured (no call completed): no bound rather than a division by zero.
        (2, {"compute": 0.0}, {"compute": 0.0, "acceptor": 0.0, "client": 0.0},
         {"from_cpu": 0.0, "no_acceptor_no_slowdown": 0.0}),
    ],
)  # fmt: skip
def test_scaling_bounds(processes, one, many, want):
    assert scaling_bounds(processes, one, many) == want


def test_compute_alone_runs_every_process():
    small = SCENARIOS["ModelReplica"](10)[1]
    got = compute_alone(2, 0.3, small)
    assert set(got) == {
        "calls_per_second_1",
        "cpu_ms_per_call_1",
        "calls_per_second_2",
        "cpu_ms_per_call_2",
        "scaling",
    }
    for n in (1, 2):
        assert got[f"calls_per_second_{n}"] > 0 and got[f"cpu_ms_per_call_{n}"] > 0
    assert got["scaling"] == round(got["calls_per_second_2"] / got["calls_per_second_1"], 2)


def test_throughput_is_measured_in_turns(tmp_path, monkeypatch):
    # Two real servers (1 and 2 compute processes), the Python client, 3 rounds of
    # 0.2 s: every server gets a segment in every round, and what the totals hold is
    # what the segments counted (calls, seconds, the CPU of each process class).
    monkeypatch.setattr(bench, "THROUGHPUT_SEGMENT_SECONDS", 0.2)
    request = tmp_path / "small.bin"
    request.write_bytes(SCENARIOS["ModelReplica"](10)[1])
    servers = {w: start_function({"PYTHONHASHSEED": "0"}, workers=w) for w in (1, 2)}
    channels = {w: grpc.insecure_channel(address) for w, (_, address) in servers.items()}
    try:
        calls_of = {w: ch.unary_unary(bench.METHOD) for w, ch in channels.items()}
        got = bench._throughput_in_turns("python", servers, calls_of, None, str(request), 0.6)
    finally:
        for ch in channels.values():
            ch.close()
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=60)
    assert set(got) == {1, 2}
    for t in got.values():
        assert len(t["by_round"]) == 3 and all(rate > 0 for rate in t["by_round"])
        assert t["calls"] > 0 and t["seconds"] == pytest.approx(0.6)
        assert t["acceptor"] > 0 and t["compute"] > 0 and t["client"] > 0
