"""Enqueues inside a transaction, sent to the server together.

A transaction's first enqueue is one ``INSERT … RETURNING id`` as usual.
From the second on, job ids are reserved from the table's sequence in
blocks (as large as the store's last batch, then growing), so
``enqueue_tx`` returns its id at once and the rows wait here; they are sent
as one statement of column arrays, pipelined with one wake per queue, before
anything else runs on the connection and always before commit. A hundred
enqueues in a transaction cost a handful of round trips, not a hundred.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import psycopg

from alkstore.engine import JobStamp
from alkstore_postgres._queue import QUEUE_KEY, insert_job, job_params

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = ["JobBuffer"]

_FIRST_BLOCK = 16
_LARGEST_BLOCK = 4096


class JobBuffer:
    """The enqueues of one transaction not yet sent to the server."""

    def __init__(self, store: PostgresStore, connection: psycopg.Connection) -> None:
        self._store = store
        self._connection = connection
        self._reserved: deque[int] = deque()
        # As many as the store's last batch: repeated transactions of N
        # enqueues reserve their ids with their first insert, no extra trip.
        self._block = store.enqueue_block_hint
        self._rows: list[dict[str, Any]] = []
        self._queues: set[str] = set()
        self._enqueued = 0

    def enqueue(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        """Add a job to the transaction; return its id."""
        self._enqueued += 1
        if self._enqueued == 1:
            if not self._block:
                return insert_job(self._store, self._connection, queue, stamp, payload_json)
            return self._insert_reserving(queue, stamp, payload_json)
        job_id = self._next_id()
        self._rows.append({"id": job_id, **job_params(queue, stamp, payload_json)})
        self._queues.add(queue)
        return job_id

    def flush(self) -> None:
        """Send the waiting rows, and a wake for each of their queues, in one round trip."""
        if not self._rows:
            if self._enqueued == 1:
                self._store.enqueue_block_hint = 0  # single enqueues: reserve nothing
            return
        rows, queues = self._rows, self._queues
        self._rows, self._queues = [], set()
        columns = {name: [row[name] for row in rows] for name in rows[0]}
        sql = self._store.sql
        with self._connection.pipeline(), self._connection.cursor() as cursor:
            cursor.execute(sql.enqueue_reserved, columns)
            for queue in queues:
                cursor.execute(sql.notify, self._store.wake_params(QUEUE_KEY + queue))
        self._store.enqueue_block_hint = min(max(len(rows), _FIRST_BLOCK), _LARGEST_BLOCK)

    def discard(self) -> None:
        """Forget the waiting rows (the transaction rolled back)."""
        self._rows.clear()
        self._queues.clear()

    def _insert_reserving(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        """Insert the first job, reserving ids for the ones expected to follow."""
        params = {
            **job_params(queue, stamp, payload_json),
            **self._store.wake_params(QUEUE_KEY + queue),
            "reserve": self._block,
        }
        row = self._connection.execute(self._store.sql.enqueue_reserving, params).fetchone()
        assert row is not None
        self._reserved.extend(int(job_id) for job_id in row[2])
        self._block = min(self._block * 4, _LARGEST_BLOCK)
        return int(row[0])

    def _next_id(self) -> int:
        if not self._reserved:
            block = max(self._block, _FIRST_BLOCK)
            found = self._connection.execute(self._store.sql.reserve_job_ids, {"reserve": block})
            self._reserved.extend(int(row[0]) for row in found.fetchall())
            self._block = min(block * 4, _LARGEST_BLOCK)
        return self._reserved.popleft()
