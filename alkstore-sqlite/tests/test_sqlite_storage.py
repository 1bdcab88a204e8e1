"""The file: schema and migrations, pragmas, options, and files that cannot be used."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import alkstore
from alkstore import Wake
from alkstore_sqlite import SQLiteStore
from alkstore_sqlite._schema import SCHEMA_VERSION

TABLES = {
    "__alkstore_meta", "__alkstore_jobs", "__alkstore_dead", "__alkstore_events",
    "__alkstore_offsets", "__alkstore_notices", "__alkstore_locks", "__alkstore_schedules",
    "__alkstore_stream_trims", "__alkstore_job_ids",
}  # fmt: skip


@contextmanager
def raw(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A plain driver connection, as another program would use: commit, then close."""
    connection = sqlite3.connect(path)
    try:
        with connection:
            yield connection
    finally:
        connection.close()


def table_names(path: str) -> set[str]:
    with raw(path) as connection:
        rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row[0] for row in rows} - {"sqlite_sequence"}


def test_opening_an_empty_file_creates_the_engine_tables(path: str) -> None:
    alkstore.open(path).close()
    assert table_names(path) == TABLES
    with raw(path) as connection:
        version = connection.execute(
            "SELECT value FROM __alkstore_meta WHERE key = 'schema_version'"
        ).fetchone()
        assert version == (str(SCHEMA_VERSION),)
        assert connection.execute("PRAGMA user_version").fetchone() == (0,)


def test_an_existing_application_database_keeps_its_tables_and_data(path: str) -> None:
    with raw(path) as connection:
        connection.execute("CREATE TABLE orders (id INTEGER)")
        connection.execute("INSERT INTO orders VALUES (1)")
        connection.execute("PRAGMA user_version = 42")
    store = alkstore.open(path)
    job_id = store.queue("q").enqueue("kept")
    store.close()
    reopened = alkstore.open(path)
    try:
        info = reopened.queue("q").get_job(job_id)
        assert info is not None
        assert info.payload == "kept"
    finally:
        reopened.close()
    assert table_names(path) == TABLES | {"orders"}
    with raw(path) as connection:
        assert connection.execute("SELECT id FROM orders").fetchall() == [(1,)]
        assert connection.execute("PRAGMA user_version").fetchone() == (42,)


def test_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    start_at = time.time() + 0.5
    code = (
        "import sys, time, alkstore; time.sleep(max(0, float(sys.argv[2]) - time.time())); "
        "s = alkstore.open(sys.argv[1]); s.queue('q').enqueue(1); s.close()"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", code, str(path), str(start_at)]) for _ in range(6)
    ]
    assert [child.wait(60) for child in children] == [0] * 6
    store = alkstore.open(path)
    try:
        assert len(store.queue("q").claim_batch("w", 10)) == 6
    finally:
        store.close()


def test_opening_waits_for_a_writer_holding_a_new_file_before_it_is_wal(tmp_path: Path) -> None:
    # SQLite refuses the switch to WAL at once while another connection
    # writes, without waiting in its busy handler; opening must wait anyway.
    path = tmp_path / "app.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE app (v)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO app VALUES (1)")
    threading.Timer(0.3, writer.execute, ("COMMIT",)).start()
    try:
        with alkstore.open(path) as store:
            assert store.queue("q").enqueue(1) > 0
    finally:
        time.sleep(0.4)
        writer.close()


def test_wal_and_synchronous_normal_by_default(store: SQLiteStore) -> None:
    with store.transaction() as tx:
        assert tx.execute("PRAGMA journal_mode") == [("wal",)]
        assert tx.execute("PRAGMA synchronous") == [(1,)]


def test_durability_full_is_an_option_and_a_url_parameter(path: str) -> None:
    for store in (alkstore.open(path, durability="full"),
                  alkstore.open(f"sqlite:///{path}?durability=full")):  # fmt: skip
        try:
            with store.transaction() as tx:
                assert tx.execute("PRAGMA synchronous") == [(2,)]
        finally:
            store.close()


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"durability": "sometimes"}, ValueError, "durability"),
        ({"busy_timeout_s": -1}, ValueError, "busy_timeout_s"),
        ({"watch_interval_s": 0}, ValueError, "watch_interval_s"),
        ({"scheduler_lease_s": "soon"}, ValueError, "scheduler_lease_s"),
        ({"journal": "delete"}, TypeError, "no option 'journal'"),
    ],
)
def test_bad_options_are_refused_by_name(
    path: str, options: dict[str, object], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        alkstore.open(path, **options)
    assert not os.path.exists(path)


@pytest.mark.parametrize("target", [":memory:", "sqlite:///:memory:", "file::memory:?cache=shared"])
def test_an_in_memory_database_is_refused_with_the_reason(target: str) -> None:
    with pytest.raises(ValueError, match="in-memory database cannot back"):
        alkstore.open(target)


def test_a_file_that_is_not_a_database_is_a_database_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are not the pages you are looking for\n" * 100)
    with pytest.raises(alkstore.Database, match="not a database") as raised:
        alkstore.open(path)
    assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)


def test_a_missing_folder_is_a_database_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(alkstore.Database, match=r"nowhere.* does not exist; create it first"):
        alkstore.open(tmp_path / "nowhere" / "app.db")


def test_a_folder_is_refused_as_a_folder_and_left_alone(tmp_path: Path) -> None:
    with pytest.raises(alkstore.Database, match="it is a folder, not a file") as raised:
        alkstore.open(tmp_path)
    assert str(tmp_path / "app.db") in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_a_file_name_too_long_for_its_journal_is_refused_saying_so(tmp_path: Path) -> None:
    """SQLite names its journal after the database: a name that fits the file
    system by itself may not fit with "-journal" added, and SQLite would say
    only "unable to open database file"."""
    longest = os.pathconf(tmp_path, "PC_NAME_MAX") - len("-journal")
    fits = tmp_path / ("n" * (longest - 3) + ".db")
    with alkstore.open(fits) as store:
        store.queue("q").enqueue("kept")
    too_long = tmp_path / ("n" * (longest - 2) + ".db")
    with pytest.raises(alkstore.Database, match=f"{longest} bytes at most") as raised:
        alkstore.open(too_long)
    assert "'-journal'" in str(raised.value)
    assert not too_long.exists()


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` unwritable, even for root (who ignores file modes)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        yield
        path.chmod(0o644)
        return
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_file_is_a_database_error(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with raw(path) as connection:
        connection.execute("CREATE TABLE orders (id INTEGER)")
    with read_only(path), pytest.raises(alkstore.Database, match=r"readonly|read-only") as raised:
        alkstore.open(path)
    assert isinstance(raised.value.__cause__, sqlite3.Error)


def test_a_write_locked_past_the_busy_timeout_is_a_database_error(path: str) -> None:
    store = alkstore.open(path, busy_timeout_s=0.1)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(alkstore.Database, match="locked") as raised:
            store.queue("q").enqueue(1)
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        holder.execute("ROLLBACK")
        assert store.queue("q").enqueue(1) > 0
    finally:
        holder.close()
        store.close()


def test_a_write_waiting_on_its_own_threads_transaction_says_so(path: str) -> None:
    """One writer per file: a write from the thread that holds a transaction
    open, made outside it, waits for that transaction in vain. The error says
    why; from another thread it is an ordinary lock wait."""
    store = alkstore.open(path, busy_timeout_s=0.1)
    try:
        with store.transaction() as tx:
            tx.enqueue_tx("q", None, "inside")
            with pytest.raises(alkstore.Database, match="this thread holds an open alkstore"):
                store.queue("q").enqueue("outside")
            failed: list[BaseException] = []
            other = threading.Thread(target=_enqueue_catching, args=(store, failed))
            other.start()
            other.join(10)
            assert len(failed) == 1
            assert "another connection held the write lock" in str(failed[0])
        assert store.queue("q").enqueue("after") > 0  # counted out: an ordinary store again
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(alkstore.Database, match="another connection held"):
                store.queue("q").enqueue("held elsewhere")
        finally:
            holder.close()
    finally:
        store.close()


def _enqueue_catching(store: alkstore.Store, failed: list[BaseException]) -> None:
    try:
        store.queue("q").enqueue("from another thread")
    except alkstore.Database as exc:
        failed.append(exc)


def test_a_file_from_a_newer_schema_is_refused(path: str) -> None:
    alkstore.open(path).close()
    with raw(path) as connection:
        connection.execute("UPDATE __alkstore_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(alkstore.Database, match="upgrade alkstore-sqlite"):
        alkstore.open(path)


def test_the_watcher_dying_closes_every_receiver_and_is_reported(store: SQLiteStore) -> None:
    wakes = store.listen("orders")
    events = store.stream("orders").subscribe("projection")
    # Break what the watcher reads, from outside, as a careless migration would.
    with raw(store.path) as saboteur:
        saboteur.execute("ALTER TABLE __alkstore_notices RENAME TO broken")
    assert wakes.recv(5) is None
    assert wakes.closed
    assert events.recv(1) is None
    assert events.closed
    assert isinstance(store.watcher_error, sqlite3.OperationalError)
    with pytest.raises(alkstore.Database, match=r"watcher .* died") as raised:
        store.listen("orders")
    assert raised.value.__cause__ is store.watcher_error


def test_a_blocked_recv_on_a_dying_watcher_returns(store: SQLiteStore) -> None:
    wakes = store.listen("orders")
    results: list[Wake | None] = []
    waiter = threading.Thread(target=lambda: results.append(wakes.recv(10)))
    waiter.start()
    with raw(store.path) as saboteur:
        saboteur.execute("DROP TABLE __alkstore_events")
    waiter.join(5)
    assert not waiter.is_alive()
    assert results == [None]


def test_repr_names_the_file(store: SQLiteStore) -> None:
    assert repr(store) == f"<SQLiteStore {store.path!r} open>"
    assert repr(store.queue("q")).startswith("<SQLiteQueue 'q' QueueOpts(")
