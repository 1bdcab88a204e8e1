"""OpenTelemetry: a span per enqueue and per handled job, linked through the job.

The tracer provider is the SDK's, with an in-memory exporter, set once for
the process (OpenTelemetry allows one); each test reads the spans it made.
Every test runs on SQLite and PostgreSQL (the ``dsn`` fixture).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

import alkstore

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="session", autouse=True)
def _tracer_provider() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[Callable[[], list[ReadableSpan]]]:
    _EXPORTER.clear()
    yield lambda: list(_EXPORTER.get_finished_spans())
    _EXPORTER.clear()


def ctx(span: ReadableSpan) -> SpanContext:
    context = span.get_span_context()
    assert context is not None
    return context


def only(found: list[ReadableSpan], name: str) -> ReadableSpan:
    matching = [span for span in found if span.name == name]
    assert len(matching) == 1, [span.name for span in found]
    return matching[0]


def run_worker(store: alkstore.Store, handler: Callable[[Any], object], jobs: int) -> None:
    """Run a Worker on ``q`` until it has handled ``jobs`` jobs."""
    stop = threading.Event()
    handled = 0

    def counting(job: alkstore.Job) -> None:
        nonlocal handled
        try:
            handler(job)
        finally:
            handled += 1
            if handled == jobs:
                stop.set()

    worker = alkstore.Worker(store, "q", counting, worker_id="w-1", idle_wait_s=0.05)
    runner = threading.Thread(target=worker.run, args=(stop,))
    runner.start()
    runner.join(30)
    assert not runner.is_alive()


def test_an_enqueue_is_a_producer_span_whose_context_the_job_carries(
    dsn: str, spans: Callable[[], list[ReadableSpan]]
) -> None:
    tracer = trace.get_tracer("test")
    with alkstore.open(dsn) as store:
        with tracer.start_as_current_span("checkout") as request:
            job_id = store.queue("q").enqueue({"order": 1})
        job = store.queue("q").claim_one("w")
        assert job is not None
    send = only(spans(), "send q")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "alkstore",
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "q",
        "messaging.message.id": str(job_id),
    }
    context = ctx(send)
    assert job.traceparent is not None
    version, trace_id, span_id, flags = job.traceparent.split("-")
    assert (version, trace_id, span_id) == (
        "00",
        f"{context.trace_id:032x}",
        f"{context.span_id:016x}",
    )
    assert int(flags, 16) & 1  # sampled


def test_a_handled_job_is_a_consumer_span_linked_to_its_enqueue(
    dsn: str, spans: Callable[[], list[ReadableSpan]]
) -> None:
    seen: list[str | None] = []
    with alkstore.open(dsn) as store:
        job_id = store.queue("q").enqueue("x")
        run_worker(store, lambda job: seen.append(job.traceparent), 1)
    found = spans()
    send, process = only(found, "send q"), only(found, "process q")
    assert process.kind is SpanKind.CONSUMER
    assert [link.context.span_id for link in process.links] == [ctx(send).span_id]
    assert ctx(process).trace_id != ctx(send).trace_id  # a new trace, linked
    attributes = dict(process.attributes or {})
    assert attributes["messaging.message.id"] == str(job_id)
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.alkstore.attempt"] == 1
    assert attributes["messaging.alkstore.worker_id"] == "w-1"
    assert seen[0] is not None
    assert process.status.status_code is StatusCode.UNSET


def test_a_failing_handler_records_its_exception_on_the_span(
    dsn: str, spans: Callable[[], list[ReadableSpan]]
) -> None:
    def refuse(job: alkstore.Job) -> None:
        raise RuntimeError("card declined")

    with alkstore.open(dsn) as store:
        store.queue("q").enqueue("x")
        run_worker(store, refuse, 1)
    process = only(spans(), "process q")
    assert process.status.status_code is StatusCode.ERROR
    [event] = [event for event in process.events if event.name == "exception"]
    assert dict(event.attributes or {})["exception.message"] == "card declined"


def test_enqueues_in_a_transaction_are_spans_too(
    dsn: str, spans: Callable[[], list[ReadableSpan]]
) -> None:
    with alkstore.open(dsn) as store:
        with store.transaction() as tx:
            first = tx.enqueue_tx("q", None, 1)
            second = tx.enqueue_tx("q", None, 2)
            tx.outbox_enqueue_tx("hooks", None, 3)
        jobs = {job.id: job for job in store.queue("q").claim_batch("w", 10)}
    found = [span for span in spans() if span.name == "send q"]
    assert sorted(
        str(dict(span.attributes or {})["messaging.message.id"]) for span in found
    ) == sorted([str(first), str(second)])
    carried = {job.traceparent.split("-")[2] for job in jobs.values() if job.traceparent}
    assert carried == {f"{ctx(span).span_id:016x}" for span in found}
    assert only(spans(), "send __alkstore_outbox:hooks").kind is SpanKind.PRODUCER


@pytest.mark.parametrize("kind", ["async def", "def"])
def test_the_async_api_traces_alike(
    dsn: str, spans: Callable[[], list[ReadableSpan]], kind: str
) -> None:
    async def main() -> None:
        async with alkstore.open_async(dsn) as store:
            await store.queue("q").enqueue("x")
            async with store.transaction() as tx:
                await tx.enqueue_tx("q", None, "y")
            stop = asyncio.Event()
            done: list[int] = []

            def note(job: alkstore.AsyncJob) -> None:
                done.append(job.id)
                if len(done) == 2:
                    stop.set()

            async def handle_async(job: alkstore.AsyncJob) -> None:
                note(job)

            handler = handle_async if kind == "async def" else note
            worker = alkstore.Worker(store, "q", handler, idle_wait_s=0.05)
            await asyncio.wait_for(worker.run_async(stop), 30)

    asyncio.run(main())
    found = spans()
    sends = {ctx(span).span_id for span in found if span.name == "send q"}
    processes = [span for span in found if span.name == "process q"]
    assert len(sends) == 2
    assert len(processes) == 2
    assert {link.context.span_id for span in processes for link in span.links} == sends
