"""The async API over an engine that has only sync hooks (core's thread offload).

SQLite serves ``open_async`` this way: every hook runs on the store's small
thread pool. These tests pin what the offload itself promises — both ways
of opening, the same errors as the sync API, a bounded number of threads,
and cancellation that never leaves a transaction open or loses a job.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import alkstore
from alkstore import AsyncStore, QueueOpts
from alkstore._async_open import OffloadedStore
from alkstore._offload import OFFLOAD_THREADS

T = TypeVar("T")


def run(coroutine_function: Callable[[], Awaitable[T]]) -> T:
    """Run an async test body on a fresh event loop, bounded in time."""

    async def bounded() -> T:
        return await asyncio.wait_for(coroutine_function(), 120)

    return asyncio.run(bounded())


def test_open_async_is_awaitable_and_an_async_context_manager(tmp_path: Path) -> None:
    async def body() -> None:
        store = await alkstore.open_async(tmp_path / "a.db")
        assert isinstance(store, AsyncStore)
        assert "SQLiteStore" in repr(store)
        await store.close()
        assert store.closed
        async with alkstore.open_async(str(tmp_path / "a.db")) as same:
            assert await same.queue("q").enqueue(1) == 1
        assert same.closed

    run(body)


def test_a_closed_store_refuses_like_the_sync_one(tmp_path: Path) -> None:
    async def body() -> None:
        store = await alkstore.open_async(tmp_path / "a.db")
        queue = store.queue("q")
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(alkstore.Closed):
            await queue.enqueue(1)
        with pytest.raises(alkstore.Closed):
            store.stream("s")

    run(body)


_BAD_INPUT = (alkstore.Error, TypeError, ValueError)


def test_a_store_made_outside_any_loop_belongs_to_the_first_that_uses_it(tmp_path: Path) -> None:
    store = OffloadedStore(alkstore.open(tmp_path / "a.db"))  # as an engine's sync code might
    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(store.queue("q").enqueue(1)) == 1

        async def elsewhere() -> None:
            with pytest.raises(RuntimeError, match=r"belongs to the event loop .* \(still open\)"):
                await store.queue("q").enqueue(2)

        asyncio.run(elsewhere())
        first.run_until_complete(store.close())
    finally:
        first.close()
    assert store.closed


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.queue(""),
        lambda s: s.queue("__alkstore_x"),
        lambda s: s.queue("q", opts={"max_attempts": 2}),
        lambda s: s.stream("s").publish_with_key(7, 1),
        lambda s: s.queue("q").claim_batch("w", 0),
        lambda s: s.queue("q").enqueue({1, 2}),
        lambda s: s.try_lock("l", "owner", -1),
        lambda s: s.schedule("t", "@every fortnight", "q", None),
        lambda s: s.inspect().jobs("q", state="lost"),
        lambda s: s.notify("c", object()),
    ],
)
def test_bad_input_raises_what_the_sync_api_raises(tmp_path: Path, call: Any) -> None:
    target = tmp_path / "a.db"
    with alkstore.open(target) as sync_store, pytest.raises(_BAD_INPUT) as sync_error:
        call(sync_store)

    async def body() -> None:
        async with alkstore.open_async(target) as store:
            with pytest.raises(_BAD_INPUT) as async_error:
                outcome = call(store)
                if asyncio.iscoroutine(outcome):
                    await outcome
            assert type(async_error.value) is type(sync_error.value)
            assert str(async_error.value) == str(sync_error.value)

    run(body)


def test_many_tasks_share_a_few_threads(tmp_path: Path) -> None:
    async def body() -> None:
        async with alkstore.open_async(tmp_path / "a.db") as store:
            queue = store.queue("q")
            await queue.enqueue("warm up")  # the companion's own threads start here
            before = threading.active_count()
            peak = before

            async def enqueue(n: int) -> int:
                nonlocal peak
                job_id = await queue.enqueue(n)
                peak = max(peak, threading.active_count())
                return job_id

            ids = await asyncio.gather(*(enqueue(n) for n in range(300)))
            assert len(set(ids)) == 300
            assert peak - before <= OFFLOAD_THREADS

    run(body)


def test_an_async_event_receiver_refuses_the_blocking_recv(tmp_path: Path) -> None:
    async def body() -> None:
        async with alkstore.open_async(tmp_path / "a.db") as store:
            stream = store.stream("s")
            await stream.publish("one")
            receiver = await stream.subscribe("c")
            with pytest.raises(TypeError, match="recv_async"):
                receiver.recv(0)
            async for event in receiver:
                assert event.payload == "one"
                break
            assert await receiver.save_offset()
            receiver.close()
            assert await stream.get_offset("c") == 1

    run(body)


def test_run_schedules_stops_when_its_event_is_set(tmp_path: Path) -> None:
    async def body() -> None:
        async with alkstore.open_async(tmp_path / "a.db") as store:
            await store.schedule("tick", "@every 1s", "ticks", {"t": 1})
            stop = asyncio.Event()
            runner = asyncio.ensure_future(store.run_schedules(stop, owner="test"))
            await asyncio.sleep(0.3)
            assert not runner.done()
            stop.set()
            await asyncio.wait_for(runner, 10)
            with pytest.raises(TypeError, match=r"asyncio\.Event"):
                await store.run_schedules(threading.Event())  # type: ignore[arg-type]

    run(body)


def test_a_cancelled_run_schedules_leaves_no_thread_behind(tmp_path: Path) -> None:
    async def body() -> None:
        async with alkstore.open_async(tmp_path / "a.db") as store:
            runner = asyncio.ensure_future(store.run_schedules(asyncio.Event(), owner="test"))
            await asyncio.sleep(0.3)
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner
            held = [lock.name for lock in await store.inspect().locks()]
            assert alkstore.SCHEDULER_LOCK not in held, "the cancelled leader released its lock"

    run(body)


# About half a second of work for SQLite, holding the transaction's thread.
_SLOW_SQL = (
    "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 3000000) "
    "SELECT count(*) FROM n"
)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_an_end_cancelled_before_it_ran_still_ends_the_transaction(
    tmp_path: Path, ending: str
) -> None:
    """A commit or rollback queued behind a running statement and cancelled
    before its turn still runs: the transaction never stays open (holding
    SQLite's write lock) behind a handle that says it ended."""
    target = tmp_path / "a.db"

    async def body() -> None:
        async with alkstore.open_async(target) as store:
            tx = await store.begin_tx()
            job_id = await tx.enqueue_tx("q", None, "kept or dropped")
            slow = asyncio.ensure_future(tx.execute(_SLOW_SQL))
            await asyncio.sleep(0.05)  # the statement is running on the transaction's thread
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(getattr(tx, ending)(), 0.01)
            assert not tx.active
            # Waits for the write lock until the transaction ends (5 s at most).
            next_id = await store.queue("q").enqueue("next")
            ready = [job.payload for job in await store.inspect().jobs("q", "pending")]
            if ending == "commit":
                assert (next_id, ready) == (job_id + 1, ["kept or dropped", "next"])
            else:
                assert ready == ["next"]

    run(body)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_an_end_whose_await_is_cancelled_before_it_began_still_ends_the_transaction(
    tmp_path: Path, ending: str
) -> None:
    """``wait_for(tx.commit(), 0)`` cancels the await before the coroutine's first
    step: the end starts when called, so the transaction is not left open."""
    target = tmp_path / "a.db"

    async def body() -> None:
        async with alkstore.open_async(target, busy_timeout_s=1) as store:
            tx = await store.begin_tx()
            await tx.enqueue_tx("q", None, "kept or dropped")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(getattr(tx, ending)(), 0)
            await asyncio.sleep(0.2)
            assert tx.state.value == ("committed" if ending == "commit" else "rolled back")
            await store.queue("q").enqueue("next")  # the write lock is free
            ready = [job.payload for job in await store.inspect().jobs("q", "pending")]
            assert ready == (["kept or dropped", "next"] if ending == "commit" else ["next"])

    run(body)


class Ledger:
    """What the fuzz knows about every job: committed for sure, maybe, acked."""

    def __init__(self) -> None:
        self.committed: set[int] = set()
        self.maybe_committed = 0
        self.acked: set[int] = set()
        self.maybe_acked: set[int] = set()
        self.cancelled = 0


async def _enqueue(store: AsyncStore, ledger: Ledger, n: int) -> None:
    ledger.maybe_committed += 1
    ledger.committed.add(await store.queue("fuzz").enqueue(n))
    ledger.maybe_committed -= 1


async def _enqueue_in_transaction(store: AsyncStore, ledger: Ledger, n: int) -> None:
    ledger.maybe_committed += 2
    async with store.transaction() as tx:
        first = await tx.enqueue_tx("fuzz", None, n)
        second = await tx.enqueue_tx("fuzz", None, -n)
    ledger.committed.update((first, second))
    ledger.maybe_committed -= 2


async def _claim_and_ack(store: AsyncStore, ledger: Ledger, n: int) -> None:
    job = await store.queue("fuzz").claim_one(f"w{n % 3}")
    if job is None:
        return
    ledger.maybe_acked.add(job.id)
    if await job.ack():
        ledger.acked.add(job.id)


_OPERATIONS = (_enqueue, _enqueue_in_transaction, _claim_and_ack)


def test_cancelled_operations_leave_nothing_open_and_lose_no_job(tmp_path: Path) -> None:
    """Thousands of operations, each cancelled at a random point; then every job
    whose enqueue returned is accounted for, exactly once."""
    target = tmp_path / "fuzz.db"
    ledger = Ledger()
    picker = random.Random(14)

    async def fuzz() -> None:
        async with alkstore.open_async(target) as store:
            store.queue("fuzz", QueueOpts(visibility_timeout_s=0.5))
            for round_ in range(100):
                # Most are cut short at random; some may take their time, so that
                # operations finish even on a machine too loaded to finish any in 30 ms.
                tasks = [
                    asyncio.ensure_future(
                        asyncio.wait_for(
                            picker.choice(_OPERATIONS)(store, ledger, round_ * 30 + i),
                            picker.uniform(0, 0.03) if picker.random() < 0.9 else 30.0,
                        )
                    )
                    for i in range(30)
                ]
                outcomes = await asyncio.gather(*tasks, return_exceptions=True)
                ledger.cancelled += sum(isinstance(o, asyncio.TimeoutError) for o in outcomes)
            assert not store._open_txs
            companion = await store._companion()
            # Calls already on a thread finish there, then abandoned transactions roll back.
            for _ in range(200):
                if not companion._open_txs:
                    break
                await asyncio.sleep(0.05)
            assert not companion._open_txs, "a cancelled transaction was left open"

    async def drain() -> tuple[set[int], set[int]]:
        await asyncio.sleep(0.6)  # claims the fuzz abandoned lapse
        drained: set[int] = set()
        async with alkstore.open_async(target) as store:
            queue = store.queue("fuzz")
            while jobs := await queue.claim_batch("drainer", 100):
                claimed = {job.id for job in jobs}
                assert not claimed & drained, "a job was handed out again after its ack"
                # The jobs' leases are 0.5 s: on a loaded machine a claim may lapse
                # before its ack, and the job comes back (or, out of attempts, dies).
                for job in jobs:
                    if await job.ack():
                        drained.add(job.id)
            # A job whose claims were all abandoned ran out of attempts: a dead letter.
            dead = await store.inspect().jobs("fuzz", "dead", limit=10_000)
        return drained, {job.id for job in dead}

    run(fuzz)
    drained, dead = run(drain)
    assert not drained & ledger.acked, "an acked job came back"
    lost = ledger.committed - ledger.acked - ledger.maybe_acked - drained - dead
    assert not lost, f"jobs lost: {sorted(lost)[:10]}"
    assert len(ledger.committed) > 30, "the fuzz must let many operations finish"
    assert ledger.cancelled > 100, "and cancel many"
