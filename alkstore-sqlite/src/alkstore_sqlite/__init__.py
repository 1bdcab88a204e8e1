"""The SQLite engine of alkstore: ``alkstore.open("app.db")``.

Every mechanism lives in the application's own SQLite file, in tables named
``__alkstore_*``: no server, any number of threads and processes. Targets: a
path (``app.db``, ``/srv/app.db``) or a URL in SQLAlchemy's form,
``sqlite:///relative.db`` or ``sqlite:////abs/path.db`` (``sqlite+pysqlite://``
too). Options (keywords of ``alkstore.open`` or the URL's query parameters):
``durability`` (``"normal"`` or ``"full"``), ``busy_timeout_s``,
``watch_interval_s`` and ``scheduler_lease_s``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from alkstore.engine import Engine, TestProvider
from alkstore_sqlite._capabilities import CAPABILITIES
from alkstore_sqlite._settings import Settings, parse_target
from alkstore_sqlite._store import SQLiteStore

__all__ = ["SQLiteEngine", "SQLiteStore", "Settings"]

_MIN_SQLITE = (3, 35, 0)  # UPDATE ... RETURNING


class SQLiteEngine(Engine):
    """Stores in one SQLite file: paths, ``sqlite:///relative.db`` and ``sqlite:////abs.db``."""

    name = "sqlite"
    schemes = ("sqlite",)
    contract_version = "1.8"
    capabilities = CAPABILITIES

    def open(self, target: str, **options: Any) -> SQLiteStore:
        if sqlite3.sqlite_version_info < _MIN_SQLITE:
            raise RuntimeError(
                f"alkstore-sqlite needs SQLite 3.35 or newer; this Python has "
                f"{sqlite3.sqlite_version}"
            )
        path, url_options = parse_target(target)
        settings = Settings.from_options({**url_options, **options})
        return SQLiteStore(path, settings)

    def test_provider(self, options: Mapping[str, str]) -> TestProvider:
        from alkstore_sqlite.testing import SQLiteTestProvider  # noqa: PLC0415

        return SQLiteTestProvider(self, options)
