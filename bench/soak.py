"""The soak: a steady load for minutes on one store, measured as it goes.

    python bench/soak.py [--minutes N | --quick] [--engine sqlite|postgres|all]
                         [--json PATH] [--png PATH]

(``hatch run bench:soak``.) Per engine, on fresh storage:

1. **Calibrate**: two producers as fast as they go, four workers and the
   consumer and listener below, for a few seconds: the rate the whole setup
   sustains (jobs acked per second).
2. **Soak** (``--minutes``, default 10; ``--quick`` 1) on new storage: two
   producers each commit a job, its event and a wake per transaction at 70%
   of that rate in all; four worker processes drain with ``claim_batch(32)``
   and ``ack_batch``; one ``Consumer`` follows the stream, checking each
   producer's events arrive in order; a listener counts wakes; the stream is
   kept to its last 30 s with ``retain(max_age_s=30)`` every 10 s (sparing
   the consumer). Once jobs are being acked and 10 s more, every minute (10 s
   with ``--quick``) the parent records
   throughput, enqueue → claim p50 and p99, every alkstore table's and
   index's size (PostgreSQL: dead tuples and the last autovacuum too), the
   SQLite file and WAL sizes (the WAL's peak, sampled each second), and each
   process's RSS.
3. **Account**: producers stop, workers drain, the consumer catches up;
   every committed job must be acked exactly once and every event reach the
   consumer in order.

The targets are ratios within the run (``TARGETS``); JSON goes to
``bench/results/soak.json`` and a chart (throughput, latency, storage over
time, an engine per column) to ``bench/results/soak.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from _harness import percentile, postgres_database, sqlite_file
from _soak_chart import draw
from _soak_roles import QUEUE, STREAM, Reports, consume, listen, produce, work

import alkstore

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "soak.json"
DEFAULT_PNG = HERE / "results" / "soak.png"
PRODUCERS, WORKERS = 2, 4
LOAD = 0.7
"""The soak's rate, as a share of the calibrated one."""
RETAIN_S, RETAIN_EVERY_S = 30.0, 10.0
WARMUP_S = 10.0
"""Run after the first acks, before measuring: every process is under way."""
STARTUP_S = 120.0
"""How long the processes may take to import, connect and ack a first job."""
DRAIN_TIMEOUT_S = 180.0
MB = 1024 * 1024

TARGETS = {
    "throughput_last_over_first": (">=", 0.9),
    "p99_last_over_first": ("<=", 1.5),
    "storage_end_over_first": ("<=", 3.0),
    "wal_peak_mb": ("<=", 64.0),
    "worker_rss_end_over_first": ("<=", 1.2),
}
"""Each figure of ``summarize`` and its bound; storage is PostgreSQL's, the WAL SQLite's."""


@dataclass
class Run:
    """The processes of one phase, and what they reported."""

    url: str
    reports: Reports
    stops: dict[str, Any]
    processes: dict[str, Any] = field(default_factory=dict)
    """Each role's process, by name (``multiprocessing`` spawn processes)."""
    acked: int = 0
    latencies: list[float] = field(default_factory=list)
    finals: list[tuple[Any, ...]] = field(default_factory=list)

    def collect(self) -> None:
        """Take every report that has arrived.

        Called every second: a report left unread waits behind the pipe's
        buffer in its worker, and would be counted in a later minute."""
        while True:
            try:  # a moment's wait: the next report may be on its way through the pipe
                report = self.reports.get(timeout=0.01)
            except Exception:  # queue.Empty: nothing more for now
                return
            if report[0] == "acked":
                self.acked += report[3]
                self.latencies.extend(report[4])
            else:
                self.finals.append(report)

    def join(self, names: list[str], timeout: float) -> None:
        """Wait for the named processes to end, reading their reports meanwhile:
        a process that put a large report ends only once it has been read (its
        queue's feeder thread flushes at exit), so a plain join would wait out
        its timeout. Whatever is left after ``timeout`` is killed."""
        deadline = time.monotonic() + timeout
        processes = [self.processes[name] for name in names]
        while any(p.is_alive() for p in processes) and time.monotonic() < deadline:
            self.collect()
            time.sleep(0.05)
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join()
        self.collect()

    def take_interval(self) -> tuple[int, list[float]]:
        """Jobs acked and their latencies since the last call."""
        self.collect()
        taken = (self.acked, self.latencies)
        self.acked, self.latencies = 0, []
        return taken


@contextlib.contextmanager
def running(url: str, rate: float | None) -> Iterator[Run]:
    """Start producers (at ``rate`` jobs/s in all, or flat out), workers, the
    consumer and the listener on ``url``; stop whatever is left afterwards."""
    context = multiprocessing.get_context("spawn")
    reports: Reports = context.Queue()
    roles = ("producers", "workers", "followers")
    run = Run(url, reports, {role: context.Event() for role in roles})
    share = None if rate is None else rate / PRODUCERS
    starts: dict[str, tuple[Callable[..., None], tuple[Any, ...], str]] = {
        **{f"worker-{i}": (work, (url, i, reports, run.stops["workers"]), "workers")
           for i in range(WORKERS)},
        "consumer": (consume, (url, reports, run.stops["followers"]), "followers"),
        "listener": (listen, (url, reports, run.stops["followers"]), "followers"),
        **{f"producer-{i}": (produce, (url, i, share, reports, run.stops["producers"]),
                             "producers") for i in range(PRODUCERS)},
    }  # fmt: skip
    try:
        for name, (target, arguments, _) in starts.items():
            process = context.Process(target=target, args=arguments, name=name, daemon=True)
            process.start()
            run.processes[name] = process
        yield run
    finally:
        for stop in run.stops.values():
            stop.set()
        run.join(list(run.processes), 30)


def calibrate(engine: str, seconds: float) -> float:
    """Jobs acked per second with the producers flat out, once they are under way."""
    with fresh(engine) as (url, _), running(url, None) as run:
        warm_up(run)
        started = time.monotonic()
        time.sleep(seconds)
        acked, _ = run.take_interval()
        return acked / (time.monotonic() - started)


def warm_up(run: Run) -> None:
    """Wait until jobs are being acked (the processes have imported, connected and
    started), then ``WARMUP_S`` more; what was acked meanwhile is dropped."""
    deadline = time.monotonic() + STARTUP_S
    while run.take_interval()[0] == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no job was acked within {STARTUP_S:g} s of starting")
        time.sleep(0.2)
    time.sleep(WARMUP_S)
    run.take_interval()


def soak(engine: str, rate: float, seconds: float, sample_s: float) -> dict[str, Any]:
    """Run the soak at ``rate`` for ``seconds``; its samples and its accounting."""
    samples: list[dict[str, Any]] = []
    with fresh(engine) as (url, path), running(url, rate) as run, alkstore.open(url) as store:
        time.sleep(WARMUP_S)
        run.take_interval()
        began = time.monotonic()
        trimmed = 0
        last_trim = began
        while (now := time.monotonic()) - began < seconds:
            window_started, wal_peak = now, 0
            while time.monotonic() - window_started < sample_s:
                time.sleep(1.0)
                run.collect()
                wal_peak = max(wal_peak, wal_bytes(path))
                if time.monotonic() - last_trim >= RETAIN_EVERY_S:
                    trimmed += store.stream(STREAM).retain(max_age_s=RETAIN_S)
                    last_trim = time.monotonic()
            acked, latencies = run.take_interval()
            elapsed = time.monotonic() - window_started
            samples.append(sample(engine, url, path, run, acked / elapsed, latencies,
                                  wal_peak, time.monotonic() - began))  # fmt: skip
            print(f"  [{engine}] {describe(samples[-1])}", flush=True)
        accounting = finish(run, store)
        accounting["events_trimmed"] = trimmed
    return {"rate": rate, "samples": samples, "accounting": accounting}


def finish(run: Run, store: alkstore.Store) -> dict[str, Any]:
    """Stop producing, drain, let the consumer catch up; then account for everything."""
    run.stops["producers"].set()
    run.join([name for name in run.processes if name.startswith("producer")], 60)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline and not (drained(store) and caught_up(store)):
        time.sleep(0.5)
        run.collect()
    left = [s.total - s.dead for s in store.inspect().queues() if s.name == QUEUE]
    run.stops["workers"].set()
    run.stops["followers"].set()
    run.join(list(run.processes), 60)
    return account(run.finals, left[0] if left else 0)


def account(finals: list[tuple[Any, ...]], left_in_queue: int) -> dict[str, Any]:
    """Compare what was committed with what was acked and consumed."""
    produced = [job for report in finals if report[0] == "produced" for job in report[2]]
    acked = [job for report in finals if report[0] == "acked_ids" for job in report[2]]
    consumed = [report for report in finals if report[0] == "consumed"]
    wakes = [report[1] for report in finals if report[0] == "wakes"]
    events, out_of_order, duplicate_events = consumed[0][1:] if consumed else (0, -1, -1)
    committed, once = set(produced), set(acked)
    result = {
        "jobs_committed": len(produced),
        "jobs_acked": len(acked),
        "jobs_acked_twice": len(acked) - len(once),
        "jobs_lost": len(committed - once),
        "jobs_acked_never_committed": len(once - committed),
        "jobs_left_in_queue": left_in_queue,
        "short_ack_batches": sum(report[3] for report in finals if report[0] == "acked_ids"),
        "events_consumed": events,
        "events_out_of_order": out_of_order,
        "events_duplicated": duplicate_events,
        "wakes_received": wakes[0] if wakes else 0,
        "producers_behind_s": round(sum(r[3] for r in finals if r[0] == "produced"), 1),
    }
    result["nothing_lost"] = (
        len(produced) > 0
        and len(produced) == len(acked) == len(once) == len(committed) == events
        and committed == once
        and out_of_order == duplicate_events == left_in_queue == 0
    )
    return result


def drained(store: alkstore.Store) -> bool:
    return all(s.total == s.dead for s in store.inspect().queues() if s.name == QUEUE)


def caught_up(store: alkstore.Store) -> bool:
    for stats in store.inspect().streams():
        if stats.name == STREAM:
            return all(consumer.lag == 0 for consumer in stats.consumers)
    return True


# Samples


def sample(
    engine: str, url: str, path: Path | None, run: Run, rate: float, latencies: list[float],
    wal_peak: int, elapsed: float,
) -> dict[str, Any]:  # fmt: skip
    """One minute's record."""
    storage = postgres_sizes(url) if engine == "postgres" else sqlite_sizes(path)
    return {
        "t_s": round(elapsed, 1),
        "throughput": round(rate, 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 2) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2) if latencies else None,
        "storage": storage,
        "storage_bytes": sum(table["bytes"] for table in storage["tables"].values()),
        "wal_peak_bytes": wal_peak,
        "rss_bytes": {name: rss(process.pid) for name, process in run.processes.items()},
    }


def postgres_sizes(url: str) -> dict[str, Any]:
    """Every alkstore table's size with its indexes, its dead tuples and last autovacuum."""
    query = (
        "SELECT c.relname, pg_total_relation_size(c.oid), pg_indexes_size(c.oid), "
        "s.n_dead_tup, s.n_live_tup, s.last_autovacuum, s.autovacuum_count "
        "FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid "
        "WHERE n.nspname = 'alkstore' AND c.relkind = 'r' ORDER BY c.relname"
    )
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(query).fetchall()
    return {
        "tables": {
            name: {
                "bytes": total, "index_bytes": indexes, "dead_tuples": dead, "live_tuples": live,
                "last_autovacuum": None if last is None else last.isoformat(),
                "autovacuums": count,
            }
            for name, total, indexes, dead, live, last, count in rows
        }
    }  # fmt: skip


def sqlite_sizes(path: Path | None) -> dict[str, Any]:
    """The file's and WAL's sizes, and each table's pages (with its indexes) from dbstat."""
    assert path is not None
    tables: dict[str, dict[str, int]] = {}
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:  # a short read, closed at once: a reader held open starves checkpoints
        rows = connection.execute(
            "SELECT tbl_name, SUM(pgsize) FROM dbstat JOIN sqlite_master USING (name) "
            "WHERE tbl_name LIKE '\\_\\_alkstore\\_%' ESCAPE '\\' GROUP BY tbl_name"
        ).fetchall()
        tables = {name: {"bytes": size} for name, size in rows}
    except sqlite3.OperationalError:  # built without dbstat: the file size says enough
        tables = {}
    finally:
        connection.close()
    return {"tables": tables, "file_bytes": path.stat().st_size, "wal_bytes": wal_bytes(path)}


def wal_bytes(path: Path | None) -> int:
    if path is None:
        return 0
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def rss(pid: int | None) -> int | None:
    """A process's resident set size (Linux ``/proc``), None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def describe(record: dict[str, Any]) -> str:
    """A sample in one line, for the progress output."""
    return (
        f"{record['t_s']:>6.0f} s: {record['throughput']:>8,.0f} jobs/s, p50 "
        f"{record['p50_ms']} ms, p99 {record['p99_ms']} ms, storage "
        f"{record['storage_bytes'] / MB:.1f} MB, WAL peak {record['wal_peak_bytes'] / MB:.1f} MB"
    )


# Verdicts


def summarize(engine: str, run: dict[str, Any]) -> dict[str, Any]:
    """The targets' figures: the last sample against the first."""
    first, last = run["samples"][0], run["samples"][-1]
    workers = [name for name in first["rss_bytes"] if name.startswith("worker")]
    figures: dict[str, float | None] = {
        "throughput_last_over_first": ratio(last["throughput"], first["throughput"]),
        "p99_last_over_first": ratio(last["p99_ms"], first["p99_ms"]),
        "worker_rss_end_over_first": max(
            (ratio(last["rss_bytes"][w], first["rss_bytes"][w]) or 0.0 for w in workers),
            default=None,
        ),
    }
    if engine == "postgres":
        figures["storage_end_over_first"] = ratio(last["storage_bytes"], first["storage_bytes"])
    else:
        figures["wal_peak_mb"] = max(s["wal_peak_bytes"] for s in run["samples"]) / MB
    verdicts = {name: holds(name, value) for name, value in figures.items()}
    verdicts["nothing_lost"] = run["accounting"]["nothing_lost"]
    return {"figures": figures, "holds": verdicts}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def holds(name: str, value: float | None) -> bool:
    if value is None:
        return False
    sense, bound = TARGETS[name]
    return value >= bound if sense == ">=" else value <= bound


# Running it


@contextlib.contextmanager
def fresh(engine: str) -> Iterator[tuple[str, Path | None]]:
    """A new store's target, and its file on SQLite."""
    if engine == "sqlite":
        with sqlite_file() as path:
            alkstore.open(str(path)).close()  # the schema, before the processes race to make it
            yield str(path), path
    else:
        with postgres_database() as url:
            alkstore.open(url).close()
            yield url, None


def main(argv: list[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    minutes = 1.0 if arguments.quick else arguments.minutes
    sample_s = 10.0 if arguments.quick else 60.0
    engines = ["sqlite", "postgres"] if arguments.engine == "all" else [arguments.engine]
    results: dict[str, Any] = {
        "run": {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "minutes": minutes,
                "sample_s": sample_s, "python": platform.python_version(),
                "cpus": os.cpu_count(), "load_at_start": os.getloadavg()[0]},
        "engines": {},
    }  # fmt: skip
    failed = False
    for engine in engines:
        rate = calibrate(engine, 5.0 if arguments.quick else 20.0)
        print(f"[{engine}] sustains {rate:,.0f} jobs/s; soaking at {LOAD:.0%}", flush=True)
        run = soak(engine, rate * LOAD, minutes * 60, sample_s)
        run["calibrated_rate"] = round(rate, 1)
        run["summary"] = summarize(engine, run)
        results["engines"][engine] = run
        print(f"[{engine}] {json.dumps(run['summary'])}", flush=True)
        print(f"[{engine}] {json.dumps(run['accounting'])}", flush=True)
        failed = failed or not all(run["summary"]["holds"].values())
    Path(arguments.json).parent.mkdir(parents=True, exist_ok=True)
    Path(arguments.json).write_text(json.dumps(results, indent=2) + "\n")
    draw(results, Path(arguments.png))
    print(f"JSON in {arguments.json}; chart in {arguments.png}", flush=True)
    return 1 if failed else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    length.add_argument("--quick", action="store_true", help="one minute, sampled every 10 s")
    parser.add_argument("--engine", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument("--json", default=str(DEFAULT_JSON), metavar="PATH")
    parser.add_argument("--png", default=str(DEFAULT_PNG), metavar="PATH")
    return parser


if __name__ == "__main__":
    sys.exit(main())
