"""How the engine connects, sync or async, and how it tells a dead pooled connection."""

from __future__ import annotations

import contextlib
import math
import select
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg_pool

from alkstore import AsyncStore, Closed, Store
from alkstore_postgres._settings import Settings

__all__ = [
    "CHECKOUT_SLICE_S",
    "RECONNECT_GIVE_UP_S",
    "CheckoutClock",
    "closed_if_pool_is",
    "configure_listener",
    "configure_listener_async",
    "configure_session",
    "configure_session_async",
    "connect_kwargs",
    "has_input",
]

RECONNECT_GIVE_UP_S = 4.0
"""psycopg_pool's ``reconnect_timeout`` for the engine's pools.

The pool retries a lost connection with a delay that doubles without bound
(1, 2, 4, 8 ... s) until this many seconds have passed, then gives up on it;
the next checkout that finds the pool short starts a new attempt at once.
The default (5 minutes) let the delay grow with the outage: after 35 s down,
the first connection came 25 s after the server was back. Giving up after
4 s keeps the gap between attempts at 2 s at most; a checkout asks again
every ``CHECKOUT_SLICE_S``, so one already waiting starts the next attempt.
"""


CHECKOUT_SLICE_S = 2.0
"""The longest one wait for a pooled connection lasts before the checkout asks again.

A pool that gave up reconnecting (``RECONNECT_GIVE_UP_S``) tries again only
when a checkout finds it short. A checkout that began during an outage and
went on waiting would wait out the whole ``connect_timeout_s``, although the
server came back seconds after the pool's last attempt; asking again starts a
new attempt, so a call made during a short outage returns soon after it ends.
"""


class CheckoutClock:
    """The waits of one checkout for a pooled connection.

    Together they last ``connect_timeout_s`` at most, none longer than
    ``CHECKOUT_SLICE_S``. A caller with a timeout of its own (``queue.wait(1)``)
    sets a shorter budget (``wait_budget``). Once it is spent the checkout
    gives up if the pool failed to connect meanwhile (an outage: the caller
    hears of it near its own timeout); a pool that is only busy, all its
    connections lent, is waited for as long as ever.
    """

    def __init__(
        self,
        connect_timeout_s: float,
        budget: Callable[[float], float],
        pool: psycopg_pool.ConnectionPool | psycopg_pool.AsyncConnectionPool,
    ) -> None:
        self._pool = pool
        self._failures_before = _connect_failures(pool)
        self._started = time.monotonic()
        self._deadline = self._started + connect_timeout_s
        self._budget_ends = self._started + budget(connect_timeout_s)

    def waits(self) -> Iterator[float]:
        """The timeout of each pool wait in turn."""
        while (remaining := self._deadline - time.monotonic()) > 0:
            budget_left = self._budget_ends - time.monotonic()
            if budget_left > 0:
                yield min(remaining, CHECKOUT_SLICE_S, budget_left)
            elif _connect_failures(self._pool) > self._failures_before:
                return
            else:
                yield min(remaining, CHECKOUT_SLICE_S)

    def gave_up(self) -> psycopg_pool.PoolTimeout:
        """The error of a checkout that found no connection."""
        waited_s = time.monotonic() - self._started
        return psycopg_pool.PoolTimeout(f"couldn't get a connection after {waited_s:.2f} sec")


def _connect_failures(
    pool: psycopg_pool.ConnectionPool | psycopg_pool.AsyncConnectionPool,
) -> int:
    """How many of ``pool``'s attempts to connect have failed, ever."""
    return pool.get_stats().get("connections_errors", 0)


_DEAD_PEER_DETECTION = {
    "keepalives": 1,
    "keepalives_idle": 15,  # seconds of silence before the first probe
    "keepalives_interval": 5,
    "keepalives_count": 3,  # so an idle connection to a vanished server fails in ~30 s
    "tcp_user_timeout": 30_000,  # ms: sent data unacknowledged this long fails the connection
}
"""TCP settings of every connection (libpq's names), unless its DSN sets them."""


def connect_kwargs(conninfo: str, settings: Settings) -> dict[str, Any]:
    """The keyword arguments of every connection the engine makes to ``conninfo``.

    Behind a transaction pooler (``pooler="transaction"``) psycopg prepares
    no statement: it would prepare one on whichever server connection the
    pooler lent for that transaction, then run it by name on another
    (PgBouncer before 1.21 passes prepared statements through unmanaged:
    "prepared statement "_pg3_0" does not exist", or "already exists").
    """
    kwargs: dict[str, Any] = {
        "autocommit": True,
        # libpq takes whole seconds, and 0 would mean no timeout at all
        "connect_timeout": max(1, math.ceil(settings.connect_timeout_s)),
    }
    if settings.pooler == "transaction":
        kwargs["prepare_threshold"] = None
    # A server gone without a word (a network cut, a vanished host) leaves the
    # connection half-open: a statement, or the LISTEN connection's wait for
    # notifications, would hang for the kernel's retransmissions (about 15
    # minutes) or keepalive idle time (2 hours). Each is set unless the DSN does.
    for parameter, value in _DEAD_PEER_DETECTION.items():
        if parameter not in conninfo:
            kwargs[parameter] = value
    # pg_stat_activity shows "alkstore" unless the DSN names the application
    # (as a parameter, or in options=-c..., which the fallback would override).
    if "application_name" not in conninfo:
        kwargs["fallback_application_name"] = "alkstore"
    return kwargs


_READ_COMMITTED = "SET default_transaction_isolation = 'read committed'"
"""The engine's statements are written for READ COMMITTED: a claim skips the
rows other claims lock and reads what committed meanwhile, a publish waits
for its stream's head row. A database or role whose default is REPEATABLE
READ or SERIALIZABLE (``ALTER DATABASE ... SET default_transaction_isolation``)
turned concurrent claims, acks, publishes and lock attempts into
serialization failures; the engine's own sessions are set back to it."""


def configure_session(connection: psycopg.Connection) -> None:
    """Set up a new connection of the engine's own (not behind a transaction
    pooler: a session setting would stay on whichever server connection the
    pooler lent, for its next client)."""
    connection.execute(_READ_COMMITTED)


async def configure_session_async(connection: psycopg.AsyncConnection) -> None:
    """:func:`configure_session` for an async connection."""
    await connection.execute(_READ_COMMITTED)


_NO_IDLE_SESSION_TIMEOUT = "SET idle_session_timeout = 0"
"""The LISTEN connection sits idle, outside any transaction, between
notifications: a server's ``idle_session_timeout`` (PostgreSQL 14+, often set
to end forgotten sessions) closed it every so often, each time with a
warning, a reconnect wake to every receiver, and the notifications sent
until it was back lost."""
_IDLE_SESSION_TIMEOUT_SINCE = 140000


def configure_listener(connection: psycopg.Connection) -> None:
    """Set up a new LISTEN connection (a session of its own, pooler or not)."""
    if connection.info.server_version >= _IDLE_SESSION_TIMEOUT_SINCE:
        connection.execute(_NO_IDLE_SESSION_TIMEOUT)


async def configure_listener_async(connection: psycopg.AsyncConnection) -> None:
    """:func:`configure_listener` for an async connection."""
    if connection.info.server_version >= _IDLE_SESSION_TIMEOUT_SINCE:
        await connection.execute(_NO_IDLE_SESSION_TIMEOUT)


def has_input(descriptor: int) -> bool:
    """Whether ``descriptor`` has input (or end of file) waiting; never blocks.

    An idle pooled connection has none unless the server ended its session
    (a restart, ``pg_terminate_backend``, ``idle_session_timeout``): the
    server then sent its FATAL and closed the socket.
    """
    if hasattr(select, "poll"):  # any descriptor number, unlike select.select
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([descriptor], [], [], 0)[0])


@contextlib.contextmanager
def closed_if_pool_is(store: Store | AsyncStore) -> Iterator[None]:
    """Turn the pool's ``PoolClosed`` into the store's ``Closed`` once the store is closed.

    A call that passed the store's open check, then waited for a connection
    while another thread or task closed the store, meets a closed pool: it
    says the store is closed, as a call made after ``close()`` does, not
    ``Database``.
    """
    try:
        yield
    except psycopg_pool.PoolClosed:
        if store.closed:
            raise Closed(f"{store!r} is closed") from None
        raise
