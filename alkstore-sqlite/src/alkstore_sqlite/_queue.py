"""Queues on SQLite: claims are one ``UPDATE … RETURNING`` through the ready index."""

from __future__ import annotations

import json
import math
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from alkstore import JobInfo, JobState
from alkstore.engine import (
    EXPIRED,
    LAPSED_ON_LAST_ATTEMPT,
    Job,
    JobStamp,
    Queue,
    decode,
    queue_wake_key,
)
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import translate
from alkstore_sqlite._pool import Statements, transaction

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["SQLiteQueue", "insert_job", "job_info", "job_row"]


def insert_job(connection: Statements, queue: str, stamp: JobStamp, payload_json: str) -> int:
    """Insert a job row stamped with ``stamp`` on ``connection``; return its id.

    A keyed job whose key a live job of ``queue`` holds is not inserted: the
    live job's id is returned. One past its expiry is never handed out again,
    so it holds no key: it goes to dead letters (as ``sweep_expired`` would
    move it) and the new job is inserted. Inside a transaction only (it holds
    the write lock from the insert on, so the live job cannot go meanwhile).
    """
    row = job_row(queue, stamp, payload_json)
    if stamp.key is None:
        job_id = connection.execute(_sql.ENQUEUE, row).lastrowid
        assert job_id is not None
        return job_id
    inserted = connection.execute(_sql.ENQUEUE_KEYED, row).fetchone()
    if inserted is not None:
        return int(inserted[0])
    live = connection.execute(_sql.LIVE_JOB_WITH_KEY, (queue, stamp.key)).fetchone()
    assert live is not None, "a conflict on the key index without a live row"
    live_id, expires_at = live
    now = time.time()
    if expires_at is None or expires_at > now:
        return int(live_id)
    connection.execute(_sql.EXPIRED_ONE_TO_DEAD, (EXPIRED, now, live_id))
    connection.execute(_sql.DELETE_BY_ID, (live_id,))
    return int(connection.execute(_sql.ENQUEUE_KEYED, row).fetchone()[0])


def job_row(queue: str, stamp: JobStamp, payload_json: str) -> tuple[Any, ...]:
    """The values of a new job row, as ``_sql.ENQUEUE`` binds them, stamped now."""
    now = time.time()
    run_at = stamp.run_at if stamp.run_at is not None else now + stamp.delay_s
    expires_at = None if stamp.expires_in_s is None else now + stamp.expires_in_s
    return (
        queue, payload_json, stamp.priority, run_at, now, expires_at, stamp.max_attempts,
        stamp.visibility_timeout_s, stamp.backoff_base_s, stamp.dead_letter_retention_s,
        stamp.key, stamp.traceparent,
    )  # fmt: skip


class SQLiteQueue(Queue):
    """A queue in the store's file."""

    _store: SQLiteStore

    def _enqueue(self, stamp: JobStamp, payload_json: str) -> int:
        if stamp.key is not None:  # two statements: see insert_job
            with translate(f"enqueue into {self.name!r}"), self._store.in_transaction() as c:
                return insert_job(c, self.name, stamp, payload_json)
        with translate(f"enqueue into {self.name!r}"), self._store.connection() as connection:
            job_id = insert_job(connection, self.name, stamp, payload_json)
        self._store.committed()
        return job_id

    def _claim(self, worker_id: str, n: int) -> list[Job]:
        now = time.time()
        statement = _sql.CLAIM_ONE if n == 1 else _sql.CLAIM
        claim = (now, worker_id, self.name, now, now, n, self.name, now)
        with translate(f"claim from {self.name!r}"), self._store.connection() as connection:
            # The common case: one statement, atomic by itself. A claim that
            # lapses meanwhile is returned by the next claim.
            rows = connection.execute(statement, claim).fetchall()
            if not rows:
                rows = self._claim_after_lapses(connection, statement, claim, now)
        return [self._job(row, worker_id) for row in rows]

    def _claim_after_lapses(
        self, connection: sqlite3.Connection, statement: str, claim: tuple[Any, ...], now: float
    ) -> list[Any]:
        """The claim again, once lapsed claims are released, if there were any.

        The first claim found nothing, or a lapsed claim held it back. Once
        more even when no lapse is found: another process may have released
        one in between, and the queue is not empty just because of that.
        """
        if not connection.execute(_sql.ANY_LAPSED, (self.name, now)).fetchone():
            return connection.execute(statement, claim).fetchall()
        with transaction(connection):
            self._release_lapsed(connection, now)
            return connection.execute(statement, claim).fetchall()

    def _release_lapsed(self, connection: sqlite3.Connection, now: float) -> None:
        connection.execute(_sql.LAPSED_TO_DEAD, (LAPSED_ON_LAST_ATTEMPT, now, self.name, now))
        connection.execute(_sql.DELETE_LAPSED_DEAD, (self.name, now))
        connection.execute(_sql.LAPSED_TO_PENDING, (self.name, now))

    def _job(self, row: tuple[Any, ...], worker_id: str) -> Job:
        (job_id, payload, priority, attempts, max_attempts, run_at, deadline, backoff, lease,
         key, traceparent) = row  # fmt: skip
        # RETURNING hands back a REAL column's whole-number value as an int (it
        # reports the value before the column's affinity applies): made floats here.
        return Job(
            queue=self, id=job_id, payload=decode(payload), priority=priority,
            attempts=attempts, max_attempts=max_attempts, run_at=float(run_at),
            deadline=float(deadline), worker_id=worker_id, backoff_base_s=float(backoff),
            visibility_timeout_s=float(lease), key=key, traceparent=traceparent,
        )  # fmt: skip

    def _ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> int:
        params = {
            "queue": self.name, "worker": worker_id, "now": time.time(),
            "claims": json.dumps({str(job_id): attempt for job_id, attempt in claims}),
        }  # fmt: skip
        with translate(f"ack_batch on {self.name!r}"), self._store.connection() as connection:
            return connection.execute(_sql.ACK_BATCH, params).rowcount

    def _cancel(self, job_id: int) -> bool:
        with translate(f"cancel job {job_id}"), self._store.in_transaction() as connection:
            removed = connection.execute(_sql.CANCEL_LIVE, (job_id, self.name)).rowcount
            if not removed:
                removed = connection.execute(_sql.CANCEL_DEAD, (job_id, self.name)).rowcount
        return removed > 0

    def _get_job(self, job_id: int) -> JobInfo | None:
        with translate(f"get job {job_id}"), self._store.connection() as connection:
            live = connection.execute(_sql.GET_LIVE, (job_id, self.name)).fetchone()
            if live is not None:
                return job_info(live, dead=False)
            dead = connection.execute(_sql.GET_DEAD, (job_id, self.name)).fetchone()
        return None if dead is None else job_info(dead, dead=True)

    def _sweep_expired(self) -> int:
        now = time.time()
        with translate(f"sweep {self.name!r}"), self._store.in_transaction() as connection:
            moved = connection.execute(
                _sql.EXPIRED_TO_DEAD, (EXPIRED, now, self.name, now)
            ).rowcount
            connection.execute(_sql.DELETE_EXPIRED, (self.name, now))
            self._release_lapsed(connection, now)
            connection.execute(_sql.PURGE_DEAD, (self.name, now))
        return moved

    def _requeue_dead(self, job_ids: list[int] | None, reset_attempts: bool) -> int:
        params = {
            "queue": self.name, "now": time.time(), "reset": reset_attempts,
            "visibility": self.opts.visibility_timeout_s, "backoff": self.opts.backoff_base_s,
        }  # fmt: skip
        statement = _sql.REQUEUE_DEAD
        if job_ids is not None:
            statement, params["ids"] = _sql.REQUEUE_DEAD_IDS, json.dumps(job_ids)
        with translate(f"requeue dead jobs of {self.name!r}"), self._store.in_transaction() as c:
            moved = [row[0] for row in c.execute(statement, params).fetchall()]
            if moved:
                c.execute(_sql.DELETE_DEAD_BY_IDS, (json.dumps(moved),))
                self._store.write_notice(c, queue_wake_key(self.name), "null")
        return len(moved)

    def _purge_dead(self, older_than_s: float | None) -> int:
        cutoff = math.inf if older_than_s is None else time.time() - older_than_s
        with translate(f"purge dead jobs of {self.name!r}"), self._store.connection() as c:
            return c.execute(_sql.PURGE_DEAD_BEFORE, (self.name, cutoff)).rowcount

    def _until_ready(self) -> float | None:
        now = time.time()
        with translate(f"look at {self.name!r}"), self._store.connection() as connection:
            next_ready = connection.execute(
                _sql.NEXT_READY, {"queue": self.name, "now": now}
            ).fetchone()[0]
        return None if next_ready is None else next_ready - now

    def _ack_job(self, job: Job) -> bool:
        with translate(f"ack job {job.id}"), self._store.connection() as connection:
            cursor = connection.execute(_sql.ACK, self._holds(job, time.time()))
        return cursor.rowcount == 1

    def _retry_job(self, job: Job, error: str, delay_s: float) -> bool:
        now = time.time()
        retry = (now + delay_s, error, *self._holds(job, now))
        with translate(f"retry job {job.id}"), self._store.in_transaction() as connection:
            if connection.execute(_sql.RETRY, retry).rowcount != 1:
                return False
            self._store.write_notice(connection, queue_wake_key(self.name), "null")
        return True

    def _fail_job(self, job: Job, error: str) -> bool:
        now = time.time()
        to_dead = (error, now, *self._holds(job, now))
        with translate(f"fail job {job.id}"), self._store.in_transaction() as connection:
            if connection.execute(_sql.TO_DEAD_IF_HELD, to_dead).rowcount != 1:
                return False
            connection.execute(_sql.DELETE_BY_ID, (job.id,))
        return True

    def _release_job(self, job: Job) -> bool:
        now = time.time()
        with translate(f"release job {job.id}"), self._store.in_transaction() as connection:
            if connection.execute(_sql.RELEASE, self._holds(job, now)).rowcount != 1:
                return False
            self._store.write_notice(connection, queue_wake_key(self.name), "null")
        return True

    def _heartbeat_job(self, job: Job, extend_s: float) -> bool:
        now = time.time()
        with translate(f"heartbeat job {job.id}"), self._store.connection() as connection:
            cursor = connection.execute(_sql.HEARTBEAT, (now + extend_s, *self._holds(job, now)))
        if cursor.rowcount == 1:
            job.deadline = now + extend_s
            return True
        return False

    @staticmethod
    def _holds(job: Job, now: float) -> tuple[int, int, str, float]:
        return (job.id, job.attempts, job.worker_id, now)


def job_info(row: tuple[Any, ...], *, dead: bool) -> JobInfo:
    """A job from a row of ``_sql.GET_LIVE`` (``dead=False``) or ``_sql.GET_DEAD``
    (``dead=True``): ``JOB_COLUMNS``, with ``died_at`` in place of ``deadline`` if dead
    (``last_error`` before it) and ``key`` last."""
    (job_id, queue, payload, priority, run_at, created_at, expires_at, attempts,
     max_attempts, worker_id) = row[:10]  # fmt: skip
    state: JobState
    if dead:
        last_error, died_at, key = row[10:]
        deadline, state = None, "dead"
    else:
        deadline, last_error, key = row[10:]
        died_at, state = None, "pending" if deadline is None else "processing"
    return JobInfo(
        id=job_id, queue=queue, state=state, payload=decode(payload), priority=priority,
        attempts=attempts, max_attempts=max_attempts, run_at=run_at, created_at=created_at,
        expires_at=expires_at, worker_id=worker_id, deadline=deadline, last_error=last_error,
        died_at=died_at, key=key,
    )  # fmt: skip
