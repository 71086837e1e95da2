"""The golden corpus: whole function responses, stored, replayed byte for byte.

A case is one function call, in ``tests/golden/<kind>/<case>/``:

- ``xr.yaml``: the observed XR (``request.observed.composite.resource``);
- ``observed.yaml``: observed composed resources, by composition-resource name
  (``request.observed.resources``), when there are any;
- ``required.yaml``: the resolved requirements, by requirement name
  (``request.required_resources``), when there are any;
- ``request.yaml``: the rest of the request (``meta``, ``desired``, ``context``), when any;
- ``case.yaml``: ``now``, the time the function's clock reads for the call;
- ``want.yaml``: the whole ``RunFunctionResponse`` the function returns, as YAML with
  sorted keys.

:func:`replay` runs a case in-process (``FunctionRunner`` with the default settings and
``now``) and returns the response's YAML; ``tests/test_golden.py`` compares it with
``want.yaml`` byte for byte. Cases are recorded from real calls only:

- the bundled examples, driven through Crossplane's requirements loop
  (:func:`record_examples`);
- every call Crossplane's own reconciler made during the end-to-end lifecycle tests, taken
  at a recording proxy between ``crossplane render`` and the function (run the e2e suite
  with ``MODELPLANE_RECORD_GOLDEN=tests/golden``; see ``tests/e2e/conftest.py``).

``want.yaml`` is regenerated on purpose only: ``MODELPLANE_UPDATE_GOLDEN=1`` with
``tests/test_golden.py`` rewrites every ``want.yaml`` from the current code, and the
diff is the behaviour change the commit makes.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

_PARTS = (
    # file, path in the request's JSON form
    ("xr.yaml", ("observed", "composite", "resource")),
    ("observed.yaml", ("observed", "resources")),
    ("required.yaml", ("requiredResources",)),
)


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=True, default_flow_style=False, width=100)


def response_yaml(rsp: fnv1.RunFunctionResponse) -> str:
    """The whole response as YAML (JSON field names, sorted keys): what ``want.yaml`` holds."""
    return _dump(json_format.MessageToDict(rsp))


def _pop(d: dict[str, Any], path: tuple[str, ...]) -> Any:
    *parents, last = path
    cur = d
    for p in parents:
        cur = cur.get(p)
        if not isinstance(cur, dict):
            return None
    value = cur.pop(last, None)
    # Drop the parents the pop left empty.
    for depth in range(len(parents), 0, -1):
        holder = d
        for p in parents[: depth - 1]:
            holder = holder[p]
        if holder.get(parents[depth - 1]) == {}:
            del holder[parents[depth - 1]]
    return value


def _put(d: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    cur = d
    for p in path[:-1]:
        cur = cur.setdefault(p, {})
    cur[path[-1]] = value


REDACTED = "redacted-by-the-golden-recorder"


def _redact(body: dict[str, Any]) -> dict[str, Any]:
    """Replace every Secret value in the required resources: a case never stores one.

    The function never reads a Secret's value (it references Secrets by name), so the
    response is the same; ``test_golden`` checks that no case file holds a value.
    """
    for req in (body.get("requiredResources") or {}).values():
        for item in req.get("items") or []:
            res = item.get("resource") or {}
            if res.get("kind") == "Secret":
                for key in ("data", "stringData"):
                    if isinstance(res.get(key), dict):
                        res[key] = dict.fromkeys(res[key], REDACTED)
    return body


def write_case(directory: Path, req: fnv1.RunFunctionRequest, now: datetime.datetime) -> None:
    """Store ``req`` (called at ``now``) as a case in ``directory``; want.yaml from the code."""
    directory.mkdir(parents=True, exist_ok=True)
    body = _redact(json_format.MessageToDict(req))
    for name, path in _PARTS:
        value = _pop(body, path)
        if value:
            (directory / name).write_text(_dump(value))
    if body:
        (directory / "request.yaml").write_text(_dump(body))
    (directory / "case.yaml").write_text(_dump({"now": now.strftime("%Y-%m-%dT%H:%M:%SZ")}))
    (directory / "want.yaml").write_text(replay(directory))


def load_request(directory: Path) -> tuple[fnv1.RunFunctionRequest, datetime.datetime]:
    """The request a case stores, and the time its call is made at."""
    body: dict[str, Any] = {}
    rest = directory / "request.yaml"
    if rest.exists():
        body = yaml.safe_load(rest.read_text()) or {}
    for name, path in _PARTS:
        f = directory / name
        if f.exists():
            _put(body, path, yaml.safe_load(f.read_text()))
    req = json_format.ParseDict(body, fnv1.RunFunctionRequest())
    case = yaml.safe_load((directory / "case.yaml").read_text())
    now = datetime.datetime.strptime(str(case["now"]), "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC
    )
    return req, now


def replay(directory: Path) -> str:
    """Run a stored case in-process; the response as :func:`response_yaml`."""
    from tests.support.harness import run

    req, now = load_request(directory)
    return response_yaml(run(req, now=now))


def cases(root: Path = GOLDEN) -> list[Path]:
    """Every case directory under ``root``, sorted."""
    return sorted(p.parent for p in root.glob("*/*/case.yaml"))


def case_name(label: str) -> str:
    """A directory name for a case from a free-form label (a test id, an example path)."""
    name = re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-").lower()
    return name[:90]


def request_digest(req: fnv1.RunFunctionRequest) -> str:
    """A digest of a request without its tag: identical calls are stored once."""
    copy = fnv1.RunFunctionRequest()
    copy.CopyFrom(req)
    copy.meta.tag = ""
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()[:10]


class Recorder:
    """Stores calls as cases under ``root``, each request once (whatever its tag)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seen: set[str] = {
            (c / "digest").read_text().strip() for c in cases(root) if (c / "digest").exists()
        }

    def add(self, label: str, calls: Iterable[tuple[bytes, datetime.datetime]]) -> int:
        """Record the calls of one test or example; returns how many were new."""
        n = 0
        for i, (raw, now) in enumerate(calls, start=1):
            req = fnv1.RunFunctionRequest.FromString(raw)
            digest = request_digest(req)
            if digest in self.seen:
                continue
            self.seen.add(digest)
            kind = str(req.observed.composite.resource["kind"]).lower() or "unknown"
            d = self.root / kind / f"{case_name(label)}-{i:02d}"
            write_case(d, req, now)
            (d / "digest").write_text(digest + "\n")
            n += 1
        return n


def record_examples(root: Path, examples: Path, now: datetime.datetime) -> int:
    """Record every bundled example's calls (first reconcile, then with observed/)."""
    from function.render import World, drive, load_yaml, observed_by_name
    from tests.support.harness import run

    rec = Recorder(root)
    n = 0
    for xr_file in sorted(examples.glob("*/xr*.yaml")):
        required = xr_file.parent / "required"
        world = World(load_yaml([str(required)]) if required.is_dir() else [])
        observed_dir = xr_file.parent / "observed"
        variants: list[tuple[str, Mapping[str, Any]]] = [("create", {})]
        if observed_dir.is_dir():
            variants.append(("observed", observed_by_name(load_yaml([str(observed_dir)]))))
        xr = load_yaml([str(xr_file)])[0]
        for variant, observed in variants:
            calls: list[tuple[bytes, datetime.datetime]] = []

            def call(req: fnv1.RunFunctionRequest, calls: list = calls) -> Any:
                calls.append((req.SerializeToString(), now))
                return run(req, now=now)

            drive(call, xr, observed, world)
            rel = xr_file.relative_to(examples).with_suffix("")
            n += rec.add(f"example-{rel}-{variant}", calls)
    return n


if __name__ == "__main__":
    import sys

    from tests.support.harness import NOW

    root = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN
    print(f"recorded {record_examples(root, GOLDEN.parents[1] / 'examples', NOW)} example calls")
