"""Shared test configuration for alkstore-core.

Hypothesis profiles: ``HYPOTHESIS_PROFILE=ci`` (the default under CI=true)
runs more examples and derandomises, so a CI failure replays exactly.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store's target: a SQLite file, or a PostgreSQL schema of
    the server ``ALKSTORE_PG_DSN`` names (skipped without one that answers)."""
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
        return
    server = os.environ.get("ALKSTORE_PG_DSN")
    if not server:
        pytest.skip("set ALKSTORE_PG_DSN to a PostgreSQL server to run these tests")
    try:
        psycopg.connect(server, connect_timeout=5).close()
    except psycopg.Error as exc:
        pytest.skip(f"ALKSTORE_PG_DSN does not answer: {exc}")
    schema = f"alkstore_core_test_{uuid.uuid4().hex[:12]}"
    yield f"{server}{'&' if '?' in server else '?'}schema={schema}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
