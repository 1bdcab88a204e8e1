"""Fixtures for the SQLite engine's own tests: real files in a temporary folder."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import alkstore
from alkstore_sqlite import SQLiteStore

# The same profiles as alkstore-core's tests (one pytest run loads both);
# database-backed property tests lower max_examples themselves.
settings.register_profile(
    "dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=300, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "app.db")


@pytest.fixture
def store(path: str) -> Iterator[SQLiteStore]:
    opened = alkstore.open(path)
    assert isinstance(opened, SQLiteStore)
    yield opened
    opened.close()


@pytest.fixture
def peer(store: SQLiteStore) -> Iterator[SQLiteStore]:
    """A second store on the same file, as another process would have."""
    opened = alkstore.open(store.path)
    assert isinstance(opened, SQLiteStore)
    yield opened
    opened.close()


def restore_from_backup(path: str) -> None:
    """What a restore does: a backup copy moved over the live file in one rename."""
    copy = f"{path}.restored"
    source, target = sqlite3.connect(path), sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    os.replace(copy, path)


FileSwap = tuple[Callable[[str], None], str]
"""A way the file goes from under an open store, and what the error says of it."""


@pytest.fixture(
    params=[(restore_from_backup, "was replaced by another file"), (os.remove, "is gone")],
    ids=["replaced", "deleted"],
)
def file_swap(request: pytest.FixtureRequest) -> FileSwap:
    swap: FileSwap = request.param
    return swap
