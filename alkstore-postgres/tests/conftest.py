"""Fixtures for the PostgreSQL engine's own tests: a real server, a fresh schema each.

The server is ``ALKSTORE_PG_DSN``; without it the tests fail with the reason
(never skip silently). ``bouncer`` is a PgBouncer in transaction-pooling mode
in front of it, started from the machine's ``pgbouncer``: without one the
pooler's tests skip, saying so, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

import alkstore
from alkstore_postgres import PostgresStore
from alkstore_postgres.testing import (
    PgBouncer,
    ThrowawayServer,
    find_pgbouncer,
    pgbouncer,
    throwaway_cluster,
)  # fmt: skip

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


def need_pgbouncer() -> str:
    """The ``pgbouncer`` binary; without one a skip naming it, or a failure under ``CI=true``."""
    try:
        return find_pgbouncer()
    except RuntimeError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {exc}")
        pytest.skip(str(exc))


def start_pgbouncer(
    dsn: str, *, pool_size: int = 20
) -> contextlib.AbstractContextManager[PgBouncer]:
    """:func:`pgbouncer` in front of ``dsn``'s server (see :func:`need_pgbouncer`)."""
    need_pgbouncer()
    return pgbouncer(dsn, pool_size=pool_size)


@pytest.fixture
def pgbouncer_binary() -> str:
    """The machine's ``pgbouncer``, for a test that starts its own (see :func:`need_pgbouncer`)."""
    return need_pgbouncer()


@pytest.fixture(scope="session")
def bouncer(dsn: str) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode in front of the test server, for the session."""
    with start_pgbouncer(dsn) as running:
        yield running


@pytest.fixture
def bouncer_of_one(dsn: str) -> Iterator[PgBouncer]:
    """A PgBouncer with one server connection: every client's transactions run on it."""
    with start_pgbouncer(dsn, pool_size=1) as running:
        yield running
