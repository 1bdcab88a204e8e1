"""How the watcher sleeps: inotify where Linux has it, polling elsewhere.

A commit's write raises the file event before the commit can be read (its
sync and the wal-index update raise none), so these tests make the backup
poll 30 s long: a wake that waited for it would not come within their 5 s.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import alkstore
from alkstore import Wake, WakeReceiver
from alkstore_sqlite import SQLiteStore, _filewatch, _wakes
from alkstore_sqlite._filewatch import FolderWaiter

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def test_a_poke_ends_the_wait(tmp_path: Path) -> None:
    waiter = FolderWaiter(str(tmp_path))
    try:
        threading.Timer(0.05, waiter.poke).start()
        started = time.monotonic()
        waiter.wait(10)
        assert time.monotonic() - started < 5
    finally:
        waiter.close()


@linux_only
def test_on_linux_a_write_in_the_folder_ends_the_wait(tmp_path: Path) -> None:
    waiter = FolderWaiter(str(tmp_path))
    try:
        assert waiter.event_driven
        threading.Timer(0.05, (tmp_path / "app.db-wal").write_bytes, [b"frame"]).start()
        started = time.monotonic()
        waiter.wait(10)
        assert time.monotonic() - started < 5
    finally:
        waiter.close()


def test_without_inotify_wakes_still_cross_stores_by_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The portable path, as on macOS or Windows: no kernel notifications.
    monkeypatch.setattr(_filewatch, "_inotify_on", lambda folder: None)
    path = tmp_path / "app.db"
    store, peer = alkstore.open(path), alkstore.open(path)
    try:
        with store.listen("orders") as wakes:
            threading.Timer(0.05, peer.notify, ["orders", 1]).start()
            assert wakes.recv(5) == Wake("orders")
        queue = store.queue("q")
        threading.Timer(0.05, peer.queue("q").enqueue, [1]).start()
        assert queue.wait(5)
    finally:
        store.close()
        peer.close()


COMMITS = 10
"""Commits per test, each after a pause (settle()): a watcher still pausing after
its last look when a commit writes may look late enough by chance."""


def settle() -> None:
    """Let the watcher go back to waiting for the next file event."""
    time.sleep(0.02)


@pytest.fixture
def listening(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[WakeReceiver]:
    """The store listening to "orders", its watcher's backup poll made 30 s long."""
    monkeypatch.setattr(_wakes, "BACKUP_POLL_S", 30.0)
    with store.listen("orders") as wakes:
        yield wakes


@linux_only
@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_a_commit_through_an_adopted_connection_wakes_at_once_however_it_syncs(
    store: SQLiteStore, listening: WakeReceiver, synchronous: str
) -> None:
    # Python's sqlite3 connects with synchronous=FULL: the WAL is synced after
    # the write that raised the file event, before the commit can be read.
    connection = sqlite3.connect(store.path)
    try:
        connection.execute(f"PRAGMA synchronous = {synchronous}")
        for number in range(COMMITS):
            settle()
            store.adopt_tx(connection).notify_tx("orders", number)
            connection.commit()
            assert listening.recv(5) == Wake("orders")
    finally:
        connection.close()


@linux_only
def test_a_commit_by_a_store_with_full_durability_wakes_another_store_at_once(
    store: SQLiteStore, listening: WakeReceiver
) -> None:
    durable = alkstore.open(store.path, durability="full")
    try:
        for number in range(COMMITS):
            settle()
            durable.notify("orders", number)
            assert listening.recv(5) == Wake("orders")
    finally:
        durable.close()


COMMITTER = """
import sqlite3, sys, alkstore
store = alkstore.open(sys.argv[1])
connection = sqlite3.connect(sys.argv[1])
for line in sys.stdin:
    store.adopt_tx(connection).notify_tx("orders", line.strip())
    connection.commit()
    print("committed", flush=True)
"""


@linux_only
def test_a_commit_by_another_process_through_its_own_connection_wakes_at_once(
    store: SQLiteStore, listening: WakeReceiver
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(COMMITTER), store.path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        for number in range(COMMITS):
            settle()
            child.stdin.write(f"{number}\n")
            child.stdin.flush()
            assert child.stdout.readline() == "committed\n"
            assert listening.recv(5) == Wake("orders")
        child.stdin.close()


@linux_only
def test_changes_to_other_files_in_the_folder_do_not_end_the_wait(tmp_path: Path) -> None:
    waiter = FolderWaiter(str(tmp_path), name_prefix="app.db")
    try:
        (tmp_path / "server.log").write_bytes(b"a line")
        (tmp_path / "other.db-wal").write_bytes(b"frame")
        assert not waiter.wait(0.2)
        (tmp_path / "app.db-wal").write_bytes(b"frame")
        assert waiter.wait(10)
    finally:
        waiter.close()


@linux_only
def test_a_store_opened_through_a_symbolic_link_wakes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite writes the WAL next to the file the link leads to, not next to the link.
    monkeypatch.setattr(_wakes, "BACKUP_POLL_S", 30.0)
    (tmp_path / "data").mkdir()
    (tmp_path / "links").mkdir()
    real, link = tmp_path / "data" / "app.db", tmp_path / "links" / "app.db"
    alkstore.open(real).close()
    link.symlink_to(real)
    store, peer = alkstore.open(link), alkstore.open(real)
    try:
        with store.listen("orders") as wakes:
            for number in range(COMMITS):
                settle()
                peer.notify("orders", number)
                assert wakes.recv(5) == Wake("orders")
    finally:
        store.close()
        peer.close()
