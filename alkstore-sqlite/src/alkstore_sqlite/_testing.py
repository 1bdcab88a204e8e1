"""The contract suite's test provider: a fresh file in a temporary folder per store."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from alkstore.engine import StoreTarget, TestProvider

if TYPE_CHECKING:
    from alkstore.engine import Engine

__all__ = ["SQLiteTestProvider"]


class SQLiteTestProvider(TestProvider):
    """Each target is a new file in its own temporary folder."""

    def __init__(self, engine: Engine, options: Mapping[str, str]) -> None:
        super().__init__(engine, options)
        self._root = Path(tempfile.mkdtemp(prefix="alkstore-sqlite-tests-"))
        self._count = 0

    def create_target(self) -> StoreTarget:
        self._count += 1
        folder = self._root / str(self._count)
        folder.mkdir()
        return StoreTarget(str(folder / "store.db"))

    def drop_target(self, target: StoreTarget) -> None:
        shutil.rmtree(Path(target.target).parent, ignore_errors=True)

    def describe(self) -> str:
        import sqlite3  # noqa: PLC0415

        return f"SQLite {sqlite3.sqlite_version}, files under {self._root}"

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
