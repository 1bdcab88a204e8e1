"""A worker's parks: one subscription to its queue's wakes for the whole run.

Real stores (a SQLite file; a PostgreSQL schema when ``ALKSTORE_PG_DSN``
answers). What is counted is the store's own ``_watch``, each call of which
is a new subscription (on PostgreSQL a LISTEN, and an UNLISTEN after it).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import alkstore
from alkstore import Worker
from alkstore._names import queue_wake_key
from alkstore._parking import AsyncParking, Parking

JOBS = 6
WAIT_S = 10.0


def count_watches(store: Any) -> list[str]:
    """Record each key ``store`` subscribes to from now on."""
    watched: list[str] = []
    watch = store._watch

    def counted(key: str) -> Any:
        watched.append(key)
        return watch(key)

    store._watch = counted
    return watched


@pytest.fixture
def store(target: str) -> Iterator[alkstore.Store]:
    with alkstore.open(target) as opened:
        yield opened


def await_kept_wake(parking: Parking | AsyncParking) -> None:
    """Wait until the parking's receiver holds the wake of the last enqueue
    (delivered after the commit, by a thread or task of the engine's own)."""
    deadline = time.monotonic() + WAIT_S
    while parking._wakes is None or not getattr(parking._wakes, "pending", 0):
        assert time.monotonic() < deadline, "the enqueue's wake never reached the receiver"
        time.sleep(0.005)


def feed_one_at_a_time(queue: alkstore.Queue, handled: list[int], jobs: int) -> None:
    """Enqueue ``jobs`` jobs, each once the one before was handled: the worker parks between."""
    for n in range(jobs):
        time.sleep(0.05)  # the worker found the queue empty and parked
        queue.enqueue(n)
        deadline = time.monotonic() + WAIT_S
        while len(handled) <= n:
            assert time.monotonic() < deadline, f"job {n} was not handled"
            time.sleep(0.005)


def test_a_worker_on_threads_subscribes_once_for_its_run(store: alkstore.Store) -> None:
    watched = count_watches(store)
    handled: list[int] = []
    stop = threading.Event()
    worker = Worker(store, "jobs", lambda job: handled.append(job.payload))
    running = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    running.start()
    try:
        feed_one_at_a_time(store.queue("jobs"), handled, JOBS)
    finally:
        stop.set()
        running.join(WAIT_S)
    assert not running.is_alive()
    assert handled == list(range(JOBS))
    assert watched == [queue_wake_key("jobs")]


def test_an_asyncio_worker_subscribes_once_for_its_run(target: str) -> None:
    handled: list[int] = []

    async def handle(job: alkstore.AsyncJob) -> None:
        handled.append(job.payload)

    async def main() -> list[str]:
        async with alkstore.open_async(target) as store:
            watched = count_watches(store)
            stop = asyncio.Event()
            running = asyncio.ensure_future(Worker(store, "jobs", handle).run_async(stop))
            try:
                with alkstore.open(target) as feeder:
                    feed = asyncio.to_thread(
                        feed_one_at_a_time, feeder.queue("jobs"), handled, JOBS
                    )
                    await asyncio.wait_for(feed, WAIT_S * JOBS)
            finally:
                stop.set()
                await asyncio.wait_for(running, WAIT_S)
            return watched

    assert asyncio.run(main()) == [queue_wake_key("jobs")]
    assert handled == list(range(JOBS))


def test_wakes_that_came_before_a_park_do_not_end_it(store: alkstore.Store) -> None:
    queue = store.queue("jobs")
    parking = Parking(queue)
    try:
        assert not parking.wait(0.05)  # subscribed; nothing came
        queue.enqueue("gone before the next park")
        await_kept_wake(parking)
        job = queue.claim_one("w")
        assert job is not None
        assert job.ack()
        started = time.monotonic()
        assert not parking.wait(0.3)  # the look finds nothing: the old wake is dropped
        assert time.monotonic() - started >= 0.25
        queue.enqueue("new")
        assert parking.wait(0.05)  # ready now: no wait at all
    finally:
        parking.close()


def test_a_wake_during_a_park_ends_it(store: alkstore.Store, target: str) -> None:
    parking = Parking(store.queue("jobs"))
    woken: list[bool] = []
    parked = threading.Thread(target=lambda: woken.append(parking.wait(WAIT_S)), daemon=True)
    parked.start()
    time.sleep(0.2)
    with alkstore.open(target) as other:
        other.queue("jobs").enqueue("wake up")
    parked.join(WAIT_S)
    parking.close()
    assert woken == [True]


def test_closing_a_parking_ends_its_wait_from_another_thread(store: alkstore.Store) -> None:
    parking = Parking(store.queue("jobs"))
    woken: list[bool] = []
    parked = threading.Thread(target=lambda: woken.append(parking.wait(WAIT_S)), daemon=True)
    parked.start()
    time.sleep(0.2)
    started = time.monotonic()
    parking.close()
    parked.join(WAIT_S)
    assert woken == [False]
    assert time.monotonic() - started < WAIT_S / 2
    assert "closed" in repr(parking)
    assert not parking.wait(0.05)  # a closed parking waits for nothing


def test_a_parking_on_a_closed_store_raises_closed(target: str) -> None:
    store = alkstore.open(target)
    parking = Parking(store.queue("jobs"))
    assert not parking.wait(0.01)
    store.close()
    with pytest.raises(alkstore.Closed):
        parking.wait(0.01)


def test_an_async_parking_drops_old_wakes_and_ends_on_a_new_one(target: str) -> None:
    async def main() -> None:
        async with alkstore.open_async(target) as store:
            queue = store.queue("jobs")
            parking = AsyncParking(queue)
            try:
                assert not await parking.wait(0.05)
                await queue.enqueue("gone before the next park")
                await asyncio.to_thread(await_kept_wake, parking)
                job = await queue.claim_one("w")
                assert job is not None
                assert await job.ack()
                assert not await parking.wait(0.3)
                parked = asyncio.ensure_future(parking.wait(WAIT_S))
                await asyncio.sleep(0.2)
                await queue.enqueue("wake up")
                assert await asyncio.wait_for(parked, WAIT_S)
            finally:
                parking.close()

    asyncio.run(main())
