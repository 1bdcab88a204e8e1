"""The PostgreSQL Store: a connection pool, one listener connection, one schema."""

from __future__ import annotations

import contextlib
import math
import select
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool

from alkstore import Closed, QueueOpts, Schedule, ScheduleOpts
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
from alkstore_postgres._capabilities import CAPABILITIES
from alkstore_postgres._errors import connect_errors, translate
from alkstore_postgres._inspect import PostgresInspector
from alkstore_postgres._job_buffer import JobIds
from alkstore_postgres._lock import PostgresLock, acquire
from alkstore_postgres._names import channel_identifier, stored
from alkstore_postgres._pool_log import pool_name, quiet_pool_noise
from alkstore_postgres._queue import PostgresQueue
from alkstore_postgres._scheduler import due_schedules, fire_boundary, until_next_fire
from alkstore_postgres._schema import migrate
from alkstore_postgres._settings import Settings
from alkstore_postgres._sql import Statements
from alkstore_postgres._stream import PostgresStream
from alkstore_postgres._tx import PostgresTx
from alkstore_postgres._wakes import Listener, notify_payload

__all__ = ["PostgresStore"]


class PostgresStore(Store):
    """A store in one schema of a PostgreSQL database, for many worker hosts."""

    def __init__(self, conninfo: str, address: str, settings: Settings) -> None:
        super().__init__(
            f"PostgreSQL at {address}, schema {settings.schema}",
            CAPABILITIES,
            scheduler_lease_s=settings.scheduler_lease_s,
        )
        self.settings = settings
        self.sql = Statements(settings.schema)
        self.job_ids = JobIds(self.sql.reserve_job_ids)
        """Job ids reserved for enqueues in transactions (see ``_job_buffer``)."""
        self._conninfo = conninfo
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            # libpq takes whole seconds, and 0 would mean no timeout at all
            "connect_timeout": max(1, math.ceil(settings.connect_timeout_s)),
        }
        # pg_stat_activity shows "alkstore" unless the DSN names the application
        # (as a parameter, or in options=-c..., which the fallback would override).
        if "application_name" not in conninfo:
            self._connect_kwargs["fallback_application_name"] = "alkstore"
        with connect_errors(address):
            first = psycopg.connect(conninfo, **self._connect_kwargs)
        try:
            with translate(f"preparing schema {settings.schema!r}"):
                migrate(first, settings.schema)
                self._storage: tuple[Any, ...] | None = first.execute(self.sql.storage).fetchone()
                """Which storage the store is in (see ``Statements.storage``), for adopt_tx."""
        finally:
            first.close()
        quiet_pool_noise()
        self.pool = psycopg_pool.ConnectionPool(
            conninfo,
            name=pool_name(),
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            kwargs=self._connect_kwargs,
            timeout=settings.connect_timeout_s,
            open=False,
        )
        with connect_errors(address):
            self.pool.open(wait=True, timeout=settings.connect_timeout_s)
        self._listener = Listener(self._listener_connection, settings.schema, address)

    def _listener_connection(self) -> psycopg.Connection:
        return psycopg.connect(self._conninfo, **self._connect_kwargs)

    @property
    def listener_reconnects(self) -> int:
        """How often the listener connection was lost and made again."""
        return self._listener.reconnects

    def listening_channels(self) -> set[str]:
        """The channel identifiers the server listens to for this store, read
        from the listener connection itself (``pg_listening_channels()``): one
        per channel with an open receiver. A diagnostic.

        Raises:
            Database: the listener connection is down.
        """
        self._refuse_if_closed()
        return self._listener.server_channels()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection (autocommit) for the block, checked as ``_checkout`` does."""
        self._refuse_if_closed()
        connection = self._checkout()
        try:
            with connection:  # a pooled connection's block ends without closing it
                yield connection
        finally:
            self.pool.putconn(connection)

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise Closed(f"{self!r} is closed")

    def _checkout(self) -> psycopg.Connection:
        """A pooled connection the server has not closed while it sat in the pool.

        A restart, ``pg_terminate_backend`` or ``idle_session_timeout`` closes
        idle connections; each would fail the next user call made on it. The
        dead are handed back (the pool replaces them) and the next is taken at
        once: the pool's own ``check`` hook would sleep a second, then two, ...
        between stale connections, and a restart leaves them all stale.

        Raises:
            psycopg_pool.PoolTimeout: no live connection within ``connect_timeout_s``.
        """
        for _ in range(self.settings.pool_max_size):
            connection = self.pool.getconn()
            if _still_connected(connection):
                return connection
            self.pool.putconn(connection)
        return self.pool.getconn()  # every one was stale: the pool made these since

    @contextlib.contextmanager
    def in_transaction(self) -> Iterator[psycopg.Connection]:
        """A pooled connection inside a transaction, committed at the end of the block."""
        with self.connection() as connection, connection.transaction():
            yield connection

    def wake_params(
        self, key: str, channel: str = "channel", payload: str = "key"
    ) -> dict[str, str]:
        """Bind parameters for ``pg_notify`` that wake ``key``'s receivers.

        For the engine's own wakes (queues, streams, schedules): equal ones in one
        transaction reach listeners once, as one wake says all there is to say.
        """
        return {channel: channel_identifier(self.settings.schema, key), payload: stored(key)}

    def notify_params(self, channel: str) -> dict[str, str]:
        """Bind parameters for ``pg_notify`` of a user's ``notify(channel)``.

        Each payload differs, so each notify is its own wake: PostgreSQL delivers
        equal notifications of one transaction only once.
        """
        return {
            "channel": channel_identifier(self.settings.schema, channel),
            "key": notify_payload(channel),
        }

    # Engine hooks

    def _close(self) -> None:
        self._listener.close()
        self.pool.close()

    def _notify(self, channel: str, payload_json: str) -> None:
        with translate(f"notify {channel!r}"), self.connection() as connection:
            connection.execute(self.sql.notify, self.notify_params(channel))

    def _watch(self, key: str) -> WakeReceiver:
        return self._listener.subscribe(key)

    def _stream(self, name: str) -> PostgresStream:
        return PostgresStream(self, name)

    def _queue(self, name: str, opts: QueueOpts) -> PostgresQueue:
        return PostgresQueue(self, name, opts)

    def _try_lock(self, name: str, owner: str, ttl_s: float) -> Lock | None:
        with translate(f"lock {name!r}"), self.connection() as connection:
            held = acquire(self, connection, name, owner, ttl_s)
        return PostgresLock(self, name, owner, ttl_s) if held else None

    def _schedule(
        self,
        name: str,
        spec: str,
        interval_s: int,
        queue: str,
        payload_json: str,
        opts: ScheduleOpts,
    ) -> Schedule:
        with translate(f"schedule {name!r}"), self.in_transaction() as connection:
            row = connection.execute(self.sql.get_schedule, {"name": stored(name)}).fetchone()
            if row is None:
                existing, now = None, connection.execute(self.sql.now).fetchone()[0]  # type: ignore[index]
            else:
                existing, now = PlacedSchedule(row[0], row[1], row[2]), row[3]
            placed = place_schedule(existing, spec, interval_s, now)
            connection.execute(
                self.sql.upsert_schedule,
                {
                    "name": stored(name), "spec": spec, "interval": interval_s,
                    "queue": stored(queue), "payload": payload_json, "priority": opts.priority,
                    "max_attempts": opts.max_attempts, "expires": opts.expires,
                    "anchor": placed.anchor, "next": placed.next_fire_at,
                },
            )  # fmt: skip
            connection.execute(self.sql.notify, self.wake_params(SCHEDULES_WAKE_KEY))
        return Schedule(name, spec, queue, decode(payload_json), placed.next_fire_at)

    def _unschedule(self, name: str) -> bool:
        with translate(f"unschedule {name!r}"), self.connection() as connection:
            return (
                connection.execute(self.sql.delete_schedule, {"name": stored(name)}).rowcount == 1
            )

    # The scheduler's storage primitives (core's loop calls them) live in _scheduler.
    _due_schedules = due_schedules
    _fire_boundary = fire_boundary
    _until_next_fire = until_next_fire

    def _inspect(self) -> PostgresInspector:
        return PostgresInspector(self)

    def _begin_tx(self) -> TxHandle:
        # BEGIN goes out with the handle's first statement (see PostgresTx).
        with translate("begin a transaction"):
            connection = self._checkout()
        return PostgresTx(self, connection, self.pool.putconn)

    def _adopt_tx(self, connection: Any) -> TxHandle:
        if not isinstance(connection, psycopg.Connection):
            raise TypeError(f"adopt_tx needs a psycopg.Connection, not {type(connection).__name__}")
        with translate("inspect the adopted connection"):
            found = connection.execute(self.sql.storage).fetchone()
            if found is None or found[0] is None:
                raise ValueError(
                    f"adopt_tx: the connection's database has no alkstore schema "
                    f"{self.settings.schema!r}; is it the store's database?"
                )
            if found != self._storage:
                raise ValueError(
                    f"adopt_tx: the connection reaches database {found[1]!r}, whose schema "
                    f"{self.settings.schema!r} is not this store's ({self.location}); adopt "
                    "a connection to the store's own database"
                )
            if connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                connection.execute("BEGIN")
        return PostgresTx(self, connection, None)


def _still_connected(connection: psycopg.Connection) -> bool:
    """Whether the server still serves ``connection``, an idle pooled one.

    Costs one zero-timeout ``poll`` when nothing arrived while it sat idle,
    the usual case. A server that ends a session sends its FATAL and closes
    the socket: something arrived, so read it; if the connection survives
    that, one empty query settles it (that costs a round trip, but only then).
    """
    if connection.closed:
        return False
    pgconn = connection.pgconn
    try:
        if not _readable(pgconn.socket):
            return True
        pgconn.consume_input()
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            return False
        connection.execute("")
    except psycopg.Error:
        return False
    return True


def _readable(descriptor: int) -> bool:
    """Whether ``descriptor`` has input (or end of file) waiting; never blocks."""
    if hasattr(select, "poll"):  # any descriptor number, unlike select.select
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([descriptor], [], [], 0)[0])
