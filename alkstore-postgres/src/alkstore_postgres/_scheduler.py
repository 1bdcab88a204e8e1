"""The scheduler's storage primitives; core's loop leads, plans and calls them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alkstore import SCHEDULER_LOCK
from alkstore.engine import DueSchedule, DueSchedules, Fired, JobStamp, Lock
from alkstore_postgres._lock import renew
from alkstore_postgres._names import stored, unstored
from alkstore_postgres._plan import Fetch, Operation, Plan, Statement
from alkstore_postgres._queue import insert_job

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements
    from alkstore_postgres._store import PostgresStore

__all__ = ["due_schedules", "fire_boundary", "until_next_fire"]


def due_schedules(store: PostgresStore) -> DueSchedules:
    """Every schedule whose next boundary is at or before the server's now."""
    return store.run(_due_schedules(store.sql))


def _due_schedules(sql: Statements) -> Plan[DueSchedules]:
    yield Operation("read due schedules")
    rows = yield Statement(sql.due_schedules, fetch=Fetch.ALL)
    now = rows[0][-1] if rows else 0.0
    return DueSchedules(now, [_due(*row) for row in rows])


def _due(name: str, interval_s: float, queue: str, *rest: Any) -> DueSchedule:
    """A row of ``due_schedules`` (its last column is the server's now)."""
    payload, priority, max_attempts, expires_s, next_fire_at, spec, tz, key, _now = rest
    return DueSchedule(
        unstored(name), interval_s, unstored(queue), payload, priority, max_attempts, expires_s,
        next_fire_at, spec, tz, None if key is None else unstored(key),
    )  # fmt: skip


def fire_boundary(
    store: PostgresStore,
    lock: Lock,
    schedule: DueSchedule,
    boundary: float,
    advance_to: float,
    stamp: JobStamp,
) -> Fired:
    """Renew the lock, advance the schedule and enqueue its job, in one transaction."""
    return store.run(_fire_boundary(store.sql, lock, schedule, boundary, advance_to, stamp))


def _fire_boundary(
    sql: Statements,
    lock: Lock,
    schedule: DueSchedule,
    boundary: float,
    advance_to: float,
    stamp: JobStamp,
) -> Plan[Fired]:
    yield Operation(f"fire schedule {schedule.name!r}", transaction=True)
    if not (yield from renew(sql, SCHEDULER_LOCK, lock.owner, lock.ttl_s)):
        return Fired.NOT_LEADER
    params = {"to": advance_to, "name": stored(schedule.name), "from": boundary}
    if (yield Statement(sql.advance_schedule, params, Fetch.ROWCOUNT)) != 1:
        return Fired.SCHEDULE_CHANGED
    yield from insert_job(sql, schedule.queue, stamp, schedule.payload_json)
    return Fired.FIRED


def until_next_fire(store: PostgresStore) -> float | None:
    """Seconds (by the server's clock) until the earliest boundary of any schedule."""
    return store.run(_until_next_fire(store.sql))


def _until_next_fire(sql: Statements) -> Plan[float | None]:
    yield Operation("read the next schedule")
    row = yield Statement(sql.next_schedule, fetch=Fetch.ONE)
    return None if row is None or row[0] is None else float(row[0])
