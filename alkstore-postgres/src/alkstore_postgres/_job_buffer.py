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

from alkstore.engine import JobStamp, queue_wake_key
from alkstore_postgres._names import wake_params
from alkstore_postgres._plan import Fetch, Plan, Statement
from alkstore_postgres._queue import STAMP_COLUMNS, stamp_columns

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements

__all__ = ["JobBuffer", "JobIds"]

_BUFFERED_COLUMNS = ("id", "payload", *STAMP_COLUMNS, "traceparent")
_FIRST_BLOCK = 16
_LARGEST_BLOCK = 4096


class JobIds:
    """Job ids taken from the jobs table's sequence ahead of use, for one store.

    Blocks double with each refill, up to 4,096: a store that enqueues
    often reaches the server for ids rarely. The lock is never held while
    a block is on its way (an event loop's other tasks may take ids then):
    two takers that both find none left each reserve a block, and the ids
    stay handed out in ascending order.
    """

    def __init__(self, reserve_statement: str) -> None:
        self._reserve = reserve_statement
        self._ids: deque[int] = deque()
        self._block = _FIRST_BLOCK
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<JobIds {len(self._ids)} reserved, next block {self._block}>"

    def take(self) -> Plan[int]:
        """The next reserved id, reserving a block when none is left."""
        while True:
            with self._lock:
                if self._ids:
                    return self._ids.popleft()
                block = self._block
                self._block = min(block * 2, _LARGEST_BLOCK)
            found = yield Statement(self._reserve, {"reserve": block}, Fetch.ALL)
            with self._lock:
                self._ids = deque(sorted([*self._ids, *(int(row[0]) for row in found)]))


class JobBuffer:
    """The enqueues of one transaction not yet sent to the server."""

    def __init__(self, sql: Statements, ids: JobIds) -> None:
        self._sql = sql
        self._ids = ids
        self._rows: list[tuple[Any, ...]] = []
        self._queues: set[str] = set()

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"<JobBuffer {len(self._rows)} jobs for {sorted(self._queues)}>"

    def enqueue(self, queue: str, stamp: JobStamp, payload_json: str) -> Plan[int]:
        """Hold a job for the transaction; its id."""
        job_id = yield from self._ids.take()
        self._rows.append((job_id, payload_json, *stamp_columns(queue, stamp), stamp.traceparent))
        self._queues.add(queue)
        return job_id

    def take_statements(self) -> list[Statement]:
        """The statements that send the held rows, and a wake for each of their
        queues (to pipeline); the buffer is empty afterwards."""
        if not self._rows:
            return []
        rows, queues = self._rows, self._queues
        self._rows, self._queues = [], set()
        columns = dict(zip(_BUFFERED_COLUMNS, map(list, zip(*rows, strict=True)), strict=True))
        schema = self._sql.schema
        return [
            Statement(self._sql.enqueue_reserved, columns),
            *(
                Statement(self._sql.notify, wake_params(schema, queue_wake_key(queue)))
                for queue in sorted(queues)
            ),
        ]

    def discard(self) -> None:
        """Forget the held rows (the transaction rolled back)."""
        self._rows.clear()
        self._queues.clear()
