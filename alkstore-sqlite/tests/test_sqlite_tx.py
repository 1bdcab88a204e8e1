"""The transaction seam's SQLite side: driver connections, adoption, abandonment.

Commit-atomicity and the no-ghosts rollback of every side effect are the
conformance suite's (``pytest --alkstore-engine=sqlite``).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

import alkstore
from alkstore_sqlite import SQLiteStore


@pytest.fixture
def orders(store: SQLiteStore) -> SQLiteStore:
    with store.transaction() as tx:
        tx.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    return store


def test_execute_returns_rows_and_connection_is_the_driver_connection(orders: SQLiteStore) -> None:
    with orders.transaction() as tx:
        assert tx.execute("INSERT INTO orders (id) VALUES (?) RETURNING id", (3,)) == [(3,)]
        assert isinstance(tx.connection, sqlite3.Connection)
        assert tx.connection.in_transaction


def test_a_bad_statement_is_a_database_error_and_the_transaction_goes_on(
    orders: SQLiteStore,
) -> None:
    with orders.transaction() as tx:
        with pytest.raises(alkstore.Database, match="no such table") as raised:
            tx.execute("INSERT INTO nowhere VALUES (1)")
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        tx.execute("INSERT INTO orders (id) VALUES (1)")
    with orders.transaction() as tx:
        assert tx.execute("SELECT id FROM orders") == [(1,)]


def test_a_transaction_sqlite_rolled_back_on_a_full_disk_is_refused_at_commit(
    orders: SQLiteStore,
) -> None:
    # A full disk may end the whole transaction, not just the statement (as
    # here: a big row); what follows would autocommit, so the handle refuses.
    with orders.transaction() as tx:
        tx.execute("CREATE TABLE scans (image BLOB)")
    tx = orders.begin_tx()
    job_id = tx.enqueue_tx("emails", None, "written before the disk filled")
    (pages,) = tx.execute("PRAGMA page_count")[0]
    tx.execute(f"PRAGMA max_page_count = {pages + 2}")  # this connection's limit only
    with pytest.raises(alkstore.Database, match="full"):
        tx.execute("INSERT INTO scans VALUES (zeroblob(1000000))")
    with pytest.raises(alkstore.Database, match="rolling it back after an error"):
        tx.commit()
    with alkstore.open(orders.path) as peer:
        assert peer.queue("emails").get_job(job_id) is None


def test_adopt_tx_writes_through_the_callers_connection(
    orders: SQLiteStore, peer: SQLiteStore
) -> None:
    connection = sqlite3.connect(orders.path)
    try:
        connection.execute("INSERT INTO orders (id) VALUES (9)")  # opens the caller's transaction
        tx = orders.adopt_tx(connection)
        job_id = tx.enqueue_tx("emails", None, {"order": 9})
        assert peer.queue("emails").get_job(job_id) is None
        connection.rollback()
        assert peer.queue("emails").claim_one("w") is None
        connection.execute("INSERT INTO orders (id) VALUES (10)")
        orders.adopt_tx(connection).enqueue_tx("emails", None, {"order": 10})
        connection.commit()
    finally:
        connection.close()
    job = peer.queue("emails").claim_one("w")
    assert job is not None
    assert job.payload == {"order": 10}


def test_adopt_tx_on_an_autocommit_connection_still_commits_together(
    orders: SQLiteStore, peer: SQLiteStore
) -> None:
    connection = sqlite3.connect(orders.path, isolation_level=None)
    try:
        tx = orders.adopt_tx(connection)
        tx.execute("INSERT INTO orders (id) VALUES (11)")
        job_id = tx.enqueue_tx("emails", None, 11)
        assert peer.queue("emails").get_job(job_id) is None
        tx.rollback()
    finally:
        connection.close()
    assert peer.queue("emails").claim_one("w") is None


def test_adopt_tx_refuses_a_connection_to_another_file(orders: SQLiteStore, tmp_path: Path) -> None:
    other = sqlite3.connect(tmp_path / "other.db")
    memory = sqlite3.connect(":memory:")
    try:
        with pytest.raises(ValueError, match="not to this store's file"):
            orders.adopt_tx(other)
        with pytest.raises(ValueError, match="in-memory"):
            orders.adopt_tx(memory)
        with pytest.raises(TypeError, match=r"sqlite3\.Connection"):
            orders.adopt_tx("app.db")
    finally:
        other.close()
        memory.close()


def test_a_forgotten_transaction_releases_the_write_lock(orders: SQLiteStore) -> None:
    tx = orders.begin_tx()
    tx.enqueue_tx("emails", None, 1)
    del tx
    import gc

    gc.collect()
    done = threading.Event()

    def enqueue() -> None:
        orders.queue("emails").enqueue(2)
        done.set()

    threading.Thread(target=enqueue).start()
    assert done.wait(3)
    job = orders.queue("emails").claim_one("w")
    assert job is not None
    assert job.payload == 2
