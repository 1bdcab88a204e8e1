"""Target strings as users copy them from elsewhere: routed to the right engine,
opened or refused clearly, and never turned into a stray file or a printed password."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import alkstore


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, so a stray file would show."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def schema(server_dsn: str) -> Iterator[str]:
    name = f"alkstore_targets_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_a_libpq_string_opens_postgresql(server_dsn: str, schema: str, workdir: Path) -> None:
    conninfo = psycopg.conninfo.make_conninfo(server_dsn)
    with alkstore.open(conninfo, schema=schema) as store:
        store.queue("q").enqueue(1)
        assert store.queue("q").claim_one("w") is not None
    assert os.listdir(workdir) == []


def test_an_unreachable_libpq_string_fails_without_a_file_or_its_password(workdir: Path) -> None:
    with pytest.raises(alkstore.Database) as raised:
        alkstore.open("host=127.0.0.1 port=1 dbname=app password=s3cret-pw connect_timeout=1")
    assert "s3cret-pw" not in str(raised.value)
    assert os.listdir(workdir) == []


def test_a_sqlalchemy_postgresql_url_opens_postgresql(server_dsn: str, schema: str) -> None:
    url = server_dsn.replace("postgresql://", "postgresql+psycopg://", 1)
    with alkstore.open(url, schema=schema) as store:
        assert store.stream("s").publish(1) == 1


@pytest.mark.parametrize("target", ["sqlite:", "sqlite:/x.db", "sqlite:x.db", "sqlite://"])
def test_a_malformed_sqlite_url_is_refused_without_a_file(target: str, workdir: Path) -> None:
    with pytest.raises(ValueError, match="sqlite"):
        alkstore.open(target)
    assert os.listdir(workdir) == []
    assert not Path("/x.db").exists()


def test_a_sqlalchemy_sqlite_url_is_relative_like_sqlalchemys(workdir: Path) -> None:
    with alkstore.open("sqlite+pysqlite:///app.db") as store:
        store.notify("c", None)
    assert (workdir / "app.db").exists()
