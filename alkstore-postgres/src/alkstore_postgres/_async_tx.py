"""Transactions of the async store, on a pooled ``AsyncConnection`` or the caller's own.

The statements are the sync handle's (``_tx_plans``). A pooled handle sends
BEGIN when it begins and holds nothing back (its ``connection`` property
cannot await a flush). Whatever ends the handle (commit, rollback, a failed
or cancelled statement followed by either) gives its connection back to the
pool in a shielded step, closed first unless it is idle: a cancellation can
leave it in a transaction or mid-statement, and the server then rolls back
what it had open. A handle forgotten without an end is closed when it is
collected.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import psycopg_pool

from alkstore.engine import AsyncTxHandle, JobStamp, Params
from alkstore_postgres._errors import translate
from alkstore_postgres._plan import Operation, Plan, Statement, opening, run_steps, run_steps_async
from alkstore_postgres._tx_plans import TxPlans

if TYPE_CHECKING:
    from alkstore_postgres._async_store import PostgresAsyncStore

__all__ = ["PostgresAsyncTx"]

T = TypeVar("T")


class PostgresAsyncTx(AsyncTxHandle):
    """An open transaction. Notifies sent in it are delivered at commit only,
    by PostgreSQL itself."""

    paramstyle = "pyformat"  # psycopg: %(name)s

    _store: PostgresAsyncStore

    def __init__(
        self,
        store: PostgresAsyncStore,
        connection: psycopg.AsyncConnection | psycopg.Connection,
        *,
        adopted: bool,
    ) -> None:
        super().__init__(store)
        self._connection = connection
        self._adopted = adopted
        self._plans = TxPlans(store.sql, store.job_ids, connection, begun=True, holds_back=False)
        self._given_back = adopted
        # A forgotten handle must not hold its connection (and its locks) forever.
        self._abandon = (
            None
            if adopted or not isinstance(connection, psycopg.AsyncConnection)
            else weakref.finalize(
                self,
                _close_abandoned,
                connection,
                store.pool,
                asyncio.get_running_loop(),
                os.getpid(),
            )
        )

    def __repr__(self) -> str:
        owned = "" if self.owner is None else f", in {self.owner}'s transaction"
        return f"<{type(self).__name__} {self.state.value}, {self._plans.describe()}{owned}>"

    @property
    def schema(self) -> str:
        """The schema of this transaction's store, for business SQL that joins
        alkstore's tables (``{schema}.jobs``, ...)."""
        return self._store.settings.schema

    @property
    def connection(self) -> psycopg.AsyncConnection | psycopg.Connection:
        """The connection this transaction runs on (begun): a ``psycopg.AsyncConnection``,
        or the ``psycopg.Connection`` the caller adopted."""
        return self._connection

    async def _run(self, plan: Plan[T]) -> T:
        with translate(opening(plan).action):
            if isinstance(self._connection, psycopg.AsyncConnection):
                return await run_steps_async(self._connection, plan)
            # An adopted sync connection is used where its caller uses it, as core's
            # default does: its driver may forbid any other thread.
            return run_steps(self._connection, plan)

    async def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        await self._check_still_open()
        return await self._run(self._plans.enqueue(queue, stamp, payload_json))

    async def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        await self._check_still_open()
        return await self._run(self._plans.publish(stream, key, payload_json))

    async def _notify_tx(self, channel: str, payload_json: str) -> None:
        await self._check_still_open()
        await self._run(self._plans.notify(channel))

    async def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        await self._check_still_open()
        return await self._run(self._plans.save_offset(stream, consumer, offset))

    async def _execute(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        await self._check_still_open()
        rows = await self._run(self._plans.execute(sql, params))
        await self._check_still_open()
        return rows

    async def _commit(self) -> None:
        await self._check_still_open()
        try:
            await self._run(self._plans.commit())
        finally:
            await self._end()

    async def _rollback(self) -> None:
        self._plans.discard()
        await self._check_still_open()
        try:
            if not self._connection.closed:  # a closed one's server rolled back
                await self._run(_rollback())
        finally:
            await self._end()

    async def _check_still_open(self) -> None:
        """Refuse to go on once the transaction ended through the driver (see
        ``TxPlans.ended_by_driver``)."""
        if not self._plans.ended_by_driver():
            return
        if self._adopted:
            raise self._ended_by_its_caller()
        await self._end()
        raise self._ended_elsewhere()

    async def _end(self) -> None:
        """Give a pooled connection back (see ``PostgresAsyncStore.give_back``); once."""
        if self._given_back:
            return
        self._given_back = True
        if self._abandon is not None:
            self._abandon.detach()
        assert isinstance(self._connection, psycopg.AsyncConnection)
        await self._store.give_back(self._connection)


def _rollback() -> Plan[None]:
    yield Operation("rollback")
    yield Statement("ROLLBACK")


def _close_abandoned(
    connection: psycopg.AsyncConnection,
    pool: psycopg_pool.AsyncConnectionPool,
    loop: asyncio.AbstractEventLoop,
    opened_in: int,
) -> None:
    """A handle was collected without an end: close its connection (the server
    rolls back) and give it back to the pool, which makes a new one. Not in a
    forked child: the connection is the parent's (see ``alkstore._fork``)."""
    if os.getpid() != opened_in:
        return
    connection.pgconn.finish()
    with contextlib.suppress(RuntimeError):  # the loop is closed: so is the pool
        loop.call_soon_threadsafe(_put_back, connection, pool)


def _put_back(connection: psycopg.AsyncConnection, pool: psycopg_pool.AsyncConnectionPool) -> None:
    task = asyncio.ensure_future(pool.putconn(connection))
    task.add_done_callback(_ignore_outcome)


def _ignore_outcome(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()
