"""Faults for real: terminated backends and killed worker processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator

import psycopg
import pytest

import alkstore
from alkstore import RECONNECT_CHANNEL, QueueOpts, Wake
from alkstore_postgres._store import PostgresStore


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
    query = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = %s AND query "
        + ("LIKE 'LISTEN%%'" if listener else "NOT LIKE 'LISTEN%%'")
    )
    name = psycopg.conninfo.conninfo_to_dict(tagged_dsn)["application_name"]
    with psycopg.connect(dsn, autocommit=True) as connection:
        return len(connection.execute(query, (name,)).fetchall())


def test_a_killed_pooled_connection_costs_at_most_one_error(
    dsn: str, tagged: tuple[str, PostgresStore]
) -> None:
    tagged_dsn, store = tagged
    queue = store.queue("q")
    queue.enqueue(1)
    assert terminate_backends(dsn, tagged_dsn, listener=False) >= 1
    errors: list[alkstore.Database] = []
    for n in range(5):
        try:
            queue.enqueue(n)
        except alkstore.Database as exc:
            errors.append(exc)
    assert len(errors) <= 1
    assert all(isinstance(error.__cause__, psycopg.Error) for error in errors)
    assert len(queue.claim_batch("w", 10)) >= 5


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
