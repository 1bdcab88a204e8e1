"""What tests of the engine need: the contract suite's provider, a fresh file
in a temporary folder per store."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from alkstore.engine import Store, StoreTarget, TestProvider, TxHandle

if TYPE_CHECKING:
    from alkstore.engine import Engine

__all__ = ["SQLiteTestProvider"]

_BUSINESS_TABLE = "CREATE TABLE business (key TEXT NOT NULL)"


class SQLiteTestProvider(TestProvider):
    """Each target is a new file in its own temporary folder."""

    speaks_sql = True

    def __init__(self, engine: Engine, options: Mapping[str, str]) -> None:
        super().__init__(engine, options)
        self._root = Path(tempfile.mkdtemp(prefix="alkstore-sqlite-tests-"))
        self._count = 0

    scheduler_lease_s = 0.6

    def create_target(self) -> StoreTarget:
        self._count += 1
        folder = self._root / str(self._count)
        folder.mkdir()
        target = StoreTarget(
            str(folder / "store.db"), {"scheduler_lease_s": self.scheduler_lease_s}
        )
        # The business table exists before any transaction writes to it: DDL inside
        # the business write would be no test of an engine that commits on DDL.
        self._backdoor(target, _BUSINESS_TABLE, ())
        return target

    def drop_target(self, target: StoreTarget) -> None:
        shutil.rmtree(Path(target.target).parent, ignore_errors=True)

    def driver_connection(self, target: StoreTarget) -> sqlite3.Connection:
        """A ``sqlite3.Connection`` to the target's file, as an application opens one."""
        return sqlite3.connect(target.target, timeout=10)

    def other_storage_target(self, target: StoreTarget) -> StoreTarget:
        """Another file: no two targets share one."""
        return self.create_target()

    def write_business_row(self, tx: TxHandle, key: str) -> None:
        tx.execute("INSERT INTO business (key) VALUES (?)", (key,))

    def business_rows(self, store: Store) -> set[str]:
        with store.transaction() as tx:
            return {row[0] for row in tx.execute("SELECT key FROM business")}

    def expire_lock(self, target: StoreTarget, name: str) -> None:
        self._backdoor(target, "UPDATE __alkstore_locks SET expires_at = 0 WHERE name = ?", (name,))

    def shift_schedule(self, target: StoreTarget, name: str, by_s: float) -> None:
        self._backdoor(
            target,
            "UPDATE __alkstore_schedules SET next_fire_at = next_fire_at + ? WHERE name = ?",
            (by_s, name),
        )

    def commit_behind_its_back(self, tx: TxHandle) -> None:
        tx.execute("COMMIT")

    def break_wakes(self, store: Store) -> None:
        """Drop the table of notices the store's watcher reads after every commit:
        the drop is itself a commit, so the watcher looks, fails, and stays dead."""
        path = store.path  # type: ignore[attr-defined]
        self._backdoor(StoreTarget(path), "DROP TABLE __alkstore_notices", ())

    def _backdoor(self, target: StoreTarget, sql: str, params: tuple[object, ...]) -> None:
        connection = sqlite3.connect(target.target, timeout=10)
        try:
            with connection:
                connection.execute(sql, params)
        finally:
            connection.close()

    def describe(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}, files under {self._root}"

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
