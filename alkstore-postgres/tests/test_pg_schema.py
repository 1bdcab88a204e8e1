"""The engine's schema on a real server: names of any size, any schema name,
version-1 schemas migrated in place, damaged schemas refused at open."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import alkstore
from alkstore_postgres import PostgresStore
from alkstore_postgres._names import stored
from alkstore_postgres._schema import SCHEMA_VERSION

OpenStore = Callable[..., PostgresStore]

LEASE_S = 0.6
"""A short scheduler lease: a stopped ``run_schedules`` returns within it."""

# Version 1 as alkstore-postgres 0.1.0.dev0 created it (names indexed as text).
V1_SCHEMA = """
CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL);
INSERT INTO {s}.meta (key, value) VALUES ('schema_version', '1');
CREATE TABLE {s}.jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL,
    payload text NOT NULL,
    priority int NOT NULL,
    run_at float8 NOT NULL,
    created_at float8 NOT NULL,
    expires_at float8,
    attempts int NOT NULL DEFAULT 0,
    max_attempts int NOT NULL,
    visibility_timeout_s float8 NOT NULL,
    backoff_base_s float8 NOT NULL,
    retention_s float8,
    worker_id text,
    deadline float8,
    last_error text
);
CREATE INDEX jobs_ready ON {s}.jobs (queue, priority DESC, run_at, id) WHERE deadline IS NULL;
CREATE INDEX jobs_claimed ON {s}.jobs (queue, deadline) WHERE deadline IS NOT NULL;
CREATE INDEX jobs_expiring ON {s}.jobs (queue, expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE {s}.dead (
    id bigint PRIMARY KEY,
    queue text NOT NULL,
    payload text NOT NULL,
    priority int NOT NULL,
    run_at float8 NOT NULL,
    created_at float8 NOT NULL,
    expires_at float8,
    attempts int NOT NULL,
    max_attempts int NOT NULL,
    retention_s float8,
    worker_id text,
    last_error text,
    died_at float8 NOT NULL
);
CREATE INDEX dead_by_queue ON {s}.dead (queue, died_at);
CREATE TABLE {s}.stream_heads (stream text PRIMARY KEY, head bigint NOT NULL);
CREATE TABLE {s}.events (
    stream text NOT NULL,
    "offset" bigint NOT NULL,
    key text,
    payload text NOT NULL,
    created_at float8 NOT NULL,
    PRIMARY KEY (stream, "offset")
);
CREATE TABLE {s}.offsets (
    stream text NOT NULL,
    consumer text NOT NULL,
    "offset" bigint NOT NULL,
    PRIMARY KEY (stream, consumer)
);
CREATE TABLE {s}.locks (name text PRIMARY KEY, owner text NOT NULL, expires_at float8 NOT NULL);
CREATE TABLE {s}.schedules (
    name text PRIMARY KEY,
    spec text NOT NULL,
    interval_s bigint NOT NULL,
    queue text NOT NULL,
    payload text NOT NULL,
    priority int NOT NULL,
    max_attempts int,
    expires_s float8,
    anchor float8 NOT NULL,
    next_fire_at float8 NOT NULL
)
"""

# Names whose stored form differs from the name (a backslash, a NUL), so the
# migration must key the stored text exactly as the statements do.
QUEUE = "ü\\mails"
STREAM = "orders\x00eu"

# Rows in every state: jobs 1-3 pending, held and lapsed, 100 dead.
V1_ROWS = """
INSERT INTO {s}.jobs (queue, payload, priority, run_at, created_at, attempts, max_attempts,
    visibility_timeout_s, backoff_base_s, worker_id, deadline) VALUES
    (%(queue)s, '"pending"', 0, %(now)s - 10, %(now)s - 10, 0, 3, 30, 1, NULL, NULL),
    (%(queue)s, '"held"', 0, %(now)s - 10, %(now)s - 10, 1, 3, 30, 1, 'old-worker', %(now)s + 300),
    (%(queue)s, '"lapsed"', 0, %(now)s - 10, %(now)s - 10, 1, 3, 30, 1, 'gone', %(now)s - 5);
INSERT INTO {s}.dead (id, queue, payload, priority, run_at, created_at, attempts, max_attempts,
    worker_id, last_error, died_at)
    VALUES (100, %(queue)s, '"dead"', 0, %(now)s - 20, %(now)s - 20, 3, 3, 'w', 'boom', %(now)s);
INSERT INTO {s}.stream_heads (stream, head) VALUES (%(stream)s, 2);
INSERT INTO {s}.events (stream, "offset", key, payload, created_at) VALUES
    (%(stream)s, 1, 'k1', '"e1"', %(now)s), (%(stream)s, 2, NULL, '"e2"', %(now)s);
INSERT INTO {s}.offsets (stream, consumer, "offset") VALUES (%(stream)s, 'projection', 1);
INSERT INTO {s}.locks (name, owner, expires_at) VALUES
    ('held', 'owner-a', %(now)s + 300), ('stale', 'owner-b', %(now)s - 1);
INSERT INTO {s}.schedules (name, spec, interval_s, queue, payload, priority, anchor, next_fire_at)
    VALUES ('nightly', '@every 1h', 3600, %(queue)s, '"tick"', 0, %(now)s - 3601, %(now)s - 1)
"""


def run_sql(dsn: str, schema: str, script: str, params: dict[str, Any] | None = None) -> None:
    """Run ``script``'s statements with ``{s}`` the quoted schema, in one transaction."""
    schema_sql = sql.Identifier(schema)
    with psycopg.connect(dsn) as connection:
        for statement in script.split(";"):
            if statement.strip():
                composed = sql.SQL(statement).format(s=schema_sql)
                connection.execute(composed, params if "%(" in statement else None)


def build_v1(dsn: str, schema: str) -> None:
    """A version-1 schema holding pending, held, lapsed and dead jobs, events, an
    offset, a held and a stale lock, and a due schedule."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    run_sql(dsn, schema, V1_SCHEMA)
    params = {"queue": stored(QUEUE), "stream": stored(STREAM), "now": time.time()}
    run_sql(dsn, schema, V1_ROWS, params)


def stored_version(dsn: str, schema: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as connection:
        query = sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'")
        row = connection.execute(query.format(sql.Identifier(schema))).fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def v1_schema(dsn: str, schema: str) -> str:
    build_v1(dsn, schema)
    return schema


def test_a_version_1_schema_is_migrated_on_open_and_every_row_works(
    dsn: str, v1_schema: str, open_store: OpenStore
) -> None:
    store = open_store(scheduler_lease_s=LEASE_S)
    assert stored_version(dsn, v1_schema) == str(SCHEMA_VERSION)
    queue = store.queue(QUEUE)
    held = queue.get_job(2)
    assert held is not None
    assert (held.queue, held.state, held.worker_id, held.payload) == (
        QUEUE, "processing", "old-worker", "held",
    )  # fmt: skip
    dead = queue.get_job(100)
    assert dead is not None
    assert (dead.state, dead.last_error) == ("dead", "boom")
    claimed = queue.claim_batch("new-worker", 10)  # the pending job, and the lapsed one again
    assert sorted((job.id, job.payload, job.attempts) for job in claimed) == [
        (1, "pending", 1), (3, "lapsed", 2),
    ]  # fmt: skip
    assert all(job.ack() for job in claimed)
    assert queue.cancel(2)
    # The dead letter kept no stamps before version 3: a requeue gives it the queue's.
    assert queue.requeue_dead([100]) == 1
    revived = queue.claim_one("new-worker")
    assert revived is not None
    assert (revived.id, revived.payload, revived.attempts) == (100, "dead", 1)
    assert revived.visibility_timeout_s == queue.opts.visibility_timeout_s
    assert revived.fail("again")
    assert queue.cancel(100)
    keyed = queue.enqueue("keyed", alkstore.EnqueueOpts(key="k"))
    assert queue.enqueue("twice", alkstore.EnqueueOpts(key="k")) == keyed
    assert queue.cancel(keyed)
    new = queue.enqueue("new")
    again = queue.claim_one("new-worker")
    assert again is not None
    assert again.id == new
    assert again.ack()

    stream = store.stream(STREAM)
    assert [(e.offset, e.key, e.payload) for e in stream.read_since(0)] == [
        (1, "k1", "e1"), (2, None, "e2"),
    ]  # fmt: skip
    assert stream.get_offset("projection") == 1
    assert stream.save_offset("projection", 2)
    assert stream.publish("e3") == 3
    [stats] = store.inspect().streams()
    assert (stats.name, stats.head, [(c.name, c.offset, c.lag) for c in stats.consumers]) == (
        STREAM, 3, [("projection", 2, 1)],
    )  # fmt: skip

    assert store.try_lock("held", "owner-x", 5) is None
    mine = store.try_lock("held", "owner-a", 5)
    assert mine is not None
    assert mine.release()
    taken = store.try_lock("stale", "owner-c", 5)
    assert taken is not None
    assert taken.release()

    fired = fire_schedules(store, lambda: queue.claim_one("w"))
    assert fired.payload == "tick"
    [schedule] = store.inspect().schedules()
    assert (schedule.name, schedule.queue) == ("nightly", QUEUE)
    assert schedule.next_fire_at > time.time()
    store.schedule("nightly", "@every 1h", QUEUE, "tock")  # an upsert of the same row
    assert [s.payload for s in store.inspect().schedules()] == ["tock"]
    assert store.unschedule("nightly")


VERSION_6_ONLY = """
DROP INDEX {s}.dead_purgeable;
UPDATE {s}.meta SET value = '5' WHERE key = 'schema_version'
"""
"""What version 6 added: taken away, today's schema is version 5 as it was."""

VERSIONS_5_AND_6_ONLY = """
DROP INDEX {s}.dead_purgeable;
ALTER TABLE {s}.schedules DROP COLUMN last_fired_at;
UPDATE {s}.meta SET value = '4' WHERE key = 'schema_version'
"""
"""What versions 5 and 6 added: taken away, today's schema is version 4 as it was."""

VERSIONS_4_TO_6_ONLY = """
DROP INDEX {s}.dead_purgeable;
ALTER TABLE {s}.schedules DROP COLUMN last_fired_at;
ALTER TABLE {s}.stream_heads DROP COLUMN trimmed_through;
UPDATE {s}.meta SET value = '3' WHERE key = 'schema_version'
"""
"""What versions 4 to 6 added: taken away, today's schema is version 3 as it was."""

VERSIONS_3_TO_6_ONLY = """
DROP INDEX {s}.dead_purgeable;
ALTER TABLE {s}.schedules DROP COLUMN last_fired_at;
ALTER TABLE {s}.stream_heads DROP COLUMN trimmed_through;
DROP INDEX {s}.jobs_key;
ALTER TABLE {s}.jobs DROP COLUMN key, DROP COLUMN key_digest, DROP COLUMN traceparent;
ALTER TABLE {s}.dead DROP COLUMN key, DROP COLUMN visibility_timeout_s,
    DROP COLUMN backoff_base_s, DROP COLUMN traceparent;
ALTER TABLE {s}.schedules DROP COLUMN tz, DROP COLUMN job_key;
UPDATE {s}.meta SET value = '2' WHERE key = 'schema_version'
"""
"""What versions 3 to 6 added: taken away, today's schema is version 2 as it was."""


def test_a_version_2_schema_gains_the_schedules_time_zone_keeping_its_schedules(
    dsn: str, schema: str, open_store: OpenStore
) -> None:
    first = open_store()
    made = first.schedule("tick", "@every 1h", "jobs", {"v": 1})
    first.close()
    run_sql(dsn, schema, VERSIONS_3_TO_6_ONLY)
    store = open_store()
    assert stored_version(dsn, schema) == str(SCHEMA_VERSION)
    assert store.inspect().schedules() == [made]
    assert store.schedule("tick", "@every 1h", "jobs", 2).next_fire_at == made.next_fire_at
    nightly = store.schedule(
        "nightly", "0 3 * * *", "jobs", 3, alkstore.ScheduleOpts(tz="Europe/Berlin")
    )
    assert [(s.name, s.tz) for s in store.inspect().schedules()] == [
        ("nightly", "Europe/Berlin"), ("tick", None),
    ]  # fmt: skip
    assert nightly.tz == "Europe/Berlin"


def test_a_version_2_schema_gains_job_keys_and_traces_keeping_its_jobs(
    dsn: str, schema: str, open_store: OpenStore
) -> None:
    first = open_store()
    queue = first.queue("q")
    live = queue.enqueue("live")
    dead = queue.enqueue("dead")
    for job in queue.claim_batch("w", 2):
        if job.id == dead:
            assert job.fail("boom")
        else:
            assert job.release()
    first.close()
    run_sql(dsn, schema, VERSIONS_3_TO_6_ONLY)
    store = open_store()
    queue = store.queue("q", alkstore.QueueOpts(visibility_timeout_s=77))
    keyed = queue.enqueue("keyed", alkstore.EnqueueOpts(key="k"))
    assert queue.enqueue("again", alkstore.EnqueueOpts(key="k")) == keyed
    assert queue.requeue_dead() == 1
    jobs = {job.id: job for job in queue.claim_batch("w", 10)}
    assert sorted(jobs) == sorted([live, dead, keyed])
    assert (jobs[dead].visibility_timeout_s, jobs[live].key, jobs[keyed].key) == (77, None, "k")


def test_a_version_3_schema_gains_stream_trims_keeping_its_streams(
    dsn: str, schema: str, open_store: OpenStore
) -> None:
    first = open_store()
    offsets = [first.stream("orders").publish(n) for n in range(3)]
    first.stream("orders").save_offset("billing", offsets[0])
    first.close()
    run_sql(dsn, schema, VERSIONS_4_TO_6_ONLY)
    store = open_store()
    assert stored_version(dsn, schema) == str(SCHEMA_VERSION)
    orders = store.stream("orders")
    assert (orders.trimmed_through(), orders.get_offset("billing")) == (0, offsets[0])
    assert orders.retain(keep_last=0) == 1, "billing has read only the first"
    assert [event.payload for event in orders.read_from_consumer("billing")] == [1, 2]
    assert orders.publish(3) == offsets[-1] + 1


def fire_schedules(store: PostgresStore, check: Callable[[], alkstore.Job | None]) -> alkstore.Job:
    """Run the scheduler until ``check`` finds the job it enqueued (at most 10 s)."""
    stop = threading.Event()
    runner = threading.Thread(target=store.run_schedules, args=(stop,), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while (job := check()) is None:
            assert time.monotonic() < deadline, "the due schedule never fired"
            time.sleep(0.02)
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive()
    return job


def test_processes_opening_a_version_1_schema_at_once_migrate_it_once(
    dsn: str, v1_schema: str, open_store: OpenStore
) -> None:
    start_at = time.time() + 1.0
    code = (
        "import sys, time, alkstore; time.sleep(max(0, float(sys.argv[3]) - time.time())); "
        "s = alkstore.open(sys.argv[1], schema=sys.argv[2]); "
        "print(len(s.inspect().jobs(sys.argv[4]))); s.close()"
    )
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code, dsn, v1_schema, str(start_at), QUEUE],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [child.communicate(timeout=60)[0] for child in children]
    assert [child.returncode for child in children] == [0] * 4
    assert [int(out) for out in outputs] == [4] * 4  # three live jobs and the dead one
    assert stored_version(dsn, v1_schema) == str(SCHEMA_VERSION)
    store = open_store()
    assert len(store.queue(QUEUE).claim_batch("w", 10)) == 2


DAMAGE = [
    pytest.param(
        "ALTER TABLE {s}.jobs DROP COLUMN last_error",
        rf"\(version {SCHEMA_VERSION}\) were altered: table jobs has no column last_error",
        id="dropped column",
    ),
    pytest.param("DROP TABLE {s}.locks", "table locks is missing", id="dropped table"),
    pytest.param(
        "ALTER TABLE {s}.jobs ALTER COLUMN run_at TYPE text",
        "column jobs.run_at is text, not double precision",
        id="changed type",
    ),
    pytest.param(
        "ALTER TABLE {s}.events ADD COLUMN note text",
        "table events has a column note alkstore does not use",
        id="added column",
    ),
    pytest.param("DROP INDEX {s}.jobs_ready", "index jobs_ready is missing", id="dropped index"),
    pytest.param(
        "UPDATE {s}.meta SET value = 'abc'",
        r"version stored in '[^']+'\.meta is 'abc', which no alkstore-postgres writes",
        id="version not a number",
    ),
    pytest.param(
        "UPDATE {s}.meta SET value = '99'",
        rf"version 99, newer than this alkstore-postgres understands \({SCHEMA_VERSION}\); upgrade",
        id="newer version",
    ),
    pytest.param(
        "DELETE FROM {s}.meta",
        "holds tables named like alkstore's but no alkstore schema version",
        id="version row deleted",
    ),
]


@pytest.mark.parametrize(("damage", "message"), DAMAGE)
def test_opening_a_damaged_schema_fails_naming_what_is_wrong(
    dsn: str, schema: str, open_store: OpenStore, damage: str, message: str
) -> None:
    open_store().close()
    run_sql(dsn, schema, damage)
    with pytest.raises(alkstore.Database, match=message) as caught:
        alkstore.open(dsn, schema=schema)
    assert repr(schema) in str(caught.value)


@pytest.mark.parametrize(
    "foreign_meta",
    ["CREATE TABLE {s}.meta (x int)", "CREATE TABLE {s}.meta (key text PRIMARY KEY, note text)"],
    ids=["other columns", "no value column"],
)
def test_a_schema_with_a_meta_table_of_someone_elses_is_refused_naming_it(
    dsn: str, schema: str, foreign_meta: str
) -> None:
    """Not a raw 'column "value" does not exist', and the table is left as found."""
    run_sql(dsn, schema, f"CREATE SCHEMA {{s}}; {foreign_meta}")

    async def open_async() -> None:
        await alkstore.open_async(dsn, schema=schema)

    for opening in (lambda: alkstore.open(dsn, schema=schema), lambda: asyncio.run(open_async())):
        with pytest.raises(alkstore.Database, match="holds a table meta that is not alkstore's"):
            opening()
    with psycopg.connect(dsn) as connection:
        tables = connection.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchone()
    assert tables == (1,)


def test_a_version_1_schema_with_a_dropped_table_is_refused_without_change(
    dsn: str, v1_schema: str
) -> None:
    run_sql(dsn, v1_schema, "DROP TABLE {s}.locks")
    with pytest.raises(alkstore.Database, match="locks"):
        alkstore.open(dsn, schema=v1_schema)
    assert stored_version(dsn, v1_schema) == "1"  # the failed migration rolled back


AWKWARD_SCHEMAS = ["a{now}b", 'we"ird', "with space", "ünïcödé", "{s}", "50%off", "%(x)s", "%s"]


@pytest.fixture
def awkward_schema(dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The awkward name, made this test's own: runs side by side (two Pythons of
    the test matrix, one server) dropped each other's schema mid-test."""
    name = f"{request.param}_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.mark.parametrize("awkward_schema", AWKWARD_SCHEMAS, indirect=True)
def test_any_schema_name_postgresql_accepts_runs_every_statement(
    dsn: str, awkward_schema: str
) -> None:
    with alkstore.open(dsn, schema=awkward_schema, scheduler_lease_s=LEASE_S) as store:
        assert isinstance(store, PostgresStore)
        work_every_mechanism(store)
        with psycopg.connect(dsn) as connection:
            adopted = store.adopt_tx(connection)
            job_id = adopted.enqueue_tx("adopted", None, 1)
            connection.commit()
        assert store.queue("adopted").get_job(job_id) is not None
    with alkstore.open(dsn, schema=awkward_schema) as again:  # an existing schema checks out
        assert again.queue("adopted").get_job(job_id) is not None


def work_every_mechanism(store: PostgresStore) -> None:
    """Run each of the engine's statements at least once, checking the results."""
    queue = store.queue("q", alkstore.QueueOpts(max_attempts=2))
    ids = [queue.enqueue(n) for n in range(3)]
    with store.transaction() as tx:  # reserved ids, column arrays, held publishes
        ids += [tx.enqueue_tx("q", None, n) for n in (3, 4)]
        first = tx.publish_tx("s", "a")
        assert tx.publish_tx("s", "b") == first + 1
        tx.save_offset_tx("s", "c", first)
        tx.notify_tx("ch", None)
    assert queue.wait(0)
    jobs = queue.claim_batch("w", 3)
    assert [job.id for job in jobs] == ids[:3]
    assert jobs[0].heartbeat(30)
    assert jobs[0].ack()
    assert jobs[1].retry("again", 0)
    assert jobs[2].fail("broken")
    assert queue.get_job(ids[2]) is not None
    assert queue.cancel(ids[2])
    assert queue.ack_batch([job.id for job in queue.claim_batch("w", 5)], "w") == 3
    assert queue.sweep_expired() == 0
    stream = store.stream("s")
    assert [e.payload for e in stream.read_since(0)] == ["a", "b"]
    assert stream.save_offset("c", first + 1)
    assert stream.get_offset("c") == first + 1
    with store.listen("ch") as wakes:
        store.notify("ch", None)
        assert wakes.recv(5) == alkstore.Wake("ch")
    lock = store.try_lock("l", "me", 30)
    assert lock is not None
    assert lock.renew(30)
    assert lock.release()
    store.schedule("tick", "@every 1h", "fired", "tick")
    with store.connection() as connection:  # due now, not in an hour
        due = sql.SQL("UPDATE {}.schedules SET next_fire_at = next_fire_at - 3600").format(
            sql.Identifier(store.settings.schema)
        )
        connection.execute(due)
    assert fire_schedules(store, lambda: store.queue("fired").claim_one("w")).payload == "tick"
    assert store.unschedule("tick")
    inspector = store.inspect()
    assert [(q.name, q.processing) for q in inspector.queues()] == [("fired", 1)]
    assert [s.name for s in inspector.streams()] == ["s"]
    assert inspector.locks() == []
    assert inspector.schedules() == []
    assert [job.state for job in inspector.jobs("fired")] == ["processing"]
    assert inspector.jobs("fired", "pending") == inspector.jobs("fired", "dead") == []


def test_a_schema_name_postgresql_cannot_hold_is_refused_by_option_name(dsn: str) -> None:
    with pytest.raises(ValueError, match=r"schema .*without NUL"):
        alkstore.open(dsn, schema="nul\x00schema")


@pytest.mark.parametrize("system_schema", ["information_schema", "pg_catalog", "pg_mine"])
def test_postgresqls_own_schemas_are_refused_and_left_alone(dsn: str, system_schema: str) -> None:
    with pytest.raises(ValueError, match="PostgreSQL's own schemas"):
        alkstore.open(dsn, schema=system_schema)
    with psycopg.connect(dsn) as connection:
        made = connection.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = 'meta'",
            (system_schema,),
        ).fetchone()
    assert made == (0,)


# Each hot statement, its parameters, and the indexes its plan must use. With
# sequential scans priced out, a statement whose WHERE or ON CONFLICT does not
# match an index's key expression still scans the table: the plan tells.
HOT_STATEMENTS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "claim": ({"queue": "q", "worker": "w", "n": 1}, ("jobs_ready",)),
    "lapsed_to_dead": ({"queue": "q", "lapsed": "lapsed"}, ("jobs_claimed",)),
    "lapsed_to_pending": ({"queue": "q"}, ("jobs_claimed",)),
    "ack": ({"id": 1, "attempts": 1, "worker": "w"}, ("jobs_pkey",)),
    "next_ready": ({"queue": "q"}, ("jobs_ready", "jobs_claimed")),
    "expired_to_dead": ({"queue": "q", "expired": "expired"}, ("jobs_expiring",)),
    "get_live": ({"id": 1, "queue": "q"}, ("jobs_pkey",)),
    "purge_dead": ({"queue": "q"}, ("dead_purgeable",)),
    "publish": (
        {"stream": "s", "key": None, "payload": "1", "channel": "c", "wake": "w"},
        ("stream_heads_pkey",),
    ),
    "read_since": ({"stream": "s", "offset": 0, "limit": 10}, ("events_pkey",)),
    "get_offset": ({"stream": "s", "consumer": "c"}, ("offsets_pkey",)),
    "save_offset": (
        {"stream": "s", "consumer": "c", "offset": 1},
        ("offsets_pkey", "stream_heads_pkey"),
    ),
    "try_lock": ({"name": "l", "owner": "o", "ttl": 1.0}, ("locks_pkey",)),
    "renew_lock": ({"name": "l", "owner": "o", "ttl": 1.0}, ("locks_pkey",)),
    "sweep_lapsed_locks": ({"after": b"", "window": 10, "grace": 60.0}, ("locks_pkey",)),
    "get_schedule": ({"name": "n"}, ("schedules_pkey",)),
    "advance_schedule": ({"name": "n", "to": 1.0, "from": 0.0}, ("schedules_pkey",)),
}


@pytest.mark.parametrize("statement", sorted(HOT_STATEMENTS))
def test_hot_statements_find_names_through_their_key_indexes(
    store: PostgresStore, statement: str
) -> None:
    params, indexes = HOT_STATEMENTS[statement]
    with store.connection() as connection, connection.transaction():
        connection.execute("SET LOCAL enable_seqscan = off")
        explain = "EXPLAIN (FORMAT JSON) " + getattr(store.sql, statement)
        row = connection.execute(explain, params).fetchone()
    assert row is not None
    plan = json.dumps(row[0])
    assert '"Seq Scan"' not in plan
    for index in indexes:
        assert f'"{index}"' in plan, f"{statement} does not use {index}: {plan}"


def test_a_version_4_schema_gains_the_schedules_last_fire_keeping_its_schedules(
    dsn: str, schema: str, open_store: OpenStore
) -> None:
    first = open_store()
    made = first.schedule("tick", "@every 1h", "jobs", {"v": 1})
    first.close()
    run_sql(dsn, schema, VERSIONS_5_AND_6_ONLY)
    store = open_store()
    assert stored_version(dsn, schema) == str(SCHEMA_VERSION)
    assert store.inspect().schedules() == [made]
    assert made.last_fire_at is None
    assert store.schedule("tick", "@every 1h", "jobs", 2).next_fire_at == made.next_fire_at


DEAD_LETTERS = """
INSERT INTO {s}.dead (id, queue_key, queue, payload, priority, run_at, created_at,
    attempts, max_attempts, retention_s, last_error, died_at)
SELECT i, sha256(convert_to('q', 'UTF8')), 'q', '"x"', 0, %(now)s, %(now)s, 3, 3,
    CASE WHEN i %% 100 = 0 THEN 60 END, 'boom', %(now)s - i
FROM generate_series(1, 20000) AS i
"""
"""20,000 dead letters of queue ``q``, died a second apart; 1 in 100 kept 60 s."""


def test_a_version_5_schema_gains_the_purgeable_index_and_sweeps_read_only_through_it(
    dsn: str, schema: str, open_store: OpenStore
) -> None:
    open_store().close()
    run_sql(dsn, schema, VERSION_6_ONLY)
    run_sql(dsn, schema, DEAD_LETTERS, {"now": time.time()})
    store = open_store()
    assert stored_version(dsn, schema) == str(SCHEMA_VERSION)
    run_sql(dsn, schema, "ANALYZE {s}.dead")
    with store.connection() as connection, connection.transaction(force_rollback=True):
        explain = "EXPLAIN (ANALYZE, FORMAT JSON) " + store.sql.purge_dead
        row = connection.execute(explain, {"queue": "q"}).fetchone()
    assert row is not None
    plan = json.dumps(row[0])
    assert '"Seq Scan"' not in plan, plan
    assert '"dead_purgeable"' in plan, plan
    # Dead 60 s or more with 60 s kept: ids 100, 200, ..., 20000 (200 rows); the
    # 19,800 kept forever stay.
    assert store.queue("q").sweep_expired() == 0
    with psycopg.connect(dsn, autocommit=True) as connection:
        count = sql.SQL("SELECT count(*) FROM {}.dead").format(sql.Identifier(schema))
        assert connection.execute(count).fetchone() == (19_800,)


def _with_options(dsn: str, **options: str) -> str:
    return make_conninfo(dsn, **options)


def test_a_current_schema_opens_in_read_only_transactions(
    dsn: str, schema: str, open_store: OpenStore
) -> None:
    """A hot standby runs every transaction read-only: opening a current schema
    writes nothing, so it opens and can be inspected; a write fails, clearly."""
    open_store().queue("q").enqueue("kept")
    read_only = _with_options(dsn, options="-c default_transaction_read_only=on")
    with alkstore.open(read_only, schema=schema) as store:
        (stats,) = store.inspect().queues()
        assert (stats.name, stats.ready) == ("q", 1)
        with pytest.raises(alkstore.Database, match="read-only transaction"):
            store.queue("q").enqueue("more")

    async def opened_async() -> None:
        async with alkstore.open_async(read_only, schema=schema) as store:
            (stats,) = await store.inspect().queues()
            assert stats.ready == 1

    asyncio.run(opened_async())


@pytest.fixture
def app_role(dsn: str) -> Iterator[str]:
    """A login role with no right to create anything in the database."""
    role = f"alkstore_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    yield role
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_an_application_role_with_only_row_rights_opens_a_current_schema(
    dsn: str, schema: str, open_store: OpenStore, app_role: str
) -> None:
    """Least privilege: the schema made by an owner, the application's role given
    rights on rows and sequences only (no CREATE), and every call works."""
    open_store().close()
    run_sql(
        dsn, schema,
        f'GRANT USAGE ON SCHEMA {{s}} TO "{app_role}"; '
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {{s}} TO "{app_role}"; '
        f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {{s}} TO "{app_role}"',
    )  # fmt: skip
    with alkstore.open(_with_options(dsn, user=app_role), schema=schema) as store:
        queue = store.queue("q")
        job_id = queue.enqueue("work")
        job = queue.claim_one("w")
        assert job is not None
        assert job.id == job_id
        assert job.ack()
        lock = store.try_lock("l", "me", 30)
        assert lock is not None
        assert lock.release()
        assert store.stream("s").publish(1) == 1


def test_an_application_role_that_cannot_create_the_schema_is_told_what_to_do(
    dsn: str, schema: str, app_role: str
) -> None:
    with pytest.raises(alkstore.Database, match="open the store once with a role that may"):
        alkstore.open(_with_options(dsn, user=app_role), schema=schema)
