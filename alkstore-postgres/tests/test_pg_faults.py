"""Faults for real: terminated backends and killed worker processes."""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest

import alkstore
from alkstore import RECONNECT_CHANNEL, QueueOpts, Wake
from alkstore_postgres import PostgresStore


@pytest.fixture
def tagged(dsn: str, schema: str) -> Iterator[tuple[str, PostgresStore]]:
    """A DSN naming its connections (``application_name``) and a store opened on it,
    so a test kills its own backends, never another test's on the same server."""
    name = f"alkstore_fault_{uuid.uuid4().hex[:12]}"
    tagged_dsn = f"{dsn}{'&' if '?' in dsn else '?'}application_name={name}"
    store = alkstore.open(tagged_dsn, schema=schema)
    assert isinstance(store, PostgresStore)
    try:
        yield tagged_dsn, store
    finally:
        store.close()


def terminate_backends(dsn: str, tagged_dsn: str, *, listener: bool) -> int:
    """Kill the server backends of ``tagged_dsn``'s connections: pooled ones, or the listener's."""
    listens = "(query ~ '^(UN)?LISTEN ' OR query = 'SELECT pg_listening_channels()')"
    query = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s AND "
        + (listens if listener else f"NOT {listens}")
    )
    name = psycopg.conninfo.conninfo_to_dict(tagged_dsn)["application_name"]
    with psycopg.connect(dsn, autocommit=True) as connection:
        return len(connection.execute(query, (name,)).fetchall())


def _fill_pool(store: PostgresStore, size: int) -> None:
    """Leave ``size`` idle connections in the store's pool."""
    with contextlib.ExitStack() as held:
        for _ in range(size):
            held.enter_context(store.connection())


def _backends(dsn: str, tagged_dsn: str) -> int:
    name = psycopg.conninfo.conninfo_to_dict(tagged_dsn)["application_name"]
    with psycopg.connect(dsn, autocommit=True) as connection:
        found = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    assert found is not None
    return int(found[0])


def _wait_until_gone(dsn: str, tagged_dsn: str) -> None:
    """Wait until the server has ended every backend of ``tagged_dsn``."""
    deadline = time.monotonic() + 10
    while _backends(dsn, tagged_dsn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _backends(dsn, tagged_dsn) == 0


def test_killed_pooled_connections_fail_no_user_call(
    dsn: str, tagged: tuple[str, PostgresStore]
) -> None:
    tagged_dsn, store = tagged
    queue = store.queue("q")
    _fill_pool(store, 4)
    assert terminate_backends(dsn, tagged_dsn, listener=False) == 4
    _wait_until_gone(dsn, tagged_dsn)  # pg_terminate_backend only signals the backends
    for n in range(20):  # every one of the four stale connections is met, none fails a call
        queue.enqueue(n)
        with store.transaction() as tx:
            tx.enqueue_tx("q", None, n)
    assert len(queue.claim_batch("w", 100)) == 40


def test_connections_the_server_closed_as_idle_fail_no_user_call(dsn: str, schema: str) -> None:
    name = f"alkstore_fault_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in dsn else "?"
    target = f"{dsn}{separator}application_name={name}&options=-c%20idle_session_timeout%3D200"
    store = alkstore.open(target, schema=schema, pool_min_size=3)
    assert isinstance(store, PostgresStore)
    try:
        queue = store.queue("q")
        _fill_pool(store, 3)
        _wait_until_gone(dsn, target)  # the server closed every idle one
        job_ids = [queue.enqueue(n) for n in range(10)]
        assert [job.id for job in queue.claim_batch("w", 100)] == job_ids
    finally:
        store.close()


def test_a_checkout_interrupted_while_it_checks_the_connection_gives_it_back(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``KeyboardInterrupt`` (caught by a REPL, say) during the check of a pooled
    connection must not lose the connection from the pool."""
    import alkstore_postgres._store as sync_store

    still_connected = sync_store._still_connected
    interrupts = iter([True, False])

    def interrupted_once(connection: psycopg.Connection) -> bool:
        if next(interrupts, False):
            raise KeyboardInterrupt
        return still_connected(connection)

    monkeypatch.setattr(sync_store, "_still_connected", interrupted_once)
    store = alkstore.open(dsn, schema=schema, pool_max_size=1, connect_timeout_s=2)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.queue("q").enqueue("interrupted")
        job_id = store.queue("q").enqueue("next")  # the only connection is back
        assert [job.id for job in store.queue("q").claim_batch("w", 10)] == [job_id]
    finally:
        store.close()


def test_a_dropped_listener_reconnects_and_says_so(
    dsn: str, tagged: tuple[str, PostgresStore]
) -> None:
    tagged_dsn, store = tagged
    peer = alkstore.open(dsn, schema=store.settings.schema)
    try:
        with store.listen("orders") as wakes:
            assert terminate_backends(dsn, tagged_dsn, listener=True) >= 1
            assert wakes.recv(15) == Wake(RECONNECT_CHANNEL)
            assert store.listener_reconnects == 1
            peer.notify("orders", 1)
            assert wakes.recv(10) == Wake("orders")
    finally:
        peer.close()


def test_a_worker_killed_mid_job_has_it_reclaimed_after_the_timeout(
    dsn: str, store: PostgresStore
) -> None:
    queue = store.queue("work", QueueOpts(visibility_timeout_s=1))
    job_id = queue.enqueue("important")
    worker = subprocess.Popen(
        [
            sys.executable, "-c",
            textwrap.dedent("""
                import sys, time, alkstore
                store = alkstore.open(sys.argv[1], schema=sys.argv[2])
                job = store.queue("work").claim_one("doomed")
                print("claimed" if job else "nothing", flush=True)
                time.sleep(60)
            """),
            dsn, store.settings.schema,
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "claimed"
    worker.send_signal(signal.SIGKILL)
    worker.communicate(timeout=10)
    assert queue.claim_one("rescuer") is None
    assert queue.wait(10)
    job = queue.claim_one("rescuer")
    assert job is not None
    assert (job.id, job.attempts) == (job_id, 2)


@pytest.mark.parametrize("password", ["s3cret-pass"])
def test_an_unreachable_server_fails_at_open_naming_host_and_port_not_the_password(
    password: str,
) -> None:
    with pytest.raises(alkstore.Database) as raised:
        alkstore.open(f"postgresql://ada:{password}@127.0.0.1:1/app", connect_timeout_s=2)
    message = str(raised.value)
    assert message == "cannot connect to PostgreSQL at 127.0.0.1:1: Connection refused"
    assert password not in message


def _options(connection: psycopg.Connection[Any]) -> dict[str, str]:
    """The libpq options ``connection`` was made with."""
    return {o.keyword.decode(): (o.val or b"").decode() for o in connection.pgconn.info}


def test_connections_detect_a_vanished_server_unless_the_dsn_says_otherwise(
    dsn: str, schema: str
) -> None:
    """Keepalives and a TCP user timeout bound how long a statement, or the LISTEN
    connection's wait, hangs on a server gone without a word (a network cut)."""
    store = alkstore.open(dsn, schema=schema)
    assert isinstance(store, PostgresStore)
    try:
        with store.connection() as connection:
            options = _options(connection)
    finally:
        store.close()
    assert (options["keepalives"], options["keepalives_idle"]) == ("1", "15")
    assert (options["keepalives_interval"], options["keepalives_count"]) == ("5", "3")
    assert options["tcp_user_timeout"] == "30000"
    separator = "&" if "?" in dsn else "?"
    store = alkstore.open(f"{dsn}{separator}keepalives_idle=120", schema=schema)
    assert isinstance(store, PostgresStore)
    try:
        with store.connection() as connection:
            assert _options(connection)["keepalives_idle"] == "120"
    finally:
        store.close()


def test_the_pools_warnings_about_its_dead_connections_are_turned_down_to_debug(
    dsn: str, tagged: tuple[str, PostgresStore], caplog: pytest.LogCaptureFixture
) -> None:
    tagged_dsn, store = tagged
    queue = store.queue("q")
    queue.enqueue(1)
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    assert terminate_backends(dsn, tagged_dsn, listener=False) >= 1
    time.sleep(0.2)  # the FATAL reaches the idle connection's socket
    queue.enqueue(2)  # hands the dead connection back: the pool discards it
    pool_records = [r for r in caplog.records if r.name == "psycopg.pool"]
    assert [r for r in pool_records if r.levelno >= logging.WARNING] == []
    assert any(r.getMessage().startswith("discarding closed connection") for r in pool_records)


def test_the_turned_down_warnings_reach_no_handler_while_the_pool_logs_no_debug(
    dsn: str, tagged: tuple[str, PostgresStore]
) -> None:
    """A handler of no level of its own (``logging.basicConfig``'s) shows what its
    loggers pass: the turned-down records must not pass unless DEBUG is on."""
    tagged_dsn, store = tagged
    queue = store.queue("q")
    queue.enqueue(1)
    handler = _Kept()
    pool_logger = logging.getLogger("psycopg.pool")
    level = pool_logger.level
    pool_logger.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    try:
        assert terminate_backends(dsn, tagged_dsn, listener=False) >= 1
        time.sleep(0.2)  # the FATAL reaches the idle connection's socket
        queue.enqueue(2)  # hands the dead connection back: the pool discards it
    finally:
        logging.getLogger().removeHandler(handler)
        pool_logger.setLevel(level)
    assert [r.getMessage() for r in handler.records if r.name == "psycopg.pool"] == []


class _Kept(logging.Handler):
    """A handler of no level of its own that keeps every record it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_warnings_of_pools_alkstore_did_not_make_stay_warnings(
    dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    alkstore.open(dsn, schema=schema).close()  # the filter is on
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    with psycopg_pool.ConnectionPool(dsn, min_size=1, name="the application's") as pool:
        connection = pool.getconn()
        connection.close()
        pool.putconn(connection)
    assert any(
        r.levelno == logging.WARNING and r.getMessage().startswith("discarding closed connection")
        for r in caplog.records
    )


def test_a_wait_with_a_timeout_waits_for_a_busy_pool_as_long_as_ever(
    open_store: Any,
) -> None:
    """A timeout cuts the wait for a connection short only in an outage: a pool
    whose every connection is lent, to transactions that end soon, is no outage."""
    store = open_store(pool_max_size=1)
    tx = store.begin_tx()
    tx.publish_tx("other", 1)  # the pool's one connection is the transaction's
    ending = threading.Timer(1.5, tx.rollback)
    ending.start()
    try:
        started = time.monotonic()
        assert store.queue("q").wait(0.1) is False
        receiver = store.stream("s").subscribe("c")
        assert receiver.recv(0.1) is None
        receiver.close()
    finally:
        ending.join()
    assert time.monotonic() - started >= 1.0
