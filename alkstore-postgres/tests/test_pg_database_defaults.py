"""Databases whose defaults are not the server's (``ALTER DATABASE ... SET``).

Some are SERIALIZABLE by default, for the application's own correctness:
the engine's statements are written for READ COMMITTED, and its sessions
use it whatever the default, so concurrent claims, acks, publishes and lock
attempts never fail with a serialization error. Some end idle sessions
(``idle_session_timeout``): the LISTEN connection, idle between
notifications, is exempt and stays up.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

import alkstore
from alkstore_postgres import PostgresAsyncStore, PostgresStore

WORKERS = 6


@contextlib.contextmanager
def database_set(dsn: str, **defaults: str) -> Iterator[str]:
    """A new database with ``defaults`` (setting names and values); its DSN."""
    name = f"alkstore_defaults_{uuid.uuid4().hex[:12]}"
    database = sql.Identifier(name)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(database))
        for setting, value in defaults.items():
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    database, sql.Identifier(setting), sql.Literal(value)
                )
            )
    try:
        yield psycopg.conninfo.make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(database))


@pytest.fixture
def serializable_dsn(dsn: str) -> Iterator[str]:
    with database_set(dsn, default_transaction_isolation="serializable") as serializable:
        yield serializable


@pytest.fixture
def idle_sessions_ended_dsn(dsn: str) -> Iterator[str]:
    with database_set(dsn, idle_session_timeout="300ms") as ending:
        yield ending


def in_threads(work: Callable[[alkstore.Store], None], dsn: str) -> list[BaseException]:
    """Run ``work`` in ``WORKERS`` threads, each on a store of its own; their errors."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with alkstore.open(dsn) as store:
                work(store)
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


def test_the_engines_sessions_read_committed(serializable_dsn: str) -> None:
    with alkstore.open(serializable_dsn) as store, store.transaction() as tx:
        assert tx.execute("SHOW transaction_isolation") == [("read committed",)]


def test_concurrent_claims_and_acks_never_fail_to_serialize(serializable_dsn: str) -> None:
    with alkstore.open(serializable_dsn) as store, store.transaction() as tx:
        for n in range(600):
            tx.enqueue_tx("work", None, n)
    handled: list[int] = []

    def drain(store: alkstore.Store) -> None:
        queue = store.queue("work")
        while jobs := queue.claim_batch("w", 5):
            assert queue.ack_batch([job.id for job in jobs], "w") == len(jobs)
            handled.extend(job.payload for job in jobs)

    assert in_threads(drain, serializable_dsn) == []
    assert sorted(handled) == list(range(600))


def test_concurrent_publishes_and_lock_attempts_never_fail_to_serialize(
    serializable_dsn: str,
) -> None:
    def publish_and_lock(store: alkstore.Store) -> None:
        for n in range(50):
            store.stream("orders").publish(n)
            lock = store.try_lock("nightly", f"owner-{threading.get_ident()}", 30)
            if lock is not None:
                lock.release()

    assert in_threads(publish_and_lock, serializable_dsn) == []
    with alkstore.open(serializable_dsn) as store:
        offsets = [event.offset for event in store.stream("orders").read_since(0, limit=1000)]
    assert len(offsets) == WORKERS * 50
    assert offsets == sorted(set(offsets))


def test_an_async_store_reads_committed_too(serializable_dsn: str) -> None:
    async def main() -> None:
        async with await alkstore.open_async(serializable_dsn) as store:
            async with store.transaction() as tx:
                assert await tx.execute("SHOW transaction_isolation") == [("read committed",)]
                for n in range(300):
                    await tx.enqueue_tx("work", None, n)
            queue = store.queue("work")
            handled: list[int] = []

            async def drain() -> None:
                while jobs := await queue.claim_batch("w", 5):
                    assert await queue.ack_batch([job.id for job in jobs], "w") == len(jobs)
                    handled.extend(job.payload for job in jobs)

            await asyncio.gather(*(drain() for _ in range(WORKERS)))
            assert sorted(handled) == list(range(300))

    asyncio.run(main())


def test_the_listen_connection_outlives_an_idle_session_timeout(
    idle_sessions_ended_dsn: str,
) -> None:
    with alkstore.open(idle_sessions_ended_dsn) as store, store.listen("orders") as wakes:
        time.sleep(1.2)  # four timeouts
        store.notify("orders", "after the idle spell")
        assert wakes.recv(5) == alkstore.Wake("orders")  # no reconnect wake before it
        assert isinstance(store, PostgresStore)
        assert store.listener_reconnects == 0
        assert store.queue("work").enqueue("pooled connections are replaced") > 0


def test_an_async_listen_connection_outlives_it_too(idle_sessions_ended_dsn: str) -> None:
    async def main() -> None:
        async with await alkstore.open_async(idle_sessions_ended_dsn) as store:
            wakes = await store.listen("orders")
            await asyncio.sleep(1.2)
            await store.notify("orders", "after the idle spell")
            assert await wakes.recv_async(5) == alkstore.Wake("orders")
            assert isinstance(store, PostgresAsyncStore)
            assert store.listener_reconnects == 0
            assert await store.queue("work").enqueue("pooled connections are replaced") > 0
            wakes.close()

    asyncio.run(main())
