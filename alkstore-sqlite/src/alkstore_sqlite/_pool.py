"""Connections to one SQLite file, handed to one thread at a time.

Besides the pooled connections, a pool has one *prompt* connection that never
waits: a statement on it that would wait for the write lock fails at once
with SQLITE_BUSY, and its commits never checkpoint the WAL (a checkpoint
copies pages and flushes the disk). Only a thread in :meth:`ConnectionPool.prompt`
mode gets it, one thread at a time: the async API's fast path, on the event
loop's thread (see ``_prompt``). The WAL its writes grow is restarted by a
pooled connection, when asked (:meth:`ConnectionPool.want_checkpoint`).

A pool also asks for that checkpoint itself when the WAL file has grown past
``_WAL_RESTART_BYTES``: SQLite's own passive checkpoints copy pages but never
restart a WAL that some reader is always using, and with workers claiming,
consumers reading and the watcher looking, one always is. Left alone the WAL
then grows as long as the load lasts (checkpoint starvation).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import urllib.parse
from typing import TypeAlias

from alkstore import Closed, Database
from alkstore.engine import WouldWait
from alkstore_sqlite._errors import translate
from alkstore_sqlite._file_identity import FileWatch
from alkstore_sqlite._settings import Settings

Statements: TypeAlias = "sqlite3.Connection | sqlite3.Cursor"
"""Where a write runs its statements: a connection, or a cursor of one (a
transaction adopted from a caller uses a cursor that reads tuples)."""

__all__ = ["ConnectionPool", "Statements", "begin", "connect", "transaction"]

log = logging.getLogger("alkstore")

_MAX_IDLE = 8

_CHECKPOINT_WAIT_MS = 200
"""How long an asked-for checkpoint waits for writers and readers to step
aside; meanwhile it holds back new writers, so it must stay short."""

_WAL_RESTART_BYTES = 16 * 1024 * 1024
"""A WAL file past this size asks for a checkpoint that restarts it."""
_WAL_KEPT_BYTES = _WAL_RESTART_BYTES
"""What a restarted WAL file is cut back to (``journal_size_limit``). Not less
than a restart lets it grow to: a file cut shorter is extended again, block by
block, as the next writes fill it, every cycle (the async API's prompt writes
fill about 12 MiB between two restarts: at 4 MiB kept, 10-15% of their time)."""
_WAL_LOOK_EVERY = 64
"""Connections given back between two looks at the WAL file's size."""
_WAL_LOOK_AGAIN_EVERY = 4
"""The same, while the last restart could not finish (a reader held on): the
WAL grows by every write until one does, so the next try comes sooner."""


def connect(path: str, settings: Settings, *, create: bool = False) -> sqlite3.Connection:
    """Open a connection in autocommit mode with the engine's pragmas.

    Transactions are explicit (``BEGIN IMMEDIATE`` for writes), so a
    transaction never has to upgrade a read lock and cannot deadlock on it.
    Only opening the store creates the file (``create``): a connection made
    later, once the file was deleted, must fail rather than start an empty
    one, which could even take the old file's inode and pass for it.
    """
    with translate(f"opening {path!r}"):
        connection = sqlite3.connect(
            path if create else _existing_file_uri(path),
            timeout=settings.busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
            uri=not create,
        )
        try:
            synchronous = "FULL" if settings.durability == "full" else "NORMAL"
            connection.execute(f"PRAGMA synchronous = {synchronous}")
            connection.execute("PRAGMA foreign_keys = OFF")
            connection.execute(f"PRAGMA journal_size_limit = {_WAL_KEPT_BYTES}")
        except BaseException:
            connection.close()
            raise
    return connection


def _existing_file_uri(path: str) -> str:
    """A URI that opens the file at ``path`` for reading and writing, never creating it."""
    # Bytes, so that a name that is not UTF-8 (os.fsdecode's surrogates) is quoted as it is.
    return f"file://{urllib.parse.quote(os.fsencode(os.path.abspath(path)))}?mode=rw"


def begin(connection: sqlite3.Connection) -> None:
    """Begin a write transaction: it takes the write lock now (waiting up to the
    busy timeout), so it never fails later on upgrading a read lock."""
    connection.execute("BEGIN IMMEDIATE")


class transaction:  # noqa: N801 - used like psycopg's `with connection.transaction()`
    """``with transaction(connection)``: the block in a write transaction on a
    connection the caller holds, committed at its end, rolled back if it raises.

    A class rather than a generator-based context manager: claims enter it.
    A rollback that fails leaves the connection in its transaction; the
    pool's ``release`` then closes it rather than keep it.
    """

    __slots__ = ("_connection",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def __enter__(self) -> sqlite3.Connection:
        begin(self._connection)
        return self._connection

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        try:
            if exc_type is None:
                self._connection.execute("COMMIT")
        finally:
            if self._connection.in_transaction:  # the block raised, or COMMIT did
                with contextlib.suppress(sqlite3.Error):
                    self._connection.execute("ROLLBACK")


class ConnectionPool:
    """Hands out connections; at most a few idle ones are kept."""

    def __init__(self, path: str, settings: Settings, file: FileWatch) -> None:
        self._path = path
        self._settings = settings
        self._file = file
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._prompt: sqlite3.Connection | None = None
        self._prompt_lent = False
        self._prompt_mode = threading.Lock()  # held by the thread in prompt mode
        self._prompt_thread: int | None = None
        self._last_prompt_thread: int | None = None
        self._prompt_block = _PromptMode(self)
        self._checkpoint_wanted = False
        self._checkpointing = False
        self._checkpoint_gate = threading.Condition(threading.Lock())
        self._checkpointer: sqlite3.Connection | None = None
        self._wal = f"{path}-wal"
        self._given_back = 0
        self._look_every = _WAL_LOOK_EVERY

    def acquire(self) -> sqlite3.Connection:
        """Take a connection for the calling thread's exclusive use (the prompt
        connection, for a thread in prompt mode).

        Raises:
            FileChanged: the path no longer leads to the file the store opened.
        """
        self._file.check()
        if self._prompt_thread == threading.get_ident() and not self._prompt_lent:
            return self._lend_prompt()
        if self._checkpoint_wanted and threading.get_ident() != self._last_prompt_thread:
            self._run_wanted_checkpoint()  # never on the event loop's thread
        with self._lock:
            if self._closed:
                raise Closed("the store is closed")
            if self._idle:
                return self._idle.pop()
        try:
            return connect(self._path, self._settings)
        except Database:
            self._file.look()  # a file gone or replaced says so, not "unable to open"
            raise

    def prompt(self) -> _PromptMode:
        """``with pool.prompt():`` the block's first connection, on this thread, is
        the prompt one. Raises ``WouldWait`` while another thread is in prompt mode."""
        return self._prompt_block

    def prompt_changes(self) -> int:
        """Rows the prompt connection has changed since it was opened (0 before)."""
        prompt = self._prompt
        return 0 if prompt is None else prompt.total_changes

    def _lend_prompt(self) -> sqlite3.Connection:
        # Only the thread in prompt mode gets here, and close() waits for it to
        # leave that mode: no lock needed.
        if self._closed:
            raise Closed("the store is closed")
        if self._prompt is None:
            self._prompt = _connect_prompt(self._path, self._settings)
        self._prompt_lent = True
        return self._prompt

    def want_checkpoint(self) -> None:
        """Ask for a checkpoint that restarts the WAL: the next thread to take a
        pooled connection runs it first (never the prompt thread)."""
        self._checkpoint_wanted = True

    @property
    def checkpoint_pending(self) -> bool:
        """A checkpoint was asked for and has not ended yet: prompt writes, which
        never wait, would keep it from ever taking the write lock."""
        return self._checkpoint_wanted

    def _run_wanted_checkpoint(self) -> None:
        """Run the asked-for checkpoint, or wait while another thread runs it:
        meanwhile no connection of this pool is handed out, so none of ours
        races it for the write lock."""
        with self._checkpoint_gate:
            while self._checkpointing:
                if not self._checkpoint_gate.wait(_CHECKPOINT_WAIT_MS / 1000 * 2):
                    return
            if not self._checkpoint_wanted:
                return
            self._checkpointing = True
        try:
            self._restart_wal()
        finally:
            with self._checkpoint_gate:
                self._checkpointing = self._checkpoint_wanted = False
                self._checkpoint_gate.notify_all()

    def release(self, connection: sqlite3.Connection) -> None:
        """Give a connection back; one left inside a transaction is rolled back first."""
        self._given_back += 1  # racy under threads: it only spaces the looks out
        if self._given_back % self._look_every == 0 and self._wal_outgrown():
            self.want_checkpoint()
        if connection is self._prompt:
            self._give_prompt_back(connection)
            return
        try:
            in_transaction = connection.in_transaction
        except sqlite3.ProgrammingError:  # closed by whoever held it: nothing to keep
            return
        if in_transaction:
            try:
                connection.execute("ROLLBACK")
            except sqlite3.Error:
                connection.close()
                return
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(connection)
                return
        connection.close()

    def _wal_outgrown(self) -> bool:
        try:
            return os.stat(self._wal).st_size > _WAL_RESTART_BYTES
        except OSError:  # no WAL yet (or not a file): nothing to restart
            return False

    def connection(self) -> _Lease:
        """A connection for the duration of the block."""
        return _Lease(self)

    def _restart_wal(self) -> None:
        """Checkpoint the whole WAL so the next write starts it from the top.

        A passive checkpoint (SQLite's own, after a commit) never catches up
        with writers that do not pause, as the prompt connection's may not:
        the WAL then grows without end. This one holds new writers back (a
        prompt write meets SQLITE_BUSY and waits on a thread) until it is
        done, or for ``_CHECKPOINT_WAIT_MS`` at most.
        """
        try:
            if self._checkpointer is None:
                self._checkpointer = connect(self._path, self._settings)
                self._checkpointer.execute(f"PRAGMA busy_timeout = {_CHECKPOINT_WAIT_MS}")
            busy, _, _ = self._checkpointer.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        except (sqlite3.Error, Database):  # asked again after the next prompt writes
            log.debug("a WAL checkpoint of %r failed", self._path, exc_info=True)
            busy = 1
        self._look_every = _WAL_LOOK_AGAIN_EVERY if busy else _WAL_LOOK_EVERY

    def _give_prompt_back(self, connection: sqlite3.Connection) -> None:
        self._prompt_lent = False
        if connection.in_transaction:
            try:
                connection.execute("ROLLBACK")
            except sqlite3.Error:
                self._closed_prompt()
                return
        if self._closed:
            self._closed_prompt()

    def _closed_prompt(self) -> None:
        prompt, self._prompt = self._prompt, None
        if prompt is not None:
            prompt.close()

    def close(self) -> None:
        """Close idle connections; connections in use close when released."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        with self._checkpoint_gate:
            checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.close()
        if self._prompt_thread == threading.get_ident():
            return  # closed from inside a prompt call: its release closes the connection
        with self._prompt_mode:  # a prompt call in flight finishes first (a statement)
            self._closed_prompt()


class _Lease:
    """``with pool.connection() as connection``: a class, as it wraps every statement."""

    __slots__ = ("_connection", "_pool")

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def __enter__(self) -> sqlite3.Connection:
        self._connection = self._pool.acquire()
        return self._connection

    def __exit__(self, *exc_info: object) -> None:
        self._pool.release(self._connection)


class _PromptMode:
    """``with pool.prompt()``: see :meth:`ConnectionPool.prompt`."""

    __slots__ = ("_pool",)

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def __enter__(self) -> None:
        if not self._pool._prompt_mode.acquire(blocking=False):
            raise WouldWait
        self._pool._prompt_thread = self._pool._last_prompt_thread = threading.get_ident()

    def __exit__(self, *exc_info: object) -> None:
        self._pool._prompt_thread = None
        self._pool._prompt_mode.release()


def _connect_prompt(path: str, settings: Settings) -> sqlite3.Connection:
    connection = connect(path, settings)
    try:
        with translate(f"opening {path!r}"):
            connection.execute("PRAGMA busy_timeout = 0")
            connection.execute("PRAGMA wal_autocheckpoint = 0")
    except BaseException:
        connection.close()
        raise
    return connection
