"""alkstore.Consumer on an AsyncStore: subscribes, reads and saves offsets through the async API.

Each test runs on a fresh SQLite file, and on a fresh PostgreSQL schema when
``ALKSTORE_PG_DSN`` names a server that answers. Every event loop is bounded
by ``TEST_TIMEOUT_S``; every wait inside by its own timeout.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

import alkstore
from alkstore import AsyncStream, AsyncTxHandle, Consumer, StreamEvent, TxHandle

T = TypeVar("T")

TEST_TIMEOUT_S = 60.0


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main()`` on a fresh event loop, bounded in time."""

    async def bounded() -> T:
        return await asyncio.wait_for(main(), TEST_TIMEOUT_S)

    return asyncio.run(bounded())


async def eventually(check: Callable[[], Awaitable[object]], timeout: float = 10.0) -> None:
    """Await ``check()`` until it returns something truthy, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"condition not met within {timeout} s"
        await asyncio.sleep(0.01)


async def saved(stream: AsyncStream, consumer: str, offset: int) -> bool:
    return await stream.get_offset(consumer) == offset


def test_a_consumer_handles_events_in_order_and_saves_its_offset(target: str) -> None:
    async def main() -> None:
        seen: list[int] = []

        async def handler(event: StreamEvent) -> None:
            await asyncio.sleep(0)
            seen.append(event.payload)

        async with alkstore.open_async(target) as store:
            stream = store.stream("orders")
            offsets = [await stream.publish(n) for n in range(30)]
            consumer = Consumer(store, stream, "projector", handler, batch_size=7)
            stop = asyncio.Event()
            task = asyncio.ensure_future(consumer.run_async(stop))
            await eventually(lambda: saved(stream, "projector", offsets[-1]))
            assert seen == list(range(30))
            last = await stream.publish(30)  # woken, not polled: idle_wait_s is long
            await eventually(lambda: saved(stream, "projector", last))
            stop.set()
            await asyncio.wait_for(task, 10)
        assert seen == list(range(31))
        assert consumer.stats().succeeded == 31

    run(main)


def test_a_consumer_resumes_after_its_saved_offset_with_a_plain_handler(target: str) -> None:
    async def main() -> None:
        seen: list[int] = []
        threads: set[str] = set()

        def handler(event: StreamEvent) -> None:
            threads.add(threading.current_thread().name)
            seen.append(event.payload)

        async with alkstore.open_async(target) as store:
            stream = store.stream("orders")
            offsets = [await stream.publish(n) for n in range(5)]
            await stream.save_offset("projector", offsets[2])
            stop = asyncio.Event()
            task = asyncio.ensure_future(
                Consumer(store, "orders", "projector", handler).run_async(stop)
            )
            await eventually(lambda: saved(stream, "projector", offsets[-1]))
            stop.set()
            await asyncio.wait_for(task, 10)
        assert seen == [3, 4]
        assert threading.current_thread().name not in threads  # off the loop

    run(main)


def test_a_failing_event_is_retried_and_never_skipped(target: str) -> None:
    async def main() -> None:
        calls: list[int] = []

        async def handler(event: StreamEvent) -> None:
            calls.append(event.payload)
            if event.payload == 2 and calls.count(2) < 3:
                raise RuntimeError("flaky")

        async with alkstore.open_async(target) as store:
            stream = store.stream("orders")
            offsets = [await stream.publish(n) for n in range(4)]
            consumer = Consumer(store, stream, "projector", handler)
            stop = asyncio.Event()
            task = asyncio.ensure_future(consumer.run_async(stop))
            await eventually(lambda: saved(stream, "projector", offsets[-1]))
            stop.set()
            await asyncio.wait_for(task, 10)
        assert calls == [0, 1, 2, 2, 2, 3]
        assert (consumer.stats().succeeded, consumer.stats().failed) == (4, 2)

    run(main)


def test_a_transactional_consumer_commits_its_writes_with_its_offset(target: str) -> None:
    async def main() -> None:
        failures: list[int] = []

        async def handler(event: StreamEvent, tx: AsyncTxHandle) -> None:
            assert isinstance(tx, AsyncTxHandle)
            await tx.enqueue_tx("shipments", None, event.payload)
            if event.payload == 2 and not failures:
                failures.append(2)
                raise RuntimeError("crash mid-batch")

        async with alkstore.open_async(target) as store:
            stream = store.stream("orders")
            offsets = [await stream.publish(n) for n in range(3)]
            consumer = Consumer(store, stream, "shipper", handler, transactional=True, batch_size=3)
            stop = asyncio.Event()
            task = asyncio.ensure_future(consumer.run_async(stop))
            await eventually(lambda: saved(stream, "shipper", offsets[-1]))
            stop.set()
            await asyncio.wait_for(task, 10)
            # The failed batch rolled back whole: each event's job exists exactly once.
            shipments = await store.queue("shipments").claim_batch("check", 10)
        assert sorted(job.payload for job in shipments) == [0, 1, 2]
        assert (consumer.stats().succeeded, consumer.stats().failed) == (3, 1)

    run(main)


def test_stop_ends_an_idle_consumer_at_once(target: str) -> None:
    async def main() -> None:
        async def handler(event: StreamEvent) -> None:
            return None

        async with alkstore.open_async(target) as store:
            consumer = Consumer(store, "orders", "c", handler, idle_wait_s=60)
            stop = asyncio.Event()
            task = asyncio.ensure_future(consumer.run_async(stop))
            await asyncio.sleep(0.2)  # let it wait for events
            stop.set()
            await asyncio.wait_for(task, 10)  # far sooner than idle_wait_s

    run(main)


def test_a_cancelled_consumer_loses_no_event(target: str) -> None:
    # Cancelled mid-batch: what was saved was handled; the rest comes again.
    async def main() -> None:
        seen: list[int] = []
        blocked = asyncio.Event()

        async def handler(event: StreamEvent) -> None:
            if event.payload == 5 and not blocked.is_set():
                blocked.set()
                await asyncio.sleep(60)
            seen.append(event.payload)

        async with alkstore.open_async(target) as store:
            stream = store.stream("orders")
            offsets = [await stream.publish(n) for n in range(10)]
            first = Consumer(store, stream, "c", handler, batch_size=3)
            task = asyncio.ensure_future(first.run_async())
            await asyncio.wait_for(blocked.wait(), 10)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert await stream.get_offset("c") == offsets[2]  # the first batch, not the second
            stop = asyncio.Event()
            second = asyncio.ensure_future(Consumer(store, stream, "c", handler).run_async(stop))
            await eventually(lambda: saved(stream, "c", offsets[-1]))
            stop.set()
            await asyncio.wait_for(second, 10)
        assert seen == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8, 9]  # 3 and 4 again: at least once

    run(main)


def test_an_offset_save_failing_while_sqlite_is_locked_is_retried_redelivering_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"

    async def main() -> None:
        handled: list[int] = []
        proceed = asyncio.Event()

        async def handler(event: StreamEvent) -> None:
            await asyncio.wait_for(proceed.wait(), 10)
            handled.append(event.offset)  # returns while the lock is held: the save fails

        async with alkstore.open_async(str(path), busy_timeout_s=0.2) as store:
            stream = store.stream("orders")
            offsets = [await stream.publish(n) for n in range(3)]
            consumer = Consumer(store, stream, "projection", handler, batch_size=1)
            stop = asyncio.Event()
            task = asyncio.ensure_future(consumer.run_async(stop))
            await asyncio.sleep(0.2)  # it is waiting in the first event's handler
            holder = sqlite3.connect(path, isolation_level=None, timeout=10)
            try:
                holder.execute("BEGIN IMMEDIATE")
                proceed.set()
                await asyncio.sleep(1.5)
                holder.execute("ROLLBACK")
            finally:
                holder.close()
            await eventually(lambda: saved(stream, "projection", offsets[-1]))
            stop.set()
            await asyncio.wait_for(task, 10)
        assert handled == offsets  # each once, in order: the failed save was retried, not redone

    run(main)
    warnings = [r.getMessage() for r in caplog.records if r.name == "alkstore.consumer"]
    assert len(warnings) == 1
    assert "saving the offset of 'projection' failed" in warnings[0]


def test_the_sync_run_and_mismatched_handlers_are_refused(tmp_path: Path) -> None:
    async def handle(event: StreamEvent) -> None:
        return None

    async def handle_in(event: StreamEvent, tx: AsyncTxHandle) -> None:
        return None

    def handle_sync_in(event: StreamEvent, tx: TxHandle) -> None:
        return None

    async def main() -> None:
        async with alkstore.open_async(str(tmp_path / "store.db")) as store:
            consumer = Consumer(store, "orders", "c", handle)
            with pytest.raises(TypeError, match=r"await consumer\.run_async\(stop\)"):
                consumer.run(threading.Event())
            with pytest.raises(TypeError, match="AsyncStore"):
                consumer.run_forever()
            with pytest.raises(TypeError, match="coroutine function"):
                Consumer(store, "orders", "c", handle_sync_in, transactional=True)
            Consumer(store, "orders", "c", handle_in, transactional=True)
            with alkstore.open(str(tmp_path / "other.db")) as sync_store:
                with pytest.raises(TypeError, match="not a stream of"):
                    Consumer(store, sync_store.stream("orders"), "c", handle)
                with pytest.raises(TypeError, match="not a stream of"):
                    Consumer(sync_store, store.stream("orders"), "c", handle)

    run(main)
