"""Wake notices are rows in ``__alkstore_notices``: whatever writes them, the old
ones are pruned, so the table stays bounded in a store that runs for months."""

from __future__ import annotations

import contextlib
import random
import sqlite3
import time
from collections.abc import Callable

import pytest

import alkstore
from alkstore_sqlite import SQLiteStore

STALE = 5_000
"""Notices an hour old, past the horizon, written before each test's writes."""

WRITES = 600
"""Writes of notices per test: more than twice the prune cadence."""


def notify(store: SQLiteStore, n: int) -> None:
    store.notify("news", n)


def notify_tx(store: SQLiteStore, n: int) -> None:
    with store.transaction() as tx:
        tx.notify_tx("news", n)


def claimed(store: SQLiteStore, n: int) -> alkstore.Job:
    """A new job of queue ``jobs``, enqueued and claimed."""
    store.queue("jobs").enqueue(n)
    job = store.queue("jobs").claim_one("w")
    assert job is not None
    return job


def retry(store: SQLiteStore, n: int) -> None:
    job = claimed(store, n)
    assert job.retry("again", delay_s=0)
    assert store.queue("jobs").cancel(job.id)


def release(store: SQLiteStore, n: int) -> None:
    job = claimed(store, n)
    assert job.release()
    assert store.queue("jobs").cancel(job.id)


def requeue_dead(store: SQLiteStore, n: int) -> None:
    job = claimed(store, n)
    assert job.fail("boom")
    assert store.queue("jobs").requeue_dead([job.id]) == 1
    assert store.queue("jobs").cancel(job.id)


def schedule(store: SQLiteStore, n: int) -> None:
    store.schedule("tick", "@every 1h", "jobs", n)


WRITERS: dict[str, Callable[[SQLiteStore, int], None]] = {
    "notify": notify,
    "notify_tx": notify_tx,
    "retry": retry,
    "release": release,
    "requeue_dead": requeue_dead,
    "schedule": schedule,
}


def add_stale_notices(path: str) -> None:
    hour_ago = time.time() - 3600
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.executemany(
            "INSERT INTO __alkstore_notices (channel, payload, created_at) VALUES (?, ?, ?)",
            [("old", "null", hour_ago)] * STALE,
        )


def stale_notices(path: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        (count,) = connection.execute(
            "SELECT count(*) FROM __alkstore_notices WHERE created_at < ?", (time.time() - 600,)
        ).fetchone()
    return int(count)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_old_notices_are_pruned_whatever_writes_new_ones(
    store: SQLiteStore, path: str, writer: str
) -> None:
    add_stale_notices(path)
    for n in range(WRITES):
        WRITERS[writer](store, n)
    assert stale_notices(path) <= STALE - 1_000, f"{writer} never prunes old notices"


def test_notices_within_the_horizon_are_kept(store: SQLiteStore, path: str) -> None:
    for n in range(WRITES):
        notify_tx(store, n)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        (count,) = connection.execute("SELECT count(*) FROM __alkstore_notices").fetchone()
    assert count == WRITES, "a watcher may still have to read them"


def test_a_store_opened_for_one_write_may_prune_too(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prune count starts at a random point of its cadence, so stores that
    live for a call or two (a request, a command) prune as often between them
    as one long-lived store would: here the draw falls on the last point."""
    alkstore.open(path).close()
    add_stale_notices(path)
    monkeypatch.setattr(random, "randrange", lambda stop: stop - 1)
    with alkstore.open(path) as store:
        assert isinstance(store, SQLiteStore)
        notify_tx(store, 1)
    assert stale_notices(path) == STALE - 1_000
