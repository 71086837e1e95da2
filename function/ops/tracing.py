"""Opt-in OpenTelemetry tracing of RunFunction calls.

Off by default. ``MODELPLANE_OTEL_ENABLED=true`` turns it on; then the standard
OpenTelemetry SDK variables apply, read by the SDK itself
(https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/):

- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (base URL, ``/v1/traces`` is appended) or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (full URL); default
  ``http://localhost:4318/v1/traces``. Spans are exported with OTLP over HTTP
  (protobuf) through a ``BatchSpanProcessor`` (``OTEL_BSP_*`` tune it).
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (service name defaults to
  ``function-modelplane``).
- ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (default
  ``parentbased_always_on``: a call is sampled when Crossplane's trace was).

While tracing is off nothing is built (no provider, exporter or span objects), and
the OTEL variables are neither read nor validated, so a broken exporter setting
cannot stop a function that does not trace. While it is on, ``function.ops.settings``
validates them at start-up.

Spans (one trace per RunFunction call):

- ``<XR kind>`` (server span; ``RunFunction`` when the request has no kind), with
  attributes ``modelplane.xr.api_version``, ``modelplane.xr.kind``,
  ``modelplane.xr.namespace``, ``modelplane.xr.name``, ``modelplane.request.tag``,
  ``modelplane.result.severities`` (one entry per result, in order) and the
  ``rpc.*`` attributes of the OpenTelemetry RPC conventions. A Fatal result, or an
  exception, sets the span status to ERROR; an exception is also recorded as an
  event. Calls the acceptor answers itself (a runaway answered from memory, a compute
  process that died or was killed past the deadline: :meth:`Tracing.answered`) and
  requests protobuf cannot parse get this span too, ERROR with the fatal message.
- children ``decode`` (resolve the request into inputs), ``compose`` and ``encode``;
  an exception that leaves one, the compute deadline included, sets its status to
  ERROR and is recorded as an ``exception`` event on it.

A W3C ``traceparent`` (and ``tracestate``) in the gRPC metadata of the call becomes
the parent (https://www.w3.org/TR/trace-context/).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span

    from function.core.inputs import XRRef
    from function.ops.settings import Settings

DEFAULT_SERVICE_NAME = "function-modelplane"
# At most this long exporting buffered spans when a process stops (seconds).
SHUTDOWN_SECONDS = 2.0
SERVICE = "apiextensions.fn.proto.v1.FunctionRunnerService"
_NULL = contextlib.nullcontext()


class Tracing:
    """Spans for RunFunction calls, or nothing at all when disabled.

    Args:
        provider: A configured TracerProvider; None disables tracing.
    """

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self.provider = provider
        self.enabled = provider is not None
        self._tracer = provider.get_tracer("function-modelplane") if provider else None
        self._propagator: Any = None
        if self.enabled:
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )

            self._propagator = TraceContextTextMapPropagator()

    @staticmethod
    def metadata(context: Any) -> dict[str, str]:
        """The gRPC invocation metadata of ``context`` as a dict (keys lower case)."""
        md = context.invocation_metadata() if context is not None else None
        out: dict[str, str] = {}
        for item in md or ():
            key, value = item[0], item[1]
            if isinstance(value, str):
                out[key.lower()] = value
        return out

    @contextlib.contextmanager
    def run_span(
        self,
        ref: XRRef,
        tag: str,
        metadata: Mapping[str, str] | None,
        start_time: int | None = None,
    ) -> Iterator[Span]:
        """The server span of one call, current while the block runs.

        The parent comes from a W3C ``traceparent`` in ``metadata``; ``start_time``:
        when it started (nanoseconds since the epoch; None: now). Only call this when
        :attr:`enabled`.
        """
        assert self._tracer is not None
        from opentelemetry.trace import SpanKind

        parent = self._propagator.extract(metadata or {})
        attributes = {
            "modelplane.xr.api_version": ref.api_version,
            "modelplane.xr.kind": ref.kind,
            "modelplane.xr.namespace": ref.namespace,
            "modelplane.xr.name": ref.name,
            "modelplane.request.tag": tag,
            "rpc.system": "grpc",
            "rpc.service": SERVICE,
            "rpc.method": "RunFunction",
        }
        with self._tracer.start_as_current_span(
            ref.kind or "RunFunction",
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=True,
            set_status_on_exception=True,
            start_time=start_time,
        ) as span:
            yield span

    def span(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A child span of the current span; a shared no-op when disabled. An exception
        that leaves it, a ``BaseException`` such as
        :class:`~function.core.deadline.CallDeadline` too (OpenTelemetry records only
        ``Exception``), sets its status to ERROR and is recorded as an ``exception``
        event."""
        if self._tracer is None:
            return _NULL
        return self._child(name)

    @contextlib.contextmanager
    def _child(self, name: str) -> Iterator[Span]:
        assert self._tracer is not None
        with self._tracer.start_as_current_span(name) as span:
            try:
                yield span
            except Exception:  # recorded by the SDK
                raise
            except BaseException as e:  # the SDK leaves these out (CallDeadline)
                from opentelemetry.trace import Status, StatusCode

                span.record_exception(e)
                span.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"))
                raise

    def answered(
        self,
        ref: XRRef,
        tag: str,
        metadata: Mapping[str, str] | None,
        message: str,
        started_ns: int,
    ) -> None:
        """The server span of a call the acceptor answered itself with the fatal result
        ``message`` (``function.edge.pool``: a runaway answered from memory, a compute
        process that died or was killed past the deadline): named and attributed as
        :meth:`run_span`'s, from ``started_ns`` (``time.time_ns()`` of its arrival) to
        now, status ERROR with ``message``. Only call this when :attr:`enabled`."""
        with self.run_span(ref, tag, metadata, start_time=started_ns) as span:
            self.finish(span, ["Fatal"], message, None)

    @staticmethod
    def finish(
        span: Span,
        severities: Iterable[str],
        fatal_message: str | None,
        error: BaseException | None,
    ) -> None:
        """Set the result attributes and status of a call's span."""
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("modelplane.result.severities", list(severities))
        if error is not None:
            span.record_exception(error)
        if fatal_message is not None:
            span.set_status(Status(StatusCode.ERROR, fatal_message))

    def shutdown(self) -> None:
        """Export what is buffered and stop, waiting at most :data:`SHUTDOWN_SECONDS`
        (a no-op when disabled). The OTLP exporter retries an unreachable collector for
        its whole timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s): waiting for it held the
        pod past its grace period (found by a trial); spans still unsent are dropped."""
        if self.provider is not None:
            stop = threading.Thread(target=self.provider.shutdown, daemon=True)
            stop.start()
            stop.join(SHUTDOWN_SECONDS)


DISABLED = Tracing(None)


def configure(settings: Settings) -> Tracing:
    """Build tracing from ``settings`` and the OTEL_* environment.

    Returns:
        :data:`DISABLED` when ``settings.otel_enabled`` is false (nothing is built or
        read); otherwise a :class:`Tracing` with its own TracerProvider (the global
        provider is left alone), an OTLP/HTTP exporter and a batch processor.
    """
    if not settings.otel_enabled:
        return DISABLED
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # Sampler from OTEL_TRACES_SAMPLER; stopped by Tracing.shutdown, bounded (the SDK's
    # own exit hook would wait for an unreachable collector).
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return Tracing(provider)
