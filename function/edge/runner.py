"""The protocol edge: RunFunctionRequest in, RunFunctionResponse out.

``FunctionRunner.run`` decodes the request into :class:`~function.core.inputs.Inputs`,
picks the composer by the XR's apiVersion and kind, and encodes the
:class:`~function.core.outcome.Outcome` (decoding, encoding and the wire splice are
:mod:`function.edge.codec`). Any exception becomes a fatal result with a
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

from function.composers import composer_for, served
from function.core import deadline as deadline_mod
from function.core import memo, versioned
from function.core.errors import SpecError, quoted
from function.core.inputs import Inputs, RequiredView, XRRef
from function.core.outcome import MAX_RESPONSE_BYTES, Outcome, Requirement
from function.edge import codec
from function.edge.codec import SEVERITY_NAME, desired_suffix, undecodable
from function.ops import logs
from function.ops import metrics as metrics_mod
from function.ops import tracing as tracing_mod
from function.ops.settings import Settings, default_settings
from function.ops.tracing import Tracing
from function.scheduling import devices

# How often a call is composed again without required items that were not asked for.
MAX_RECOMPOSE = 3
DEFAULT_TTL_SECONDS = 60.0

Clock = Callable[[], datetime.datetime]


def utcnow() -> datetime.datetime:
    """The wall clock, UTC, whole seconds (status timestamps are RFC 3339 seconds)."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Serves RunFunction for every Modelplane XR kind.

    Args:
        settings: The effective settings (defaults when None).
        clock: Returns the current UTC time; tests pass a controlled clock.
        tracing: Span recording (None: built from ``settings``; disabled by default).
        metrics: Where calls and lifecycle samples are recorded (None: the process-wide
            collectors on prometheus-client's default registry).
        time_calls: Record each call's time in ``modelplane_function_run_seconds``
            (True: composing in the serving process). A compute process passes False:
            the acceptor records it, from the call's arrival, with :attr:`last_result`
            (``function.edge.pool``).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        clock: Clock | None = None,
        *,
        tracing: Tracing | None = None,
        metrics: metrics_mod.Metrics | None = None,
        time_calls: bool = True,
    ) -> None:
        self.settings = settings or default_settings()
        self.time_calls = time_calls
        # The last call's result label (metrics.RUN_RESULTS), for the acceptor.
        self.last_result = "success"
        self.clock = clock or utcnow
        self.log = structlog.get_logger("function")
        self.tracing = tracing or tracing_mod.configure(self.settings)
        self.metrics = metrics or metrics_mod.default()
        # Set when a call passed its deadline: its process may hold half-built state
        # and is replaced by the pool after replying (function.edge.pool).
        self.replace_me = False
        devices.set_cost_limit(self.settings.selector_cost_limit)
        memo.configure(self.settings.cache_budget_mib * 1024 * 1024)
        self.metrics.configure_series(
            self.settings.metric_series_limit,
            metrics_mod.series_stale_seconds(
                self.settings.default_ttl_seconds, self.settings.poll_seconds
            ),
        )
        versioned.trust(self.settings.trust_resource_versions)

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
        data: bytes | bytearray | memoryview,
        metadata: Mapping[str, str] | None = None,
        deadline_seconds: float | None = None,
    ) -> bytes:
        """Run the function on a serialized request; return the serialized response.

        What a compute process (``function.edge.pool``) does with the bytes the gRPC acceptor
        hands it.

        Args:
            data: A serialized ``RunFunctionRequest`` (v1 or v1beta1: same wire format;
                or a view of the buffer a compute process receives it in).
            metadata: The call's gRPC metadata (lower-case keys), for trace context.
            deadline_seconds: Compute budget of the call (wall clock); None for none.
                Enforced in the main thread only (``function.core.deadline``).

        Returns:
            The response's wire bytes. A request protobuf cannot parse (malformed, or
            nested deeper than its recursion limit of 100) gets a response whose only
            result is fatal and says so; a call past its deadline gets a fatal result
            naming the XR and, while a device selector was being compiled or evaluated,
            its path (then :attr:`replace_me` is True).
        """
        try:
            req = fnv1.RunFunctionRequest.FromString(data)
        except Exception as e:  # DecodeError (upb also reports recursion this way)
            return self._undecodable(data, metadata, e)
        return self._call(req, metadata, complete=False, deadline_seconds=deadline_seconds)[1]

    def _undecodable(
        self, data: bytes | bytearray | memoryview, metadata: Mapping[str, str] | None, e: Exception
    ) -> bytes:
        """The response to a request protobuf cannot parse (:func:`codec.undecodable`),
        counted; with tracing on, a span named after whatever kind could be read
        (``RunFunction`` when none), ERROR with the fatal message and the parse error as
        an ``exception`` event. Counted under the kind read from its first bytes, as the
        acceptor times it (``unknown`` when none could be read)."""
        tag, kind, namespace, name = codec.peek(data)
        self.last_result = "fatal"
        if self.time_calls:
            self.metrics.record_time(kind, "fatal", 0.0)
        self.metrics.record_results(kind, ["Fatal"])
        out = undecodable(data, e)
        if self.tracing.enabled:
            message = fnv1.RunFunctionResponse.FromString(out).results[0].message
            ref = XRRef(api_version="", kind=kind, namespace=namespace, name=name)
            with self.tracing.run_span(ref, tag, metadata) as span:
                Tracing.finish(span, ["Fatal"], message, e)
        return out

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
        first: Inputs | None = None
        devices.forget_paths()
        try:
            with deadline_mod.armed(deadline_seconds):
                rsp, wires, outcome, first = self._run(req, ref.api_version, ref.kind, self.log)
        except deadline_mod.CallDeadline as e:
            error, result = e, "deadline"
            self.replace_me = True
            rsp = self._fatal(req, self._past_deadline(ref, e))
        except SpecError as e:
            error = e
            self.log.info("invalid input", error=str(e))
            message = f"invalid {ref.label}: {e}"
            rsp = self._fatal(req, message, spec_error=str(e))
        except Exception as e:  # the call must never crash
            error, result = e, "error"
            self.log.exception("composer failed")
            rsp = self._fatal(req, f"internal error composing {ref.label}: {type(e).__name__}: {e}")
        rsp, data = self._bytes(req, ref, rsp, wires, complete)
        seconds = time.perf_counter() - started
        severities = [SEVERITY_NAME.get(r.severity, "Unspecified") for r in rsp.results]
        fatal = next((r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL), None)
        if fatal is not None and result == "success":
            result = "fatal"
        self.last_result = result
        if self.time_calls:
            self.metrics.record_time(ref.kind, result, seconds)
        self.metrics.record_results(ref.kind, severities)
        # Lifecycle samples are recorded in the loop's last call only (once), judged on
        # the request as it came (the first decode: nothing left out).
        if (
            outcome is not None
            and outcome.observations
            and fatal is None
            and first is not None
            and outcome.final_iteration(first)
        ):
            self.metrics.apply(outcome.observations)
        if span is not None:
            Tracing.finish(span, severities, fatal, error)
        # The exception's traceback holds this frame, which holds the exception: a cycle
        # that kept the request, its decoded spec and every frame of the failed call
        # (a 7 MB request: about 55 MiB) until the cyclic collector's next full pass.
        del error
        self.log.debug("composed", seconds=round(seconds, 6))
        return rsp, data

    def _past_deadline(self, ref: XRRef, e: deadline_mod.CallDeadline) -> str:
        """The fatal message of a call past its compute deadline (and a warning log line)."""
        doing = devices.in_progress()
        path = doing[2] if doing is not None else None
        where = ""
        if doing is not None:
            what, expression, _ = doing
            where = f" while {what} the device selector {path or repr(expression[:200])}"
        self.log.warning("compute deadline passed", seconds=e.seconds, selector=path)
        return (
            f"{ref.label}: composing ran past the call's compute "
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
        field, which protobuf parsers merge into the first
        (:func:`function.edge.codec.desired_suffix`). A response over Crossplane's 4 MiB
        becomes a fatal result saying so. With
        ``complete``, the children are merged into ``rsp`` too (for in-process callers).
        """
        data = bytes(rsp.SerializeToString(deterministic=True)) + desired_suffix(wires)
        size = len(data)
        if size > MAX_RESPONSE_BYTES:
            count, largest, largest_size = _largest_child(rsp, wires)
            rsp, wires = (
                self._fatal(
                    req,
                    f"response for {ref.label} would be {size / 1048576:.1f} "
                    f"MiB, over the 4 MiB Crossplane accepts: {count} composed resources, "
                    f"the largest {quoted(largest)} at {largest_size / 1024:.1f} KiB; "
                    "compose fewer or smaller ones (fewer clusters selected, fewer replicas, "
                    "a smaller template: large env values belong in a ConfigMap) or split "
                    "the XR into smaller ones",
                ),
                [],
            )
            data = bytes(rsp.SerializeToString(deterministic=True))
        if complete and wires:
            rsp.desired.MergeFromString(b"".join(wires))
        return rsp, data

    def _fatal(
        self, req: fnv1.RunFunctionRequest, message: str, spec_error: str | None = None
    ) -> fnv1.RunFunctionResponse:
        """A response whose only result is fatal (``message``), with the observed XR's own
        conditions as they are (:func:`function.edge.codec.keep_conditions`: else
        Crossplane rewrites them to ``Unknown``/``FatalError``)."""
        rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=req.meta.tag))
        rsp.desired.CopyFrom(req.desired)
        rsp.results.append(fnv1.Result(severity=fnv1.SEVERITY_FATAL, message=message))
        codec.keep_conditions(rsp, req.observed.composite.resource, spec_error)
        return rsp

    def _run(
        self, req: fnv1.RunFunctionRequest, api_version: str, kind: str, log: Any
    ) -> tuple[fnv1.RunFunctionResponse, list[bytes], Outcome | None, Inputs | None]:
        """Compose ``req``; also returns the first decode (the request as it came, no
        required item left out: the runner judges the loop's last call on it,
        :meth:`Outcome.final_iteration`)."""
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
                None,
            )
        span = self.tracing.span
        with span("decode"):
            inputs = first = self.decode(req)
        with span("compose"):
            inputs.check_spec()  # every kind: a spec that is not an object is named
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
            return rsp, wires, outcome, first

    def decode(
        self, req: fnv1.RunFunctionRequest, asked: Mapping[str, Requirement] | None = None
    ) -> Inputs:
        """:func:`function.edge.codec.decode` at this runner's clock and settings."""
        return codec.decode(req, now=self.clock(), settings=self.settings, asked=asked)

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
        """:func:`function.edge.codec.encode` with this runner's default TTL."""
        return codec.encode(req, out, self.settings.default_ttl_seconds)


def _largest_child(rsp: fnv1.RunFunctionResponse, wires: list[bytes]) -> tuple[int, str, int]:
    """How many composed resources a response desires, the composition-resource name of
    the largest and its size in bytes (for the over-4 MiB message). Parses one
    pre-encoded entry at most (the largest)."""
    sizes = [(r.ByteSize(), name) for name, r in rsp.desired.resources.items()]
    count = len(sizes)
    best_size, best = max(sizes, default=(0, ""))
    if wires:
        wire = max(wires, key=len)
        if len(wire) > best_size:
            state = fnv1.State.FromString(wire)
            best, best_size = next(iter(state.resources), ""), len(wire)
        count += len(wires)
    return count, best, best_size
