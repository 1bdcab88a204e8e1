"""``alkstore metrics`` against a queue of 1,000,000 jobs: how long it takes, and the plans.

    python bench/metrics_scale.py [--engine sqlite|postgres|all] [--jobs N] [--json PATH]

For each engine a fresh store (a SQLite file in a temporary folder, a new
PostgreSQL database on ``$ALKSTORE_PG_DSN``) gets one queue of ``--jobs``
jobs (default 1,000,000: 90% ready, 5% scheduled, 4% processing, 1% past
expiry) and 1% as many dead letters, written by the database itself in one
statement each (a recursive CTE on SQLite, ``generate_series`` on
PostgreSQL), beside a small queue and a stream of 100,000 events with two
consumers. Then, after ``ANALYZE`` (and ``VACUUM`` on PostgreSQL, as
autovacuum would do), it times:

- ``read``: the three inspector reads that make the metrics
  (``queues()``, ``streams()``, ``schedules()``), in process, median of 5;
- ``command``: ``alkstore metrics --dsn …`` as a process, start to exit,
  median of 3 (interpreter start and imports included);

and prints the query plan of every statement those reads ran (``EXPLAIN
QUERY PLAN``, ``EXPLAIN (ANALYZE, BUFFERS)``), marking every full table
scan. The statements are caught as the driver runs them (``sqlite3``'s trace
callback, ``psycopg.Connection.execute``), so the plans are those of the
engines' own SQL, through the public API only. The JSON goes to
``bench/results/metrics_scale.json`` unless ``--json`` says elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from _harness import postgres_database

import alkstore

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "metrics_scale.json"
EVENTS = 100_000

_SQLITE_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :jobs)
INSERT INTO __alkstore_jobs (id, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, visibility_timeout_s, backoff_base_s, retention_s, worker_id,
    deadline, writer_version)
SELECT :first + i, 'big', '{"n": ' || i || '}', i % 3,
    CASE WHEN i % 100 BETWEEN 90 AND 94 THEN :now + 3600 ELSE :now - 60 - i % 600 END,
    :now - 700,
    CASE WHEN i % 100 = 99 THEN :now - 1 END,
    CASE WHEN i % 100 BETWEEN 95 AND 98 THEN 1 ELSE 0 END, 3, 300, 5, NULL,
    CASE WHEN i % 100 BETWEEN 95 AND 98 THEN 'bench-worker' END,
    CASE WHEN i % 100 BETWEEN 95 AND 98 THEN :now + 300 END, :writer
FROM n
"""
_SQLITE_DEAD = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :dead)
INSERT INTO __alkstore_dead (id, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, retention_s, worker_id, last_error, died_at)
SELECT 10000000 + i, 'big', '{"n": ' || i || '}', 0, :now - 900, :now - 900, NULL, 3, 3, NULL,
    'bench-worker', 'RuntimeError: bench', :now - i
FROM n
"""
_SQLITE_READY = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :jobs)
INSERT INTO __alkstore_jobs (id, queue, payload, priority, run_at, created_at, attempts,
    max_attempts, visibility_timeout_s, backoff_base_s, writer_version)
SELECT :first + i, :queue, '{"n":' || i || '}', 0, :now - 1, :now - 1, 0, 3, 300, 5, :writer
FROM n
"""
_PG_READY = """
INSERT INTO alkstore.jobs (queue_key, queue, payload, priority, run_at, created_at, attempts,
    max_attempts, visibility_timeout_s, backoff_base_s)
SELECT sha256(convert_to(%(queue)s, 'UTF8')), %(queue)s, '{"n":' || i || '}', 0,
    %(now)s - 1, %(now)s - 1, 0, 3, 300, 5
FROM generate_series(1, %(jobs)s) AS i
"""
_PG_FILL = """
INSERT INTO {s}.jobs (queue_key, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, visibility_timeout_s, backoff_base_s, retention_s, worker_id,
    deadline)
SELECT sha256(convert_to('big', 'UTF8')), 'big', '{"n": ' || i || '}', i %% 3,
    CASE WHEN i %% 100 BETWEEN 90 AND 94 THEN %(now)s + 3600 ELSE %(now)s - 60 - i %% 600 END,
    %(now)s - 700,
    CASE WHEN i %% 100 = 99 THEN %(now)s - 1 END,
    CASE WHEN i %% 100 BETWEEN 95 AND 98 THEN 1 ELSE 0 END, 3, 300, 5, NULL,
    CASE WHEN i %% 100 BETWEEN 95 AND 98 THEN 'bench-worker' END,
    CASE WHEN i %% 100 BETWEEN 95 AND 98 THEN %(now)s + 300 END
FROM generate_series(1, %(jobs)s) AS i
"""
_PG_DEAD = """
INSERT INTO {s}.dead (id, queue_key, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, retention_s, worker_id, last_error, died_at)
SELECT 10000000 + i, sha256(convert_to('big', 'UTF8')), 'big', '{"n": ' || i || '}', 0,
    %(now)s - 900, %(now)s - 900, NULL, 3, 3, NULL, 'bench-worker', 'RuntimeError: bench',
    %(now)s - i
FROM generate_series(1, %(dead)s) AS i
"""


def fill_sqlite(path: str, jobs: int) -> None:
    with alkstore.open(path) as store:
        _small_things(store)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        now = time.time()
        connection.execute("BEGIN")
        params = {"jobs": jobs, "now": now, **_sqlite_rows_follow(connection)}
        connection.execute(_SQLITE_FILL, params)
        connection.execute(_SQLITE_DEAD, {"dead": jobs // 100, "now": now})
        connection.execute("COMMIT")
        connection.execute("ANALYZE")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


def _sqlite_rows_follow(connection: sqlite3.Connection) -> dict[str, int]:
    """Bind parameters for rows written as the engine's enqueues would write them:
    ids after the last one handed out (``first`` + 1 on), never one handed out
    before, and the file's schema version as the rows' ``writer_version``."""
    first, writer = connection.execute(
        "SELECT max(coalesce((SELECT max(id) FROM __alkstore_jobs), 0), "
        "(SELECT highest_gone FROM __alkstore_job_ids)), "
        "(SELECT value FROM __alkstore_meta WHERE key = 'schema_version')"
    ).fetchone()
    return {"first": int(first), "writer": int(writer)}


def fill_postgres(dsn: str, jobs: int) -> None:
    with alkstore.open(dsn) as store:
        _small_things(store)
    with psycopg.connect(dsn, autocommit=True) as connection:
        now = time.time()
        with connection.transaction():
            connection.execute(_PG_FILL.replace("{s}", "alkstore"), {"jobs": jobs, "now": now})
            dead = jobs // 100
            connection.execute(_PG_DEAD.replace("{s}", "alkstore"), {"dead": dead, "now": now})
        connection.execute("VACUUM ANALYZE")


def fill_ready(engine: str, target: str, queue: str, jobs: int) -> None:
    """``jobs`` ready jobs in ``queue`` of a store already made, written by the database
    in one statement (as the API would store them with the default QueueOpts), then
    analyzed, as autovacuum or ``PRAGMA optimize`` would have by then."""
    now = time.time()
    if engine == "sqlite":
        lite = sqlite3.connect(target, isolation_level=None)
        try:
            lite.execute("BEGIN")
            params = {"jobs": jobs, "now": now, "queue": queue, **_sqlite_rows_follow(lite)}
            lite.execute(_SQLITE_READY, params)
            lite.execute("COMMIT")
            lite.execute("ANALYZE")
            lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            lite.close()
        return
    with psycopg.connect(target, autocommit=True) as connection:
        connection.execute(_PG_READY, {"jobs": jobs, "now": now, "queue": queue})
        connection.execute("VACUUM ANALYZE alkstore.jobs")


def _small_things(store: alkstore.Store) -> None:
    """A small queue, a schedule, and a stream of EVENTS events with two consumers."""
    for n in range(10):
        store.queue("small").enqueue({"n": n})
    store.schedule("nightly", "@every 1d", "reports", {})
    with store.transaction() as tx:
        for n in range(EVENTS):
            tx.publish_tx("orders", {"n": n})
    orders = store.stream("orders")
    orders.save_offset("billing", EVENTS // 2)
    orders.save_offset("audit", EVENTS)


def _median_s(call: Callable[[], object], times: int) -> tuple[float, list[float]]:
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        taken.append(time.perf_counter() - started)
    return statistics.median(taken), taken


def _command(dsn: str) -> list[str]:
    script = shutil.which("alkstore", path=str(Path(sys.executable).parent))
    base = [script] if script else [sys.executable, "-m", "alkstore._cli"]
    return [*base, "metrics", "--dsn", dsn]


@contextlib.contextmanager
def statements_run(engine: str) -> Iterator[list[tuple[str, Any]]]:
    """Every read statement the driver runs meanwhile, with its parameters."""
    caught: list[tuple[str, Any]] = []
    if engine == "sqlite":
        connect = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            connection: sqlite3.Connection = connect(*args, **kwargs)
            connection.set_trace_callback(lambda text: caught.append((text, None)))
            return connection

        with _patched(sqlite3, "connect", traced):
            yield caught
        return
    execute = psycopg.Connection.execute

    def recorded(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        caught.append((str(query), params))
        return execute(self, query, params, **kwargs)

    with _patched(psycopg.Connection, "execute", recorded):
        yield caught


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def reads(caught: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The SELECTs among what was caught (no BEGIN, SET, COMMIT), each once."""
    seen: dict[str, Any] = {}
    for text, params in caught:
        if text.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.setdefault(text, params)
    return list(seen.items())


def _plans(engine: str, dsn: str) -> dict[str, list[str]]:
    """The inspector's reads, run once to catch them, then each one's plan."""
    with statements_run(engine) as caught, alkstore.open(dsn) as store:
        inspector = store.inspect()
        marks = {}
        for name, read in (
            ("queues", inspector.queues),
            ("streams", inspector.streams),
            ("schedules", inspector.schedules),
        ):
            marks[name] = len(caught)
            read()
        marks["end"] = len(caught)
    order = ["queues", "streams", "schedules", "end"]
    plans: dict[str, list[str]] = {}
    for name, after in itertools.pairwise(order):
        for number, (text, params) in enumerate(reads(caught[marks[name] : marks[after]])):
            key = f"{name} {number + 1}"
            plans[key] = (
                plan_sqlite(dsn, text) if engine == "sqlite" else plan_postgres(dsn, text, params)
            )
    return plans


def plan_sqlite(path: str, text: str) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {text}")]
    finally:
        connection.close()


def plan_postgres(dsn: str, text: str, params: Any) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("SET enable_seqscan = off")  # as the inspector's queue read does
        connection.execute("SET jit = off")
        explain = f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {text}"
        return [row[0] for row in connection.execute(explain, params)]


_SQLITE_TABLES = ("__alkstore_jobs", "__alkstore_dead", "__alkstore_events")
_PG_TABLES = ("jobs", "dead", "events")


def full_scans(plans: dict[str, list[str]]) -> list[str]:
    """The plan lines reading a whole big table (jobs, dead letters, events) rather than
    an index of it: SQLite's ``SCAN t`` without an index, PostgreSQL's ``Seq Scan on t``."""
    found = []
    for name, lines in plans.items():
        for line in lines:
            words = line.strip().split()
            sqlite_scan = words[:1] == ["SCAN"] and len(words) == 2 and words[1] in _SQLITE_TABLES
            pg_scan = "Seq Scan on" in line and line.split("Seq Scan on ")[1].split()[0] in (
                _PG_TABLES
            )
            if sqlite_scan or pg_scan:
                found.append(f"{name}: {line.strip()}")
    return found


@contextlib.contextmanager
def fresh_store(engine: str) -> Iterator[str]:
    if engine == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield str(Path(folder) / "metrics.db")
    else:
        with postgres_database() as dsn:
            yield dsn


def measure(engine: str, jobs: int) -> dict[str, Any]:
    with fresh_store(engine) as dsn:
        started = time.perf_counter()
        (fill_sqlite if engine == "sqlite" else fill_postgres)(dsn, jobs)
        filled_s = time.perf_counter() - started
        with alkstore.open(dsn) as store:
            (big,) = [q for q in store.inspect().queues() if q.name == "big"]
            read_s, reads = _median_s(lambda: alkstore.prometheus_text(store), 5)
            parts = {
                "queues": _median_s(store.inspect().queues, 5)[0],
                "streams": _median_s(store.inspect().streams, 5)[0],
                "schedules": _median_s(store.inspect().schedules, 5)[0],
            }
        command_s, commands = _median_s(
            lambda: subprocess.run(_command(dsn), check=True, capture_output=True, timeout=300), 3
        )
        plans = _plans(engine, dsn)
    return {
        "engine": engine,
        "jobs": big.total - big.dead,
        "dead": big.dead,
        "counts": {
            "ready": big.ready,
            "scheduled": big.scheduled,
            "processing": big.processing,
            "expired": big.expired,
            "dead": big.dead,
        },
        "fill_s": round(filled_s, 2),
        "read_s": round(read_s, 4),
        "read_runs_s": [round(t, 4) for t in reads],
        "read_parts_s": {name: round(t, 4) for name, t in parts.items()},
        "command_s": round(command_s, 3),
        "command_runs_s": [round(t, 3) for t in commands],
        "plans": plans,
        "full_scans": full_scans(plans),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    arguments = parser.parse_args()
    engines = ["sqlite", "postgres"] if arguments.engine == "all" else [arguments.engine]
    results = []
    for engine in engines:
        print(f"{engine}: filling {arguments.jobs:,} jobs…", file=sys.stderr, flush=True)
        result = measure(engine, arguments.jobs)
        results.append(result)
        print(f"\n## {engine}: {result['jobs']:,} live jobs, {result['dead']:,} dead\n")
        print(f"- counts: {result['counts']}")
        print(f"- fill: {result['fill_s']} s")
        parts = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in result["read_parts_s"].items())
        print(f"- the three reads: {result['read_s'] * 1000:.1f} ms (median of 5); {parts}")
        print(f"- `alkstore metrics`, start to exit: {result['command_s']:.2f} s (median of 3)")
        for name, lines in result["plans"].items():
            print(f"\n{name}:\n```")
            print("\n".join(lines))
            print("```")
        print(f"\nfull table scans: {result['full_scans'] or 'none'}")
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
