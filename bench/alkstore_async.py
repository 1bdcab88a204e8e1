"""The asyncio rows (``async_*``) through alkstore's async API, for the ``alkstore`` subject.

``AsyncRows`` is a base of ``alkstore_subject.Alkstore``: the same subject
measures the sync rows with ``alkstore.open`` and these with
``alkstore.open_async``. The ``alkstore sync`` subject (``alkstore_subject.
AlkstoreSync``) measures the same rows through the sync API, so that each
table puts the two side by side; pgqueuer's async API is the PostgreSQL peer.

- ``async_enqueue_1``: ``await queue.enqueue`` in a loop, one task.
- ``async_enqueue_1_32t``: 32 tasks on one ``AsyncStore``, each awaiting its
  share of the enqueues (``enqueues`` in all).
- ``async_drain_batch_*``: 1 or 4 worker processes, each an event loop
  awaiting ``claim_batch(32)`` and ``ack_batch`` until the queue is empty.
- ``async_enqueue_claim``: an ``alkstore.Worker`` on an ``AsyncStore`` with an
  async handler, parked in its own process; the figure is enqueue → handler
  start, as for the peers, so the parent lets ``PEER_SETTLE_S`` pass after
  the handler's report (the worker still acks after it), as it does for them.
- ``async_idle_threads``: the operating-system threads of a fresh process
  holding one ``AsyncStore`` with 50 receivers parked in ``async for`` and 4
  ``Worker.run_async`` parked on an empty queue, after a settle.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing.connection
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from _harness import (
    Sizes,
    peer_process,
    per_second,
    postgres_database,
    sqlite_file,
    wake_latencies,
)
from _measured import BATCH, QUEUE, TASKS, Measured, check_count, drain_seconds
from _pg_common import PEER_SETTLE_S

import alkstore

__all__ = [
    "IDLE_RECEIVERS",
    "IDLE_SETTLE_S",
    "IDLE_WORKERS",
    "STARTUP_S",
    "AsyncRows",
    "await_armed",
    "check_drained",
    "fill_queue",
    "fresh_target",
    "thread_count",
]

IDLE_RECEIVERS = 50
IDLE_WORKERS = 4
IDLE_SETTLE_S = 1.0
"""How long the idle process settles before its threads are counted."""
STARTUP_S = 60.0
"""How long a peer worker may take to import, connect and run its warm-up job."""


@contextlib.contextmanager
def fresh_target(engine: str) -> Iterator[str]:
    """Fresh storage on ``engine``, as a target for ``alkstore.open`` or ``open_async``."""
    if engine == "sqlite":
        with sqlite_file() as path:
            yield str(path)
    else:
        with postgres_database() as url:
            yield url


def fill_queue(url: str, count: int, per_tx: int = 1_000) -> None:
    """Enqueue ``count`` jobs untimed, through the sync API (the same for every alkstore row)."""
    with alkstore.open(url) as store:
        for start in range(0, count, per_tx):
            with store.transaction() as tx:
                for n in range(start, min(start + per_tx, count)):
                    tx.enqueue_tx(QUEUE, None, {"n": n})


def check_drained(url: str) -> None:
    with alkstore.open(url) as store:
        left = [stats for stats in store.inspect().queues() if stats.name == QUEUE]
    check_count("jobs left after the drain", sum(stats.total for stats in left), 0)


def thread_count() -> int:
    """This process's operating-system threads, the main thread included."""
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/self/task"))
    return threading.active_count()


def await_armed(pipe: multiprocessing.connection.Connection) -> None:
    """Wait (longer than a sample may) for a peer worker's first "armed", leaving it to be
    read by ``wake_latencies``: a worker starts slower than a sample."""
    if not pipe.poll(STARTUP_S):
        raise TimeoutError(f"the peer worker was not ready within {STARTUP_S:g} s")


def _run_timed(
    url: str, count: int, work: Callable[[alkstore.AsyncStore], Awaitable[None]]
) -> float:
    """``count`` divided by the seconds ``await work(store)`` took on a fresh AsyncStore."""

    async def timed() -> float:
        async with alkstore.open_async(url) as store:
            started = time.perf_counter()
            await work(store)
            return count / (time.perf_counter() - started)

    return asyncio.run(timed())


async def _enqueue_each(queue: alkstore.AsyncQueue, numbers: range) -> None:
    for n in numbers:
        await queue.enqueue({"n": n})


class AsyncRows(Measured):
    """The ``async_*`` rows through alkstore's asyncio API."""

    def _place(self) -> contextlib.AbstractContextManager[str]:
        """Fresh storage on this subject's engine, as a target for ``alkstore.open``."""
        return fresh_target(self.engine)

    def _async_enqueue_1(self, sizes: Sizes) -> float:
        with self._place() as url:
            return _run_timed(
                url,
                sizes.enqueues,
                lambda store: _enqueue_each(store.queue(QUEUE), range(sizes.enqueues)),
            )

    def _async_enqueue_1_32t(self, sizes: Sizes) -> float:
        async def enqueue_in_tasks(store: alkstore.AsyncStore) -> None:
            queue = store.queue(QUEUE)
            shares = [range(task, sizes.enqueues, TASKS) for task in range(TASKS)]
            await asyncio.gather(*(_enqueue_each(queue, share) for share in shares))

        with self._place() as url:
            return _run_timed(url, sizes.enqueues, enqueue_in_tasks)

    def _async_drain_batch_1w(self, sizes: Sizes) -> float:
        return self._async_drain(sizes, 1)

    def _async_drain_batch_4w(self, sizes: Sizes) -> float:
        return self._async_drain(sizes, 4)

    def _async_drain(self, sizes: Sizes, workers: int) -> float:
        with self._place() as url:
            fill_queue(url, sizes.drain_jobs)
            seconds = drain_seconds(_async_drain_worker, {"url": url}, workers)
            check_drained(url)
        return sizes.drain_jobs / seconds

    def _async_enqueue_claim(self, sizes: Sizes) -> list[float]:
        with self._place() as url, alkstore.open(url) as store:
            queue = store.queue(QUEUE)
            argument = {"url": url, "samples": sizes.latency_samples}
            with peer_process(_async_parked_worker, argument) as pipe:
                await_armed(pipe)
                return wake_latencies(
                    pipe,
                    sizes.latency_samples,
                    lambda n, t0: queue.enqueue({"n": n, "t0": t0}),
                    settle_s=PEER_SETTLE_S,
                )

    def _async_idle_threads(self, sizes: Sizes) -> float:
        with (
            self._place() as url,
            peer_process(_async_idle, {"url": url}, timeout=STARTUP_S) as pipe,
        ):
            if not pipe.poll(STARTUP_S):
                raise TimeoutError("the idle process did not report")
            return float(pipe.recv())


# What the spawned processes run


def _async_drain_worker(index: int, argument: dict[str, Any]) -> None:
    asyncio.run(_async_drain(f"w{index}", argument))


async def _async_drain(worker: str, argument: dict[str, Any]) -> None:
    async with alkstore.open_async(argument["url"]) as store:
        queue = store.queue(QUEUE)
        argument["ready"]()  # blocks the loop at the barrier, before any work: harmless
        while jobs := await queue.claim_batch(worker, BATCH):
            await queue.ack_batch([job.id for job in jobs], worker)


def _async_parked_worker(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    asyncio.run(_async_parked(argument, pipe))


async def _async_parked(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    """An async Worker whose handler reports when it starts each sample's job.

    A warm-up job (n = -1) goes through the whole path first and says "armed";
    so does each sample's report but the last, which stops the worker.
    """
    stop = asyncio.Event()
    reported = 0

    async def handle(job: alkstore.AsyncJob) -> None:
        started = time.time()
        nonlocal reported
        n = job.payload["n"]
        if n >= 0:
            pipe.send((n, started))
            reported += 1
            if reported == argument["samples"]:
                stop.set()
                return
        pipe.send("armed")

    async with alkstore.open_async(argument["url"]) as store:
        worker = alkstore.Worker(store, QUEUE, handle, worker_id="parked")
        running = asyncio.create_task(worker.run_async(stop))
        await store.queue(QUEUE).enqueue({"n": -1})
        await running


def _async_idle(argument: dict[str, Any], pipe: multiprocessing.connection.Connection) -> None:
    pipe.send(asyncio.run(_async_idle_threads(argument["url"])))


async def _async_idle_threads(url: str) -> int:
    """Threads with 50 receivers and 4 workers parked on one AsyncStore, nothing committed."""

    async def drain(receiver: alkstore.WakeReceiver) -> None:
        async for _ in receiver:
            pass

    async def handle(job: alkstore.AsyncJob) -> None:
        return None

    stop = asyncio.Event()
    async with alkstore.open_async(url) as store:
        receivers = [await store.listen(f"channel-{n}") for n in range(IDLE_RECEIVERS)]
        tasks = [asyncio.create_task(drain(receiver)) for receiver in receivers]
        tasks += [
            asyncio.create_task(alkstore.Worker(store, "idle", handle).run_async(stop))
            for _ in range(IDLE_WORKERS)
        ]
        await asyncio.sleep(IDLE_SETTLE_S)
        threads = thread_count()
        stop.set()
        for receiver in receivers:
            receiver.close()
        await asyncio.wait_for(asyncio.gather(*tasks), STARTUP_S)
    return threads


# The same rows through the sync API (the ``alkstore sync`` subject's helpers)


def sync_enqueue_in_threads(url: str, count: int) -> float:
    """``count`` enqueues from ``TASKS`` threads on one Store, per second (threads started
    and waiting before the clock starts)."""
    with alkstore.open(url) as store:
        queue = store.queue(QUEUE)
        start = threading.Barrier(TASKS + 1)

        def enqueue_share(first: int) -> None:
            start.wait(STARTUP_S)
            for n in range(first, count, TASKS):
                queue.enqueue({"n": n})

        threads = [threading.Thread(target=enqueue_share, args=(t,)) for t in range(TASKS)]
        for thread in threads:
            thread.start()

        def run() -> None:
            start.wait(STARTUP_S)
            for thread in threads:
                thread.join()

        return per_second(count, run)


def sync_parked_worker(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    """The sync twin of ``_async_parked``: a Worker on handler threads, a sync handler."""
    stop = threading.Event()
    reported = 0

    def handle(job: alkstore.Job) -> None:
        started = time.time()
        nonlocal reported
        n = job.payload["n"]
        if n >= 0:
            pipe.send((n, started))
            reported += 1
            if reported == argument["samples"]:
                stop.set()
                return
        pipe.send("armed")

    with alkstore.open(argument["url"]) as store:
        worker = alkstore.Worker(store, QUEUE, handle, worker_id="parked")
        store.queue(QUEUE).enqueue({"n": -1})
        worker.run(stop)


def sync_idle(argument: dict[str, Any], pipe: multiprocessing.connection.Connection) -> None:
    """Threads of a process holding one Store with one listener (the target's reference)."""
    with alkstore.open(argument["url"]) as store, store.listen("channel-0"):
        time.sleep(IDLE_SETTLE_S)
        pipe.send(thread_count())
