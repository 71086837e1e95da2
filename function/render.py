"""Preview what the function composes, without a cluster or the Crossplane CLI.

``python -m function.render XR.yaml [--required PATH ...] [--observed PATH ...]
[--seed FILE]`` starts ``python -m function`` on 127.0.0.1, then drives Crossplane's
requirements loop over gRPC the way Crossplane v2.4.0 does (``FetchingFunctionRunner``
in ``internal/xfn/required_resources.go``): call the function, resolve the
requirements it returned from the given resources, call again with them, and stop
when the requirements equal the previous call's, on a fatal result, or on the first
call when what it was given equals what its requirements resolve to; after 6 calls
(5 iterations past the first) it fails with Crossplane's "requirements didn't
stabilize" error (exit 1). ``--seed`` pre-populates the first call with the
requirements the function returned last reconcile (what Crossplane v2.4 seeds with
realtime compositions, or a Composition step's bootstrap requirements): a YAML map of
name to selector as the function returns it (``requirements`` in its response).
It prints the desired XR status, conditions, results and composed resources as YAML.

``--required`` files hold the resources the "cluster" has (InferenceClusters,
Secrets, ...); ``--observed`` files hold observed composed resources, each named by
its ``crossplane.io/composition-resource-name`` annotation. Both take files or
directories (every ``*.yaml`` in them, multi-document allowed).

:class:`World` and :func:`drive` are the same loop for tests.
"""

from __future__ import annotations

import argparse
import copy
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from function.core.errors import plain_text

COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"
MAX_REQUIREMENTS_ITERATIONS = 5
"""``xfn.MaxRequirementsIterations`` of Crossplane v2.4.0: the loop calls at most this
many times after the first."""
MAX_CALLS = MAX_REQUIREMENTS_ITERATIONS + 1
NOT_STABLE = (
    "requirements didn't stabilize after the maximum number of iterations "
    f"({MAX_REQUIREMENTS_ITERATIONS})"
)
"""Crossplane v2.4.0's error when the loop runs out of iterations (nothing is applied)."""

Resolved = list[dict[str, Any]] | None
"""What a requirement resolved to: the objects, or None for a name not found (Crossplane's
nil, sent on the wire as an empty entry)."""


class RequirementsDidNotStabilize(Exception):
    """The loop ran out of iterations; Crossplane applies nothing and fails the reconcile.

    Attributes:
        calls: How many calls were made.
        response: The last response (never applied).
    """

    def __init__(self, calls: int, response: fnv1.RunFunctionResponse) -> None:
        super().__init__(NOT_STABLE)
        self.calls = calls
        self.response = response


class World:
    """The resources Crossplane could fetch for requirements.

    Resolution follows ``ResourceSelector`` in Crossplane's ``run_function.proto``:
    match by apiVersion and kind, then by ``match_name`` or by every label of
    ``match_labels``. With ``namespace`` set only that namespace matches; without
    it, a name matches cluster-scoped resources and labels match across all
    namespaces.
    """

    def __init__(self, resources: Iterable[Mapping[str, Any]] = ()) -> None:
        self.resources = [dict(r) for r in resources]

    def resolve(self, sel: fnv1.ResourceSelector) -> list[dict[str, Any]]:
        """The resources ``sel`` selects, sorted by namespace and name."""
        out = []
        has_ns = sel.HasField("namespace")
        match = sel.WhichOneof("match")
        for r in self.resources:
            if r.get("apiVersion") != sel.api_version or r.get("kind") != sel.kind:
                continue
            meta = r.get("metadata") or {}
            ns = meta.get("namespace")
            if has_ns and ns != sel.namespace:
                continue
            if match == "match_name":
                if meta.get("name") != sel.match_name or (not has_ns and ns):
                    continue
            elif match == "match_labels":
                labels = meta.get("labels") or {}
                if any(labels.get(k) != v for k, v in sel.match_labels.labels.items()):
                    continue
            else:
                continue
            out.append(r)
        out.sort(key=lambda r: ((r["metadata"].get("namespace") or ""), r["metadata"].get("name")))
        return out

    def fetch(self, sel: fnv1.ResourceSelector) -> Resolved:
        """What Crossplane's ``ExistingRequiredResourcesFetcher.Fetch`` returns for ``sel``:
        None (nil) for a name not found, otherwise the list (possibly empty)."""
        got = self.resolve(sel)
        if sel.WhichOneof("match") == "match_name" and not got:
            return None
        return got


def build_request(
    xr: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]] | None = None,
    required: Mapping[str, Sequence[Mapping[str, Any]] | None] | None = None,
    *,
    tag: str = "render",
) -> fnv1.RunFunctionRequest:
    """Build a RunFunctionRequest.

    Args:
        xr: The observed XR.
        observed: Observed composed resources by composition-resource name.
        required: Resolved requirements (name to resources); a name that is absent
            is "not resolved yet", an empty list is "resolved, nothing matched" (None,
            a name not found, goes on the wire as an empty entry too).
        tag: The request tag.
    """
    req = fnv1.RunFunctionRequest()
    req.meta.tag = tag
    req.observed.composite.resource.update(dict(xr))
    for name, body in (observed or {}).items():
        req.observed.resources[name].resource.update(dict(body))
    for name, items in (required or {}).items():
        res = req.required_resources[name]
        for item in items or ():
            res.items.add().resource.update(dict(item))
    return req


def _requirements(rsp: fnv1.RunFunctionResponse) -> fnv1.Requirements | None:
    """``rsp.GetRequirements()``: None (Go's nil) when the response has none."""
    if not rsp.HasField("requirements"):
        return None
    out = fnv1.Requirements()
    out.CopyFrom(rsp.requirements)
    return out


def _proto_equal(a: fnv1.Requirements | None, b: fnv1.Requirements | None) -> bool:
    """``proto.Equal``: nil equals only nil; set messages compare field by field."""
    if a is None or b is None:
        return a is None and b is None
    return a == b


def drive(
    call: Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse],
    xr: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]] | None,
    world: World,
    *,
    seed: Mapping[str, fnv1.ResourceSelector] | None = None,
    bootstrap: Mapping[str, fnv1.ResourceSelector] | None = None,
) -> tuple[fnv1.RunFunctionResponse, int]:
    """Run Crossplane v2.4.0's requirements loop (``FetchingFunctionRunner.RunFunction``).

    Each call's response ends the loop when it has a fatal result, when its
    requirements equal the previous call's (``proto.Equal``: none equals only none, so
    a first response without requirements ends it), or, on the first call only, when
    the resources the request was given equal what the response's requirements resolve
    to. Otherwise every requirement is resolved again (on top of the pre-populated
    resources, which persist across calls), the response's context is passed on, and
    the function is called again: at most :data:`MAX_CALLS` calls in all.

    Args:
        call: The function.
        xr: The observed XR.
        observed: Observed composed resources by composition-resource name.
        world: What Crossplane could fetch.
        seed: Requirements the step returned last reconcile, pre-populated under their
            names (Crossplane v2.4 with realtime compositions, ``composition_functions.go``;
            names ``bootstrap`` filled are skipped).
        bootstrap: A Composition step's bootstrap ``requirements.requiredResources``.

    Returns:
        The response Crossplane applies and the number of calls made.

    Raises:
        RequirementsDidNotStabilize: the requirements did not settle within
            :data:`MAX_CALLS` calls (Crossplane's "requirements didn't stabilize").
    """
    given = _prepopulated(world, bootstrap, seed)
    required: dict[str, Resolved] = dict(given)
    extra: dict[str, Resolved] = {}
    context: Any = None
    previous: fnv1.Requirements | None = None
    rsp = fnv1.RunFunctionResponse()
    for i in range(MAX_CALLS):
        rsp = call(_loop_request(xr, observed, required, extra, context, tag=f"render-{i + 1}"))
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            return rsp, i + 1
        reqs = _requirements(rsp)
        if _proto_equal(reqs, previous):
            return rsp, i + 1
        nxt, nxt_extra = _resolve(world, given, reqs)
        # Schemas: the function asks for none, and World holds none to give.
        if i == 0 and required == nxt and extra == nxt_extra and not (reqs and reqs.schemas):
            return rsp, i + 1
        previous, required, extra = reqs, nxt, nxt_extra
        context = rsp.context if rsp.HasField("context") else None
    raise RequirementsDidNotStabilize(MAX_CALLS, rsp)


def _prepopulated(
    world: World,
    bootstrap: Mapping[str, fnv1.ResourceSelector] | None,
    seed: Mapping[str, fnv1.ResourceSelector] | None,
) -> dict[str, Resolved]:
    """The first request's resources: bootstrap first (authoritative), then the seeded
    names bootstrap left (``composition_functions.go``)."""
    given = {name: world.fetch(sel) for name, sel in (bootstrap or {}).items()}
    for name, sel in (seed or {}).items():
        if name not in given:
            given[name] = world.fetch(sel)
    return given


def _resolve(
    world: World, given: Mapping[str, Resolved], reqs: fnv1.Requirements | None
) -> tuple[dict[str, Resolved], dict[str, Resolved]]:
    """The next request's resources (the pre-populated ones, then every requirement
    fetched) and its deprecated extra resources."""
    nxt: dict[str, Resolved] = dict(given)
    if reqs is None:
        return nxt, {}
    extra = {name: world.fetch(sel) for name, sel in reqs.extra_resources.items()}
    for name, sel in reqs.resources.items():
        nxt[name] = world.fetch(sel)
    return nxt, extra


def _loop_request(
    xr: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]] | None,
    required: Mapping[str, Resolved],
    extra: Mapping[str, Resolved],
    context: Any,
    *,
    tag: str,
) -> fnv1.RunFunctionRequest:
    req = build_request(xr, observed, required, tag=tag)
    for name, items in extra.items():
        res = req.extra_resources[name]
        for item in items or ():
            res.items.add().resource.update(dict(item))
    if context is not None:
        req.context.CopyFrom(context)
    return req


_FIRST = ("apiVersion", "kind", "metadata", "name", "namespace", "type", "status", "spec")
RESULT_API_VERSION = "render.crossplane.io/v1beta1"
_SEVERITY_NAME = {fnv1.SEVERITY_NORMAL: "Normal", fnv1.SEVERITY_WARNING: "Warning"}
_STATUS_NAME = {
    fnv1.STATUS_CONDITION_TRUE: "True",
    fnv1.STATUS_CONDITION_FALSE: "False",
    fnv1.STATUS_CONDITION_UNKNOWN: "Unknown",
}


def tidy(value: Any) -> Any:
    """Order keys (apiVersion, kind, metadata first, then sorted) and show whole numbers as ints.

    Struct maps have no order and numbers are doubles; this makes YAML readable and stable.
    """
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (_FIRST.index(k) if k in _FIRST else len(_FIRST), k))
        return {k: tidy(value[k]) for k in keys}
    if isinstance(value, list):
        return [tidy(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def summarize(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    """The parts of a response a person reads: status, conditions, results, resources."""
    d = json_format.MessageToDict(rsp, preserving_proto_field_name=False)
    desired = d.get("desired", {})
    resources = {}
    for name, r in sorted(desired.get("resources", {}).items()):
        entry = {"resource": r.get("resource", {})}
        if "ready" in r:
            entry["ready"] = r["ready"]
        resources[name] = entry
    return tidy(
        {
            "status": desired.get("composite", {}).get("resource", {}).get("status", {}),
            "ready": desired.get("composite", {}).get("ready", "READY_UNSPECIFIED"),
            "conditions": d.get("conditions", []),
            "results": d.get("results", []),
            "requirements": d.get("requirements", {}).get("resources", {}),
            "ttl": d.get("meta", {}).get("ttl"),
            "resources": resources,
        }
    )


def _condition(typ: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    c = {"type": typ, "status": status, "reason": reason}
    if message:
        c["message"] = message
    return c


def crossplane_documents(
    xr: Mapping[str, Any], rsp: fnv1.RunFunctionResponse, *, step: str | None = None
) -> list[dict[str, Any]]:
    """What ``crossplane render -r -x`` prints for this final response, as documents.

    The same YAML stream (Crossplane v2's render output): the XR with its spec and
    metadata, the status the function desired and the conditions (the function's own,
    then Crossplane's ``Synced`` and ``Ready``: ``Available`` when the function said
    READY_TRUE for the XR, or, when it said nothing, when every composed resource is
    READY_TRUE; otherwise ``Creating``); then each composed resource with its
    ``crossplane.io/composition-resource-name`` annotation and ``crossplane.io/composite``
    label, sorted by that name; then one ``render.crossplane.io/v1beta1`` ``Result`` per
    Normal or Warning result (prefixed ``Pipeline step "<step>": `` when ``step`` is
    given, as Crossplane does) and one ``ComposeResources`` event per composed resource
    that is not ready.

    What this cannot know is left out rather than guessed: the names Crossplane
    generates for composed resources that have none (``metadata.generateName`` shows the
    prefix), owner references, uids and condition timestamps.
    """
    desired = rsp.desired
    composite = json_format.MessageToDict(desired.composite.resource)
    meta = copy.deepcopy(dict(xr.get("metadata") or {}))
    status = copy.deepcopy(dict(xr.get("status") or {}))
    status.update(copy.deepcopy(composite.get("status") or {}))
    own = [
        _condition(c.type, _STATUS_NAME.get(c.status, "Unknown"), c.reason, c.message)
        for c in rsp.conditions
    ]
    resources = sorted(desired.resources.items())
    if desired.composite.ready != fnv1.READY_UNSPECIFIED:
        ready = desired.composite.ready == fnv1.READY_TRUE
    else:
        ready = all(r.ready == fnv1.READY_TRUE for _, r in resources)
    status["conditions"] = [
        *own,
        _condition("Synced", "True", "ReconcileSuccess"),
        _condition("Ready", "True" if ready else "False", "Available" if ready else "Creating"),
    ]
    out: list[dict[str, Any]] = [
        {
            "apiVersion": xr.get("apiVersion"),
            "kind": xr.get("kind"),
            "metadata": meta,
            **({"spec": copy.deepcopy(xr["spec"])} if "spec" in xr else {}),
            "status": status,
        }
    ]
    for name, r in resources:
        body = json_format.MessageToDict(r.resource)
        m = body.setdefault("metadata", {})
        m.setdefault("annotations", {})[COMPOSITION_RESOURCE_NAME] = name
        m.setdefault("labels", {})["crossplane.io/composite"] = meta.get("name", "")
        if "name" not in m:
            m["generateName"] = f"{meta.get('name', '')}-"
        if "namespace" not in m and meta.get("namespace"):
            m["namespace"] = meta["namespace"]
        out.append(body)
    prefix = f'Pipeline step "{step}": ' if step else ""
    for res in rsp.results:
        if res.severity not in _SEVERITY_NAME:
            continue
        doc = {
            "apiVersion": RESULT_API_VERSION,
            "kind": "Result",
            "severity": _SEVERITY_NAME[res.severity],
            "message": prefix + res.message,
        }
        if res.reason:
            doc["reason"] = res.reason
        out.append(doc)
    for name, r in resources:
        if r.ready != fnv1.READY_TRUE:
            out.append(
                {
                    "apiVersion": RESULT_API_VERSION,
                    "kind": "Result",
                    "severity": "Normal",
                    "reason": "ComposeResources",
                    "message": f'Composed resource "{name}" is not yet ready',
                }
            )
    return [tidy(d) for d in out]


def split_documents(
    docs: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Split a ``crossplane render`` stream (or :func:`crossplane_documents`) into parts.

    Returns:
        ``(xr, composed, results)``: the first document (the XR; {} when there is none),
        the composed resources by their composition-resource-name annotation, and the
        ``render.crossplane.io`` ``Result`` documents, in order.
    """
    xr: dict[str, Any] = {}
    composed: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        if doc.get("kind") == "Result" and str(doc.get("apiVersion", "")).startswith(
            "render.crossplane.io/"
        ):
            results.append(dict(doc))
        elif i == 0:
            xr = dict(doc)
        else:
            ann = (doc.get("metadata") or {}).get("annotations") or {}
            composed[ann.get(COMPOSITION_RESOURCE_NAME, f"<unnamed-{i}>")] = dict(doc)
    return xr, composed, results


def load_yaml(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Every YAML document in the given files and directories (``*.yaml``, ``*.yml``).

    Raises:
        FileNotFoundError: for a path that does not exist (a typo is not "no resources").
        ValueError: for a file that is not valid YAML, naming the file.
    """
    docs: list[dict[str, Any]] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        files = sorted(
            f
            for f in (path.rglob("*") if path.is_dir() else [path])
            if f.suffix in (".yaml", ".yml")
        )
        for f in files:
            try:
                docs.extend(d for d in yaml.safe_load_all(f.read_text()) if isinstance(d, dict))
            except yaml.YAMLError as e:
                raise ValueError(f"{f}: not valid YAML: {e}") from None
    return docs


def check_required(docs: Iterable[Mapping[str, Any]]) -> None:
    """Refuse a required resource Crossplane could never return: one without kind or name.

    Raises:
        ValueError: naming the document (its position and what it has) and what to write.
    """
    for i, d in enumerate(docs, start=1):
        meta: Mapping[str, Any] = d.get("metadata") or {}
        if not isinstance(meta, Mapping):
            meta = {}
        missing = [
            f
            for f, v in (
                ("apiVersion", d.get("apiVersion")),
                ("kind", d.get("kind")),
                ("metadata.name", meta.get("name")),
            )
            if not v
        ]
        if missing:
            raise ValueError(
                f"--required document {i} ({d.get('kind') or '?'} "
                f"{meta.get('name') or '?'}) has no {', '.join(missing)}: every required "
                "resource needs apiVersion, kind and metadata.name"
            )


def observed_by_name(docs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Index observed composed resources by their composition-resource-name annotation.

    Raises:
        ValueError: when a document has no such annotation.
    """
    out = {}
    for d in docs:
        ann = (d.get("metadata") or {}).get("annotations") or {}
        name = ann.get(COMPOSITION_RESOURCE_NAME)
        if not name:
            raise ValueError(
                f"observed {d.get('kind')} {(d.get('metadata') or {}).get('name')} has no "
                f"{COMPOSITION_RESOURCE_NAME} annotation"
            )
        out[name] = dict(d)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_function(
    extra_env: Mapping[str, str] | None = None,
    *,
    workers: int = 1,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m function --insecure`` on a free 127.0.0.1 port; wait until it serves.

    Returns:
        The process and its ``host:port``.

    Raises:
        RuntimeError: when it exits or does not serve within 20 seconds.
    """

    address = f"127.0.0.1:{_free_port()}"
    env = {**os.environ, **(extra_env or {})}
    env.pop("TLS_SERVER_CERTS_DIR", None)
    log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "function",
            "--insecure",
            "--address",
            address,
            "--metrics-address",
            "127.0.0.1:0",
            "--workers",
            str(workers),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        # A file, not a pipe: nobody reads the server's logs while it runs, and a full
        # pipe would block it.
        stderr=log,
    )

    def exited() -> str:
        log.seek(0)
        return log.read().decode(errors="replace")[-4000:]

    wait_serving(proc, address, 20, exited)
    return proc, address


def wait_serving(
    proc: subprocess.Popen[bytes], address: str, seconds: float, log_tail: Callable[[], str]
) -> None:
    """Wait until the function at ``address`` reports SERVING on the gRPC health service.

    Raises:
        RuntimeError: when ``proc`` exits first (with ``log_tail()``, the end of its log),
            or it does not serve within ``seconds`` (then it is killed).
    """
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + seconds
    with grpc.insecure_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"function exited with {proc.returncode}: {log_tail()}")
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"function did not serve within {seconds:g} seconds")


def _inputs(
    xr_path: str, required_paths: list[str], observed_paths: list[str]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], World]:
    """The XR, the observed composed resources and the world, read and checked.

    Raises:
        OSError, ValueError: naming the file or document and what to write instead.
    """
    if Path(xr_path).is_dir():
        raise ValueError(
            f"{xr_path} is a directory; give the XR's file (for example {xr_path}/xr.yaml)"
        )
    xrs = load_yaml([xr_path])
    required = load_yaml(required_paths)
    check_required(required)
    observed = observed_by_name(load_yaml(observed_paths))
    if len(xrs) != 1:
        raise ValueError(f"{xr_path}: want exactly one XR, found {len(xrs)}")
    if not (xrs[0].get("metadata") or {}).get("name"):
        raise ValueError(f"{xr_path}: the XR has no metadata.name (Crossplane always has one)")
    return xrs[0], observed, World(required)


def read_seed(path: str) -> dict[str, fnv1.ResourceSelector]:
    """Requirement selectors by name from a YAML map, each as the function returns it
    (``{apiVersion, kind, matchName | matchLabels: {labels}, namespace}``).

    Raises:
        OSError, ValueError: naming the file and the entry.
    """
    docs = load_yaml([path])
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ValueError(f"{path}: want one map of requirement name to selector")
    out = {}
    for name, sel in docs[0].items():
        try:
            out[str(name)] = json_format.ParseDict(sel, fnv1.ResourceSelector())
        except (json_format.ParseError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: {name}: not a ResourceSelector: {e}") from None
    return out


class _Unreachable(Exception):
    """The function could not be started or called."""


def _drive(
    address: str | None,
    xr: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]],
    world: World,
    seed: Mapping[str, fnv1.ResourceSelector] | None = None,
) -> tuple[fnv1.RunFunctionResponse, int]:
    """Run the requirements loop against the function at ``address`` (started here when
    None, and stopped after).

    Raises:
        _Unreachable: the function could not be started or answered with a gRPC error.
    """
    import grpc
    from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

    proc = None
    try:
        if address is None:
            proc, address = start_function()
        with grpc.insecure_channel(address) as ch:
            stub = grpcv1.FunctionRunnerServiceStub(ch)
            return drive(lambda r: stub.RunFunction(r, timeout=30), xr, observed, world, seed=seed)
    except (RuntimeError, grpc.RpcError) as e:
        detail = e.details() if isinstance(e, grpc.RpcError) else str(e)  # type: ignore[attr-defined]
        raise _Unreachable(f"cannot run the function at {address}: {detail}") from None
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: print ``crossplane render``'s YAML stream; exit 1 on a fatal result
    (or bad input), 141 when the reader closed the output early (as a shell reports a
    command ended by SIGPIPE: 128 + 13)."""
    p = argparse.ArgumentParser(prog="python -m function.render", description=plain_text(__doc__))
    p.add_argument("xr", help="the XR (YAML)")
    p.add_argument("--required", action="append", default=[], help="file or directory")
    p.add_argument("--observed", action="append", default=[], help="file or directory")
    p.add_argument("--address", help="use a function already serving (insecure) at host:port")
    p.add_argument(
        "-r",
        "--include-function-results",
        action="store_true",
        help="print the results as render.crossplane.io/v1beta1 Result documents",
    )
    p.add_argument(
        "--step",
        help='the pipeline step name Crossplane prefixes results with ("Pipeline step ...")',
    )
    p.add_argument(
        "--seed",
        help="YAML map of requirement name to selector (as the function returns them): "
        "pre-populate the first call, as Crossplane v2.4 seeds last reconcile's requirements",
    )
    args = p.parse_args(argv)
    try:
        xr, observed, world = _inputs(args.xr, args.required, args.observed)
        seed = read_seed(args.seed) if args.seed else None
    except (OSError, ValueError) as e:
        print(f"function.render: {e}", file=sys.stderr)
        return 2
    if (xr.get("metadata") or {}).get("deletionTimestamp"):
        # Crossplane's XR reconciler calls no function for an XR being deleted: it
        # removes its finalizer and returns (composite/reconciler.go, Reconcile on
        # meta.WasDeleted); Kubernetes' garbage collector deletes the composed resources.
        print(
            "# the XR is being deleted (metadata.deletionTimestamp): Crossplane calls no "
            "function for it",
            file=sys.stderr,
        )
        return _print([_deleting_document(xr)])
    try:
        rsp, calls = _drive(args.address, xr, observed, world, seed)
    except _Unreachable as e:
        print(f"function.render: {e}", file=sys.stderr)
        return 2
    except RequirementsDidNotStabilize as e:
        # As crossplane render: nothing on stdout, Crossplane's error, exit 1.
        print(f"function.render: cannot render composite resource: {e}", file=sys.stderr)
        return 1
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if fatal:
        # As crossplane render: nothing on stdout, the fatal result on stderr, exit 1.
        print(
            f"function.render: cannot render composite resource: the function returned a "
            f"fatal result after {calls} call(s): {'; '.join(fatal)}",
            file=sys.stderr,
        )
        return 1
    docs = crossplane_documents(xr, rsp, step=args.step)
    if not args.include_function_results:
        docs = [d for d in docs if d.get("kind") != "Result"]
    print(f"# {calls} RunFunction call(s) in Crossplane's requirements loop", file=sys.stderr)
    return _print(docs)


def _deleting_document(xr: Mapping[str, Any]) -> dict[str, Any]:
    """What ``crossplane render`` prints for an XR being deleted: the XR as it is, its
    conditions but ``Ready``, which reads False ``Deleting``; then ``Synced``."""
    doc = copy.deepcopy(dict(xr))
    status = dict(doc.get("status") or {})
    kept = [
        c
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("type") not in ("Ready", "Synced")
    ]
    status["conditions"] = [
        *kept,
        _condition("Ready", "False", "Deleting"),
        _condition("Synced", "True", "ReconcileSuccess"),
    ]
    doc["status"] = status
    return doc


def _print(docs: Iterable[Mapping[str, Any]]) -> int:
    """Write ``docs`` as a YAML stream; 0, or 141 when the reader closed it early."""
    try:
        for d in docs:
            sys.stdout.write("---\n")
            yaml.safe_dump(dict(d), sys.stdout, sort_keys=False, default_flow_style=False)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (``| head``): no traceback, and none at exit either
        # (the Python documentation's recipe for SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return 0


if __name__ == "__main__":
    sys.exit(main())
