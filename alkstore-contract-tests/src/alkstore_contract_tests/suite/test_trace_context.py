"""A job carries the trace context it was enqueued in (contract 1.4).

With OpenTelemetry installed, core stamps each job with the W3C
``traceparent`` of its enqueue (``JobStamp.traceparent``); the engine stores
it and hands it back on the claimed ``Job``, so the worker's span can link to
the enqueuer's. Here the context is set as an application's instrumentation
would set it (only the OpenTelemetry API is needed): the trace must survive
the row, whichever way the job was written, and a dead letter's requeue.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import alkstore

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7


@pytest.fixture
def traced() -> Iterator[None]:
    """A current span context, as a request's instrumentation would leave it."""
    context = SpanContext(TRACE_ID, SPAN_ID, is_remote=True, trace_flags=TraceFlags(1))
    with trace.use_span(NonRecordingSpan(context)):
        yield


def trace_of(job: alkstore.Job) -> str | None:
    """The trace id a job's ``traceparent`` names (a tracing SDK, if one is set,
    makes each enqueue a span of its own, in the same trace)."""
    if job.traceparent is None:
        return None
    version, trace_id, _span_id, _flags = job.traceparent.split("-")
    assert version == "00", job.traceparent
    return trace_id


def test_a_job_enqueued_in_a_trace_carries_it_to_its_claim(
    store: alkstore.Store, traced: None
) -> None:
    queue = store.queue("q")
    alone = queue.enqueue("alone")
    with store.transaction() as tx:
        in_tx = [tx.enqueue_tx("q", None, n) for n in range(3)]  # batched where engines batch
        keyed = tx.enqueue_tx("q", alkstore.EnqueueOpts(key="k"), "keyed")
    jobs = {job.id: job for job in queue.claim_batch("w", 10)}
    assert sorted(jobs) == sorted([alone, *in_tx, keyed])
    assert {trace_of(job) for job in jobs.values()} == {f"{TRACE_ID:032x}"}


def test_a_job_enqueued_outside_any_trace_carries_none(store: alkstore.Store) -> None:
    store.queue("q").enqueue("untraced")
    job = store.queue("q").claim_one("w")
    assert job is not None
    assert job.traceparent is None


def test_a_requeued_dead_letter_keeps_its_trace(store: alkstore.Store, traced: None) -> None:
    queue = store.queue("q")
    queue.enqueue("x")
    job = queue.claim_one("w")
    assert job is not None
    assert job.fail("boom")
    assert queue.requeue_dead() == 1
    again = queue.claim_one("w")
    assert again is not None
    assert trace_of(again) == f"{TRACE_ID:032x}"
