"""alkstore itself, through its public API only: one subject for every engine.

The code is the same on SQLite and PostgreSQL; only the fresh storage it
opens differs (``_place``), as a user's code differs only by its DSN. The
``async_*`` rows go through the asyncio API (``alkstore_async``); the
``alkstore sync`` subject measures those rows through the sync API beside it.
"""

from __future__ import annotations

import importlib
import multiprocessing.connection
import time
from typing import Any

import metrics_scale
from _harness import (
    Sizes,
    peer_process,
    per_second,
    wake_latencies,
)
from _measured import (
    BATCH,
    CHANNEL,
    PAGE,
    QUEUE,
    STREAM,
    WAKE_TIMEOUT_S,
    Measured,
    backlog_rounds,
    check_count,
    drain_seconds,
)
from _pg_common import PEER_SETTLE_S
from alkstore_async import (
    STARTUP_S,
    AsyncRows,
    await_armed,
    check_drained,
    fill_queue,
    fresh_target,
    sync_enqueue_in_threads,
    sync_idle,
    sync_parked_worker,
)

import alkstore

__all__ = ["Alkstore", "AlkstoreSync"]

BULK_FILL = 100_000
"""A backlog at least this big is written by the database, not through the API."""


class Alkstore(AsyncRows):
    name = "alkstore"
    notes = (
        "public API: enqueue, transaction()+enqueue_tx, claim_one/ack, claim_batch/ack_batch, "
        "publish, publish_tx, read_since, notify/listen, queue.wait; default engine options; "
        "async_* rows: open_async and the same calls awaited (asyncio's default loop), "
        "Worker.run_async with an async handler"
    )

    def __init__(self, engine: str) -> None:
        super().__init__()
        self.engine = engine

    def _enqueue_1(self, sizes: Sizes) -> float:
        with self._place() as url, alkstore.open(url) as store:
            queue = store.queue(QUEUE)

            def run() -> None:
                for n in range(sizes.enqueues):
                    queue.enqueue({"n": n})

            return per_second(sizes.enqueues, run)

    def _enqueue_100(self, sizes: Sizes) -> float:
        with self._place() as url, alkstore.open(url) as store:
            return per_second(sizes.enqueues, lambda: _alk_enqueue_many(store, sizes.enqueues))

    def _drain(self, sizes: Sizes, workers: int, *, batch: bool) -> float:
        with self._place() as url:
            with alkstore.open(url) as store:
                _alk_enqueue_many(store, sizes.drain_jobs, per_tx=1_000)
            seconds = drain_seconds(_alk_drain, {"url": url, "batch": batch}, workers)
            with alkstore.open(url) as store:
                left = [stats for stats in store.inspect().queues() if stats.name == QUEUE]
            check_count("jobs left after the drain", sum(s.total for s in left), 0)
        return sizes.drain_jobs / seconds

    def _claim_backlog(self, backlog: int, sizes: Sizes) -> float:
        with self._place() as url, alkstore.open(url) as store:
            queue = store.queue(QUEUE)

            def claim_and_ack() -> bool:
                job = queue.claim_one("w")
                return job is not None and job.ack()

            def top_up(count: int) -> None:
                if count >= BULK_FILL:  # untimed: the database writes a big backlog itself
                    metrics_scale.fill_ready(self.engine, url, QUEUE, count)
                else:
                    _alk_enqueue_many(store, count, per_tx=1_000)

            return backlog_rounds(backlog, sizes.claims_per_backlog, top_up, claim_and_ack)

    def _notify_wake(self, sizes: Sizes) -> list[float]:
        with self._place() as url, alkstore.open(url) as store:
            argument = {"url": url, "samples": sizes.latency_samples}
            with peer_process(_alk_listener, argument) as pipe:
                return wake_latencies(
                    pipe, sizes.latency_samples, lambda n, t0: store.notify(CHANNEL, {"n": n})
                )

    def _enqueue_claim(self, sizes: Sizes) -> list[float]:
        with self._place() as url, alkstore.open(url) as store:
            queue = store.queue(QUEUE)
            argument = {"url": url, "samples": sizes.latency_samples}
            with peer_process(_alk_parked_worker, argument) as pipe:
                return wake_latencies(
                    pipe, sizes.latency_samples, lambda n, t0: queue.enqueue({"n": n, "t0": t0})
                )

    def _publish_1(self, sizes: Sizes) -> float:
        with self._place() as url, alkstore.open(url) as store:
            stream = store.stream(STREAM)

            def run() -> None:
                for n in range(sizes.enqueues):
                    stream.publish({"n": n})

            return per_second(sizes.enqueues, run)

    def _publish_100(self, sizes: Sizes) -> float:
        with self._place() as url, alkstore.open(url) as store:
            return per_second(sizes.enqueues, lambda: _alk_publish_many(store, sizes.enqueues))

    def _replay(self, sizes: Sizes) -> float:
        with self._place() as url, alkstore.open(url) as store:
            _alk_publish_many(store, sizes.events, per_tx=1_000)
            stream = store.stream(STREAM)

            def run() -> None:
                offset, count = 0, 0
                while page := stream.read_since(offset, PAGE):
                    count += len(page)
                    offset = page[-1].offset
                check_count("replayed events", count, sizes.events)

            return per_second(sizes.events, run)

    def _idle_cpu(self, sizes: Sizes) -> float:
        with self._place() as url:
            argument = {"target": url, "seconds": sizes.idle_seconds}
            with peer_process(_alk_idle, argument, timeout=sizes.idle_seconds + 30) as pipe:
                if not pipe.poll(sizes.idle_seconds + 30):
                    raise TimeoutError("the idle measurement did not report")
                return float(pipe.recv())


def _alk_enqueue_many(store: alkstore.Store, count: int, per_tx: int = 100) -> None:
    for start in range(0, count, per_tx):
        with store.transaction() as tx:
            for n in range(start, min(start + per_tx, count)):
                tx.enqueue_tx(QUEUE, None, {"n": n})


def _alk_publish_many(store: alkstore.Store, count: int, per_tx: int = 100) -> None:
    for start in range(0, count, per_tx):
        with store.transaction() as tx:
            for n in range(start, min(start + per_tx, count)):
                tx.publish_tx(STREAM, {"n": n})


def _alk_drain(index: int, argument: dict[str, Any]) -> None:
    worker = f"w{index}"
    with alkstore.open(argument["url"]) as store:
        queue = store.queue(QUEUE)
        argument["ready"]()
        if argument["batch"]:
            while jobs := queue.claim_batch(worker, BATCH):
                queue.ack_batch([job.id for job in jobs], worker)
        else:
            while (job := queue.claim_one(worker)) is not None:
                job.ack()


def _alk_listener(argument: dict[str, Any], pipe: multiprocessing.connection.Connection) -> None:
    with alkstore.open(argument["url"]) as store, store.listen(CHANNEL) as wakes:
        for n in range(argument["samples"]):
            while wakes.recv(0) is not None:  # a repeated wake (after a reconnect)
                pass
            pipe.send("armed")
            if wakes.recv(WAKE_TIMEOUT_S) is None:
                raise TimeoutError(f"sample {n}: no wake")
            pipe.send((n, time.time()))


def _alk_parked_worker(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    with alkstore.open(argument["url"]) as store:
        queue = store.queue(QUEUE)
        for _ in range(argument["samples"]):
            while (stray := queue.claim_one("parked")) is not None:
                stray.ack()
            pipe.send("armed")
            while True:
                if not queue.wait(WAKE_TIMEOUT_S):
                    raise TimeoutError("no wake for the enqueued job")
                job = queue.claim_one("parked")
                if job is not None:
                    claimed = time.time()
                    job.ack()
                    pipe.send((job.payload["n"], claimed))
                    break


def _alk_idle(argument: dict[str, Any], pipe: multiprocessing.connection.Connection) -> None:
    idle = importlib.import_module("idle")  # bench/idle.py: bench/ is on the path
    result = idle.measure(argument["target"], argument["seconds"])
    pipe.send(result["cpu_percent_of_a_core"])


class AlkstoreSync(Measured):
    """The ``async_*`` rows through the sync API: the reference the async API is held to."""

    name = "alkstore sync"
    notes = (
        "the async_* rows through the sync API: enqueue in a loop; 32 threads on one Store; "
        "claim_batch/ack_batch drains; Worker.run (handler threads) with a sync handler; "
        "idle threads: one Store with one listener (the async target's reference)"
    )

    def __init__(self, engine: str) -> None:
        super().__init__()
        self.engine = engine

    def _async_enqueue_1(self, sizes: Sizes) -> float:
        with fresh_target(self.engine) as url, alkstore.open(url) as store:
            queue = store.queue(QUEUE)

            def run() -> None:
                for n in range(sizes.enqueues):
                    queue.enqueue({"n": n})

            return per_second(sizes.enqueues, run)

    def _async_enqueue_1_32t(self, sizes: Sizes) -> float:
        with fresh_target(self.engine) as url:
            return sync_enqueue_in_threads(url, sizes.enqueues)

    def _async_drain_batch_1w(self, sizes: Sizes) -> float:
        return self._drain_batch(sizes, 1)

    def _async_drain_batch_4w(self, sizes: Sizes) -> float:
        return self._drain_batch(sizes, 4)

    def _drain_batch(self, sizes: Sizes, workers: int) -> float:
        with fresh_target(self.engine) as url:
            fill_queue(url, sizes.drain_jobs)
            seconds = drain_seconds(_alk_drain, {"url": url, "batch": True}, workers)
            check_drained(url)
        return sizes.drain_jobs / seconds

    def _async_enqueue_claim(self, sizes: Sizes) -> list[float]:
        with fresh_target(self.engine) as url, alkstore.open(url) as store:
            queue = store.queue(QUEUE)
            argument = {"url": url, "samples": sizes.latency_samples}
            with peer_process(sync_parked_worker, argument) as pipe:
                await_armed(pipe)
                return wake_latencies(
                    pipe,
                    sizes.latency_samples,
                    lambda n, t0: queue.enqueue({"n": n, "t0": t0}),
                    settle_s=PEER_SETTLE_S,
                )

    def _async_idle_threads(self, sizes: Sizes) -> float:
        with (
            fresh_target(self.engine) as url,
            peer_process(sync_idle, {"url": url}, timeout=STARTUP_S) as pipe,
        ):
            if not pipe.poll(STARTUP_S):
                raise TimeoutError("the idle process did not report")
            return float(pipe.recv())
