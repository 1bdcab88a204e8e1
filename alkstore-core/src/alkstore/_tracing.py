"""OpenTelemetry spans for enqueues and handled jobs (the ``otel`` extra).

With ``opentelemetry-api`` installed, each enqueue runs in a PRODUCER span
(``send <queue>``) and the job carries that span's W3C ``traceparent`` on
its row; each job a Worker handles runs in a CONSUMER span (``process
<queue>``) linked to it, so a trace shows what enqueued the job and what ran
it. Attributes follow OpenTelemetry's messaging semantic conventions. The
spans go wherever the application's tracer provider sends them; without an
SDK configured they cost next to nothing, and without the package nothing
here runs at all (``TRACING`` is False). With the API but no SDK (no tracer
provider set) a span would record nothing: then only a trace context already
current (one a request's instrumentation extracted, say) is carried on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from alkstore._stamp import JobStamp

if TYPE_CHECKING:
    from alkstore._job import ClaimedJob

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed
    TRACING = False
else:
    TRACING = True
    _PROPAGATOR = TraceContextTextMapPropagator()
    # A provider named in the environment is set by the API's first lookup.
    _NAMED_IN_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ

__all__ = ["TRACING", "handling", "stamp_unless_traced", "traced_enqueue", "traced_enqueue_async"]

_UNKNOWN = object()
_SYSTEM = "alkstore"
_TRACER = "alkstore"


def stamp_unless_traced(stamp: JobStamp) -> JobStamp | None:
    """``stamp`` as the enqueue writes it when no span would record (the usual
    case, then without a wrapper): carrying a trace context already current, if
    any. None when the enqueue needs its ``send`` span: :func:`traced_enqueue`."""
    if not TRACING:
        return stamp
    if _recording():
        return None
    return _carrying_context(stamp)


def traced_enqueue(queue: str, stamp: JobStamp, enqueue: Callable[[JobStamp], int]) -> int:
    """``enqueue(stamp)`` in a ``send`` span, ``stamp`` carrying the span's context."""
    if not _recording():
        return enqueue(_carrying_context(stamp))
    with _sending(queue) as span:
        job_id = enqueue(_carrying_context(stamp))
        span.set_attribute("messaging.message.id", str(job_id))
        return job_id


async def traced_enqueue_async(
    queue: str, stamp: JobStamp, enqueue: Callable[[JobStamp], Awaitable[int]]
) -> int:
    """``await enqueue(stamp)`` in a ``send`` span (see :func:`traced_enqueue`)."""
    if not _recording():
        return await enqueue(_carrying_context(stamp))
    with _sending(queue) as span:
        job_id = await enqueue(_carrying_context(stamp))
        span.set_attribute("messaging.message.id", str(job_id))
        return job_id


@contextlib.contextmanager
def handling(job: ClaimedJob[Any]) -> Iterator[None]:
    """A ``process`` span around handling ``job``, linked to the span that
    enqueued it; an exception the handler raises is recorded on it."""
    if not TRACING or not _recording():
        yield
        return
    links = []
    if job.traceparent is not None:
        enqueued = _PROPAGATOR.extract({"traceparent": job.traceparent})
        context = trace.get_current_span(enqueued).get_span_context()
        if context.is_valid:
            links.append(trace.Link(context))
    attributes: dict[str, str | int] = {
        **_destination(job.queue, "process"),
        "messaging.message.id": str(job.id),
        "messaging.alkstore.attempt": job.attempts,
        "messaging.alkstore.worker_id": job.worker_id,
    }
    tracer = trace.get_tracer(_TRACER)
    with tracer.start_as_current_span(
        f"process {job.queue}", kind=trace.SpanKind.CONSUMER, links=links, attributes=attributes
    ):
        yield


@contextlib.contextmanager
def _sending(queue: str) -> Iterator[trace.Span]:
    tracer = trace.get_tracer(_TRACER)
    with tracer.start_as_current_span(
        f"send {queue}", kind=trace.SpanKind.PRODUCER, attributes=_destination(queue, "send")
    ) as span:
        yield span


def _recording() -> bool:
    """Whether spans may record: a tracer provider (an SDK) has been set.

    Asked on every enqueue. With no provider set, the API's own lookup reads
    the process environment each time, for a provider named there (a sixth
    of an enqueue in a transaction): the API's global is read first instead,
    and the lookup made only once a provider is set or named in the
    environment (or should the API's internals change).
    """
    if getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not _NAMED_IN_ENVIRONMENT:
        return False
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _destination(queue: str, operation: str) -> dict[str, str]:
    return {
        "messaging.system": _SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": "enqueue" if operation == "send" else "handle",
        "messaging.destination.name": queue,
    }


def _carrying_context(stamp: JobStamp) -> JobStamp:
    """``stamp`` with the current span's ``traceparent``, if there is a valid one."""
    if not otel_context.get_current():  # an empty context, the usual case: no span
        return stamp
    if not trace.get_current_span().get_span_context().is_valid:
        return stamp
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    traceparent = carrier.get("traceparent")
    return stamp if traceparent is None else dataclasses.replace(stamp, traceparent=traceparent)
