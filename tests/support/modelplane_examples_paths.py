"""Paths of the Modelplane example fixtures (``tests/modelplane_examples/``)."""

from pathlib import Path

EXAMPLES = Path(__file__).parents[1] / "modelplane_examples"
KIND_LOCAL_CPU = EXAMPLES / "kind-local-cpu.yaml"
