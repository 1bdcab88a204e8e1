"""The engine's tables (all named ``__alkstore_*``) and their versioned migrations.

Migrations run on open inside ``BEGIN IMMEDIATE``, so processes opening a new
file at the same time serialise and each finds the schema either absent (and
creates it) or current. The version lives in ``__alkstore_meta``, never in
``PRAGMA user_version``, which belongs to the application sharing the file.
"""

from __future__ import annotations

import sqlite3

__all__ = ["SCHEMA_VERSION", "migrate"]

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

_MIGRATIONS = (_V1,)
SCHEMA_VERSION = len(_MIGRATIONS)


def migrate(connection: sqlite3.Connection) -> int:
    """Bring the file's engine tables to :data:`SCHEMA_VERSION`; return the version found.

    Raises:
        RuntimeError: the file was written by a newer alkstore-sqlite.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS __alkstore_meta "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
        )
        row = connection.execute(
            "SELECT value FROM __alkstore_meta WHERE key = 'schema_version'"
        ).fetchone()
        found = int(row[0]) if row else 0
        if found > SCHEMA_VERSION:
            raise RuntimeError(
                f"this file's alkstore schema is version {found}, newer than this "
                f"alkstore-sqlite understands ({SCHEMA_VERSION}); upgrade alkstore-sqlite"
            )
        for script in _MIGRATIONS[found:]:
            for statement in _statements(script):
                connection.execute(statement)
        connection.execute(
            "INSERT INTO __alkstore_meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return found


def _statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [statement.strip() for statement in "\n".join(lines).split(";") if statement.strip()]
