"""Transactions on a pooled connection, or on the caller's own."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from alkstore.engine import JobStamp, TxHandle
from alkstore_postgres._errors import translate
from alkstore_postgres._job_buffer import JobBuffer
from alkstore_postgres._queue import insert_job
from alkstore_postgres._stream import insert_event, raise_offset

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresTx"]


class PostgresTx(TxHandle):
    """An open transaction. Notifies sent in it are delivered at commit only,
    by PostgreSQL itself."""

    _store: PostgresStore

    def __init__(
        self,
        store: PostgresStore,
        connection: psycopg.Connection,
        give_back: Callable[[psycopg.Connection], None] | None,
    ) -> None:
        super().__init__(store)
        self._connection = connection
        self._give_back = give_back
        # Only on the engine's own connections: on an adopted one the caller
        # runs statements and commits behind our back, so every write goes now.
        self._jobs = JobBuffer(store, connection) if give_back is not None else None
        # A forgotten handle must not hold its locks and its connection forever.
        self._abandon = (
            weakref.finalize(self, _roll_back, connection, give_back) if give_back else None
        )

    @property
    def connection(self) -> psycopg.Connection:
        """The ``psycopg.Connection`` this transaction runs on (enqueues so far sent)."""
        self._send_jobs()
        return self._connection

    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        with translate(f"enqueue into {queue!r}"):
            if self._jobs is None:
                return insert_job(self._store, self._connection, queue, stamp, payload_json)
            return self._jobs.enqueue(queue, stamp, payload_json)

    def _send_jobs(self) -> None:
        """Send buffered enqueues: before any other statement, so order is kept."""
        if self._jobs is not None:
            with translate("enqueue"):
                self._jobs.flush()

    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        self._send_jobs()
        with translate(f"publish to {stream!r}"):
            return insert_event(self._store, self._connection, stream, key, payload_json)

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        self._send_jobs()
        with translate(f"notify {channel!r}"):
            self._connection.execute(self._store.sql.notify, self._store.wake_params(channel))

    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        self._send_jobs()
        with translate(f"save offset of {consumer!r}"):
            return raise_offset(self._store, self._connection, stream, consumer, offset)

    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        self._send_jobs()
        with translate("execute"):
            cursor = self._connection.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []

    def _commit(self) -> None:
        try:
            try:
                self._send_jobs()
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    self._connection.execute("ROLLBACK")
                raise
            with translate("commit"):
                self._connection.execute("COMMIT")
        finally:
            self._end()

    def _rollback(self) -> None:
        if self._jobs is not None:
            self._jobs.discard()
        try:
            with translate("rollback"):
                self._connection.execute("ROLLBACK")
        finally:
            self._end()

    def _end(self) -> None:
        if self._abandon is not None and self._give_back is not None:
            self._abandon.detach()
            self._give_back(self._connection)


def _roll_back(
    connection: psycopg.Connection, give_back: Callable[[psycopg.Connection], None]
) -> None:
    with contextlib.suppress(psycopg.Error):
        connection.execute("ROLLBACK")
    with contextlib.suppress(Exception):
        give_back(connection)
