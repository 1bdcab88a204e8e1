"""Transactions on the engine's own connections: BEGIN and enqueues held until needed."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

import alkstore
from alkstore_postgres import PostgresStore

OpenStore = Callable[..., PostgresStore]


def _table(store: PostgresStore, name: str) -> str:
    """The store's table ``name``, quoted, for statements written as text."""
    return sql.Identifier(store.settings.schema, name).as_string(None)


def _count(store: PostgresStore) -> int:
    with store.connection() as connection:
        found = connection.execute(f"SELECT count(*) FROM {_table(store, 'jobs')}").fetchone()
    assert found is not None
    return int(found[0])


def test_statements_in_a_transaction_see_its_held_enqueues_in_order(store: PostgresStore) -> None:
    with store.transaction() as tx:
        first = tx.enqueue_tx("q", None, "a")
        second = tx.enqueue_tx("q", None, "b")
        assert tx.execute(f"SELECT id FROM {_table(store, 'jobs')} ORDER BY id") == [
            (first,),
            (second,),
        ]
        third = tx.enqueue_tx("q", None, "c")
        connection = tx.connection  # handed out begun, with every enqueue sent
        assert connection.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        found = connection.execute(f"SELECT count(*) FROM {_table(store, 'jobs')}").fetchone()
        assert found == (3,)
    assert [job.id for job in store.queue("q").claim_batch("w", 10)] == [first, second, third]


def test_held_enqueues_of_many_queues_and_stamps_keep_each_jobs_own(store: PostgresStore) -> None:
    """Held rows go out with their distinct stamps once each: every job must
    still get its own queue, priority, times, attempts and lease."""
    store.queue("slow", alkstore.QueueOpts(visibility_timeout_s=90, max_attempts=7))
    store.queue("fast", alkstore.QueueOpts(visibility_timeout_s=5, max_attempts=2))
    run_at = time.time() + 3600
    asked = [
        ("slow", None),
        ("fast", None),
        ("slow", alkstore.EnqueueOpts(priority=9)),
        ("fast", alkstore.EnqueueOpts(run_at=run_at)),
        ("slow", None),
        ("other", alkstore.EnqueueOpts(delay=60, expires=120, max_attempts=4)),
        ("fast", alkstore.EnqueueOpts(priority=9)),
    ]
    started = time.time()
    with store.transaction() as tx:
        ids = [tx.enqueue_tx(queue, opts, n) for n, (queue, opts) in enumerate(asked)]
    for n, ((queue, opts), job_id) in enumerate(zip(asked, ids, strict=True)):
        job = store.queue(queue).get_job(job_id)
        assert job is not None
        assert (job.queue, job.payload) == (queue, n)
        assert job.max_attempts == {"slow": 7, "fast": 2, "other": 4}[queue]
        assert job.priority == (opts.priority if opts is not None else 0)
        if opts is not None and opts.run_at is not None:
            assert job.run_at == run_at
        elif opts is not None and opts.delay:
            assert started + 60 <= job.run_at <= time.time() + 60
            assert job.expires_at is not None
            assert job.expires_at - job.created_at == 120
        else:
            assert (job.run_at, job.expires_at) == (job.created_at, None)
    claimed = {job.id: job for job in store.queue("slow").claim_batch("w", 10)}
    assert [job.priority for job in claimed.values()] == [9, 0, 0]
    assert {job.visibility_timeout_s for job in claimed.values()} == {90}
    assert {job.id for job in store.queue("fast").claim_batch("w", 10)} == {ids[1], ids[6]}


def test_a_held_enqueue_the_server_refuses_fails_the_commit_and_rolls_back_everything(
    store: PostgresStore, dsn: str
) -> None:
    orders = _table(store, "orders")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE TABLE {orders} (id int)")
        admin.execute(f"ALTER TABLE {_table(store, 'jobs')} ADD CHECK (payload <> '\"poison\"')")
    tx = store.begin_tx()
    tx.execute(f"INSERT INTO {orders} VALUES (1)")
    tx.enqueue_tx("q", None, "fine")
    tx.enqueue_tx("q", None, "poison")  # held: the server sees it only at commit
    with pytest.raises(alkstore.Database, match=r"commit failed: .*check constraint"):
        tx.commit()
    assert store.queue("q").claim_one("w") is None
    with store.transaction() as again:  # the pooled connection came back clean
        assert again.execute(f"SELECT count(*) FROM {orders}") == [(0,)]
        again.enqueue_tx("q", None, "after")
    job = store.queue("q").claim_one("w")
    assert job is not None
    assert job.payload == "after"


def test_empty_transactions_end_cleanly_and_a_rollback_drops_held_enqueues(
    store: PostgresStore,
) -> None:
    store.begin_tx().commit()
    store.begin_tx().rollback()
    tx = store.begin_tx()
    tx.enqueue_tx("q", None, "dropped")
    assert "1 enqueues held" in repr(tx)
    tx.rollback()
    assert _count(store) == 0


def test_ids_reserved_ahead_are_unique_across_stores_and_threads(open_store: OpenStore) -> None:
    stores = [open_store(), open_store()]
    ids: list[int] = []
    lock = threading.Lock()

    def enqueue(store: PostgresStore, thread: int) -> None:
        mine = []
        for round_ in range(30):
            with store.transaction() as tx:
                mine += [tx.enqueue_tx("q", None, [thread, round_, n]) for n in range(7)]
            mine.append(store.queue("q").enqueue([thread, round_, "alone"]))
        with lock:
            ids.extend(mine)

    threads = [
        threading.Thread(target=enqueue, args=(store, index * 2 + k))
        for index, store in enumerate(stores)
        for k in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(ids) == 4 * 30 * 8
    assert len(set(ids)) == len(ids)
    with stores[0].transaction() as tx:
        stored_ids = tx.execute(f"SELECT id FROM {_table(stores[0], 'jobs')} ORDER BY id")
    assert [row[0] for row in stored_ids] == sorted(ids)


def test_publishes_after_the_first_to_a_stream_are_held_and_keep_their_offsets(
    store: PostgresStore,
) -> None:
    with store.transaction() as tx:
        offsets = [tx.publish_with_key_tx("a", f"k{n}", {"n": n}) for n in range(5)]
        offsets += [tx.publish_tx("b", {"n": n}) for n in range(3)]
        offsets.append(tx.publish_tx("a", {"n": 5}))
        assert "publishes held" in repr(tx)
        assert tx.execute(f"SELECT count(*) FROM {_table(store, 'events')}") == [(9,)]
    assert offsets == [1, 2, 3, 4, 5, 1, 2, 3, 6]
    read = store.stream("a").read_since(0, 100)
    assert [(e.offset, e.key, e.payload) for e in read] == [
        (n + 1, f"k{n}" if n < 5 else None, {"n": n}) for n in range(6)
    ]
    with store.transaction() as tx:
        assert tx.publish_tx("a", "next") == 7  # the head moved with the held events


def test_a_savepoint_rolled_back_under_held_publishes_leaves_no_gap(store: PostgresStore) -> None:
    with store.transaction() as tx:
        assert tx.publish_tx("s", "kept") == 1
        tx.execute("SAVEPOINT before")
        assert tx.publish_tx("s", "undone") == 2
        assert tx.publish_tx("s", "undone too") == 3
        tx.execute("ROLLBACK TO SAVEPOINT before")
        assert tx.publish_tx("s", "after") == 2
        assert tx.publish_tx("s", "after too") == 3
    read = store.stream("s").read_since(0, 100)
    assert [(e.offset, e.payload) for e in read] == [(1, "kept"), (2, "after"), (3, "after too")]


def test_a_savepoint_rolled_back_on_the_taken_connection_undoes_what_it_covers(
    store: PostgresStore,
) -> None:
    """Statements run on ``tx.connection`` itself pass the handle by: once it is
    taken, publishes and enqueues must reach the server as they are made, or a
    savepoint rolled back there would not undo them."""
    with store.transaction() as tx:
        assert tx.publish_tx("s", "kept") == 1
        connection = tx.connection
        connection.execute("SAVEPOINT before")
        assert tx.publish_tx("s", "undone") == 2
        tx.enqueue_tx("q", None, "undone")
        events = f"{store.settings.schema}.events"
        assert connection.execute(f"SELECT count(*) FROM {events}").fetchone() == (2,)
        connection.execute("ROLLBACK TO SAVEPOINT before")
        assert tx.publish_tx("s", "after") == 2
        tx.enqueue_tx("q", None, "after")
    read = store.stream("s").read_since(0, 100)
    assert [(e.offset, e.payload) for e in read] == [(1, "kept"), (2, "after")]
    assert [job.payload for job in store.queue("q").claim_batch("w", 10)] == ["after"]


def test_a_rolled_back_transaction_leaves_its_held_publishes_unwritten(
    store: PostgresStore,
) -> None:
    tx = store.begin_tx()
    tx.publish_tx("s", 1)
    tx.publish_tx("s", 2)
    tx.rollback()
    assert store.stream("s").read_since(0, 10) == []
    assert store.stream("s").publish(3) == 1


@pytest.mark.parametrize("begun", [False, True])
def test_a_forgotten_transaction_gives_its_connection_back_and_writes_nothing(
    open_store: OpenStore, begun: bool
) -> None:
    store = open_store(pool_max_size=1, connect_timeout_s=3)
    tx = store.begin_tx()
    tx.enqueue_tx("q", None, "forgotten")
    if begun:
        tx.execute("SELECT 1")
    del tx
    gc.collect()
    store.queue("q").enqueue("next")  # the pool's only connection came back
    assert _count(store) == 1


@pytest.mark.parametrize("end", ["commit", "rollback"])
@pytest.mark.parametrize("work", ["nothing", "a statement", "held enqueues"])
def test_a_transaction_sends_one_begin_and_returns_its_connection_idle(
    open_store: OpenStore, caplog: pytest.LogCaptureFixture, end: str, work: str
) -> None:
    store = open_store(pool_min_size=1, pool_max_size=1)
    notices: list[str] = []
    with store.connection() as connection:  # the pool's only connection
        connection.add_notice_handler(lambda notice: notices.append(str(notice.message_primary)))
    with caplog.at_level(logging.WARNING, logger="psycopg.pool"):
        tx = store.begin_tx()
        if work == "a statement":
            tx.execute("SELECT 1")
        elif work == "held enqueues":
            tx.enqueue_tx("q", None, 1)
            tx.enqueue_tx("q", None, 2)
        getattr(tx, end)()
        with store.connection() as connection:
            assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert notices == []  # "there is already a transaction in progress"
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
    assert _count(store) == (2 if (end, work) == ("commit", "held enqueues") else 0)
