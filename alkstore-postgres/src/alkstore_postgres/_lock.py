"""Named locks on PostgreSQL: one row per lock, expiry on the server's clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alkstore.engine import Lock
from alkstore_postgres._names import stored
from alkstore_postgres._plan import Fetch, Operation, Plan, Statement

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresLock", "acquire", "release", "renew", "renewal"]


def acquire(sql: Statements, name: str, owner: str, ttl_s: float) -> Plan[bool]:
    """Take the lock for ``owner``; True if ``owner`` holds it afterwards (an
    existing hold by ``owner`` keeps its expiry)."""
    yield Operation(f"lock {name!r}", transaction=True)
    params = {"name": stored(name), "owner": stored(owner), "ttl": ttl_s}
    if (yield Statement(sql.try_lock, params, Fetch.ONE)) is not None:
        return True
    held = yield Statement(sql.lock_held, params, Fetch.ONE)
    return held is not None


def renew(sql: Statements, name: str, owner: str, ttl_s: float) -> Plan[bool]:
    """Extend ``owner``'s unexpired hold on ``name`` to ``now + ttl_s``; True if it held."""
    params = {"name": stored(name), "owner": stored(owner), "ttl": ttl_s}
    return bool((yield Statement(sql.renew_lock, params, Fetch.ROWCOUNT)) == 1)


def renewal(sql: Statements, name: str, owner: str, ttl_s: float) -> Plan[bool]:
    """:func:`renew` on a connection of its own."""
    yield Operation(f"renew lock {name!r}")
    return (yield from renew(sql, name, owner, ttl_s))


def release(sql: Statements, name: str, owner: str) -> Plan[bool]:
    """Delete ``owner``'s hold on ``name``; True if it held it unexpired."""
    yield Operation(f"release lock {name!r}")
    params = {"name": stored(name), "owner": stored(owner)}
    row = yield Statement(sql.release_lock, params, Fetch.ONE)
    return row is not None and bool(row[0])


class PostgresLock(Lock):
    """A lock held in the store's schema."""

    _store: PostgresStore

    def _renew(self, ttl_s: float) -> bool:
        return self._store.run(renewal(self._store.sql, self.name, self.owner, ttl_s))

    def _release(self) -> bool:
        return self._store.run(release(self._store.sql, self.name, self.owner))
