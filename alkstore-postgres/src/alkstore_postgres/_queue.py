"""Queues on PostgreSQL: claims skip locked rows, so no claimer waits behind another."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import psycopg

from alkstore import JobInfo, QueueOpts
from alkstore.engine import (
    EXPIRED,
    LAPSED_ON_LAST_ATTEMPT,
    Job,
    JobStamp,
    Queue,
    decode,
    queue_wake_key,
)
from alkstore_postgres._errors import translate
from alkstore_postgres._names import stored, unstored

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = [
    "STAMP_COLUMNS", "PostgresQueue", "insert_job", "job_info", "stamp_columns",
]  # fmt: skip


# The last_error of the dead letters the engine makes itself: core's texts, bound.
_LAPSED = stored(LAPSED_ON_LAST_ATTEMPT)
_EXPIRED = stored(EXPIRED)

STAMP_COLUMNS = (
    "queue", "priority", "run_at", "delay", "expires_in", "max_attempts", "visibility",
    "backoff", "retention",
)  # fmt: skip
"""The bind parameters of a new job row besides its id and payload."""


def insert_job(
    store: PostgresStore, connection: psycopg.Connection, queue: str, stamp: JobStamp, payload: str
) -> int:
    """Insert a job row on ``connection`` (and wake the queue's waiters at commit)."""
    params = {**_stamp_params(queue, stamp), "payload": payload}
    row = connection.execute(
        store.sql.enqueue, {**params, **store.wake_params(queue_wake_key(queue))}
    ).fetchone()
    assert row is not None
    return int(row[0])


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


class PostgresQueue(Queue):
    """A queue in the store's schema."""

    _store: PostgresStore

    def __init__(self, store: PostgresStore, name: str, opts: QueueOpts) -> None:
        super().__init__(store, name, opts)
        self._key = stored(name)

    def _enqueue(self, stamp: JobStamp, payload_json: str) -> int:
        with translate(f"enqueue into {self.name!r}"), self._store.connection() as connection:
            return insert_job(self._store, connection, self.name, stamp, payload_json)

    def _claim(self, worker_id: str, n: int) -> list[Job]:
        sql = self._store.sql
        params = {
            "queue": self._key, "worker": stored(worker_id), "n": n,
            "lapsed": _LAPSED,
        }  # fmt: skip
        with translate(f"claim from {self.name!r}"), self._store.connection() as connection:
            # One round trip: pipelined statements before the sync run as one
            # implicit transaction, so a lapsed job is claimable by this claim.
            with connection.pipeline():
                connection.execute(sql.lapsed_to_dead, params)
                connection.execute(sql.lapsed_to_pending, params)
                claimed = connection.execute(sql.claim, params)
            rows = claimed.fetchall()
        return [
            Job(
                queue=self,
                id=row[0],
                payload=decode(row[1]),
                priority=row[2],
                attempts=row[3],
                max_attempts=row[4],
                run_at=row[5],
                deadline=row[6],
                worker_id=worker_id,
                backoff_base_s=row[7],
                visibility_timeout_s=row[8],
            )
            for row in rows
        ]

    def _ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> int:
        ids, attempts = zip(*claims, strict=True)
        params = {
            "queue": self._key, "worker": stored(worker_id), "ids": list(ids),
            "attempts": list(attempts),
        }  # fmt: skip
        with translate(f"ack_batch on {self.name!r}"), self._store.connection() as connection:
            return connection.execute(self._store.sql.ack_batch, params).rowcount

    def _cancel(self, job_id: int) -> bool:
        params = {"id": job_id, "queue": self._key}
        with translate(f"cancel job {job_id}"), self._store.in_transaction() as connection:
            removed = connection.execute(self._store.sql.cancel_live, params).rowcount
            if not removed:
                removed = connection.execute(self._store.sql.cancel_dead, params).rowcount
        return removed > 0

    def _get_job(self, job_id: int) -> JobInfo | None:
        params = {"id": job_id, "queue": self._key}
        with translate(f"get job {job_id}"), self._store.connection() as connection:
            live = connection.execute(self._store.sql.get_live, params).fetchone()
            if live is not None:
                return job_info(live, dead=False)
            dead = connection.execute(self._store.sql.get_dead, params).fetchone()
        return None if dead is None else job_info(dead, dead=True)

    def _sweep_expired(self) -> int:
        sql = self._store.sql
        params = {"queue": self._key, "lapsed": _LAPSED, "expired": _EXPIRED}
        with translate(f"sweep {self.name!r}"), self._store.in_transaction() as connection:
            moved = connection.execute(sql.expired_to_dead, params).rowcount
            connection.execute(sql.lapsed_to_dead, params)
            connection.execute(sql.lapsed_to_pending, params)
            connection.execute(sql.purge_dead, params)
        return moved

    def _until_ready(self) -> float | None:
        with translate(f"look at {self.name!r}"), self._store.connection() as connection:
            row = connection.execute(self._store.sql.next_ready, {"queue": self._key}).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def _holds(self, job: Job, **extra: Any) -> dict[str, Any]:
        return {"id": job.id, "attempts": job.attempts, "worker": stored(job.worker_id), **extra}

    def _ack_job(self, job: Job) -> bool:
        with translate(f"ack job {job.id}"), self._store.connection() as connection:
            return connection.execute(self._store.sql.ack, self._holds(job)).rowcount == 1

    def _retry_job(self, job: Job, error: str, delay_s: float) -> bool:
        sql = self._store.sql
        params = self._holds(
            job,
            error=stored(error),
            delay=delay_s,
            **self._store.wake_params(queue_wake_key(self.name)),
        )
        with translate(f"retry job {job.id}"), self._store.in_transaction() as connection:
            if connection.execute(sql.retry, params).rowcount == 1:
                return True
            return connection.execute(sql.to_dead_if_held, params).rowcount == 1

    def _fail_job(self, job: Job, error: str) -> bool:
        params = self._holds(job, error=stored(error))
        with translate(f"fail job {job.id}"), self._store.connection() as connection:
            return connection.execute(self._store.sql.to_dead_if_held, params).rowcount == 1

    def _release_job(self, job: Job) -> bool:
        params = self._holds(job, **self._store.wake_params(queue_wake_key(self.name)))
        with translate(f"release job {job.id}"), self._store.connection() as connection:
            return connection.execute(self._store.sql.release, params).rowcount == 1

    def _heartbeat_job(self, job: Job, extend_s: float) -> bool:
        params = self._holds(job, extend=extend_s)
        with translate(f"heartbeat job {job.id}"), self._store.connection() as connection:
            row = connection.execute(self._store.sql.heartbeat, params).fetchone()
        if row is None:
            return False
        job.deadline = row[0]
        return True


def job_info(row: tuple[Any, ...], *, dead: bool) -> JobInfo:
    """A job from a row of ``get_live`` (``dead=False``) or ``get_dead`` (``dead=True``)."""
    job_id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts = row[
        :9
    ]
    if dead:
        worker_id, last_error, died_at = row[9:]
        deadline, state = None, "dead"
    else:
        worker_id, deadline, last_error = row[9:]
        died_at, state = None, "pending" if deadline is None else "processing"
    return JobInfo(
        id=job_id, queue=unstored(queue), state=state, payload=decode(payload),  # type: ignore[arg-type]
        priority=priority, attempts=attempts, max_attempts=max_attempts, run_at=run_at,
        created_at=created_at, expires_at=expires_at,
        worker_id=None if worker_id is None else unstored(worker_id), deadline=deadline,
        last_error=None if last_error is None else unstored(last_error), died_at=died_at,
    )  # fmt: skip
