"""The engine through a real PgBouncer in transaction-pooling mode (``pooler="transaction"``).

Each test reaches the server through the machine's ``pgbouncer`` (see
``conftest.bouncer``); the collision tests start one of their own with a
single server connection, so every client's transactions share it, and the
restart tests one in front of a throwaway server, to restart either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import alkstore
from alkstore import RECONNECT_CHANNEL, Wake
from alkstore_postgres import PostgresAsyncStore, PostgresStore, Settings
from alkstore_postgres._settings import parse_target
from alkstore_postgres.testing import PgBouncer, ThrowawayServer, pgbouncer

Opener = Callable[..., PostgresStore]
PASSWORD = "s3cr3t-pw"


@pytest.fixture
def pooled(dsn: str, schema: str) -> Iterator[Opener]:
    """Opens stores on a given PgBouncer in ``schema``, wakes on ``dsn`` directly; closes them."""
    opened: list[PostgresStore] = []

    def opener(bouncer: PgBouncer, **options: object) -> PostgresStore:
        options = {"schema": schema, "pooler": "transaction", "listen_dsn": dsn, **options}
        store = alkstore.open(bouncer.dsn, **options)
        assert isinstance(store, PostgresStore)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


def _churn(store: PostgresStore, queue: str, rounds: int) -> None:
    """The same statements again and again: psycopg would prepare each after 5 runs."""
    jobs = store.queue(queue)
    for n in range(rounds):
        jobs.enqueue({"n": n})
        job = jobs.claim_one("w")
        assert job is not None
        job.ack()


def test_without_the_option_psycopgs_prepared_statements_collide_in_the_pooler(
    bouncer_of_one: PgBouncer, pooled: Opener
) -> None:
    # The hazard the option removes, shown for real: both stores prepare
    # "_pg3_0" on the one server connection the pooler lends them in turn.
    first = pooled(bouncer_of_one, pooler="none")
    second = pooled(bouncer_of_one, pooler="none")
    _churn(first, "q", 10)
    with pytest.raises(alkstore.Database, match='prepared statement "_pg3_0" already exists'):
        _churn(second, "q", 10)


def test_pooled_stores_share_server_connections_without_prepared_statement_clashes(
    bouncer_of_one: PgBouncer, pooled: Opener
) -> None:
    stores = [pooled(bouncer_of_one, pool_max_size=3) for _ in range(3)]
    failures: list[BaseException] = []

    def work(store: PostgresStore, queue: str) -> None:
        try:
            _churn(store, queue, 40)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [
        threading.Thread(target=work, args=(store, f"q{n % 2}"))
        for n, store in enumerate(stores * 2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    with psycopg.connect(bouncer_of_one.admin_dsn, autocommit=True) as admin:
        servers = admin.execute("SHOW SERVERS").fetchall()
    assert len(servers) == 1  # six clients' transactions, on one server connection
    assert stores[0].inspect().queues() == []  # every job acked


def test_the_async_store_prepares_nothing_through_the_pooler(
    bouncer_of_one: PgBouncer, dsn: str, schema: str
) -> None:
    async def scenario() -> None:
        options = {"schema": schema, "pooler": "transaction", "listen_dsn": dsn}
        stores = [await alkstore.open_async(bouncer_of_one.dsn, **options) for _ in range(2)]
        try:
            assert all(isinstance(store, PostgresAsyncStore) for store in stores)

            async def churn(store: alkstore.AsyncStore, queue: str) -> None:
                jobs = store.queue(queue)
                for n in range(30):
                    await jobs.enqueue(n)
                    job = await jobs.claim_one("w")
                    assert job is not None
                    await job.ack()

            await asyncio.wait_for(
                asyncio.gather(*(churn(store, f"q{n}") for n, store in enumerate(stores * 2))), 60
            )
            assert await stores[0].inspect().queues() == []
        finally:
            for store in stores:
                await store.close()

    asyncio.run(scenario())


def test_the_schema_option_holds_through_the_pooler(
    bouncer_of_one: PgBouncer, pooled: Opener, dsn: str, schema: str
) -> None:
    # Every statement names its schema: nothing rides on a session's search_path,
    # so two tenants on one server connection never see each other's rows.
    other = f"{schema}_other"
    try:
        mine, theirs = pooled(bouncer_of_one), pooled(bouncer_of_one, schema=other)
        mine.queue("q").enqueue("mine")
        theirs.queue("q").enqueue("theirs")
        claimed = mine.queue("q").claim_one("w")
        assert claimed is not None
        assert claimed.payload == "mine"
        assert mine.queue("q").claim_one("w") is None
        with psycopg.connect(dsn, autocommit=True) as direct:
            rows = direct.execute(
                sql.SQL("SELECT payload FROM {}.jobs").format(sql.Identifier(other))
            ).fetchall()
        assert [row[0] for row in rows] == ['"theirs"']
    finally:
        with psycopg.connect(dsn, autocommit=True) as direct:
            direct.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(other))
            )


def test_wakes_arrive_on_the_listen_dsn_connection(
    bouncer: PgBouncer, pooled: Opener, dsn: str
) -> None:
    name = f"alkstore-listen-{uuid.uuid4().hex[:12]}"
    store = pooled(bouncer, listen_dsn=make_conninfo(dsn, application_name=name))
    peer = pooled(bouncer)
    with store.listen("news") as wakes:
        peer.notify("news", None)
        assert wakes.recv(5) == Wake("news")
        # The LISTEN ran on the direct connection (its application name), not through the pooler.
        with psycopg.connect(dsn, autocommit=True) as direct:
            listeners = direct.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND query LIKE 'LISTEN %%'",
                (name,),
            ).fetchone()
        assert listeners == (1,)


def test_a_worker_drains_jobs_through_the_pooler(bouncer: PgBouncer, pooled: Opener) -> None:
    producer, consumer = pooled(bouncer), pooled(bouncer)
    handled: list[int] = []
    done = threading.Event()

    def handle(job: alkstore.Job) -> None:
        handled.append(job.payload)
        if len(handled) == 200:
            done.set()

    stop = threading.Event()
    # Parked, the worker wakes early only on a queue wake: its idle park lasts a minute.
    worker = alkstore.Worker(consumer, "work", handle, concurrency=4, idle_wait_s=60)
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        for n in range(100):  # some before the worker parks, some that wake it
            producer.queue("work").enqueue(n)
        with producer.transaction() as tx:
            for n in range(100, 200):
                tx.enqueue_tx("work", None, n)
        assert done.wait(30), f"{len(handled)} of 200 jobs handled"
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert sorted(handled) == list(range(200))
    assert producer.inspect().queues() == []


def test_a_transaction_pooler_without_listen_dsn_is_refused_at_open(bouncer: PgBouncer) -> None:
    with pytest.raises(ValueError, match="pooler='transaction' needs listen_dsn"):
        alkstore.open(bouncer.dsn, pooler="transaction")


@pytest.mark.parametrize("value", ["session", "TRANSACTION", "", 1])
def test_a_bad_pooler_is_refused_by_name(value: object) -> None:
    with pytest.raises(ValueError, match="pooler must be 'none' or 'transaction'"):
        Settings.from_options({"pooler": value})


def test_the_options_come_from_a_url_query_string_too() -> None:
    engine_url = (
        "postgresql://app@bouncer:6432/shop?pooler=transaction"
        "&listen_dsn=postgresql%3A%2F%2Fapp%40db%3A5432%2Fshop%3Fsslmode%3Drequire"
    )
    conninfo, options, _ = parse_target(engine_url)
    assert conninfo == "postgresql://app@bouncer:6432/shop"
    parsed = Settings.from_options(options)
    assert (parsed.pooler, parsed.listen_dsn) == (
        "transaction",
        "postgresql://app@db:5432/shop?sslmode=require",
    )
    assert parsed.listen_target(conninfo, "bouncer:6432") == (
        "postgresql://app@db:5432/shop?sslmode=require",
        "db:5432",
    )


@pytest.mark.parametrize(
    ("listen_dsn", "expected"),
    [
        (f"postgresql://ada:{PASSWORD}@[::1/app", "listen_dsn: not a valid PostgreSQL"),
        (f"host=db password={PASSWORD} port=x", "listen_dsn: the port in the connection"),
        (f"postgresql://ada:{PASSWORD}@db/app?schema=x", "listen_dsn takes no engine option"),
        ("   ", "listen_dsn must be a PostgreSQL connection string, not empty"),
    ],
)
def test_a_bad_listen_dsn_is_refused_and_never_shows_its_password(
    listen_dsn: str, expected: str
) -> None:
    with pytest.raises(ValueError, match=expected) as caught:
        Settings.from_options({"pooler": "transaction", "listen_dsn": listen_dsn})
    assert PASSWORD not in str(caught.value)


def test_the_listen_dsn_stays_out_of_reprs_and_unreachable_errors(
    bouncer: PgBouncer, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    listen_dsn = f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/postgres?connect_timeout=1"
    settings = Settings.from_options({"pooler": "transaction", "listen_dsn": listen_dsn})
    assert PASSWORD not in repr(settings)
    store = alkstore.open(
        bouncer.dsn, schema=schema, pooler="transaction", listen_dsn=listen_dsn,
        connect_timeout_s=1,
    )  # fmt: skip
    try:
        assert isinstance(store, PostgresStore)
        assert PASSWORD not in repr(store)
        assert PASSWORD not in repr(store.settings)
        with caplog.at_level(logging.WARNING, "alkstore.postgres"), store.listen("c"):
            deadline = time.monotonic() + 10
            while "cannot be made" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
        # The listener's one warning names the listen_dsn's address, never its password.
        assert "the LISTEN connection to PostgreSQL at 127.0.0.1:1 cannot be made" in caplog.text
        assert PASSWORD not in caplog.text
    finally:
        store.close()


@pytest.mark.parametrize("restarted", ["the server", "PgBouncer"])
def test_a_restart_of_the_server_or_the_pooler_fails_no_later_call(
    restarted: str, pgbouncer_binary: str, throwaway_server: ThrowawayServer
) -> None:
    # The pool's check of an idle connection sees PgBouncer's restart (the socket
    # closed); the server's restart, PgBouncer sees for itself (each idle server
    # connection got the server's FATAL) and lends the next transaction a new one.
    with pgbouncer(throwaway_server.dsn) as bouncer:
        store = alkstore.open(
            bouncer.dsn, pooler="transaction", listen_dsn=throwaway_server.dsn, pool_max_size=4
        )
        assert isinstance(store, PostgresStore)
        try:
            queue = store.queue("work")
            job_ids = [queue.enqueue(n) for n in range(20)]
            with contextlib.ExitStack() as held:  # four idle pooled connections for the restart
                for _ in range(4):
                    held.enter_context(store.connection())
            wakes = store.listen("news")
            outage: ThrowawayServer | PgBouncer = (
                throwaway_server if restarted == "the server" else bouncer
            )
            outage.stop()
            outage.start()

            claimed = queue.claim_batch("w", 100)  # the first call after the restart succeeds
            assert sorted(job.id for job in claimed) == job_ids
            assert queue.ack_batch([job.id for job in claimed], "w") == 20
            if restarted == "the server":  # the direct LISTEN connection came back too
                assert wakes.recv(30) == Wake(RECONNECT_CHANNEL)
            store.notify("news", None)
            assert wakes.recv(10) == Wake("news")
        finally:
            store.close()


def test_the_guides_dsn_form_says_what_its_keyword_form_says() -> None:
    page = (Path(__file__).parents[2] / "docs" / "pgbouncer.md").read_text()
    python = re.search(r"```(?:python|\{\.python[^}]*\})\n(.*?)```", page, re.S)
    text = re.search(r"```text\n(.*?)\n```", page, re.S)
    assert python is not None
    assert text is not None
    keywords = dict(re.findall(r'(\w+)="([^"]*)"', python[1]))
    target = re.search(r'"(postgresql://[^"]*)"', python[1])
    assert target is not None
    conninfo, options, _ = parse_target(text[1])
    assert conninfo == target[1]
    assert (
        options
        == keywords
        == {
            "pooler": "transaction",
            "listen_dsn": "postgresql://app@db:5432/app",
        }
    )
    assert Settings.from_options(options).listen_dsn == keywords["listen_dsn"]


@pytest.mark.parametrize("mode", ["run", "run_async", "AsyncStore"])
def test_an_ack_that_committed_as_the_pooler_died_counts_as_acked_not_lost(
    dsn: str, schema: str, mode: str, caplog: pytest.LogCaptureFixture, pgbouncer_binary: str
) -> None:
    # The ack's DELETE sleeps on the server; PgBouncer is killed meanwhile, and the
    # DELETE commits with no one to answer. The retried ack finds the job gone.
    options: dict[str, object] = {"schema": schema, "pooler": "transaction", "listen_dsn": dsn}
    alkstore.open(dsn, schema=schema).close()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            sql.SQL(
                "CREATE FUNCTION {}.slow_delete() RETURNS trigger LANGUAGE plpgsql"
                " AS $$ BEGIN PERFORM pg_sleep(2); RETURN old; END $$"
            ).format(sql.Identifier(schema))
        )
        connection.execute(
            sql.SQL(
                "CREATE TRIGGER slow BEFORE DELETE ON {}.jobs FOR EACH ROW EXECUTE FUNCTION {}()"
            ).format(sql.Identifier(schema), sql.Identifier(schema, "slow_delete"))
        )
    caplog.set_level(logging.WARNING, logger="alkstore.worker")
    handled = threading.Event()

    def handler(job: object) -> None:
        handled.set()

    with pgbouncer(dsn) as bouncer:

        def kill_the_pooler_mid_ack() -> None:
            assert handled.wait(20)
            time.sleep(0.7)  # the ack's DELETE is asleep on the server
            assert bouncer.process is not None
            bouncer.process.kill()
            bouncer.process.wait(10)
            bouncer.process = None
            time.sleep(0.5)
            bouncer.start()

        killer = threading.Thread(target=kill_the_pooler_mid_ack)
        killer.start()
        try:
            stats = _work_one_job(bouncer.dsn, options, handler, mode)
        finally:
            killer.join(30)
    assert (stats.succeeded, stats.lost) == (1, 0)
    assert "lost its claim" not in caplog.text
    with alkstore.open(dsn, schema=schema) as store:
        assert store.inspect().jobs("q", limit=10) == []


def _work_one_job(
    target: str, options: dict[str, object], handler: Callable[[object], None], mode: str
) -> alkstore.RunStats:
    """Enqueue one job and run a Worker until it settled it; its stats."""

    def settled(worker: alkstore.Worker) -> bool:
        stats = worker.stats()
        return stats.handled >= 1 and stats.in_flight == 0

    if mode == "run":
        with alkstore.open(target, **options) as store:
            store.queue("q").enqueue("x")
            worker = alkstore.Worker(store, "q", handler)
            stop = threading.Event()
            runner = threading.Thread(target=worker.run, args=(stop,))
            runner.start()
            deadline = time.monotonic() + 30
            while not settled(worker) and time.monotonic() < deadline:
                time.sleep(0.05)
            stop.set()
            runner.join(30)
            return worker.stats()

    async def main() -> alkstore.RunStats:
        async with contextlib.AsyncExitStack() as stack:
            store: alkstore.Store | alkstore.AsyncStore
            if mode == "AsyncStore":
                store = await stack.enter_async_context(alkstore.open_async(target, **options))
                await store.queue("q").enqueue("x")
            else:
                store = stack.enter_context(alkstore.open(target, **options))
                store.queue("q").enqueue("x")
            worker = alkstore.Worker(store, "q", handler)
            stop = asyncio.Event()
            running = asyncio.ensure_future(worker.run_async(stop))
            deadline = time.monotonic() + 30
            while not settled(worker) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(running, 30)
            return worker.stats()

    return asyncio.run(main())
