"""The commit-order trap on a real table, and core's helpers getting out of it.

A ``bigserial`` id is handed out at INSERT; the row becomes visible at
COMMIT. Two writers, the later id committed first: a reader that asks for
``id > last seen`` loses the earlier one for good. The local PostgreSQL is
``ALKSTORE_PG_DSN``; the tests are skipped without one that answers.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from alkstore import Wake
from alkstore.engine import CommitCursor, PollingWatcher, WakeSource

GRACE_S = 5.0

Connection = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def dsn() -> str:
    found = os.environ.get("ALKSTORE_PG_DSN")
    if not found:
        pytest.skip("set ALKSTORE_PG_DSN to a PostgreSQL server to run these tests")
    try:
        psycopg.connect(found, connect_timeout=5).close()
    except psycopg.Error as exc:
        pytest.skip(f"ALKSTORE_PG_DSN does not answer: {exc}")
    return found


@pytest.fixture
def table(dsn: str) -> Iterator[sql.Identifier]:
    """A notices table of its own: ids handed out at insert, as a polling engine's would be."""
    name = sql.Identifier(f"alkstore_test_notices_{uuid.uuid4().hex}")
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigserial PRIMARY KEY, key text NOT NULL, "
                "inserted_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            ).format(name)
        )
    yield name
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP TABLE {}").format(name))


@pytest.fixture
def connect(dsn: str) -> Iterator[Callable[..., Connection]]:
    """Open connections (writers in a transaction, readers in autocommit); closes them."""
    opened: list[Connection] = []

    def open_one(*, autocommit: bool = False) -> Connection:
        connection = psycopg.connect(dsn, autocommit=autocommit)
        opened.append(connection)
        return connection

    yield open_one
    for connection in opened:
        connection.close()


def insert(connection: Connection, table: sql.Identifier, key: str) -> int:
    row = connection.execute(
        sql.SQL("INSERT INTO {} (key) VALUES (%s) RETURNING id").format(table), (key,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def keys_after(reader: Connection, table: sql.Identifier, after: int) -> dict[int, str]:
    rows = reader.execute(
        sql.SQL("SELECT id, key FROM {} WHERE id > %s ORDER BY id").format(table), (after,)
    )
    return {int(id_): key for id_, key in rows}


def baseline(
    reader: Connection, table: sql.Identifier, clock: Callable[[], float] = time.monotonic
) -> CommitCursor:
    """Start a cursor as CommitCursor's docstring says: past the rows inserted
    before the grace period, awaiting the gaps among those inserted since."""
    row = reader.execute(
        sql.SQL(
            "SELECT COALESCE(MAX(id) FILTER (WHERE inserted_at <= clock_timestamp() - {grace}), 0),"
            " COALESCE(array_agg(id) FILTER (WHERE inserted_at > clock_timestamp() - {grace}),"
            " '{{}}') FROM {table}"
        ).format(grace=sql.SQL("make_interval(secs => %(grace)s)"), table=table),
        {"grace": GRACE_S},
    ).fetchone()
    assert row is not None
    settled, recent = row
    return CommitCursor(settled, seen=recent, grace_s=GRACE_S, clock=clock)


def test_a_naive_reader_loses_the_id_committed_late_and_the_cursor_does_not(
    table: sql.Identifier, connect: Callable[..., Connection]
) -> None:
    earlier, later, reader = connect(), connect(), connect(autocommit=True)
    early_id = insert(earlier, table, "early")  # its transaction stays open
    late_id = insert(later, table, "late")
    later.commit()
    assert early_id < late_id

    naive_seen = max(keys_after(reader, table, 0))
    cursor = CommitCursor(grace_s=GRACE_S)
    assert cursor.fresh(keys_after(reader, table, cursor.read_after)) == [late_id]

    earlier.commit()
    assert keys_after(reader, table, naive_seen) == {}  # "early" is lost to the naive reader
    rows = keys_after(reader, table, cursor.read_after)
    assert [rows[i] for i in cursor.fresh(rows)] == ["early"]
    assert cursor.read_after == late_id


def test_a_rolled_back_insert_is_awaited_for_the_grace_period_only(
    table: sql.Identifier, connect: Callable[..., Connection]
) -> None:
    now = [0.0]
    earlier, later, reader = connect(), connect(), connect(autocommit=True)
    rolled_back = insert(earlier, table, "never")
    committed = insert(later, table, "kept")
    later.commit()
    earlier.rollback()
    cursor = CommitCursor(grace_s=GRACE_S, clock=lambda: now[0])
    assert cursor.fresh(keys_after(reader, table, cursor.read_after)) == [committed]
    assert (cursor.read_after, cursor.awaited) == (rolled_back - 1, 1)
    now[0] = GRACE_S
    assert cursor.fresh(keys_after(reader, table, cursor.read_after)) == []
    assert (cursor.read_after, cursor.awaited) == (committed, 0)


def test_a_baseline_read_while_an_earlier_insert_is_in_flight_still_reports_it(
    table: sql.Identifier, connect: Callable[..., Connection]
) -> None:
    earlier, later, reader = connect(), connect(), connect(autocommit=True)
    insert(later, table, "old")
    later.commit()
    in_flight = insert(earlier, table, "in flight")
    insert(later, table, "before the baseline")
    later.commit()
    newest_at_baseline = max(keys_after(reader, table, 0))
    cursor = baseline(reader, table, clock=lambda: 0.0)
    assert cursor.fresh(keys_after(reader, table, cursor.read_after)) == []  # nothing new yet
    earlier.commit()
    assert keys_after(reader, table, newest_at_baseline) == {}  # a baseline of the newest id
    assert cursor.fresh(keys_after(reader, table, cursor.read_after)) == [in_flight]


class PostgresNotices(WakeSource):
    """What a polling engine's source looks like on a table whose ids are assigned at insert."""

    def __init__(self, dsn: str, table: sql.Identifier) -> None:
        self._dsn = dsn
        self._table = table
        self._reader: Connection | None = None
        self._cursor: CommitCursor | None = None

    def open(self) -> None:
        reader = psycopg.connect(self._dsn, autocommit=True)
        try:
            self._cursor = baseline(reader, self._table)
        except BaseException:
            reader.close()
            raise
        self._reader = reader

    def look(self) -> set[str]:
        reader, cursor = self._reader, self._cursor
        assert reader is not None, "look() before open()"
        assert cursor is not None, "look() before open()"
        rows = keys_after(reader, self._table, cursor.read_after)
        return {rows[id_] for id_ in cursor.fresh(rows)}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def transient(self, error: Exception) -> BaseException | None:
        return error if isinstance(error, psycopg.OperationalError) else None


def test_a_polling_watcher_on_the_cursor_wakes_for_the_commit_that_came_late(
    dsn: str, table: sql.Identifier, connect: Callable[..., Connection]
) -> None:
    watcher = PollingWatcher(
        PostgresNotices(dsn, table),
        target="postgres:test",
        log=logging.getLogger("alkstore.tests.polling"),
        interval_s=0.02,
        start_timeout_s=5.0,
    )
    try:
        orders = watcher.subscribe("orders")
        earlier, later = connect(), connect()
        insert(earlier, table, "orders")
        insert(later, table, "other")
        later.commit()
        assert orders.recv(0.3) is None
        earlier.commit()
        assert orders.recv(5) == Wake("orders")
    finally:
        watcher.stop()
