"""The distribution registers the ``sqlite`` engine where core looks for it."""

from __future__ import annotations

import pytest

import alkstore
from alkstore_sqlite import SQLiteEngine


def test_the_sqlite_engine_is_installed_for_bare_paths_and_sqlite_urls() -> None:
    info = alkstore.engines()["sqlite"]
    assert info.distribution == "alkstore-sqlite"
    assert info.schemes == ("sqlite",)
    assert alkstore.engine.load_engine("sqlite").__class__ is SQLiteEngine


def test_opening_says_the_engine_is_not_built_yet() -> None:
    with pytest.raises(NotImplementedError, match="placeholder"):
        alkstore.open("app.db")
