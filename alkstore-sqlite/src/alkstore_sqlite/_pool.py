"""Connections to one SQLite file, handed to one thread at a time."""

from __future__ import annotations

import contextlib
import sqlite3
import threading

from alkstore import Closed
from alkstore_sqlite._errors import translate
from alkstore_sqlite._settings import Settings

__all__ = ["ConnectionPool", "begin", "connect", "transaction"]

_MAX_IDLE = 8


def connect(path: str, settings: Settings) -> sqlite3.Connection:
    """Open a connection in autocommit mode with the engine's pragmas.

    Transactions are explicit (``BEGIN IMMEDIATE`` for writes), so a
    transaction never has to upgrade a read lock and cannot deadlock on it.
    """
    with translate(f"opening {path!r}"):
        connection = sqlite3.connect(
            path,
            timeout=settings.busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )
        try:
            synchronous = "FULL" if settings.durability == "full" else "NORMAL"
            connection.execute(f"PRAGMA synchronous = {synchronous}")
            connection.execute("PRAGMA foreign_keys = OFF")
        except BaseException:
            connection.close()
            raise
    return connection


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

    def __init__(self, path: str, settings: Settings) -> None:
        self._path = path
        self._settings = settings
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> sqlite3.Connection:
        """Take a connection for the calling thread's exclusive use."""
        with self._lock:
            if self._closed:
                raise Closed("the store is closed")
            if self._idle:
                return self._idle.pop()
        return connect(self._path, self._settings)

    def release(self, connection: sqlite3.Connection) -> None:
        """Give a connection back; one left inside a transaction is rolled back first."""
        if connection.in_transaction:
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

    def connection(self) -> _Lease:
        """A connection for the duration of the block."""
        return _Lease(self)

    def close(self) -> None:
        """Close idle connections; connections in use close when released."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


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
