"""adopt_tx with driver connections set up the way their owners like them, and
commits the database refuses: never a raw driver error, a hang or a handle
that says it committed what it did not."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import Any

import aiosqlite
import psycopg
import pytest
from psycopg.rows import dict_row

import alkstore
from alkstore import TxState


def dict_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    """The row factory the sqlite3 documentation suggests."""
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


def pending_payloads(store: alkstore.Store, queue: str) -> list[object]:
    return [job.payload for job in store.queue(queue).claim_batch("checker", 100)]


def test_a_sqlite_connection_with_its_own_row_and_text_factories_is_written_through(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "app.db")
    with alkstore.open(path) as store:
        connection = sqlite3.connect(path)
        connection.row_factory = dict_factory
        connection.text_factory = bytes
        try:
            tx = store.adopt_tx(connection)
            tx.enqueue_tx("emails", None, "first")
            tx.enqueue_tx("emails", alkstore.EnqueueOpts(key="k"), "keyed")
            offset = tx.publish_tx("orders", {"n": 1})
            assert tx.save_offset_tx("orders", "billing", offset) is True
            connection.commit()
        finally:
            connection.close()
        assert sorted(map(str, pending_payloads(store, "emails"))) == ["first", "keyed"]
        assert store.stream("orders").read_from_consumer("billing", 10) == []


def test_an_aiosqlite_connection_reading_bytes_is_adopted_not_hung(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")

    async def scenario() -> list[object]:
        async with alkstore.open_async(path) as store, aiosqlite.connect(path) as connection:
            connection.text_factory = bytes
            connection.row_factory = aiosqlite.Row
            tx = await asyncio.wait_for(store.adopt_tx(connection), 10)
            await tx.enqueue_tx("emails", None, "hello")
            await connection.commit()
            jobs = await store.queue("emails").claim_batch("w", 10)
            return [job.payload for job in jobs]

    assert asyncio.run(scenario()) == ["hello"]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sqlite3's autocommit attribute")
def test_a_sqlite3_connection_whose_commit_does_nothing_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    with alkstore.open(path) as store:
        connection = sqlite3.connect(path, autocommit=True)  # type: ignore[call-overload,unused-ignore]
        try:
            with pytest.raises(ValueError, match="autocommit=True"):
                store.adopt_tx(connection)
            assert not connection.in_transaction
        finally:
            connection.close()
        store.queue("emails").enqueue("another writer is not locked out")


def test_a_commit_sqlite_refuses_leaves_the_handle_and_the_connection_rolled_back(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "app.db")
    with alkstore.open(path) as store:
        setup = sqlite3.connect(path)
        setup.executescript(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY);"
            "CREATE TABLE orders (customer INTEGER REFERENCES customers (id)"
            " DEFERRABLE INITIALLY DEFERRED);"
        )
        setup.close()
        connection = sqlite3.connect(path)
        connection.execute("PRAGMA foreign_keys = ON")
        try:
            tx = store.adopt_tx(connection)
            tx.execute("INSERT INTO orders VALUES (:customer)", {"customer": 404})
            tx.enqueue_tx("emails", None, "order confirmed")
            with pytest.raises(alkstore.Database, match="FOREIGN KEY"):
                tx.commit()
            assert tx.state is TxState.ROLLED_BACK
            assert not connection.in_transaction  # the write lock is free again
        finally:
            connection.close()
        store.queue("other").enqueue("another writer gets in")
        assert pending_payloads(store, "emails") == []


def test_a_closed_sqlite_connection_is_told_as_database_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    with alkstore.open(path) as store:
        connection = sqlite3.connect(path)
        tx = store.adopt_tx(connection)
        tx.enqueue_tx("emails", None, "lost with the connection")
        connection.close()
        with pytest.raises(alkstore.Database, match="closed"):
            tx.enqueue_tx("emails", None, "after")
        with pytest.raises(alkstore.Closed):
            tx.commit()
        closed_at_once = store.adopt_tx(sqlite3.connect(path))
        closed_at_once.connection.close()
        closed_at_once.rollback()  # closing rolled back: nothing more to do
        assert closed_at_once.state is TxState.ROLLED_BACK
        assert pending_payloads(store, "emails") == []


def test_a_closed_aiosqlite_connection_is_told_as_database_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")

    async def scenario() -> None:
        async with alkstore.open_async(path) as store:
            connection = await aiosqlite.connect(path)
            tx = await store.adopt_tx(connection)
            await connection.close()
            with pytest.raises(alkstore.Database, match="closed"):
                await tx.enqueue_tx("emails", None, "after")
            with pytest.raises(alkstore.Database, match="closed"):
                await store.adopt_tx(connection)

    asyncio.run(scenario())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="sqlite3 tells extended codes from 3.11")
def test_a_stale_read_snapshot_is_told_as_such_not_as_a_lock_held(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    with alkstore.open(path) as store:
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("BEGIN")
            connection.execute("SELECT count(*) FROM sqlite_master").fetchall()
            store.queue("other").enqueue("written after the caller's read")
            tx = store.adopt_tx(connection)
            with pytest.raises(alkstore.Database, match="BEGIN IMMEDIATE"):
                tx.enqueue_tx("emails", None, "x")
        finally:
            connection.close()


def test_scoped_sessions_are_adopted_through_their_current_session(tmp_path: Path) -> None:
    import sqlalchemy
    from sqlalchemy.ext.asyncio import async_scoped_session, async_sessionmaker, create_async_engine
    from sqlalchemy.orm import scoped_session, sessionmaker

    path = str(tmp_path / "app.db")
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    registry = scoped_session(sessionmaker(engine))
    try:
        with alkstore.open(path) as store:
            tx = store.adopt_tx(registry)
            tx.enqueue_tx("emails", None, "sync")
            registry.commit()
            assert pending_payloads(store, "emails") == ["sync"]
    finally:
        registry.remove()
        engine.dispose()

    async def scenario() -> list[object]:
        async_engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        scoped = async_scoped_session(
            async_sessionmaker(async_engine), scopefunc=asyncio.current_task
        )
        try:
            async with alkstore.open_async(path) as store:
                tx = await store.adopt_tx(scoped)
                await tx.enqueue_tx("emails", None, "async")
                await scoped.commit()
                jobs = await store.queue("emails").claim_batch("w", 10)
                return [job.payload for job in jobs]
        finally:
            await scoped.remove()
            await async_engine.dispose()

    assert asyncio.run(scenario()) == ["async"]


# PostgreSQL


@pytest.fixture
def pg_store(server_dsn: str, dsn: str) -> Any:
    if not dsn.startswith("postgresql"):
        pytest.skip("PostgreSQL only")
    with alkstore.open(dsn) as store:
        yield store


@pytest.mark.parametrize("dsn", ["postgres"], indirect=True)
def test_a_psycopg_connection_with_dict_rows_or_a_raw_cursor_is_written_through(
    pg_store: alkstore.Store, server_dsn: str
) -> None:
    for options in ({"row_factory": dict_row}, {"cursor_factory": psycopg.RawCursor}):
        with psycopg.connect(server_dsn, **options) as connection:
            tx = pg_store.adopt_tx(connection)
            tx.enqueue_tx("emails", None, "plain")
            tx.enqueue_tx("emails", alkstore.EnqueueOpts(key=str(options)), "keyed")
            offset = tx.publish_tx("orders", "event")
            assert tx.save_offset_tx("orders", "billing", offset) is True
            assert tx.execute("SELECT 1 AS one") == [(1,)]
        assert sorted(map(str, pending_payloads(pg_store, "emails"))) == ["keyed", "plain"]


@pytest.mark.parametrize("dsn", ["postgres"], indirect=True)
def test_an_async_psycopg_connection_with_dict_rows_is_written_through(
    dsn: str, server_dsn: str
) -> None:
    async def scenario() -> list[object]:
        async with (
            alkstore.open_async(dsn) as store,
            await psycopg.AsyncConnection.connect(server_dsn, row_factory=dict_row) as connection,
        ):
            tx = await store.adopt_tx(connection)
            await tx.enqueue_tx("emails", alkstore.EnqueueOpts(key="k"), "hello")
            await connection.commit()
            jobs = await store.queue("emails").claim_batch("w", 10)
            return [job.payload for job in jobs]

    assert asyncio.run(scenario()) == ["hello"]


@pytest.mark.parametrize("dsn", ["postgres"], indirect=True)
def test_a_commit_postgres_refuses_leaves_the_handle_rolled_back(
    pg_store: alkstore.Store,
) -> None:
    tx = pg_store.begin_tx()
    tx.execute(
        "CREATE TEMPORARY TABLE refusals (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)"
        " ON COMMIT DROP"
    )
    tx.execute("INSERT INTO refusals VALUES (1), (1)")
    tx.enqueue_tx("emails", None, "never")
    with pytest.raises(alkstore.Database, match="duplicate key"):
        tx.commit()
    assert tx.state is TxState.ROLLED_BACK
    with pytest.raises(alkstore.Closed, match="rolled back"):
        tx.rollback()
    assert pending_payloads(pg_store, "emails") == []


@pytest.mark.parametrize("dsn", ["postgres"], indirect=True)
def test_an_async_commit_postgres_refuses_leaves_the_handle_rolled_back(dsn: str) -> None:
    async def scenario() -> None:
        async with alkstore.open_async(dsn) as store:
            tx = await store.begin_tx()
            await tx.execute(
                "CREATE TEMPORARY TABLE refusals (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)"
                " ON COMMIT DROP"
            )
            await tx.execute("INSERT INTO refusals VALUES (1), (1)")
            await tx.enqueue_tx("emails", None, "never")
            with pytest.raises(alkstore.Database, match="duplicate key"):
                await tx.commit()
            assert tx.state is TxState.ROLLED_BACK
            assert await store.queue("emails").claim_batch("w", 10) == []

    asyncio.run(scenario())
