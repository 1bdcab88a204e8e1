"""The store's own operations as plans (see ``_plan``), for the sync and the
async store: notify, schedules, and the checks of an adopted connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from alkstore import Schedule, ScheduleOpts
from alkstore.engine import SCHEDULES_WAKE_KEY, PlacedSchedule, decode, place_schedule
from alkstore_postgres._names import stored, wake_params
from alkstore_postgres._plan import Fetch, Operation, Plan, Statement
from alkstore_postgres._wakes import notify_params

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements

__all__ = ["adoption", "check_adopted", "notify", "schedule", "unschedule"]


def notify(sql: Statements, channel: str) -> Plan[None]:
    """A user's notify on ``channel``, in its own transaction."""
    yield Operation(f"notify {channel!r}")
    yield Statement(sql.notify, notify_params(sql.schema, channel))


def schedule(
    sql: Statements,
    name: str,
    spec: str,
    interval_s: int,
    queue: str,
    payload_json: str,
    opts: ScheduleOpts,
) -> Plan[Schedule]:
    """Create or replace a schedule, placed where core's ``place_schedule`` says."""
    yield Operation(f"schedule {name!r}", transaction=True)
    row = yield Statement(sql.get_schedule, {"name": stored(name)}, Fetch.ONE)
    if row is None:
        existing, now = None, (yield Statement(sql.now, fetch=Fetch.ONE))[0]
        last_fire_at = None
    else:
        existing, now = PlacedSchedule(row[0], row[1], row[2], row[3]), row[4]
        last_fire_at = row[5]
    placed = place_schedule(existing, spec, interval_s, now, opts.tz)
    yield Statement(
        sql.upsert_schedule,
        {
            "name": stored(name), "spec": spec, "interval": interval_s,
            "queue": stored(queue), "payload": payload_json, "priority": opts.priority,
            "max_attempts": opts.max_attempts, "expires": opts.expires,
            "anchor": placed.anchor, "next": placed.next_fire_at, "tz": placed.tz,
            "job_key": None if opts.key is None else stored(opts.key),
        },
    )  # fmt: skip
    yield Statement(sql.notify, wake_params(sql.schema, SCHEDULES_WAKE_KEY))
    return Schedule(
        name, spec, queue, decode(payload_json), placed.next_fire_at, placed.tz, last_fire_at
    )


def unschedule(sql: Statements, name: str) -> Plan[bool]:
    """Delete a schedule; True if it existed."""
    yield Operation(f"unschedule {name!r}")
    return bool((yield Statement(sql.delete_schedule, {"name": stored(name)}, Fetch.ROWCOUNT)) == 1)


def adoption(
    sql: Statements,
    storage: tuple[Any, ...] | None,
    location: str,
    status: Callable[[], psycopg.pq.TransactionStatus],
) -> Plan[None]:
    """Check that an adopted connection reaches the store's storage (see
    :func:`check_adopted`), and begin its transaction unless one is open
    (``status`` tells the connection's, after the check's own statement)."""
    yield Operation("inspect the adopted connection")
    found = yield Statement(sql.storage, fetch=Fetch.ONE)
    check_adopted(found, storage, sql.schema, location)
    if status() == psycopg.pq.TransactionStatus.IDLE:
        yield Statement("BEGIN")


def check_adopted(found: tuple[Any, ...] | None, storage: tuple[Any, ...] | None,
                  schema: str, location: str) -> None:  # fmt: skip
    """Refuse an adopted connection whose storage (``Statements.storage``, read on
    it: ``found``) is not the store's own (``storage``).

    Raises:
        ValueError: the connection reaches another database, or one without the schema.
    """
    if found is None or found[0] is None:
        raise ValueError(
            f"adopt_tx: the connection's database has no alkstore schema "
            f"{schema!r}; is it the store's database?"
        )
    if found != storage:
        raise ValueError(
            f"adopt_tx: the connection reaches database {found[1]!r}, whose schema "
            f"{schema!r} is not this store's ({location}); adopt "
            "a connection to the store's own database"
        )
