"""Named locks on PostgreSQL: one row per lock, expiry on the server's clock."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from alkstore.engine import Lock
from alkstore_postgres._names import stored
from alkstore_postgres._plan import Fetch, Operation, Plan, Statement

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements
    from alkstore_postgres._store import PostgresStore

__all__ = ["LapsedLocks", "PostgresLock", "acquire", "release", "renew", "renewal"]

SWEEP_EVERY = 256
"""Every this many lock attempts of a store, one window of lock rows is swept."""

SWEEP_WINDOW = 2_000
"""Lock rows a sweep reads at most."""

SWEEP_GRACE_S = 60.0
"""A lapsed lock's row is deleted only this long after its expiry."""


class LapsedLocks:
    """Deletes the rows of locks lapsed for a while, one window of keys at a time,
    so that locks nobody releases (holders that died, TTL markers under names
    that never repeat) do not pile up.

    The sweep rides on every ``SWEEP_EVERY``-th lock attempt of the store, in
    its transaction, and reads the next ``SWEEP_WINDOW`` keys of ``locks_pkey``
    (wrapping around): bounded work each time, and a pass over the table faster
    than attempts add rows. Nobody holds a lapsed lock, so its row going
    changes nothing anyone sees. The sweep skips rows another transaction
    holds (an attempt taking that lock over, another sweep), so it never waits
    and never deadlocks with them; an attempt that meets a row the sweep holds
    waits for it, then finds it gone and inserts.
    """

    __slots__ = ("_after", "_attempts")

    def __init__(self) -> None:
        # Counted from a random start, so that stores opened for a few calls each
        # (a request, a command) sweep too, as often between them. Racy under
        # threads: it only spaces the sweeps out.
        self._attempts = random.randrange(SWEEP_EVERY)
        self._after = b""

    def after_attempt(self, sql: Statements) -> Plan[None]:
        """Count a lock attempt; on every ``SWEEP_EVERY``-th, sweep the next window
        in the attempt's transaction."""
        self._attempts += 1
        if self._attempts % SWEEP_EVERY:
            return
        window = {"after": self._after, "window": SWEEP_WINDOW, "grace": SWEEP_GRACE_S}
        end = yield Statement(sql.sweep_lapsed_locks, window, Fetch.ONE)
        # Past the last key, start again from the first.
        self._after = b"" if end is None else bytes(end[0])


def acquire(
    sql: Statements, name: str, owner: str, ttl_s: float, lapsed: LapsedLocks | None = None
) -> Plan[bool]:
    """Take the lock for ``owner``; True if ``owner`` holds it afterwards (an
    existing hold by ``owner`` keeps its expiry). ``lapsed`` sweeps on its turn."""
    yield Operation(f"lock {name!r}", transaction=True)
    params = {"name": stored(name), "owner": stored(owner), "ttl": ttl_s}
    held = (yield Statement(sql.try_lock, params, Fetch.ONE)) is not None
    if not held:
        held = (yield Statement(sql.lock_held, params, Fetch.ONE)) is not None
    if lapsed is not None:
        yield from lapsed.after_attempt(sql)
    return held


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
