"""The PostgreSQL engine of alkstore: ``alkstore.open("postgresql://...")``.

Every mechanism lives in one engine-owned schema (default ``alkstore``) of
the application's database; any number of processes on any number of hosts
share it. Options (keywords of ``alkstore.open`` or DSN query parameters):
``schema``, ``pool_min_size``, ``pool_max_size``, ``connect_timeout_s``,
``scheduler_lease_s``, and for a DSN that goes through PgBouncer in
transaction mode ``pooler="transaction"`` with ``listen_dsn`` (a direct
connection for LISTEN; see docs/pgbouncer.md).

``alkstore.open_async`` gives a native ``PostgresAsyncStore``
(``psycopg.AsyncConnection``s, LISTEN on the event loop, no thread).

Importing this package does not import psycopg (discovery may load every
engine to find one for a scheme): ``PostgresStore``, ``PostgresAsyncStore``
and ``Settings`` are imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from alkstore.engine import Engine, TestProvider
from alkstore_postgres._capabilities import CAPABILITIES

if TYPE_CHECKING:
    from alkstore_postgres._async_store import PostgresAsyncStore
    from alkstore_postgres._settings import Settings
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresAsyncStore", "PostgresEngine", "PostgresStore", "Settings"]


class PostgresEngine(Engine):
    """Stores in a PostgreSQL database: ``postgres://`` and ``postgresql://`` targets."""

    name = "postgres"
    schemes = ("postgres", "postgresql")
    contract_version = "1.8"
    capabilities = CAPABILITIES

    def open(self, target: str, **options: Any) -> PostgresStore:
        from alkstore_postgres._settings import Settings, parse_target  # noqa: PLC0415
        from alkstore_postgres._store import PostgresStore  # noqa: PLC0415

        conninfo, dsn_options, address = parse_target(target)
        settings = Settings.from_options({**dsn_options, **options})
        return PostgresStore(conninfo, address, settings)

    async def open_async(self, target: str, **options: Any) -> PostgresAsyncStore:
        """A native async store (``alkstore.open_async``): the options and errors of
        :meth:`open`, on psycopg's ``AsyncConnection`` and ``AsyncConnectionPool``."""
        from alkstore_postgres._async_store import PostgresAsyncStore  # noqa: PLC0415
        from alkstore_postgres._settings import Settings, parse_target  # noqa: PLC0415

        conninfo, dsn_options, address = parse_target(target)
        settings = Settings.from_options({**dsn_options, **options})
        return await PostgresAsyncStore.open(conninfo, address, settings)

    def test_provider(self, options: Mapping[str, str]) -> TestProvider:
        from alkstore_postgres.testing import PostgresTestProvider  # noqa: PLC0415

        return PostgresTestProvider(self, options)


def __getattr__(name: str) -> Any:
    """``PostgresStore``, ``PostgresAsyncStore`` and ``Settings``, imported (with
    psycopg) when first asked for."""
    if name == "PostgresAsyncStore":
        from alkstore_postgres._async_store import PostgresAsyncStore  # noqa: PLC0415

        return PostgresAsyncStore
    if name == "PostgresStore":
        from alkstore_postgres._store import PostgresStore  # noqa: PLC0415

        return PostgresStore
    if name == "Settings":
        from alkstore_postgres._settings import Settings  # noqa: PLC0415

        return Settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
