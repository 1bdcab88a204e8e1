"""The SQLite engine of alkstore (``alkstore.open("app.db")``).

This release registers the engine name and scheme; the engine itself is not
built yet, so opening a store raises ``NotImplementedError``.
"""

from __future__ import annotations

from typing import Any

from alkstore import Store
from alkstore.engine import Engine

__all__ = ["SQLiteEngine"]


class SQLiteEngine(Engine):
    """Stores in one SQLite file: bare paths and ``sqlite:///path`` targets."""

    name = "sqlite"
    schemes = ("sqlite",)

    def open(self, target: str, **options: Any) -> Store:
        raise NotImplementedError(
            "alkstore-sqlite 0.1.0.dev0 is a placeholder: the SQLite engine is not built yet"
        )
