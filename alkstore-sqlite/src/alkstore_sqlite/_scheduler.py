"""The scheduler's storage primitives; core's loop leads, plans and calls them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from alkstore import SCHEDULER_LOCK
from alkstore.engine import DueSchedule, DueSchedules, Fired, JobStamp, Lock
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import translate
from alkstore_sqlite._lock import renew
from alkstore_sqlite._queue import insert_job

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["due_schedules", "fire_boundary", "until_next_fire"]


def due_schedules(store: SQLiteStore) -> DueSchedules:
    """Every schedule whose next boundary is at or before now."""
    now = time.time()
    with translate("read due schedules"), store.connection() as connection:
        rows = connection.execute(_sql.DUE_SCHEDULES, (now,)).fetchall()
    return DueSchedules(now, [DueSchedule(*row) for row in rows])


def fire_boundary(
    store: SQLiteStore,
    lock: Lock,
    schedule: DueSchedule,
    boundary: float,
    advance_to: float,
    stamp: JobStamp,
) -> Fired:
    """Renew the lock, advance the schedule and enqueue its job, in one transaction."""
    with translate(f"fire schedule {schedule.name!r}"), store.in_transaction() as connection:
        if not renew(connection, SCHEDULER_LOCK, lock.owner, lock.ttl_s):
            return Fired.NOT_LEADER
        advanced = connection.execute(
            _sql.ADVANCE_SCHEDULE,
            {"advance_to": advance_to, "boundary": boundary, "name": schedule.name},
        ).rowcount
        if advanced != 1:
            return Fired.SCHEDULE_CHANGED
        insert_job(connection, schedule.queue, stamp, schedule.payload_json)
    return Fired.FIRED


def until_next_fire(store: SQLiteStore) -> float | None:
    """Seconds until the earliest boundary of any schedule."""
    with translate("read the next schedule"), store.connection() as connection:
        next_at = connection.execute(_sql.NEXT_SCHEDULE).fetchone()[0]
    return None if next_at is None else next_at - time.time()
