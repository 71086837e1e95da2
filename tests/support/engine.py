"""Render through Crossplane's own reconciler: ``crossplane render`` with the core binary.

:func:`render` writes the inputs to a temporary directory and runs the pinned CLI as
``crossplane render XR COMPOSITION FUNCTIONS --crossplane-binary=CORE --xrd=XRD
--observed-resources=DIR --required-resources=DIR -r -x``. The CLI hands the request to
``crossplane internal render``, which runs Crossplane's composite reconciler (function
pipeline, requirements loop, readiness, garbage collection of composed resources) against
an in-memory client, calling this function over gRPC at a Development-runtime target on
127.0.0.1. What comes back is what a real control plane would do with the function's
responses:

- the XR as Crossplane would write it (``status.conditions`` with Crossplane's own
  ``Ready`` and ``Synced``), with ``-x`` its full spec and metadata;
- every composed resource Crossplane would apply, each with its
  ``crossplane.io/composition-resource-name`` annotation; an observed resource missing
  from it is one Crossplane would delete;
- the results (events) as ``render.crossplane.io/v1beta1`` ``Result`` documents (``-r``);
- the exit code: 0, or 1 on an error, a function's fatal result included (the core
  binary exits 3 on a fatal result; CLI v2.5.0 reports it as an error naming the step and
  the result's message on stderr, with nothing on stdout).
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from google.protobuf.struct_pb2 import Struct

from function.core import structs
from function.edge import codec
from function.render import (
    COMPOSITION_RESOURCE_NAME,
    split_documents,
)
from tests.support.crossplane import ROOT, Tools
from tests.support.secret_guard import leaks

FUNCTION_NAME = "function-modelplane"

# Kind -> (XRD, Composition) under compositions/.
_COMPOSITIONS = {
    "ModelCache": "modelcache/composition.yaml",
    "ModelCacheShard": "modelcacheshard/composition.yaml",
    "ModelCacheHydration": "modelcachehydration/composition.yaml",
    "ModelDeployment": "modeldeployment/composition.yaml",
    "ModelReplica": "modelreplica/composition.yaml",
    "ModelExperiment": "modelexperiment/composition.yaml",
    "ModelBackfill": "modelbackfill/composition.yaml",
    "InferenceCluster": "inferencecluster/composition-existing.yaml",
    "InferenceClass": "inferenceclass/composition.yaml",
}


def composition_for(kind: str) -> Path:
    """The Composition the project ships for ``kind``."""
    return ROOT / "compositions" / _COMPOSITIONS[kind]


def xrd_for(kind: str) -> Path:
    """The XRD the project ships for ``kind``."""
    return composition_for(kind).parent / "definition.yaml"


def functions_yaml(address: str) -> dict[str, Any]:
    """The Function for ``crossplane render``: the Development runtime at ``address``."""
    return {
        "apiVersion": "pkg.crossplane.io/v1",
        "kind": "Function",
        "metadata": {
            "name": FUNCTION_NAME,
            "annotations": {
                "render.crossplane.io/runtime": "Development",
                "render.crossplane.io/runtime-development-target": address,
            },
        },
        "spec": {"package": "xpkg.crossplane.io/modelplane/function-modelplane:v0.1.0"},
    }


@dataclass
class Rendered:
    """What ``crossplane render`` printed, split by kind of document.

    Attributes:
        exit_code: the CLI's exit code (0, or 1 on an error, a fatal result included).
        xr: the XR as Crossplane would write it ({} when nothing was printed).
        composed: composed resources Crossplane would apply, by composition-resource name.
        results: the ``Result`` documents (``severity``, ``reason``, ``message``).
        stdout, stderr: the raw output.
    """

    exit_code: int
    xr: dict[str, Any]
    composed: dict[str, dict[str, Any]]
    results: list[dict[str, Any]]
    stdout: str
    stderr: str
    documents: list[dict[str, Any]] = field(default_factory=list)

    def condition(self, typ: str) -> dict[str, Any] | None:
        """The XR's condition of type ``typ``, or None."""
        for c in (self.xr.get("status") or {}).get("conditions") or []:
            if c.get("type") == typ:
                return dict(c)
        return None

    def is_ready(self) -> bool:
        """Whether Crossplane marks the XR Ready (condition ``Ready`` with status True)."""
        c = self.condition("Ready")
        return c is not None and c.get("status") == "True"

    def deleted(self, observed: Iterable[Mapping[str, Any]]) -> set[str]:
        """The composition-resource names of ``observed`` that Crossplane would delete."""
        names = {
            ((o.get("metadata") or {}).get("annotations") or {}).get(COMPOSITION_RESOURCE_NAME)
            for o in observed
        }
        return {n for n in names if n} - set(self.composed)

    def check(self) -> Rendered:
        """Raise AssertionError with the CLI's output unless it exited 0."""
        assert self.exit_code == 0, f"crossplane render exited {self.exit_code}:\n{self.stderr}"
        return self


def _dump(path: Path, docs: Iterable[Mapping[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all([dict(d) for d in docs], sort_keys=True))
    return path


def render(
    tools: Tools,
    address: str,
    xr: Mapping[str, Any],
    *,
    observed: Iterable[Mapping[str, Any]] = (),
    required: Iterable[Mapping[str, Any]] = (),
    composition: Path | None = None,
    xrd: Path | bool | None = True,
    timeout: float = 120,
    full_xr: bool = True,
    core_output: Path | None = None,
    functions: Iterable[Mapping[str, Any]] = (),
) -> Rendered:
    """Render ``xr`` through ``crossplane render`` with the core binary.

    Args:
        tools: the pinned CLI and core binary.
        address: ``host:port`` of ``python -m function --insecure`` on 127.0.0.1.
        xr: the XR (its kind picks the Composition and XRD under compositions/).
        observed: observed composed resources (each with its composition-resource-name
            annotation), as provider-kubernetes and Kubernetes would have written them.
        required: the resources Crossplane can fetch for the function's requirements.
        composition: another Composition file than the one shipped for the kind.
        xrd: True for the shipped XRD (defaults and schema applied by Crossplane), a
            path for another, False for none.
        timeout: seconds before the CLI is killed.
        full_xr: pass ``--include-full-xr``: the output XR is the CLI's deep merge of
            Crossplane's output over the input XR (spec and metadata included; a status
            field the function stopped writing survives). Without it the XR's status is
            exactly what Crossplane's reconciler writes (the function's desired status
            and Crossplane's conditions), which is what a lifecycle must feed back.
        core_output: where to keep the core binary's own output, a serialized
            ``RenderResponse`` (read it with :func:`core_composite`): the CLI prints
            nothing on a fatal result, while the core binary (exit 3) still writes the
            XR as Crossplane's reconciler would (conditions included).
        functions: more Functions for the Composition's other steps (``Function``
            documents, a Development runtime each).
    """
    kind = str(xr.get("kind"))
    with tempfile.TemporaryDirectory(prefix="xp-render-") as tmp:
        d = Path(tmp)
        core = tools.core
        if core_output is not None:
            core = d / "core"
            core.write_text(
                "#!/bin/sh\n"
                f'{shlex.quote(str(tools.core))} "$@" > {shlex.quote(str(core_output))}\n'
                "rc=$?\n"
                f"cat {shlex.quote(str(core_output))}\n"
                'exit "$rc"\n'
            )
            core.chmod(0o755)
        args = [
            str(tools.cli),
            "render",
            str(_dump(d / "xr.yaml", [xr])),
            str(composition or composition_for(kind)),
            str(_dump(d / "functions.yaml", [functions_yaml(address), *functions])),
            f"--crossplane-binary={core}",
            "--include-function-results",
            f"--timeout={int(timeout)}s",
        ]
        if full_xr:
            args.append("--include-full-xr")
        if xrd is True:
            args.append(f"--xrd={xrd_for(kind)}")
        elif isinstance(xrd, Path):
            args.append(f"--xrd={xrd}")
        obs = list(observed)
        if obs:
            (d / "observed").mkdir()
            _dump(d / "observed" / "observed.yaml", obs)
            args.append(f"--observed-resources={d / 'observed'}")
        req = list(required)
        if req:
            (d / "required").mkdir()
            _dump(d / "required" / "required.yaml", req)
            args.append(f"--required-resources={d / 'required'}")
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout + 30)
    # The suite-wide secret guard sees in-process responses only; check what the real
    # engine printed too (the fake token, raw or base64, must never appear).
    leaked = leaks(proc.stdout + proc.stderr)
    assert not leaked, f"crossplane render output carries the token: {leaked}"
    return parse(proc.returncode, proc.stdout, proc.stderr)


def core_composite(path: Path) -> dict[str, Any] | None:
    """The XR in a serialized ``RenderResponse`` of the core binary (``crossplane
    internal render``, proto ``render/v1alpha1``): ``output.composite`` (field 2), its
    ``composite_resource`` (field 1), a Struct. Walked on the wire (no generated code for
    that internal proto); None when absent."""
    composite = _field(path.read_bytes(), 2)
    xr = _field(composite, 1) if composite is not None else None
    return None if xr is None else structs.to_py(Struct.FromString(xr))


def _field(data: bytes, number: int) -> bytes | None:
    """The first length-delimited field ``number`` of a serialized message, or None."""
    i = 0
    while i < len(data):
        key, start, i = codec.next_record(data, i)
        if key == (number << 3 | 2):
            return data[start:i]
    return None


def parse(exit_code: int, stdout: str, stderr: str = "") -> Rendered:
    """Split ``crossplane render``'s YAML stream into XR, composed resources and results."""
    docs = [d for d in yaml.safe_load_all(stdout) if isinstance(d, dict)] if stdout else []
    xr, composed, results = split_documents(docs)
    return Rendered(exit_code, xr, composed, results, stdout, stderr, docs)
