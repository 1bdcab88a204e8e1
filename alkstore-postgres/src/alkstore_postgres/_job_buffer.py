"""Enqueues inside a transaction, held back and sent to the server together.

A store reserves job ids from the table's sequence ahead of use, in blocks
(:class:`JobIds`), so ``enqueue_tx`` returns its id at once and the row waits
in the transaction's :class:`JobBuffer`. The waiting rows go out as one
statement of column arrays, with one wake per queue, pipelined before
anything else runs on the connection and always before commit: a
transaction of a hundred enqueues is one round trip, not a hundred.

Reserved ids are never handed out twice; ids reserved by a process that
ends unused are gaps, as sequences always allow.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import psycopg

from alkstore.engine import JobStamp, queue_wake_key
from alkstore_postgres._queue import STAMP_COLUMNS, stamp_columns

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = ["JobBuffer", "JobIds"]

_BUFFERED_COLUMNS = ("id", "payload", *STAMP_COLUMNS)
_FIRST_BLOCK = 16
_LARGEST_BLOCK = 4096


class JobIds:
    """Job ids taken from the jobs table's sequence ahead of use, for one store.

    Blocks double with each refill, up to 4,096: a store that enqueues
    often reaches the server for ids rarely.
    """

    def __init__(self, reserve_statement: str) -> None:
        self._reserve = reserve_statement
        self._ids: deque[int] = deque()
        self._block = _FIRST_BLOCK
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<JobIds {len(self._ids)} reserved, next block {self._block}>"

    def take(self, connection: psycopg.Connection) -> int:
        """The next reserved id, reserving a block on ``connection`` when none is left."""
        with self._lock:
            if not self._ids:
                found = connection.execute(self._reserve, {"reserve": self._block}).fetchall()
                self._ids.extend(sorted(int(row[0]) for row in found))
                self._block = min(self._block * 2, _LARGEST_BLOCK)
            return int(self._ids.popleft())


class JobBuffer:
    """The enqueues of one transaction not yet sent to the server."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._rows: list[tuple[Any, ...]] = []
        self._queues: set[str] = set()

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"<JobBuffer {len(self._rows)} jobs for {sorted(self._queues)}>"

    def enqueue(
        self, connection: psycopg.Connection, queue: str, stamp: JobStamp, payload_json: str
    ) -> int:
        """Hold a job for the transaction on ``connection``; return its id."""
        job_id = self._store.job_ids.take(connection)
        self._rows.append((job_id, payload_json, *stamp_columns(queue, stamp)))
        self._queues.add(queue)
        return job_id

    def send(self, connection: psycopg.Connection) -> None:
        """Send the held rows, and a wake for each of their queues, on ``connection``.

        The caller holds a pipeline open, so nothing waits for the server here.
        """
        if not self._rows:
            return
        rows, queues = self._rows, self._queues
        self._rows, self._queues = [], set()
        columns = dict(zip(_BUFFERED_COLUMNS, map(list, zip(*rows, strict=True)), strict=True))
        store = self._store
        connection.execute(store.sql.enqueue_reserved, columns)
        for queue in sorted(queues):
            connection.execute(store.sql.notify, store.wake_params(queue_wake_key(queue)))

    def discard(self) -> None:
        """Forget the held rows (the transaction rolled back)."""
        self._rows.clear()
        self._queues.clear()
