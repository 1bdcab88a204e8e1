"""Named locks on PostgreSQL: one row per lock, expiry on the server's clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from alkstore.engine import Lock
from alkstore_postgres._errors import translate
from alkstore_postgres._names import stored

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresLock", "acquire", "holds", "renew"]


def acquire(
    store: PostgresStore, connection: psycopg.Connection, name: str, owner: str, ttl_s: float
) -> bool:
    """Take the lock for ``owner``; True if ``owner`` holds it afterwards (an
    existing hold by ``owner`` keeps its expiry)."""
    params = {"name": stored(name), "owner": stored(owner), "ttl": ttl_s}
    with connection.transaction():
        if connection.execute(store.sql.try_lock, params).fetchone() is not None:
            return True
        return holds(store, connection, name, owner)


def holds(store: PostgresStore, connection: psycopg.Connection, name: str, owner: str) -> bool:
    """True if ``owner`` holds ``name`` unexpired now."""
    params = {"name": stored(name), "owner": stored(owner)}
    return connection.execute(store.sql.lock_held, params).fetchone() is not None


def renew(
    store: PostgresStore, connection: psycopg.Connection, name: str, owner: str, ttl_s: float
) -> bool:
    """Extend ``owner``'s unexpired hold on ``name`` to ``now + ttl_s``; True if it held."""
    params = {"name": stored(name), "owner": stored(owner), "ttl": ttl_s}
    return connection.execute(store.sql.renew_lock, params).rowcount == 1


class PostgresLock(Lock):
    """A lock held in the store's schema."""

    _store: PostgresStore

    def _renew(self, ttl_s: float) -> bool:
        with translate(f"renew lock {self.name!r}"), self._store.connection() as connection:
            return renew(self._store, connection, self.name, self.owner, ttl_s)

    def _release(self) -> bool:
        with translate(f"release lock {self.name!r}"), self._store.connection() as connection:
            params = {"name": stored(self.name), "owner": stored(self.owner)}
            row = connection.execute(self._store.sql.release_lock, params).fetchone()
        return row is not None and bool(row[0])
