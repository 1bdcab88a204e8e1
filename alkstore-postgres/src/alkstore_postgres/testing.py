"""What tests of the engine, and of applications on it, need.

``PostgresTestProvider`` is the contract suite's provider: a fresh schema per
store. ``throwaway_cluster()`` starts a private PostgreSQL server from the
machine's binaries for as long as its ``with`` block runs (a
``ThrowawayServer``: its DSN, and ``stop()``/``start()`` for outage tests).
``pgbouncer(dsn)`` starts the machine's PgBouncer in transaction-pooling mode
in front of a server for its block (a ``PgBouncer``: its ``dsn``).

The server is ``--alkstore-option dsn=...``, else ``ALKSTORE_PG_DSN``, else a
throwaway cluster the provider makes with the machine's PostgreSQL binaries.
No server is a failure with the reason, never a silent skip. With
``--alkstore-option pooler=pgbouncer`` the suite's stores reach that server
through a PgBouncer in transaction mode the provider starts, opened with
``pooler="transaction"`` and a direct ``listen_dsn``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import sql

from alkstore.engine import AsyncStore, AsyncTxHandle, Store, StoreTarget, TestProvider, TxHandle
from alkstore_postgres._names import channel_identifier, stored
from alkstore_postgres._pgbouncer import PgBouncer, find_pgbouncer, pgbouncer
from alkstore_postgres._sql import render, render_bound
from alkstore_postgres._store import PostgresStore
from alkstore_postgres._throwaway import ThrowawayServer, throwaway_cluster
from alkstore_postgres._tx import PostgresTx

if TYPE_CHECKING:
    from alkstore.engine import Engine

__all__ = [
    "PgBouncer", "PostgresTestProvider", "ThrowawayServer", "find_pgbouncer", "pgbouncer",
    "throwaway_cluster",
]  # fmt: skip

_BUSINESS_TABLE = "CREATE SCHEMA {s}; CREATE TABLE {s}.business (key text NOT NULL)"
"""Made with the target, before any transaction: DDL inside the business write
would be no test of an engine that commits on DDL (MariaDB, MySQL)."""


class PostgresTestProvider(TestProvider):
    """Each target is a new schema on one server; dropped afterwards."""

    speaks_sql = True

    option_help: ClassVar[Mapping[str, str]] = {
        "dsn": "the PostgreSQL server to test against",
        "pooler": (
            "pgbouncer: reach the server through a PgBouncer in transaction-pooling mode "
            "the provider starts (the machine's pgbouncer binary), wakes on a direct listen_dsn"
        ),
    }
    scheduler_lease_s = 0.6

    def __init__(self, engine: Engine, options: Mapping[str, str]) -> None:
        super().__init__(engine, options)
        self._resources = contextlib.ExitStack()
        self._throwaway = False
        dsn = options.get("dsn") or os.environ.get("ALKSTORE_PG_DSN")
        self.dsn = dsn if dsn else self._start_server()
        """The server itself: the listen_dsn of pooled targets, and the admin's way in."""
        self._other_dsn: str | None = None
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            self._version = connection.info.server_version
        self.bouncer = self._start_pooler(options.get("pooler", ""))
        """The PgBouncer the targets go through, or None (``pooler=pgbouncer``)."""

    def _start_pooler(self, pooler: str) -> PgBouncer | None:
        if not pooler:
            return None
        if pooler != "pgbouncer":
            raise ValueError(
                f"--alkstore-option pooler={pooler}: the one pooler known is pgbouncer"
            )
        try:
            return self._resources.enter_context(pgbouncer(self.dsn))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            self._resources.close()
            raise ValueError(f"--alkstore-option pooler=pgbouncer: {exc}") from exc

    def _start_server(self) -> str:
        try:
            server = self._resources.enter_context(throwaway_cluster())
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            raise ValueError(
                f"no PostgreSQL server to test against: give --alkstore-option dsn=... or "
                f"set ALKSTORE_PG_DSN ({exc})"
            ) from exc
        self._throwaway = True
        return server.dsn

    def create_target(self) -> StoreTarget:
        schema = f"alkstore_test_{uuid.uuid4().hex[:16]}"
        target = self._target(
            self.dsn, {"schema": schema, "scheduler_lease_s": self.scheduler_lease_s}
        )
        self._sql(target, _BUSINESS_TABLE)
        return target

    def _target(self, server_dsn: str, options: dict[str, Any]) -> StoreTarget:
        """A target on ``server_dsn``'s database, through the pooler if there is one
        (its wakes then on ``server_dsn`` itself)."""
        if self.bouncer is None:
            return StoreTarget(server_dsn, options)
        pooled = psycopg.conninfo.make_conninfo(
            server_dsn, host="127.0.0.1", port=str(self.bouncer.port)
        )
        return StoreTarget(pooled, {**options, "pooler": "transaction", "listen_dsn": server_dsn})

    def _driver_kwargs(self) -> dict[str, Any]:
        # Behind PgBouncer 1.18 an application turns psycopg's prepared statements off too.
        return {} if self.bouncer is None else {"prepare_threshold": None}

    def drop_target(self, target: StoreTarget) -> None:
        self._sql(target, "DROP SCHEMA IF EXISTS {s} CASCADE")

    def driver_connection(self, target: StoreTarget) -> psycopg.Connection:
        """A ``psycopg.Connection`` to the target's database, as an application opens one
        (not in autocommit: psycopg begins a transaction with its first statement)."""
        return psycopg.connect(target.target, **self._driver_kwargs())

    async def async_driver_connection(self, target: StoreTarget) -> psycopg.AsyncConnection[Any]:
        """:meth:`driver_connection` for the suite's async mode: a ``psycopg.AsyncConnection``."""
        return await psycopg.AsyncConnection.connect(target.target, **self._driver_kwargs())

    def other_storage_target(self, target: StoreTarget) -> StoreTarget:
        """The same schema in another database of the server: the likeliest mix-up, as
        every database's default alkstore schema is ``alkstore``. (Another schema in
        the same database is no other storage: a connection reaches both.)"""
        options = {k: v for k, v in target.options.items() if k not in ("pooler", "listen_dsn")}
        return self._target(self._other_database(), options)

    def _other_database(self) -> str:
        """The DSN of a database made once per session for :meth:`other_storage_target`
        (dropped at :meth:`close`)."""
        if self._other_dsn is None:
            name = f"alkstore_test_other_{uuid.uuid4().hex[:16]}"
            with psycopg.connect(self.dsn, autocommit=True) as connection:
                try:
                    connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise NotImplementedError(f"the server refuses CREATE DATABASE: {exc}") from exc
            self._resources.callback(self._drop_database, name)
            self._other_dsn = psycopg.conninfo.make_conninfo(self.dsn, dbname=name)
        return self._other_dsn

    def _drop_database(self, name: str) -> None:
        force = sql.SQL(" WITH (FORCE)" if self._version >= 130_000 else "")
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}{}").format(sql.Identifier(name), force)
            )

    def write_business_row(self, tx: TxHandle, key: str) -> None:
        assert isinstance(tx, PostgresTx)
        tx.execute(render_bound("INSERT INTO {s}.business (key) VALUES (%s)", tx.schema), (key,))

    async def write_business_row_async(self, tx: AsyncTxHandle, key: str) -> None:
        """:meth:`write_business_row` for the suite's async mode."""
        from alkstore_postgres._async_tx import PostgresAsyncTx  # noqa: PLC0415

        assert isinstance(tx, PostgresAsyncTx)
        await tx.execute(
            render_bound("INSERT INTO {s}.business (key) VALUES (%s)", tx.schema), (key,)
        )

    def business_rows(self, store: Store) -> set[str]:
        assert isinstance(store, PostgresStore)
        with store.transaction() as tx:
            rows = tx.execute(render_bound("SELECT key FROM {s}.business", store.settings.schema))
            return {row[0] for row in rows}

    def expire_lock(self, target: StoreTarget, name: str) -> None:
        self._sql(
            target,
            "UPDATE {s}.locks SET expires_at = 0 WHERE name_key = {name_key}",
            {"name": stored(name)},
        )

    def shift_schedule(self, target: StoreTarget, name: str, by_s: float) -> None:
        self._sql(
            target,
            "UPDATE {s}.schedules SET next_fire_at = next_fire_at + %(by)s "
            "WHERE name_key = {name_key}",
            {"by": by_s, "name": stored(name)},
        )

    def commit_behind_its_back(self, tx: TxHandle) -> None:
        tx.execute("COMMIT")

    def break_wakes(self, store: Store) -> None:
        """Terminate the server backend of the store's LISTEN connection.

        The listener is found by a LISTEN only it runs: a probe channel of its
        own, whose LISTEN is its backend's last statement until the kill.
        """
        probe_channel = f"break-wakes-{uuid.uuid4().hex}"
        with store.listen(probe_channel):
            assert isinstance(store, PostgresStore)
            self._terminate_listener(store.settings.schema, probe_channel)

    async def break_wakes_async(self, store: AsyncStore) -> None:
        """:meth:`break_wakes` for the native async store (its LISTEN connection is
        owned by a task on the event loop)."""
        from alkstore_postgres._async_store import PostgresAsyncStore  # noqa: PLC0415

        assert isinstance(store, PostgresAsyncStore)
        probe_channel = f"break-wakes-{uuid.uuid4().hex}"
        with await store.listen(probe_channel):
            await asyncio.to_thread(self._terminate_listener, store.settings.schema, probe_channel)

    def _terminate_listener(self, schema: str, probe_channel: str) -> None:
        identifier = channel_identifier(schema, probe_channel)
        statement = sql.SQL("LISTEN {}").format(sql.Identifier(identifier)).as_string(None)
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            killed = connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                (statement,),
            ).fetchall()
        if killed != [(True,)]:
            raise RuntimeError(f"break_wakes: expected one listener backend, found {killed}")

    def _sql(
        self, target: StoreTarget, template: str, params: dict[str, Any] | None = None
    ) -> None:
        """Run ``template`` (see ``_sql.render``) in the target's schema."""
        with psycopg.connect(target.target, autocommit=True) as connection:
            connection.execute(render(template, target.options["schema"]), params)

    def describe(self) -> str:
        major, minor = divmod(self._version, 10_000)
        where = "a throwaway cluster" if self._throwaway else "the given server"
        through = (
            ""
            if self.bouncer is None
            else f", through {self.bouncer.version} in transaction mode on port {self.bouncer.port}"
        )
        return f"PostgreSQL {major}.{minor} ({where}){through}"

    def close(self) -> None:
        self._resources.close()
