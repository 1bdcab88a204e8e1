"""The wake watcher under faults: the file swapped or deleted, locked, or its tables broken.

A death closes every receiver and is logged at error level with its cause; a
lock is an outage that is waited out, logged once, and leaves no wake behind.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import alkstore
from alkstore import Wake
from alkstore_sqlite import SQLiteStore, _filewatch

LOGGER = "alkstore.sqlite"


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == level]


@pytest.fixture(params=["inotify", "polling"])
def watched(
    request: pytest.FixtureRequest, path: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SQLiteStore]:
    """A store whose watcher wakes by inotify, or (as on macOS) only by its poll."""
    if request.param == "polling":
        monkeypatch.setattr(_filewatch, "_inotify_on", lambda folder: None)
    opened = alkstore.open(path, watch_interval_s=0.01)
    assert isinstance(opened, SQLiteStore)
    yield opened
    opened.close()


def test_a_file_swapped_or_deleted_under_the_store_kills_the_watcher_loudly(
    watched: SQLiteStore,
    caplog: pytest.LogCaptureFixture,
    file_swap: tuple[Callable[[str], None], str],
) -> None:
    swap, says = file_swap
    wakes = watched.listen("orders")
    events = watched.stream("orders").subscribe("projection")
    swap(watched.path)
    assert wakes.recv(5) is None
    assert wakes.closed
    assert events.recv(1) is None
    assert events.closed
    assert isinstance(watched.watcher_error, alkstore.Database)
    assert says in str(watched.watcher_error)
    [logged] = records(caplog, logging.ERROR)
    assert watched.path in logged.getMessage()
    assert says in logged.getMessage()
    with pytest.raises(alkstore.Database, match=f"watcher .* died: .*{says}"):
        watched.listen("orders")


def test_a_watcher_broken_by_altered_tables_logs_the_cause_with_its_stack(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    wakes = store.listen("orders")
    connection = sqlite3.connect(store.path)
    with connection:
        connection.execute("ALTER TABLE __alkstore_events RENAME TO broken")
    connection.close()
    assert wakes.recv(5) is None
    [logged] = records(caplog, logging.ERROR)
    assert "no such table: __alkstore_events" in logged.getMessage()
    assert logged.exc_info is not None


def test_closing_the_store_is_not_a_death_and_logs_nothing(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.listen("orders")
    store.close()
    assert store.watcher_error is None
    assert records(caplog, logging.ERROR) == []


class ExclusiveHolder:
    """Another connection in exclusive locking mode: while it lives, no one else can read.

    This is what really blocks a WAL reader that does not hold the file open
    yet (another process's WAL recovery after a crash, or its last connection
    cleaning up, hold the same lock for a moment).
    """

    def __init__(self, path: str) -> None:
        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.connection.execute("PRAGMA locking_mode = EXCLUSIVE")
        self.connection.execute("BEGIN EXCLUSIVE")
        self.connection.execute("COMMIT")  # the lock stays until the connection closes

    def release(self) -> None:
        self.connection.close()


def test_a_locked_file_is_an_outage_the_watcher_waits_out_logging_it_once(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    store = alkstore.open(path, busy_timeout_s=1.0)
    assert isinstance(store, SQLiteStore)
    holder = ExclusiveHolder(path)
    try:
        # The watcher cannot read its starting point: this listen gives up
        # after the busy timeout, the watcher does not.
        with pytest.raises(alkstore.Database, match=r"stayed unreadable .*locked"):
            store.listen("orders")
        # Released while the next listen waits: it succeeds.
        threading.Timer(0.1, holder.release).start()
        with store.listen("orders") as wakes:
            assert store.watcher_error is None
            with alkstore.open(path) as peer:
                peer.notify("orders", 1)
                assert wakes.recv(5) == Wake("orders")
    finally:
        holder.release()
        store.close()
    [warning] = records(caplog, logging.WARNING)
    assert "cannot read the file (database is locked)" in warning.getMessage()
    [info] = records(caplog, logging.INFO)
    assert "reads the file again" in info.getMessage()
    assert records(caplog, logging.ERROR) == []


def test_closing_the_store_during_an_outage_ends_the_watcher(path: str) -> None:
    store = alkstore.open(path, busy_timeout_s=0.2)
    holder = ExclusiveHolder(path)
    try:
        with pytest.raises(alkstore.Database, match="stayed unreadable"):
            store.listen("orders")
        store.close()
        assert f"alkstore-watcher {path}" not in {t.name for t in threading.enumerate()}
    finally:
        holder.release()


def test_a_scheduler_started_while_the_file_is_locked_waits_it_out(path: str) -> None:
    # Its first look for schedule changes cannot start the watcher: that is
    # part of the outage, never the end of the runner.
    with alkstore.open(path) as peer:
        peer.schedule("tick", "@every 1s", "ticks", None)
    # Opened with no connection in its pool yet: the holder can then lock everyone out.
    store = alkstore.open(path, busy_timeout_s=0.2, scheduler_lease_s=0.6)
    assert isinstance(store, SQLiteStore)
    stop = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            store.run_schedules(stop)
        except BaseException as exc:
            raised.append(exc)

    holder = ExclusiveHolder(path)
    runner = threading.Thread(target=run, daemon=True)
    try:
        runner.start()
        time.sleep(1.0)
        holder.release()
        deadline = time.monotonic() + 10
        while not store.inspect().jobs("ticks") and not raised:
            assert time.monotonic() < deadline, "the schedule never fired"
            time.sleep(0.05)
    finally:
        holder.release()
        stop.set()
        runner.join(10)
        store.close()
    assert raised == []
    assert store.watcher_error is None
