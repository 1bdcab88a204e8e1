"""How the watcher sleeps: inotify where Linux has it, polling elsewhere."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

import alkstore
from alkstore import Wake
from alkstore_sqlite import _filewatch
from alkstore_sqlite._filewatch import FolderWaiter


def test_a_poke_ends_the_wait(tmp_path: Path) -> None:
    waiter = FolderWaiter(str(tmp_path))
    try:
        threading.Timer(0.05, waiter.poke).start()
        started = time.monotonic()
        waiter.wait(10)
        assert time.monotonic() - started < 5
    finally:
        waiter.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
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
