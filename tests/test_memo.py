"""Memos bounded in bytes (issue 14): ``function.core.memo``."""

from __future__ import annotations

from google.protobuf.struct_pb2 import Struct

import function.composers.deployment
import function.composers.hydration
import function.composers.modelcache
import function.composers.replica  # noqa: F401 - registers their memos
from function.core import memo


def test_a_memo_keeps_its_byte_budget_and_evicts_least_recently_used() -> None:
    calls: list[str] = []

    def body(key: str) -> bytes:
        calls.append(key)
        return b"x" * 64 * 1024

    m = memo.ByteLRU(body, maxsize=10_000, weight=1)
    m.budget = 1024 * 1024  # 1 MiB: about 15 entries of 64 KiB
    for i in range(100):
        m(f"k{i}")
    assert m.bytes <= m.budget
    assert 10 <= m.cache_info().currsize < 16
    m("k99")  # most recent: kept
    assert calls.count("k99") == 1
    m("k0")  # long evicted: computed again
    assert calls.count("k0") == 2


def test_an_entry_larger_than_the_budget_is_not_kept() -> None:
    m = memo.ByteLRU(lambda n: "y" * n, maxsize=10, weight=1)
    m.budget = 1000
    m(5000)
    assert m.cache_info().currsize == 0 and m.bytes == 0


def test_sizes_count_messages_and_containers() -> None:
    s = Struct()
    s.update({"a": "z" * 10_000})
    assert memo.size_of(s) >= 10_000
    assert memo.size_of(("a" * 1000, [b"b" * 1000])) >= 2000
    assert memo.size_of({"k": "v" * 500}) >= 500


def test_configure_splits_one_budget_by_weight_and_trims() -> None:
    before = memo.report()["budget_bytes"]
    try:
        memo.configure(8 * 1024 * 1024)
        rep = memo.report()
        assert rep["budget_bytes"] == 8 * 1024 * 1024
        assert sum(m["budget_bytes"] for m in rep["memos"].values()) <= 8 * 1024 * 1024
        assert all(m["used_bytes"] <= m["budget_bytes"] for m in rep["memos"].values())
        assert len(rep["memos"]) >= 20  # every memo of the function is registered
    finally:
        memo.configure(before)
