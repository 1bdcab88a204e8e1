"""The SQLite Store: one file, a pool of connections, one wake watcher."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from alkstore import Database, QueueOpts, Schedule, ScheduleOpts
from alkstore.engine import (
    SCHEDULES_WAKE_KEY,
    Lock,
    PlacedSchedule,
    Store,
    TxHandle,
    WakeReceiver,
    decode,
    place_schedule,
)
from alkstore_sqlite import _sql
from alkstore_sqlite._capabilities import CAPABILITIES
from alkstore_sqlite._errors import inherited_at_fork, translate
from alkstore_sqlite._file_identity import FileWatch
from alkstore_sqlite._inspect import SQLiteInspector
from alkstore_sqlite._lock import LapsedLocks, SQLiteLock, acquire
from alkstore_sqlite._pool import ConnectionPool, Statements, begin, connect, transaction
from alkstore_sqlite._prompt import PromptCalls
from alkstore_sqlite._queue import SQLiteQueue
from alkstore_sqlite._scheduler import due_schedules, fire_boundary, until_next_fire
from alkstore_sqlite._schema import SchemaError, migrate
from alkstore_sqlite._settings import Settings
from alkstore_sqlite._stream import SQLiteStream
from alkstore_sqlite._tx import SQLiteTx, plain_cursor
from alkstore_sqlite._wakes import Watcher

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_NOTICE_HORIZON_S = 600.0  # notices older than this are pruned; watchers read them in ms
_PRUNE_EVERY = 256  # a prune deletes up to 1,000 rows: it keeps ahead of the writes


class SQLiteStore(Store):
    """A store in one SQLite file, shared by any number of threads and processes."""

    job_keys = True
    cron_schedules = True  # the schedules table keeps tz (schema version 2)

    def __init__(self, path: str, settings: Settings) -> None:
        super().__init__(path, CAPABILITIES, scheduler_lease_s=settings.scheduler_lease_s)
        self.path = path
        self.settings = settings
        _prepare_file(path, settings)
        self.file = FileWatch(path)
        """The file the store opened: once deleted or replaced, every call raises."""
        self.pool = ConnectionPool(path, settings, self.file)
        self.connection = self.pool.connection
        """A pooled connection (autocommit) for the block: ``with store.connection() as c``."""
        self._prompt_calls = PromptCalls(self.pool, writes=settings.durability == "normal")
        self._watcher = Watcher(path, settings, self.file)
        # From a random start, so that stores opened for a few calls each prune too.
        self._notices = random.randrange(_PRUNE_EVERY)
        self._lapsed_locks = LapsedLocks()

    @property
    def watcher_error(self) -> BaseException | None:
        """Why the wake watcher died, or None while it lives (or never started)."""
        return self._watcher.error

    @contextlib.contextmanager
    def in_transaction(self) -> Iterator[sqlite3.Connection]:
        """A pooled connection inside a write transaction for the block: committed
        at its end (then the watcher is poked), rolled back if it raises."""
        with self.connection() as connection, transaction(connection):
            yield connection
        self.committed()

    def committed(self) -> None:
        """Tell the watcher this process just committed, so wakes go out now."""
        self._watcher.poke()

    # Engine hooks

    def _after_fork_in_child(self) -> None:
        inherited_at_fork(self.path)  # a lock met here may be the parent's, for good

    def _close(self) -> None:
        self._watcher.stop()
        self.pool.close()

    def _notify(self, channel: str, payload_json: str) -> None:
        with translate(f"notify {channel!r}"), self.connection() as connection:
            self.write_notice(connection, channel, payload_json)
        self.committed()

    def write_notice(self, connection: Statements, channel: str, payload_json: str) -> None:
        """Insert a wake notice on ``connection``, in its transaction if it has one.

        Every write of a notice goes through here: every ``_PRUNE_EVERY``-th one
        also deletes the oldest notices past the horizon, so the table stays
        bounded whichever calls write them (``notify_tx``, retries, schedules).
        """
        now = time.time()
        connection.execute(_sql.NOTIFY, (channel, payload_json, now))
        self._notices += 1  # racy under threads: it only spaces the prunes out
        if self._notices % _PRUNE_EVERY == 0:
            connection.execute(_sql.PRUNE_NOTICES, (now - _NOTICE_HORIZON_S,))

    def _watch(self, key: str) -> WakeReceiver:
        return self._watcher.subscribe(key)

    def _stream(self, name: str) -> SQLiteStream:
        return SQLiteStream(self, name)

    def _queue(self, name: str, opts: QueueOpts) -> SQLiteQueue:
        return SQLiteQueue(self, name, opts)

    def _try_lock(self, name: str, owner: str, ttl_s: float) -> Lock | None:
        with translate(f"lock {name!r}"), self.in_transaction() as connection:
            held = acquire(connection, name, owner, ttl_s)
            self._lapsed_locks.after_attempt(connection)
        return SQLiteLock(self, name, owner, ttl_s) if held else None

    def _schedule(
        self,
        name: str,
        spec: str,
        interval_s: int,
        queue: str,
        payload_json: str,
        opts: ScheduleOpts,
    ) -> Schedule:
        now = time.time()
        with translate(f"schedule {name!r}"), self.in_transaction() as connection:
            row = connection.execute(_sql.GET_SCHEDULE, (name,)).fetchone()
            existing = None if row is None else PlacedSchedule(row[0], row[2], row[3], row[4])
            placed = place_schedule(existing, spec, interval_s, now, opts.tz)
            connection.execute(
                _sql.UPSERT_SCHEDULE,
                (name, spec, interval_s, queue, payload_json, opts.priority, opts.max_attempts,
                 opts.expires, placed.anchor, placed.next_fire_at, placed.tz, opts.key),
            )  # fmt: skip
            self.write_notice(connection, SCHEDULES_WAKE_KEY, "null")
        last_fire_at = None if row is None else row[5]
        return Schedule(
            name, spec, queue, decode(payload_json), placed.next_fire_at, placed.tz, last_fire_at
        )

    def _unschedule(self, name: str) -> bool:
        with translate(f"unschedule {name!r}"), self.connection() as connection:
            return connection.execute(_sql.DELETE_SCHEDULE, (name,)).rowcount == 1

    # The scheduler's storage primitives (core's loop calls them) live in _scheduler.
    _due_schedules = due_schedules
    _fire_boundary = fire_boundary
    _until_next_fire = until_next_fire

    def _inspect(self) -> SQLiteInspector:
        return SQLiteInspector(self)

    def _begin_tx(self) -> TxHandle:
        connection = self.pool.acquire()
        try:
            with translate("begin a transaction"):
                begin(connection)
        except BaseException:
            self.pool.release(connection)
            raise
        return SQLiteTx(self, connection, owned=True)

    def _without_waiting(self, call: Callable[..., T], *args: Any) -> T:
        return self._prompt_calls.run(call, *args)

    def _adopt_tx(self, connection: Any) -> TxHandle:
        if not isinstance(connection, sqlite3.Connection):
            raise TypeError(f"adopt_tx needs a sqlite3.Connection, not {type(connection).__name__}")
        if getattr(connection, "autocommit", None) is True:  # Python 3.12+
            raise ValueError(
                "adopt_tx: the sqlite3 connection was opened with autocommit=True, where its "
                "commit() and rollback() do nothing: the transaction alkstore would begin "
                "could never be committed through it; open it with the default autocommit, "
                "or with autocommit=False"
            )
        with translate("inspect the adopted connection"):
            main_file = _main_file(connection)
            if not _same_file(main_file, self.path):
                raise ValueError(
                    f"adopt_tx: the connection is to {main_file or 'an in-memory database'!r}, "
                    f"not to this store's file {self.path!r}"
                )
            if not connection.in_transaction:
                begin(connection)
        return SQLiteTx(self, connection, owned=False)


def _main_file(connection: sqlite3.Connection) -> str:
    """The file of ``connection``'s main database ("" in memory), whatever its
    caller's row and text factories."""
    row = plain_cursor(connection).execute(_sql.MAIN_FILE).fetchone()
    file = "" if row is None or row[0] is None else row[0]
    return os.fsdecode(file) if isinstance(file, bytes) else str(file)


def _prepare_file(path: str, settings: Settings) -> None:
    """Switch the file to WAL, bring the engine tables up to date and check their shape.

    Raises:
        Database: the file cannot be opened or written, is not a database,
            refuses WAL, or holds engine tables this version cannot use
            (newer, altered or damaged: the message names what is wrong).
    """
    _check_place(path)
    connection = connect(path, settings, create=True)
    try:
        with translate(f"preparing {path!r}"):
            mode = _switch_to_wal(connection, settings.busy_timeout_s)
            if mode != "wal":
                raise sqlite3.OperationalError(f"the file refused WAL mode (it stays {mode!r})")
            try:
                migrate(connection)
            except SchemaError as exc:
                raise Database(f"cannot open {path!r}: {exc}") from None
    finally:
        connection.close()


def _check_place(path: str) -> None:
    """Refuse, saying why, the paths SQLite answers only "unable to open database file" for."""
    if os.path.isdir(path):
        raise Database(
            f"opening {path!r} failed: it is a folder, not a file; give the path of a "
            f"database file, such as {os.path.join(path, 'app.db')!r}"
        )
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise Database(
            f"opening {path!r} failed: its folder {folder!r} does not exist; create it first"
        )
    exists = os.path.exists(path)
    if not exists and not os.access(folder, os.W_OK | os.X_OK):
        raise Database(
            f"opening {path!r} failed: there is no such file, and its folder {folder!r} "
            "is not writable, so it cannot be created there"
        )
    # A new file is written through a rollback journal until it is in WAL mode.
    suffix = "-wal" if exists else "-journal"
    name_bytes = len(os.fsencode(os.path.basename(path)))
    longest = _longest_name(folder) - len(suffix)
    if name_bytes > longest:
        raise Database(
            f"opening {path!r} failed: its file name is {name_bytes} bytes, and SQLite keeps "
            f"a file named after it with {suffix!r} added beside it: on this file system "
            f"that leaves {longest} bytes at most for the database file's name"
        )


def _longest_name(folder: str) -> int:
    """The longest file name, in bytes, that ``folder``'s file system allows."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):  # not POSIX, or not said
        return 255


def _switch_to_wal(connection: sqlite3.Connection, busy_timeout_s: float) -> str:
    """Ask for WAL mode; return the journal mode the file is in.

    Processes opening a new file at once race to switch it, and SQLite
    answers the losers "database is locked" at once, without waiting in its
    busy handler: so wait here, up to the busy timeout.
    """
    deadline = time.monotonic() + busy_timeout_s
    pause = 0.001
    while True:
        try:
            mode: str = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            return mode
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _same_file(one: str, other: str) -> bool:
    try:
        return bool(one) and os.path.samefile(one, other)
    except OSError:
        return False
