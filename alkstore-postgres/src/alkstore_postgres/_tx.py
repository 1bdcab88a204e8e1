"""Transactions on a pooled connection, or on the caller's own."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from alkstore.engine import JobStamp, TxHandle
from alkstore_postgres._errors import translate
from alkstore_postgres._event_buffer import EventBuffer
from alkstore_postgres._job_buffer import JobBuffer
from alkstore_postgres._queue import insert_job
from alkstore_postgres._stream import insert_event, raise_offset

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresTx"]


class PostgresTx(TxHandle):
    """An open transaction. Notifies sent in it are delivered at commit only,
    by PostgreSQL itself.

    On the engine's own connections nothing reaches the server until it has
    to: ``BEGIN``, held enqueues (``_job_buffer``) and held publishes
    (``_event_buffer``) go out pipelined with the first statement that needs
    an answer, or with ``COMMIT``. A transaction of enqueues only is one
    round trip.
    """

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
        # An adopted connection is already in its transaction, and the caller
        # runs statements and commits behind our back: every write goes now.
        self._begun = give_back is None
        self._jobs = JobBuffer(store) if give_back is not None else None
        self._events = EventBuffer(store) if give_back is not None else None
        # A forgotten handle must not hold its locks and its connection forever.
        self._abandon = (
            weakref.finalize(self, _roll_back, connection, give_back) if give_back else None
        )

    def __repr__(self) -> str:
        sent = "begun" if self._begun else "not yet begun"
        held = "".join(
            f", {len(buffer)} {what} held"
            for buffer, what in ((self._jobs, "enqueues"), (self._events, "publishes"))
            if buffer
        )
        return f"<{type(self).__name__} {self.state.value}, {sent}{held}>"

    @property
    def schema(self) -> str:
        """The schema of this transaction's store, for business SQL that joins
        alkstore's tables (``{schema}.jobs``, ...)."""
        return self._store.settings.schema

    @property
    def connection(self) -> psycopg.Connection:
        """The ``psycopg.Connection`` this transaction runs on (begun, everything held sent)."""
        if self._pending:
            with translate("begin a transaction"), self._connection.pipeline():
                self._send_pending()
        self._forget_heads()
        return self._connection

    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        self._check_still_open()
        with translate(f"enqueue into {queue!r}"):
            if self._jobs is None:
                return insert_job(self._store, self._connection, queue, stamp, payload_json)
            return self._jobs.enqueue(self._connection, queue, stamp, payload_json)

    @property
    def _pending(self) -> bool:
        """Whether BEGIN or held enqueues or publishes still have to reach the server."""
        return not self._begun or bool(self._jobs) or bool(self._events)

    def _send_pending(self) -> None:
        """Send BEGIN and what is held; the caller holds a pipeline open."""
        if not self._begun:
            self._connection.execute("BEGIN")
            self._begun = True
        if self._jobs:
            self._jobs.send(self._connection)
        if self._events:
            self._events.send(self._connection)

    def _forget_heads(self) -> None:
        """The caller's own statements may undo a head move (a savepoint): read heads again."""
        if self._events is not None:
            self._events.forget_heads()

    def _run(self, sql: str, params: Any = None) -> psycopg.Cursor[Any]:
        """Run ``sql`` in the transaction, in one round trip with what is pending."""
        if not self._pending:
            return self._connection.execute(sql, params)
        with self._connection.pipeline():
            self._send_pending()
            return self._connection.execute(sql, params)

    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        self._check_still_open()
        with translate(f"publish to {stream!r}"):
            if self._events is None:
                return insert_event(self._store, self._run, stream, key, payload_json)
            offset = self._events.publish(stream, key, payload_json)
            if offset is None:
                offset = insert_event(self._store, self._run, stream, key, payload_json)
                self._events.locked(stream, offset)
            return offset

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        self._check_still_open()
        with translate(f"notify {channel!r}"):
            self._run(self._store.sql.notify, self._store.notify_params(channel))

    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        self._check_still_open()
        with translate(f"save offset of {consumer!r}"):
            return raise_offset(self._store, self._run, stream, consumer, offset)

    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        self._check_still_open()
        with translate("execute"):
            cursor = self._run(sql, params)
            self._forget_heads()
            rows = cursor.fetchall() if cursor.description is not None else []
        self._check_still_open()
        return rows

    def _commit(self) -> None:
        self._check_still_open()
        try:
            if not self._begun and not self._jobs:
                return  # nothing was sent: nothing to commit
            try:
                with translate("commit"):
                    self._run("COMMIT")
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    self._connection.execute("ROLLBACK")
                raise
        finally:
            self._end()

    def _rollback(self) -> None:
        for buffer in (self._jobs, self._events):
            if buffer is not None:
                buffer.discard()
        self._check_still_open()
        try:
            if self._begun:
                with translate("rollback"):
                    self._connection.execute("ROLLBACK")
        finally:
            self._end()

    def _check_still_open(self) -> None:
        """Refuse to go on once the transaction ended through the driver (``COMMIT``
        via ``tx.execute``, ``tx.connection.commit()``, an adopted connection's own
        ``commit()``): on the pool's autocommit connection later statements would
        escape any rollback, and on the caller's they would begin a transaction of
        their own, behind the caller's back."""
        if (
            not self._begun
            or self._connection.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE
        ):
            return
        for buffer in (self._jobs, self._events):
            if buffer is not None:
                buffer.discard()
        if self._give_back is None:
            raise self._ended_by_its_caller()
        self._end()
        raise self._ended_elsewhere()

    def _end(self) -> None:
        if self._abandon is not None and self._give_back is not None:
            self._abandon.detach()
            self._give_back(self._connection)


def _roll_back(
    connection: psycopg.Connection, give_back: Callable[[psycopg.Connection], None]
) -> None:
    idle = connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    if not idle:  # a handle that never began has nothing to roll back
        with contextlib.suppress(psycopg.Error):
            connection.execute("ROLLBACK")
    with contextlib.suppress(Exception):
        give_back(connection)
