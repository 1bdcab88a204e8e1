"""Long-running runners ride out a five-second database outage, on each engine.

In one process a Worker, a Consumer and ``run_schedules`` share a store while
the database goes away for real: on PostgreSQL a server of the test's own is
stopped and started again on the same port; on SQLite another connection
holds the write lock while the store waits at most half a second for it.
Afterwards every job was acked, every event handled in order with no gap,
every schedule boundary fired exactly once; the runners are still alive and
working, each logged exactly one warning for the outage, and no log record
shows the password.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

import alkstore
from alkstore import EnqueueOpts, StreamEvent
from alkstore_postgres.testing import ThrowawayServer, throwaway_cluster

PASSWORD = "outage-pa55word-never-logged"
OUTAGE_S = 5.0
OUTAGE_STARTS_S = 1.5
LEASE_S = 2.0
"""The scheduler's lease: shorter than the outage, so it lapses and is re-taken."""
RUNNERS = ("alkstore.worker", "alkstore.consumer", "alkstore.scheduler")


@dataclass
class Engine:
    """How to open the store, and how to take its database away for a while."""

    open: Callable[[], alkstore.Store]
    outage: Callable[[], AbstractContextManager[None]]


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        yield Engine(
            open=lambda: alkstore.open(str(path), busy_timeout_s=0.5, scheduler_lease_s=LEASE_S),
            outage=lambda: _write_lock_held(path),
        )
        return
    with throwaway_cluster() as server:
        # Trust authentication ignores the password: it is there to be leaked, or not.
        dsn = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{server.port}/postgres"
        yield Engine(
            open=lambda: alkstore.open(dsn, connect_timeout_s=1, scheduler_lease_s=LEASE_S),
            outage=lambda: _server_stopped(server),
        )


@contextlib.contextmanager
def _write_lock_held(path: Path) -> Iterator[None]:
    """Another connection holds the SQLite write lock for the block."""
    holder = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


@contextlib.contextmanager
def _server_stopped(server: ThrowawayServer) -> Iterator[None]:
    """The server is down for the block, then up again on the same port."""
    server.stop()
    try:
        yield
    finally:
        server.start()


@dataclass
class Seen:
    """What the handlers saw, with when (monotonic)."""

    jobs: list[tuple[int, float]] = field(default_factory=list)
    events: list[tuple[int, float]] = field(default_factory=list)

    def job(self, job: alkstore.Job) -> None:
        time.sleep(0.05)
        self.jobs.append((job.id, time.monotonic()))

    def event(self, event: StreamEvent) -> None:
        time.sleep(0.2)
        self.events.append((event.offset, time.monotonic()))


class Runners:
    """A Worker, a Consumer and run_schedules, each on a thread, keeping what they raise."""

    def __init__(self, store: alkstore.Store, seen: Seen) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        worker = alkstore.Worker(store, "jobs", seen.job, concurrency=2, idle_wait_s=0.2)
        consumer = alkstore.Consumer(
            store, "orders", "projection", seen.event, batch_size=2, idle_wait_s=0.2
        )
        self.threads = [
            threading.Thread(target=self._run, args=(run,), daemon=True)
            for run in (
                worker.run,
                consumer.run,
                lambda stop: store.run_schedules(stop, owner="the-runner"),
            )
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, run: Callable[[threading.Event], None]) -> None:
        try:
            run(self.stop)
        except BaseException as exc:
            self.errors.append(exc)

    def alive(self) -> bool:
        return all(thread.is_alive() for thread in self.threads)

    def finish(self) -> list[BaseException]:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in self.threads), "a runner ignored stop"
        return self.errors


def poll(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_a_worker_a_consumer_and_the_scheduler_ride_out_a_five_second_outage(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="alkstore")
    store = engine.open()
    try:
        job_ids = [
            store.queue("jobs").enqueue(n, EnqueueOpts(delay=n * 0.3)) for n in range(30)
        ]  # ready one by one across the outage, so the worker meets it claiming
        offsets = [store.stream("orders").publish(n) for n in range(40)]  # 8 s of handling
        first_boundary = store.schedule("tick", "@every 1s", "ticks", {}).next_fire_at
        seen = Seen()
        runners = Runners(store, seen)

        time.sleep(OUTAGE_STARTS_S)
        with engine.outage():
            time.sleep(OUTAGE_S)
        recovered_at, recovered_wall = time.monotonic(), time.time()

        def done() -> bool:
            return (
                {job_id for job_id, _ in seen.jobs} == set(job_ids)
                and bool(seen.events)
                and seen.events[-1][0] == offsets[-1]
                and store.inspect().jobs("jobs") == []
                and _next_fire_at(store) > recovered_wall + 1.0
            )

        poll(done, 30, "the runners to finish the work after the outage")
        assert runners.alive(), runners.errors
        assert runners.finish() == []

        # Every job acked: handled at least once, none left behind.
        assert {job_id for job_id, _ in seen.jobs} == set(job_ids)
        assert store.inspect().jobs("jobs") == []
        assert any(at > recovered_at for _, at in seen.jobs)

        # Every event handled in order, none skipped (one may come again after a lost save).
        _assert_in_order_without_gaps([offset for offset, _ in seen.events], offsets)
        assert store.stream("orders").get_offset("projection") == offsets[-1]
        assert any(at > recovered_at for _, at in seen.events)

        # Every boundary from the first to the last one passed fired exactly once.
        last_boundary = _next_fire_at(store)
        boundaries = round(last_boundary - first_boundary)
        assert boundaries >= OUTAGE_STARTS_S + OUTAGE_S  # the window spans the outage
        assert len(store.inspect().jobs("ticks", limit=1000)) == boundaries
    finally:
        store.close()

    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    per_runner = {name: [r for r in warnings if r.name == name] for name in RUNNERS}
    assert {name: len(found) for name, found in per_runner.items()} == dict.fromkeys(RUNNERS, 1), [
        (r.name, r.getMessage()) for r in warnings
    ]
    formatter = logging.Formatter()
    assert not [
        record.getMessage() for record in caplog.records if PASSWORD in formatter.format(record)
    ]


def _next_fire_at(store: alkstore.Store) -> float:
    (schedule,) = store.inspect().schedules()
    return schedule.next_fire_at


def _assert_in_order_without_gaps(handled: list[int], published: list[int]) -> None:
    """Each handled event is at most one past the furthest handled before it."""
    position = {offset: index for index, offset in enumerate(published)}
    furthest = -1
    for offset in handled:
        index = position[offset]
        assert index <= furthest + 1, f"skipped from {published[furthest]} to {offset}"
        furthest = max(furthest, index)
    assert furthest == len(published) - 1


def test_the_tail_command_rides_out_a_server_restart() -> None:
    with throwaway_cluster() as server:
        dsn = (
            f"postgresql://postgres:{PASSWORD}@127.0.0.1:{server.port}/postgres?connect_timeout_s=1"
        )
        with alkstore.open(dsn) as store:
            before = store.stream("orders").publish("before")
        tail = subprocess.Popen(
            [sys.executable, "-m", "alkstore._cli", "tail", "orders", "--from", "0", "--dsn", dsn],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with tail:
            try:
                printed = _lines(tail.stdout)
                assert printed.get(timeout=15) == f'{before} "before"'
                with _server_stopped(server):
                    time.sleep(3)
                with alkstore.open(dsn) as store:
                    after = store.stream("orders").publish("after")
                assert printed.get(timeout=15) == f'{after} "after"'
                assert tail.poll() is None, "tail ended during the outage"
                tail.send_signal(signal.SIGTERM)
                _, err = tail.communicate(timeout=15)
            finally:
                if tail.poll() is None:
                    tail.kill()
    assert tail.returncode == 0, err
    (warning,) = [line for line in err.splitlines() if line.startswith("alkstore: tail of")]
    assert "reading 'orders' failed; retrying" in warning
    assert PASSWORD not in err


def _lines(stream: IO[str] | None) -> queue.Queue[str]:
    """The lines ``stream`` yields, as they come, read on a thread."""
    assert stream is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_call_made_during_an_outage_returns_soon_after_the_server_is_back(api: str) -> None:
    """The pool gives up reconnecting after a few seconds and tries again only
    when asked: a call already waiting must ask again, not wait out its whole
    ``connect_timeout_s`` (30 s here) after the server came back."""
    with throwaway_cluster() as server:
        dsn = f"postgresql://postgres@127.0.0.1:{server.port}/postgres?connect_timeout_s=30"
        back_at: list[float] = []

        def outage() -> None:
            with _server_stopped(server):
                time.sleep(OUTAGE_S)
            back_at.append(time.monotonic())

        async def claim_async() -> object:
            async with alkstore.open_async(dsn) as store:
                queue = store.queue("q")
                await queue.enqueue("x")
                taker = threading.Thread(target=outage)
                taker.start()
                await asyncio.sleep(0.5)
                try:
                    return await queue.claim_one("w")
                finally:
                    taker.join()

        def claim_sync() -> object:
            with alkstore.open(dsn) as store:
                queue = store.queue("q")
                queue.enqueue("x")
                taker = threading.Thread(target=outage)
                taker.start()
                time.sleep(0.5)
                try:
                    return queue.claim_one("w")
                finally:
                    taker.join()

        claimed = asyncio.run(claim_async()) if api == "async" else claim_sync()
        returned_at = time.monotonic()
        assert claimed is not None
        assert returned_at - back_at[0] < 10, "the call waited on long after the server was back"


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_wait_with_a_timeout_ends_near_it_during_an_outage(api: str) -> None:
    """``queue.wait(1)`` and a receiver's ``recv(1)`` read before they wait for
    a wake: during an outage that read must give up near the caller's timeout
    with ``Database``, not wait out ``connect_timeout_s`` (30 s here)."""
    with throwaway_cluster() as server:
        dsn = f"postgresql://postgres@127.0.0.1:{server.port}/postgres?connect_timeout_s=30"

        async def waits_async() -> list[float]:
            async with alkstore.open_async(dsn) as store:
                queue, receiver = store.queue("q"), await store.stream("s").subscribe("c")
                with _server_stopped(server):
                    took = [
                        await _seconds_to_fail_async(queue.wait(1)),
                        await _seconds_to_fail_async(receiver.recv_async(1)),
                    ]
                await queue.enqueue("after")  # the store works on
                assert await queue.wait(1) is True
                receiver.close()
                return took

        def waits_sync() -> list[float]:
            with alkstore.open(dsn) as store:
                queue, receiver = store.queue("q"), store.stream("s").subscribe("c")
                with _server_stopped(server):
                    took = [
                        _seconds_to_fail(lambda: queue.wait(1)),
                        _seconds_to_fail(lambda: receiver.recv(1)),
                    ]
                queue.enqueue("after")
                assert queue.wait(1) is True
                receiver.close()
                return took

        took = asyncio.run(waits_async()) if api == "async" else waits_sync()
        assert all(seconds < 5 for seconds in took), took


def _seconds_to_fail(call: Callable[[], object]) -> float:
    started = time.monotonic()
    with pytest.raises(alkstore.Database, match="couldn't get a connection"):
        call()
    return time.monotonic() - started


async def _seconds_to_fail_async(call: Awaitable[object]) -> float:
    started = time.monotonic()
    with pytest.raises(alkstore.Database, match="couldn't get a connection"):
        await call
    return time.monotonic() - started


def test_a_dashboard_page_and_a_scrape_answer_soon_during_an_outage() -> None:
    """Both read a store whose connect timeout is 30 s here: during an outage
    each must answer 503 near its own short wait, not after 30 s."""
    from alkstore.web import alkstore_web_app

    with warnings.catch_warnings():  # Python 3.10's Starlette prefers httpx2, which it lacks
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from starlette.testclient import TestClient

    with throwaway_cluster() as server:
        dsn = f"postgresql://postgres@127.0.0.1:{server.port}/postgres?connect_timeout_s=30"
        with alkstore.open(dsn) as store, TestClient(alkstore_web_app(store)) as client:
            assert client.get("/").status_code == 200
            with _server_stopped(server):
                started = time.monotonic()
                page = client.get("/")
                took = time.monotonic() - started
        assert (page.status_code, took < 6) == (503, True), took
        scrape = subprocess.Popen(
            [sys.executable, "-m", "alkstore._cli", "metrics", "--serve", "127.0.0.1:0",
             "--dsn", dsn], stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert scrape.stderr is not None
            said = scrape.stderr.readline()
            found = re.search(r"on http://127\.0\.0\.1:(\d+)/metrics", said)
            assert found, said
            port = int(found.group(1))
            with _server_stopped(server):
                started = time.monotonic()
                status = _status_of(f"http://127.0.0.1:{port}/metrics")
                took = time.monotonic() - started
        finally:
            scrape.terminate()
            scrape.communicate(timeout=30)
        assert (status, took < 6) == (503, True), took


def _status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        return refused.code
