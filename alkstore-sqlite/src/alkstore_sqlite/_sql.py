"""Every SQL statement the engine runs, apart from how connections are driven.

Parameters are always bound, never interpolated: names are data.
"""

from __future__ import annotations

__all__: list[str] = []

# Queues

JOB_COLUMNS = (
    "id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts, "
    "worker_id, deadline, last_error"
)

ENQUEUE = """
INSERT INTO __alkstore_jobs (queue, payload, priority, run_at, created_at, expires_at,
    max_attempts, visibility_timeout_s, backoff_base_s, retention_s)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

ANY_LAPSED = """
SELECT 1 FROM __alkstore_jobs WHERE queue = ? AND deadline < ? LIMIT 1
"""

# A lapsed claim either returns the job to pending (the next claim consumes
# an attempt) or, with no attempts left, sends it to dead letters.
LAPSED_TO_DEAD = """
INSERT INTO __alkstore_dead (id, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, retention_s, worker_id, last_error, died_at)
SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts,
    retention_s, worker_id,
    'claim lapsed (visibility timeout) on the last of ' || max_attempts || ' attempts', ?
FROM __alkstore_jobs WHERE queue = ? AND deadline < ? AND attempts >= max_attempts
"""

DELETE_LAPSED_DEAD = """
DELETE FROM __alkstore_jobs WHERE queue = ? AND deadline < ? AND attempts >= max_attempts
"""

LAPSED_TO_PENDING = """
UPDATE __alkstore_jobs SET deadline = NULL WHERE queue = ? AND deadline < ?
"""

CLAIM = """
UPDATE __alkstore_jobs
SET attempts = attempts + 1, deadline = ? + visibility_timeout_s, worker_id = ?
WHERE id IN (
    SELECT id FROM __alkstore_jobs
    WHERE queue = ? AND deadline IS NULL AND run_at <= ?
      AND (expires_at IS NULL OR expires_at > ?)
    ORDER BY priority DESC, run_at, id
    LIMIT ?
)
RETURNING id, payload, priority, attempts, max_attempts, run_at, deadline, backoff_base_s
"""

# A claim holds while its row has the same id, attempt count and worker, and
# its deadline has not passed.
HOLDS = "id = ? AND attempts = ? AND worker_id = ? AND deadline >= ?"

ACK = f"DELETE FROM __alkstore_jobs WHERE {HOLDS}"

ACK_BATCH = """
DELETE FROM __alkstore_jobs
WHERE queue = ? AND worker_id = ? AND deadline >= ?
  AND id IN (SELECT value FROM json_each(?))
"""

RETRY = f"""
UPDATE __alkstore_jobs SET deadline = NULL, run_at = ?, last_error = ?
WHERE {HOLDS} AND attempts < max_attempts
"""

HEARTBEAT = f"UPDATE __alkstore_jobs SET deadline = ? WHERE {HOLDS}"

TO_DEAD_IF_HELD = f"""
INSERT INTO __alkstore_dead (id, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, retention_s, worker_id, last_error, died_at)
SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts,
    retention_s, worker_id, ?, ?
FROM __alkstore_jobs WHERE {HOLDS}
"""

DELETE_BY_ID = "DELETE FROM __alkstore_jobs WHERE id = ?"

CANCEL_LIVE = "DELETE FROM __alkstore_jobs WHERE id = ? AND queue = ?"
CANCEL_DEAD = "DELETE FROM __alkstore_dead WHERE id = ? AND queue = ?"

GET_LIVE = f"SELECT {JOB_COLUMNS} FROM __alkstore_jobs WHERE id = ? AND queue = ?"
GET_DEAD = """
SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts,
    worker_id, last_error, died_at
FROM __alkstore_dead WHERE id = ? AND queue = ?
"""

EXPIRED_TO_DEAD = """
INSERT INTO __alkstore_dead (id, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, retention_s, worker_id, last_error, died_at)
SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts,
    retention_s, worker_id, 'expired', ?
FROM __alkstore_jobs WHERE queue = ? AND expires_at <= ?
"""

DELETE_EXPIRED = "DELETE FROM __alkstore_jobs WHERE queue = ? AND expires_at <= ?"

PURGE_DEAD = """
DELETE FROM __alkstore_dead
WHERE queue = ? AND retention_s IS NOT NULL AND died_at + retention_s <= ?
"""

NEXT_READY = """
SELECT MIN(t) FROM (
    SELECT MIN(run_at) AS t FROM __alkstore_jobs
    WHERE queue = ? AND deadline IS NULL AND (expires_at IS NULL OR expires_at > ?)
    UNION ALL
    SELECT MIN(deadline) FROM __alkstore_jobs WHERE queue = ? AND deadline IS NOT NULL
)
"""

# Streams

PUBLISH = """
INSERT INTO __alkstore_events (stream, key, payload, created_at) VALUES (?, ?, ?, ?)
"""

READ_SINCE = """
SELECT id, key, payload, created_at FROM __alkstore_events
WHERE stream = ? AND id > ? ORDER BY id LIMIT ?
"""

GET_OFFSET = 'SELECT "offset" FROM __alkstore_offsets WHERE stream = ? AND consumer = ?'

SAVE_OFFSET = """
INSERT INTO __alkstore_offsets (stream, consumer, "offset") VALUES (?, ?, ?)
ON CONFLICT (stream, consumer) DO UPDATE SET "offset" = excluded."offset"
WHERE excluded."offset" > __alkstore_offsets."offset"
"""

# Notify

NOTIFY = "INSERT INTO __alkstore_notices (channel, payload, created_at) VALUES (?, ?, ?)"

PRUNE_NOTICES = """
DELETE FROM __alkstore_notices
WHERE id IN (SELECT id FROM __alkstore_notices ORDER BY id LIMIT 1000) AND created_at < ?
"""

# What the watcher reads after each commit it sees.

MAX_IDS = """
SELECT (SELECT COALESCE(MAX(id), 0) FROM __alkstore_notices),
       (SELECT COALESCE(MAX(id), 0) FROM __alkstore_events),
       (SELECT COALESCE(MAX(id), 0) FROM __alkstore_jobs)
"""
NEW_NOTICES = "SELECT id, channel FROM __alkstore_notices WHERE id > ? ORDER BY id"
NEW_EVENTS = "SELECT MAX(id), stream FROM __alkstore_events WHERE id > ? GROUP BY stream"
NEW_JOBS = "SELECT MAX(id), queue FROM __alkstore_jobs WHERE id > ? GROUP BY queue"

# Locks

TRY_LOCK = """
INSERT INTO __alkstore_locks (name, owner, expires_at) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE __alkstore_locks.expires_at <= ?
"""
LOCK_HOLDER = "SELECT owner, expires_at FROM __alkstore_locks WHERE name = ?"
RENEW_LOCK = """
UPDATE __alkstore_locks SET expires_at = ? WHERE name = ? AND owner = ? AND expires_at > ?
"""
RELEASE_LOCK = "DELETE FROM __alkstore_locks WHERE name = ? AND owner = ? RETURNING expires_at"

# Schedules

GET_SCHEDULE = """
SELECT spec, interval_s, anchor, next_fire_at FROM __alkstore_schedules WHERE name = ?
"""
UPSERT_SCHEDULE = """
INSERT INTO __alkstore_schedules (name, spec, interval_s, queue, payload, priority,
    max_attempts, expires_s, anchor, next_fire_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, interval_s = excluded.interval_s,
    queue = excluded.queue, payload = excluded.payload, priority = excluded.priority,
    max_attempts = excluded.max_attempts, expires_s = excluded.expires_s,
    next_fire_at = excluded.next_fire_at
"""
DELETE_SCHEDULE = "DELETE FROM __alkstore_schedules WHERE name = ?"
DUE_SCHEDULES = """
SELECT name, interval_s, queue, payload, priority, max_attempts, expires_s, next_fire_at
FROM __alkstore_schedules WHERE next_fire_at <= ?
"""
NEXT_SCHEDULE = "SELECT MIN(next_fire_at) FROM __alkstore_schedules"
ADVANCE_SCHEDULE = """
UPDATE __alkstore_schedules SET next_fire_at = ? WHERE name = ? AND next_fire_at = ?
"""
