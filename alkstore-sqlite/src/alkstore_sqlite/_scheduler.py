"""The schedule runner: leader election on ``__alkstore_scheduler``, then fires.

Each elapsed boundary is one transaction that checks leadership, enqueues the
schedule's job and advances the schedule, so a deposed leader can never fire
a boundary twice and a crash mid-way fires it at most once more.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from alkstore import SCHEDULER_LOCK, EnqueueOpts, LeadershipLost
from alkstore.engine import Lock, StopSignal, plan_fires, run_scheduler, stamp_job
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import translate
from alkstore_sqlite._lock import SQLiteLock, acquire, renew
from alkstore_sqlite._queue import insert_job
from alkstore_sqlite._watcher import SCHEDULES_KEY

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["run_schedules"]


def run_schedules(store: SQLiteStore, stop: StopSignal, owner: str) -> None:
    """Lead or stand by until ``stop`` is set; see ``Store.run_schedules``."""
    lease = store.settings.scheduler_lease_s
    run_scheduler(
        stop,
        lease_s=lease,
        try_lead=lambda: _try_lead(store, owner, lease),
        fire_due=lambda lock: _fire_due(store, lock),
        watch_changes=lambda: store.subscribe(SCHEDULES_KEY),
    )


def _try_lead(store: SQLiteStore, owner: str, lease: float) -> SQLiteLock | None:
    with translate("take scheduler leadership"), store.pool.connection() as connection:
        connection.execute("BEGIN IMMEDIATE")
        leading = acquire(connection, SCHEDULER_LOCK, owner, lease)
        connection.execute("COMMIT")
    return SQLiteLock(store, SCHEDULER_LOCK, owner, lease) if leading else None


def _fire_due(store: SQLiteStore, lock: Lock) -> float | None:
    """Fire every elapsed boundary; return when the next one is due."""
    now = time.time()
    with translate("fire schedules"), store.pool.connection() as connection:
        due = connection.execute(_sql.DUE_SCHEDULES, (now,)).fetchall()
        for name, interval_s, queue, payload, priority, max_attempts, expires_s, next_at in due:
            plan = plan_fires(next_at, interval_s, now)
            opts = EnqueueOpts(priority=priority, max_attempts=max_attempts, expires=expires_s)
            stamp = stamp_job(store._declared_queue_opts(queue), opts)
            advances = [*plan.fire_at[1:], plan.next_fire_at]
            for boundary, advance_to in zip(plan.fire_at, advances, strict=True):
                connection.execute("BEGIN IMMEDIATE")
                # Renewing is the fence: a long catch-up never outlives the lease.
                if not renew(connection, SCHEDULER_LOCK, lock.owner, lock.ttl_s):
                    connection.execute("ROLLBACK")
                    raise LeadershipLost(f"{lock.owner!r} no longer holds {SCHEDULER_LOCK!r}")
                advanced = connection.execute(_sql.ADVANCE_SCHEDULE, (advance_to, name, boundary))
                if advanced.rowcount == 1:
                    insert_job(connection, queue, stamp, payload)
                connection.execute("COMMIT")
                if advanced.rowcount != 1:
                    break  # the schedule changed under us: re-read it next round
        row = connection.execute(_sql.NEXT_SCHEDULE).fetchone()
    if due:
        store.committed()
    return None if row is None else row[0]
