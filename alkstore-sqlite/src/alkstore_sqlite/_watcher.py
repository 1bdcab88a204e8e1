"""The wake watcher: one thread per Store that sees every commit to the file.

It reads ``PRAGMA data_version`` on a connection of its own (which never
writes, so every commit by any other connection, in any process, changes it)
each time the database's folder changes (inotify, on Linux) and at least
every ``watch_interval_s`` (every poll, where inotify is missing).
After a change it reads what is new — notices, stream events, job rows — with
indexed range queries, and wakes the receivers of exactly those channels.
Local commits poke it so it need not wait for the next poll.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from alkstore import Closed, Database, Wake
from alkstore.engine import BufferedWakeReceiver
from alkstore_sqlite import _sql
from alkstore_sqlite._filewatch import FolderWaiter
from alkstore_sqlite._pool import connect
from alkstore_sqlite._settings import Settings

__all__ = ["QUEUE_KEY", "SCHEDULES_KEY", "STREAM_KEY", "Watcher"]

# Internal wake channels: under the reserved prefix, so no user channel collides.
QUEUE_KEY = "__alkstore_queue:"
STREAM_KEY = "__alkstore_stream:"
SCHEDULES_KEY = "__alkstore_schedules"

# With inotify a commit always wakes the watcher (SQLite writes the WAL with
# write(), never through a mapping); the poll only guards against the
# unforeseen, and each wake costs an idle store CPU.
_BACKUP_POLL_S = 0.5


class Watcher:
    """Fans commits out to wake receivers; started by the first subscriber."""

    def __init__(self, path: str, settings: Settings) -> None:
        self._path = path
        self._settings = settings
        self._receivers: dict[str, set[BufferedWakeReceiver]] = {}
        self._lock = threading.Lock()
        self._waiter: FolderWaiter | None = None
        self._ready = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def subscribe(self, key: str) -> BufferedWakeReceiver:
        """Return a receiver woken by every commit that touches ``key`` from now on.

        Raises:
            Database: the watcher died (the cause is chained).
            Closed: the store is closing.
        """
        self._start()
        with self._lock:
            self._check_alive()
            receiver = BufferedWakeReceiver(key, on_close=self._unsubscribe)
            self._receivers.setdefault(key, set()).add(receiver)
        return receiver

    def poke(self) -> None:
        """Look for commits now rather than at the next poll."""
        waiter = self._waiter
        if waiter is not None:
            waiter.poke()

    def stop(self) -> None:
        """Stop the thread and close every receiver."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self.poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._close_receivers()

    def _start(self) -> None:
        with self._lock:
            self._check_alive()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"alkstore-watcher {self._path}", daemon=True
                )
                self._thread.start()
        # The baseline must be read before listen() returns: "from now on".
        self._ready.wait()
        with self._lock:
            self._check_alive()

    def _check_alive(self) -> None:
        if self.error is not None:
            raise Database(f"the wake watcher of {self._path!r} died") from self.error
        if self._stopping:
            raise Closed("the store is closed")

    def _unsubscribe(self, receiver: BufferedWakeReceiver) -> None:
        with self._lock:
            receivers = self._receivers.get(receiver.channel)
            if receivers is not None:
                receivers.discard(receiver)
                if not receivers:
                    del self._receivers[receiver.channel]

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        waiter = FolderWaiter(os.path.dirname(self._path))
        self._waiter = waiter
        try:
            connection = connect(self._path, self._settings)
            self._watch(connection, waiter)
        except BaseException as exc:
            with self._lock:
                dying = not self._stopping
                if dying:
                    self.error = exc
            if dying:
                self._close_receivers()
        finally:
            self._ready.set()
            self._waiter = None
            waiter.close()
            if connection is not None:
                connection.close()

    def _watch(self, connection: sqlite3.Connection, waiter: FolderWaiter) -> None:
        seen = _Seen(*connection.execute(_sql.MAX_IDS).fetchone())
        version = _data_version(connection)
        self._ready.set()
        min_gap = self._settings.watch_interval_s
        kernel_wakes = waiter.notified_by_the_kernel
        # With inotify, commits wake the waiter and the poll only backs up a missed event.
        poll = max(min_gap, _BACKUP_POLL_S) if kernel_wakes else min_gap
        while not self._stopping:
            woken = waiter.wait(poll)
            current = _data_version(connection)
            if current != version:
                version = current
                keys = seen.changes(connection)
                if keys:
                    self._fan_out(keys)
            if woken and kernel_wakes:
                # Under a stream of commits, look at most once per watch_interval_s:
                # the next look covers every commit made meanwhile.
                time.sleep(min_gap)

    def _fan_out(self, keys: set[str]) -> None:
        with self._lock:
            targets = [(key, receiver) for key in keys for receiver in self._receivers.get(key, ())]
        for key, receiver in targets:
            receiver.deliver(Wake(key))

    def _close_receivers(self) -> None:
        with self._lock:
            receivers = [r for group in self._receivers.values() for r in group]
            self._receivers.clear()
        for receiver in receivers:
            receiver.shut()


class _Seen:
    """The newest notice, event and job ids the watcher has looked at."""

    def __init__(self, notice: int, event: int, job: int) -> None:
        self.notice, self.event, self.job = notice, event, job

    def changes(self, connection: sqlite3.Connection) -> set[str]:
        """Keys touched by rows newer than those seen; moves past them."""
        keys: set[str] = set()
        for notice_id, channel in connection.execute(_sql.NEW_NOTICES, (self.notice,)):
            self.notice = notice_id
            keys.add(channel)
        for event_id, stream in connection.execute(_sql.NEW_EVENTS, (self.event,)):
            self.event = max(self.event, event_id)
            keys.add(STREAM_KEY + stream)
        for job_id, queue in connection.execute(_sql.NEW_JOBS, (self.job,)):
            self.job = max(self.job, job_id)
            keys.add(QUEUE_KEY + queue)
        return keys


def _data_version(connection: sqlite3.Connection) -> int:
    version: int = connection.execute("PRAGMA data_version").fetchone()[0]
    return version
