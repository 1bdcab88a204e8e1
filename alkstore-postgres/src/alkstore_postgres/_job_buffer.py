"""Enqueues inside a transaction, held back and sent to the server together.

A store reserves job ids from the table's sequence ahead of use, in blocks
(:class:`JobIds`), so ``enqueue_tx`` returns its id at once and the row waits
in the transaction's :class:`JobBuffer`, without a plan run for it while an
id is reserved. The waiting rows go out as one statement of column arrays,
each distinct stamp (queue and options) sent once, with one wake per queue,
pipelined before anything else runs on the connection and always before
commit: a transaction of a hundred enqueues is one round trip, not a hundred.

Reserved ids are never handed out twice; ids reserved by a process that
ends unused are gaps, as sequences always allow.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from typing import TYPE_CHECKING

from alkstore.engine import JobStamp, queue_wake_key
from alkstore_postgres._names import wake_params
from alkstore_postgres._plan import Fetch, Plan, Statement
from alkstore_postgres._queue import STAMP_COLUMNS, stamp_columns

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements

__all__ = ["JobBuffer", "JobIds"]

_ROW_COLUMNS = ("id", "payload", "traceparent", "stamp")
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

    def take_reserved(self) -> int | None:
        """The next reserved id, or None when none is left (:meth:`take` reserves)."""
        with self._lock:
            return self._ids.popleft() if self._ids else None

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
        self._rows: list[tuple[int, str, str | None, int]] = []
        """Each held job's id, payload, trace context and stamp number (1-based)."""
        self._stamps: dict[tuple[str, JobStamp], int] = {}
        """The held jobs' distinct queues and stamps (but for the trace context),
        numbered from 1."""

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"<JobBuffer {len(self._rows)} jobs for {sorted(self._queues())}>"

    def enqueue(self, queue: str, stamp: JobStamp, payload_json: str) -> Plan[int]:
        """Hold a job for the transaction; its id."""
        job_id = yield from self._ids.take()
        self._hold(job_id, queue, stamp, payload_json)
        return job_id

    def enqueue_at_once(self, queue: str, stamp: JobStamp, payload_json: str) -> int | None:
        """Hold a job under an id reserved already; its id, or None (nothing held)
        when none is left: then :meth:`enqueue` reserves more."""
        job_id = self._ids.take_reserved()
        if job_id is not None:
            self._hold(job_id, queue, stamp, payload_json)
        return job_id

    def _hold(self, job_id: int, queue: str, stamp: JobStamp, payload_json: str) -> None:
        traceparent = stamp.traceparent
        if traceparent is not None:  # one per job: kept by the row, not the stamp
            stamp = dataclasses.replace(stamp, traceparent=None)
        number = self._stamps.setdefault((queue, stamp), len(self._stamps) + 1)
        self._rows.append((job_id, payload_json, traceparent, number))

    def _queues(self) -> set[str]:
        return {queue for queue, _ in self._stamps}

    def take_statements(self) -> list[Statement]:
        """The statements that send the held rows, and a wake for each of their
        queues (to pipeline); the buffer is empty afterwards."""
        if not self._rows:
            return []
        rows, stamps, queues = self._rows, self._stamps, self._queues()
        self._rows, self._stamps = [], {}
        params = dict(zip(_ROW_COLUMNS, map(list, zip(*rows, strict=True)), strict=True))
        stamp_rows = (stamp_columns(queue, stamp) for queue, stamp in stamps)
        params.update(zip(STAMP_COLUMNS, map(list, zip(*stamp_rows, strict=True)), strict=True))
        schema = self._sql.schema
        return [
            Statement(self._sql.enqueue_reserved, params),
            *(
                Statement(self._sql.notify, wake_params(schema, queue_wake_key(queue)))
                for queue in sorted(queues)
            ),
        ]

    def discard(self) -> None:
        """Forget the held rows (the transaction rolled back)."""
        self._rows.clear()
        self._stamps.clear()
