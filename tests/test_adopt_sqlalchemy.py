"""``adopt_tx`` through SQLAlchemy: alkstore's writes ride SQLAlchemy's own transaction.

Each test runs on SQLite and on PostgreSQL, through a ``Session`` and through
a ``Connection`` — with the sync API, and again with the async one
(``AsyncSession``, ``AsyncConnection``; aiosqlite and psycopg's async
driver). What the adopting store writes is checked through a peer store of
the test's own: nothing shows before SQLAlchemy commits, everything after
it, nothing after its rollback, and a savepoint rolled back drops exactly
what was written inside it. The handle leaves ending the transaction to
SQLAlchemy (its ``commit``/``rollback`` raise ``RuntimeError``) and ends
with it (``Closed`` after). A session on another database is refused.

The SQLAlchemy engines on SQLite use the SAVEPOINT recipe of SQLAlchemy's
SQLite dialect documentation (the driver begins nothing, SQLAlchemy emits
BEGIN): without it a savepoint that opens the session's transaction commits
when it is released. On PostgreSQL each test gets a fresh schema, for
alkstore's tables (``schema=``) and the business table (libpq's
``options=-csearch_path=``), dropped after.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import URL, Connection, Engine, String, create_engine, event, insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import alkstore
from alkstore import Wake

pytestmark = pytest.mark.timeout(120)

QUIET_S = 0.3
"""How long a wake that must not come is waited for."""
WAKE_S = 10.0
"""How long a wake that must come may take."""

Holder = Session | Connection
AsyncHolder = AsyncSession | AsyncConnection


class Base(DeclarativeBase):
    pass


class Note(Base):
    """The business row written beside alkstore's side effects."""

    __tablename__ = "sa_notes"

    key: Mapped[str] = mapped_column(String(50), primary_key=True)


class Refused(Exception):
    """Raised inside a savepoint to roll back to it."""


# One database, as alkstore and SQLAlchemy each name it


@dataclass(frozen=True)
class Database:
    schema: str | None
    """PostgreSQL's schema of alkstore's tables and the business table; None on SQLite."""
    target: str
    """alkstore's target."""
    url: URL
    """SQLAlchemy's URL of the same database, sync driver."""
    async_url: URL
    """And with an asyncio driver."""

    @classmethod
    def sqlite(cls, path: Path) -> Database:
        return cls(
            None,
            str(path),
            URL.create("sqlite", database=str(path)),
            URL.create("sqlite+aiosqlite", database=str(path)),
        )

    @classmethod
    def postgres(cls, server: URL, schema: str) -> Database:
        """alkstore's tables in ``schema`` and, by the search path, the business table too."""
        search_path = {"options": f"-csearch_path={schema}"}
        target = server.set(drivername="postgresql").update_query_dict(
            {"schema": schema, **search_path}
        )
        url = server.set(drivername="postgresql+psycopg").update_query_dict(search_path)
        # create_async_engine picks psycopg's async dialect for the same URL
        return cls(schema, target.render_as_string(hide_password=False), url, url)


def use_savepoints_on_sqlite(engine: Engine) -> None:
    """SQLAlchemy's recipe: pysqlite begins nothing itself, SQLAlchemy emits BEGIN."""

    @event.listens_for(engine, "connect")
    def driver_begins_nothing(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def emit_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN")


@contextlib.contextmanager
def sync_engine(db: Database) -> Iterator[Engine]:
    engine = create_engine(db.url)
    if engine.dialect.name == "sqlite":
        use_savepoints_on_sqlite(engine)
    try:
        yield engine
    finally:
        engine.dispose()


@contextlib.asynccontextmanager
async def async_engine(db: Database) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(db.async_url)
    if engine.dialect.name == "sqlite":
        use_savepoints_on_sqlite(engine.sync_engine)
    try:
        yield engine
    finally:
        await engine.dispose()


def drop_schema(server_dsn: str, schema: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A fresh database holding the business table ``sa_notes`` (made by SQLAlchemy)."""
    if request.param == "sqlite":
        made = Database.sqlite(tmp_path / "app.db")
    else:
        server: str = request.getfixturevalue("server_dsn")
        made = Database.postgres(make_url(server), f"alkstore_sa_{uuid.uuid4().hex[:12]}")
    try:
        with alkstore.open(made.target), sync_engine(made) as engine:
            Base.metadata.create_all(engine)
        yield made
    finally:
        if made.schema is not None:
            drop_schema(request.getfixturevalue("server_dsn"), made.schema)


@pytest.fixture
def elsewhere(db: Database, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """Another database of the same kind as ``db``'s: another file, or another
    database of the server (the same schema name: the likeliest mix-up)."""
    if db.schema is None:
        yield Database.sqlite(tmp_path / "elsewhere.db")
        return
    server: str = request.getfixturevalue("server_dsn")
    name = f"alkstore_sa_other_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server, autocommit=True) as connection:
        try:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege as exc:
            pytest.skip(f"the server refuses CREATE DATABASE: {exc}")
        force = " WITH (FORCE)" if connection.info.server_version >= 130_000 else ""
    try:
        yield Database.postgres(make_url(server).set(database=name), db.schema)
    finally:
        with psycopg.connect(server, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}" + force).format(sql.Identifier(name))
            )


@pytest.fixture(params=["session", "connection"])
def kind(request: pytest.FixtureRequest) -> str:
    """What the application holds: an ORM ``Session`` or a Core ``Connection``."""
    param: str = request.param
    return param


@pytest.fixture
def peer(db: Database) -> Iterator[alkstore.Store]:
    """A store of the test's own, on the same database: what others see."""
    with alkstore.open(db.target) as store:
        yield store


# What the peer sees


def side_effects(*labels: str) -> dict[str, list[str]]:
    """What :func:`seen` shows once the side effects ``labels`` committed."""
    return {"jobs": sorted(labels), "events": sorted(labels), "offsets": sorted(labels)}


NOTHING = side_effects()


def seen(peer: alkstore.Store) -> dict[str, list[str]]:
    """The committed jobs, events and consumer offsets, by label (reads only: it
    never waits on the write lock of a transaction still open)."""
    view = peer.inspect()
    return {
        "jobs": sorted(str(info.payload) for info in view.jobs("emails")),
        "events": sorted(str(event.payload) for event in peer.stream("orders").read_since(0)),
        "offsets": sorted(
            consumer.name.removeprefix("reader-")
            for stream in view.streams()
            if stream.name == "orders"
            for consumer in stream.consumers
        ),
    }


def notes(peer: alkstore.Store) -> set[str]:
    """The committed business rows (only once no transaction holds SQLite's write lock)."""
    with peer.transaction() as tx:
        return {str(row[0]) for row in tx.execute("SELECT key FROM sa_notes")}


# Writing through the handle


def write(tx: alkstore.TxHandle, label: str, channel: str = "dashboard") -> None:
    """A job, an event, an offset saved at that event and a notification: ``label``."""
    tx.enqueue_tx("emails", None, label)
    offset = tx.publish_tx("orders", label)
    assert tx.save_offset_tx("orders", f"reader-{label}", offset)
    tx.notify_tx(channel, label)


async def write_async(tx: alkstore.AsyncTxHandle, label: str, channel: str = "dashboard") -> None:
    await tx.enqueue_tx("emails", None, label)
    offset = await tx.publish_tx("orders", label)
    assert await tx.save_offset_tx("orders", f"reader-{label}", offset)
    await tx.notify_tx(channel, label)


def add_note(holder: Holder, key: str) -> None:
    holder.execute(insert(Note).values(key=key))


async def add_note_async(holder: AsyncHolder, key: str) -> None:
    await holder.execute(insert(Note).values(key=key))


@contextlib.contextmanager
def holding(engine: Engine, kind: str) -> Iterator[Holder]:
    if kind == "session":
        with Session(engine) as session:
            yield session
    else:
        with engine.connect() as connection:
            yield connection


@contextlib.asynccontextmanager
async def holding_async(engine: AsyncEngine, kind: str) -> AsyncIterator[AsyncHolder]:
    if kind == "session":
        async with AsyncSession(engine) as session:
            yield session
    else:
        async with engine.connect() as connection:
            yield connection


# Sync: Session and Connection


def test_side_effects_commit_with_sqlalchemys_commit_and_not_before(
    db: Database, peer: alkstore.Store, kind: str
) -> None:
    with (
        alkstore.open(db.target) as store,
        sync_engine(db) as engine,
        peer.listen("dashboard") as wakes,
        holding(engine, kind) as holder,
    ):
        add_note(holder, "orm")
        tx = store.adopt_tx(holder)
        tx.execute("INSERT INTO sa_notes (key) VALUES (:key)", {"key": "portable"})
        write(tx, "placed")
        assert seen(peer) == NOTHING, "visible before SQLAlchemy committed"
        assert wakes.recv(QUIET_S) is None
        holder.commit()
        assert wakes.recv(WAKE_S) == Wake("dashboard")
        assert seen(peer) == side_effects("placed")
    assert notes(peer) == {"orm", "portable"}


def test_sqlalchemys_rollback_leaves_nothing(db: Database, peer: alkstore.Store, kind: str) -> None:
    with (
        alkstore.open(db.target) as store,
        sync_engine(db) as engine,
        peer.listen("dashboard") as wakes,
        holding(engine, kind) as holder,
    ):
        tx = store.adopt_tx(holder)  # begins the transaction: nothing had yet
        write(tx, "rolled back")
        tx.execute("INSERT INTO sa_notes (key) VALUES (:key)", {"key": "portable"})
        add_note(holder, "orm")
        holder.rollback()
        assert wakes.recv(QUIET_S) is None
        assert seen(peer) == NOTHING
    assert notes(peer) == set()


@pytest.mark.parametrize("inside", ["alkstore only", "with a row"])
@pytest.mark.parametrize("adopted", ["before the savepoint", "inside it"])
def test_a_rolled_back_savepoint_drops_exactly_what_was_written_inside_it(
    db: Database, peer: alkstore.Store, kind: str, adopted: str, inside: str
) -> None:
    """``adopted`` inside the savepoint: the savepoint is the transaction's first
    statement. ``inside``: whether SQLAlchemy itself writes in the savepoint too
    (an ORM Session emits its SAVEPOINT lazily, when it next uses its connection)."""
    outer = adopted == "before the savepoint"
    with (
        alkstore.open(db.target) as store,
        sync_engine(db) as engine,
        peer.listen("inner") as inner_wakes,
        peer.listen("dashboard") as wakes,
        holding(engine, kind) as holder,
    ):
        if outer:
            tx = store.adopt_tx(holder)
            add_note(holder, "outer")
            write(tx, "outer")
        with contextlib.suppress(Refused), holder.begin_nested():
            if inside == "with a row":
                add_note(holder, "inner")
            if not outer:
                tx = store.adopt_tx(holder)
            write(tx, "inner", channel="inner")
            raise Refused
        write(tx, "after")  # the handle goes on in the outer transaction
        add_note(holder, "after")
        holder.commit()
        assert wakes.recv(WAKE_S) == Wake("dashboard")
        assert inner_wakes.recv(QUIET_S) is None, "a notify rolled back to its savepoint woke"
    expected = ["outer", "after"] if outer else ["after"]
    assert seen(peer) == side_effects(*expected)
    assert notes(peer) == set(expected)


def test_a_released_savepoint_wakes_nobody_until_the_outer_commit(
    db: Database, peer: alkstore.Store, kind: str
) -> None:
    with (
        alkstore.open(db.target) as store,
        sync_engine(db) as engine,
        peer.listen("dashboard") as wakes,
        holding(engine, kind) as holder,
    ):
        with holder.begin_nested():  # the transaction's first statement is the SAVEPOINT
            tx = store.adopt_tx(holder)
            write(tx, "inner")
        # released: part of the outer transaction now, which has not committed
        assert wakes.recv(QUIET_S) is None, "woken by the savepoint's release"
        assert seen(peer) == NOTHING
        write(tx, "outer")
        holder.commit()
        assert wakes.recv(WAKE_S) == Wake("dashboard")
        assert seen(peer) == side_effects("inner", "outer")


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_the_handle_ends_with_sqlalchemys_transaction(
    db: Database, peer: alkstore.Store, kind: str, ending: str, request: pytest.FixtureRequest
) -> None:
    with (
        alkstore.open(db.target) as store,
        sync_engine(db) as engine,
        holding(engine, kind) as holder,
    ):
        tx = store.adopt_tx(holder)
        write(tx, "adopted")
        getattr(holder, ending)()
        with pytest.raises(alkstore.Closed):
            tx.enqueue_tx("emails", None, "after")
        holder.commit()  # the holder's next transaction: nothing of the handle's in it
    assert seen(peer) == (side_effects("adopted") if ending == "commit" else NOTHING)


def test_a_session_on_another_database_is_refused_with_value_error(
    db: Database, elsewhere: Database, peer: alkstore.Store, kind: str
) -> None:
    with (
        alkstore.open(db.target) as store,
        alkstore.open(elsewhere.target) as other,
        sync_engine(elsewhere) as engine,
        holding(engine, kind) as holder,
    ):
        with pytest.raises(ValueError, match=r"(?i)connection"):
            store.adopt_tx(holder)
        holder.commit()  # whatever a refused adoption might have begun
        for seen_from in (peer, other):
            view = seen_from.inspect()
            assert (view.queues(), view.streams()) == ([], []), seen_from


def test_the_handle_leaves_commit_and_rollback_to_sqlalchemy(
    db: Database, peer: alkstore.Store, kind: str
) -> None:
    with (
        alkstore.open(db.target) as store,
        sync_engine(db) as engine,
        holding(engine, kind) as holder,
    ):
        tx = store.adopt_tx(holder)
        write(tx, "before")
        with pytest.raises(RuntimeError, match="SQLAlchemy"):
            tx.commit()
        with pytest.raises(RuntimeError, match="SQLAlchemy"):
            tx.rollback()
        assert seen(peer) == NOTHING  # the refused commit committed nothing
        with tx:  # leaving the block ends nothing either
            write(tx, "in the block")
        write(tx, "after")  # the refused rollback rolled back nothing
        assert seen(peer) == NOTHING
        holder.commit()
    assert seen(peer) == side_effects("before", "in the block", "after")


# Async: AsyncSession and AsyncConnection


def test_async_side_effects_commit_with_sqlalchemys_commit_and_not_before(
    db: Database, peer: alkstore.Store, kind: str
) -> None:
    async def scenario() -> None:
        async with (
            alkstore.open_async(db.target) as store,
            async_engine(db) as engine,
            holding_async(engine, kind) as holder,
        ):
            with peer.listen("dashboard") as wakes:
                await add_note_async(holder, "orm")
                tx = await store.adopt_tx(holder)
                await tx.execute("INSERT INTO sa_notes (key) VALUES (:key)", {"key": "portable"})
                await write_async(tx, "placed")
                assert seen(peer) == NOTHING, "visible before SQLAlchemy committed"
                assert await wakes.recv_async(QUIET_S) is None
                await holder.commit()
                assert await wakes.recv_async(WAKE_S) == Wake("dashboard")
                assert seen(peer) == side_effects("placed")

    asyncio.run(scenario())
    assert notes(peer) == {"orm", "portable"}


def test_async_sqlalchemys_rollback_leaves_nothing(
    db: Database, peer: alkstore.Store, kind: str
) -> None:
    async def scenario() -> None:
        async with (
            alkstore.open_async(db.target) as store,
            async_engine(db) as engine,
            holding_async(engine, kind) as holder,
        ):
            with peer.listen("dashboard") as wakes:
                tx = await store.adopt_tx(holder)  # begins the transaction
                await write_async(tx, "rolled back")
                await tx.execute("INSERT INTO sa_notes (key) VALUES (:key)", {"key": "portable"})
                await add_note_async(holder, "orm")
                await holder.rollback()
                assert await wakes.recv_async(QUIET_S) is None
                assert seen(peer) == NOTHING

    asyncio.run(scenario())
    assert notes(peer) == set()


@pytest.mark.parametrize("inside", ["alkstore only", "with a row"])
@pytest.mark.parametrize("adopted", ["before the savepoint", "inside it"])
def test_async_a_rolled_back_savepoint_drops_exactly_what_was_written_inside_it(
    db: Database, peer: alkstore.Store, kind: str, adopted: str, inside: str
) -> None:
    outer = adopted == "before the savepoint"

    async def scenario() -> None:
        async with (
            alkstore.open_async(db.target) as store,
            async_engine(db) as engine,
            holding_async(engine, kind) as holder,
        ):
            with peer.listen("inner") as inner_wakes, peer.listen("dashboard") as wakes:
                if outer:
                    tx = await store.adopt_tx(holder)
                    await add_note_async(holder, "outer")
                    await write_async(tx, "outer")
                with contextlib.suppress(Refused):
                    async with holder.begin_nested():
                        if inside == "with a row":
                            await add_note_async(holder, "inner")
                        if not outer:
                            tx = await store.adopt_tx(holder)
                        await write_async(tx, "inner", channel="inner")
                        raise Refused
                await write_async(tx, "after")
                await add_note_async(holder, "after")
                await holder.commit()
                assert await wakes.recv_async(WAKE_S) == Wake("dashboard")
                assert await inner_wakes.recv_async(QUIET_S) is None

    asyncio.run(scenario())
    expected = ["outer", "after"] if outer else ["after"]
    assert seen(peer) == side_effects(*expected)
    assert notes(peer) == set(expected)


def test_async_a_released_savepoint_wakes_nobody_until_the_outer_commit(
    db: Database, peer: alkstore.Store, kind: str
) -> None:
    async def scenario() -> None:
        async with (
            alkstore.open_async(db.target) as store,
            async_engine(db) as engine,
            holding_async(engine, kind) as holder,
        ):
            with peer.listen("dashboard") as wakes:
                async with holder.begin_nested():
                    tx = await store.adopt_tx(holder)
                    await write_async(tx, "inner")
                assert await wakes.recv_async(QUIET_S) is None, "woken by the savepoint's release"
                assert seen(peer) == NOTHING
                await write_async(tx, "outer")
                await holder.commit()
                assert await wakes.recv_async(WAKE_S) == Wake("dashboard")
                assert seen(peer) == side_effects("inner", "outer")

    asyncio.run(scenario())


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_async_the_handle_ends_with_sqlalchemys_transaction(
    db: Database, peer: alkstore.Store, kind: str, ending: str, request: pytest.FixtureRequest
) -> None:

    async def scenario() -> None:
        async with (
            alkstore.open_async(db.target) as store,
            async_engine(db) as engine,
            holding_async(engine, kind) as holder,
        ):
            tx = await store.adopt_tx(holder)
            await write_async(tx, "adopted")
            await getattr(holder, ending)()
            with pytest.raises(alkstore.Closed):
                await tx.enqueue_tx("emails", None, "after")
            await holder.commit()

    asyncio.run(scenario())
    assert seen(peer) == (side_effects("adopted") if ending == "commit" else NOTHING)


def test_async_a_session_on_another_database_is_refused_with_value_error(
    db: Database, elsewhere: Database, peer: alkstore.Store, kind: str
) -> None:
    async def scenario() -> None:
        async with (
            alkstore.open_async(db.target) as store,
            alkstore.open_async(elsewhere.target) as other,
            async_engine(elsewhere) as engine,
            holding_async(engine, kind) as holder,
        ):
            with pytest.raises(ValueError, match=r"(?i)connection"):
                await store.adopt_tx(holder)
            await holder.commit()
            view = other.inspect()
            assert (await view.queues(), await view.streams()) == ([], [])

    asyncio.run(scenario())
    view = peer.inspect()
    assert (view.queues(), view.streams()) == ([], [])


def test_async_the_handle_leaves_commit_and_rollback_to_sqlalchemy(
    db: Database, peer: alkstore.Store, kind: str
) -> None:
    async def scenario() -> None:
        async with (
            alkstore.open_async(db.target) as store,
            async_engine(db) as engine,
            holding_async(engine, kind) as holder,
        ):
            tx = await store.adopt_tx(holder)
            await write_async(tx, "before")
            with pytest.raises(RuntimeError, match="SQLAlchemy"):
                await tx.commit()
            with pytest.raises(RuntimeError, match="SQLAlchemy"):
                await tx.rollback()
            assert seen(peer) == NOTHING
            async with tx:  # leaving the block ends nothing either
                await write_async(tx, "in the block")
            await write_async(tx, "after")
            assert seen(peer) == NOTHING
            await holder.commit()

    asyncio.run(scenario())
    assert seen(peer) == side_effects("before", "in the block", "after")


def test_a_sync_session_may_be_adopted_by_the_async_store(
    db: Database, peer: alkstore.Store, request: pytest.FixtureRequest
) -> None:
    """A sync Session, adopted with the async API, is written through where it is called."""

    async def scenario() -> None:
        async with alkstore.open_async(db.target) as store:
            with sync_engine(db) as engine, Session(engine) as session:
                add_note(session, "orm")
                tx = await store.adopt_tx(session)
                await write_async(tx, "placed")
                assert seen(peer) == NOTHING
                session.commit()

    asyncio.run(scenario())
    assert seen(peer) == side_effects("placed")
    assert notes(peer) == {"orm"}
