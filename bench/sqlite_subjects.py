"""The SQLite subjects: alkstore (``alkstore_subject``), the raw ``sqlite3`` floor,
``honker``, and ``alkstore sync`` (the ``async_*`` rows through the sync API).

Each measurement runs in a fresh file (``sqlite_file()``). Worker and
listener processes are spawned, so everything they run is a module-level
function here taking ``(argument, ...)`` with plain data.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import multiprocessing.connection
import platform
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _harness import (
    Sizes,
    Subject,
    peer_process,
    per_second,
    sqlite_file,
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
from alkstore_subject import Alkstore, AlkstoreSync

__all__ = ["subjects"]

VISIBILITY_S = 300.0
POLL_S = 0.001
"""How often the raw floor's waiting side reads ``PRAGMA data_version``."""


def subjects() -> list[Subject]:
    return [Alkstore("sqlite"), RawSqlite(), Honker(), AlkstoreSync("sqlite")]


# The raw floor: the bare sqlite3 module and the fastest correct SQL

RAW_SCHEMA = (
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        payload TEXT NOT NULL,
        priority INTEGER NOT NULL DEFAULT 0,
        run_at REAL NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        worker_id TEXT,
        deadline REAL
    )""",
    "CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, id) WHERE deadline IS NULL",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        stream TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX events_by_stream ON events (stream, id)",
    "CREATE TABLE notices (id INTEGER PRIMARY KEY, channel TEXT NOT NULL, payload TEXT NOT NULL)",
)
RAW_ENQUEUE = "INSERT INTO jobs (queue, payload, run_at) VALUES (?, ?, ?)"
_RAW_READY = """
    SELECT id FROM jobs WHERE queue = ? AND deadline IS NULL AND run_at <= ?
    ORDER BY priority DESC, run_at, id LIMIT ?
"""
RAW_CLAIM = f"""
UPDATE jobs SET attempts = attempts + 1, worker_id = ?, deadline = ?
WHERE id IN ({_RAW_READY})
RETURNING id, payload, attempts
"""
RAW_ACK = "DELETE FROM jobs WHERE id = ? AND worker_id = ? AND attempts = ? AND deadline >= ?"
RAW_PUBLISH = "INSERT INTO events (stream, payload, created_at) VALUES (?, ?, ?)"
RAW_READ = "SELECT id, payload FROM events WHERE stream = ? AND id > ? ORDER BY id LIMIT ?"
RAW_NOTIFY = "INSERT INTO notices (channel, payload) VALUES (?, ?)"
RAW_NOTICES = "SELECT MAX(id) FROM notices WHERE channel = ? AND id > ?"


@contextlib.contextmanager
def _raw_connect(path: str | Path) -> Iterator[sqlite3.Connection]:
    """An autocommit connection (each statement its own transaction unless BEGIN), WAL, NORMAL."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=5.0)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        yield db


@contextlib.contextmanager
def _raw_file() -> Iterator[Path]:
    with sqlite_file() as path:
        with _raw_connect(path) as db:
            db.execute("BEGIN")
            for statement in RAW_SCHEMA:
                db.execute(statement)
            db.execute("COMMIT")
        yield path


def _raw_enqueue_many(db: sqlite3.Connection, count: int, per_tx: int = 100) -> None:
    for start in range(0, count, per_tx):
        now = time.time()
        db.execute("BEGIN")
        db.executemany(
            RAW_ENQUEUE,
            [(QUEUE, json.dumps({"n": n}), now) for n in range(start, min(start + per_tx, count))],
        )
        db.execute("COMMIT")


def _raw_claim(db: sqlite3.Connection, worker: str, n: int) -> list[tuple[int, Any, int, float]]:
    """Claim up to ``n`` jobs in one statement: (id, decoded payload, attempts, deadline)."""
    now = time.time()
    deadline = now + VISIBILITY_S
    rows = db.execute(RAW_CLAIM, (worker, deadline, QUEUE, now, n)).fetchall()
    return [(id_, json.loads(payload), attempts, deadline) for id_, payload, attempts in rows]


def _raw_ack(db: sqlite3.Connection, worker: str, job: tuple[int, Any, int, float]) -> bool:
    cursor = db.execute(RAW_ACK, (job[0], worker, job[2], time.time()))
    return cursor.rowcount == 1


def _raw_ack_batch(db: sqlite3.Connection, worker: str, ids: list[int]) -> int:
    marks = ", ".join("?" * len(ids))
    cursor = db.execute(
        f"DELETE FROM jobs WHERE worker_id = ? AND deadline >= ? AND id IN ({marks})",
        (worker, time.time(), *ids),
    )
    return cursor.rowcount


def _raw_publish_many(db: sqlite3.Connection, count: int, per_tx: int = 100) -> None:
    for start in range(0, count, per_tx):
        now = time.time()
        db.execute("BEGIN")
        db.executemany(
            RAW_PUBLISH,
            [(STREAM, json.dumps({"n": n}), now) for n in range(start, min(start + per_tx, count))],
        )
        db.execute("COMMIT")


def _raw_wait_for_commit(db: sqlite3.Connection, seen: int, timeout: float) -> int:
    """Poll ``PRAGMA data_version`` every POLL_S until another connection commits."""
    deadline = time.monotonic() + timeout
    while True:
        version: int = db.execute("PRAGMA data_version").fetchone()[0]
        if version != seen:
            return version
        if time.monotonic() > deadline:
            raise TimeoutError("no commit seen")
        time.sleep(POLL_S)


class RawSqlite(Measured):
    engine = "sqlite"
    name = "raw sqlite3"
    notes = (
        "bare sqlite3, WAL + synchronous=NORMAL, autocommit statements; claim = one "
        "UPDATE ... RETURNING through a partial index on pending rows, ack = fenced DELETE; "
        "100 per tx = executemany; no lapsed-claim recovery, expiry or wakes in the hot path. "
        "Its waiting side (notify → wake, enqueue → claim) polls PRAGMA data_version every "
        f"{POLL_S * 1000:g} ms, the cheapest cross-process wake a raw user has; "
        "idle CPU: n/a (nothing to keep idle)"
    )

    def _enqueue_1(self, sizes: Sizes) -> float:
        with _raw_file() as path, _raw_connect(path) as db:

            def run() -> None:
                for n in range(sizes.enqueues):
                    db.execute(RAW_ENQUEUE, (QUEUE, json.dumps({"n": n}), time.time()))

            return per_second(sizes.enqueues, run)

    def _enqueue_100(self, sizes: Sizes) -> float:
        with _raw_file() as path, _raw_connect(path) as db:
            return per_second(sizes.enqueues, lambda: _raw_enqueue_many(db, sizes.enqueues))

    def _drain(self, sizes: Sizes, workers: int, *, batch: bool) -> float:
        with _raw_file() as path:
            with _raw_connect(path) as db:
                _raw_enqueue_many(db, sizes.drain_jobs, per_tx=1_000)
            seconds = drain_seconds(_raw_drain, {"path": str(path), "batch": batch}, workers)
            with _raw_connect(path) as db:
                left = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
            check_count("jobs left after the drain", left, 0)
        return sizes.drain_jobs / seconds

    def _claim_backlog(self, backlog: int, sizes: Sizes) -> float:
        with _raw_file() as path, _raw_connect(path) as db:

            def claim_and_ack() -> bool:
                jobs = _raw_claim(db, "w", 1)
                return bool(jobs) and _raw_ack(db, "w", jobs[0])

            return backlog_rounds(
                backlog,
                sizes.claims_per_backlog,
                lambda count: _raw_enqueue_many(db, count, per_tx=1_000),
                claim_and_ack,
            )

    def _notify_wake(self, sizes: Sizes) -> list[float]:
        with _raw_file() as path, _raw_connect(path) as db:
            argument = {"path": str(path), "samples": sizes.latency_samples}
            with peer_process(_raw_listener, argument) as pipe:
                return wake_latencies(
                    pipe,
                    sizes.latency_samples,
                    lambda n, t0: db.execute(RAW_NOTIFY, (CHANNEL, json.dumps({"n": n}))),
                )

    def _enqueue_claim(self, sizes: Sizes) -> list[float]:
        with _raw_file() as path, _raw_connect(path) as db:
            argument = {"path": str(path), "samples": sizes.latency_samples}
            with peer_process(_raw_parked_worker, argument) as pipe:
                return wake_latencies(
                    pipe,
                    sizes.latency_samples,
                    lambda n, t0: db.execute(
                        RAW_ENQUEUE, (QUEUE, json.dumps({"n": n, "t0": t0}), time.time())
                    ),
                )

    def _publish_1(self, sizes: Sizes) -> float:
        with _raw_file() as path, _raw_connect(path) as db:

            def run() -> None:
                for n in range(sizes.enqueues):
                    db.execute(RAW_PUBLISH, (STREAM, json.dumps({"n": n}), time.time()))

            return per_second(sizes.enqueues, run)

    def _publish_100(self, sizes: Sizes) -> float:
        with _raw_file() as path, _raw_connect(path) as db:
            return per_second(sizes.enqueues, lambda: _raw_publish_many(db, sizes.enqueues))

    def _replay(self, sizes: Sizes) -> float:
        with _raw_file() as path, _raw_connect(path) as db:
            _raw_publish_many(db, sizes.events, per_tx=1_000)

            def read_page(after: int) -> list[Any]:
                return db.execute(RAW_READ, (STREAM, after, PAGE)).fetchall()

            return per_second(sizes.events, lambda: read_pages(read_page, sizes.events))


def _raw_drain(index: int, argument: dict[str, Any]) -> None:
    worker = f"w{index}"
    with _raw_connect(argument["path"]) as db:
        argument["ready"]()
        if argument["batch"]:
            while jobs := _raw_claim(db, worker, BATCH):
                _raw_ack_batch(db, worker, [job[0] for job in jobs])
        else:
            while jobs := _raw_claim(db, worker, 1):
                _raw_ack(db, worker, jobs[0])


def _raw_listener(argument: dict[str, Any], pipe: multiprocessing.connection.Connection) -> None:
    with _raw_connect(argument["path"]) as db:
        seen_id: int = db.execute("SELECT COALESCE(MAX(id), 0) FROM notices").fetchone()[0]
        version: int = db.execute("PRAGMA data_version").fetchone()[0]
        for n in range(argument["samples"]):
            pipe.send("armed")
            while True:
                version = _raw_wait_for_commit(db, version, WAKE_TIMEOUT_S)
                newest = db.execute(RAW_NOTICES, (CHANNEL, seen_id)).fetchone()[0]
                if newest is not None:
                    seen_id = newest
                    pipe.send((n, time.time()))
                    break


def _raw_parked_worker(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    with _raw_connect(argument["path"]) as db:
        version: int = db.execute("PRAGMA data_version").fetchone()[0]
        for _ in range(argument["samples"]):
            pipe.send("armed")
            while True:
                version = _raw_wait_for_commit(db, version, WAKE_TIMEOUT_S)
                jobs = _raw_claim(db, "parked", 1)
                if jobs:
                    claimed = time.time()
                    _raw_ack(db, "parked", jobs[0])
                    pipe.send((jobs[0][1]["n"], claimed))
                    break


# honker, from PyPI, when it can be installed here

HONKER_VERSION = "0.5.0"


class Honker(Measured):
    engine = "sqlite"
    name = "honker"

    def __init__(self) -> None:
        super().__init__()
        self._reason = _honker_unavailable()
        if self._reason is None:
            self.name = f"honker {importlib.metadata.version('honker')}"

    def unavailable(self) -> str | None:
        return self._reason


def _honker_unavailable() -> str | None:
    try:
        importlib.import_module("honker")
    except ImportError as exc:
        libc, libc_version = platform.libc_ver()
        here = f"{libc} {libc_version}" if libc else "no glibc"
        glibc_too_old = libc == "glibc" and _version(libc_version) < (2, 38)
        why = (
            f"this machine has {here}, and PyPI's honker {HONKER_VERSION} ships Linux wheels "
            "only for glibc >= 2.38 (manylinux_2_38) and no sdist"
            if glibc_too_old
            else f"install it into this environment: pip install honker=={HONKER_VERSION}"
        )
        return f"honker is not installed ({type(exc).__name__}: {exc}); {why}"
    installed = importlib.metadata.version("honker")
    return (
        f"adapter not written for honker {installed}: its queue, stream and listener APIs "
        "were not available to run on the machine this harness was written on, and a "
        "figure from an adapter never run would not be honest"
    )


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return ()
