"""pgqueuer and procrastinate, each with its own worker machinery and recommended setup.

Private to ``postgres_subjects`` (whose docstring says how their mechanisms
map onto the operations). Both libraries, and asyncpg and uvloop, are
imported lazily through ``importlib`` so that the subjects load (and type
check) where they are not installed; their objects are ``Any`` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import multiprocessing.connection
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import psycopg
from _harness import Sizes, peer_process, postgres_database, wake_latencies
from _measured import BATCH, TASKS, Measured, check_count, drain_seconds
from _pg_common import PEER_SETTLE_S, scalar

__all__ = ["Pgqueuer", "Procrastinate"]

T = TypeVar("T")
ENTRYPOINT = "bench"
"""pgqueuer's entrypoint and procrastinate's task name."""
FILL = 1_000
"""Jobs per untimed prefill call."""
STARTUP_S = 60.0
"""How long a peer worker may take to import, connect and run its warm-up job."""


def _installed(distribution: str, hint: str) -> tuple[str | None, str | None]:
    """(version, None) when ``distribution`` imports here, else (None, why not)."""
    try:
        version = importlib.metadata.version(distribution)
        importlib.import_module(distribution)
    except ImportError as exc:  # PackageNotFoundError is an ImportError
        return None, f"{distribution} is not installed here ({exc}); pip install '{hint}'"
    return version, None


@contextlib.contextmanager
def _event_loop(*, uvloop: bool) -> Iterator[asyncio.AbstractEventLoop]:
    """A private event loop (uvloop's when asked and installed) for sync callers."""
    if uvloop and importlib.util.find_spec("uvloop") is not None:
        loop: asyncio.AbstractEventLoop = importlib.import_module("uvloop").new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _run(loop: asyncio.AbstractEventLoop, awaitable: Awaitable[T]) -> T:
    return loop.run_until_complete(awaitable)


async def _rate(count: int, run: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await run()
    return count / (time.perf_counter() - started)


# pgqueuer


class Pgqueuer(Measured):
    engine = "postgres"
    """pgqueuer on asyncpg and uvloop, as its quick start and performance guide set it up."""

    driver = "asyncpg"
    """Its psycopg driver ("psycopg", kept for comparison) drained 5-8x slower on this
    machine (its NOTIFY watcher waits in ``notifies()`` holding the connection's lock,
    so queries queue behind it): not the setup pgqueuer recommends, so the subject
    needs asyncpg rather than falling back to it."""
    batch_size = BATCH

    def __init__(self) -> None:
        super().__init__()
        hint = "pgqueuer[asyncpg]==1.6.0"
        version, self._reason = _installed("pgqueuer", hint)
        if self._reason is None and importlib.util.find_spec("asyncpg") is None:
            self._reason = (
                "asyncpg, the driver of pgqueuer's quick start and performance guide, is not "
                f"installed here: pip install '{hint}' (its psycopg driver drained 5-8x slower)"
            )
        self.name = f"pgqueuer {version or ''}".strip()
        self.notes = (
            f"{self.driver} driver, uvloop; Queries.install() + optimize_autovacuum(), durable; "
            f"drain = QueueManager.run(batch_size={self.batch_size}, mode=drain) per process, "
            "a batched claimer, so drain_one is n/a; latency = enqueue → handler start"
        )

    def unavailable(self) -> str | None:
        return self._reason

    def _argument(self, url: str, **extra: Any) -> dict[str, Any]:
        return {"url": url, "driver": self.driver, "batch_size": self.batch_size, **extra}

    @contextlib.contextmanager
    def _place(self) -> Iterator[tuple[str, asyncio.AbstractEventLoop, Any]]:
        """A fresh database with pgqueuer installed, a loop, and ``Queries`` on it."""
        with postgres_database() as url, _event_loop(uvloop=True) as loop:
            queries, close = _run(loop, _pgq_connect(self._argument(url)))
            try:
                _run(loop, queries.install())
                _run(loop, queries.optimize_autovacuum())
                yield url, loop, queries
            finally:
                _run(loop, close())

    def _enqueue_1(self, sizes: Sizes) -> float:
        with self._place() as (_, loop, queries):

            async def run() -> None:
                for n in range(sizes.enqueues):
                    await queries.enqueue(ENTRYPOINT, json.dumps({"n": n}).encode(), 0)

            return _run(loop, _rate(sizes.enqueues, run))

    def _enqueue_100(self, sizes: Sizes) -> float:
        with self._place() as (_, loop, queries):
            return _run(
                loop, _rate(sizes.enqueues, lambda: _pgq_fill(queries, sizes.enqueues, 100))
            )

    def _drain_batch_1w(self, sizes: Sizes) -> float:
        return self._drain_workers(sizes, 1)

    def _drain_batch_4w(self, sizes: Sizes) -> float:
        return self._drain_workers(sizes, 4)

    def _drain_workers(self, sizes: Sizes, workers: int) -> float:
        with self._place() as (url, loop, queries):
            _run(loop, _pgq_fill(queries, sizes.drain_jobs, FILL))
            seconds = drain_seconds(_pgq_drain, self._argument(url), workers)
            check_count(
                "jobs left after the drain", scalar(url, "SELECT count(*) FROM pgqueuer"), 0
            )
        return sizes.drain_jobs / seconds

    def _enqueue_claim(self, sizes: Sizes) -> list[float]:
        with self._place() as (url, loop, queries):
            argument = self._argument(url, samples=sizes.latency_samples)

            def enqueue(n: int, t0: float) -> None:
                payload = json.dumps({"n": n, "t0": t0}).encode()
                _run(loop, queries.enqueue(ENTRYPOINT, payload, 0))

            with peer_process(_pgq_parked_worker, argument) as pipe:
                _await_armed(pipe)
                return wake_latencies(pipe, sizes.latency_samples, enqueue, settle_s=PEER_SETTLE_S)

    # The asyncio rows: pgqueuer's API is asyncio already, so each is its own row's
    # measurement again (taken in turn with alkstore's async and sync figures).

    def _async_enqueue_1(self, sizes: Sizes) -> float:
        return self._enqueue_1(sizes)

    def _async_enqueue_1_32t(self, sizes: Sizes) -> float:
        with self._place() as (url, loop, _):
            return _run(loop, _pgq_enqueue_in_tasks(url, sizes.enqueues))

    def _async_drain_batch_1w(self, sizes: Sizes) -> float:
        return self._drain_workers(sizes, 1)

    def _async_drain_batch_4w(self, sizes: Sizes) -> float:
        return self._drain_workers(sizes, 4)

    def _async_enqueue_claim(self, sizes: Sizes) -> list[float]:
        return self._enqueue_claim(sizes)


async def _pgq_enqueue_in_tasks(url: str, count: int) -> float:
    """``count`` enqueues from ``TASKS`` tasks through one asyncpg pool (its default size,
    10 connections, as alkstore's pool), per second."""
    pgqueuer = importlib.import_module("pgqueuer")
    pool = await importlib.import_module("asyncpg").create_pool(dsn=url)
    try:
        queries = pgqueuer.Queries(pgqueuer.AsyncpgPoolDriver(pool))

        async def enqueue_share(first: int) -> None:
            for n in range(first, count, TASKS):
                await queries.enqueue(ENTRYPOINT, json.dumps({"n": n}).encode(), 0)

        return await _rate(
            count, lambda: asyncio.gather(*(enqueue_share(task) for task in range(TASKS)))
        )
    finally:
        await pool.close()


async def _pgq_connect(argument: dict[str, Any]) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """pgqueuer ``Queries`` on a new connection, and how to close that connection."""
    pgqueuer = importlib.import_module("pgqueuer")
    if argument["driver"] == "asyncpg":
        connection = await importlib.import_module("asyncpg").connect(dsn=argument["url"])
        driver = pgqueuer.AsyncpgDriver(connection)
    else:
        connection = await psycopg.AsyncConnection.connect(argument["url"], autocommit=True)
        driver = pgqueuer.PsycopgDriver(connection)
    close: Callable[[], Awaitable[None]] = connection.close
    return pgqueuer.Queries(driver), close


async def _pgq_fill(queries: Any, count: int, per_call: int) -> None:
    """Enqueue ``count`` jobs, ``per_call`` in each (list) call: one statement, one commit."""
    for start in range(0, count, per_call):
        numbers = range(start, min(start + per_call, count))
        await queries.enqueue(
            [ENTRYPOINT] * len(numbers),
            [json.dumps({"n": n}).encode() for n in numbers],
            [0] * len(numbers),
        )


def _pgq_loop_run(coroutine: Coroutine[Any, Any, None]) -> None:
    with _event_loop(uvloop=True) as loop:
        _run(loop, coroutine)


def _pgq_drain(index: int, argument: dict[str, Any]) -> None:
    _pgq_loop_run(_pgq_drain_async(argument))


async def _pgq_drain_async(argument: dict[str, Any]) -> None:
    pgqueuer = importlib.import_module("pgqueuer")
    queries, close = await _pgq_connect(argument)
    manager = pgqueuer.QueueManager(queries)

    async def handle(job: object) -> None:
        return None

    manager.entrypoint(ENTRYPOINT)(handle)
    argument["ready"]()  # nothing else runs on this loop yet: blocking here is fine
    try:
        mode = importlib.import_module("pgqueuer.types").QueueExecutionMode.drain
        await manager.run(batch_size=argument["batch_size"], mode=mode)
    finally:
        await close()


def _pgq_parked_worker(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    _pgq_loop_run(_pgq_parked_async(argument, pipe))


async def _pgq_parked_async(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    """A continuous QueueManager; its handler reports when it starts each sample's job.

    A warm-up job (n = -1) goes through the whole path first; "armed" follows
    it, and each sample's report. The handler stops the manager after the last.
    """
    pgqueuer = importlib.import_module("pgqueuer")
    queries, close = await _pgq_connect(argument)
    manager = pgqueuer.QueueManager(queries)
    warmed = asyncio.Event()
    reported = 0

    async def handle(job: Any) -> None:
        started = time.time()
        nonlocal reported
        n = json.loads(job.payload)["n"]
        if n < 0:
            warmed.set()
            return
        pipe.send((n, started))
        reported += 1
        if reported == argument["samples"]:
            manager.shutdown.set()
        else:
            pipe.send("armed")

    manager.entrypoint(ENTRYPOINT)(handle)
    try:
        running = asyncio.ensure_future(manager.run(batch_size=argument["batch_size"]))
        producer, close_producer = await _pgq_connect(argument)
        await producer.enqueue(ENTRYPOINT, json.dumps({"n": -1}).encode(), 0)
        await close_producer()
        await _first_of(warmed.wait(), running, what="pgqueuer's warm-up job")
        pipe.send("armed")
        await running
    finally:
        await close()


# procrastinate


class Procrastinate(Measured):
    engine = "postgres"
    """procrastinate: PsycopgConnector, asyncio, its worker with its defaults."""

    def __init__(self) -> None:
        super().__init__()
        version, self._reason = _installed("procrastinate", "procrastinate==3.10.0")
        self.name = f"procrastinate {version or ''}".strip()
        self.notes = (
            "PsycopgConnector (default pool), asyncio; schema_manager.apply_schema_async(); "
            "drain = app.run_worker_async(wait=False, concurrency=1) per process: one fetch "
            "and one finish per job (claim_one + ack), so the figure fills both drain rows; "
            "latency = enqueue → handler start"
        )

    def unavailable(self) -> str | None:
        return self._reason

    @contextlib.contextmanager
    def _place(self) -> Iterator[tuple[str, asyncio.AbstractEventLoop, Any]]:
        """A fresh database with procrastinate's schema, a loop, and its open app's task."""
        with postgres_database() as url, _event_loop(uvloop=False) as loop:
            app, task = _pro_app(url, _pro_noop)
            _run(loop, _pro_open(app))
            try:
                _run(loop, app.schema_manager.apply_schema_async())
                yield url, loop, task
            finally:
                _run(loop, app.close_async())

    def _enqueue_1(self, sizes: Sizes) -> float:
        with self._place() as (_, loop, task):

            async def run() -> None:
                for n in range(sizes.enqueues):
                    await task.defer_async(n=n)

            return _run(loop, _rate(sizes.enqueues, run))

    def _enqueue_100(self, sizes: Sizes) -> float:
        with self._place() as (_, loop, task):
            return _run(loop, _rate(sizes.enqueues, lambda: _pro_fill(task, sizes.enqueues, 100)))

    def _drain_one_1w(self, sizes: Sizes) -> float:
        return self._drain_workers(sizes, 1)

    def _drain_one_4w(self, sizes: Sizes) -> float:
        return self._drain_workers(sizes, 4)

    def _drain_batch_1w(self, sizes: Sizes) -> float:
        return self._drain_workers(sizes, 1)

    def _drain_batch_4w(self, sizes: Sizes) -> float:
        return self._drain_workers(sizes, 4)

    def _drain_workers(self, sizes: Sizes, workers: int) -> float:
        """One drain per worker count and run size: its one figure fills both drain rows."""

        def drain() -> float:
            with self._place() as (url, loop, task):
                _run(loop, _pro_fill(task, sizes.drain_jobs, FILL))
                seconds = drain_seconds(_pro_drain, {"url": url}, workers)
                succeeded = scalar(
                    url, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                )
                check_count("jobs succeeded in the drain", succeeded, sizes.drain_jobs)
            return sizes.drain_jobs / seconds

        rate = self.once(f"drain_{workers}w", sizes, drain)
        assert isinstance(rate, float)
        return rate

    def _enqueue_claim(self, sizes: Sizes) -> list[float]:
        with self._place() as (url, loop, task):
            argument = {"url": url, "samples": sizes.latency_samples}
            with peer_process(_pro_parked_worker, argument) as pipe:
                _await_armed(pipe)
                return wake_latencies(
                    pipe,
                    sizes.latency_samples,
                    lambda n, t0: _run(loop, task.defer_async(n=n, t0=t0)),
                    settle_s=PEER_SETTLE_S,
                )


async def _pro_noop(n: int, t0: float = 0.0) -> None:
    return None


def _pro_app(url: str, handler: Callable[..., Awaitable[None]]) -> tuple[Any, Any]:
    """A procrastinate App on ``url`` and ``handler`` registered as its task."""
    procrastinate = importlib.import_module("procrastinate")
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    return app, app.task(name=ENTRYPOINT)(handler)


async def _pro_open(app: Any) -> None:
    await app.open_async()


async def _pro_fill(task: Any, count: int, per_call: int) -> None:
    """Defer ``count`` jobs, ``per_call`` in each ``batch_defer_async``: one transaction."""
    for start in range(0, count, per_call):
        await task.batch_defer_async(
            *({"n": n} for n in range(start, min(start + per_call, count)))
        )


def _pro_drain(index: int, argument: dict[str, Any]) -> None:
    asyncio.run(_pro_drain_async(argument))


async def _pro_drain_async(argument: dict[str, Any]) -> None:
    app, _ = _pro_app(argument["url"], _pro_noop)
    await _pro_open(app)
    try:
        argument["ready"]()  # nothing else runs on this loop yet: blocking here is fine
        await app.run_worker_async(concurrency=1, wait=False, install_signal_handlers=False)
    finally:
        await app.close_async()


def _pro_parked_worker(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    asyncio.run(_pro_parked_async(argument, pipe))


async def _pro_parked_async(
    argument: dict[str, Any], pipe: multiprocessing.connection.Connection
) -> None:
    """A waiting worker (listen_notify, its default); the task reports when it starts.

    A warm-up job (n = -1) goes through the whole path first; "armed" follows
    it, and each sample's report. The worker is cancelled after the last.
    """
    warmed, finished = asyncio.Event(), asyncio.Event()
    reported = 0

    async def handle(n: int, t0: float = 0.0) -> None:
        started = time.time()
        nonlocal reported
        if n < 0:
            warmed.set()
            return
        pipe.send((n, started))
        reported += 1
        if reported == argument["samples"]:
            finished.set()
        else:
            pipe.send("armed")

    app, task = _pro_app(argument["url"], handle)
    await _pro_open(app)
    try:
        worker = asyncio.ensure_future(
            app.run_worker_async(concurrency=1, install_signal_handlers=False)
        )
        await task.defer_async(n=-1)
        await _first_of(warmed.wait(), worker, what="procrastinate's warm-up job")
        pipe.send("armed")
        await _first_of(finished.wait(), worker, what="the last sample", timeout=None)
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    finally:
        await app.close_async()


# Both


async def _first_of(
    awaited: Coroutine[Any, Any, object],
    worker: asyncio.Future[Any],
    *,
    what: str,
    timeout: float | None = STARTUP_S,
) -> None:
    """Wait for ``awaited``; fail if the worker ends first or ``timeout`` passes."""
    waiting = asyncio.ensure_future(awaited)
    done, _ = await asyncio.wait(
        {waiting, worker}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
    )
    if waiting in done:
        return
    waiting.cancel()
    if worker in done:
        worker.result()  # its exception, if it failed
        raise RuntimeError(f"the worker stopped before {what}")
    raise TimeoutError(f"no {what} within {timeout} s")


def _await_armed(pipe: multiprocessing.connection.Connection) -> None:
    """Wait (longer than a sample may) for the peer worker's first "armed", and leave it
    for ``wake_latencies`` to read: the library's worker starts slower than a sample."""
    if not pipe.poll(STARTUP_S):
        raise TimeoutError(f"the peer worker was not ready within {STARTUP_S:g} s")
