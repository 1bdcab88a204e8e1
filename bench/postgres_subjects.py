"""The PostgreSQL subjects: alkstore (``alkstore_subject``), the raw psycopg floor,
pgqueuer and procrastinate, and ``alkstore sync`` (the ``async_*`` rows through the
sync API).

Every measurement runs in a fresh database (``postgres_database()``): alkstore
creates its schema on open, the raw floor its two tables, pgqueuer runs its
install (``pgq install`` and ``pgq autovac`` through ``Queries``) and
procrastinate applies its schema (``schema_manager.apply_schema_async()``).
Worker and listener processes are spawned; what they run is a module-level
function taking plain data. Payloads are ``{"n": i}`` everywhere (the
latency samples add ``"t0"``).

Drains: the jobs are enqueued untimed, then ``drain_seconds`` (in
``_measured``) runs the workers through ``in_processes`` and times them from
their release until the last worker has finished (its jobs done, its
connections closed), not until its interpreter has exited; the queue is
checked empty (or every job ``succeeded``) after each drain.

alkstore uses its public API only. The raw floor is psycopg 3 with the
fastest correct SQL per operation: autocommit statements; enqueue = one
``INSERT ... RETURNING id, pg_notify(...)`` (the wake a parked worker needs,
as alkstore's enqueue sends); 100 per tx = ``executemany`` of that statement
in one transaction (psycopg pipelines it: one round trip); claim = one
``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING`` on a
partial index of pending rows; ack = a fenced ``DELETE``; no lapsed-claim
recovery, expiry or dead letters in its hot path. Its waits are LISTEN on
the same connection with ``connection.notifies()``.

How the peers map onto the rows (their own worker machinery, no-op handler):

- **pgqueuer** (its asyncpg driver, as its quick start and performance
  guide set it up, so the subject is unavailable without asyncpg: its
  psycopg driver drained 5-8x slower here; uvloop, as ``pgq run`` runs):
  ``Queries.install()`` + ``optimize_autovacuum()`` (``pgq install``, ``pgq
  autovac``), durability left at its default ``durable``.
  ``enqueue_1`` = ``Queries.enqueue(entrypoint, payload, 0)``; ``enqueue_100`` =
  one ``Queries.enqueue`` of three lists of 100 (one statement). It claims in
  batches (``FOR UPDATE SKIP LOCKED LIMIT batch_size``) and logs completions
  in buffered batches, so it has no claim-one mode: ``drain_one_*`` is None
  and its drain is reported in ``drain_batch_*``: each worker process runs
  ``QueueManager.run(batch_size=32, mode=drain)`` (32: its performance guide
  says to raise the default 10 for short jobs, and it is alkstore's batch),
  and returns once the queue is empty and its buffers are flushed (32
  drained 1.6-2x faster than 10 here).
- **procrastinate** (``PsycopgConnector``, asyncio): ``enqueue_1`` =
  ``task.defer_async(n=i)``; ``enqueue_100`` = ``task.batch_defer_async`` of
  100. Its worker fetches one job per query and finishes it with another,
  the claim_one + ack mechanism, so one drain figure per worker count fills
  both ``drain_one_*`` and ``drain_batch_*``: ``app.run_worker_async(wait=False,
  concurrency=1)`` per process, which returns once the queues are empty;
  jobs are kept with status ``succeeded`` (its default ``delete_jobs="never"``)
  and checked so. ``concurrency`` (its default is 1) is for overlapping I/O
  waits in async tasks; with a no-op task on this 2-core machine 4, 8 and 32
  drained no faster than 1.
- The ``async_*`` rows: pgqueuer's API is asyncio already, so its figures
  there are its own rows' measurements again (``async_enqueue_1`` is its
  ``enqueue_1``, ...), taken in turn with alkstore's; ``async_enqueue_1_32t``
  runs 32 tasks through one asyncpg pool (``AsyncpgPoolDriver``, asyncpg's
  default size of 10, alkstore's pool size). procrastinate: None there.
- Latency for the peers is enqueue → *handler start* (their worker claims,
  then calls the handler, which records ``time.time()``), sampled the same
  way; the parent waits ``PEER_SETTLE_S`` after the handler reports, since
  the library still settles the job after it. Claim backlogs, streams,
  notify → wake and idle CPU: None (no such operation, or not cheap and fair).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.connection
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from _harness import (
    Sizes,
    Subject,
    peer_process,
    per_second,
    postgres_database,
    wake_latencies,
)
from _measured import (
    BATCH,
    CHANNEL,
    PAGE,
    QUEUE,
    STREAM,
    WAKE_TIMEOUT_S,
    Measured,
    backlog_rounds,
    check_count,
    drain_seconds,
    read_pages,
)
from _pg_common import scalar
from _pg_peers import Pgqueuer, Procrastinate
from alkstore_subject import Alkstore, AlkstoreSync

__all__ = ["subjects"]


def subjects() -> list[Subject]:
    return [
        Alkstore("postgres"),
        RawPsycopg(),
        Pgqueuer(),
        Procrastinate(),
        AlkstoreSync("postgres"),
    ]


# alkstore, through the public API only


# The raw floor: bare psycopg and the fastest correct SQL

RAW_SCHEMA = (
    b"""CREATE TABLE jobs (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        queue text NOT NULL,
        payload text NOT NULL,
        priority int NOT NULL DEFAULT 0,
        run_at timestamptz NOT NULL DEFAULT now(),
        attempts int NOT NULL DEFAULT 0,
        worker_id text,
        deadline timestamptz
    )""",
    b"CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, id) WHERE deadline IS NULL",
    b"""CREATE TABLE events (
        id bigserial PRIMARY KEY,
        stream text NOT NULL,
        payload text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    b"CREATE INDEX events_by_stream ON events (stream, id)",
)
RAW_ENQUEUE = b"INSERT INTO jobs (queue, payload) VALUES (%s, %s) RETURNING id, pg_notify(%s, '')"
RAW_FILL = (
    b"INSERT INTO jobs (queue, payload) "
    b"SELECT %s, json_build_object('n', n)::text FROM generate_series(1, %s) AS n"
)
RAW_CLAIM = b"""
UPDATE jobs SET attempts = attempts + 1, worker_id = %(worker)s,
    deadline = now() + interval '300 seconds'
WHERE id IN (
    SELECT id FROM jobs WHERE queue = %(queue)s AND deadline IS NULL AND run_at <= now()
    ORDER BY priority DESC, run_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED
)
RETURNING id, payload, attempts
"""
RAW_ACK = (
    b"DELETE FROM jobs WHERE id = %s AND worker_id = %s AND attempts = %s AND deadline >= now()"
)
RAW_ACK_BATCH = b"DELETE FROM jobs WHERE id = ANY(%s) AND worker_id = %s AND deadline >= now()"
RAW_PUBLISH = (
    b"INSERT INTO events (stream, payload) VALUES (%s, %s) RETURNING id, pg_notify(%s, '')"
)
RAW_READ = b"SELECT id, payload FROM events WHERE stream = %s AND id > %s ORDER BY id LIMIT %s"
RAW_NOTIFY = b"SELECT pg_notify(%s, %s)"

RawJob = tuple[int, Any, int]
"""(id, decoded payload, attempts)"""


@contextlib.contextmanager
def _raw_connect(url: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with psycopg.connect(url, autocommit=True) as connection:
        yield connection


@contextlib.contextmanager
def _raw_database() -> Iterator[str]:
    with postgres_database() as url:
        with _raw_connect(url) as db, db.transaction():
            for statement in RAW_SCHEMA:
                db.execute(statement)
        yield url


def _raw_enqueue_many(db: psycopg.Connection[Any], count: int, per_tx: int = 100) -> None:
    with db.cursor() as cursor:
        for start in range(0, count, per_tx):
            rows = [(QUEUE, json.dumps({"n": n}), CHANNEL) for n in range(start, start + per_tx)]
            with db.transaction():
                cursor.executemany(RAW_ENQUEUE, rows[: count - start], returning=True)


def _raw_claim(db: psycopg.Connection[Any], worker: str, n: int) -> list[RawJob]:
    rows = db.execute(RAW_CLAIM, {"worker": worker, "queue": QUEUE, "n": n}).fetchall()
    return [(id_, json.loads(payload), attempts) for id_, payload, attempts in rows]


def _raw_ack(db: psycopg.Connection[Any], worker: str, job: RawJob) -> bool:
    return db.execute(RAW_ACK, (job[0], worker, job[2])).rowcount == 1


def _raw_publish_many(db: psycopg.Connection[Any], count: int, per_tx: int = 100) -> None:
    with db.cursor() as cursor:
        for start in range(0, count, per_tx):
            rows = [(STREAM, json.dumps({"n": n}), CHANNEL) for n in range(start, start + per_tx)]
            with db.transaction():
                cursor.executemany(RAW_PUBLISH, rows[: count - start], returning=True)


class RawPsycopg(Measured):
    engine = "postgres"
    name = "raw psycopg"
    notes = (
        "bare psycopg 3, autocommit; enqueue/publish = INSERT ... RETURNING id, pg_notify(); "
        "100 per tx = pipelined executemany in one transaction; claim = one UPDATE ... "
        "FOR UPDATE SKIP LOCKED RETURNING through a partial index of pending rows, ack = "
        "fenced DELETE; no lapsed-claim recovery, expiry or dead letters; waits = LISTEN + "
        "connection.notifies(); idle CPU: n/a"
    )

    def _enqueue_1(self, sizes: Sizes) -> float:
        with _raw_database() as url, _raw_connect(url) as db:

            def run() -> None:
                for n in range(sizes.enqueues):
                    db.execute(RAW_ENQUEUE, (QUEUE, json.dumps({"n": n}), CHANNEL)).fetchone()

            return per_second(sizes.enqueues, run)

    def _enqueue_100(self, sizes: Sizes) -> float:
        with _raw_database() as url, _raw_connect(url) as db:
            return per_second(sizes.enqueues, lambda: _raw_enqueue_many(db, sizes.enqueues))

    def _drain(self, sizes: Sizes, workers: int, *, batch: bool) -> float:
        with _raw_database() as url:
            with _raw_connect(url) as db:
                _raw_enqueue_many(db, sizes.drain_jobs, per_tx=1_000)
            seconds = drain_seconds(_raw_drain, {"url": url, "batch": batch}, workers)
            check_count("jobs left after the drain", scalar(url, "SELECT count(*) FROM jobs"), 0)
        return sizes.drain_jobs / seconds

    def _claim_backlog(self, backlog: int, sizes: Sizes) -> float:
        with _raw_database() as url, _raw_connect(url) as db:

            def claim_and_ack() -> bool:
                jobs = _raw_claim(db, "w", 1)
                return bool(jobs) and _raw_ack(db, "w", jobs[0])

            return backlog_rounds(
                backlog,
                sizes.claims_per_backlog,
                lambda count: db.execute(RAW_FILL, (QUEUE, count)),
                claim_and_ack,
            )

    def _notify_wake(self, sizes: Sizes) -> list[float]:
        with _raw_database() as url, _raw_connect(url) as db:
            argument = {"url": url, "samples": sizes.latency_samples}
            with peer_process(_raw_listener, argument) as pipe:
                return wake_latencies(
                    pipe,
                    sizes.latency_samples,
                    lambda n, t0: db.execute(RAW_NOTIFY, (CHANNEL, json.dumps({"n": n}))),
                )

    def _enqueue_claim(self, sizes: Sizes) -> list[float]:
        with _raw_database() as url, _raw_connect(url) as db:
            argument = {"url": url, "samples": sizes.latency_samples}
            with peer_process(_raw_parked_worker, argument) as pipe:
                return wake_latencies(
                    pipe,
                    sizes.latency_samples,
                    lambda n, t0: db.execute(
                        RAW_ENQUEUE, (QUEUE, json.dumps({"n": n, "t0": t0}), CHANNEL)
                    ),
                )

    def _publish_1(self, sizes: Sizes) -> float:
        with _raw_database() as url, _raw_connect(url) as db:

            def run() -> None:
                for n in range(sizes.enqueues):
                    db.execute(RAW_PUBLISH, (STREAM, json.dumps({"n": n}), CHANNEL)).fetchone()

            return per_second(sizes.enqueues, run)

    def _publish_100(self, sizes: Sizes) -> float:
        with _raw_database() as url, _raw_connect(url) as db:
            return per_second(sizes.enqueues, lambda: _raw_publish_many(db, sizes.enqueues))

    def _replay(self, sizes: Sizes) -> float:
        with _raw_database() as url, _raw_connect(url) as db:
            _raw_publish_many(db, sizes.events, per_tx=1_000)

            def read_page(after: int) -> list[Any]:
                return db.execute(RAW_READ, (STREAM, after, PAGE)).fetchall()

            return per_second(sizes.events, lambda: read_pages(read_page, sizes.events))


def _raw_drain(index: int, argument: dict[str, Any]) -> None:
    worker = f"w{index}"
    with _raw_connect(argument["url"]) as db:
        argument["ready"]()
        if argument["batch"]:
            while jobs := _raw_claim(db, worker, BATCH):
                db.execute(RAW_ACK_BATCH, ([job[0] for job in jobs], worker))
        else:
            while jobs := _raw_claim(db, worker, 1):
                _raw_ack(db, worker, jobs[0])


def _raw_listener(argument: dict[str, Any], pipe: multiprocessing.connection.Connection) -> None:
    with _raw_connect(argument["url"]) as db:
        db.execute(b'LISTEN "' + CHANNEL.encode() + b'"')
        for n in range(argument["samples"]):
            pipe.send("armed")
            for _ in db.notifies(timeout=WAKE_TIMEOUT_S, stop_after=1):
                pipe.send((n, time.time()))
                break
            else:
                raise TimeoutError(f"sample {n}: no notification")


def _raw_parked_worker(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    with _raw_connect(argument["url"]) as db:
        db.execute(b'LISTEN "' + CHANNEL.encode() + b'"')
        for _ in range(argument["samples"]):
            pipe.send("armed")
            while True:
                if not any(True for _ in db.notifies(timeout=WAKE_TIMEOUT_S, stop_after=1)):
                    raise TimeoutError("no notification for the enqueued job")
                jobs = _raw_claim(db, "parked", 1)
                if jobs:
                    claimed = time.time()
                    _raw_ack(db, "parked", jobs[0])
                    pipe.send((jobs[0][1]["n"], claimed))
                    break
