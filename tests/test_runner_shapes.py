"""Runners given odd handlers, odd stops, or cut short: never a silent success,
a frozen loop, a dead worker or a job stuck until its visibility timeout.

Each test runs on a fresh SQLite file and a fresh PostgreSQL schema (``dsn``).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import pytest

import alkstore
from alkstore import AsyncJob, Job, QueueOpts, StreamEvent, Worker

T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(main(), 60)

    return asyncio.run(bounded())


def job_state(store: alkstore.Store, job_id: int) -> tuple[str, int, str | None]:
    info = store.queue("q").get_job(job_id)
    assert info is not None
    return info.state, info.attempts, info.last_error


def run_worker_until(worker: Worker, done: Callable[[], bool], mode: str) -> None:
    """Run ``worker`` (``run`` on a thread, or ``run_async`` in a loop) until ``done()``."""
    if mode == "run":
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        thread.join(20)
        assert not thread.is_alive()
        return

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.ensure_future(worker.run_async(stop))
        deadline = time.monotonic() + 20
        while not done() and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.01)
        stop.set()
        await task

    run(main)


# A CancelledError of the handler's own is a failure, not a stop


@pytest.mark.parametrize("coroutine", [True, False], ids=["async def", "plain"])
def test_a_handler_raising_its_own_cancelled_error_fails_its_job_and_the_worker_goes_on(
    dsn: str, coroutine: bool
) -> None:
    async def awaits_a_cancelled_task(job: Job) -> None:
        if job.payload == "cancelled":
            doomed = asyncio.ensure_future(asyncio.sleep(10))
            doomed.cancel()
            await doomed  # raises CancelledError, though nobody cancels this handler

    def plain(job: Job) -> None:
        if job.payload == "cancelled":
            raise asyncio.CancelledError("the handler's own")

    with alkstore.open(dsn) as store:
        queue = store.queue("q", QueueOpts(max_attempts=2, backoff_base_s=0.01))
        cancelled = queue.enqueue("cancelled")
        fine = [queue.enqueue(n) for n in range(3)]
        worker = Worker(store, queue, awaits_a_cancelled_task if coroutine else plain)
        run_worker_until(worker, lambda: worker.stats().handled >= 5, "run_async")
        assert job_state(store, cancelled)[:2] == ("dead", 2)
        assert "CancelledError" in (job_state(store, cancelled)[2] or "")
        assert all(queue.get_job(job_id) is None for job_id in fine)
        assert worker.stats().failed == 2


# Stops that would block the loop


def test_async_runs_refuse_a_threading_event(dsn: str) -> None:
    with alkstore.open(dsn) as store:
        worker = Worker(store, "q", lambda job: None)
        consumer = alkstore.Consumer(store, "s", "c", lambda event: None)

        async def main() -> None:
            for runner in (worker, consumer):
                with pytest.raises(TypeError, match=r"asyncio\.Event"):
                    await runner.run_async(threading.Event())  # type: ignore[arg-type]

        run(main)


# Handlers whose body would never run


def test_generator_functions_are_refused_as_handlers(dsn: str) -> None:
    def generator(job: Job) -> Iterator[None]:
        yield

    async def async_generator(job: Job) -> AsyncIterator[None]:
        yield

    class AsyncGeneratorCall:
        async def __call__(self, event: StreamEvent) -> AsyncIterator[None]:
            yield

    with alkstore.open(dsn) as store:
        for handler in (generator, async_generator, AsyncGeneratorCall()):
            with pytest.raises(TypeError, match="generator function"):
                Worker(store, "q", handler)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="generator function"):
                alkstore.Consumer(store, "s", "c", handler)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["run", "run_async"])
def test_a_handler_returning_a_generator_fails_its_job_rather_than_ack_it(
    dsn: str, mode: str
) -> None:
    ran: list[object] = []

    def body(job: Job) -> Iterator[None]:
        ran.append(job.payload)
        yield

    with alkstore.open(dsn) as store:
        queue = store.queue("q", QueueOpts(max_attempts=1))
        job_id = queue.enqueue("x")
        worker = Worker(store, queue, lambda job: body(job))  # noqa: PLW0108 - hides the shape
        run_worker_until(worker, lambda: worker.stats().handled >= 1, mode)
        state, _, error = job_state(store, job_id)
        assert (state, ran) == ("dead", [])
        assert "whose body never ran" in (error or "")


def test_a_transactional_handler_on_a_sync_store_must_not_return_a_coroutine(dsn: str) -> None:
    class AsyncCall:
        async def __call__(self, event: StreamEvent, tx: object) -> None:
            pass

    async def body(event: StreamEvent, tx: object) -> None:
        pass

    with alkstore.open(dsn) as store:
        stream = store.stream("s")
        for n in range(3):
            stream.publish(n)
        with pytest.raises(TypeError, match="plain function"):
            alkstore.Consumer(store, stream, "c", AsyncCall(), transactional=True)
        consumer = alkstore.Consumer(
            store,
            stream,
            "c",
            lambda event, tx: body(event, tx),  # noqa: PLW0108 - hides the shape
            transactional=True,
        )
        stop = threading.Event()
        thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while consumer.stats().failed == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        thread.join(20)
        assert consumer.stats().failed >= 1
        assert consumer.stats().succeeded == 0
        assert stream.read_from_consumer("c", 10) != []  # nothing was taken as handled


# A handler's exception that cannot say what it is


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@pytest.mark.parametrize("mode", ["run", "run_async"])
def test_an_exception_whose_str_raises_fails_only_its_job(dsn: str, mode: str) -> None:
    def handler(job: Job) -> None:
        if job.payload == "bad":
            raise Unprintable

    with alkstore.open(dsn) as store:
        queue = store.queue("q", QueueOpts(max_attempts=1))
        bad = queue.enqueue("bad")
        good = [queue.enqueue(n) for n in range(3)]
        worker = Worker(store, queue, handler)
        run_worker_until(worker, lambda: worker.stats().handled >= 4, mode)
        state, _, error = job_state(store, bad)
        assert state == "dead"
        assert error == "Unprintable: <str() of it raised RuntimeError>"
        assert all(queue.get_job(job_id) is None for job_id in good)


def test_a_plain_handler_raising_generator_exit_under_run_async_fails_its_job(dsn: str) -> None:
    def handler(job: Job) -> None:
        if job.payload == "exit":
            raise GeneratorExit

    with alkstore.open(dsn) as store:
        queue = store.queue("q", QueueOpts(max_attempts=1))
        bad = queue.enqueue("exit")
        good = queue.enqueue("fine")
        worker = Worker(store, queue, handler)
        run_worker_until(worker, lambda: worker.stats().handled >= 2, "run_async")
        assert job_state(store, bad)[0] == "dead"
        assert queue.get_job(good) is None
        assert worker.stats().lost == 0


# Running twice, cancelled at any moment


def test_a_consumer_refuses_a_second_run_at_once(dsn: str) -> None:
    with alkstore.open(dsn) as store:
        stream = store.stream("s")
        stream.publish(1)
        consumer = alkstore.Consumer(store, stream, "c", lambda event: None)
        stop = threading.Event()
        thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while consumer.stats().succeeded == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            with pytest.raises(RuntimeError, match="already running"):
                consumer.run(threading.Event())
            with pytest.raises(RuntimeError, match="already running"):
                run(lambda: consumer.run_async(asyncio.Event()))
        finally:
            stop.set()
            thread.join(20)
        run_again = threading.Event()
        run_again.set()
        consumer.run(run_again)  # once the first run ended, another may start


def test_a_run_async_cancelled_at_any_moment_leaves_no_claim_behind(dsn: str) -> None:
    """Cancelled while a claim or an ack is on its way, the run waits for its
    answer: what it claimed is released before the cancellation propagates."""
    rng = random.Random(7)

    async def main() -> None:
        async def handler(job: AsyncJob) -> None:
            await asyncio.sleep(0)

        async with alkstore.open_async(dsn) as store:
            queue = store.queue("q")
            for n in range(200):
                await queue.enqueue(n)
            for round_ in range(30):
                worker = Worker(store, queue, handler, batch_size=8, worker_id=f"w{round_}")
                task = asyncio.ensure_future(worker.run_async())
                await asyncio.sleep(rng.random() * 0.02)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                held = await store.inspect().jobs("q", "processing", limit=1000)
                assert held == [], f"round {round_} left {len(held)} claims"

    run(main)


# The outbox's deliver: the same shapes, and its dead letters


async def _deliver_async(payload: object) -> None:
    DELIVERED.append(payload)


DELIVERED: list[object] = []


def test_an_outbox_runs_a_coroutine_deliver_and_refuses_a_generator(dsn: str) -> None:
    def generator(payload: object) -> Iterator[None]:
        yield

    DELIVERED.clear()
    with alkstore.open(dsn) as store:
        outbox = store.outbox("hooks")
        outbox.enqueue("sync store")
        with pytest.raises(TypeError, match="generator function"):
            outbox.run_once("relay", generator)
        assert outbox.run_once("relay", _deliver_async) is True
    assert DELIVERED == ["sync store"]

    async def main() -> None:
        async with alkstore.open_async(dsn) as store:
            outbox = store.outbox("hooks")
            await outbox.enqueue("async store")
            with pytest.raises(TypeError, match="generator function"):
                await outbox.run_once("relay", generator)
            returns_a_coroutine = lambda p: _deliver_async(p)  # noqa: E731, PLW0108 - the shape
            assert await outbox.run_once("relay", returns_a_coroutine) is True
            assert await store.inspect().jobs(outbox.queue_name) == []

    run(main)
    assert DELIVERED == ["sync store", "async store"]


def test_an_outboxs_dead_sends_can_be_requeued_and_purged(dsn: str) -> None:
    def refuse(payload: object) -> None:
        raise RuntimeError("the endpoint said no")

    with alkstore.open(dsn) as store:
        outbox = store.outbox("hooks")
        first = outbox.enqueue("first", alkstore.EnqueueOpts(max_attempts=1))
        outbox.enqueue("second", alkstore.EnqueueOpts(max_attempts=1))
        assert outbox.run_once("relay", refuse) is True
        assert outbox.run_once("relay", refuse) is True
        assert outbox.requeue_dead([first]) == 1
        delivered: list[object] = []
        assert outbox.run_once("relay", delivered.append) is True
        assert delivered == ["first"]
        assert outbox.purge_dead() == 1

    async def main() -> None:
        async with alkstore.open_async(dsn) as store:
            outbox = store.outbox("hooks")
            await outbox.enqueue("third", alkstore.EnqueueOpts(max_attempts=1))
            assert await outbox.run_once("relay", refuse) is True
            assert await outbox.requeue_dead() == 1
            assert await outbox.run_once("relay", refuse) is True
            assert await outbox.purge_dead() == 1

    run(main)
