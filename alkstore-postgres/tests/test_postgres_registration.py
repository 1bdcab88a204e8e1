"""The distribution registers the ``postgres`` engine where core looks for it."""

from __future__ import annotations

import pytest

import alkstore
from alkstore_postgres import PostgresEngine


def test_the_postgres_engine_is_installed_for_both_schemes() -> None:
    info = alkstore.engines()["postgres"]
    assert info.distribution == "alkstore-postgres"
    assert info.schemes == ("postgres", "postgresql")
    assert alkstore.engine.load_engine("postgres").__class__ is PostgresEngine


def test_it_declares_the_notify_payload_limit() -> None:
    assert PostgresEngine.capabilities.notify_payload_limit == 8000


@pytest.mark.parametrize("target", ["postgres://u@h/db", "postgresql://u@h/db"])
def test_opening_says_the_engine_is_not_built_yet(target: str) -> None:
    with pytest.raises(NotImplementedError, match="placeholder"):
        alkstore.open(target)
