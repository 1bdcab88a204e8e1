"""What a Worker logs about each job, on each engine and each way of running.

A real worker on a real store (a SQLite file, a PostgreSQL schema) works a
queue whose jobs succeed, fail until they are dead, settle themselves, or
lose their claim; the test captures the ``alkstore.worker`` records and
checks each one's level, message and structured ``extra`` fields. The
thread runner and both asyncio runners must log the same records.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import alkstore
from alkstore import QueueOpts

FIELDS = ("queue", "job_id", "attempt", "duration_s", "worker_id", "outcome", "error")
MODES = ("run", "run_async on a Store", "run_async on an AsyncStore")
WORKER_ID = "logging-worker"


def jobs_table(dsn: str) -> str:
    """The engine's jobs table, for the test's backdoor (a lapse made on purpose)."""
    if not dsn.startswith("postgresql"):
        return "__alkstore_jobs"
    (schema,) = parse_qs(urlsplit(dsn).query)["schema"]
    return f'"{schema}".jobs'


class Backdoor:
    """Makes a claim lapse for real: its deadline moved into the past, as if its lease ran out."""

    def __init__(self, dsn: str) -> None:
        self._store = alkstore.open(dsn)
        self._table = jobs_table(dsn)

    def lapse(self, job_id: int) -> None:
        with self._store.transaction() as tx:
            tx.execute(f"UPDATE {self._table} SET deadline = 1 WHERE id = :id", {"id": job_id})

    def close(self) -> None:
        self._store.close()


def behave(job: Any, backdoor: Backdoor) -> str | None:
    """What each job's payload asks its handler to do; returns what to do on the job itself."""
    action: str = job.payload["do"]
    if action == "fail":
        raise ValueError(f"boom {job.id}")
    if action == "lapse" and job.attempts == 1:  # then it runs again, and succeeds
        backdoor.lapse(job.id)
    return action if action == "fail itself" else None


def sync_handler(backdoor: Backdoor) -> Callable[[Any], None]:
    def handle(job: alkstore.Job) -> None:
        if behave(job, backdoor) == "fail itself":
            assert job.fail("bad input")

    return handle


def async_handler(backdoor: Backdoor) -> Callable[[Any], Any]:
    async def handle(job: alkstore.AsyncJob) -> None:
        if behave(job, backdoor) == "fail itself":
            assert await job.fail("bad input")

    return handle


def enqueue_the_jobs(dsn: str) -> dict[str, int]:
    with alkstore.open(dsn) as store:
        queue = store.queue("logged", QueueOpts(max_attempts=2, backoff_base_s=0.05))
        return {
            action: queue.enqueue({"do": action})
            for action in ("ok", "fail", "fail itself", "lapse")
        }


def all_settled(dsn: str) -> bool:
    """Every job acked (the lapsed one on its second run) or dead."""
    with alkstore.open(dsn) as store:
        listed = store.inspect().queues()
    return [(stats.dead, stats.total) for stats in listed] == [(2, 2)]


def work_until(dsn: str, mode: str, done: Callable[[], bool]) -> None:
    """Run a worker on the queue in ``mode`` until ``done()``, then stop it."""
    backdoor = Backdoor(dsn)
    stop_thread = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            if mode == "run":
                with alkstore.open(dsn) as store:
                    worker = alkstore.Worker(
                        store, "logged", sync_handler(backdoor), worker_id=WORKER_ID
                    )
                    worker.run(stop_thread)
            else:
                asyncio.run(run_async())
        except BaseException as exc:
            failed.append(exc)

    async def run_async() -> None:
        stop = asyncio.Event()
        if mode == "run_async on a Store":
            with alkstore.open(dsn) as store:
                handler = sync_handler(backdoor)
                worker = alkstore.Worker(store, "logged", handler, worker_id=WORKER_ID)
                await until_stopped(worker, stop)
        else:
            async with alkstore.open_async(dsn) as async_store:
                handler = async_handler(backdoor)
                worker = alkstore.Worker(async_store, "logged", handler, worker_id=WORKER_ID)
                await until_stopped(worker, stop)

    async def until_stopped(worker: alkstore.Worker, stop: asyncio.Event) -> None:
        task = asyncio.ensure_future(worker.run_async(stop))
        while not stop_thread.is_set():
            await asyncio.sleep(0.05)
        stop.set()
        await task

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not done():
            assert time.monotonic() < deadline, "the worker did not settle every job in time"
            assert not failed, failed
            time.sleep(0.05)
    finally:
        stop_thread.set()
        thread.join(20)
        backdoor.close()
    assert not thread.is_alive()
    assert not failed, failed


def job_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "alkstore.worker" and hasattr(r, "outcome")]


def extra(record: logging.LogRecord, name: str) -> Any:
    """One of the record's structured ``extra`` fields."""
    return getattr(record, name)


def of_job(records: list[logging.LogRecord], job_id: int) -> list[tuple[str, int, int]]:
    """(outcome, level, attempt) of each record of one job, in order."""
    return [
        (extra(r, "outcome"), r.levelno, extra(r, "attempt"))
        for r in records
        if extra(r, "job_id") == job_id
    ]


def with_outcome(records: list[logging.LogRecord], outcome: str) -> list[logging.LogRecord]:
    return [r for r in records if extra(r, "outcome") == outcome]


@pytest.mark.parametrize("mode", MODES)
def test_each_jobs_start_success_retry_dead_letter_and_lapse_is_logged_with_its_fields(
    dsn: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="alkstore.worker")
    ids = enqueue_the_jobs(dsn)
    work_until(dsn, mode, lambda: all_settled(dsn))
    records = job_records(caplog)

    debug, warning, error = logging.DEBUG, logging.WARNING, logging.ERROR
    assert of_job(records, ids["ok"]) == [("started", debug, 1), ("succeeded", debug, 1)]
    assert of_job(records, ids["fail"]) == [
        ("started", debug, 1), ("retrying", warning, 1),
        ("started", debug, 2), ("dead", error, 2),
    ]  # fmt: skip
    assert of_job(records, ids["fail itself"]) == [("started", debug, 1), ("dead", error, 1)]
    # The lapsed job is claimed again and runs again (at least once): only its first run counts.
    assert of_job(records, ids["lapse"]) == [
        ("started", debug, 1), ("lapsed", warning, 1),
        ("started", debug, 2), ("succeeded", debug, 2),
    ]  # fmt: skip

    for record in records:
        fields = {name: getattr(record, name) for name in FIELDS}
        assert (fields["queue"], fields["worker_id"]) == ("logged", WORKER_ID), fields
        assert isinstance(fields["job_id"], int)
        assert isinstance(fields["attempt"], int)
        if fields["outcome"] == "started":
            assert fields["duration_s"] is None
        else:
            assert isinstance(fields["duration_s"], float)
            assert 0 <= fields["duration_s"] < 10
        message = record.getMessage()  # readable without the extras
        assert f"job {fields['job_id']} of 'logged'" in message, message

    (retried,) = with_outcome(records, "retrying")
    assert extra(retried, "error") == f"ValueError: boom {ids['fail']}"
    assert retried.getMessage() == (
        f"job {ids['fail']} of 'logged' failed (attempt 1 of 2) and will be retried: "
        f"ValueError: boom {ids['fail']}"
    )
    assert retried.exc_info is not None
    assert isinstance(retried.exc_info[1], ValueError)  # the traceback goes with it
    dead = {extra(r, "job_id"): r for r in with_outcome(records, "dead")}
    assert dead[ids["fail"]].getMessage() == (
        f"job {ids['fail']} of 'logged' failed on its last attempt (2 of 2) and went to "
        f"dead letters: ValueError: boom {ids['fail']}"
    )
    assert extra(dead[ids["fail itself"]], "error") == "bad input"
    assert dead[ids["fail itself"]].getMessage() == (
        f"job {ids['fail itself']} of 'logged' was sent to dead letters by its handler "
        "(attempt 1 of 2): bad input"
    )
    (lapse,) = with_outcome(records, "lapsed")
    assert "lost its claim before its success could be acked" in lapse.getMessage()


@pytest.mark.parametrize("mode", MODES)
def test_a_busy_worker_logs_nothing_at_info_when_every_job_succeeds(
    dsn: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore")
    with alkstore.open(dsn) as store:
        queue = store.queue("logged")
        for _ in range(20):
            queue.enqueue({"do": "ok"})

    def emptied() -> bool:
        with alkstore.open(dsn) as store:
            return store.inspect().queues() == []

    work_until(dsn, mode, emptied)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("alkstore")] == []
