"""Opening checks the engine tables: an altered or damaged file is refused, by name, at once."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import alkstore
from alkstore_sqlite import _schema
from alkstore_sqlite._schema import SCHEMA_VERSION


@contextmanager
def raw(path: str) -> Iterator[sqlite3.Connection]:
    """A plain driver connection, as another program would use: commit, then close."""
    connection = sqlite3.connect(path)
    try:
        with connection:
            yield connection
    finally:
        connection.close()


@pytest.fixture
def made(path: str) -> str:
    """A file the engine created, with a job in it, closed again."""
    with alkstore.open(path) as store:
        store.queue("q").enqueue("kept")
    return path


def stored_version(path: str) -> str:
    with raw(path) as connection:
        row = connection.execute(
            "SELECT value FROM __alkstore_meta WHERE key = 'schema_version'"
        ).fetchone()
        return str(row[0])


def alter(path: str, sql: str) -> None:
    with raw(path) as connection:
        connection.execute(sql)


@pytest.mark.parametrize(
    ("table", "column"),
    [("__alkstore_jobs", "last_error"), ("__alkstore_dead", "worker_id"),
     ("__alkstore_events", "key"), ("__alkstore_schedules", "anchor")],
)  # fmt: skip
def test_a_dropped_column_is_refused_at_open_naming_table_and_column(
    made: str, table: str, column: str
) -> None:
    alter(made, f"ALTER TABLE {table} DROP COLUMN {column}")
    with pytest.raises(alkstore.Database, match=f"{table} lacks column {column}") as raised:
        alkstore.open(made)
    assert made in str(raised.value)


def test_a_dropped_table_is_refused_at_open(made: str) -> None:
    alter(made, "DROP TABLE __alkstore_offsets")
    with pytest.raises(alkstore.Database, match="table __alkstore_offsets is missing"):
        alkstore.open(made)


def test_every_problem_is_named_at_once(made: str) -> None:
    alter(made, "DROP TABLE __alkstore_locks")
    alter(made, "ALTER TABLE __alkstore_jobs DROP COLUMN visibility_timeout_s")
    alter(made, "ALTER TABLE __alkstore_notices ADD COLUMN note TEXT")
    with pytest.raises(alkstore.Database) as raised:
        alkstore.open(made)
    message = str(raised.value)
    assert "__alkstore_jobs lacks column visibility_timeout_s" in message
    assert "table __alkstore_locks is missing" in message
    assert "__alkstore_notices has unexpected column note" in message


# The last is ARABIC-INDIC DIGIT ONE, which int() would read as 1.
@pytest.mark.parametrize("version", ["abc", "", "0", "-1", "1.0", " 1", "\u0661"])
def test_a_stored_version_the_engine_never_wrote_is_refused_and_left_alone(
    made: str, version: str
) -> None:
    alter(made, f"UPDATE __alkstore_meta SET value = '{version}' WHERE key = 'schema_version'")
    with pytest.raises(alkstore.Database, match="schema version stored in __alkstore_meta is"):
        alkstore.open(made)
    assert stored_version(made) == version  # the refused open rolled back, writing nothing


def test_a_newer_version_still_asks_for_an_upgrade(made: str) -> None:
    alter(made, f"UPDATE __alkstore_meta SET value = '{SCHEMA_VERSION + 1}'")
    with pytest.raises(alkstore.Database, match="upgrade alkstore-sqlite"):
        alkstore.open(made)


def test_engine_tables_without_a_stored_version_are_refused(made: str) -> None:
    alter(made, "DELETE FROM __alkstore_meta")
    with pytest.raises(alkstore.Database, match="alkstore tables but no schema version"):
        alkstore.open(made)


def test_an_intact_file_reopens_with_its_data(made: str) -> None:
    with alkstore.open(made) as store:
        assert [job.payload for job in store.queue("q").claim_batch("w", 10)] == ["kept"]
    assert stored_version(made) == str(SCHEMA_VERSION)


def test_application_tables_and_columns_are_not_the_engines_business(made: str) -> None:
    alter(made, "CREATE TABLE alkstore_orders (id INTEGER)")
    alter(made, "CREATE TABLE orders (id INTEGER, __alkstore_note TEXT)")
    with alkstore.open(made) as store:
        assert store.queue("q").enqueue(1) > 0


def test_a_version_1_file_is_migrated_on_open_and_its_rows_work(path: str) -> None:
    """A file written before unique jobs: its live job stays, a keyed enqueue
    works beside it, and its dead letter (no stamps kept) requeues with the
    queue's opts."""
    with raw(path) as connection:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(
            "CREATE TABLE __alkstore_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
        )
        connection.executescript(_schema._MIGRATIONS[0])
        connection.execute("INSERT INTO __alkstore_meta VALUES ('schema_version', '1')")
        connection.execute(
            "INSERT INTO __alkstore_jobs (id, queue, payload, priority, run_at, created_at, "
            "max_attempts, visibility_timeout_s, backoff_base_s) "
            "VALUES (1, 'q', '\"live\"', 0, 0, 0, 3, 30, 1)"
        )
        connection.execute(
            "INSERT INTO __alkstore_dead (id, queue, payload, priority, run_at, created_at, "
            "attempts, max_attempts, last_error, died_at) "
            "VALUES (2, 'q', '\"died\"', 5, 0, 0, 3, 3, 'boom', 0)"
        )
        # It died a job: the id was handed out.
        connection.execute("UPDATE sqlite_sequence SET seq = 2 WHERE name = '__alkstore_jobs'")
    with alkstore.open(path) as store:
        queue = store.queue("q", alkstore.QueueOpts(visibility_timeout_s=42, backoff_base_s=7))
        assert stored_version(path) == str(SCHEMA_VERSION)
        keyed = queue.enqueue("keyed", alkstore.EnqueueOpts(key="k"))
        assert queue.enqueue("again", alkstore.EnqueueOpts(key="k")) == keyed
        assert queue.requeue_dead() == 1
        jobs = {job.payload: job for job in queue.claim_batch("w", 10)}
    assert sorted(jobs) == ["died", "keyed", "live"]
    assert (jobs["died"].id, jobs["died"].priority, jobs["died"].attempts) == (2, 5, 1)
    assert jobs["died"].visibility_timeout_s == 42
    assert (jobs["keyed"].key, jobs["live"].key) == ("k", None)


def make_version_1_file(path: str) -> None:
    """A file as alkstore-sqlite wrote it before schema version 2: an ``@every``
    schedule and a job in it."""
    from alkstore_sqlite._schema import _META, _V1, _statements

    with raw(path) as connection:
        connection.execute(_META)
        for statement in _statements(_V1):
            connection.execute(statement)
        connection.execute("INSERT INTO __alkstore_meta VALUES ('schema_version', '1')")
        connection.execute(
            "INSERT INTO __alkstore_schedules VALUES "
            "('tick', '@every 1h', 3600, 'jobs', '{\"v\": 1}', 2, NULL, NULL, 1000.0, 4600.0)"
        )
        connection.execute(
            "INSERT INTO __alkstore_jobs (queue, payload, priority, run_at, created_at, "
            "max_attempts, visibility_timeout_s, backoff_base_s) "
            "VALUES ('q', '\"kept\"', 0, 0, 0, 3, 300, 5)"
        )


def test_a_version_1_file_is_upgraded_in_place_keeping_its_rows(path: str) -> None:
    make_version_1_file(path)
    with alkstore.open(path) as store:
        [schedule] = store.inspect().schedules()
        assert schedule == alkstore.Schedule("tick", "@every 1h", "jobs", {"v": 1}, 4600.0)
        assert schedule.tz is None
        assert [job.payload for job in store.queue("q").claim_batch("w", 10)] == ["kept"]
        # the same spec again keeps its timing; a cron schedule in a zone now fits too
        assert store.schedule("tick", "@every 1h", "jobs", 2).next_fire_at == 4600.0
        nightly = store.schedule(
            "nightly", "0 3 * * *", "jobs", 3, alkstore.ScheduleOpts(tz="Europe/Berlin")
        )
        assert nightly.tz == "Europe/Berlin"
    assert stored_version(path) == str(SCHEMA_VERSION) == "6"
    with alkstore.open(path) as store:  # and the upgraded file reopens as it is
        assert [s.tz for s in store.inspect().schedules()] == ["Europe/Berlin", None]


def test_a_version_2_file_gains_stream_trims_keeping_its_events(path: str) -> None:
    from alkstore_sqlite._schema import _META, _V1, _V2, _statements

    with raw(path) as connection:
        connection.execute(_META)
        for statement in [*_statements(_V1), *_statements(_V2)]:
            connection.execute(statement)
        connection.execute("INSERT INTO __alkstore_meta VALUES ('schema_version', '2')")
        for n in range(3):
            connection.execute(
                "INSERT INTO __alkstore_events (stream, key, payload, created_at) "
                f"VALUES ('orders', NULL, '{n}', 0)"
            )
    with alkstore.open(path) as store:
        orders = store.stream("orders")
        assert [event.payload for event in orders.read_since(0)] == [0, 1, 2]
        assert orders.trim(2) == 2
        assert [event.payload for event in orders.read_since(2)] == [2]
    assert stored_version(path) == str(SCHEMA_VERSION)


def make_file_at_version(path: str, version: int) -> None:
    """A file as alkstore-sqlite wrote it at schema ``version``, with no rows."""
    with raw(path) as connection:
        connection.execute(_schema._META)
        for script in _schema._MIGRATIONS[:version]:
            for statement in _schema._statements(script):
                connection.execute(statement)
        connection.execute(
            "INSERT INTO __alkstore_meta VALUES ('schema_version', ?)", (str(version),)
        )


def test_a_version_3_file_gains_the_schedules_last_fire_keeping_them(path: str) -> None:
    make_file_at_version(path, 3)
    alter(
        path,
        "INSERT INTO __alkstore_schedules VALUES ('tick', '@every 1h', 3600, 'jobs', "
        "'{\"v\": 1}', 0, NULL, NULL, 1000.0, 4600.0, NULL, NULL)",
    )
    with alkstore.open(path) as store:
        [made] = store.inspect().schedules()
        assert made == alkstore.Schedule("tick", "@every 1h", "jobs", {"v": 1}, 4600.0)
        assert made.last_fire_at is None
        assert store.schedule("tick", "@every 1h", "jobs", 2).next_fire_at == made.next_fire_at
    assert stored_version(path) == str(SCHEMA_VERSION)


def test_a_version_4_file_drops_autoincrement_keeping_rows_and_every_id_handed_out(
    path: str,
) -> None:
    make_file_at_version(path, 4)
    with raw(path) as connection:
        for job_id, key in ((1, None), (2, "k")):
            connection.execute(
                "INSERT INTO __alkstore_jobs (id, queue, payload, priority, run_at, created_at, "
                "max_attempts, visibility_timeout_s, backoff_base_s, key) "
                "VALUES (?, 'q', ?, 0, 0, 0, 3, 30, 1, ?)",
                (job_id, f'"job {job_id}"', key),
            )
        # Jobs 3 to 7 were handed out and acked: their rows are gone, their ids used.
        connection.execute("UPDATE sqlite_sequence SET seq = 7 WHERE name = '__alkstore_jobs'")
    with alkstore.open(path) as store:
        queue = store.queue("q")
        assert queue.enqueue("again", alkstore.EnqueueOpts(key="k")) == 2  # the key index kept
        assert queue.enqueue("new") == 8
        assert [job.payload for job in queue.claim_batch("w", 10)] == ["job 1", "job 2", "new"]
    assert stored_version(path) == str(SCHEMA_VERSION)
    with raw(path) as connection:
        [table_sql] = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = '__alkstore_jobs'"
        ).fetchone()
        sequences = connection.execute("SELECT name FROM sqlite_sequence").fetchall()
        writers = connection.execute(
            "SELECT id, writer_version FROM __alkstore_jobs ORDER BY id"
        ).fetchall()
    assert "AUTOINCREMENT" not in table_sql.upper()
    assert ("__alkstore_jobs",) not in sequences
    assert writers == [(1, 4), (2, 4), (8, SCHEMA_VERSION)]


def test_a_version_5_file_trades_its_two_job_indexes_for_one_keeping_every_claim(
    path: str,
) -> None:
    make_file_at_version(path, 5)
    with raw(path) as connection:
        for job_id, priority, deadline in ((1, 0, None), (2, 5, None), (3, 0, 1.0), (4, 0, 9e9)):
            connection.execute(
                "INSERT INTO __alkstore_jobs (id, queue, payload, priority, run_at, created_at, "
                "attempts, max_attempts, visibility_timeout_s, backoff_base_s, worker_id, "
                "deadline, writer_version) VALUES (?, 'q', ?, ?, 0, 0, ?, 3, 30, 1, ?, ?, 5)",
                (job_id, f'"job {job_id}"', priority, int(deadline is not None),
                 None if deadline is None else "gone", deadline),
            )  # fmt: skip
    with alkstore.open(path) as store:
        queue = store.queue("q")
        [counts] = store.inspect().queues()
        assert (counts.ready, counts.processing) == (2, 2)
        # job 3's claim lapsed long ago: it is released, then claimed in its turn
        claimed = queue.claim_batch("w", 10)
        assert [(job.id, job.attempts) for job in claimed] == [(2, 1), (1, 1), (3, 2)]
        assert [job.id for job in store.inspect().jobs("q", "processing")] == [1, 2, 3, 4]
    assert stored_version(path) == str(SCHEMA_VERSION)
    with raw(path) as connection:
        indexes = {
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name IN ('__alkstore_jobs', '__alkstore_dead') AND sql IS NOT NULL"
            )
        }
    assert indexes == {
        "__alkstore_jobs_live", "__alkstore_jobs_expiring", "__alkstore_jobs_key",
        "__alkstore_dead_by_queue", "__alkstore_dead_purgeable",
    }  # fmt: skip


def test_a_dropped_schedule_tz_column_is_refused(made: str) -> None:
    alter(made, "ALTER TABLE __alkstore_schedules DROP COLUMN tz")
    with pytest.raises(alkstore.Database, match="__alkstore_schedules lacks column tz"):
        alkstore.open(made)


def test_an_older_alkstore_sqlite_still_running_cannot_reuse_a_job_id(path: str) -> None:
    """Version 4 gave ids by AUTOINCREMENT: a process still running it inserts
    without an id, which SQLite would fill with one handed out before. Its
    enqueue is refused, naming the fix; dead letters still move back."""
    with alkstore.open(path) as store:
        queue = store.queue("q", alkstore.QueueOpts(max_attempts=1))
        first = queue.enqueue("first")
        job = queue.claim_one("w")
        assert job is not None
        assert job.fail("boom")  # the newest row went: its id is the high-water mark
    refused = "NOT NULL constraint failed: __alkstore_jobs.writer_version"
    with raw(path) as connection, pytest.raises(sqlite3.IntegrityError, match=refused):
        connection.execute(  # alkstore-sqlite's enqueue at schema version 4
            "INSERT INTO __alkstore_jobs (queue, payload, priority, run_at, created_at, "
            "expires_at, max_attempts, visibility_timeout_s, backoff_base_s, retention_s, key, "
            "traceparent) VALUES ('q', '\"old\"', 0, 0, 0, NULL, 3, 30, 1, NULL, NULL, NULL)"
        )
    with alkstore.open(path) as store:
        queue = store.queue("q")
        assert queue.requeue_dead() == 1
        assert queue.enqueue("second") == first + 1
        assert [job.payload for job in queue.claim_batch("w", 10)] == ["first", "second"]


def test_a_current_file_opens_while_another_connection_holds_the_write_lock(made: str) -> None:
    """Opening a file whose schema is current writes nothing, so it does not wait
    for the write lock: it can be inspected while a long write runs."""
    writer = sqlite3.connect(made, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        with alkstore.open(made, busy_timeout_s=0.5) as store:
            (stats,) = store.inspect().queues()
            assert (stats.name, stats.ready) == ("q", 1)
    finally:
        writer.close()


_READ_ONLY_OPENER = """
import sys, alkstore
with alkstore.open(sys.argv[1]) as store:
    print([(s.name, s.ready) for s in store.inspect().queues()])
    try:
        store.queue("q").enqueue("more")
    except alkstore.Database as exc:
        print("refused:", exc)
"""


def test_a_read_only_file_opens_for_reading_and_refuses_writes_clearly(made: str) -> None:
    os.chmod(made, 0o444)
    command = [sys.executable, "-c", _READ_ONLY_OPENER, made]
    if os.geteuid() == 0:  # root writes whatever the mode: give up that power first
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: a read-only file is writable")
        command = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", *command]
        command[1:1] = ["--inh-caps=-all"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    listed, refused = done.stdout.splitlines()
    assert listed == "[('q', 1)]"
    assert refused.startswith("refused:")
    assert "readonly" in refused
