"""Connections to one SQLite file, handed to one thread at a time."""

from __future__ import annotations

import sqlite3
import threading

from alkstore import Closed
from alkstore_sqlite._errors import translate
from alkstore_sqlite._settings import Settings

__all__ = ["ConnectionPool", "connect"]

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
