"""The protocol edge: RunFunctionRequest in, RunFunctionResponse out.

``FunctionRunner.run`` decodes the request into :class:`~function.core.inputs.Inputs`,
picks the composer by the XR's apiVersion and kind, and encodes the
:class:`~function.core.outcome.Outcome`. Any exception becomes a fatal result with a
clear message; the call never crashes. Crossplane's gRPC client receives at
most 4 MiB, so a larger response is replaced by a fatal result that says how
large it was.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import structlog
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import duration_pb2
from google.protobuf.struct_pb2 import ListValue, Struct

from function.composers import composer_for, served
from function.core import memo, structs
from function.core.errors import SpecError
from function.core.inputs import Inputs, ObservedView, RequiredView, XRRef
from function.core.outcome import Outcome, Requirement
from function.edge import deadline as deadline_mod
from function.ops import logs
from function.ops import metrics as metrics_mod
from function.ops import tracing as tracing_mod
from function.ops.settings import Settings, default_settings
from function.ops.tracing import Tracing
from function.scheduling import devices

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
# How often a call is composed again without required items that were not asked for.
MAX_RECOMPOSE = 3
DEFAULT_TTL_SECONDS = 60.0

_SEVERITY = {
    "Normal": fnv1.SEVERITY_NORMAL,
    "Warning": fnv1.SEVERITY_WARNING,
    "Fatal": fnv1.SEVERITY_FATAL,
}
_STATUS = {
    "True": fnv1.STATUS_CONDITION_TRUE,
    "False": fnv1.STATUS_CONDITION_FALSE,
    "Unknown": fnv1.STATUS_CONDITION_UNKNOWN,
}

_SEVERITY_NAME = {v: k for k, v in _SEVERITY.items()}

Clock = Callable[[], datetime.datetime]

_DESIRED_TAG = bytes([(2 << 3) | 2])  # RunFunctionResponse.desired: field 2, length-delimited


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def desired_suffix(wires: list[bytes]) -> bytes:
    """Pre-encoded ``State.resources`` entries as a second ``desired`` field of a response.

    Protobuf parsers merge repeated occurrences of a message field, and map entries of
    a later occurrence replace the same keys (https://protobuf.dev/programming-guides/
    encoding/#last-one-wins), so appending this to a serialized response adds the entries.
    """
    if not wires:
        return b""
    payload = b"".join(wires)
    return _DESIRED_TAG + _varint(len(payload)) + payload


def serialize(rsp: fnv1.RunFunctionResponse) -> bytes:
    """The deterministic wire bytes of a complete response message (sorted map keys).

    Deterministic so the same request gives the same bytes in every process: protobuf's
    default map order depends on a per-process hash seed. (The server sends
    :meth:`FunctionRunner.run_wire`'s bytes, which parse to the same message.)
    """
    return bytes(rsp.SerializeToString(deterministic=True))


def utcnow() -> datetime.datetime:
    """The wall clock, UTC, whole seconds (status timestamps are RFC 3339 seconds)."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def _set_struct(target: Struct, key: str, value: Any) -> None:
    if isinstance(value, Struct):
        target.get_or_create_struct(key).CopyFrom(value)
    elif isinstance(value, ListValue):
        target.get_or_create_list(key).CopyFrom(value)
    else:
        target.update({key: value})


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Serves RunFunction for every Modelplane XR kind.

    Args:
        settings: The effective settings (defaults when None).
        clock: Returns the current UTC time; tests pass a controlled clock.
        tracing: Span recording (None: built from ``settings``; disabled by default).
        metrics: Where calls and lifecycle samples are recorded (None: the process-wide
            collectors on prometheus-client's default registry).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        clock: Clock | None = None,
        *,
        tracing: Tracing | None = None,
        metrics: metrics_mod.Metrics | None = None,
    ) -> None:
        self.settings = settings or default_settings()
        self.clock = clock or utcnow
        self.log = structlog.get_logger("function")
        self.tracing = tracing or tracing_mod.configure(self.settings)
        self.metrics = metrics or metrics_mod.default()
        # Set when a call passed its deadline: its process may hold half-built state
        # and is replaced by the pool after replying (function.edge.pool).
        self.replace_me = False
        devices.set_cost_limit(self.settings.selector_cost_limit)
        memo.configure(self.settings.cache_budget_mib * 1024 * 1024)

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, context: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        """The SDK-style servicer method (a response message)."""
        if self.tracing.enabled and context is not None:
            return self.run(req, Tracing.metadata(context))
        return self.run(req)

    async def run_function_wire(
        self, req: fnv1.RunFunctionRequest, context: grpc.aio.ServicerContext | None = None
    ) -> bytes:
        """The gRPC handler the server registers: the response as wire bytes."""
        if self.tracing.enabled and context is not None:
            return self.run_wire(req, Tracing.metadata(context))
        return self.run_wire(req)

    def run(
        self, req: fnv1.RunFunctionRequest, metadata: Mapping[str, str] | None = None
    ) -> fnv1.RunFunctionResponse:
        """Run the function on one request, synchronously.

        Every log line written meanwhile carries the request tag and the XR's kind,
        namespace and name (``function.ops.logs.CALL``). The call is recorded in
        ``function.ops.metrics`` and, when tracing is on, in a span whose parent is the
        W3C trace context in ``metadata`` (the call's gRPC metadata, lower-case keys).

        Returns:
            The response; on any error a response whose only result is fatal.
        """
        return self._call(req, metadata, complete=True)[0]

    def run_wire(
        self, req: fnv1.RunFunctionRequest, metadata: Mapping[str, str] | None = None
    ) -> bytes:
        """Like :meth:`run`, but return the response's wire bytes (what the server sends).

        Skips merging pre-encoded children into a message: their bytes are appended as
        they are. Parses to the same message as ``run(req)``; deterministic too.
        """
        return self._call(req, metadata, complete=False)[1]

    def run_bytes(
        self,
        data: bytes,
        metadata: Mapping[str, str] | None = None,
        deadline_seconds: float | None = None,
    ) -> bytes:
        """Run the function on a serialized request; return the serialized response.

        What a compute process (``function.edge.pool``) does with the bytes the gRPC acceptor
        hands it.

        Args:
            data: A serialized ``RunFunctionRequest`` (v1 or v1beta1: same wire format).
            metadata: The call's gRPC metadata (lower-case keys), for trace context.
            deadline_seconds: Compute budget of the call (wall clock); None for none.
                Enforced in the main thread only (``function.edge.deadline``).

        Returns:
            The response's wire bytes. A request protobuf cannot parse (malformed, or
            nested deeper than its recursion limit of 100) gets a response whose only
            result is fatal and says so; a call past its deadline gets a fatal result
            naming the XR and, while a device selector was being evaluated, its path
            (then :attr:`replace_me` is True).
        """
        try:
            req = fnv1.RunFunctionRequest.FromString(data)
        except Exception as e:  # DecodeError (upb also reports recursion this way)
            self.metrics.record_run("", "fatal", 0.0, ["Fatal"])
            return undecodable(data, e)
        return self._call(req, metadata, complete=False, deadline_seconds=deadline_seconds)[1]

    def _call(
        self,
        req: fnv1.RunFunctionRequest,
        metadata: Mapping[str, str] | None,
        *,
        complete: bool,
        deadline_seconds: float | None = None,
    ) -> tuple[fnv1.RunFunctionResponse, bytes]:
        ref = XRRef.of(req.observed.composite.resource)
        call = {
            "tag": req.meta.tag,
            "xr_kind": ref.kind,
            "xr_namespace": ref.namespace,
            "xr_name": ref.name,
        }
        token = logs.CALL.set(call)
        try:
            if not self.tracing.enabled:  # hot path: no span objects at all
                return self._serve(req, ref, None, complete, deadline_seconds)
            with self.tracing.run_span(ref, req.meta.tag, metadata) as span:
                return self._serve(req, ref, span, complete, deadline_seconds)
        finally:
            logs.CALL.reset(token)

    def _serve(
        self,
        req: fnv1.RunFunctionRequest,
        ref: XRRef,
        span: Any,
        complete: bool,
        deadline_seconds: float | None = None,
    ) -> tuple[fnv1.RunFunctionResponse, bytes]:
        started = time.perf_counter()
        outcome: Outcome | None = None
        error: BaseException | None = None
        result = "success"
        wires: list[bytes] = []
        devices.forget_paths()
        try:
            with deadline_mod.armed(deadline_seconds):
                rsp, wires, outcome = self._run(req, ref.api_version, ref.kind, self.log)
        except deadline_mod.CallDeadline as e:
            error, result = e, "deadline"
            self.replace_me = True
            rsp = self._fatal(req, self._past_deadline(ref, e))
        except SpecError as e:
            error = e
            self.log.info("invalid input", error=str(e))
            rsp = self._fatal(req, f"invalid {ref.kind or 'XR'} {ref.where}: {e}")
        except Exception as e:  # the call must never crash
            error, result = e, "error"
            self.log.exception("composer failed")
            rsp = self._fatal(
                req, f"internal error composing {ref.kind} {ref.where}: {type(e).__name__}: {e}"
            )
        rsp, data = self._bytes(req, ref, rsp, wires, complete)
        seconds = time.perf_counter() - started
        severities = [_SEVERITY_NAME.get(r.severity, "Unspecified") for r in rsp.results]
        fatal = next((r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL), None)
        if fatal is not None and result == "success":
            result = "fatal"
        self.metrics.record_run(ref.kind, result, seconds, severities)
        if outcome is not None and outcome.observations and fatal is None and _stable(req, rsp):
            self.metrics.apply(outcome.observations)
        if span is not None:
            Tracing.finish(span, severities, fatal, error)
        self.log.debug("composed", seconds=round(seconds, 6))
        return rsp, data

    def _past_deadline(self, ref: XRRef, e: deadline_mod.CallDeadline) -> str:
        """The fatal message of a call past its compute deadline (and a warning log line)."""
        expression = devices.evaluating()
        path = devices.path_of(expression)
        where = ""
        if expression is not None:
            where = f" while evaluating the device selector {path or repr(expression[:200])}"
        self.log.warning("compute deadline passed", seconds=e.seconds, selector=path)
        return (
            f"{ref.kind or 'XR'} {ref.where}: composing ran past the call's compute "
            f"deadline of {e.seconds:g} s{where}; nothing was changed this reconcile "
            f"(simplify the spec; MODELPLANE_CALL_DEADLINE_SECONDS caps the deadline)"
        )

    def _bytes(
        self,
        req: fnv1.RunFunctionRequest,
        ref: XRRef,
        rsp: fnv1.RunFunctionResponse,
        wires: list[bytes],
        complete: bool,
    ) -> tuple[fnv1.RunFunctionResponse, bytes]:
        """Encode the response once (the size check needs the bytes, and the gRPC handler
        sends them as they are); pre-encoded children follow as a second ``desired``
        field, which protobuf parsers merge into the first (``function.edge.wire``). A
        response over Crossplane's 4 MiB becomes a fatal result saying so. With
        ``complete``, the children are merged into ``rsp`` too (for in-process callers).
        """
        data = bytes(rsp.SerializeToString(deterministic=True)) + desired_suffix(wires)
        size = len(data)
        if size > MAX_RESPONSE_BYTES:
            rsp, wires = (
                self._fatal(
                    req,
                    f"response for {ref.kind} {ref.where} would be {size / 1048576:.1f} "
                    f"MiB, over the 4 MiB Crossplane accepts; narrow the selector or split "
                    f"the XR into smaller ones",
                ),
                [],
            )
            data = bytes(rsp.SerializeToString(deterministic=True))
        if complete and wires:
            rsp.desired.MergeFromString(b"".join(wires))
        return rsp, data

    def _fatal(self, req: fnv1.RunFunctionRequest, message: str) -> fnv1.RunFunctionResponse:
        rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=req.meta.tag))
        rsp.desired.CopyFrom(req.desired)
        rsp.results.append(fnv1.Result(severity=fnv1.SEVERITY_FATAL, message=message))
        return rsp

    def _run(
        self, req: fnv1.RunFunctionRequest, api_version: str, kind: str, log: Any
    ) -> tuple[fnv1.RunFunctionResponse, list[bytes], Outcome | None]:
        composer = composer_for(api_version, kind)
        if composer is None:
            return (
                self._fatal(
                    req,
                    f"function-modelplane does not serve {kind or '<no kind>'} "
                    f"({api_version or '<no apiVersion>'}); it serves {served()}",
                ),
                [],
                None,
            )
        span = self.tracing.span
        with span("decode"):
            inputs = self.decode(req)
        with span("compose"):
            inputs.spec  # noqa: B018 - every kind: a spec that is not an object is named
            outcome = composer(inputs)
            # Required resources are used only if they are what was asked for: when a
            # requirement the composer read holds something else (another namespace,
            # name, kind or labels), compose again without it, until what is asked
            # for settles (requirements may follow from other required resources).
            for _ in range(MAX_RECOMPOSE):
                view = inputs.required_resources
                if not isinstance(view, RequiredView) or not view.foreign(outcome.requirements):
                    break
                asked = dict(outcome.requirements)
                inputs = self.decode(req, asked)
                outcome = composer(inputs)
                if outcome.requirements == asked:
                    break
        with span("encode"):
            rsp, wires = self._encode(req, outcome)
            return rsp, wires, outcome

    def decode(
        self, req: fnv1.RunFunctionRequest, asked: Mapping[str, Requirement] | None = None
    ) -> Inputs:
        """Build the composer's view of ``req`` (cheap: no Struct is converted).

        Args:
            req: The request.
            asked: Requirements by name as the composer declares them; required
                items they do not select are left out (:class:`RequiredView`).
        """
        observed = ObservedView(req.observed.resources)
        required = RequiredView(req.required_resources, asked)
        return Inputs(
            xr=req.observed.composite.resource,
            observed=observed,
            required_resources=required,
            now=self.clock(),
            settings=self.settings,
            tag=req.meta.tag,
        )

    def encode(self, req: fnv1.RunFunctionRequest, out: Outcome) -> fnv1.RunFunctionResponse:
        """Encode ``out`` as the response to ``req`` (a complete message).

        Desired state starts from the request's desired state (what earlier
        pipeline steps produced); resources and status fields are set over it.
        If ``out`` holds a fatal result, nothing else is sent but the results.
        """
        rsp, wires = self._encode(req, out)
        if wires:
            # Map entries are length-delimited records: concatenated, they parse as the
            # whole map in one C-level call (a later entry replaces an earlier key).
            rsp.desired.MergeFromString(b"".join(wires))
        return rsp

    def _encode(
        self, req: fnv1.RunFunctionRequest, out: Outcome
    ) -> tuple[fnv1.RunFunctionResponse, list[bytes]]:
        """Like :meth:`encode`, but pre-encoded children (``Desired.wire``) are returned
        as wire bytes instead of being merged into the message."""
        rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=req.meta.tag))
        ttl = out.ttl_seconds if out.ttl_seconds is not None else self.settings.default_ttl_seconds
        rsp.meta.ttl.CopyFrom(duration_pb2.Duration(seconds=int(ttl), nanos=0))
        rsp.desired.CopyFrom(req.desired)
        if req.HasField("context"):
            rsp.context.CopyFrom(req.context)
        _encode_results(rsp, out)
        if any(r.severity == "Fatal" for r in out.results):
            return rsp, []
        _encode_composite(rsp, req, out)
        wires = _encode_resources(rsp, req, out)
        _encode_requirements(rsp, out)
        return rsp, wires


def _encode_results(rsp: fnv1.RunFunctionResponse, out: Outcome) -> None:
    """The results (events; a fatal one ends the call), targeted at the XR."""
    for r in out.results:
        res = rsp.results.add(severity=_SEVERITY[r.severity], message=r.message)
        if r.reason:
            res.reason = r.reason
        if r.severity != "Fatal":
            res.target = fnv1.TARGET_COMPOSITE


def _encode_composite(
    rsp: fnv1.RunFunctionResponse, req: fnv1.RunFunctionRequest, out: Outcome
) -> None:
    """The XR's conditions, desired status and readiness."""
    for c in out.conditions:
        rsp.conditions.add(
            type=c.type,
            status=_STATUS[c.status],
            reason=c.reason,
            message=c.message,
            target=fnv1.TARGET_COMPOSITE,
        )
    composite = rsp.desired.composite
    if out.status:
        status = composite.resource.get_or_create_struct("status")
        for k in sorted(out.status):
            _set_struct(status, k, out.status[k])
    if out.ready is not None:
        composite.ready = fnv1.READY_TRUE if out.ready else fnv1.READY_FALSE
    elif any(name not in req.required_resources for name in out.requirements):
        # Not the last iteration of Crossplane's requirements loop (it asks for what
        # Crossplane has not resolved yet): whether the work is done is not known, so
        # not ready. Crossplane applies only the last iteration's response.
        composite.ready = fnv1.READY_FALSE


def _encode_resources(
    rsp: fnv1.RunFunctionResponse, req: fnv1.RunFunctionRequest, out: Outcome
) -> list[bytes]:
    """The desired composed resources, each with explicit readiness; pre-encoded children
    (``Desired.wire``) are returned as wire bytes instead of being merged."""
    resources = rsp.desired.resources
    observed = req.observed.resources
    wires: list[bytes] = []
    for name in sorted(out.resources):
        d = out.resources[name]
        if d.wire is not None:
            wires.append(d.wire)
            continue
        target = resources[name]
        if isinstance(d.body, Struct):
            target.resource.CopyFrom(d.body)
        else:
            target.resource.update(d.body)
        ready = d.ready
        if ready is None:
            # Every composed resource gets explicit readiness: Crossplane counts only
            # READY_TRUE, and each unready one costs a requeue and an event per
            # reconcile. Where the composer did not decide, the resource is ready when
            # what observes it (provider-kubernetes for an Object, Crossplane for a
            # composed XR) reports Ready=True, as function-auto-ready decides.
            ready = name in observed and structs.condition_is(observed[name].resource, "Ready")
        target.ready = fnv1.READY_TRUE if ready else fnv1.READY_FALSE
    return wires


def _encode_requirements(rsp: fnv1.RunFunctionResponse, out: Outcome) -> None:
    """The requirements, as Crossplane's ``ResourceSelector``s."""
    for rname in sorted(out.requirements):
        q = out.requirements[rname]
        sel = rsp.requirements.resources[rname]
        sel.api_version = q.api_version
        sel.kind = q.kind
        if q.match_name is not None:
            sel.match_name = q.match_name
        elif q.match_labels is not None:
            sel.match_labels.SetInParent()
            for k, v in q.match_labels:
                sel.match_labels.labels[k] = v
        if q.namespace is not None:
            sel.namespace = q.namespace


def peek(data: bytes) -> tuple[str, str, str, str]:
    """The tag and the XR's kind, namespace and name of a serialized request, cheaply.

    Walks the wire format to ``meta`` (field 1) and ``observed.composite`` (field 2,
    then 1) and parses only those; skips everything else by its length, copying
    nothing. Any field it cannot read is ``""`` (never raises).

    Returns:
        (tag, kind, namespace, name).
    """
    return peek_composite(data)[0]


def peek_composite(data: bytes) -> tuple[tuple[str, str, str, str], bytes]:
    """Like :func:`peek`, and also the serialized observed composite (``b""`` if none)."""
    tag = kind = namespace = name = ""
    composite: Any = None
    try:
        view = memoryview(data)
        meta = _field(view, 1)
        if meta is not None:
            tag = fnv1.RequestMeta.FromString(bytes(meta)).tag
        observed = _field(view, 2)
        composite = _field(observed, 1) if observed is not None else None
        xr = _field(composite, 1) if composite is not None else None  # Resource.resource
        if xr is not None:
            top = _struct_fields(xr, ("kind", "metadata"))
            kind = _string_value(top.get("kind"))
            meta = top.get("metadata")
            inner = _field(meta, 5) if meta is not None else None  # Value.struct_value
            if inner is not None:
                m = _struct_fields(inner, ("name", "namespace"))
                name = _string_value(m.get("name"))
                namespace = _string_value(m.get("namespace"))
    except Exception:  # a malformed request: whatever could be read
        pass
    return (tag, kind, namespace, name), bytes(composite) if composite is not None else b""


def _struct_fields(data: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The ``Value`` bytes of the entries ``keys`` of a serialized ``Struct`` (wire walk:
    nothing nested is parsed, so any depth is fine)."""
    out: dict[str, bytes] = {}
    i, end = 0, len(data)
    while i < end and len(out) < len(keys):
        key, i = _read_varint(data, i)
        if key & 7 != 2:
            return out
        length, i = _read_varint(data, i)
        entry = data[i : i + length]
        i += length
        if key >> 3 != 1:
            continue
        k = _field(entry, 1)
        if k is not None:
            name = bytes(k).decode("utf-8", "replace")
            if name in keys:
                out[name] = _field(entry, 2) or b""
    return out


def _string_value(value: Any) -> str:
    """The ``string_value`` (field 3) of a serialized ``Value``, or ``""``."""
    s = _field(value, 3) if value is not None and len(value) else None
    return bytes(s).decode("utf-8", "replace") if s is not None else ""


def _read_varint(data: Any, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _field(data: Any, number: int) -> Any:
    """The bytes (a slice of ``data``: a memoryview for a memoryview) of the first
    length-delimited field ``number`` of a message, or None."""
    i, end = 0, len(data)
    while i < end:
        key, i = _read_varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _read_varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            length, i = _read_varint(data, i)
            if key >> 3 == number:
                return data[i : i + length]
            i += length
        else:
            return None
    return None


def undecodable(data: bytes, error: BaseException) -> bytes:
    """The response to a request that protobuf cannot parse: one fatal result saying why.

    Desired state is not echoed (it could not be read); a fatal result makes
    Crossplane apply nothing this reconcile, so nothing is deleted.
    """
    tag, kind, namespace, name = peek(data)
    xr = f"{kind} {namespace}/{name}: " if kind or name else ""
    rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=tag))
    rsp.results.add(
        severity=fnv1.SEVERITY_FATAL,
        message=(
            f"{xr}the RunFunctionRequest ({len(data)} bytes) could not be parsed "
            f"({type(error).__name__}: {' '.join(str(error).split())[:200]}): it is malformed "
            "or nested deeper than protobuf's limit of 100 levels (look for deeply nested "
            "values in the XR's spec or a composed resource)"
        ),
    )
    return serialize(rsp)


def _stable(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> bool:
    """Whether ``rsp`` asks for no requirement that ``req`` did not already carry.

    Crossplane calls again, with the same observed XR, while a function's requirements
    change; a response whose requirements were all resolved in its request is the last
    call of that loop, so lifecycle samples are recorded there only (once).
    """
    have = req.required_resources
    return all(name in have for name in rsp.requirements.resources)
