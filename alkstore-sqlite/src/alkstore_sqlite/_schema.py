"""The engine's tables (all named ``__alkstore_*``) and their versioned migrations.

Migrations run on open inside one write transaction, so processes opening a new
file at the same time serialise and each finds the schema either absent (and
creates it) or current. The version lives in ``__alkstore_meta``, never in
``PRAGMA user_version``, which belongs to the application sharing the file.
"""

from __future__ import annotations

import functools
import sqlite3

from alkstore_sqlite._pool import transaction

__all__ = ["SCHEMA_VERSION", "SchemaError", "migrate"]

_V1 = """
CREATE TABLE __alkstore_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL,
    run_at REAL NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    visibility_timeout_s REAL NOT NULL,
    backoff_base_s REAL NOT NULL,
    retention_s REAL,
    worker_id TEXT,
    deadline REAL,
    last_error TEXT
);
-- Claims read only pending rows: dead and finished history never slows them.
CREATE INDEX __alkstore_jobs_ready
    ON __alkstore_jobs (queue, priority DESC, run_at, id) WHERE deadline IS NULL;
CREATE INDEX __alkstore_jobs_claimed
    ON __alkstore_jobs (queue, deadline) WHERE deadline IS NOT NULL;
CREATE INDEX __alkstore_jobs_expiring
    ON __alkstore_jobs (queue, expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE __alkstore_dead (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL,
    run_at REAL NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    retention_s REAL,
    worker_id TEXT,
    last_error TEXT,
    died_at REAL NOT NULL
);
CREATE INDEX __alkstore_dead_by_queue ON __alkstore_dead (queue, died_at);

CREATE TABLE __alkstore_events (
    id INTEGER PRIMARY KEY,
    stream TEXT NOT NULL,
    key TEXT,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX __alkstore_events_by_stream ON __alkstore_events (stream, id);

CREATE TABLE __alkstore_offsets (
    stream TEXT NOT NULL,
    consumer TEXT NOT NULL,
    "offset" INTEGER NOT NULL,
    PRIMARY KEY (stream, consumer)
) WITHOUT ROWID;

-- AUTOINCREMENT: ids never come back after pruning, so the watcher's
-- "everything after id N" never skips a notice.
CREATE TABLE __alkstore_notices (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL
);

CREATE TABLE __alkstore_locks (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE __alkstore_schedules (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    interval_s INTEGER NOT NULL,
    queue TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL,
    max_attempts INTEGER,
    expires_s REAL,
    anchor REAL NOT NULL,
    next_fire_at REAL NOT NULL
) WITHOUT ROWID;
"""

# Unique jobs: at most one live job per (queue, key); dead letters keep their
# key and the stamps a requeue gives back (NULL in rows that died before).
# Jobs carry the trace context of their enqueue (OpenTelemetry). Schedules
# keep the time zone of a cron spec (ScheduleOpts.tz; NULL is UTC, and every
# @every schedule): rows written by version 1 are @every schedules.
_V2 = """
ALTER TABLE __alkstore_jobs ADD COLUMN key TEXT;
CREATE UNIQUE INDEX __alkstore_jobs_key ON __alkstore_jobs (queue, key) WHERE key IS NOT NULL;
ALTER TABLE __alkstore_jobs ADD COLUMN traceparent TEXT;
ALTER TABLE __alkstore_dead ADD COLUMN key TEXT;
ALTER TABLE __alkstore_dead ADD COLUMN traceparent TEXT;
ALTER TABLE __alkstore_dead ADD COLUMN visibility_timeout_s REAL;
ALTER TABLE __alkstore_dead ADD COLUMN backoff_base_s REAL;
ALTER TABLE __alkstore_schedules ADD COLUMN tz TEXT;
ALTER TABLE __alkstore_schedules ADD COLUMN job_key TEXT;
"""

# Stream retention: how far each trimmed stream was trimmed (Stream.trim).
_V3 = """
CREATE TABLE __alkstore_stream_trims (
    stream TEXT PRIMARY KEY,
    trimmed_through INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Schedules remember the boundary they fired last (Schedule.last_fire_at).
_V4 = "ALTER TABLE __alkstore_schedules ADD COLUMN last_fired_at REAL;"

# Job ids without AUTOINCREMENT, which wrote sqlite_sequence on every enqueue.
# An id is still never handed out twice: ENQUEUE takes one past both the
# table's largest id and the largest id whose row has gone, which the trigger
# records only when the newest row is deleted (a queue with a backlog never
# writes it). The table is rebuilt without the keyword, rows and ids kept.
# writer_version is the schema version of the alkstore-sqlite that wrote the
# row (4 for rows from before): a process still running an older one inserts
# without it, and without an id, which SQLite would fill with one handed out
# before; NOT NULL refuses that insert instead.
_V5 = """
CREATE TABLE __alkstore_job_ids (highest_gone INTEGER NOT NULL);
INSERT INTO __alkstore_job_ids (highest_gone)
    SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = '__alkstore_jobs';
CREATE TABLE __alkstore_jobs_rebuilt (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL,
    run_at REAL NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    visibility_timeout_s REAL NOT NULL,
    backoff_base_s REAL NOT NULL,
    retention_s REAL,
    worker_id TEXT,
    deadline REAL,
    last_error TEXT,
    key TEXT,
    traceparent TEXT,
    writer_version INTEGER NOT NULL
);
INSERT INTO __alkstore_jobs_rebuilt SELECT id, queue, payload, priority, run_at, created_at,
    expires_at, attempts, max_attempts, visibility_timeout_s, backoff_base_s, retention_s,
    worker_id, deadline, last_error, key, traceparent, 4 FROM __alkstore_jobs;
DROP TABLE __alkstore_jobs;
ALTER TABLE __alkstore_jobs_rebuilt RENAME TO __alkstore_jobs;
CREATE INDEX __alkstore_jobs_ready
    ON __alkstore_jobs (queue, priority DESC, run_at, id) WHERE deadline IS NULL;
CREATE INDEX __alkstore_jobs_claimed
    ON __alkstore_jobs (queue, deadline) WHERE deadline IS NOT NULL;
CREATE INDEX __alkstore_jobs_expiring
    ON __alkstore_jobs (queue, expires_at) WHERE expires_at IS NOT NULL;
CREATE UNIQUE INDEX __alkstore_jobs_key ON __alkstore_jobs (queue, key) WHERE key IS NOT NULL;
CREATE TRIGGER __alkstore_jobs_keep_ids AFTER DELETE ON __alkstore_jobs
    WHEN OLD.id > coalesce((SELECT max(id) FROM __alkstore_jobs), 0)
BEGIN
    UPDATE __alkstore_job_ids SET highest_gone = OLD.id WHERE highest_gone < OLD.id;
END;
"""

# One index for pending and claimed rows in place of two partial ones. A
# claim changed deadline, which moved its row from one index to the other
# and so wrote a page of each, and an ack wrote the claimed index's page
# too. Here deadline is the second column, descending (NULL sorts last):
# a queue's claimed rows, latest deadline first, then its pending rows in
# claim order. The newest claims sit next to the head of the pending rows,
# so a claim and an ack each write one page of one index.
# Dead letters past their retention are found by their own index: a sweep
# read every dead letter of the queue for its retention, holding the write
# lock meanwhile (105 ms for 500,000 kept for good).
_V6 = """
DROP INDEX __alkstore_jobs_ready;
DROP INDEX __alkstore_jobs_claimed;
CREATE INDEX __alkstore_jobs_live
    ON __alkstore_jobs (queue, deadline DESC, priority DESC, run_at, id);
CREATE INDEX __alkstore_dead_purgeable
    ON __alkstore_dead (queue, died_at + retention_s) WHERE retention_s IS NOT NULL;
"""

_META = (
    "CREATE TABLE IF NOT EXISTS __alkstore_meta "
    "(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
)
_MIGRATIONS = (_V1, _V2, _V3, _V4, _V5, _V6)
SCHEMA_VERSION = len(_MIGRATIONS)

# Every engine table with its columns, one row per column (pragma_table_info
# as a table-valued function: one cheap query over the schema, no table read).
_SHAPE = r"""
SELECT m.name, c.name FROM sqlite_master AS m, pragma_table_info(m.name) AS c
WHERE m.type = 'table' AND m.name LIKE '\_\_alkstore\_%' ESCAPE '\'
ORDER BY m.name, c.cid
"""

Shape = dict[str, tuple[str, ...]]


class SchemaError(Exception):
    """The file's engine tables are not what this alkstore-sqlite reads and writes."""


def migrate(connection: sqlite3.Connection) -> int:
    """Bring the file's engine tables to :data:`SCHEMA_VERSION`; return the version found.

    Then check that every engine table has exactly the columns this version
    uses, so a damaged or hand-altered file is refused at open rather than
    failing later, on whichever call first touches the altered part.

    Raises:
        SchemaError: the file was written by a newer alkstore-sqlite, its
            stored version is not one this engine wrote, or an engine table
            or column is missing or foreign (each named).
    """
    if _is_current(connection):
        # Nothing to write: a read-only file (or a reader while another process
        # writes) opens without asking for the write lock.
        _verify_shape(_shape(connection))
        return SCHEMA_VERSION
    with transaction(connection):
        connection.execute(_META)
        found = _stored_version(connection)
        if found == 0 and _shape(connection).keys() - {"__alkstore_meta"}:
            raise SchemaError(
                "the file has alkstore tables but no schema version in __alkstore_meta "
                "(the row 'schema_version' was deleted); restore the file from a backup"
            )
        for script in _MIGRATIONS[found:]:
            for statement in _statements(script):
                connection.execute(statement)
        connection.execute(
            "INSERT INTO __alkstore_meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
        _verify_shape(_shape(connection))
    return found


def _is_current(connection: sqlite3.Connection) -> bool:
    """Whether the file holds this version's schema already, read without writing."""
    has_meta = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '__alkstore_meta'"
    ).fetchone()
    return has_meta is not None and _stored_version(connection) == SCHEMA_VERSION


def _stored_version(connection: sqlite3.Connection) -> int:
    """The version in ``__alkstore_meta``: 0 when there is none yet."""
    row = connection.execute(
        "SELECT value FROM __alkstore_meta WHERE key = 'schema_version'"
    ).fetchone()
    if row is None:
        return 0
    text = str(row[0])
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise SchemaError(
            f"the alkstore schema version stored in __alkstore_meta is {row[0]!r}, which "
            f"no alkstore-sqlite writes (it writes whole numbers, {SCHEMA_VERSION} today); "
            "the file was altered: restore it from a backup"
        )
    version = int(text)
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"this file's alkstore schema is version {version}, newer than this "
            f"alkstore-sqlite understands ({SCHEMA_VERSION}); upgrade alkstore-sqlite"
        )
    return version


def _verify_shape(found: Shape) -> None:
    problems: list[str] = []
    for table, columns in _expected_shape().items():
        have = found.get(table)
        if have is None:
            problems.append(f"table {table} is missing")
            continue
        missing = [column for column in columns if column not in have]
        foreign = [column for column in have if column not in columns]
        if missing:
            problems.append(f"{table} lacks column {', '.join(missing)}")
        if foreign:
            problems.append(f"{table} has unexpected column {', '.join(foreign)}")
    if problems:
        raise SchemaError(
            f"the alkstore tables (schema version {SCHEMA_VERSION}) were altered: "
            f"{'; '.join(problems)}; restore the file from a backup"
        )


def _shape(connection: sqlite3.Connection) -> Shape:
    shape: dict[str, list[str]] = {}
    for table, column in connection.execute(_SHAPE):
        shape.setdefault(table, []).append(column)
    return {table: tuple(columns) for table, columns in shape.items()}


@functools.cache
def _expected_shape() -> Shape:
    """The tables and columns the migrations create, read from a scratch in-memory database."""
    scratch = sqlite3.connect(":memory:")
    try:
        scratch.execute(_META)
        for script in _MIGRATIONS:
            for statement in _statements(script):
                scratch.execute(statement)
        return _shape(scratch)
    finally:
        scratch.close()


def _statements(script: str) -> list[str]:
    """The statements of ``script``, one each: a trigger's body keeps its own ``;``."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    statements: list[str] = []
    pending = ""
    for piece in "\n".join(lines).split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip().removesuffix(";"))
            pending = ""
    if pending.strip(" \n;"):
        statements.append(pending.strip().removesuffix(";"))
    return [statement for statement in statements if statement]
