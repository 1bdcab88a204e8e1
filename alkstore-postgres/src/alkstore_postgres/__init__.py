"""The PostgreSQL engine of alkstore (``alkstore.open("postgresql://...")``).

This release registers the engine name and schemes; the engine itself is not
built yet, so opening a store raises ``NotImplementedError``.
"""

from __future__ import annotations

from typing import Any

from alkstore import Store
from alkstore.engine import Capabilities, Engine

__all__ = ["PostgresEngine"]


class PostgresEngine(Engine):
    """Stores in a PostgreSQL database: ``postgres://`` and ``postgresql://`` targets."""

    name = "postgres"
    schemes = ("postgres", "postgresql")
    capabilities = Capabilities(
        notify_payload_limit=8000, wakes_coalesce=False, reconnect_wakes=True
    )

    def open(self, target: str, **options: Any) -> Store:
        raise NotImplementedError(
            "alkstore-postgres 0.1.0.dev0 is a placeholder: the PostgreSQL engine is not built yet"
        )
