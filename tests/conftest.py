"""Fixtures for the whole-product tests: one store per test on each engine, by DSN only.

These tests use alkstore as an application or an operator does — through a
DSN string, the ``alkstore`` command and the example app — so each runs once
on SQLite and once on PostgreSQL. The server is ``ALKSTORE_PG_DSN``, else a
throwaway cluster made with the machine's PostgreSQL binaries.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import psycopg
import pytest

from alkstore_postgres.testing import throwaway_cluster


@pytest.fixture(scope="session", autouse=True)
def shared_bytecode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Let the many short-lived subprocesses share compiled bytecode.

    With ``PYTHONDONTWRITEBYTECODE`` set (as on CI machines) each one would
    compile psycopg and alkstore afresh, a third of a second apiece.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        patch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("pycache")))
        yield


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    found = os.environ.get("ALKSTORE_PG_DSN")
    if found:
        yield found
        return
    with throwaway_cluster() as server:
        yield server.dsn


@pytest.fixture(params=["sqlite", "postgres"])
def dsn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A DSN naming a fresh, empty store: a new SQLite file, or a new Postgres schema."""
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
        return
    server: str = request.getfixturevalue("server_dsn")
    schema = f"alkstore_product_{uuid.uuid4().hex[:12]}"
    yield f"{server}{'&' if '?' in server else '?'}schema={schema}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def app_dsn(dsn: str) -> str:
    """The store's DSN; on PostgreSQL with the store's schema as the search path, so
    an example app's own tables go there too and are dropped with it. In the
    default schema, runs side by side (two Pythons of the test matrix) dropped
    each other's tables."""
    if not dsn.startswith("postgresql"):
        return dsn
    (schema,) = parse_qs(urlsplit(dsn).query)["schema"]
    return f"{dsn}&options={quote(f'-csearch_path={schema}')}"
