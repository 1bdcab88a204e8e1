"""The wake watcher: core's polling watcher, reading one SQLite file.

It reads ``PRAGMA data_version`` on a connection of its own (which never
writes, so every commit by any other connection, in any process, changes it)
each time one of the database's files changes (inotify, on Linux), again a
few times over the next 0.1 s (the event comes with a commit's write to the
WAL, before its sync and its wal-index update make it readable, and they
raise none), and at least every backup poll; where inotify is missing, every
``watch_interval_s``.
After a change it reads what is new — notices, stream events, job rows — with
indexed range queries, and wakes the receivers of exactly those channels.
SQLite has one writer at a time, so ids are committed in the order they are
handed out and "everything after the last id read" misses none.
Local commits poke it so it need not wait for the next poll.

A file that is locked when the watcher reads it (``database is locked``: a
process in exclusive locking mode, another process's WAL recovery or its
last-connection cleanup) is an outage, not a death (core's watcher waits it
out). The file deleted or replaced (a restore from backup swaps the file
under the open store, and the watcher would keep reading the old one) kills
it with :class:`FileChanged` and tells the store, which refuses to go on;
an unreadable file and altered tables kill it too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sqlite3
from collections.abc import Iterator

from alkstore import Database
from alkstore.engine import PollingWatcher, WakeSource, queue_wake_key, stream_wake_key
from alkstore_sqlite import _sql
from alkstore_sqlite._file_identity import FileChanged, FileWatch, Identity, check_identity
from alkstore_sqlite._filewatch import FolderWaiter
from alkstore_sqlite._fork_gate import ForkGate
from alkstore_sqlite._pool import connect
from alkstore_sqlite._settings import Settings

__all__ = ["Watcher"]

log = logging.getLogger("alkstore.sqlite")

BACKUP_POLL_S = 0.5
"""Under inotify a commit wakes the watcher; this poll only guards against a
missed event (each look costs an idle store CPU)."""

# The watcher's own connection gives up on a lock after this long, whatever the
# store's busy timeout: SQLite's busy wait cannot be interrupted, and close()
# must not sit in it. The watcher waits out a longer lock itself, between reads.
_READ_BUSY_S = 0.1
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # primary result codes


class Watcher(PollingWatcher):
    """Fans commits to the file out to wake receivers; started by the first subscriber."""

    def __init__(self, path: str, settings: Settings, file: FileWatch) -> None:
        super().__init__(
            _FileSource(path, settings, file),
            target=path,
            log=log,
            interval_s=settings.watch_interval_s,
            start_timeout_s=settings.busy_timeout_s,
            reads="the file",
            backup_poll_s=BACKUP_POLL_S,
        )


class _FileSource(WakeSource):
    """The file the store opened, read by a connection of the watcher's own;
    a look that finds it changed tells the store (``file``), which then
    refuses to go on."""

    def __init__(self, path: str, settings: Settings, file: FileWatch) -> None:
        self._path = path
        self._settings = dataclasses.replace(
            settings, busy_timeout_s=min(settings.busy_timeout_s, _READ_BUSY_S)
        )
        self._file = file
        self._reader: _Reader | None = None
        self._gate = ForkGate()  # every SQLite call of the watcher's thread goes inside

    def waiter(self) -> FolderWaiter:
        # SQLite follows symbolic links: the WAL is written next to the file they lead to.
        folder, name = os.path.split(os.path.realpath(self._path))
        return FolderWaiter(folder, name_prefix=name)

    def open(self) -> None:
        """Connect and read the starting point, if the path still leads to the
        file the store opened (a swap after this check is seen at the first look,
        whichever file the connection then opens).

        Raises:
            FileChanged: the path no longer leads to the store's file.
            Database: the file could not be opened (the driver's error chained).
            sqlite3.Error: the starting point could not be read.
        """
        with self._telling_the_store():
            check_identity(self._path, self._file.identity)
        with self._gate:
            try:
                self._reader = _Reader.open(self._path, self._file.identity, self._settings)
            except Database:
                with self._telling_the_store():  # gone since: say so, not "unable to open"
                    check_identity(self._path, self._file.identity)
                raise

    def look(self) -> set[str]:
        reader = self._reader
        assert reader is not None, "look() before open()"
        with self._telling_the_store(), self._gate:
            return reader.changes()

    @contextlib.contextmanager
    def _telling_the_store(self) -> Iterator[None]:
        try:
            yield
        except FileChanged as changed:
            self._file.changed(changed)
            raise

    def close(self) -> None:
        if self._reader is not None:
            with self._gate:
                self._reader.connection.close()

    def transient(self, error: Exception) -> sqlite3.OperationalError | None:
        """The SQLITE_BUSY or SQLITE_LOCKED error in ``error`` or its cause: someone
        holds a lock, the file itself is fine."""
        for candidate in (error, error.__cause__):
            if isinstance(candidate, sqlite3.OperationalError) and _is_lock(candidate):
                return candidate
        return None


class _Reader:
    """The watcher's connection to the file of one identity, with the data
    version and the newest notice, event and job ids it has looked at."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        path: str,
        identity: Identity,
        version: int,
        newest: tuple[int, int, int],
    ) -> None:
        self.connection = connection
        self.path = path
        self.identity = identity
        self.version = version
        self.notice, self.event, self.job = newest

    @classmethod
    def open(cls, path: str, identity: Identity, settings: Settings) -> _Reader:
        """Connect and read the starting point.

        Raises:
            Database: the file could not be opened (the driver's error chained).
            sqlite3.Error: the starting point could not be read.
        """
        connection = connect(path, settings)
        try:
            newest = connection.execute(_sql.MAX_IDS).fetchone()
            return cls(connection, path, identity, _data_version(connection), newest)
        except BaseException:
            connection.close()
            raise

    def changes(self) -> set[str]:
        """Keys touched by rows newer than those seen; moves past them once all are read.

        Raises:
            FileChanged: the path no longer leads to the file being read.
            sqlite3.Error: a read failed; nothing was moved past, so the
                next look reads the same rows again.
        """
        check_identity(self.path, self.identity)
        connection = self.connection
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


def _is_lock(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    message = str(error)
    return "locked" in message or "busy" in message


def _data_version(connection: sqlite3.Connection) -> int:
    version: int = connection.execute("PRAGMA data_version").fetchone()[0]
    return version
