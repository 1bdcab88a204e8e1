"""Named locks on SQLite: one row per held lock, with its expiry."""

from __future__ import annotations

import random
import sqlite3
import time
from typing import TYPE_CHECKING

from alkstore.engine import Lock
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import translate

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["LapsedLocks", "SQLiteLock", "acquire", "holds", "renew"]

SWEEP_EVERY = 256
"""Every this many lock attempts of a store, one window of lock rows is swept."""

SWEEP_WINDOW = 2_000
"""Lock rows a sweep reads at most."""

SWEEP_GRACE_S = 60.0
"""A lapsed lock's row is deleted only this long after its expiry, so that a
process whose clock runs a little behind sees nothing change."""


def acquire(connection: sqlite3.Connection, name: str, owner: str, ttl_s: float) -> bool:
    """Take the lock for ``owner`` inside the caller's write transaction.

    True if ``owner`` holds it afterwards: newly acquired, taken over after
    expiry, or already held (then its expiry is left as it was). A row written
    here is held whatever its TTL: one too small to move ``now`` (``1e-9``)
    still acquires, as on PostgreSQL, and has lapsed by the next look.
    """
    now = time.time()
    if connection.execute(_sql.TRY_LOCK, (name, owner, now + ttl_s, now)).fetchone():
        return True
    return holds(connection, name, owner, now)


def holds(connection: sqlite3.Connection, name: str, owner: str, now: float) -> bool:
    """True if ``owner`` holds the lock ``name`` unexpired at ``now``."""
    row = connection.execute(_sql.LOCK_HOLDER, (name,)).fetchone()
    return row is not None and row[0] == owner and row[1] > now


def renew(connection: sqlite3.Connection, name: str, owner: str, ttl_s: float) -> bool:
    """Extend ``owner``'s unexpired hold on ``name`` to ``now + ttl_s``; True if it held."""
    now = time.time()
    return connection.execute(_sql.RENEW_LOCK, (now + ttl_s, name, owner, now)).rowcount == 1


class LapsedLocks:
    """Deletes the rows of locks lapsed for a while, one window of names at a time.

    A lock nobody releases (its holder died, or it serves as a TTL marker) keeps
    its row until its name is taken again; with names that never repeat, rows
    would pile up for good. Every ``SWEEP_EVERY``-th attempt of the store sweeps
    the next ``SWEEP_WINDOW`` names in order, wrapping around at the end: each
    sweep reads a bounded number of rows, and the sweeps pass over the table
    faster than attempts can add rows to it. Deleting a lapsed lock changes
    nothing anyone sees: nobody holds it, and the next attempt takes it anyway.
    """

    __slots__ = ("_after", "_attempts")

    def __init__(self) -> None:
        # Counted from a random start, so that stores opened for a few calls each
        # (a request, a command) sweep too, as often between them. Racy under
        # threads: it only spaces the sweeps out.
        self._attempts = random.randrange(SWEEP_EVERY)
        self._after = ""

    def after_attempt(self, connection: sqlite3.Connection) -> None:
        """Count a lock attempt; on every ``SWEEP_EVERY``-th, sweep the next window
        inside the caller's write transaction."""
        self._attempts += 1
        if self._attempts % SWEEP_EVERY:
            return
        (last,) = connection.execute(_sql.LOCK_WINDOW_END, (self._after, SWEEP_WINDOW)).fetchone()
        if last is None:  # past the last name: start again from the first
            self._after = ""
            return
        lapsed_before = time.time() - SWEEP_GRACE_S
        connection.execute(_sql.DELETE_LAPSED_LOCKS, (self._after, last, lapsed_before))
        self._after = last


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
