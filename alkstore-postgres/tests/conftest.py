"""Fixtures for the PostgreSQL engine's own tests: a real server, a fresh schema each.

The server is ``ALKSTORE_PG_DSN``; without it the tests fail with the reason
(never skip silently).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

import alkstore
from alkstore_postgres import PostgresStore
from alkstore_postgres.testing import ThrowawayServer, throwaway_cluster

OpenStore = Callable[..., PostgresStore]


@pytest.fixture(scope="session")
def dsn() -> Iterator[str]:
    found = os.environ.get("ALKSTORE_PG_DSN")
    if not found:
        with throwaway_cluster() as server:
            yield server.dsn
        return
    try:
        psycopg.connect(found, connect_timeout=5).close()
    except psycopg.Error as exc:
        pytest.fail(f"ALKSTORE_PG_DSN does not answer: {exc}")
    yield found


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    name = f"alkstore_pgtest_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def open_store(dsn: str, schema: str) -> Iterator[OpenStore]:
    opened: list[PostgresStore] = []

    def opener(**options: object) -> PostgresStore:
        store = alkstore.open(dsn, schema=schema, **options)
        assert isinstance(store, PostgresStore)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> PostgresStore:
    return open_store()


@pytest.fixture
def throwaway_server() -> Iterator[ThrowawayServer]:
    """A server of the test's own, to stop and start."""
    with throwaway_cluster() as server:
        yield server
