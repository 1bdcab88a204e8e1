"""alkstore.Consumer and asyncio receivers over the engine."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

import alkstore
from alkstore import StreamEvent, TxHandle
from alkstore_contract_tests.suite._api import make_consumer, run_scenario
from alkstore_contract_tests.suite._support import StartRunning, eventually, start_thread


def test_a_consumer_handles_events_in_order_and_saves_its_offset(
    store: alkstore.Store, running: StartRunning
) -> None:
    stream = store.stream("orders")
    offsets = [stream.publish(n) for n in range(30)]
    seen: list[int] = []
    running(make_consumer(store, stream, "projector", lambda event: seen.append(event.payload)))
    eventually(lambda: stream.get_offset("projector") == offsets[-1])
    assert seen == list(range(30))
    stream.publish(30)
    eventually(lambda: seen[-1] == 30)


def test_a_consumer_resumes_after_its_saved_offset(
    store: alkstore.Store, running: StartRunning
) -> None:
    stream = store.stream("orders")
    offsets = [stream.publish(n) for n in range(5)]
    stream.save_offset("projector", offsets[2])
    seen: list[int] = []
    running(make_consumer(store, "orders", "projector", lambda event: seen.append(event.payload)))
    eventually(lambda: len(seen) == 2)
    assert seen == [3, 4]


def test_a_failing_event_is_retried_and_never_skipped(
    store: alkstore.Store, running: StartRunning
) -> None:
    stream = store.stream("orders")
    offsets = [stream.publish(n) for n in range(4)]
    calls: list[int] = []

    def handler(event: StreamEvent) -> None:
        calls.append(event.payload)
        if event.payload == 2 and calls.count(2) < 3:
            raise RuntimeError("flaky")

    consumer = make_consumer(store, stream, "projector", handler)
    running(consumer)
    eventually(lambda: stream.get_offset("projector") == offsets[-1])
    assert calls == [0, 1, 2, 2, 2, 3]
    assert consumer.stats().failed == 2


def test_a_transactional_consumer_commits_its_writes_with_its_offset(
    store: alkstore.Store, running: StartRunning
) -> None:
    stream = store.stream("orders")
    offsets = [stream.publish(n) for n in range(3)]
    failures: list[int] = []

    def handler(event: StreamEvent, tx: TxHandle) -> None:
        tx.enqueue_tx("shipments", None, event.payload)
        if event.payload == 2 and not failures:
            failures.append(2)
            raise RuntimeError("crash mid-batch")

    running(make_consumer(store, stream, "shipper", handler, transactional=True, batch_size=3))
    eventually(lambda: stream.get_offset("shipper") == offsets[-1])
    # The failed batch rolled back whole: each event's job exists exactly once.
    shipments = store.queue("shipments").claim_batch("check", 10)
    assert sorted(job.payload for job in shipments) == [0, 1, 2]


def test_two_transactional_runs_of_one_consumer_commit_each_batch_once(
    store: alkstore.Store, running: StartRunning
) -> None:
    """Two runs of the same consumer (two replicas of a service) read the same
    batch: the one that saves the offset second must roll its writes back,
    not commit the projection a second time."""
    stream = store.stream("orders")
    offsets = [stream.publish(n) for n in range(20)]

    def handler(event: StreamEvent, tx: TxHandle) -> None:
        tx.enqueue_tx("shipments", None, event.payload)
        time.sleep(0.01)  # both runs are mid-batch at once

    for _ in range(2):
        running(make_consumer(store, stream, "shipper", handler, transactional=True, batch_size=5))
    eventually(lambda: stream.get_offset("shipper") == offsets[-1])
    time.sleep(0.5)  # a batch the other run still held commits, or rolls back, by now
    shipments = store.queue("shipments").claim_batch("check", 100)
    assert sorted(job.payload for job in shipments) == list(range(20))


def test_a_cancelled_run_async_handles_no_event_after_it_returned(store: alkstore.Store) -> None:
    """A plain handler runs on a thread: cancelling the run must stop that thread
    between events and wait for the event under way, or the next run races it."""
    stream = store.stream("orders")
    for n in range(20):
        stream.publish(n)
    calls: list[tuple[int, float]] = []

    def handler(event: StreamEvent) -> None:
        time.sleep(0.05)
        calls.append((event.payload, time.monotonic()))

    async def main() -> float:
        consumer = make_consumer(store, stream, "c", handler, batch_size=20)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(consumer.run_async(), 0.3)
        returned_at = time.monotonic()
        await asyncio.sleep(0.5)
        return returned_at

    returned_at = run_scenario(store, main, 60)
    assert calls, "the handler never ran"
    assert [n for n, at in calls if at > returned_at] == []
    assert stream.get_offset("c") == 0  # a cancelled run saves nothing more


def test_a_transactional_handler_must_be_a_plain_function(store: alkstore.Store) -> None:
    async def handler(event: StreamEvent) -> None:
        return None

    with pytest.raises(TypeError, match="transactional"):
        make_consumer(store, "orders", "x", handler, transactional=True)


def test_run_async_consumes_with_a_coroutine_handler(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    seen: list[int] = []

    async def handler(event: StreamEvent) -> None:
        await asyncio.sleep(0)
        seen.append(event.payload)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(make_consumer(store, stream, "c", handler).run_async(stop))
        await asyncio.to_thread(stream.publish, 1)
        await asyncio.to_thread(stream.publish, 2)
        while len(seen) < 2:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 10)

    run_scenario(store, main, 60)
    assert seen == [1, 2]
    assert stream.get_offset("c") > 0


def test_async_for_over_an_event_receiver(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    stream.publish("first")

    async def main() -> list[object]:
        seen: list[object] = []
        with stream.subscribe("c") as events:
            async for event in events:
                seen.append(event.payload)
                if len(seen) == 1:
                    await asyncio.to_thread(stream.publish, "second")
                else:
                    break
        return seen

    assert asyncio.run(asyncio.wait_for(main(), 30)) == ["first", "second"]


def test_a_cancelled_recv_async_leaves_the_loop_free_to_close(store: alkstore.Store) -> None:
    async def main() -> None:
        with store.stream("quiet").subscribe("c") as events, store.listen("quiet") as wakes:
            waiters = [
                asyncio.ensure_future(events.recv_async()),
                asyncio.ensure_future(wakes.recv_async()),
            ]
            await asyncio.sleep(0.1)
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    # asyncio.run waits for the default executor: a thread stuck in recv would hang it.
    done = threading.Event()

    def run() -> None:
        asyncio.run(main())
        done.set()

    start_thread(run)
    assert done.wait(10)


def test_await_recv_async_on_a_wake_receiver(store: alkstore.Store, peer: alkstore.Store) -> None:
    async def main() -> alkstore.Wake | None:
        with store.listen("orders") as wakes:
            assert await wakes.recv_async(0.05) is None
            await asyncio.to_thread(peer.notify, "orders", 1)
            return await wakes.recv_async(10)

    assert asyncio.run(main()) == alkstore.Wake("orders")
