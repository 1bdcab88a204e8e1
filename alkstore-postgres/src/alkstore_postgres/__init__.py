"""The PostgreSQL engine of alkstore: ``alkstore.open("postgresql://...")``.

Every mechanism lives in one engine-owned schema (default ``alkstore``) of
the application's database; any number of processes on any number of hosts
share it. Options (keywords of ``alkstore.open`` or DSN query parameters):
``schema``, ``pool_min_size``, ``pool_max_size``, ``connect_timeout_s`` and
``scheduler_lease_s``.

Importing this package does not import psycopg (discovery may load every
engine to find one for a scheme): ``PostgresStore`` and ``Settings`` are
imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from alkstore.engine import Engine, TestProvider
from alkstore_postgres._capabilities import CAPABILITIES

if TYPE_CHECKING:
    from alkstore_postgres._settings import Settings
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresEngine", "PostgresStore", "Settings"]


class PostgresEngine(Engine):
    """Stores in a PostgreSQL database: ``postgres://`` and ``postgresql://`` targets."""

    name = "postgres"
    schemes = ("postgres", "postgresql")
    contract_version = "1.0"
    capabilities = CAPABILITIES

    def open(self, target: str, **options: Any) -> PostgresStore:
        from alkstore_postgres._settings import Settings, parse_target  # noqa: PLC0415
        from alkstore_postgres._store import PostgresStore  # noqa: PLC0415

        conninfo, dsn_options, address = parse_target(target)
        settings = Settings.from_options({**dsn_options, **options})
        return PostgresStore(conninfo, address, settings)

    def test_provider(self, options: Mapping[str, str]) -> TestProvider:
        from alkstore_postgres.testing import PostgresTestProvider  # noqa: PLC0415

        return PostgresTestProvider(self, options)


def __getattr__(name: str) -> Any:
    """``PostgresStore`` and ``Settings``, imported (with psycopg) when first asked for."""
    if name == "PostgresStore":
        from alkstore_postgres._store import PostgresStore  # noqa: PLC0415

        return PostgresStore
    if name == "Settings":
        from alkstore_postgres._settings import Settings  # noqa: PLC0415

        return Settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
