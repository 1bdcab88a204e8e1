"""Named locks on SQLite: one row per held lock, with its expiry."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from alkstore.engine import Lock
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import translate

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["SQLiteLock", "acquire", "holds", "renew"]


def acquire(connection: sqlite3.Connection, name: str, owner: str, ttl_s: float) -> bool:
    """Take the lock for ``owner`` inside the caller's write transaction.

    True if ``owner`` holds it afterwards: newly acquired, taken over after
    expiry, or already held (then its expiry is left as it was).
    """
    now = time.time()
    connection.execute(_sql.TRY_LOCK, (name, owner, now + ttl_s, now))
    return holds(connection, name, owner, now)


def holds(connection: sqlite3.Connection, name: str, owner: str, now: float) -> bool:
    """True if ``owner`` holds the lock ``name`` unexpired at ``now``."""
    row = connection.execute(_sql.LOCK_HOLDER, (name,)).fetchone()
    return row is not None and row[0] == owner and row[1] > now


def renew(connection: sqlite3.Connection, name: str, owner: str, ttl_s: float) -> bool:
    """Extend ``owner``'s unexpired hold on ``name`` to ``now + ttl_s``; True if it held."""
    now = time.time()
    return connection.execute(_sql.RENEW_LOCK, (now + ttl_s, name, owner, now)).rowcount == 1


class SQLiteLock(Lock):
    """A lock held in the store's file."""

    _store: SQLiteStore

    def _renew(self, ttl_s: float) -> bool:
        with translate(f"renew lock {self.name!r}"), self._store.connection() as connection:
            return renew(connection, self.name, self.owner, ttl_s)

    def _release(self) -> bool:
        with translate(f"release lock {self.name!r}"), self._store.connection() as connection:
            row = connection.execute(_sql.RELEASE_LOCK, (self.name, self.owner)).fetchone()
        return row is not None and row[0] > time.time()
