"""Every form of target libpq accepts opens the real server; bad ones fail clearly.

The targets are made from the test server's own address: its TCP host and
port, and its Unix socket directory as the server reports it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import alkstore
from alkstore_postgres import PostgresEngine, PostgresStore, Settings
from alkstore_postgres._settings import parse_target

PASSWORD = "s3cret-pass"


@dataclass(frozen=True)
class Server:
    host: str
    port: str
    user: str
    dbname: str
    socket_dir: str


@pytest.fixture(scope="module")
def server(dsn: str) -> Server:
    params = conninfo_to_dict(dsn)
    with psycopg.connect(dsn) as connection:
        found = connection.execute("SHOW unix_socket_directories").fetchone()
        user, dbname = connection.info.user, connection.info.dbname
    assert found is not None
    assert found[0], "the test server listens on no Unix socket"
    return Server(
        host=str(params.get("host", "127.0.0.1")),
        port=str(params.get("port", "5432")),
        user=user,
        dbname=dbname,
        socket_dir=found[0].split(",")[0].strip(),
    )


@pytest.fixture
def opened(schema: str) -> Iterator[Callable[[str], PostgresStore]]:
    """Open targets with the engine itself (core's routing is tested in core)."""
    stores: list[PostgresStore] = []

    def open_target(target: str, **options: object) -> PostgresStore:
        store = PostgresEngine().open(target, schema=schema, **options)
        stores.append(store)
        return store

    yield open_target
    for store in stores:
        store.close()


def _connected_host(store: PostgresStore) -> str:
    with store.connection() as connection:
        return connection.info.host


def _works(store: PostgresStore) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue("hello")
    job = queue.claim_one("w")
    assert job is not None
    assert job.id == job_id


FORMS: dict[str, Callable[[Server], str]] = {
    "url, host in the query": lambda s: (
        f"postgresql:///{s.dbname}?host={s.host}&port={s.port}&user={s.user}"
    ),
    "url, socket directory in the query": lambda s: (
        f"postgresql:///{s.dbname}?host={s.socket_dir}&port={s.port}&user={s.user}"
    ),
    "url, sqlalchemy's driver": lambda s: (
        f"postgresql+psycopg://{s.user}:{PASSWORD}@{s.host}:{s.port}/{s.dbname}"
    ),
    "url, postgres+driver": lambda s: f"postgres+asyncpg://{s.user}@{s.host}:{s.port}/{s.dbname}",
    "key=value": lambda s: (
        f"host={s.host} port={s.port} user={s.user} dbname={s.dbname} password={PASSWORD}"
    ),
    "key=value, socket directory": lambda s: (
        f"host={s.socket_dir} port={s.port} user='{s.user}' dbname={s.dbname}"
    ),
}


@pytest.mark.parametrize("form", FORMS)
def test_each_target_form_opens_the_server_it_names(
    form: str, server: Server, opened: Callable[[str], PostgresStore]
) -> None:
    target = FORMS[form](server)
    store = opened(target)
    _works(store)
    via_socket = "socket" in form
    assert _connected_host(store) == (server.socket_dir if via_socket else server.host)
    assert PASSWORD not in repr(store)
    if via_socket:
        assert f"{server.socket_dir}/.s.PGSQL.{server.port}" in store.location


def test_a_url_without_a_host_uses_libpqs_environment(
    server: Server, opened: Callable[[str], PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGHOST", server.socket_dir)
    monkeypatch.setenv("PGPORT", server.port)
    monkeypatch.setenv("PGUSER", server.user)
    store = opened(f"postgresql:///{server.dbname}")
    _works(store)
    assert _connected_host(store) == server.socket_dir
    assert store.location.startswith(f"PostgreSQL at {server.socket_dir}/.s.PGSQL.")


def test_the_package_imports_psycopg_only_when_a_store_or_settings_is_asked_for() -> None:
    code = (
        "import sys, alkstore_postgres\n"
        "assert 'psycopg' not in sys.modules, 'importing the engine imported psycopg'\n"
        "from alkstore_postgres import PostgresStore, Settings\n"
        "assert 'psycopg' in sys.modules and PostgresStore.__name__ == 'PostgresStore'\n"
        "assert Settings().schema == 'alkstore'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_engine_options_in_a_url_are_text_converted_and_checked_as_keywords_are() -> None:
    url = "postgresql://app@db.example/shop?schema=tenant&pool_min_size=2&pool_max_size=2"
    _, options, _ = parse_target(url + "&connect_timeout_s=2.5")
    assert Settings.from_options(options) == Settings(
        schema="tenant", pool_min_size=2, pool_max_size=2, connect_timeout_s=2.5
    )
    with pytest.raises(ValueError, match="pool_max_size must be an int from 1 to 1000"):
        PostgresEngine().open(url.replace("pool_max_size=2", "pool_max_size=many"))
    with pytest.raises(ValueError, match="pool_min_size must not exceed pool_max_size"):
        PostgresEngine().open(url, pool_max_size=1)


def test_engine_options_leave_the_query_and_libpqs_parameters_as_written(
    server: Server, schema: str
) -> None:
    name = f"alk_target_{uuid.uuid4().hex[:8]}"
    target = (
        f"postgresql://{server.user}@{server.host}:{server.port}/{server.dbname}"
        f"?options=-c%20statement_timeout%3D4321&schema={schema}&application_name={name}"
        f"&pool_max_size=3"
    )
    conninfo, options, address = parse_target(target)
    assert conninfo == target.replace(f"&schema={schema}", "").replace("&pool_max_size=3", "")
    assert (options, address) == (
        {"schema": schema, "pool_max_size": "3"},
        f"{server.host}:{server.port}",
    )
    store = alkstore.open(target)
    try:
        assert isinstance(store, PostgresStore)
        assert (store.settings.schema, store.settings.pool_max_size) == (schema, 3)
        with store.connection() as connection:
            timeout = connection.execute("SHOW statement_timeout").fetchone()
            application = connection.execute("SHOW application_name").fetchone()
        assert (timeout, application) == (("4321ms",), (name,))
    finally:
        store.close()


@pytest.mark.parametrize("named", [False, True])
def test_a_key_value_target_keeps_its_application_name_or_gets_alkstores(
    named: bool, server: Server, opened: Callable[[str], PostgresStore]
) -> None:
    name = f"alk_kv_{uuid.uuid4().hex[:8]}"
    target = f"host={server.host} port={server.port} user={server.user} dbname={server.dbname}"
    store = opened(f"{target} application_name={name}" if named else target)
    with store.connection() as connection:
        found = connection.execute("SHOW application_name").fetchone()
    assert found == ((name,) if named else ("alkstore",))


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("host=db password=se cret", 'missing "…" after "…"'),
        (f"postgresql://ada:{PASSWORD}@[::1/app", 'matching "…" in IPv6 host address'),
        (f"postgresql://ada:{PASSWORD}@db/app?sslmod=require", 'URI query parameter: "…"'),
        ("postgresql://ada:pa/ss@db/app", "a '/' or '@' in a password is written %2F or %40"),
        (f"host=db port=5432,5433 password={PASSWORD}", "names 1 hosts and 2 ports"),
    ],
)
def test_a_malformed_target_fails_before_connecting_and_shows_no_password(
    target: str, expected: str
) -> None:
    with pytest.raises(ValueError, match="connection string") as raised:
        PostgresEngine().open(target)
    message = str(raised.value)
    assert expected in message
    for secret in (PASSWORD, "cret", "pa/ss", "ss@db"):
        assert secret not in message


def test_a_malformed_target_without_a_password_is_quoted() -> None:
    with pytest.raises(ValueError, match=r'invalid URI query parameter: "sslmod"'):
        PostgresEngine().open("postgresql://db/app?sslmod=require")
    with pytest.raises(ValueError, match=r"the port 'x' in the connection string"):
        PostgresEngine().open("host=db port=x")


def test_engine_options_in_a_key_value_target_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"engine option 'schema' cannot go in a key=value") as r:
        PostgresEngine().open(f"host=db schema=tenant password={PASSWORD}")
    assert PASSWORD not in str(r.value)


@pytest.mark.parametrize(
    ("target", "address"),
    [
        (f"host=/nonexistent port=5 dbname=app password={PASSWORD}", "/nonexistent/.s.PGSQL.5"),
        ("postgresql:///app?host=/nonexistent", "/nonexistent/.s.PGSQL.5432"),
        (f"postgresql://ada:{PASSWORD}@127.0.0.1:1,127.0.0.1:2/app", "127.0.0.1:1, 127.0.0.1:2"),
        ("postgresql://ada@[::1]:1/app", "[::1]:1"),
    ],
)
def test_an_unreachable_server_is_named_by_its_address_never_the_password(
    target: str, address: str
) -> None:
    with pytest.raises(alkstore.Database) as raised:
        PostgresEngine().open(target, connect_timeout_s=2)
    message = str(raised.value)
    assert message.startswith(f"cannot connect to PostgreSQL at {address}: ")
    assert PASSWORD not in message
