"""What every benchmark shares: the operations, run sizes, subjects and places.

A *subject* is one implementation measured on one engine — alkstore, the raw
driver floor, or a peer library. Each measures the operations it can in
fresh storage (a *place*) and returns one number per operation; the report
puts subjects side by side and divides.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import random
import statistics
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg

__all__ = [
    "OPERATIONS",
    "Operation",
    "Sizes",
    "Subject",
    "in_processes",
    "latency_split",
    "peer_process",
    "per_second",
    "percentile",
    "postgres_database",
    "server_dsn",
    "sqlite_file",
    "wake_latencies",
]


@dataclass(frozen=True)
class Operation:
    """One measured operation and how to read its number."""

    key: str
    label: str
    unit: str
    higher_is_better: bool = True


def _operations(*operations: Operation) -> dict[str, Operation]:
    return {operation.key: operation for operation in operations}


OPERATIONS = _operations(
    Operation("enqueue_1", "enqueue, 1 per tx", "jobs/s"),
    Operation("enqueue_100", "enqueue, 100 per tx", "jobs/s"),
    Operation("drain_one_1w", "drain claim_one+ack, 1 worker", "jobs/s"),
    Operation("drain_one_4w", "drain claim_one+ack, 4 workers", "jobs/s"),
    Operation("drain_batch_1w", "drain claim_batch(32)+ack_batch, 1 worker", "jobs/s"),
    Operation("drain_batch_4w", "drain claim_batch(32)+ack_batch, 4 workers", "jobs/s"),
    Operation("claim_backlog_300", "claim+ack, 300 ready", "jobs/s"),
    Operation("claim_backlog_3000", "claim+ack, 3,000 ready", "jobs/s"),
    Operation("claim_backlog_30000", "claim+ack, 30,000 ready", "jobs/s"),
    Operation("claim_backlog_1000000", "claim+ack, 1,000,000 ready", "jobs/s"),
    Operation("notify_wake_p50", "notify → wake, p50", "ms", higher_is_better=False),
    Operation("notify_wake_p99", "notify → wake, p99", "ms", higher_is_better=False),
    Operation("enqueue_claim_p50", "enqueue → claim, p50", "ms", higher_is_better=False),
    Operation("enqueue_claim_p99", "enqueue → claim, p99", "ms", higher_is_better=False),
    Operation("publish_1", "publish, 1 per tx", "events/s"),
    Operation("publish_100", "publish, 100 per tx", "events/s"),
    Operation("replay", "replay (read a stream from 0)", "events/s"),
    Operation("idle_cpu", "idle CPU, 50 listeners + 4 parked", "% of a core", False),
    # asyncio: alkstore's async API beside its sync API ("alkstore sync") and pgqueuer's
    Operation("async_enqueue_1", "async enqueue, 1 per tx, 1 task", "jobs/s"),
    Operation("async_enqueue_1_32t", "async enqueue, 1 per tx, 32 tasks", "jobs/s"),
    Operation("async_drain_batch_1w", "async drain claim_batch(32)+ack_batch, 1 worker", "jobs/s"),
    Operation("async_drain_batch_4w", "async drain claim_batch(32)+ack_batch, 4 workers", "jobs/s"),
    Operation("async_enqueue_claim_p50", "async worker: enqueue → handler, p50", "ms", False),
    Operation("async_enqueue_claim_p99", "async worker: enqueue → handler, p99", "ms", False),
    Operation(
        "async_idle_threads", "idle threads: 50 receivers + 4 parked workers", "threads", False
    ),
)


@dataclass(frozen=True)
class Sizes:
    """How much work each operation does: the full run, or ``--quick``."""

    enqueues: int
    drain_jobs: int
    backlogs: tuple[int, ...]
    claims_per_backlog: int
    latency_samples: int
    events: int
    idle_seconds: float

    @classmethod
    def for_run(cls, engine: str, *, quick: bool) -> Sizes:
        """The sizes ``run.py`` uses for ``engine``.

        Each timed measurement should last long enough for timer and
        scheduler noise not to matter. A PostgreSQL commit waits for a WAL
        flush (about a millisecond here) where a SQLite commit in WAL mode
        with ``synchronous=NORMAL`` does not, so SQLite gets ten times the
        work for about the same time. ``--quick`` must finish both engines
        in under 3 minutes on 2 cores. Ratios only ever compare figures of
        one engine.
        """
        # A million ready jobs only in full runs: writing them takes tens of seconds.
        backlogs, full = (300, 3_000, 30_000), (300, 3_000, 30_000, 1_000_000)
        if engine == "sqlite":
            if quick:
                return cls(2_000, 3_000, backlogs, 1_000, 200, 10_000, 2.0)
            return cls(50_000, 30_000, full, 5_000, 500, 100_000, 10.0)
        if quick:
            return cls(300, 600, backlogs, 200, 50, 3_000, 2.0)
        return cls(5_000, 10_000, full, 1_000, 500, 20_000, 10.0)


class Subject(Protocol):
    """One implementation measured on one engine.

    The report calls the subject named "alkstore" the measured one and every
    other subject of the engine an anchor. A subject may also carry a
    ``notes: str`` attribute (how it does what it does, e.g. how a raw floor
    wakes), which the report prints under the engine's table.
    """

    name: str
    """How the report names it: "alkstore", "raw sqlite3", "pgqueuer 1.6.0", ..."""
    engine: str
    """"sqlite" or "postgres"."""

    def unavailable(self) -> str | None:
        """Why this subject cannot run here (shown in the report), or None."""

    def measure(self, operation: str, sizes: Sizes) -> float | None:
        """Measure ``operation`` in fresh storage; None if it does not apply to this subject."""


# Measuring


def per_second(count: int, run: Callable[[], object]) -> float:
    """Run ``run`` once and return ``count`` divided by the seconds it took."""
    started = time.perf_counter()
    run()
    return count / (time.perf_counter() - started)


def percentile(samples: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``samples`` (0.5 = median), inclusive method."""
    if len(samples) == 1:
        return samples[0]
    cuts = statistics.quantiles(samples, n=1000, method="inclusive")
    return cuts[min(max(round(fraction * 1000) - 1, 0), len(cuts) - 1)]


def in_processes(target: Callable[[int, Any], object], argument: Any, count: int) -> float:
    """Run ``target(index, argument)`` in ``count`` fresh processes at once.

    Every process first does its own setup (imports, connecting) and then
    waits at a barrier; the clock starts when all are ready and stops when
    the last one returns. ``target`` must be a module-level function and call
    ``ready()`` (given as ``argument["ready"]``) once set up. Returns the
    seconds between the release and the last finish.
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(count + 1)
    processes = [
        context.Process(target=_run_after_barrier, args=(target, index, argument, barrier))
        for index in range(count)
    ]
    for process in processes:
        process.start()
    barrier.wait(timeout=120)
    started = time.perf_counter()
    for process in processes:
        process.join()
    elapsed = time.perf_counter() - started
    failed = [process.exitcode for process in processes if process.exitcode != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} benchmark processes failed (exit codes {failed})")
    return elapsed


def _run_after_barrier(
    target: Callable[[int, Any], object], index: int, argument: Any, barrier: Any
) -> None:
    target(index, {**argument, "ready": lambda: barrier.wait(timeout=120)})


def latency_split(operation: str) -> tuple[str, float] | None:
    """``("notify_wake", 0.5)`` for ``"notify_wake_p50"``: one sampling gives both quantiles."""
    base, _, quantile = operation.rpartition("_p")
    if not base or not quantile.isdigit():
        return None
    return base, int(quantile) / 100


@contextlib.contextmanager
def peer_process(
    target: Callable[[Any, multiprocessing.connection.Connection], object],
    argument: Any,
    *,
    timeout: float = 30.0,
) -> Iterator[multiprocessing.connection.Connection]:
    """Run ``target(argument, pipe)`` in a fresh process while the caller talks to it.

    Yields the caller's end of a duplex pipe. On exit waits up to ``timeout``
    for the process to end by itself, then terminates it; a process that
    failed (non-zero exit) raises ``RuntimeError`` unless the body already
    raised. ``target`` must be a module-level function.
    """
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe(duplex=True)
    process = context.Process(target=target, args=(argument, theirs))
    process.start()
    theirs.close()
    failed = False
    try:
        yield mine
    except BaseException:
        failed = True
        raise
    finally:
        mine.close()
        process.join(0 if failed else timeout)
        if process.is_alive():
            process.terminate()
            process.join()
        if not failed and process.exitcode != 0:
            raise RuntimeError(f"the benchmark peer process failed (exit code {process.exitcode})")


def wake_latencies(
    pipe: multiprocessing.connection.Connection,
    samples: int,
    trigger: Callable[[int, float], object],
    *,
    settle_s: float = 0.002,
    jitter_s: float = 0.002,
    timeout: float = 10.0,
) -> list[float]:
    """Sequential cross-process wake latencies in milliseconds.

    The peer at the other end of ``pipe`` sends ``"armed"`` whenever it is
    parked waiting, and ``(n, time.time())`` when it woke for sample ``n``.
    For each sample this waits for ``"armed"``, lets the peer settle into its
    wait for ``settle_s`` plus a random part of ``jitter_s`` (so that a peer
    polling on a period, such as a 1 ms watcher, is not met at the same phase
    of its period every time), takes ``t0 = time.time()`` and calls
    ``trigger(n, t0)`` (which commits the notify or the enqueue), then reads
    the peer's wake time. Raises ``TimeoutError`` when the peer stays silent.
    """
    latencies: list[float] = []
    for n in range(samples):
        if _receive(pipe, timeout) != "armed":
            raise RuntimeError("the peer process did not report that it is parked")
        time.sleep(settle_s + random.uniform(0.0, jitter_s))
        t0 = time.time()
        trigger(n, t0)
        message = _receive(pipe, timeout)
        if not isinstance(message, tuple) or message[0] != n:
            raise RuntimeError(f"sample {n}: the peer reported {message!r}")
        latencies.append((message[1] - t0) * 1000)
    return latencies


def _receive(pipe: multiprocessing.connection.Connection, timeout: float) -> object:
    try:
        if not pipe.poll(timeout):
            raise TimeoutError(f"no word from the peer process in {timeout:g} s")
        return pipe.recv()
    except EOFError:
        raise RuntimeError("the peer process ended early (its traceback is on stderr)") from None


# Places: fresh storage for one measurement


@contextlib.contextmanager
def sqlite_file() -> Iterator[Path]:
    """A path for a new SQLite file in a temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="alkbench-") as folder:
        yield Path(folder) / "bench.db"


def server_dsn() -> str:
    """The PostgreSQL server to benchmark on: ``$ALKSTORE_PG_DSN`` or the local default."""
    return os.environ.get("ALKSTORE_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """The DSN of a new, empty database on the server, dropped afterwards."""
    name = f"alkbench_{uuid.uuid4().hex[:10]}"
    server = server_dsn()
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _with_database(dsn: str, database: str) -> str:
    """``dsn`` (a ``postgresql://`` URL) naming ``database`` instead."""
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))
