"""Transactions: a write transaction on one connection, or the caller's own."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sqlite3
import weakref
from typing import TYPE_CHECKING, Any

from alkstore import Database
from alkstore.engine import JobStamp, Params, TxHandle
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import transaction_ended, transaction_opened, translate
from alkstore_sqlite._queue import insert_job, job_row
from alkstore_sqlite._stream import insert_event, raise_offset

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["SQLiteTx"]


class SQLiteTx(TxHandle):
    """A transaction begun with ``BEGIN IMMEDIATE``: it holds the write lock from
    the start, so it never fails later on upgrading a read lock."""

    _store: SQLiteStore
    paramstyle = "named"  # sqlite3 reads :name itself

    def __init__(self, store: SQLiteStore, connection: sqlite3.Connection, *, owned: bool) -> None:
        super().__init__(store)
        self._connection = connection
        self._owned = owned
        # Our statements read their rows as tuples whatever row factory an
        # adopted connection's caller set (a dict factory, sqlite3.Row).
        self._statements: sqlite3.Connection | sqlite3.Cursor = (
            connection if owned else plain_cursor(connection)
        )
        # Enqueues after the first wait here and go in one executemany before
        # the next statement; only on our own connection, where nothing else
        # writes behind our back.
        self._next_job_id: int | None = None
        self._pending_jobs: list[tuple[Any, ...]] = []
        # A forgotten handle must not hold the write lock forever.
        self._abandon = (
            weakref.finalize(
                self, _roll_back_and_close, connection, transaction_opened(), os.getpid()
            )
            if owned
            else None
        )

    @property
    def connection(self) -> sqlite3.Connection:
        """The ``sqlite3.Connection`` this transaction runs on (enqueues so far sent)."""
        self._send_jobs()
        return self._connection

    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        self._check_still_open()
        if stamp.key is not None:  # may write nothing: its id is known only once it ran
            self._send_jobs()
            with translate(f"enqueue into {queue!r}"):
                return insert_job(self._statements, queue, stamp, payload_json)
        if self._next_job_id is None:
            with translate(f"enqueue into {queue!r}"):
                job_id = insert_job(self._statements, queue, stamp, payload_json)
            # This transaction holds the write lock: the next ids are job_id + 1, ...
            self._next_job_id = job_id + 1 if self._owned else None
            return job_id
        job_id = self._next_job_id
        self._next_job_id += 1
        self._pending_jobs.append((job_id, *job_row(queue, stamp, payload_json)))
        return job_id

    def _send_jobs(self) -> None:
        """Insert the waiting enqueues; after any other statement, ids are unknown again."""
        self._next_job_id = None
        if self._pending_jobs:
            rows, self._pending_jobs = self._pending_jobs, []
            with translate("enqueue"):
                self._statements.executemany(_sql.ENQUEUE_WITH_ID, rows)

    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        self._check_still_open()
        self._send_jobs()
        with translate(f"publish to {stream!r}"):
            return insert_event(self._statements, stream, key, payload_json)

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        self._check_still_open()
        self._send_jobs()
        with translate(f"notify {channel!r}"):
            self._store.write_notice(self._statements, channel, payload_json)

    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        self._check_still_open()
        self._send_jobs()
        with translate(f"save offset of {consumer!r}"):
            return raise_offset(self._statements, stream, consumer, offset)

    def _execute(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        self._check_still_open()
        self._send_jobs()
        with translate("execute"):
            rows = self._statements.execute(sql, params).fetchall()
        self._check_still_open()
        return rows

    def _commit(self) -> None:
        self._check_still_open()
        try:
            self._send_jobs()
            with translate("commit"):
                self._connection.execute("COMMIT")
        except BaseException:
            # A refused COMMIT (a deferred foreign key, a full disk) leaves the
            # transaction open, holding the write lock: the handle ends rolled back.
            with contextlib.suppress(sqlite3.Error):
                if self._connection.in_transaction:
                    self._connection.execute("ROLLBACK")
            raise
        finally:
            self._end()
        self._store.committed()

    def _rollback(self) -> None:
        self._pending_jobs.clear()
        if self._is_closed():  # closing the connection rolled the transaction back
            self._end()
            return
        self._check_still_open()
        try:
            with translate("rollback"):
                if self._connection.in_transaction:
                    self._connection.execute("ROLLBACK")
        finally:
            self._end()

    def _check_still_open(self) -> None:
        """Refuse to go on once the transaction ended through the driver: later
        statements would run in autocommit (or in a transaction they began
        themselves), escaping the rollback or commit they were meant to share."""
        if self._is_closed():
            self._pending_jobs.clear()
            self._end()
            self._ended_elsewhere()  # marks the handle ended; the error says how
            raise Database(
                "the transaction's connection was closed, which rolled the transaction back; "
                "the handle is closed"
            )
        if self._connection.in_transaction:
            return
        self._pending_jobs.clear()
        if not self._owned:
            raise self._ended_by_its_caller()
        self._end()
        raise self._ended_elsewhere()

    def _is_closed(self) -> bool:
        try:
            self._connection.total_changes  # noqa: B018 - raises once the connection is closed
        except sqlite3.ProgrammingError:
            return True
        return False

    def _end(self) -> None:
        if self._abandon is not None:
            detached = self._abandon.detach()
            if detached is not None:  # None: ended before
                transaction_ended(detached[2][1])
                self._store.pool.release(self._connection)


def plain_cursor(connection: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor of ``connection`` that reads rows as tuples, whatever its
    connection's ``row_factory`` or ``Connection.cursor`` would make."""
    cursor = sqlite3.Cursor(connection)
    cursor.row_factory = None
    return cursor


_kept_open: list[sqlite3.Connection] = []


def _roll_back_and_close(connection: sqlite3.Connection, thread: int, opened_in: int) -> None:
    if os.getpid() != opened_in:
        _keep_open_for_good(connection)
        return
    transaction_ended(thread)
    with contextlib.suppress(sqlite3.Error):
        connection.close()  # closing rolls back an open transaction


def _keep_open_for_good(connection: sqlite3.Connection) -> None:
    """Leave ``connection`` open until this forked child process ends.

    It is the child's copy of a connection in the parent's write transaction.
    Closing it would roll that transaction back, and a rollback in WAL mode
    clears the transaction's frames from the WAL index, which the processes
    share: the parent's commit would then leave a malformed database. A
    reference nothing gives back keeps the copy open even through the
    interpreter's shutdown; the kernel drops it with the process.
    """
    _kept_open.append(connection)
    with contextlib.suppress(AttributeError):  # ctypes.pythonapi is CPython's
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(connection))
