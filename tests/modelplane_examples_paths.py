"""Paths of the Modelplane example fixtures (``tests/modelplane_examples/``)."""

from pathlib import Path

EXAMPLES = Path(__file__).parent / "modelplane_examples"
KIND_LOCAL_CPU = EXAMPLES / "kind-local-cpu.yaml"
