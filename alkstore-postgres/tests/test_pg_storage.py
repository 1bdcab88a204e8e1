"""Schema, options, commit-ordered streams, channel mapping and adopt_tx on a real server."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

import alkstore
from alkstore import EnqueueOpts, QueueOpts, Wake
from alkstore.engine import EXPIRED, LAPSED_ON_LAST_ATTEMPT
from alkstore_postgres import PostgresStore

OpenStore = Callable[..., PostgresStore]


def test_ten_processes_opening_a_fresh_schema_at_once_all_succeed(dsn: str, schema: str) -> None:
    start_at = time.time() + 1.0
    code = (
        "import sys, time, alkstore; time.sleep(max(0, float(sys.argv[3]) - time.time())); "
        "s = alkstore.open(sys.argv[1], schema=sys.argv[2]); s.queue('q').enqueue(1); s.close()"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", code, dsn, schema, str(start_at)])
        for _ in range(10)
    ]
    assert [child.wait(60) for child in children] == [0] * 10
    store = alkstore.open(dsn, schema=schema)
    try:
        assert len(store.queue("q").claim_batch("w", 20)) == 10
    finally:
        store.close()


def test_schemas_isolate_stores_and_the_schema_may_come_from_the_dsn(dsn: str, schema: str) -> None:
    separator = "&" if "?" in dsn else "?"
    one = alkstore.open(f"{dsn}{separator}schema={schema}")
    other = alkstore.open(dsn, schema=schema + "_other")
    try:
        one.queue("q").enqueue("mine")
        with other.listen("c") as wakes:
            one.notify("c", 1)
            assert wakes.recv(0.3) is None  # channels are per schema too
        assert other.queue("q").claim_one("w") is None
    finally:
        one.close()
        other.close()
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(f"{schema}_other")
                )
            )


_SCHEMA_RULE = "schema must be a non-empty name of at most 63 bytes, without NUL"


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"schema": ""}, ValueError, _SCHEMA_RULE),
        ({"schema": "é" * 32}, ValueError, _SCHEMA_RULE),  # 64 bytes
        ({"schema": "a\x00b"}, ValueError, _SCHEMA_RULE),
        ({"schema": 7}, ValueError, _SCHEMA_RULE),
        ({"pool_max_size": 0}, ValueError, "pool_max_size must be an int from 1 to 1000, got 0"),
        ({"pool_min_size": 1001}, ValueError, "pool_min_size must be an int from 1 to 1000"),
        ({"pool_min_size": True}, ValueError, "pool_min_size must be an int from 1 to 1000"),
        ({"pool_max_size": "3x"}, ValueError, "pool_max_size must be an int from 1 to 1000"),
        (
            {"pool_min_size": 5, "pool_max_size": 2},
            ValueError,
            "pool_min_size must not exceed pool_max_size",
        ),
        ({"connect_timeout_s": 0}, ValueError, "connect_timeout_s must be more than 0"),
        ({"scheduler_lease_s": "soon"}, ValueError, "scheduler_lease_s must be a number"),
        (
            {"colour": 1},
            TypeError,
            "the postgres engine has no option 'colour' (it knows: connect_timeout_s, "
            "listen_dsn, pool_max_size, pool_min_size, pooler, scheduler_lease_s, schema)",
        ),
        ({"pooler": "statement"}, ValueError, "pooler must be 'none' or 'transaction'"),
        ({"pooler": "transaction"}, ValueError, "pooler='transaction' needs listen_dsn"),
        ({"listen_dsn": 5432}, ValueError, "listen_dsn must be a connection string (str)"),
    ],
)
def test_bad_options_are_refused_by_name(
    dsn: str, options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        alkstore.open(dsn, **options)


def test_jobs_the_engine_moves_to_dead_letters_carry_cores_texts(store: PostgresStore) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.05, max_attempts=1))
    lapsed_id = queue.enqueue("lapses")
    assert queue.claim_one("w") is not None
    expired_id = queue.enqueue("expires", EnqueueOpts(expires=0.05))
    time.sleep(0.1)
    assert queue.claim_one("w") is None  # the claim moved the lapsed job to dead letters
    assert queue.sweep_expired() == 1
    dead = [queue.get_job(job_id) for job_id in (lapsed_id, expired_id)]
    assert [(info.state, info.last_error) for info in dead if info is not None] == [
        ("dead", LAPSED_ON_LAST_ATTEMPT),
        ("dead", EXPIRED),
    ]


def test_streams_stay_commit_ordered_when_an_earlier_publisher_commits_last(
    open_store: OpenStore,
) -> None:
    slow, fast, reader = open_store(), open_store(), open_store()
    stream = reader.stream("orders")
    stream.publish("before")
    tx = slow.begin_tx()
    slow_offset = tx.publish_tx("orders", "slow")  # uncommitted: holds the stream head
    fast_offsets: list[int] = []
    publisher = threading.Thread(
        target=lambda: fast_offsets.append(fast.stream("orders").publish("fast"))
    )
    publisher.start()
    time.sleep(0.3)
    seen = stream.read_since(0)
    assert [e.payload for e in seen] == ["before"]
    assert reader.stream("orders").save_offset("projection", seen[-1].offset)
    tx.commit()
    publisher.join(10)
    assert len(fast_offsets) == 1
    assert fast_offsets[0] > slow_offset
    saved = stream.get_offset("projection")
    newer = stream.read_since(saved)
    assert [e.payload for e in newer] == ["slow", "fast"]
    assert all(e.offset > saved for e in newer)


@pytest.mark.parametrize(
    "channel", ["a" * 1000, "quote\"d 'both'", "with space", "ü ✓ 名前", "x\x00y"]
)
def test_any_channel_name_maps_to_a_listen_channel(store: PostgresStore, channel: str) -> None:
    with store.listen(channel) as wakes:
        store.notify(channel, None)
        assert wakes.recv(5) == Wake(channel)
        store.notify(channel + "!", None)
        assert wakes.recv(0.3) is None


def test_adopt_tx_writes_through_the_callers_connection_in_its_transaction(
    dsn: str, store: PostgresStore
) -> None:
    orders = sql.Identifier(store.settings.schema, "orders")
    with psycopg.connect(dsn) as connection:  # not autocommit: psycopg opens a transaction
        connection.execute(sql.SQL("CREATE TABLE {} (id int)").format(orders))
        connection.commit()
        connection.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(orders))
        job_id = store.adopt_tx(connection).enqueue_tx("emails", None, {"order": 1})
        assert store.queue("emails").get_job(job_id) is None
        connection.rollback()
        assert store.queue("emails").get_job(job_id) is None
        connection.execute(sql.SQL("INSERT INTO {} VALUES (2)").format(orders))
        job_id = store.adopt_tx(connection).enqueue_tx("emails", None, {"order": 2})
        connection.commit()
    info = store.queue("emails").get_job(job_id)
    assert info is not None
    assert info.payload == {"order": 2}


def test_adopt_tx_refuses_what_is_not_the_stores_database(store: PostgresStore, dsn: str) -> None:
    with pytest.raises(TypeError, match=r"psycopg\.Connection"):
        store.adopt_tx(object())
    other_database = f"alkstore_adopt_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(other_database)))
    try:
        other_dsn = psycopg.conninfo.make_conninfo(dsn, dbname=other_database)
        with (
            psycopg.connect(other_dsn) as connection,
            pytest.raises(ValueError, match="no alkstore schema"),
        ):
            store.adopt_tx(connection)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(other_database))
            )


def test_libpq_options_in_the_dsn_reach_the_server_intact(dsn: str, schema: str) -> None:
    # Spaces in a query value must stay spaces: "-c a=b" is one libpq option.
    separator = "&" if "?" in dsn else "?"
    target = f"{dsn}{separator}schema={schema}&options=-c%20application_name%3Dalktest"
    with alkstore.open(target) as store, store.transaction() as tx:
        assert tx.execute("SHOW application_name") == [("alktest",)]


def test_connections_name_the_application_unless_the_dsn_does(dsn: str, schema: str) -> None:
    plain = alkstore.open(dsn, schema=schema)
    separator = "&" if "?" in dsn else "?"
    named = alkstore.open(f"{dsn}{separator}application_name=mine", schema=schema)
    try:
        assert isinstance(plain, PostgresStore)
        assert isinstance(named, PostgresStore)
        with plain.connection() as connection:
            own = connection.execute("SELECT current_setting('application_name')").fetchone()
        assert own == ("alkstore",)
        with named.connection() as connection:
            own = connection.execute("SELECT current_setting('application_name')").fetchone()
        assert own == ("mine",)
    finally:
        plain.close()
        named.close()


def test_a_trim_deletes_every_row_it_covers_while_another_deletes_some(
    dsn: str, schema: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk comes short when another transaction deletes rows the chunk had
    picked (a concurrent trim, a killed client's statement finishing): the trim
    goes on until nothing it covers is left, rather than leave rows on disk."""
    monkeypatch.setattr("alkstore_postgres._stream._TRIM_CHUNK", 100)
    events = store.stream("s")
    with store.transaction() as tx:
        for n in range(250):
            tx.publish_tx("s", n)
    other = psycopg.connect(dsn)
    try:
        other.execute(
            sql.SQL('DELETE FROM {}.events WHERE "offset" <= 50').format(sql.Identifier(schema))
        )
        trimmed = threading.Thread(target=events.trim, args=(200,))
        trimmed.start()
        time.sleep(0.5)  # its first chunk waits for the rows the other transaction deletes
        other.commit()
        trimmed.join(30)
        assert not trimmed.is_alive()
        with psycopg.connect(dsn) as reader:
            left = reader.execute(
                sql.SQL('SELECT count(*) FROM {}.events WHERE "offset" <= 200').format(
                    sql.Identifier(schema)
                )
            ).fetchone()
        assert left == (0,)
    finally:
        other.close()
