"""The async API's fast path on SQLite: short calls run on the event loop's
thread when they need not wait, and never block it when they would."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import alkstore
from alkstore_sqlite._prompt import CHECKPOINT_EVERY

T = TypeVar("T")

PROMPT_TURN_S = 0.002
"""How often core's async store gives the loop a turn between prompt calls, at least."""


def run(coroutine_function: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coroutine_function(), 60)

    return asyncio.run(bounded())


def offload_threads() -> set[threading.Thread]:
    """The live threads of async stores' pools (core names them after the store's
    class). Compare sets: a pool closed by an earlier test may still be ending."""
    return {t for t in threading.enumerate() if t.name.startswith("alkstore-Offloaded")}


def test_short_calls_run_on_the_loop_thread_without_a_pool_thread(tmp_path: Path) -> None:
    async def body() -> None:
        before = offload_threads()
        async with alkstore.open_async(tmp_path / "a.db") as store:
            queue, stream = store.queue("q"), store.stream("s")
            for n in range(CHECKPOINT_EVERY - 10):  # fewer writes than one refusal needs
                await queue.enqueue(n)
            await stream.publish("event")
            jobs = await queue.claim_batch("w", 10)
            assert await queue.ack_batch(jobs, "w") == 10
            assert [e.payload for e in await stream.read_since(0, 10)] == ["event"]
            assert await stream.save_offset("c", 1)
            assert await stream.get_offset("c") == 1
            assert offload_threads() <= before

    run(body)


def test_a_held_write_lock_never_blocks_the_loop(tmp_path: Path) -> None:
    """Another connection holds the write lock for half a second: the enqueue
    waits for it on a thread while the loop goes on ticking."""
    target = tmp_path / "a.db"
    alkstore.open(target).close()
    blocker = sqlite3.connect(target, isolation_level=None)

    async def body() -> None:
        before = offload_threads()
        async with alkstore.open_async(target) as store:
            queue = store.queue("q")
            await queue.enqueue("before")  # the prompt connection is open
            blocker.execute("BEGIN IMMEDIATE")
            loop = asyncio.get_running_loop()
            loop.call_later(0.5, blocker.execute, "COMMIT")
            longest_gap, stop = 0.0, asyncio.Event()

            async def tick() -> None:
                nonlocal longest_gap
                last = time.monotonic()
                while not stop.is_set():
                    await asyncio.sleep(0.01)
                    now = time.monotonic()
                    longest_gap, last = max(longest_gap, now - last), now

            ticker = asyncio.ensure_future(tick())
            started = time.monotonic()
            assert await queue.enqueue("after") == 2
            waited = time.monotonic() - started
            stop.set()
            await ticker
            assert waited >= 0.4, "the enqueue waited for the lock"
            # A stall would last the busy timeout (5 s); a loaded machine may lag 0.2 s.
            assert longest_gap < 1.0, f"the loop stalled for {longest_gap:.3f} s"
            assert offload_threads() - before, "it waited on a thread of the store's pool"

    try:
        run(body)
    finally:
        blocker.close()


def test_prompt_writes_leave_checkpoints_to_pooled_connections(tmp_path: Path) -> None:
    """The prompt connection never checkpoints; every CHECKPOINT_EVERY writes (or
    CHECKPOINT_TEXT characters of payload) one goes to a thread, which first
    checkpoints and restarts the WAL: it stays small."""
    target = tmp_path / "a.db"
    payload = "x" * 2000

    wal = Path(f"{target}-wal")

    async def body() -> int:
        largest = 0
        async with alkstore.open_async(target) as store:
            queue = store.queue("q")
            for n in range(5000):  # ~10 MB of payloads, ~40 MB of WAL without checkpoints
                await queue.enqueue(payload)
                if n % 100 == 0:
                    largest = max(largest, wal.stat().st_size)
        return largest

    assert run(body) < 12 * 2**20


def test_big_prompt_batches_leave_checkpoints_to_pooled_connections_too(tmp_path: Path) -> None:
    """A few writes of a thousand rows each fill the WAL as fast as thousands of
    small ones: the rows they changed count too."""
    target = tmp_path / "a.db"
    wal = Path(f"{target}-wal")
    with alkstore.open(target) as store, store.transaction() as tx:
        for n in range(40_000):
            tx.enqueue_tx("q", None, {"n": n, "padding": "x" * 200})

    async def body() -> int:
        largest = 0
        async with alkstore.open_async(target) as store:
            queue = store.queue("q")
            while jobs := await queue.claim_batch("w", 1000):
                assert await queue.ack_batch(jobs, "w") == len(jobs)
                largest = max(largest, wal.stat().st_size)
        return largest

    # 4.5 MB here; counting only the writes (80), the drain grew 30 MB of WAL.
    assert run(body) < 16 * 2**20


def test_many_tasks_writing_without_pause_still_let_the_wal_restart(tmp_path: Path) -> None:
    """32 tasks keep the prompt connection busy: a passive checkpoint beside them
    never catches up (the WAL grew past 800 MB for 60,000 jobs), so the asked-for
    checkpoint holds writers back until the WAL restarts."""
    target = tmp_path / "a.db"
    wal = Path(f"{target}-wal")
    jobs = 20_000

    async def body() -> int:
        largest = 0
        async with alkstore.open_async(target) as store:
            queue = store.queue("q")

            async def enqueue_share(first: int) -> None:
                nonlocal largest
                for n in range(first, jobs, 32):
                    await queue.enqueue({"n": n, "padding": "x" * 200})
                    if n % 320 == 0:
                        largest = max(largest, wal.stat().st_size)

            await asyncio.gather(*(enqueue_share(first) for first in range(32)))
            assert (await store.inspect().queues())[0].ready == jobs
        return largest

    # About 4 MB; a checkpoint that missed its 200 ms leaves the next one more.
    assert run(body) < 32 * 2**20


def test_a_loop_of_prompt_calls_leaves_the_loop_turns_for_other_tasks(tmp_path: Path) -> None:
    """Reads never go to a thread, so no call of this loop needs to suspend;
    yet a task beside it gets a turn at least every PROMPT_TURN_S."""

    async def body() -> None:
        before = offload_threads()
        async with alkstore.open_async(tmp_path / "a.db") as store:
            stream = store.stream("s")
            await stream.publish("one")
            turns = 0

            async def count_turns() -> None:
                nonlocal turns
                while True:
                    await asyncio.sleep(0)  # one turn per turn the loop gives it
                    turns += 1

            counter = asyncio.ensure_future(count_turns())
            await asyncio.sleep(0)
            turns, started = 0, time.monotonic()
            for _ in range(3000):
                await stream.read_since(0, 10)
            elapsed = time.monotonic() - started
            counter.cancel()
            # Without the turns it is 0; a loaded machine may pause the process.
            assert turns >= max(1, elapsed / PROMPT_TURN_S / 10), (turns, elapsed)
            assert offload_threads() <= before

    run(body)


def test_with_full_durability_writes_go_to_threads(tmp_path: Path) -> None:
    """Every commit flushes the disk there: never on the loop's thread."""

    async def body() -> None:
        before = offload_threads()
        async with alkstore.open_async(tmp_path / "a.db", durability="full") as store:
            await store.queue("q").enqueue(1)
            assert offload_threads() - before
            assert await store.queue("q").get_job(1) is not None

    run(body)
