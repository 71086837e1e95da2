"""The Dockerfile, checked without a Docker engine.

No engine is available to build the image here, so the properties the image
must have are read from the Dockerfile itself (Dockerfile reference:
https://docs.docker.com/reference/dockerfile/): every stage starts from the same
Python minor as the project (a venv built in one stage only runs on the same
interpreter), the build stage installs the project into a venv that the
runtime stage copies, the runtime user is a numeric non-root UID (so
Kubernetes' ``runAsNonRoot`` can verify it), the entrypoint serves
``python -m function`` in exec form, and the gRPC and metrics ports are
exposed. Mutated Dockerfiles prove each check can fail.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
PYTHON_IMAGE = re.compile(r"^(?:docker\.io/)?(?:library/)?python:(\d+)\.(\d+)(?:[.\-@:].*)?$")


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, op: str) -> list[str]:
        return [a for o, a in self.instructions if o == op]


def parse(text: str) -> list[Stage]:
    """Split a Dockerfile into stages of (INSTRUCTION, arguments).

    Handles comments, ``\\`` line continuations and ``ARG`` defaults declared
    before the first ``FROM`` (substituted into ``FROM`` lines as ``${NAME}`` or
    ``$NAME``).
    """
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # comment lines inside a continuation are dropped
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append((buf + line).strip())
        buf = ""
    if buf.strip():
        logical.append(buf.strip())

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        op, _, rest = line.partition(" ")
        op = op.upper()
        rest = rest.strip()
        if op == "ARG" and not stages:
            name, _, default = rest.partition("=")
            global_args[name.strip()] = default.strip().strip('"')
            continue
        if op == "FROM":
            for k, v in global_args.items():
                rest = rest.replace("${" + k + "}", v).replace("$" + k, v)
            words = [w for w in rest.split() if not w.startswith("--platform")]
            alias = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(image=words[0], name=alias))
            continue
        if not stages:
            raise ValueError(f"instruction before FROM: {line}")
        stages[-1].instructions.append((op, rest))
    return stages


def project_python_minor() -> tuple[int, int]:
    """The lowest Python the project supports, from pyproject's ``requires-python``."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    m = re.search(r">=\s*(\d+)\.(\d+)", data["project"]["requires-python"])
    assert m, "requires-python must state a minimum such as >=3.11"
    return int(m.group(1)), int(m.group(2))


def problems(text: str) -> list[str]:
    """Every property the Dockerfile misses; empty when it is right."""
    out: list[str] = []
    try:
        stages = parse(text)
    except ValueError as e:
        return [str(e)]
    if len(stages) < 2:
        out.append("not multi-stage: need a build stage and a runtime stage")
        return out
    want = project_python_minor()
    minors = set()
    for s in stages:
        m = PYTHON_IMAGE.match(s.image)
        if not m:
            out.append(f"stage {s.name or s.image}: base image {s.image!r} is not python:X.Y")
            continue
        minors.add((int(m.group(1)), int(m.group(2))))
    if len(minors) > 1:
        out.append(f"stages use different Python minors: {sorted(minors)}")
    elif minors and minors != {want}:
        out.append(f"image Python {minors.pop()} differs from requires-python minimum {want}")

    build, runtime = stages[:-1], stages[-1]
    runs = " ".join(a for s in build for a in s.args("RUN"))
    venv = re.search(r"python\d*(\.\d+)? -m venv (\S+)", runs)
    if not venv:
        out.append("build stage creates no virtual environment (python -m venv)")
    else:
        # `python` in the entrypoint and in the Jobs' commands must be the venv's.
        bin_dir = venv.group(2).rstrip("/") + "/bin"
        path = next(
            (
                m.group(1)
                for a in runtime.args("ENV")
                for m in [re.search(r"(?:^|\s)PATH=(\S+)", a)]
                if m
            ),
            "",
        )
        if path.split(":")[0] != bin_dir:
            out.append(f"runtime PATH does not start with {bin_dir}: `python` is not the venv's")
        if not any(a.split()[1:] == [venv.group(2), venv.group(2)] for a in runtime.args("COPY")):
            out.append(f"runtime stage does not copy the venv {venv.group(2)} to the same path")
    if not re.search(r"pip install[^&;]*\s['\"]?\.(\[[\w,]+\])?['\"]?(\s|$)", runs):
        out.append("build stage does not install the project (pip install .)")
    # The dependency layer: dependencies installed from pyproject.toml alone, before any
    # code is copied, so a code change reuses it.
    deps_at = code_at = None
    for i, (op, arg) in enumerate(build[-1].instructions if build else []):
        if op == "RUN" and re.search(r"pip install[^&;]*-r ", arg) and deps_at is None:
            deps_at = i
        if op == "COPY" and re.search(r"(^|\s)function(/|\s|$)", arg) and code_at is None:
            code_at = i
    if deps_at is None or code_at is None or deps_at > code_at:
        out.append("no dependency layer: install the dependencies before copying function/")
    copies_from = [a for a in runtime.args("COPY") if a.startswith("--from=")]
    build_names = {s.name for s in build if s.name} | {str(i) for i in range(len(build))}
    if not any(a.split()[0].split("=", 1)[1] in build_names for a in copies_from):
        out.append("runtime stage copies nothing from the build stage")

    users = runtime.args("USER")
    if not users:
        out.append("runtime stage sets no USER (runs as root)")
    else:
        user = users[-1].split(":")[0].strip()
        if user in ("root", "0"):
            out.append(f"runtime USER is root ({users[-1]})")
        elif not user.isdigit():
            out.append(f"runtime USER {user!r} is not numeric; runAsNonRoot cannot verify it")

    entry = runtime.args("ENTRYPOINT")
    if not entry:
        out.append("runtime stage has no ENTRYPOINT")
    else:
        try:
            form = json.loads(entry[-1])
        except json.JSONDecodeError:
            form = None
        if form != ["python", "-m", "function"]:
            out.append(f'ENTRYPOINT must be ["python", "-m", "function"] in exec form: {entry[-1]}')
    cmds = runtime.args("CMD")
    if cmds:
        try:
            extra = json.loads(cmds[-1])
        except json.JSONDecodeError:
            extra = shlex.split(cmds[-1])
        if extra and extra[0] != "serve" and not str(extra[0]).startswith("-"):
            out.append(f"CMD {cmds[-1]} makes the image do something other than serve")

    exposed = {p.split("/")[0] for a in runtime.args("EXPOSE") for p in a.split()}
    for port in ("9443", "8080"):
        if port not in exposed:
            out.append(f"port {port} is not exposed")
    return out


def test_dockerfile_has_every_property():
    assert problems(DOCKERFILE.read_text()) == []


def test_all_stages_share_the_python_minor_of_the_project():
    stages = parse(DOCKERFILE.read_text())
    minors = {PYTHON_IMAGE.match(s.image).groups() for s in stages}  # type: ignore[union-attr]
    assert minors == {tuple(str(v) for v in project_python_minor())}


def _mutate(old: str, new: str, *, count: int = 1) -> str:
    text = DOCKERFILE.read_text()
    assert old in text, f"the mutation needs {old!r} in the Dockerfile"
    return text.replace(old, new, count)


def _last(old: str, new: str) -> str:
    text = DOCKERFILE.read_text()
    head, sep, tail = text.rpartition(old)
    assert sep, f"the mutation needs {old!r} in the Dockerfile"
    return head + new + tail


MUTATIONS = {
    "runtime on another Python minor": (
        lambda: _last("FROM python:3.11", "FROM python:3.12"),
        "different Python minors",
    ),
    "both stages on another minor than pyproject": (
        lambda: _mutate("FROM python:3.11", "FROM python:3.12", count=2),
        "differs from requires-python",
    ),
    "single stage": (
        lambda: (
            "FROM python:3.11-slim\nUSER 65532\nEXPOSE 9443 8080\n"
            'ENTRYPOINT ["python", "-m", "function"]\n'
        ),
        "not multi-stage",
    ),
    "root user": (lambda: _mutate("USER 65532:65532", "USER root"), "USER is root"),
    "uid 0": (lambda: _mutate("USER 65532:65532", "USER 0:0"), "USER is root"),
    "no user": (lambda: _mutate("USER 65532:65532\n", ""), "sets no USER"),
    "named user": (lambda: _mutate("USER 65532:65532", "USER nonroot"), "not numeric"),
    "shell-form entrypoint": (
        lambda: _mutate('ENTRYPOINT ["python", "-m", "function"]', "ENTRYPOINT python -m function"),
        "exec form",
    ),
    "other entrypoint": (
        lambda: _mutate(
            'ENTRYPOINT ["python", "-m", "function"]', 'ENTRYPOINT ["python", "-m", "http.server"]'
        ),
        "exec form",
    ),
    "cmd that does not serve": (
        lambda: DOCKERFILE.read_text() + 'CMD ["config"]\n',
        "other than serve",
    ),
    "metrics port not exposed": (
        lambda: _mutate("EXPOSE 9443 8080", "EXPOSE 9443"),
        "port 8080",
    ),
    "project not installed": (
        lambda: _mutate(
            "/venv/bin/pip install --no-compile --no-deps '.[jobs]'", "/venv/bin/pip install grpcio"
        ),
        "pip install .",
    ),
    "dependencies installed with the code": (
        lambda: _mutate(
            "COPY pyproject.toml ./\n", "COPY pyproject.toml ./\nCOPY function ./function\n"
        ),
        "dependency layer",
    ),
    "venv not first on PATH": (
        lambda: _mutate("ENV PATH=/venv/bin:$PATH", "ENV PATH=$PATH:/venv/bin"),
        "not the venv's",
    ),
    "venv copied elsewhere": (
        lambda: _mutate("COPY --from=build /venv /venv", "COPY --from=build /venv /opt/venv"),
        "same path",
    ),
    "venv not copied": (
        lambda: _mutate("COPY --from=build /venv /venv", "COPY function /venv"),
        "copies nothing",
    ),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_a_broken_dockerfile_is_reported(case):
    make, expected = MUTATIONS[case]
    found = problems(make())
    assert any(expected in p for p in found), found


def test_arg_defaults_are_substituted_into_from():
    text = (
        "ARG PY=3.11\nFROM python:${PY}-slim AS build\nCOPY pyproject.toml ./\n"
        "RUN python -m venv /v && /v/bin/pip install -r requirements.txt\n"
        "COPY function ./function\nRUN /v/bin/pip install --no-deps .\n"
        "FROM python:$PY-slim\nCOPY --from=build /v /v\n"
        "ENV PATH=/v/bin:$PATH\nUSER 1000\n"
        'EXPOSE 9443 8080\nENTRYPOINT ["python", "-m", "function"]\n'
    )
    assert problems(text) == []
    assert problems(text.replace("ARG PY=3.11", "ARG PY=3.10")) != []


def test_dockerignore_keeps_the_local_venv_out_of_the_build_context():
    lines = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    # Everything is ignored first, then only the sources the build copies are let back in.
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "function", "jobs"}
    copied: set[str] = set()
    for stage in parse(DOCKERFILE.read_text()):
        for args in stage.args("COPY"):
            if not args.startswith("--from"):
                copied |= {src.removeprefix("./").rstrip("/") for src in args.split()[:-1]}
    assert copied and copied <= allowed


def test_every_function_package_is_installed_by_pip():
    """``pip install .`` ships every package under function/ (composers, manifests, ...)
    and jobs/ (the programs that run in pods)."""
    from setuptools import find_packages

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = data["tool"]["setuptools"]["packages"]["find"]["include"]
    found = set(find_packages(where=str(ROOT), include=include))
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("function", "jobs")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk and on_disk <= found


def _runtime_uid() -> int:
    user = parse(DOCKERFILE.read_text())[-1].args("USER")[-1]
    return int(user.split(":")[0])


def test_runtime_uid_is_the_uid_the_hydration_pod_runs_as():
    """The hydration Job runs this image with runAsUser and fsGroup; they must agree."""
    from function.manifests import hydration as storage

    assert _runtime_uid() == storage.HYDRATION_UID


def test_every_python_module_a_composed_pod_runs_is_in_the_image():
    """The commands composed pods run (``jobs.contract``) resolve to installed modules, and
    no composed pod names a module any other way."""
    import importlib.util

    from jobs import contract

    commands = [v for k, v in vars(contract).items() if k.endswith("_COMMAND")]
    modules = {c[2] for c in commands}
    assert {c[:2] for c in commands} == {("python", "-m")}
    assert modules == {"jobs.hydrate", "jobs.flashload"}
    for module in sorted(modules):
        assert importlib.util.find_spec(module) is not None, f"{module} is not in the package"
    literal = re.compile(r'"python",\s*"-m",\s*"')
    for path in (ROOT / "function").rglob("*.py"):
        assert not literal.search(path.read_text()), f"{path}: use jobs.contract's commands"


def test_the_server_never_imports_the_jobs_dependencies():
    """Serving needs neither huggingface_hub nor kubernetes (the ``jobs`` extra)."""
    import subprocess
    import sys

    code = (
        "import importlib, sys, function.__main__, function.edge.server\n"
        "from function.composers import KINDS\n"
        "for m in KINDS.values(): importlib.import_module('function.composers.' + m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('huggingface_hub', 'kubernetes', 'jobs.hydrate', 'jobs.flashload'))\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
