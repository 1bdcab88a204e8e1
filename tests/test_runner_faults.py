"""What may end a long-running runner, and what must not.

A handler raising ``SystemExit`` or ``KeyboardInterrupt`` stops its Worker
gracefully — claims released, the exception re-raised — on each engine and
each way of running. A write that fails for a moment (another connection
holding SQLite's write lock) is retried: the job is acked and the offset
saved once the lock is gone, with one warning and nothing run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

import alkstore
from alkstore import Job, StreamEvent

RUN_MODES = ("run", "run_async", "run_async with a coroutine handler")


def _handler(raised: BaseException, coroutine: bool) -> Callable[[Job], object]:
    def handle(job: Job) -> None:
        if job.payload.get("exit"):
            raise raised

    async def handle_async(job: Job) -> None:
        handle(job)

    return handle_async if coroutine else handle


def _run_to_its_end(worker: alkstore.Worker, mode: str) -> list[BaseException]:
    """Run ``worker`` on a thread until it ends by itself; return what it raised.

    A worker still running after 15 s stalled: the test fails (a threaded one
    is stopped; an asyncio one is left to die with the process).
    """
    stop = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            if mode == "run":
                worker.run(stop)
            else:
                asyncio.run(worker.run_async())
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(15)
    stop.set()
    if thread.is_alive():
        pytest.fail("the worker neither stopped nor raised: it stalled")
    return raised


@pytest.mark.parametrize("mode", RUN_MODES)
@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt()], ids=type)
def test_a_handler_raising_a_base_exception_stops_the_worker_and_releases_every_claim(
    dsn: str, mode: str, raised: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    with alkstore.open(dsn) as store:
        queue = store.queue("q")
        fatal = queue.enqueue({"exit": True})
        ahead = [queue.enqueue({"n": n}) for n in range(3)]
        worker = alkstore.Worker(
            store, queue, _handler(raised, coroutine=mode.endswith("handler")), batch_size=4
        )

        assert _run_to_its_end(worker, mode) == [raised]

        for job_id in (fatal, *ahead):
            info = queue.get_job(job_id)
            assert info is not None
            assert (info.state, info.attempts) == ("pending", 0), info  # the attempt refunded
        assert store.inspect().jobs("q", "processing") == []
        assert worker.stats().in_flight == 0
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.name == "alkstore.worker"
    assert f"job {fatal} of 'q': the handler raised {type(raised).__name__}" in record.getMessage()


# A write that fails for a moment (SQLite: the write lock held elsewhere)


@contextlib.contextmanager
def _write_lock_held(path: Path) -> Iterator[None]:
    holder = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


def _hold_the_lock_while(path: Path, started: threading.Event, proceed: threading.Event) -> None:
    """Once a handler has ``started``, take the write lock, let it ``proceed``, hold on 1.5 s."""
    assert started.wait(10)
    with _write_lock_held(path):
        proceed.set()
        time.sleep(1.5)


def _warnings(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno >= 30]


def test_a_worker_acks_a_finished_job_once_a_held_write_lock_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    started, proceed = threading.Event(), threading.Event()
    handled: list[int] = []

    def handle(job: Job) -> None:
        started.set()
        assert proceed.wait(10)
        handled.append(job.id)  # returns while the lock is held: the ack fails at first

    with alkstore.open(str(path), busy_timeout_s=0.2) as store:
        job_id = store.queue("q").enqueue("work")
        worker = alkstore.Worker(store, "q", handle)
        stop = threading.Event()
        runner = threading.Thread(target=worker.run, args=(stop,), daemon=True)
        runner.start()
        try:
            _hold_the_lock_while(path, started, proceed)
            deadline = time.monotonic() + 10
            while store.queue("q").get_job(job_id) is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert store.queue("q").get_job(job_id) is None, "the ack was never retried"
        finally:
            stop.set()
            runner.join(10)
        assert handled == [job_id]
        assert worker.stats().succeeded == 1
    (warning,) = _warnings(caplog, "alkstore.worker")
    assert f"settling job {job_id} failed" in warning
    assert "database is locked" in warning


@pytest.mark.parametrize("mode", ["run", "run_async"])
def test_a_consumer_saves_its_offset_once_a_held_write_lock_is_gone_redelivering_nothing(
    tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    started, proceed = threading.Event(), threading.Event()
    handled: list[int] = []

    def handle(event: StreamEvent) -> None:
        started.set()
        assert proceed.wait(10)
        handled.append(event.offset)

    async def handle_async(event: StreamEvent) -> None:
        handle(event)  # blocks the loop a moment: only this consumer runs on it

    with alkstore.open(str(path), busy_timeout_s=0.2) as store:
        offsets = [store.stream("orders").publish(n) for n in range(3)]
        consumer = alkstore.Consumer(
            store, "orders", "projection", handle if mode == "run" else handle_async, batch_size=1
        )
        stop = _start_consumer(consumer, mode)
        try:
            _hold_the_lock_while(path, started, proceed)
            deadline = time.monotonic() + 10
            saved = 0
            while saved != offsets[-1] and time.monotonic() < deadline:
                time.sleep(0.05)
                saved = store.stream("orders").get_offset("projection")
        finally:
            stop()
        assert handled == offsets  # each once, in order: the failed save was retried, not redone
        assert saved == offsets[-1]
    (warning,) = _warnings(caplog, "alkstore.consumer")
    assert "saving the offset of 'projection' failed" in warning


def _start_consumer(consumer: alkstore.Consumer, mode: str) -> Callable[[], None]:
    """Start ``consumer`` on a thread (its own event loop for ``run_async``); return its stopper."""
    if mode == "run":
        stop = threading.Event()
        thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
        thread.start()
        stop_now = stop.set
    else:
        loop = asyncio.new_event_loop()
        stop_async = asyncio.Event()

        def run_async() -> None:
            try:
                loop.run_until_complete(consumer.run_async(stop_async))
            finally:
                loop.close()

        thread = threading.Thread(target=run_async, daemon=True)
        thread.start()

        def stop_now() -> None:
            loop.call_soon_threadsafe(stop_async.set)

    def stop_and_join() -> None:
        stop_now()
        thread.join(10)
        assert not thread.is_alive(), "the consumer ignored stop"

    return stop_and_join


def test_a_leading_scheduler_with_a_long_lease_stops_promptly(dsn: str) -> None:
    with alkstore.open(dsn, scheduler_lease_s=30) as store:
        store.schedule("hourly", "@every 1h", "reports", None)
        stop = threading.Event()
        runner = threading.Thread(target=store.run_schedules, args=(stop,), daemon=True)
        runner.start()
        deadline = time.monotonic() + 10
        while not any(lock.name == alkstore.SCHEDULER_LOCK for lock in store.inspect().locks()):
            assert time.monotonic() < deadline, "the runner never took the lead"
            time.sleep(0.02)
        time.sleep(0.3)  # now waiting for the next renewal, ten seconds away
        stopped_at = time.monotonic()
        stop.set()
        runner.join(5)
        assert not runner.is_alive()
        assert time.monotonic() - stopped_at < 2
        assert store.inspect().locks() == []  # leadership released on the way out


def _move_schedules_back(dsn: str, seconds: float) -> None:
    """Behind the API: every schedule falls due ``seconds`` ago, as after a long outage."""
    if "://" not in dsn:
        with contextlib.closing(sqlite3.connect(dsn)) as connection, connection:
            connection.execute(
                "UPDATE __alkstore_schedules SET next_fire_at = next_fire_at - ?", (seconds,)
            )
        return
    server, _, query = dsn.partition("?")
    schema = dict(part.split("=", 1) for part in query.split("&"))["schema"]
    with psycopg.connect(server, autocommit=True) as server_connection:
        server_connection.execute(
            f'UPDATE "{schema}".schedules SET next_fire_at = next_fire_at - %s', (seconds,)
        )


def _jobs_in(store: alkstore.Store, queue: str) -> int:
    return sum(stats.total for stats in store.inspect().queues() if stats.name == queue)


def test_a_catch_up_longer_than_the_lease_keeps_the_lead_as_it_fires(dsn: str) -> None:
    # Schedules of 64 missed boundaries each, every boundary its own
    # transaction, take longer than a 1 s lease: 512 of them on SQLite (a
    # firing takes about 0.1 ms), 128 on PostgreSQL (about a millisecond).
    # Each firing renews the lease, so the leader neither loses the lock
    # midway nor lets another in. The lease is long beside a firing, so only
    # a stall of a whole second on a loaded machine could take it (shorter
    # leases were lost to stalls on loaded CI runs, with nothing wrong).
    schedules, lease_s = (128 if "://" in dsn else 512), 1.0
    with alkstore.open(dsn, scheduler_lease_s=lease_s) as store:
        for n in range(schedules):
            store.schedule(f"tick-{n}", "@every 1m", "ticks", n)
        _move_schedules_back(dsn, 64 * 60)
        stop = threading.Event()
        raised: list[BaseException] = []

        def run() -> None:
            try:
                store.run_schedules(stop)
            except BaseException as exc:
                raised.append(exc)

        started = time.monotonic()
        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        deadline = started + 60
        while _jobs_in(store, "ticks") < 64 * schedules and not raised:
            assert time.monotonic() < deadline, "the catch-up did not finish"
            time.sleep(0.05)
        took = time.monotonic() - started
        stop.set()
        runner.join(10)
        assert raised == []
        assert _jobs_in(store, "ticks") == 64 * schedules
        assert took > lease_s, "the catch-up should outlast the lease, or this proves nothing"


@contextlib.contextmanager
def _firing_counted(on_fire: Callable[[int], None]) -> Iterator[None]:
    """Call ``on_fire(n)`` once the ``n``-th boundary fired by a leader running in
    this thread (its DEBUG record, logged after the fire committed)."""
    fired, leader = 0, threading.get_ident()

    class Counter(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            nonlocal fired
            if record.thread == leader and "fired its boundary" in record.getMessage():
                fired += 1
                on_fire(fired)

    scheduler_log = logging.getLogger("alkstore.scheduler")
    counter, level = Counter(), scheduler_log.level
    scheduler_log.addHandler(counter)
    scheduler_log.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        scheduler_log.removeHandler(counter)
        scheduler_log.setLevel(level)


def test_a_schedule_replaced_during_a_catch_up_fires_its_new_contents_from_then_on(
    dsn: str,
) -> None:
    """The same spec keeps the schedule's next boundary: the rest of the catch-up
    must not fire the queue and payload read before the replace committed."""
    with alkstore.open(dsn) as leader, alkstore.open(dsn) as admin:
        admin.schedule("report", "@every 1m", "old", {"v": 1})
        _move_schedules_back(dsn, 20 * 60)  # 20 boundaries owed, as after downtime
        stop = threading.Event()

        def replace_after_the_third(fired: int) -> None:
            if fired == 3:
                admin.schedule("report", "@every 1m", "new", {"v": 2})
            if fired == 20:
                stop.set()

        threading.Timer(20, stop.set).start()
        with _firing_counted(replace_after_the_third):
            leader.run_schedules(stop)
        old, new = _jobs_in(admin, "old"), _jobs_in(admin, "new")
        assert old + new == 20
        assert old <= 4, f"{old} fired from the schedule read before the replace"


def test_stopping_a_runner_in_a_long_catch_up_returns_before_it_ends(dsn: str) -> None:
    with alkstore.open(dsn) as store:
        for n in range(20):
            store.schedule(f"tick-{n}", "@every 1m", "ticks", n)
        _move_schedules_back(dsn, 64 * 60)  # 1,280 boundaries owed in all
        stop = threading.Event()
        threading.Timer(30, stop.set).start()
        with _firing_counted(lambda fired: stop.set() if fired == 5 else None):
            store.run_schedules(stop)
        assert _jobs_in(store, "ticks") == 5
