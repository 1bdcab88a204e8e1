"""The PostgreSQL Store: a connection pool, one listener connection, one schema."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from alkstore import Closed, QueueOpts, Schedule, ScheduleOpts
from alkstore.engine import Lock, Store, TxHandle, WakeReceiver, wait_budget
from alkstore_postgres._capabilities import CAPABILITIES
from alkstore_postgres._connections import (
    RECONNECT_GIVE_UP_S,
    CheckoutClock,
    closed_if_pool_is,
    configure_listener,
    configure_session,
    connect_kwargs,
    has_input,
)
from alkstore_postgres._errors import connect_errors, preparing_schema, translate
from alkstore_postgres._inspect import PostgresInspector
from alkstore_postgres._job_buffer import JobIds
from alkstore_postgres._lock import LapsedLocks, PostgresLock, acquire
from alkstore_postgres._plan import Plan, opening, run_plan, run_steps
from alkstore_postgres._pool_log import pool_name, quiet_pool_noise
from alkstore_postgres._queue import PostgresQueue
from alkstore_postgres._scheduler import due_schedules, fire_boundary, until_next_fire
from alkstore_postgres._schema import migration
from alkstore_postgres._settings import Settings
from alkstore_postgres._sql import Statements
from alkstore_postgres._store_plans import adoption, notify, schedule, unschedule
from alkstore_postgres._stream import PostgresStream
from alkstore_postgres._tx import PostgresTx
from alkstore_postgres._wakes import Listener

__all__ = ["PostgresStore"]

T = TypeVar("T")


class PostgresStore(Store):
    """A store in one schema of a PostgreSQL database, for many worker hosts."""

    job_keys = True
    cron_schedules = True  # the schedules table keeps tz (schema version 3)

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
        self._lapsed_locks = LapsedLocks()
        self._conninfo = conninfo
        self._connect_kwargs = connect_kwargs(conninfo, settings)
        with connect_errors(address):
            first = psycopg.connect(conninfo, **self._connect_kwargs)
        configure = configure_session if settings.pooler != "transaction" else None
        try:
            if configure is not None:
                configure(first)
            with preparing_schema(f"preparing schema {settings.schema!r}"):
                run_plan(first, migration(settings.schema))
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
            configure=configure,
            timeout=settings.connect_timeout_s,
            reconnect_timeout=RECONNECT_GIVE_UP_S,
            open=False,
        )
        with connect_errors(address):
            self.pool.open(wait=True, timeout=settings.connect_timeout_s)
        # LISTEN goes to listen_dsn when given: it does not survive a transaction pooler.
        self._listen_conninfo, listen_address = settings.listen_target(conninfo, address)
        self._listener = Listener(self._listener_connection, settings.schema, listen_address)

    def _listener_connection(self) -> psycopg.Connection:
        kwargs = connect_kwargs(self._listen_conninfo, self.settings)
        connection = psycopg.connect(self._listen_conninfo, **kwargs)
        try:
            configure_listener(connection)
        except BaseException:
            connection.close()
            raise
        return connection

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
            connection = self._from_pool()
            try:
                connected = _still_connected(connection)
            except BaseException:  # interrupted mid-check: the pool must not lose it
                self.pool.putconn(connection)
                raise
            if connected:
                return connection
            self.pool.putconn(connection)
        return self._from_pool()  # every one was stale: the pool made these since

    def _from_pool(self) -> psycopg.Connection:
        """A connection from the pool, asking again every ``CHECKOUT_SLICE_S``."""
        clock = CheckoutClock(self.settings.connect_timeout_s, wait_budget, self.pool)
        for wait_s in clock.waits():
            with contextlib.suppress(psycopg_pool.PoolTimeout), closed_if_pool_is(self):
                return self.pool.getconn(timeout=wait_s)
        raise clock.gave_up()

    def run(self, plan: Plan[T]) -> T:
        """Run ``plan`` (see ``_plan``) on a pooled connection, in one transaction
        if its :class:`Operation` asks for one; driver errors become ``Database``."""
        operation = opening(plan)
        with translate(operation.action), self.connection() as connection:
            if operation.transaction:
                with connection.transaction():
                    return run_steps(connection, plan)
            return run_steps(connection, plan)

    # Engine hooks

    def _close(self) -> None:
        self._listener.close()
        self.pool.close()

    def _notify(self, channel: str, payload_json: str) -> None:
        self.run(notify(self.sql, channel))

    def _watch(self, key: str) -> WakeReceiver:
        return self._listener.subscribe(key)

    def _stream(self, name: str) -> PostgresStream:
        return PostgresStream(self, name)

    def _queue(self, name: str, opts: QueueOpts) -> PostgresQueue:
        return PostgresQueue(self, name, opts)

    def _try_lock(self, name: str, owner: str, ttl_s: float) -> Lock | None:
        held = self.run(acquire(self.sql, name, owner, ttl_s, self._lapsed_locks))
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
        return self.run(schedule(self.sql, name, spec, interval_s, queue, payload_json, opts))

    def _unschedule(self, name: str) -> bool:
        return self.run(unschedule(self.sql, name))

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
        status = functools.partial(getattr, connection.info, "transaction_status")
        adopting = adoption(self.sql, self._storage, self.location, status)
        with translate(opening(adopting).action):
            run_steps(connection, adopting)
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
        if not has_input(pgconn.socket):
            return True
        pgconn.consume_input()
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            return False
        connection.execute("")
    except psycopg.Error:
        return False
    return True
