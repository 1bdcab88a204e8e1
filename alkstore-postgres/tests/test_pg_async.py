"""The native async store: cancellation at any await leaves nothing open and
loses no job; idle receivers and parked workers cost no thread; LISTEN on the
event loop follows receivers and rides out a lost connection; adopt_tx of a
``psycopg.AsyncConnection``."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable

import psycopg
import pytest
from psycopg import sql

import alkstore
from alkstore import RECONNECT_CHANNEL, QueueOpts
from alkstore_postgres import PostgresAsyncStore, _async_store


def _with_application_name(dsn: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, application_name=name)


async def _open(dsn: str, schema: str, **options: object) -> PostgresAsyncStore:
    store = await alkstore.open_async(dsn, schema=schema, **options)
    assert isinstance(store, PostgresAsyncStore)
    return store


def _backends(dsn: str, application_name: str) -> list[tuple[str, str]]:
    """(state, query) of every server backend of ``application_name``."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT state, query FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return [(str(state), str(query)) for state, query in rows]


class _Ledger:
    """What the fuzz knows for sure, and what a cancellation left uncertain."""

    def __init__(self) -> None:
        self.enqueued: set[int] = set()
        """Jobs whose enqueue (or transaction's commit) returned."""
        self.acked: Counter[int] = Counter()
        """Jobs whose ack returned True, with how often."""
        self.maybe_acked: set[int] = set()
        """Jobs whose ack was cancelled: it may have landed."""


async def _fuzz_worker(
    store: PostgresAsyncStore, ledger: _Ledger, rng: random.Random, operations: int
) -> int:
    """Run ``operations`` random operations, each under a random tiny timeout;
    return how many timed out."""
    queue = store.queue("fuzz")

    async def enqueue() -> None:
        ledger.enqueued.add(await queue.enqueue({"n": rng.random()}))

    async def claim_and_ack() -> None:
        job = await queue.claim_one("fuzzer")
        if job is None:
            return
        if rng.random() < 0.1:
            await job.release()
            return
        try:
            acked = await job.ack()
        except asyncio.CancelledError:
            ledger.maybe_acked.add(job.id)
            raise
        if acked:
            ledger.acked[job.id] += 1

    async def claim_batch_and_ack() -> None:
        jobs = await queue.claim_batch("fuzzer", 5)
        try:
            await queue.ack_batch(jobs, "fuzzer")
        except asyncio.CancelledError:
            ledger.maybe_acked.update(job.id for job in jobs)
            raise
        ledger.maybe_acked.update(job.id for job in jobs)  # ack_batch says how many, not which

    async def transaction() -> None:
        async with store.transaction() as tx:
            ids = [await tx.enqueue_tx("fuzz", None, k) for k in range(rng.randint(1, 4))]
            await tx.publish_tx("fuzz-events", {"ids": ids})
            await tx.execute("SELECT pg_sleep(0.0005)")
            if rng.random() < 0.2:
                raise _Abandoned
        ledger.enqueued.update(ids)

    async def failing_group() -> None:
        """A group of operations one of which fails: the others are cancelled."""
        tasks = [asyncio.ensure_future(op()) for op in (enqueue, claim_and_ack, transaction)]
        tasks.append(asyncio.ensure_future(_fail_soon(rng.uniform(0, 0.002))))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            for task in tasks:  # collected: the group's failure is the one raised
                if not task.cancelled():
                    task.exception()

    operations_by_weight: list[Callable[[], Awaitable[None]]] = [
        enqueue, enqueue, enqueue, claim_and_ack, claim_and_ack, claim_batch_and_ack,
        transaction, transaction, failing_group,
    ]  # fmt: skip
    timed_out = 0
    for _ in range(operations):
        operation = rng.choice(operations_by_weight)
        timeout = rng.choice((0.0, rng.uniform(0.0, 0.002), rng.uniform(0.0, 0.01), 1.0))
        try:
            await asyncio.wait_for(operation(), timeout)
        except asyncio.TimeoutError:
            timed_out += 1
        except (_Abandoned, _GroupFailed):
            pass
    return timed_out


class _Abandoned(Exception):
    """A transaction block that raises: it rolls back."""


class _GroupFailed(Exception):
    """One operation of a group failed."""


async def _fail_soon(delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    raise _GroupFailed


def test_operations_cancelled_at_random_points_leave_nothing_open_and_lose_no_job(
    dsn: str, schema: str
) -> None:
    application_name = f"alkstore-fuzz-{uuid.uuid4().hex[:12]}"
    target = _with_application_name(dsn, application_name)
    visibility_s = 1.0

    async def scenario() -> tuple[_Ledger, int, set[int]]:
        store = await _open(target, schema, pool_max_size=4)
        try:
            store.queue("fuzz", QueueOpts(visibility_timeout_s=visibility_s, max_attempts=1000))
            ledger = _Ledger()
            workers = [_fuzz_worker(store, ledger, random.Random(seed), 400) for seed in range(8)]
            timed_out = sum(await asyncio.wait_for(asyncio.gather(*workers), 45))
            # Nothing is left in a transaction or mid-statement, and the pool works.
            backends = await _once_cleanups_ran(dsn, application_name)
            assert all(state == "idle" for state, _ in backends), backends
            stats = store.pool.get_stats()
            assert stats.get("requests_waiting", 0) == 0, stats
            # Claims a cancellation lost come back after their visibility timeout.
            await asyncio.sleep(visibility_s + 0.2)
            drained = await _drain(store)
            return ledger, timed_out, drained
        finally:
            await asyncio.wait_for(store.close(), 10)

    ledger, timed_out, drained = asyncio.run(scenario())
    assert timed_out > 500, "the fuzz cancelled too few operations to prove anything"
    assert max(ledger.acked.values(), default=1) == 1, "a job was acked twice"
    assert not set(ledger.acked) & drained, "a job acked was still there"
    lost = ledger.enqueued - set(ledger.acked) - ledger.maybe_acked - drained
    assert not lost, f"{len(lost)} jobs whose enqueue returned are gone: {sorted(lost)[:10]}"
    # Closing the store closed them all; a server backend leaves pg_stat_activity
    # a moment after its client hung up (seen still there on a loaded machine).
    deadline = time.monotonic() + 10
    while (left := _backends(dsn, application_name)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []


async def _once_cleanups_ran(dsn: str, application_name: str) -> list[tuple[str, str]]:
    """The backends of ``application_name`` once no backend is busy any more, or
    after 5 s. A cancelled operation's caller goes on while its shielded clean-up
    (a rollback, a connection closed or given back) still runs, on the loop and
    on the server: a connection left in a transaction stays so, one being
    cleaned up does not."""
    deadline = time.monotonic() + 5
    while True:
        backends = await asyncio.to_thread(_backends, dsn, application_name)
        if all(state == "idle" for state, _ in backends) or time.monotonic() > deadline:
            return backends
        await asyncio.sleep(0.05)


async def _drain(store: PostgresAsyncStore) -> set[int]:
    """Claim and ack every job left in the fuzz queue; their ids."""
    queue = store.queue("fuzz")
    drained: set[int] = set()
    while jobs := await queue.claim_batch("drainer", 100):
        assert not {job.id for job in jobs} & drained, "a job was handed out again after its ack"
        # The leases are 1 s: on a loaded machine a claim may lapse before its
        # ack, and the job comes back to be drained again, not lost.
        for job in jobs:
            if await job.ack():
                drained.add(job.id)
    assert await store.inspect().jobs("fuzz") == []  # none left, none dead
    return drained


def test_a_cancelled_transaction_block_rolls_back_and_gives_its_connection_back(
    dsn: str, schema: str
) -> None:
    async def scenario() -> None:
        store = await _open(dsn, schema, pool_max_size=1)
        try:
            for round_ in range(20):
                task = asyncio.ensure_future(_slow_transaction(store))
                await asyncio.sleep(0.01)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                # The only pooled connection is free again, outside any transaction.
                # (Waited for here, so the next round's checkout never races its
                # return: on Python < 3.12 asyncio.wait_for, which the pool uses,
                # may swallow a cancellation that meets a connection coming free.)
                assert await asyncio.wait_for(store.queue("t").enqueue(round_), 5) > 0
            jobs = await store.queue("t").claim_batch("w", 100)
            assert sorted(job.payload for job in jobs) == list(range(20))
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_checkout_cancelled_while_it_checks_the_connection_gives_it_back(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled connection that has input waiting costs a round trip to check
    before it is handed out (here made slow); a cancellation during that round
    trip must not lose the connection from the pool."""
    import alkstore_postgres._async_store as async_store

    still_connected = async_store._still_connected

    async def slow_check(connection: psycopg.AsyncConnection) -> bool:
        await asyncio.sleep(0.2)
        return await still_connected(connection)

    monkeypatch.setattr(async_store, "_still_connected", slow_check)

    async def scenario() -> None:
        store = await _open(dsn, schema, pool_max_size=1, connect_timeout_s=2)
        try:
            for round_ in range(3):
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(store.queue("t").enqueue(round_), 0.1)
                # The pool's only connection is back: the next checkout gets it.
                assert await asyncio.wait_for(store.queue("t").enqueue(round_), 5) > 0
            assert store.pool.get_stats()["connections_num"] == 1
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_connection_given_back_goes_to_a_waiting_checkout_not_to_the_spare(
    dsn: str, schema: str
) -> None:
    """With one pooled connection and many tasks, each connection given back
    while another task waits on the pool reaches it at once: none waits out
    the pool's timeout while the connection sits idle as the store's spare."""

    async def scenario() -> None:
        store = await _open(dsn, schema, pool_max_size=1, connect_timeout_s=3)
        try:
            queue = store.queue("t")
            started = time.monotonic()
            for round_ in range(5):
                ids = await asyncio.gather(*(queue.enqueue([round_, n]) for n in range(20)))
                assert len(set(ids)) == 20
            assert time.monotonic() - started < 3, "a checkout waited for the pool's timeout"
            assert len(await queue.claim_batch("w", 200)) == 100
            assert store.pool.get_stats()["connections_num"] == 1
        finally:
            await store.close()

    asyncio.run(scenario())


def test_the_spare_goes_through_the_pool_on_its_turn_in_a_quiet_service_too(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held back as the spare, a connection escapes the pool's rules (its
    ``max_lifetime``); a store with few calls still sends it through the pool
    once ``_SPARE_TURN_S`` has passed, not only every 256th give-back."""
    monkeypatch.setattr(_async_store, "_SPARE_TURN_S", 0.3)

    async def scenario() -> None:
        store = await _open(dsn, schema, pool_min_size=1, pool_max_size=2)
        try:
            queue = store.queue("t")
            await queue.enqueue(1)  # its connection is kept as the spare
            assert store.pool.get_stats().get("pool_available", 0) == 0
            await asyncio.sleep(0.4)
            await queue.enqueue(2)  # the turn: back to the pool
            assert store.pool.get_stats().get("pool_available", 0) == 1
            await queue.enqueue(3)  # kept again until the next turn
            assert store.pool.get_stats().get("pool_available", 0) == 0
        finally:
            await store.close()

    asyncio.run(scenario())


async def _slow_transaction(store: PostgresAsyncStore) -> None:
    async with store.transaction() as tx:
        await tx.enqueue_tx("t", None, "never")
        await tx.execute("SELECT pg_sleep(10)")


def test_idle_receivers_and_parked_workers_start_no_thread(dsn: str, schema: str) -> None:
    async def scenario() -> None:
        before = threading.active_count()
        store = await _open(dsn, schema)
        done: asyncio.Queue[object] = asyncio.Queue()
        stop = asyncio.Event()

        async def handle(job: alkstore.AsyncJob) -> None:
            await done.put(job.payload)

        try:
            receivers = [await store.listen(f"channel {n % 10}") for n in range(50)]
            workers = [
                asyncio.ensure_future(
                    alkstore.Worker(store, f"work {n}", handle, idle_wait_s=60).run_async(stop)
                )
                for n in range(4)
            ]
            await asyncio.sleep(0.5)  # every worker found its queue empty and parked
            # No thread: none for LISTEN, none per receiver or worker, and no
            # companion store (its pool and offload threads) for these paths.
            assert threading.active_count() == before
            assert len(await store.listening_channels()) == 10 + 4
            await store.queue("work 0").enqueue("go")
            assert await asyncio.wait_for(done.get(), 10) == "go"
            assert threading.active_count() == before
            stop.set()
            await asyncio.wait_for(asyncio.gather(*workers), 10)
            for receiver in receivers:
                receiver.close()
            await asyncio.sleep(0.2)
            assert await store.listening_channels() == set()
        finally:
            stop.set()
            await store.close()

    asyncio.run(scenario())


def test_the_listener_reconnects_and_says_so(dsn: str, schema: str) -> None:
    application_name = f"alkstore-listener-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        store = await _open(_with_application_name(dsn, application_name), schema)
        try:
            receiver = await store.listen("news")
            await asyncio.to_thread(_terminate_listener, dsn, application_name)
            assert await receiver.recv_async(10) == alkstore.Wake(RECONNECT_CHANNEL)
            assert store.listener_reconnects == 1
            await store.notify("news", None)
            assert await receiver.recv_async(10) == alkstore.Wake("news")
        finally:
            await store.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("first_listen_too", [False, True])
def test_a_listen_returns_only_once_its_channel_is_listened_to(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch, first_listen_too: bool
) -> None:
    """With every LISTEN/UNLISTEN round trip slow (a busy server), receivers keep
    subscribing while the listener's statements are in flight: a listen that
    returned before its own LISTEN ran would lose the notify sent next."""
    import alkstore_postgres._async_wakes as async_wakes

    run_all = async_wakes._run_all

    async def slow_run_all(connection: psycopg.AsyncConnection, statements: object) -> None:
        batch = list(statements)  # type: ignore[call-overload]
        if batch:
            await asyncio.sleep(0.2)
        await run_all(connection, batch)

    monkeypatch.setattr(async_wakes, "_run_all", slow_run_all)

    async def scenario() -> None:
        listening, notifying = await _open(dsn, schema), await _open(dsn, schema)
        try:
            if first_listen_too:  # the first two subscribe while the connection is made
                first = asyncio.ensure_future(listening.listen("first"))
                await asyncio.sleep(0.05)
                second = await listening.listen("second")
                await notifying.notify("second", None)
                assert await second.recv_async(5) == alkstore.Wake("second")
                (await first).close()
                second.close()
            for round_ in range(4):  # each listen comes while the last UNLISTEN runs
                receiver = await listening.listen(f"c{round_}")
                await notifying.notify(f"c{round_}", round_)
                assert await receiver.recv_async(5) == alkstore.Wake(f"c{round_}")
                receiver.close()
                await asyncio.sleep(0.05)
        finally:
            await listening.close()
            await notifying.close()

    asyncio.run(scenario())


def _terminate_listener(dsn: str, application_name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        killed = connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND query LIKE 'LISTEN %%'",
            (application_name,),
        ).fetchall()
    assert killed == [(True,)], killed


def test_adopt_tx_takes_an_async_connection_to_the_stores_database(dsn: str, schema: str) -> None:
    other_database = f"alkstore_async_other_{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        store = await _open(dsn, schema)
        try:
            async with await psycopg.AsyncConnection.connect(dsn) as connection:
                tx = await store.adopt_tx(connection)
                assert tx.connection is connection
                job_id = await tx.enqueue_tx("adopted", None, "x")
                await connection.rollback()
                assert await store.queue("adopted").get_job(job_id) is None
                tx = await store.adopt_tx(connection)
                job_id = await tx.enqueue_tx("adopted", None, "y")
                await connection.commit()
                assert (await store.queue("adopted").get_job(job_id)) is not None
            elsewhere = psycopg.conninfo.make_conninfo(dsn, dbname=other_database)
            async with await psycopg.AsyncConnection.connect(elsewhere) as connection:
                with pytest.raises(ValueError, match="connection"):
                    await store.adopt_tx(connection)
            with pytest.raises(TypeError, match="AsyncConnection"):
                await store.adopt_tx("not a connection")
        finally:
            await store.close()

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(other_database)))
    try:
        asyncio.run(scenario())
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(other_database))
            )


def test_open_async_takes_the_options_of_open(dsn: str, schema: str) -> None:
    async def scenario() -> None:
        with pytest.raises(TypeError, match="nonsense"):
            await alkstore.open_async(dsn, schema=schema, nonsense=1)
        with pytest.raises(ValueError, match="pool_max_size"):
            await alkstore.open_async(dsn, schema=schema, pool_max_size=0)
        with pytest.raises(alkstore.Database, match="cannot connect"):
            await alkstore.open_async(
                "postgresql://postgres@127.0.0.1:1/postgres", connect_timeout_s=1
            )

    asyncio.run(scenario())
