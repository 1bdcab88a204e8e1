"""The PostgreSQL AsyncStore: native asyncio on ``psycopg.AsyncConnection``s.

The same plans as the sync store (``_plan``) run on a
``psycopg_pool.AsyncConnectionPool``; wakes come from one LISTEN connection
owned by a task on the event loop (``_async_wakes``). Nothing here starts a
thread. The cold paths (schedules and the scheduler loop, inspection,
locks, cancel, get_job, sweep) are core's defaults: they run on a small sync
``PostgresStore``, the *companion*, opened the first time one is used.

Cancellation: an operation cancelled at any await leaves nothing open. A
pooled connection goes back to the pool in a shielded step; one a
cancellation left in a transaction, mid-statement or mid-pipeline is closed
on the way (the server rolls back what it had open) and the pool makes a
new one.

The spare: an idle connection given back while no checkout waits on the
pool is kept in one slot for the next checkout, instead of going through
the pool's lock and a shielded task. Keeping it awaits nothing, so there is
nothing for a cancellation to cut; every 256th give-back, the first one a
minute after the last such turn, a closing store and a waiting checkout send
it through the pool as before, so the pool's rules (``max_lifetime``) reach it
in a quiet service too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from alkstore import QueueOpts
from alkstore.engine import AsyncStore, AsyncTxHandle, Store, WakeReceiver, wait_budget
from alkstore_postgres._async_queue import PostgresAsyncQueue
from alkstore_postgres._async_stream import PostgresAsyncStream
from alkstore_postgres._async_tx import PostgresAsyncTx
from alkstore_postgres._async_wakes import AsyncListener
from alkstore_postgres._capabilities import CAPABILITIES
from alkstore_postgres._connections import (
    RECONNECT_GIVE_UP_S,
    CheckoutClock,
    closed_if_pool_is,
    configure_listener_async,
    configure_session_async,
    connect_kwargs,
    has_input,
)
from alkstore_postgres._eager import shielded
from alkstore_postgres._errors import connect_errors, preparing_schema, translate
from alkstore_postgres._job_buffer import JobIds
from alkstore_postgres._plan import Plan, opening, run_plan_async, run_steps, run_steps_async
from alkstore_postgres._pool_log import pool_name, quiet_pool_noise
from alkstore_postgres._schema import migration
from alkstore_postgres._settings import Settings
from alkstore_postgres._sql import Statements
from alkstore_postgres._store_plans import adoption, notify

__all__ = ["PostgresAsyncStore"]

T = TypeVar("T")

_COMPANION_POOL_SIZE = 2
"""Connections the companion (cold paths only) opens at most."""

_SPARE_TURNS = 256
"""Every this many give-backs the spare goes through the pool, which then
applies its own rules to it (``max_lifetime``, its statistics)."""

_SPARE_TURN_S = 60.0
"""And at least this often, however few the give-backs."""


class PostgresAsyncStore(AsyncStore):
    """A store in one schema of a PostgreSQL database, for asyncio code.

    Open it with ``await alkstore.open_async("postgresql://...")``.
    """

    job_keys = True

    def __init__(
        self,
        conninfo: str,
        address: str,
        settings: Settings,
        pool: psycopg_pool.AsyncConnectionPool,
        storage: tuple[Any, ...] | None,
    ) -> None:
        super().__init__(
            f"PostgreSQL at {address}, schema {settings.schema}",
            CAPABILITIES,
            scheduler_lease_s=settings.scheduler_lease_s,
        )
        self.settings = settings
        self.sql = Statements(settings.schema)
        self.job_ids = JobIds(self.sql.reserve_job_ids)
        """Job ids reserved for enqueues in transactions (see ``_job_buffer``)."""
        self.pool = pool
        self._conninfo = conninfo
        self._address = address
        self._storage = storage
        """Which storage the store is in (see ``Statements.storage``), for adopt_tx."""
        # LISTEN goes to listen_dsn when given: it does not survive a transaction pooler.
        self._listen_conninfo, listen_address = settings.listen_target(conninfo, address)
        self._listener = AsyncListener(self._listener_connection, settings.schema, listen_address)
        self._spare: psycopg.AsyncConnection | None = None
        """An idle connection held back from the pool for the next checkout."""
        self._give_backs = 0
        self._pool_turn_at = time.monotonic() + _SPARE_TURN_S
        self._waiting_on_pool = 0
        """Checkouts of this store waiting for the pool now: while any does, a
        connection given back goes to the pool, where they wait for it."""

    @classmethod
    async def open(cls, conninfo: str, address: str, settings: Settings) -> PostgresAsyncStore:
        """Prepare the schema and open the pool; a cancelled open leaves nothing open.

        Raises:
            Database: the server cannot be reached, or the schema is not usable.
        """
        kwargs = connect_kwargs(conninfo, settings)
        with connect_errors(address):
            first = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
        configure = configure_session_async if settings.pooler != "transaction" else None
        try:
            if configure is not None:
                await configure(first)
            with preparing_schema(f"preparing schema {settings.schema!r}"):
                await run_plan_async(first, migration(settings.schema))
                cursor = await first.execute(Statements(settings.schema).storage)
                storage = await cursor.fetchone()
        finally:
            await first.close()
        quiet_pool_noise()
        pool = psycopg_pool.AsyncConnectionPool(
            conninfo,
            name=pool_name(),
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            kwargs=kwargs,
            configure=configure,
            timeout=settings.connect_timeout_s,
            reconnect_timeout=RECONNECT_GIVE_UP_S,
            open=False,
        )
        try:
            with connect_errors(address):
                await pool.open(wait=True, timeout=settings.connect_timeout_s)
        except BaseException:
            await asyncio.shield(pool.close())
            raise
        return cls(conninfo, address, settings, pool, storage)

    async def _listener_connection(self) -> psycopg.AsyncConnection:
        kwargs = connect_kwargs(self._listen_conninfo, self.settings)
        connection = await psycopg.AsyncConnection.connect(self._listen_conninfo, **kwargs)
        try:
            await configure_listener_async(connection)
        except BaseException:
            await asyncio.shield(connection.close())
            raise
        return connection

    @property
    def listener_reconnects(self) -> int:
        """How often the listener connection was lost and made again."""
        return self._listener.reconnects

    async def listening_channels(self) -> set[str]:
        """The channel identifiers the server listens to for this store, read from
        the listener connection itself (``pg_listening_channels()``). A diagnostic.

        Raises:
            Database: the listener connection is down.
        """
        self._check_open()
        return await self._listener.server_channels()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """A pooled connection (autocommit) for the block; given back however
        the block ends (see the module's docstring)."""
        self._check_open()
        connection = await self.checkout()
        try:
            yield connection
        finally:
            await self.give_back(connection)

    async def checkout(self) -> psycopg.AsyncConnection:
        """A pooled connection the server has not closed while it sat in the pool
        (see ``PostgresStore._checkout``); pair it with :meth:`give_back`."""
        spare, self._spare = self._spare, None
        if spare is not None and await self._usable(spare):
            return spare
        for _ in range(self.settings.pool_max_size):
            connection = await self._from_pool()
            if await self._usable(connection):
                return connection
        return await self._from_pool()  # every one was stale: the pool made these since

    async def _from_pool(self) -> psycopg.AsyncConnection:
        self._waiting_on_pool += 1
        try:
            clock = CheckoutClock(self.settings.connect_timeout_s, wait_budget, self.pool)
            for wait_s in clock.waits():
                with contextlib.suppress(psycopg_pool.PoolTimeout), closed_if_pool_is(self):
                    return await self.pool.getconn(timeout=wait_s)
            raise clock.gave_up()
        finally:
            self._waiting_on_pool -= 1

    async def _usable(self, connection: psycopg.AsyncConnection) -> bool:
        """Whether ``connection`` is still served; if not, it is given back."""
        try:
            connected = await _still_connected(connection)
        except BaseException:  # cancelled mid-check: the pool must not lose it
            await self.give_back(connection)
            raise
        if not connected:
            await self.give_back(connection)
        return connected

    async def give_back(self, connection: psycopg.AsyncConnection) -> None:
        """Keep ``connection`` as the spare, or return it to the pool, closing it
        first unless it is idle outside any transaction and pipeline. Shielded:
        a second cancellation cannot lose it half-way."""
        if not self._kept_as_spare(connection):
            await shielded(self._return(connection))

    def _kept_as_spare(self, connection: psycopg.AsyncConnection) -> bool:
        self._give_backs += 1
        if (
            self._spare is not None
            or self._closed
            or self._waiting_on_pool
            or self._pool_turn_due()
            or not _idle(connection)
        ):
            return False
        self._spare = connection
        return True

    def _pool_turn_due(self) -> bool:
        """Whether this give-back goes through the pool on its turn (see ``_SPARE_TURNS``
        and ``_SPARE_TURN_S``); a turn taken starts the clock again."""
        now = time.monotonic()
        if self._give_backs % _SPARE_TURNS and now < self._pool_turn_at:
            return False
        self._pool_turn_at = now + _SPARE_TURN_S
        return True

    async def _return(self, connection: psycopg.AsyncConnection) -> None:
        if not _idle(connection):
            await connection.close()
        await self.pool.putconn(connection)

    async def run(self, plan: Plan[T]) -> T:
        """Run ``plan`` (see ``_plan``) on a pooled connection, in one transaction
        if its ``Operation`` asks for one; driver errors become ``Database``."""
        operation = opening(plan)
        with translate(operation.action):
            async with self.connection() as connection:
                if operation.transaction:
                    async with connection.transaction():
                        return await run_steps_async(connection, plan)
                return await run_steps_async(connection, plan)

    # Engine hooks

    def _open_companion(self) -> Store:
        from alkstore_postgres._store import PostgresStore  # noqa: PLC0415

        settings = Settings.from_options(
            {
                "schema": self.settings.schema,
                "pool_min_size": 1,
                "pool_max_size": _COMPANION_POOL_SIZE,
                "connect_timeout_s": self.settings.connect_timeout_s,
                "scheduler_lease_s": self.settings.scheduler_lease_s,
                "pooler": self.settings.pooler,
                "listen_dsn": self.settings.listen_dsn,
            }
        )
        return PostgresStore(self._conninfo, self._address, settings)

    async def _close(self) -> None:
        try:
            await self._listener.close()
        finally:
            spare, self._spare = self._spare, None
            if spare is not None:
                await shielded(self._return(spare))
            await self.pool.close()

    async def _notify(self, channel: str, payload_json: str) -> None:
        await self.run(notify(self.sql, channel))

    async def _watch(self, key: str) -> WakeReceiver:
        return await self._listener.subscribe(key)

    def _stream(self, name: str) -> PostgresAsyncStream:
        return PostgresAsyncStream(self, name)

    def _queue(self, name: str, opts: QueueOpts) -> PostgresAsyncQueue:
        return PostgresAsyncQueue(self, name, opts)

    async def _begin_tx(self) -> AsyncTxHandle:
        # At once: the handle's connection property cannot await a BEGIN (see _tx_plans).
        with translate("begin a transaction"):
            connection = await self.checkout()
            try:
                await connection.execute("BEGIN")
            except BaseException:
                await self.give_back(connection)
                raise
        return PostgresAsyncTx(self, connection, adopted=False)

    async def _adopt_tx(self, connection: Any) -> AsyncTxHandle:
        if not isinstance(connection, (psycopg.AsyncConnection, psycopg.Connection)):
            raise TypeError(
                "adopt_tx needs a psycopg.AsyncConnection (or a psycopg.Connection), "
                f"not {type(connection).__name__}"
            )
        status = functools.partial(getattr, connection.info, "transaction_status")
        adopting = adoption(self.sql, self._storage, self.location, status)
        with translate(opening(adopting).action):
            if isinstance(connection, psycopg.AsyncConnection):
                await run_steps_async(connection, adopting)
            else:  # the caller's sync connection: used where the caller uses it
                run_steps(connection, adopting)
        return PostgresAsyncTx(self, connection, adopted=True)


def _idle(connection: psycopg.AsyncConnection) -> bool:
    """Whether ``connection`` is open and idle, outside any transaction and pipeline."""
    pgconn = connection.pgconn
    return (
        not connection.closed
        and pgconn.status == psycopg.pq.ConnStatus.OK
        and pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        and pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    )


async def _still_connected(connection: psycopg.AsyncConnection) -> bool:
    """Whether the server still serves ``connection``, an idle pooled one (see
    ``_connections.has_input``): costs a round trip only when input arrived."""
    if connection.closed:
        return False
    pgconn = connection.pgconn
    try:
        if not has_input(pgconn.socket):
            return True
        pgconn.consume_input()
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            return False
        await connection.execute("")
    except psycopg.Error:
        return False
    return True
