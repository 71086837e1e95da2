"""Memos bounded in bytes (issue 14): ``function.core.memo``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.struct_pb2 import Struct

import function.composers.deployment
import function.composers.hydration
import function.composers.modelcache
import function.composers.replica  # noqa: F401 - registers their memos
from function.core import memo


@pytest.fixture
def alone() -> Iterator[None]:
    """The memo registry of a process with no memo but the test's own (restored after)."""
    saved = (list(memo.REGISTRY), memo._total, memo._used[0])
    memo.REGISTRY.clear()
    memo._used[0] = 0
    try:
        yield
    finally:
        memo.REGISTRY[:] = saved[0]
        memo._total, memo._used[0] = saved[1], saved[2]
        memo._split()


def _blob_memo(weight: float = 1) -> tuple[memo.ByteLRU, list[str]]:
    calls: list[str] = []

    def body(key: str) -> bytes:
        calls.append(key)
        return b"x" * 64 * 1024

    return memo.register(memo.ByteLRU(body, maxsize=10_000, weight=weight)), calls


def test_a_full_memo_keeps_what_it_holds_through_a_scan_larger_than_it(alone: None) -> None:
    m, calls = _blob_memo()
    memo.configure(1024 * 1024)  # 1 MiB: about 15 entries of 64 KiB
    keys = [f"k{i}" for i in range(100)]
    for k in keys:
        m(k)
    kept = m.cache_info().currsize
    assert m.bytes <= 1024 * 1024
    assert 10 <= kept < 16
    for k in keys:  # the same scan again, as a steady reconcile reads a sorted fleet
        m(k)
    # Evicting the least recently used entry on every miss would hit nothing here (each
    # new entry pushes out the one the scan needs next); a full memo refuses the new
    # entry instead, and gives up its oldest on one refusal in SCAN_DRAIN.
    assert m.cache_info().hits >= kept - len(keys) // memo.SCAN_DRAIN - 1
    assert len(calls) == 2 * len(keys) - m.cache_info().hits  # a miss computes, a hit not
    assert m.bytes <= 1024 * 1024


def test_an_entry_too_large_to_keep_still_replaces_its_key(alone: None) -> None:
    m = memo.register(memo.ByteLRU(lambda n: "y" * n, maxsize=10, weight=1))
    memo.configure(8000)
    fetch = m.tagged_fetcher()
    fetch("k", "a", lambda: "x" * 100)
    assert m.cache_info().currsize == 1
    fetch("k", "b", lambda: "x" * 9000)  # too large to keep: "k" holds nothing now
    assert m.cache_info().currsize == 0 and m.bytes == 0 and memo._used[0] == 0


def test_a_memo_uses_what_the_others_leave_free_and_gives_it_back(alone: None) -> None:
    busy, _ = _blob_memo()
    idle, _ = _blob_memo()
    memo.configure(2 * 1024 * 1024)  # 1 MiB guaranteed to each
    for i in range(100):
        busy(f"b{i}")
    # The idle memo's share is used: the busy one holds about the whole budget.
    assert 1024 * 1024 < busy.bytes <= 2 * 1024 * 1024
    for i in range(100):
        idle(f"i{i}")
    # Now both are busy: each keeps its share, and the total stays within the budget.
    assert memo._used[0] <= 2 * 1024 * 1024
    one_entry = 64 * 1024 + 512
    assert 0.8 * 1024 * 1024 <= idle.bytes <= 1024 * 1024 + one_entry
    assert busy.bytes <= 1024 * 1024 + one_entry
    memo.configure(512 * 1024)  # a smaller budget trims both
    assert memo._used[0] <= 512 * 1024


def test_an_entry_larger_than_its_share_and_an_eighth_of_the_total_is_not_kept(
    alone: None,
) -> None:
    m = memo.register(memo.ByteLRU(lambda n: "y" * n, maxsize=10, weight=1))
    memo.configure(8000)  # its share 8,000 bytes, an eighth 1,000
    m(5000)  # within its share: kept
    assert m.cache_info().currsize == 1
    m(9000)  # over both: not kept
    assert m.cache_info().currsize == 1 and m.bytes < 8000


def test_sizes_count_messages_and_containers() -> None:
    s = Struct()
    s.update({"a": "z" * 10_000})
    assert memo.size_of(s) >= 10_000
    assert memo.size_of(("a" * 1000, [b"b" * 1000])) >= 2000
    assert memo.size_of({"k": "v" * 500}) >= 500


def test_sizes_count_what_is_deep_shared_and_wide() -> None:
    """Found by a trial: past 8 levels only the container itself was counted, so a
    ModelReplica's pod-template labels (a dict inside a model inside lists inside a
    model) were left out, the memos held about twice their budget and 400 distinct
    label-heavy XRs took the process tree past 512 MiB."""
    deep: Any = {"leaf": "x" * 100_000}
    for i in range(60):  # deeper than a spec gets before protobuf refuses it (100 levels)
        deep = {f"l{i}": deep} if i % 2 else [deep]
    assert memo.size_of(deep) >= 100_000

    class Holder:
        def __init__(self, labels: dict[str, str]) -> None:
            self.labels = labels

    labels = {f"key-{i}": f"value-{i}" for i in range(20_000)}
    real = sys.getsizeof(labels) + sum(
        sys.getsizeof(k) + sys.getsizeof(v) for k, v in labels.items()
    )
    assert memo.size_of([[[[[[[[[Holder(labels)]]]]]]]]]) >= real
    # One object reached twice is counted once; a non-ASCII string by its real size.
    assert memo.size_of([labels, labels]) < 1.5 * memo.size_of(labels)
    assert memo.size_of("\u20ac" * 100_000) >= 200_000


def test_a_compiled_selector_is_charged_its_own_size_not_the_shared_environment() -> None:
    """Found by a second trial: walking at any depth reached the CEL environment every
    compiled program refers to (with the last program it compiled), its parser and the
    loggers, and each instance dict's interned attribute names: a compiled selector was
    charged 3.6 times its size, and its memo kept a third as many."""
    import tracemalloc

    from function.scheduling import devices

    exprs = [f'device.driver == "t{i}" && device.attributes["x"].y > {i}' for i in range(100)]
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        programs = [devices.compile_selector(e) for e in exprs]
        real = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    charged = sum(memo.size_of(p) for p in programs)
    assert real / 2 < charged < real * 2, (charged, real)


def test_configure_splits_one_budget_by_weight_and_trims() -> None:
    before = memo.report()["budget_bytes"]
    try:
        memo.configure(8 * 1024 * 1024)
        rep = memo.report()
        assert rep["budget_bytes"] == 8 * 1024 * 1024
        assert sum(m["budget_bytes"] for m in rep["memos"].values()) <= 8 * 1024 * 1024
        # A memo may hold more than its share while the others leave room; together
        # they hold no more than the budget.
        assert rep["used_bytes"] <= rep["budget_bytes"]
        assert rep["used_bytes"] == sum(m.bytes for m in memo.REGISTRY)
        assert len(rep["memos"]) >= 20  # every memo of the function is registered
    finally:
        memo.configure(before)
