"""The README's troubleshooting tables cover every phase and reason the function writes
(issue 16). The reasons come from the code itself (``tests/support/reason_inventory.py``, with
``ast``), so a new reason without a row fails here."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.support.reason_inventory import PACKAGE, inventory

ROOT = Path(__file__).resolve().parent.parent
KINDS = [
    "ModelCache",
    "ModelCacheHydration",
    "ModelDeployment",
    "ModelReplica",
    "ModelExperiment",
    "ModelBackfill",
    "InferenceCluster",
]
# Reasons Kubernetes writes that the function copies into status (the Job's Failed
# condition): not in the code, so named here.
FROM_KUBERNETES = {"BackoffLimitExceeded", "DeadlineExceeded"}


def troubleshooting() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Troubleshooting\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@pytest.fixture(scope="module")
def found():
    return inventory()


def test_the_code_is_fully_traced(found):
    assert not found.opaque, f"reasons or phases the inventory cannot trace: {found.opaque}"
    # a floor, so an inventory that silently finds nothing fails
    assert len(found.values["reason"]) >= 80 and len(found.values["phase"]) >= 12


def test_every_reason_and_phase_has_a_row(found):
    text = troubleshooting()
    quoted = set(re.findall(r"`([A-Za-z]+)`", text))
    missing = sorted((found.values["reason"] | found.values["phase"] | FROM_KUBERNETES) - quoted)
    assert not missing, f"add a troubleshooting row for: {missing}"


def test_a_table_per_kind_with_symptom_and_what_to_check():
    sections = _sections(troubleshooting())
    for kind in KINDS:
        body = sections.get(f"Troubleshooting {kind}")
        assert body is not None, f"no '### Troubleshooting {kind}' section"
        header = next(line for line in body.splitlines() if line.startswith("| Symptom"))
        assert "What to check" in header, kind
        rows = [line for line in body.splitlines() if line.startswith("| ") and "---" not in line]
        assert len(rows) >= 4, kind
        assert "kubectl get" in body, kind


def test_contents_links_the_section():
    text = (ROOT / "README.md").read_text()
    contents = next(line for line in text.splitlines() if line.startswith("Contents:"))
    contents += next(line for line in text.splitlines() if "(#operations)" in line)
    assert "[Troubleshooting](#troubleshooting)" in contents


def test_the_inventory_finds_a_new_reason(tmp_path):
    """A reason added to the code is found, through a constant and a helper's parameter,
    also when the helper is in another module of the composer's package."""
    copy = tmp_path / "function"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    package = copy / "composers" / "replica"
    helper = package / "children.py"
    helper.write_text(
        helper.read_text()
        + "\n\ndef _brand_new(out, why):\n"
        + '    out.condition("ModelReady", "False", why, "m")\n'
    )
    caller = package / "compose.py"
    caller.write_text(
        caller.read_text()
        + '\n\nBRAND_NEW = "BrandNewReason"\n\n\n'
        + "def _caller(out):\n"
        + "    children._brand_new(out, BRAND_NEW)\n"
        + '    out.status["phase"] = "BrandNewPhase"\n'
    )
    got = inventory(copy)
    assert "BrandNewReason" in got.values["reason"]
    assert "BrandNewPhase" in got.values["phase"]
    assert "BrandNewReason" not in troubleshooting()


def test_the_inventory_reports_what_it_cannot_trace(tmp_path):
    copy = tmp_path / "function"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    extra = copy / "composers" / "inferencecluster.py"
    extra.write_text(
        extra.read_text()
        + "\n\ndef _opaque(out, obj):\n"
        + '    out.condition("X", "False", obj.compute_reason(), "m")\n'
    )
    assert ("inferencecluster.py", "obj.compute_reason()") in inventory(copy).opaque
