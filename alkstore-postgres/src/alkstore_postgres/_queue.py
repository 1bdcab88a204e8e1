"""Queues on PostgreSQL: claims skip locked rows, so no claimer waits behind another."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from alkstore import Database, JobInfo, QueueOpts
from alkstore.engine import (
    EXPIRED,
    LAPSED_ON_LAST_ATTEMPT,
    Job,
    JobStamp,
    Queue,
    decode,
    queue_wake_key,
)
from alkstore_postgres._names import stored, unstored, wake_params
from alkstore_postgres._plan import Fetch, Operation, Pipeline, Plan, Statement

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements
    from alkstore_postgres._store import PostgresStore

__all__ = [
    "STAMP_COLUMNS", "PostgresQueue", "QueuePlans", "claimed_jobs", "insert_job", "job_info",
    "stamp_columns",
]  # fmt: skip

J = TypeVar("J")


# The last_error of the dead letters the engine makes itself: core's texts, bound.
_LAPSED = stored(LAPSED_ON_LAST_ATTEMPT)
_EXPIRED = stored(EXPIRED)

STAMP_COLUMNS = (
    "queue", "priority", "run_at", "delay", "expires_in", "max_attempts", "visibility",
    "backoff", "retention",
)  # fmt: skip
"""The bind parameters of a new job row besides its id and payload."""


_KEY_RACES = 16
"""How often a keyed enqueue tries again when the live job it met was gone by
the time it looked for its id (finished meanwhile, so the key is free)."""


def insert_job(sql: Statements, queue: str, stamp: JobStamp, payload: str) -> Plan[int]:
    """Insert a job row (and wake the queue's waiters at commit); its id.

    A keyed job whose key a live job of ``queue`` holds is not inserted: that
    job's id is returned (read by a second statement, which in a read
    committed transaction sees the job of a transaction the insert waited for).
    One past its expiry is never handed out again, so it holds no key: it goes
    to dead letters (as ``sweep_expired`` would move it) and the insert runs again.
    """
    params = {
        **_stamp_params(queue, stamp), "payload": payload,
        "job_key": None if stamp.key is None else stored(stamp.key),
        "traceparent": stamp.traceparent,
        **wake_params(sql.schema, queue_wake_key(queue)),
    }  # fmt: skip
    if stamp.key is None:
        row = yield Statement(sql.enqueue, params, Fetch.ONE)
        assert row is not None
        return int(row[0])
    for _ in range(_KEY_RACES):
        row = yield Statement(sql.enqueue_keyed, params, Fetch.ONE)
        if row is not None:
            return int(row[0])
        live = yield Statement(sql.live_job_with_key, params, Fetch.ONE)
        if live is None:
            continue  # it finished meanwhile: the key is free
        live_id, expired = live
        if not expired:
            return int(live_id)
        yield Statement(sql.expired_one_to_dead, {"id": live_id, "expired": _EXPIRED})
    raise Database(
        f"enqueue into {queue!r} with key {stamp.key!r}: the key's live job kept going "
        f"between inserting and looking, {_KEY_RACES} times in a row"
    )


@functools.lru_cache(maxsize=256)
def stamp_columns(queue: str, stamp: JobStamp) -> tuple[Any, ...]:
    """The values of ``STAMP_COLUMNS`` for a job of ``queue`` with ``stamp``."""
    return (
        stored(queue), stamp.priority, stamp.run_at, stamp.delay_s, stamp.expires_in_s,
        stamp.max_attempts, stamp.visibility_timeout_s, stamp.backoff_base_s,
        stamp.dead_letter_retention_s,
    )  # fmt: skip


@functools.lru_cache(maxsize=256)
def _stamp_params(queue: str, stamp: JobStamp) -> dict[str, Any]:
    """``stamp_columns`` by name, as the single-row enqueue binds them (never mutated)."""
    return dict(zip(STAMP_COLUMNS, stamp_columns(queue, stamp), strict=True))


class QueuePlans:
    """The operations of one queue, as plans (see ``_plan``): what the sync and the
    async queue both run. A claim's fields come back as keyword arguments of
    ``Job`` (and ``AsyncJob``) but ``queue``; a settling call names the claim by
    its job id, attempt and worker."""

    def __init__(self, sql: Statements, name: str) -> None:
        self._sql = sql
        self._name = name
        self._key = stored(name)
        self._wake = wake_params(sql.schema, queue_wake_key(name))

    def enqueue(self, stamp: JobStamp, payload_json: str) -> Plan[int]:
        yield Operation(f"enqueue into {self._name!r}")
        return (yield from insert_job(self._sql, self._name, stamp, payload_json))

    def claim(self, worker_id: str, n: int) -> Plan[list[tuple[Any, ...]]]:
        """The claimed rows, for :func:`claimed_jobs`."""
        yield Operation(f"claim from {self._name!r}")
        sql = self._sql
        params = {"queue": self._key, "worker": stored(worker_id), "n": n, "lapsed": _LAPSED}
        rows = yield Statement(sql.claim_unless_lapsed, params, Fetch.ALL)
        if rows and rows[-1][0] is None:  # a claim lapsed: nothing was claimed
            # One round trip: pipelined statements before the sync run as one
            # implicit transaction, so a lapsed job is claimable by this claim.
            *_, rows = yield Pipeline(
                (
                    Statement(sql.lapsed_to_dead, params),
                    Statement(sql.lapsed_to_pending, params),
                    Statement(sql.claim, params, Fetch.ALL),
                )
            )
        return rows  # type: ignore[no-any-return]

    def ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> Plan[int]:
        yield Operation(f"ack_batch on {self._name!r}")
        ids, attempts = zip(*claims, strict=True)
        params = {
            "queue": self._key, "worker": stored(worker_id), "ids": list(ids),
            "attempts": list(attempts),
        }  # fmt: skip
        return int((yield Statement(self._sql.ack_batch, params, Fetch.ROWCOUNT)))

    def cancel(self, job_id: int) -> Plan[bool]:
        yield Operation(f"cancel job {job_id}", transaction=True)
        params = {"id": job_id, "queue": self._key}
        if (yield Statement(self._sql.cancel_live, params, Fetch.ROWCOUNT)):
            return True
        return bool((yield Statement(self._sql.cancel_dead, params, Fetch.ROWCOUNT)))

    def get_job(self, job_id: int) -> Plan[JobInfo | None]:
        yield Operation(f"get job {job_id}")
        params = {"id": job_id, "queue": self._key}
        live = yield Statement(self._sql.get_live, params, Fetch.ONE)
        if live is not None:
            return job_info(live, dead=False)
        dead = yield Statement(self._sql.get_dead, params, Fetch.ONE)
        return None if dead is None else job_info(dead, dead=True)

    def sweep_expired(self) -> Plan[int]:
        yield Operation(f"sweep {self._name!r}", transaction=True)
        sql = self._sql
        params = {"queue": self._key, "lapsed": _LAPSED, "expired": _EXPIRED}
        moved = yield Statement(sql.expired_to_dead, params, Fetch.ROWCOUNT)
        yield Statement(sql.lapsed_to_dead, params)
        yield Statement(sql.lapsed_to_pending, params)
        yield Statement(sql.purge_dead, params)
        return int(moved)

    def until_ready(self) -> Plan[float | None]:
        yield Operation(f"look at {self._name!r}")
        row = yield Statement(self._sql.next_ready, {"queue": self._key}, Fetch.ONE)
        return None if row is None or row[0] is None else float(row[0])

    def requeue_dead(
        self, job_ids: list[int] | None, reset_attempts: bool, opts: QueueOpts
    ) -> Plan[int]:
        yield Operation(f"requeue dead jobs of {self._name!r}", transaction=True)
        params: dict[str, Any] = {
            "queue": self._key, "reset": reset_attempts,
            "visibility": opts.visibility_timeout_s, "backoff": opts.backoff_base_s,
        }  # fmt: skip
        statement = self._sql.requeue_dead
        if job_ids is not None:
            statement, params["ids"] = self._sql.requeue_dead_ids, job_ids
        row = yield Statement(statement, params, Fetch.ONE)
        moved = int(row[0]) if row is not None else 0
        if moved:
            yield Statement(self._sql.notify, self._wake)
        return moved

    def purge_dead(self, older_than_s: float | None) -> Plan[int]:
        yield Operation(f"purge dead jobs of {self._name!r}")
        if older_than_s is None:
            params: dict[str, Any] = {"queue": self._key}
            return int((yield Statement(self._sql.purge_dead_all, params, Fetch.ROWCOUNT)))
        params = {"queue": self._key, "older": older_than_s}
        return int((yield Statement(self._sql.purge_dead_older, params, Fetch.ROWCOUNT)))

    def ack(self, job_id: int, attempts: int, worker_id: str) -> Plan[bool]:
        yield Operation(f"ack job {job_id}")
        params = _holds(job_id, attempts, worker_id)
        return bool((yield Statement(self._sql.ack, params, Fetch.ROWCOUNT)) == 1)

    def retry(
        self, job_id: int, attempts: int, worker_id: str, error: str, delay_s: float
    ) -> Plan[bool]:
        yield Operation(f"retry job {job_id}", transaction=True)
        params = _holds(
            job_id, attempts, worker_id, error=stored(error), delay=delay_s, **self._wake
        )
        if (yield Statement(self._sql.retry, params, Fetch.ROWCOUNT)) == 1:
            return True
        return bool((yield Statement(self._sql.to_dead_if_held, params, Fetch.ROWCOUNT)) == 1)

    def fail(self, job_id: int, attempts: int, worker_id: str, error: str) -> Plan[bool]:
        yield Operation(f"fail job {job_id}")
        params = _holds(job_id, attempts, worker_id, error=stored(error))
        return bool((yield Statement(self._sql.to_dead_if_held, params, Fetch.ROWCOUNT)) == 1)

    def release(self, job_id: int, attempts: int, worker_id: str) -> Plan[bool]:
        yield Operation(f"release job {job_id}")
        params = _holds(job_id, attempts, worker_id, **self._wake)
        return bool((yield Statement(self._sql.release, params, Fetch.ROWCOUNT)) == 1)

    def heartbeat(
        self, job_id: int, attempts: int, worker_id: str, extend_s: float
    ) -> Plan[float | None]:
        """The claim's new deadline, or None when it no longer held."""
        yield Operation(f"heartbeat job {job_id}")
        params = _holds(job_id, attempts, worker_id, extend=extend_s)
        row = yield Statement(self._sql.heartbeat, params, Fetch.ONE)
        return None if row is None else float(row[0])


def claimed_jobs(
    job: Callable[..., J], queue: object, rows: list[tuple[Any, ...]], worker_id: str
) -> list[J]:
    """The handles (``Job`` or ``AsyncJob``) of the rows a ``claim`` plan returned.

    Each row's fields are passed by name, without a dict between: a claim of
    32 builds 32 handles, and the dict cost as much again as the handle.
    """
    jobs = []
    for row in rows:
        (job_id, payload, priority, attempts, max_attempts, run_at, deadline, backoff, lease,
         key, traceparent) = row  # fmt: skip
        handle = job(
            queue=queue, id=job_id, payload=decode(payload), priority=priority,
            attempts=attempts, max_attempts=max_attempts, run_at=run_at, deadline=deadline,
            worker_id=worker_id, backoff_base_s=backoff, visibility_timeout_s=lease,
            key=None if key is None else unstored(key), traceparent=traceparent,
        )  # fmt: skip
        jobs.append(handle)
    return jobs


def _holds(job_id: int, attempts: int, worker_id: str, **extra: Any) -> dict[str, Any]:
    """Bind parameters naming one claim (the ``HOLDS`` condition), and ``extra``."""
    return {"id": job_id, "attempts": attempts, "worker": stored(worker_id), **extra}


class PostgresQueue(Queue):
    """A queue in the store's schema."""

    _store: PostgresStore

    def __init__(self, store: PostgresStore, name: str, opts: QueueOpts) -> None:
        super().__init__(store, name, opts)
        self._plans = QueuePlans(store.sql, name)

    def _enqueue(self, stamp: JobStamp, payload_json: str) -> int:
        return self._store.run(self._plans.enqueue(stamp, payload_json))

    def _claim(self, worker_id: str, n: int) -> list[Job]:
        rows = self._store.run(self._plans.claim(worker_id, n))
        return claimed_jobs(Job, self, rows, worker_id)

    def _ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> int:
        return self._store.run(self._plans.ack_batch(claims, worker_id))

    def _cancel(self, job_id: int) -> bool:
        return self._store.run(self._plans.cancel(job_id))

    def _get_job(self, job_id: int) -> JobInfo | None:
        return self._store.run(self._plans.get_job(job_id))

    def _sweep_expired(self) -> int:
        return self._store.run(self._plans.sweep_expired())

    def _until_ready(self) -> float | None:
        return self._store.run(self._plans.until_ready())

    def _requeue_dead(self, job_ids: list[int] | None, reset_attempts: bool) -> int:
        return self._store.run(self._plans.requeue_dead(job_ids, reset_attempts, self.opts))

    def _purge_dead(self, older_than_s: float | None) -> int:
        return self._store.run(self._plans.purge_dead(older_than_s))

    def _ack_job(self, job: Job) -> bool:
        return self._store.run(self._plans.ack(job.id, job.attempts, job.worker_id))

    def _retry_job(self, job: Job, error: str, delay_s: float) -> bool:
        plan = self._plans.retry(job.id, job.attempts, job.worker_id, error, delay_s)
        return self._store.run(plan)

    def _fail_job(self, job: Job, error: str) -> bool:
        return self._store.run(self._plans.fail(job.id, job.attempts, job.worker_id, error))

    def _release_job(self, job: Job) -> bool:
        return self._store.run(self._plans.release(job.id, job.attempts, job.worker_id))

    def _heartbeat_job(self, job: Job, extend_s: float) -> bool:
        plan = self._plans.heartbeat(job.id, job.attempts, job.worker_id, extend_s)
        deadline = self._store.run(plan)
        if deadline is None:
            return False
        job.deadline = deadline
        return True


def job_info(row: tuple[Any, ...], *, dead: bool) -> JobInfo:
    """A job from a row of ``get_live`` (``dead=False``) or ``get_dead`` (``dead=True``)."""
    job_id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts = row[
        :9
    ]
    if dead:
        worker_id, key, last_error, died_at = row[9:]
        deadline, state = None, "dead"
    else:
        worker_id, key, deadline, last_error = row[9:]
        died_at, state = None, "pending" if deadline is None else "processing"
    return JobInfo(
        id=job_id, queue=unstored(queue), state=state, payload=decode(payload),  # type: ignore[arg-type]
        priority=priority, attempts=attempts, max_attempts=max_attempts, run_at=run_at,
        created_at=created_at, expires_at=expires_at,
        worker_id=None if worker_id is None else unstored(worker_id), deadline=deadline,
        last_error=None if last_error is None else unstored(last_error), died_at=died_at,
        key=None if key is None else unstored(key),
    )  # fmt: skip
