"""Firing due schedules: one transaction per boundary, fenced by the leader lock."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from alkstore import SCHEDULER_LOCK, EnqueueOpts, LeadershipLost
from alkstore.engine import Lock, plan_fires, stamp_job
from alkstore_postgres._errors import translate
from alkstore_postgres._lock import renew
from alkstore_postgres._names import unstored
from alkstore_postgres._queue import insert_job

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = ["SCHEDULES_KEY", "fire_due"]

SCHEDULES_KEY = "__alkstore_schedules"


def fire_due(store: PostgresStore, lock: Lock) -> float | None:
    """Fire every elapsed boundary; return when (client clock) the next is due."""
    sql = store.sql
    with translate("fire schedules"), store.connection() as connection:
        due = connection.execute(sql.due_schedules).fetchall()
        for (
            name,
            interval_s,
            queue,
            payload,
            priority,
            max_attempts,
            expires_s,
            next_at,
            now,
        ) in due:
            plan = plan_fires(next_at, interval_s, now)
            opts = EnqueueOpts(priority=priority, max_attempts=max_attempts, expires=expires_s)
            target = unstored(queue)
            stamp = stamp_job(store._declared_queue_opts(target), opts)
            advances = [*plan.fire_at[1:], plan.next_fire_at]
            for boundary, advance_to in zip(plan.fire_at, advances, strict=True):
                with connection.transaction():
                    # Renewing is the fence: a long catch-up never outlives the lease.
                    if not renew(store, connection, SCHEDULER_LOCK, lock.owner, lock.ttl_s):
                        raise LeadershipLost(f"{lock.owner!r} no longer holds {SCHEDULER_LOCK!r}")
                    advanced = connection.execute(
                        sql.advance_schedule, {"to": advance_to, "name": name, "from": boundary}
                    ).rowcount
                    if advanced == 1:
                        insert_job(store, connection, target, stamp, payload)
                if advanced != 1:
                    break  # the schedule changed under us: re-read it next round
        row = connection.execute(sql.next_schedule).fetchone()
    until_next = None if row is None else row[0]
    return None if until_next is None else time.time() + until_next
