"""One quantity rule: every quantity the function reads is read as Kubernetes reads it.

Before session 21 the function had two parsers: ``devices.parse_quantity`` (a regular
expression that trimmed spaces) and ``k8svalidation.go_parse_quantity`` (a port of Go's
``resource.ParseQuantity``). They disagreed on the strings below. Now CEL's ``quantity()``
and ``isQuantity()`` are ``resource.ParseQuantity`` exactly, with no trimming, as in
``k8s.io/apiserver/pkg/cel/library/quantity.go``; a device's capacity, an InferenceClass's
capacity and the flash loader's ``tmpfsSizeLimit`` are read as the API server decodes an
object's quantity (trimmed first: ``decode_quantity``); the CEL arithmetic (``add``,
``sub``, ``isInteger``, ``asInteger``, ``asApproximateFloat``) follows the form Go holds
a quantity in (``int64Amount`` or ``inf.Dec``).

Every ``want`` below is what Go answers (k8s.io/apimachinery v0.35.3, the calls the CEL
library makes; checked with a Go program on 69,730 parses, decodes, sums, differences
and comparisons). Rows marked "(old: ...)" failed before the change.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from function.composers.replica.children import check_flash_fits
from function.core.outcome import Outcome
from function.ops.settings import positive_quantity
from function.scheduling.devices import Device, SelectorEvaluationError, selector_matches
from function.serving.flashloader import FlashLoader
from tests.support.harness import fatal, request, run
from tests.support.table import Case, table
from tests.test_inferenceclass import _class

DRIVER = "gpu.nvidia.com"
FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
SUFFIX = "unable to parse quantity's suffix"


def _device(memory: str | None = "80Gi") -> Device:
    raw: dict[str, Any] = {"name": "gpu", "driver": DRIVER, "count": 1}
    if memory is not None:
        raw["capacity"] = {"memory": {"value": memory}}
    return Device.from_status(raw)


GPU = _device()

# ---- CEL isQuantity(s): resource.ParseQuantity(s) succeeds, s as written ----------------

IS_QUANTITY: list[Case[str, bool]] = [
    Case("suffix-alone", "no digit reads as 0 (old: false)", "Gi", True),
    Case("leading-space", "ParseQuantity trims nothing", " 1Gi", False),
    Case("trailing-space", "ParseQuantity trims nothing", "1Gi ", False),
    Case("sub-nano", "a quantity, rounded up to 1n", "0.1n", True),
    Case("exponent-40", "a quantity", "1e40", True),
    Case("past-int64-binary", "a quantity, capped at 2^63-1", "9Ei", True),
    Case("lowercase-ki", "no such suffix", "1ki", False),
    Case("sign-alone", "no digit reads as 0 (old: false)", "+", True),
    Case("point-alone", "no digit reads as 0 (old: false)", ".", True),
]


@table(IS_QUANTITY)
def test_cel_is_quantity_is_kubernetes_parse(case: Case[str, bool]) -> None:
    expression = f'isQuantity("{case.inputs}") == {str(case.want).lower()}'
    assert selector_matches(expression, GPU), case.reason


# ---- CEL quantity(s): its value, or Kubernetes' error -----------------------------------

QUANTITY: list[Case[str, str]] = [
    Case("suffix-alone", "0 (old: not a quantity)", "Gi", "0"),
    Case("leading-space", "Go's error (old: 1Gi)", " 1Gi", FORMAT_WRONG),
    Case("trailing-space", "Go's error (old: 1Gi)", "1Gi ", FORMAT_WRONG),
    Case("sub-nano", "rounded up to 1n (old: 0.1n)", "0.1n", "1n"),
    Case("exponent-40", "exact", "1e40", "10000000000000000000000000000000000000000"),
    Case("past-int64-binary", "capped at 2^63-1 (old: 9 * 2^60)", "9Ei", "9223372036854775807"),
    Case("lowercase-ki", "Go's error (old: no reason)", "1ki", SUFFIX),
    Case("sign-alone", "0 (old: not a quantity)", "+", "0"),
    Case("point-alone", "0 (old: not a quantity)", ".", "0"),
]


@table(QUANTITY)
def test_cel_quantity_is_kubernetes_parse(case: Case[str, str]) -> None:
    expression = f'quantity("{case.inputs}").compareTo(quantity("{case.want}")) == 0'
    if case.want in (FORMAT_WRONG, SUFFIX):
        with pytest.raises(SelectorEvaluationError) as e:
            selector_matches(f'quantity("{case.inputs}").sign() == 0', GPU)
        assert e.value.reason == f"'{case.inputs}' is not a Kubernetes quantity: {case.want}"
    else:
        assert selector_matches(expression, GPU), case.reason


# ---- CEL arithmetic and conversions: the form Go holds a quantity in --------------------

ARITHMETIC: list[Case[str, bool]] = [
    Case("milli-whole", "int64Amount at scale -3: AsInt64 fails (old: true)",
         'quantity("1000m").isInteger()', False),
    Case("kilo", "int64Amount 1 at scale 3: 1000",
         'quantity("1k").isInteger() && quantity("1k").asInteger() == 1000', True),
    Case("large-binary", "held as inf.Dec: AsInt64 fails (old: true)",
         'quantity("100Ti").isInteger() || quantity("1Ei").isInteger()', False),
    Case("fractional-binary", "held as inf.Dec", 'quantity("1.5Gi").isInteger()', False),
    Case("sum-of-millis", "1000 at scale -3 (old: true)",
         'quantity("500m").add(quantity("500m")).isInteger()', False),
    Case("sum-of-ints", "int64Amount", 'quantity("1").add(1).asInteger() == 2', True),
    Case("float-tenths", "3 * math.Pow10(-1) (old: 0.3)",
         'quantity("0.3").asApproximateFloat() == 0.30000000000000004', True),
    Case("float-capped", "2^63-1 as a float64 (old: 9 * 2^60)",
         'quantity("9Ei").asApproximateFloat() == 9.223372036854776e18', True),
    Case("capped-plus-one", "the cap, then exact (old: 9 * 2^60 + 1)",
         'quantity("9Ei").add(1).compareTo(quantity("9223372036854775808")) == 0', True),
    Case("sub-int", "int64Amount.Add of the negated int",
         'quantity("1k").sub(1).asInteger() == 999', True),
    Case("sub-nano-sign", "1n after rounding", 'quantity("0.1n").sign() == 1', True),
]  # fmt: skip


@table(ARITHMETIC)
def test_cel_quantity_arithmetic_is_kubernetes(case: Case[str, bool]) -> None:
    assert selector_matches(case.inputs, GPU) is case.want, case.reason


def test_as_integer_of_a_quantity_go_cannot_convert_is_an_error() -> None:
    with pytest.raises(SelectorEvaluationError, match="cannot convert value to integer"):
        selector_matches('quantity("1000m").asInteger() == 1', GPU)


# ---- a device's capacity: as the API server decodes a ResourceSlice's -------------------

CAPACITY: list[Case[str, str | None]] = [
    Case("leading-space", "decoding trims", " 80Gi", "80Gi"),
    Case("suffix-alone", "0 (old: absent)", "Gi", "0"),
    Case("past-int64-binary", "capped (old: 9 * 2^60)", "9Ei", "9223372036854775807"),
    Case("sub-nano", "rounded up (old: 0.1n)", "0.1n", "1n"),
    Case("tab", "the API server refuses a tab: absent (old: 80Gi)", "\t80Gi", None),
    Case("lowercase-ki", "no quantity: absent", "1ki", None),
]


@table(CAPACITY)
def test_device_capacity_is_read_as_the_api_server_decodes_it(case: Case[str, Any]) -> None:
    device = _device(case.inputs)
    has = selector_matches(f'"memory" in device.capacity["{DRIVER}"]', device)
    assert has is (case.want is not None), case.reason
    if case.want is not None:
        same = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{case.want}")) == 0'
        assert selector_matches(same, device), case.reason


# ---- an InferenceClass's capacity: the class's own check ---------------------------------

FIELD = "spec.devices[0].capacity.memory.value"
CLASS_CAPACITY: list[Case[str, str | None]] = [
    Case("suffix-alone", "0 (old: refused)", "Gi", None),
    Case("leading-space", "decoding trims", " 1Gi", None),
    Case("trailing-space", "decoding trims", "1Gi ", None),
    Case("sub-nano", "a quantity", "0.1n", None),
    Case("exponent-40", "a quantity", "1e40", None),
    Case("past-int64-binary", "a quantity", "9Ei", None),
    Case("sign-alone", "0 (old: refused)", "+", None),
    Case("point-alone", "0 (old: refused)", ".", None),
    Case("lowercase-ki", "refused with Go's reason and what to write (old: neither)", "1ki",
         f"{FIELD}: must be a Kubernetes quantity such as 80Gi, 500m or 1e3, not '1ki' "
         f"(Kubernetes' parser: {SUFFIX})"),
    Case("tab", "the API server refuses a tab (old: accepted)", "\t1Gi",
         f"{FIELD}: must be a Kubernetes quantity such as 80Gi, 500m or 1e3"),
]  # fmt: skip


@table(CLASS_CAPACITY)
def test_inference_class_capacity_is_read_as_kubernetes_does(case: Case[str, Any]) -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["devices"][0]["capacity"] = {"memory": {"value": case.inputs}}

    msgs = fatal(run(request(_class(change))))
    if case.want is None:
        assert not msgs, (case.reason, msgs)
    else:
        (msg,) = msgs
        assert case.want in msg, (case.reason, msg)


# ---- the flash loader's tmpfsSizeLimit against the weights, and size settings ------------

FLASH_FITS: list[Case[tuple[str, float], bool]] = [
    Case("fits", "64Gi holds 40 GiB", ("64Gi", 40), False),
    Case("too-small", "64Gi does not hold 100 GiB", ("64Gi", 100), True),
    Case("capped", "9Ei is 2^63-1 bytes, less than 8 EiB (old: 9 EiB, fits)",
         ("9Ei", 8 * 2**30), True),
]  # fmt: skip


@table(FLASH_FITS)
def test_flash_loader_fit_reads_the_limit_as_kubernetes(case: Case[Any, bool]) -> None:
    limit, size_gib = case.inputs
    out = Outcome()
    loader = FlashLoader(enabled=True, image="i", concurrency=1, tmpfs_size_limit=limit)
    check_flash_fits(out, loader, {"spec": {"huggingFace": {"sizeGiB": size_gib}}}, "c")
    warned = [r for r in out.results if r.reason == "FlashLoaderTooSmall"]
    assert bool(warned) is case.want, case.reason


SIZE_LIMITS: list[Case[Any, str | None]] = [
    Case("binary", "a quantity > 0", "64Gi", "64Gi"),
    Case("capped", "2^63-1 > 0", "9Ei", "9Ei"),
    Case("tiny", "rounded up to 1n > 0", "0.0000000001m", "0.0000000001m"),
    Case("zero", "not > 0", "0.0Gi", None),
    Case("suffix-alone", "the XRD's pattern wants digits (and it is 0)", "Gi", None),
    Case("spaces", "the XRD's pattern refuses them", " 64Gi", None),
    Case("bytes", "an int is a number of bytes", 1024, "1024"),
]


@table(SIZE_LIMITS)
def test_size_limit_settings_value_is_kubernetes(case: Case[Any, str | None]) -> None:
    assert positive_quantity(case.inputs) == case.want, case.reason


def test_the_old_parser_is_gone() -> None:
    """One owner: the scheduling package has no quantity parser of its own."""
    from function.scheduling import devices

    assert not hasattr(devices, "parse_quantity")
    assert devices.Quantity("80Gi").value == Decimal(80 * 2**30)
