"""Inspection on SQLite: reads only, never a write lock.

Each listing is a single statement, or (the queues) a few statements in one
read transaction, so it sees one snapshot of the file (a page of jobs first
counts a little to choose how its one statement reads); in WAL mode a
reader neither waits for a writer's open transaction nor holds one up.
"Now" is this host's clock, as everywhere in the engine.
"""

from __future__ import annotations

import math
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from alkstore import (
    ConsumerStats,
    JobInfo,
    JobState,
    LockInfo,
    QueueStats,
    Schedule,
    StreamStats,
)
from alkstore.engine import Inspector, decode
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import translate
from alkstore_sqlite._queue import job_info

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["SQLiteInspector"]

_Params = dict[str, Any] | tuple[Any, ...]


class SQLiteInspector(Inspector):
    """Reads the store's file through its connection pool."""

    _store: SQLiteStore

    def _read(self, action: str, sql: str, params: _Params = ()) -> list[Any]:
        with translate(f"inspect {action}"), self._store.connection() as connection:
            return connection.execute(sql, params).fetchall()

    def _queues(self) -> list[QueueStats]:
        # Several statements in one read transaction: one snapshot, no lock a writer waits on.
        now = time.time()
        found = []
        with translate("inspect queues"), self._store.connection() as connection:
            connection.execute("BEGIN")
            try:
                names = [name for (name,) in connection.execute(_sql.QUEUE_NAMES)]
                for name in names:
                    params = {"queue": name, "now": now}
                    pending, due_expired, later_expired, claimed, dead = connection.execute(
                        _sql.QUEUE_COUNTS, params
                    ).fetchone()
                    later, oldest = connection.execute(_sql.PENDING_BY_PRIORITY, params).fetchone()
                    due = pending - later
                    found.append(QueueStats(
                        name, due - due_expired, later - later_expired,
                        due_expired + later_expired, claimed, dead,
                        None if oldest is None else now - oldest,
                    ))  # fmt: skip
            finally:
                connection.execute("COMMIT")
        return sorted(found, key=lambda stats: stats.name)

    def _jobs(self, queue: str, state: JobState | None, limit: int) -> list[JobInfo]:
        return self._jobs_after(queue, state, limit, 0)

    def _jobs_after(
        self, queue: str, state: JobState | None, limit: int, after: int
    ) -> list[JobInfo]:
        params = {"queue": queue, "limit": limit, "after": after}
        with translate(f"inspect jobs of {queue!r}"), self._store.connection() as connection:
            pending_along_ids = state in (None, "pending") and _walk_pays(
                connection, _sql.JOBS_SPAN, _sql.PENDING_PART, params
            )
            dead_along_ids = state in (None, "dead") and _walk_pays(
                connection, _sql.DEAD_SPAN, _sql.DEAD_PART, params
            )
            page = _sql.list_jobs(state, pending_along_ids, dead_along_ids)
            rows = connection.execute(page, params).fetchall()
        return [_info(row) for row in rows]

    def _streams(self) -> list[StreamStats]:
        heads: dict[str, int] = {}
        consumers: dict[str, list[ConsumerStats]] = {}
        for stream, head, consumer, offset, lag in self._read("streams", _sql.STREAM_STATS):
            if consumer is None:
                heads[stream] = head
            else:
                consumers.setdefault(stream, []).append(ConsumerStats(consumer, offset, lag))
        return [
            StreamStats(
                name,
                heads.get(name, 0),
                tuple(sorted(consumers.get(name, ()), key=lambda c: c.name)),
            )
            for name in sorted(heads.keys() | consumers.keys())
        ]

    def _locks(self) -> list[LockInfo]:
        rows = self._read("locks", _sql.HELD_LOCKS, (time.time(),))
        return sorted((LockInfo(*row) for row in rows), key=lambda lock: lock.name)

    def _schedules(self) -> list[Schedule]:
        rows = self._read("schedules", _sql.LIST_SCHEDULES)
        return sorted(
            (Schedule(name, spec, queue, decode(payload), next_fire_at, tz, last_fire_at)
             for name, spec, queue, payload, next_fire_at, tz, last_fire_at in rows),
            key=lambda schedule: schedule.name,
        )  # fmt: skip


def _walk_pays(
    connection: sqlite3.Connection, span_sql: str, part_sql: str, params: dict[str, Any]
) -> bool:
    """Whether a page of a queue's part is read along the primary key, not sorted.

    Walking from ``after`` reads about ``limit * span / part`` rows (the part's
    rows spread among the table's ``span`` ids); sorting reads all ``part``
    rows. The walk costs less once ``part`` reaches ``sqrt(limit * span)``, so the
    part's rows are counted that far and no further: either way, the page
    reads about that many rows at most.
    """
    span = connection.execute(span_sql, params).fetchone()[0]
    if not span or span <= 0:
        return False
    enough = math.isqrt(params["limit"] * span) + 1
    part = connection.execute(part_sql, {**params, "enough": enough}).fetchone()[0]
    return bool(part >= enough)


def _info(row: tuple[Any, ...]) -> JobInfo:
    """A job from a row of ``_sql.list_jobs``: ``JOB_COLUMNS``, then ``died_at``."""
    *columns, deadline, last_error, key, died_at = row
    if died_at is None:
        return job_info((*columns, deadline, last_error, key), dead=False)
    return job_info((*columns, last_error, died_at, key), dead=True)
