"""alkstore.Worker on an AsyncStore: claims, settles and parks through the async API.

Each test runs on a fresh SQLite file, and on a fresh PostgreSQL schema when
``ALKSTORE_PG_DSN`` names a server that answers. Every event loop is bounded
by ``TEST_TIMEOUT_S``; every wait inside by its own timeout.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

import alkstore
from alkstore import AsyncJob, AsyncStore, EnqueueOpts, Job, QueueOpts, Worker
from alkstore._offload import OFFLOAD_THREADS

T = TypeVar("T")

TEST_TIMEOUT_S = 60.0

WORKER_THREAD_NAMES = (
    "alkstore-worker",
    "alkstore-parker",
    "alkstore-heartbeat",
    "alkstore-handler",
)
"""The threads a worker may start of its own; on an AsyncStore with a coroutine handler, none."""


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main()`` on a fresh event loop, bounded in time."""

    async def bounded() -> T:
        return await asyncio.wait_for(main(), TEST_TIMEOUT_S)

    return asyncio.run(bounded())


async def eventually(check: Callable[[], Awaitable[T | None]], timeout: float = 10.0) -> T:
    """Await ``check()`` until it returns something truthy, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert time.monotonic() < deadline, f"condition not met within {timeout} s"
        await asyncio.sleep(0.01)


async def stopped(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Set ``stop`` and await the worker's end (bounded)."""
    stop.set()
    await asyncio.wait_for(task, 20)


def start(worker: Worker, stop: asyncio.Event) -> asyncio.Task[None]:
    return asyncio.ensure_future(worker.run_async(stop))


# Handling, retrying, dead-lettering


def test_an_async_handler_handles_and_acks_every_job(target: str) -> None:
    async def main() -> None:
        seen: list[int] = []

        async def handler(job: AsyncJob) -> None:
            assert isinstance(job, AsyncJob)
            await asyncio.sleep(0.001)
            seen.append(job.payload)

        async with alkstore.open_async(target) as store:
            queue = store.queue("work")
            async with store.transaction() as tx:
                job_ids = [await tx.enqueue_tx("work", None, n) for n in range(40)]
            worker = Worker(store, queue, handler, concurrency=4, batch_size=8)
            stop = asyncio.Event()
            task = start(worker, stop)
            await eventually(lambda: _true(worker.stats().succeeded == 40))
            await stopped(task, stop)
            assert sorted(seen) == list(range(40))
            assert [await queue.get_job(job_id) for job_id in job_ids] == [None] * 40
            assert worker.stats().in_flight == 0

    run(main)


def test_a_plain_handler_runs_on_a_thread_off_the_loop(target: str) -> None:
    async def main() -> None:
        threads: list[str] = []

        def handler(job: AsyncJob) -> None:
            threads.append(threading.current_thread().name)

        async with alkstore.open_async(target) as store:
            await store.queue("work").enqueue(1)
            worker = Worker(store, "work", handler)
            stop = asyncio.Event()
            task = start(worker, stop)
            await eventually(lambda: _true(worker.stats().succeeded == 1))
            await stopped(task, stop)
        assert threads
        assert threads != [threading.current_thread().name]

    run(main)


def test_a_failing_handler_retries_with_its_error_recorded(target: str) -> None:
    async def main() -> None:
        async def handler(job: AsyncJob) -> None:
            raise ValueError(f"cannot handle {job.payload}")

        async with alkstore.open_async(target) as store:
            queue = store.queue("work", QueueOpts(max_attempts=3, backoff_base_s=60))
            job_id = await queue.enqueue("x")
            worker = Worker(store, queue, handler)
            stop = asyncio.Event()
            task = start(worker, stop)
            await eventually(lambda: _true(worker.stats().failed == 1))
            await stopped(task, stop)
            info = await queue.get_job(job_id)
        assert info is not None
        assert (info.state, info.attempts) == ("pending", 1)
        assert info.last_error == "ValueError: cannot handle x"
        assert info.run_at > time.time() + 20  # on the backoff curve, not at once

    run(main)


def test_a_job_failing_its_last_attempt_is_dead_lettered(target: str) -> None:
    async def main() -> None:
        async def handler(job: AsyncJob) -> None:
            raise RuntimeError("no")

        async with alkstore.open_async(target) as store:
            queue = store.queue("work", QueueOpts(max_attempts=2, backoff_base_s=0))
            job_id = await queue.enqueue("x")
            worker = Worker(store, queue, handler)
            stop = asyncio.Event()
            task = start(worker, stop)

            async def dead() -> alkstore.JobInfo | None:
                info = await queue.get_job(job_id)
                return info if info is not None and info.state == "dead" else None

            info = await eventually(dead)
            await stopped(task, stop)
        assert (info.attempts, info.last_error) == (2, "RuntimeError: no")
        assert worker.stats().failed == 2

    run(main)


def test_an_outbox_is_delivered_by_a_worker(target: str) -> None:
    async def main() -> None:
        delivered: list[object] = []

        async def deliver(job: AsyncJob) -> None:
            delivered.append(job.payload)

        async with alkstore.open_async(target) as store:
            async with store.transaction() as tx:
                await tx.outbox_enqueue_tx("webhooks", None, {"order": 1})
            worker = Worker(store, store.outbox("webhooks"), deliver)
            stop = asyncio.Event()
            task = start(worker, stop)
            await eventually(lambda: _true(bool(delivered)))
            await stopped(task, stop)
        assert delivered == [{"order": 1}]

    run(main)


# Heartbeats and wakes


def test_a_long_job_is_heartbeated_past_its_visibility_timeout(target: str) -> None:
    async def main() -> None:
        attempts: list[int] = []
        finished = asyncio.Event()

        async def handler(job: AsyncJob) -> None:
            attempts.append(job.attempts)
            await asyncio.sleep(3.0)
            finished.set()

        async with alkstore.open_async(target) as store:
            queue = store.queue("work", QueueOpts(visibility_timeout_s=1.0))
            job_id = await queue.enqueue("slow")
            worker = Worker(store, queue, handler)
            stop = asyncio.Event()
            task = start(worker, stop)
            await eventually(lambda: _true(bool(attempts)))
            while not finished.is_set():  # three leases pass: only heartbeats keep the claim
                assert await queue.claim_one("thief") is None
                await asyncio.sleep(0.05)
            await eventually(lambda: _true(worker.stats().succeeded == 1))
            await stopped(task, stop)
            assert attempts == [1]
            assert await queue.get_job(job_id) is None

    run(main)


def test_a_parked_worker_is_woken_by_a_peers_enqueue(target: str) -> None:
    async def main() -> None:
        handled = asyncio.Event()

        async def handler(job: AsyncJob) -> None:
            handled.set()

        async with alkstore.open_async(target) as store:
            worker = Worker(store, "work", handler, idle_wait_s=60)
            stop = asyncio.Event()
            task = start(worker, stop)
            await asyncio.sleep(0.3)  # let it park
            with alkstore.open(target) as peer:
                await asyncio.to_thread(peer.queue("work").enqueue, "wake up")
                await asyncio.wait_for(handled.wait(), 10)  # far sooner than idle_wait_s
            await stopped(task, stop)

    run(main)


def test_claims_start_no_thread_per_claim(target: str) -> None:
    async def main() -> None:
        peak = 0

        async def handler(job: AsyncJob) -> None:
            nonlocal peak
            await asyncio.sleep(0.01)
            peak = max(peak, threading.active_count())

        async with alkstore.open_async(target) as store:
            queue = store.queue("work")
            async with store.transaction() as tx:
                for n in range(100):
                    await tx.enqueue_tx("work", None, n)
            await queue.wait(0)  # the store's threads (its pool, its wakes) start on first use
            baseline = threading.active_count()
            worker = Worker(store, queue, handler, concurrency=20, batch_size=40)
            stop = asyncio.Event()
            task = start(worker, stop)
            await eventually(lambda: _true(worker.stats().succeeded == 100), timeout=30)
            names = [thread.name for thread in threading.enumerate()]
            await stopped(task, stop)
        assert not [name for name in names if name.startswith(WORKER_THREAD_NAMES)]
        # At most the store's own bounded pool grew: not a thread per claim or per handler.
        assert peak - baseline <= OFFLOAD_THREADS

    run(main)


# Shutting down


def test_stopping_releases_a_job_that_outlives_the_grace_period(target: str) -> None:
    async def main() -> None:
        started = asyncio.Event()

        async def handler(job: AsyncJob) -> None:
            started.set()
            await asyncio.sleep(60)

        async with alkstore.open_async(target) as store:
            queue = store.queue("work", QueueOpts(max_attempts=1))
            job_id = await queue.enqueue("stuck")
            worker = Worker(store, queue, handler, grace_s=0.2)
            stop = asyncio.Event()
            task = start(worker, stop)
            await asyncio.wait_for(started.wait(), 10)
            await stopped(task, stop)
            info = await queue.get_job(job_id)
        assert info is not None
        # Released, not dead-lettered, although that was its only attempt.
        assert (info.state, info.attempts) == ("pending", 0)
        assert (worker.stats().released, worker.stats().in_flight) == (1, 0)

    run(main)


def test_stopping_lets_running_jobs_finish_and_releases_those_not_started(target: str) -> None:
    async def main() -> None:
        started = asyncio.Event()

        async def handler(job: AsyncJob) -> None:
            started.set()
            await asyncio.sleep(0.3)

        async with alkstore.open_async(target) as store:
            queue = store.queue("work")
            job_ids = [await queue.enqueue(n) for n in range(8)]
            worker = Worker(store, queue, handler, batch_size=8, grace_s=10)
            stop = asyncio.Event()
            task = start(worker, stop)
            await asyncio.wait_for(started.wait(), 10)
            await stopped(task, stop)
            states = [info.state for job_id in job_ids if (info := await queue.get_job(job_id))]
        assert states == ["pending"] * 7
        stats = worker.stats()
        assert (stats.succeeded, stats.released, stats.in_flight) == (1, 7, 0)

    run(main)


def test_hurry_cuts_the_grace_period_short(target: str) -> None:
    async def main() -> None:
        started = asyncio.Event()

        async def handler(job: AsyncJob) -> None:
            started.set()
            await asyncio.sleep(60)

        async with alkstore.open_async(target) as store:
            queue = store.queue("work")
            job_id = await queue.enqueue("stuck")
            worker = Worker(store, queue, handler, grace_s=60)
            stop = asyncio.Event()
            task = start(worker, stop)
            await asyncio.wait_for(started.wait(), 10)
            stop.set()
            await asyncio.sleep(0.1)
            assert not task.done()  # in its grace period
            threading.Thread(target=worker.hurry).start()  # as a signal handler would
            await asyncio.wait_for(task, 10)
            info = await queue.get_job(job_id)
        assert info is not None
        assert (info.state, info.attempts) == ("pending", 0)

    run(main)


def test_cancelling_the_run_releases_every_claim(target: str) -> None:
    async def main() -> None:
        started = asyncio.Event()

        async def handler(job: AsyncJob) -> None:
            started.set()
            await asyncio.sleep(60)

        async with alkstore.open_async(target) as store:
            queue = store.queue("work", QueueOpts(max_attempts=1))
            job_ids = [await queue.enqueue(n) for n in range(4)]
            worker = Worker(store, queue, handler, concurrency=2, batch_size=4, grace_s=60)
            task = asyncio.ensure_future(worker.run_async())
            await asyncio.wait_for(started.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)  # no grace: cancelled means now
            infos = [await queue.get_job(job_id) for job_id in job_ids]
        assert [(i.state, i.attempts) for i in infos if i] == [("pending", 0)] * 4
        assert (worker.stats().released, worker.stats().in_flight) == (4, 0)

    run(main)


def test_a_run_cancelled_mid_claim_loses_no_job(target: str) -> None:
    # Cancelled at any point, even while a claim is on its way: every job is
    # released, or lapses at its visibility timeout and is claimed again.
    async def main() -> None:
        async def handler(job: AsyncJob) -> None:
            await asyncio.sleep(60)

        async with alkstore.open_async(target) as store:
            queue = store.queue("work", QueueOpts(visibility_timeout_s=1, max_attempts=50))
            job_ids = {await queue.enqueue(n) for n in range(6)}
            for pause in (0.0, 0.001, 0.005, 0.02, 0.05):
                worker = Worker(store, queue, handler, concurrency=2, batch_size=3)
                task = asyncio.ensure_future(worker.run_async())
                await asyncio.sleep(pause)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await asyncio.sleep(1.2)  # any claim not released has lapsed by now
            claimed = await queue.claim_batch("survivor", 10)
        assert {job.id for job in claimed} == job_ids

    run(main)


def test_a_handler_raising_a_base_exception_stops_the_worker_and_releases_every_claim(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async def handler(job: AsyncJob) -> None:
            if job.payload == "exit":
                raise SystemExit(3)
            await asyncio.sleep(60)

        async with alkstore.open_async(target) as store:
            queue = store.queue("work")
            fatal = await queue.enqueue("exit", EnqueueOpts(priority=1))
            ahead = [await queue.enqueue(n) for n in range(3)]
            worker = Worker(store, queue, handler, concurrency=2, batch_size=4, grace_s=0.2)
            with pytest.raises(SystemExit):
                await worker.run_async()  # bounded by run(); a task would re-raise it off the loop
            for job_id in (fatal, *ahead):
                info = await queue.get_job(job_id)
                assert info is not None
                assert (info.state, info.attempts) == ("pending", 0), info
        assert worker.stats().in_flight == 0
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert f"job {fatal} of 'work': the handler raised SystemExit" in errors[0]

    run(main)


# Outages


def test_an_ack_failing_while_sqlite_is_locked_is_retried_once_the_lock_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"

    async def main() -> int:
        proceed = asyncio.Event()
        handled: list[int] = []

        async def handler(job: AsyncJob) -> None:
            await asyncio.wait_for(proceed.wait(), 10)
            handled.append(job.id)  # returns while the lock is held: the ack fails at first

        async with alkstore.open_async(str(path), busy_timeout_s=0.2) as store:
            queue = store.queue("q")
            job_id = await queue.enqueue("work")
            worker = Worker(store, queue, handler)
            stop = asyncio.Event()
            task = start(worker, stop)
            await eventually(lambda: _true(worker.stats().in_flight == 1))
            holder = sqlite3.connect(path, isolation_level=None, timeout=10)
            try:
                holder.execute("BEGIN IMMEDIATE")
                proceed.set()
                await asyncio.sleep(1.5)
                holder.execute("ROLLBACK")
            finally:
                holder.close()
            await eventually(lambda: _true(worker.stats().succeeded == 1))
            await stopped(task, stop)
            assert await queue.get_job(job_id) is None
        assert handled == [job_id]
        return job_id

    job_id = run(main)
    warnings = [r.getMessage() for r in caplog.records if r.name == "alkstore.worker"]
    assert len(warnings) == 1
    assert f"settling job {job_id} failed" in warnings[0]
    assert "database is locked" in warnings[0]


def test_claims_failing_while_sqlite_is_locked_are_retried_once_the_lock_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"

    async def main() -> None:
        async def handler(job: AsyncJob) -> None:
            return None

        async with alkstore.open_async(str(path), busy_timeout_s=0.1) as store:
            queue = store.queue("q")
            job_ids = [await queue.enqueue(n) for n in range(3)]
            holder = sqlite3.connect(path, isolation_level=None, timeout=10)
            try:
                holder.execute("BEGIN IMMEDIATE")
                worker = Worker(store, queue, handler)
                stop = asyncio.Event()
                task = start(worker, stop)
                await asyncio.sleep(1.0)  # its claims fail meanwhile: it pauses and tries again
                assert not task.done()
                holder.execute("ROLLBACK")
            finally:
                holder.close()
            await eventually(lambda: _true(worker.stats().succeeded == 3))
            await stopped(task, stop)
            assert [await queue.get_job(job_id) for job_id in job_ids] == [None] * 3

    run(main)
    warnings = [r.getMessage() for r in caplog.records if r.name == "alkstore.worker"]
    assert len(warnings) == 1  # one per outage
    assert "claiming from 'q' failed" in warnings[0]


# The sync run, and the arguments


def test_the_sync_run_refuses_an_async_store(target: str) -> None:
    async def main() -> None:
        async with alkstore.open_async(target) as store:
            worker = Worker(store, "work", print)
            with pytest.raises(TypeError, match=r"await worker\.run_async\(stop\)"):
                worker.run(threading.Event())
            with pytest.raises(TypeError, match="AsyncStore"):
                worker.run_forever()

    run(main)


def test_a_queue_of_another_store_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with (
            alkstore.open_async(str(tmp_path / "a.db")) as store,
            alkstore.open_async(str(tmp_path / "b.db")) as other,
        ):
            with pytest.raises(ValueError, match="another store"):
                Worker(store, other.queue("work"), print)
            with pytest.raises(ValueError, match="another store"):
                Worker(store, other.outbox("hooks"), print)
            with alkstore.open(str(tmp_path / "c.db")) as sync_store:
                with pytest.raises(ValueError, match="another store"):
                    Worker(sync_store, store.queue("work"), print)
                with pytest.raises(ValueError, match="another store"):
                    Worker(store, sync_store.queue("work"), print)
            assert isinstance(Worker(store, "work", print).store, AsyncStore)

    run(main)


# run_async on a sync store: the same runner, its calls on threads


def test_run_async_on_a_sync_store_claims_ahead_and_releases_what_it_did_not_start(
    tmp_path: Path,
) -> None:
    with alkstore.open(str(tmp_path / "store.db")) as store:
        queue = store.queue("work")
        job_ids = [queue.enqueue(n) for n in range(8)]

        async def main() -> None:
            started = asyncio.Event()

            async def handler(job: Job) -> None:
                assert isinstance(job, Job)
                started.set()
                await asyncio.sleep(0.3)

            worker = Worker(store, queue, handler, batch_size=8, grace_s=10)
            stop = asyncio.Event()
            task = start(worker, stop)
            await asyncio.wait_for(started.wait(), 10)
            await stopped(task, stop)
            stats = worker.stats()
            assert (stats.succeeded, stats.released, stats.in_flight) == (1, 7, 0)

        run(main)
        states = [info.state for job_id in job_ids if (info := queue.get_job(job_id))]
        assert states == ["pending"] * 7


async def _true(value: bool) -> bool:
    return value
