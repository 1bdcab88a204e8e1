"""Queue writes on SQLite: the engine's write transactions and its dead letters' texts.

What every engine must do with jobs is the conformance suite's
(``pytest --alkstore-engine=sqlite``); here, what only the SQLite engine can get wrong.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

from alkstore import EnqueueOpts, JobInfo, QueueOpts
from alkstore.engine import EXPIRED, LAPSED_ON_LAST_ATTEMPT
from alkstore_sqlite import SQLiteStore


def dead_letter(store: SQLiteStore, queue: str, job_id: int) -> JobInfo:
    info = store.queue(queue).get_job(job_id)
    assert info is not None
    assert info.state == "dead"
    return info


def tables(connection: sqlite3.Connection) -> set[str]:
    """The file's tables besides the engine's own."""
    rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    return {row[0] for row in rows if not row[0].startswith(("__alkstore", "sqlite_"))}


def test_a_claim_lapsed_on_its_last_attempt_dies_with_cores_text_at_the_next_claim(
    store: SQLiteStore,
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.05, max_attempts=1))
    job_id = queue.enqueue("work")
    assert queue.claim_one("w") is not None
    time.sleep(0.1)
    assert queue.claim_one("w") is None
    assert dead_letter(store, "q", job_id).last_error == LAPSED_ON_LAST_ATTEMPT


def test_a_claim_lapsed_on_its_last_attempt_dies_with_cores_text_at_a_sweep(
    store: SQLiteStore,
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.05, max_attempts=1))
    job_id = queue.enqueue("work")
    assert queue.claim_one("w") is not None
    time.sleep(0.1)
    queue.sweep_expired()
    assert dead_letter(store, "q", job_id).last_error == LAPSED_ON_LAST_ATTEMPT


def test_an_expired_job_dies_with_cores_text(store: SQLiteStore) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue("work", EnqueueOpts(expires=0.05))
    time.sleep(0.1)
    assert queue.sweep_expired() == 1
    assert dead_letter(store, "q", job_id).last_error == EXPIRED


def test_an_engine_transaction_that_raises_writes_nothing_and_holds_no_lock(
    store: SQLiteStore, peer: SQLiteStore
) -> None:
    with pytest.raises(RuntimeError), store.in_transaction() as connection:
        connection.execute("CREATE TABLE scratch (x)")
        raise RuntimeError("the block failed")
    with store.connection() as connection:
        assert not connection.in_transaction
        assert tables(connection) == set()
    job_id = peer.queue("q").enqueue("after")  # the write lock was let go
    assert store.queue("q").get_job(job_id) is not None


def test_an_engine_transaction_that_fails_in_sqlite_is_a_rollback_too(store: SQLiteStore) -> None:
    with pytest.raises(sqlite3.IntegrityError), store.in_transaction() as connection:
        connection.execute("CREATE TABLE scratch (x UNIQUE)")
        connection.execute("INSERT INTO scratch VALUES (1), (1)")
    with store.in_transaction() as connection:
        assert tables(connection) == set()
