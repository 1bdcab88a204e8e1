"""The wake watcher: one thread per Store that sees every commit to the file.

It reads ``PRAGMA data_version`` on a connection of its own (which never
writes, so every commit by any other connection, in any process, changes it)
each time the database's folder changes (inotify, on Linux) and at least
every ``watch_interval_s`` (every poll, where inotify is missing).
After a change it reads what is new — notices, stream events, job rows — with
indexed range queries, and wakes the receivers of exactly those channels.
Local commits poke it so it need not wait for the next poll.

A file that is locked when the watcher reads it (``database is locked``: a
process in exclusive locking mode, another process's WAL recovery or its
last-connection cleanup) is an outage, not a death: the watcher logs one
warning, retries with a growing pause, logs an info when it reads again and
then delivers every wake the outage held back. Anything else kills it —
the file deleted or replaced (a restore from backup swaps the file under the
open store, and the watcher would keep reading the old one), unreadable,
its tables altered: it logs the cause at error level, closes every receiver,
and later ``listen``/``subscribe`` calls raise ``Database`` naming the cause.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from alkstore import Closed, Database
from alkstore.engine import BufferedWakeReceiver, WakeFanout, queue_wake_key, stream_wake_key
from alkstore_sqlite import _sql
from alkstore_sqlite._filewatch import FolderWaiter
from alkstore_sqlite._pool import connect
from alkstore_sqlite._settings import Settings

__all__ = ["Watcher"]

log = logging.getLogger("alkstore.sqlite")

# With inotify a commit always wakes the watcher (SQLite writes the WAL with
# write(), never through a mapping); the poll only guards against the
# unforeseen, and each wake costs an idle store CPU.
_BACKUP_POLL_S = 0.5

# The watcher's own connection gives up on a lock after this long, whatever the
# store's busy timeout: SQLite's busy wait cannot be interrupted, and close()
# must not sit in it. The watcher waits out a longer lock itself, between reads.
_READ_BUSY_S = 0.1
_FIRST_PAUSE_S = 0.05
_MAX_PAUSE_S = 1.0
_READY_SLICE_S = 0.05
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # primary result codes

_T = TypeVar("_T")


class WatchedFileChanged(Database):
    """The database file was deleted or replaced under the open store."""


class Watcher:
    """Fans commits out to wake receivers; started by the first subscriber."""

    def __init__(self, path: str, settings: Settings) -> None:
        self._path = path
        self._settings = settings
        self._fanout = WakeFanout(coalesce=True)
        self._lock = threading.Lock()
        self._waiter: FolderWaiter | None = None
        self._ready = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._outage = _Outage(path)

    def subscribe(self, key: str) -> BufferedWakeReceiver:
        """Return a receiver woken by every commit that touches ``key`` from now on.

        Raises:
            Database: the watcher died (the cause is named and chained), or
                it could not read the file for the store's busy timeout while
                starting (it keeps trying: a later call may succeed).
            Closed: the store is closing.
        """
        self._start()
        return self._fanout.subscribe(key)

    @property
    def error(self) -> BaseException | None:
        """Why the watcher died, or None while it lives (or never started)."""
        failure = self._fanout.error
        return None if failure is None else failure.__cause__

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
        self._fanout.close()

    def _start(self) -> None:
        with self._lock:
            if self._stopping:
                raise Closed("the store is closed")
            self._fanout.check_usable()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"alkstore-watcher {self._path}", daemon=True
                )
                self._thread.start()
        self._wait_ready()
        self._fanout.check_usable()

    def _wait_ready(self) -> None:
        """Wait for the baseline, which must be read before listen() returns ("from now on").

        A slow start is waited out; a file locked for the busy timeout is not.
        """
        deadline = time.monotonic() + self._settings.busy_timeout_s
        while not self._ready.wait(_READY_SLICE_S):
            failure = self._outage.error
            if failure is None:
                continue
            self.poke()  # someone is waiting: retry now, not after the outage's long pause
            if time.monotonic() >= deadline:
                raise Database(
                    f"listening to {self._path!r} failed: the file stayed unreadable "
                    f"({failure}) for {self._settings.busy_timeout_s:g} s; the watcher "
                    "keeps trying, so a later listen may succeed"
                ) from failure

    def _run(self) -> None:
        waiter = FolderWaiter(os.path.dirname(self._path))
        self._waiter = waiter
        try:
            # Identity first: a swap after this moment is seen at the first look,
            # whichever file the connection then opens.
            identity = _identity(self._path)
            started = self._read_through_outages(waiter, self._open_reader)
            if started is not None:
                connection, seen = started
                try:
                    self._watch(connection, seen, waiter, identity)
                finally:
                    connection.close()
        except BaseException as exc:
            self._die(exc)
        finally:
            self._ready.set()
            self._waiter = None
            waiter.close()

    def _open_reader(self) -> tuple[sqlite3.Connection, _Seen]:
        """The watcher's own connection, and the starting point it has read.

        Raises:
            Database: the file could not be opened (the driver's error chained).
            sqlite3.Error: the starting point could not be read.
        """
        reader_settings = dataclasses.replace(
            self._settings, busy_timeout_s=min(self._settings.busy_timeout_s, _READ_BUSY_S)
        )
        connection = connect(self._path, reader_settings)
        try:
            return connection, _Seen.baseline(connection)
        except BaseException:
            connection.close()
            raise

    def _watch(
        self,
        connection: sqlite3.Connection,
        seen: _Seen,
        waiter: FolderWaiter,
        identity: tuple[int, int],
    ) -> None:
        self._ready.set()
        min_gap = self._settings.watch_interval_s
        kernel_wakes = waiter.notified_by_the_kernel
        # With inotify, commits wake the waiter and the poll only backs up a missed event.
        poll = max(min_gap, _BACKUP_POLL_S) if kernel_wakes else min_gap
        while not self._stopping:
            woken = waiter.wait(poll)
            keys = self._read_through_outages(
                waiter, lambda: self._look(connection, seen, identity)
            )
            if keys:
                self._fanout.deliver(keys)
            if woken and kernel_wakes:
                # Under a stream of commits, look at most once per watch_interval_s:
                # the next look covers every commit made meanwhile.
                time.sleep(min_gap)

    def _look(
        self, connection: sqlite3.Connection, seen: _Seen, identity: tuple[int, int]
    ) -> set[str]:
        """Keys touched by commits since the last look.

        Raises:
            WatchedFileChanged: the path no longer leads to the file being watched.
            sqlite3.Error: a read failed.
        """
        _check_identity(self._path, identity)
        return seen.changes(connection)

    def _read_through_outages(self, waiter: FolderWaiter, read: Callable[[], _T]) -> _T | None:
        """``read()``, retried with a growing pause while the file is locked; None once stopping.

        Raises:
            Exception: whatever else ``read`` raised.
        """
        while not self._stopping:
            try:
                result = read()
            except (sqlite3.OperationalError, Database) as exc:
                lock = _lock_error(exc)
                if lock is None:
                    raise
                waiter.wait(self._outage.failed(lock))
                continue
            self._outage.ended()
            return result
        return None

    def _die(self, exc: BaseException) -> None:
        with self._lock:
            if self._stopping:
                return
        log.error(
            "the wake watcher of %r died, so every listener of this store is closed: %s",
            self._path,
            exc,
            # The story of a swapped file is in its message; anything else may need the stack.
            exc_info=None if isinstance(exc, WatchedFileChanged) else exc,
        )
        self._fanout.fail(exc, f"the wake watcher of {self._path!r} died: {exc}")


class _Seen:
    """The data version and the newest notice, event and job ids the watcher has looked at."""

    def __init__(self, version: int, notice: int, event: int, job: int) -> None:
        self.version = version
        self.notice, self.event, self.job = notice, event, job

    @classmethod
    def baseline(cls, connection: sqlite3.Connection) -> _Seen:
        notice, event, job = connection.execute(_sql.MAX_IDS).fetchone()
        return cls(_data_version(connection), notice, event, job)

    def changes(self, connection: sqlite3.Connection) -> set[str]:
        """Keys touched by rows newer than those seen; moves past them once all are read.

        Raises:
            sqlite3.Error: a read failed; nothing was moved past, so the
                next look reads the same rows again.
        """
        version = _data_version(connection)
        if version == self.version:
            return set()
        keys: set[str] = set()
        notice, event, job = self.notice, self.event, self.job
        for notice_id, channel in connection.execute(_sql.NEW_NOTICES, (notice,)):
            notice = notice_id
            keys.add(channel)
        for event_id, stream in connection.execute(_sql.NEW_EVENTS, (event,)):
            event = max(event, event_id)
            keys.add(stream_wake_key(stream))
        for job_id, queue in connection.execute(_sql.NEW_JOBS, (job,)):
            job = max(job, job_id)
            keys.add(queue_wake_key(queue))
        self.version, self.notice, self.event, self.job = version, notice, event, job
        return keys


class _Outage:
    """One warning when the file turns out locked, one info when it reads again."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._failures = 0
        self._since = 0.0
        self.error: sqlite3.OperationalError | None = None

    def failed(self, exc: sqlite3.OperationalError) -> float:
        """Record a failed read; return how long to pause before the next one."""
        if self.error is None:
            self._since = time.monotonic()
            log.warning(
                "the wake watcher of %r cannot read the file (%s); it retries, backing "
                "off, and wakes wait until it can",
                self._path,
                exc,
            )
        self.error = exc
        self._failures += 1
        return min(_FIRST_PAUSE_S * 2.0 ** min(self._failures - 1, 16), _MAX_PAUSE_S)

    def ended(self) -> None:
        """Record a successful read, logging the end of an outage."""
        if self.error is None:
            return
        log.info(
            "the wake watcher of %r reads the file again, after %.1f s",
            self._path,
            time.monotonic() - self._since,
        )
        self.error = None
        self._failures = 0


def _lock_error(exc: BaseException) -> sqlite3.OperationalError | None:
    """The SQLITE_BUSY or SQLITE_LOCKED error in ``exc`` or its cause: someone holds
    a lock, the file itself is fine. None for any other error."""
    for error in (exc, exc.__cause__):
        if isinstance(error, sqlite3.OperationalError) and _is_lock(error):
            return error
    return None


def _is_lock(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    message = str(error)
    return "locked" in message or "busy" in message


def _identity(path: str) -> tuple[int, int]:
    """The ``(device, inode)`` of the file at ``path``.

    Raises:
        WatchedFileChanged: there is no file at ``path`` any more.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise WatchedFileChanged(
            f"{path!r} is gone (deleted or moved away) while the store had it open; "
            "reopen the store"
        ) from None
    return status.st_dev, status.st_ino


def _check_identity(path: str, identity: tuple[int, int]) -> None:
    if _identity(path) != identity:
        raise WatchedFileChanged(
            f"{path!r} was replaced by another file while the store had it open (as a "
            "restore from backup does); the store still reads the old one: reopen the store"
        )


def _data_version(connection: sqlite3.Connection) -> int:
    version: int = connection.execute("PRAGMA data_version").fetchone()[0]
    return version
