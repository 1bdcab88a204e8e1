"""Every SQL statement the engine runs, apart from how connections are driven.

Parameters are always bound, never interpolated: names are data.
"""

from __future__ import annotations

import functools

from alkstore_sqlite._schema import SCHEMA_VERSION

__all__: list[str] = []

# Queues

JOB_COLUMNS = (
    "id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts, "
    "worker_id, deadline, last_error, key"
)

# A new job's id: past every id handed out, those still in the table and
# those whose rows have gone (__alkstore_job_ids, kept by a delete trigger).
# Without AUTOINCREMENT no enqueue writes sqlite_sequence; only a delete of the
# newest row writes the high-water mark.
ENQUEUE = f"""
INSERT INTO __alkstore_jobs (id, queue, payload, priority, run_at, created_at, expires_at,
    max_attempts, visibility_timeout_s, backoff_base_s, retention_s, key, traceparent,
    writer_version)
VALUES (
    max(coalesce((SELECT max(id) FROM __alkstore_jobs), 0),
        (SELECT highest_gone FROM __alkstore_job_ids)) + 1,
    ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {SCHEMA_VERSION})
"""

# A keyed job is written only if no live job of its queue has its key: else
# nothing is written, nothing returned, and LIVE_JOB_WITH_KEY names the one.
ENQUEUE_KEYED = f"""
{ENQUEUE} ON CONFLICT (queue, key) WHERE key IS NOT NULL DO NOTHING RETURNING id
"""

LIVE_JOB_WITH_KEY = "SELECT id, expires_at FROM __alkstore_jobs WHERE queue = ? AND key = ?"

# A transaction's later enqueues, sent together: it holds the write lock, so
# the ids after its first insert are known (ENQUEUE's: the largest + 1).
ENQUEUE_WITH_ID = f"""
INSERT INTO __alkstore_jobs (id, queue, payload, priority, run_at, created_at, expires_at,
    max_attempts, visibility_timeout_s, backoff_base_s, retention_s, key, traceparent,
    writer_version)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {SCHEMA_VERSION})
"""

# The head of every move of live jobs to dead letters; last_error and died_at are bound.
_TO_DEAD = """
INSERT INTO __alkstore_dead (id, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, retention_s, worker_id, last_error, died_at, key,
    visibility_timeout_s, backoff_base_s, traceparent)
SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts,
    retention_s, worker_id, ?, ?, key, visibility_timeout_s, backoff_base_s, traceparent
FROM __alkstore_jobs"""

ANY_LAPSED = """
SELECT 1 FROM __alkstore_jobs WHERE queue = ? AND deadline < ? LIMIT 1
"""

# A lapsed claim either returns the job to pending (the next claim consumes
# an attempt) or, with no attempts left, sends it to dead letters; the
# dead letter's last_error is bound (core's LAPSED_ON_LAST_ATTEMPT).
LAPSED_TO_DEAD = f"""
{_TO_DEAD} WHERE queue = ? AND deadline < ? AND attempts >= max_attempts
"""

DELETE_LAPSED_DEAD = """
DELETE FROM __alkstore_jobs WHERE queue = ? AND deadline < ? AND attempts >= max_attempts
"""

LAPSED_TO_PENDING = """
UPDATE __alkstore_jobs SET deadline = NULL WHERE queue = ? AND deadline < ?
"""

# Claims nothing while a lapsed claim waits in the queue (ANY_LAPSED), so a
# claim that finds rows is one statement; one that finds none looks for a
# lapsed claim, and releases it first, in a transaction.
_CLAIM = """
UPDATE __alkstore_jobs
SET attempts = attempts + 1, deadline = ? + visibility_timeout_s, worker_id = ?
WHERE id {picked} (
    SELECT id FROM __alkstore_jobs
    WHERE queue = ? AND deadline IS NULL AND run_at <= ?
      AND (expires_at IS NULL OR expires_at > ?)
    ORDER BY priority DESC, run_at, id
    LIMIT ?
) AND NOT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = ? AND deadline < ?)
RETURNING id, payload, priority, attempts, max_attempts, run_at, deadline, backoff_base_s,
    visibility_timeout_s, key, traceparent
"""

CLAIM = _CLAIM.format(picked="IN")
"""Claim up to the bound number of jobs."""

# One job: its id compared with a scalar subquery, not looked up in the list
# an IN subquery builds in a temporary table on every run (about a tenth of
# a claim_one+ack's time, measured on bare statements).
CLAIM_ONE = _CLAIM.format(picked="=")
"""Claim one job (bound with a limit of 1)."""

# A claim holds while its row has the same id, attempt count and worker, and
# its deadline has not passed.
HOLDS = "id = ? AND attempts = ? AND worker_id = ? AND deadline >= ?"

ACK = f"DELETE FROM __alkstore_jobs WHERE {HOLDS}"

# :claims is a JSON object {"id": attempt or null}: null acks any unexpired claim
# by the worker, an attempt only that claim.
ACK_BATCH = """
DELETE FROM __alkstore_jobs
WHERE queue = :queue AND worker_id = :worker AND deadline >= :now
  AND id IN (SELECT CAST(key AS INTEGER) FROM json_each(:claims))
  AND attempts = COALESCE(json_extract(:claims, '$."' || id || '"'), attempts)
"""

# Core retries only a claim with attempts left (it fails the last one).
RETRY = f"UPDATE __alkstore_jobs SET deadline = NULL, run_at = ?, last_error = ? WHERE {HOLDS}"

HEARTBEAT = f"UPDATE __alkstore_jobs SET deadline = ? WHERE {HOLDS}"

# A release gives the claim's attempt back: the job is pending as if never claimed.
RELEASE = f"UPDATE __alkstore_jobs SET deadline = NULL, attempts = attempts - 1 WHERE {HOLDS}"

TO_DEAD_IF_HELD = f"""
{_TO_DEAD} WHERE {HOLDS}
"""

DELETE_BY_ID = "DELETE FROM __alkstore_jobs WHERE id = ?"

EXPIRED_ONE_TO_DEAD = f"{_TO_DEAD} WHERE id = ?"

CANCEL_LIVE = "DELETE FROM __alkstore_jobs WHERE id = ? AND queue = ?"
CANCEL_DEAD = "DELETE FROM __alkstore_dead WHERE id = ? AND queue = ?"

GET_LIVE = f"SELECT {JOB_COLUMNS} FROM __alkstore_jobs WHERE id = ? AND queue = ?"
GET_DEAD = """
SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts,
    worker_id, last_error, died_at, key
FROM __alkstore_dead WHERE id = ? AND queue = ?
"""

# The dead letter's last_error is bound (core's EXPIRED).
EXPIRED_TO_DEAD = f"""
{_TO_DEAD} WHERE queue = ? AND expires_at <= ?
"""

DELETE_EXPIRED = "DELETE FROM __alkstore_jobs WHERE queue = ? AND expires_at <= ?"

PURGE_DEAD = """
DELETE FROM __alkstore_dead
WHERE queue = ? AND retention_s IS NOT NULL AND died_at + retention_s <= ?
"""

# Dead letters back to pending, ready now and no longer expiring: bound
# :queue, :now, :reset (attempts back to 0) and the stamps for rows that died
# before dead letters kept them; REQUEUE_DEAD_IDS also :ids, a JSON array. A
# row whose key a live job holds conflicts and stays dead; moved ids return.
_REQUEUE_DEAD = f"""
INSERT INTO __alkstore_jobs (id, queue, payload, priority, run_at, created_at, expires_at,
    attempts, max_attempts, visibility_timeout_s, backoff_base_s, retention_s, worker_id,
    last_error, key, traceparent, writer_version)
SELECT id, queue, payload, priority, :now, created_at, NULL,
    CASE WHEN :reset THEN 0 ELSE attempts END, max_attempts,
    COALESCE(visibility_timeout_s, :visibility), COALESCE(backoff_base_s, :backoff),
    retention_s, worker_id, last_error, key, traceparent, {SCHEMA_VERSION}
FROM __alkstore_dead WHERE queue = :queue {{only}} ORDER BY id
ON CONFLICT DO NOTHING RETURNING id
"""
REQUEUE_DEAD = _REQUEUE_DEAD.format(only="")
REQUEUE_DEAD_IDS = _REQUEUE_DEAD.format(only="AND id IN (SELECT value FROM json_each(:ids))")

DELETE_DEAD_BY_IDS = """
DELETE FROM __alkstore_dead WHERE id IN (SELECT value FROM json_each(?))
"""

PURGE_DEAD_BEFORE = "DELETE FROM __alkstore_dead WHERE queue = ? AND died_at <= ?"

# The distinct priorities of the queue's pending rows, highest first, by a
# skip-scan of __alkstore_jobs_live: one probe each, however many rows.
_PRIORITIES = """
WITH RECURSIVE priorities(p) AS (
    SELECT MAX(priority) FROM __alkstore_jobs WHERE queue = :queue AND deadline IS NULL
    UNION ALL
    SELECT (SELECT MAX(priority) FROM __alkstore_jobs
            WHERE queue = :queue AND deadline IS NULL AND priority < p)
    FROM priorities WHERE p IS NOT NULL
)
"""

# When the queue's next job turns claimable: the first pending run_at not past
# expiry (per priority, found by a skip-scan: a few index entries, however
# many jobs are scheduled) or the first claim's deadline.
NEXT_READY = f"""{_PRIORITIES}SELECT MIN(t) FROM (
    SELECT (
        SELECT run_at FROM __alkstore_jobs
        WHERE queue = :queue AND deadline IS NULL AND priority = p
          AND (expires_at IS NULL OR expires_at > :now)
        ORDER BY run_at LIMIT 1
    ) AS t FROM priorities WHERE p IS NOT NULL
    UNION ALL
    SELECT deadline FROM (
        SELECT deadline FROM __alkstore_jobs WHERE queue = :queue AND deadline IS NOT NULL
        ORDER BY deadline LIMIT 1
    )
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

# A trimmed stream keeps its head: the trim records how far it went.
STREAM_HEAD = """
SELECT MAX(
    COALESCE((SELECT MAX(id) FROM __alkstore_events WHERE stream = :stream), 0),
    COALESCE((SELECT trimmed_through FROM __alkstore_stream_trims WHERE stream = :stream), 0))
"""

TRIMMED_THROUGH = "SELECT trimmed_through FROM __alkstore_stream_trims WHERE stream = ?"

# Trimming (TrimRule): each limit's cutoff, then the record, then the rows in chunks.
# Event ids are rowids shared by all streams, so "the newest N" is counted, not subtracted.
CUTOFF_KEEP_LAST = """
SELECT id FROM __alkstore_events WHERE stream = ? ORDER BY id DESC LIMIT 1 OFFSET ?
"""
FIRST_YOUNG_EVENT = """
SELECT id FROM __alkstore_events WHERE stream = ? AND id > ? AND created_at >= ?
ORDER BY id LIMIT 1
"""
# A trim records the last id it took of its stream, not the cutoff: ids between
# two events of a stream belong to others, and a consumer at the last trimmed
# event has read everything it lost.
LAST_EVENT_THROUGH = "SELECT MAX(id) FROM __alkstore_events WHERE stream = ? AND id <= ?"
LOWEST_CONSUMER = 'SELECT MIN("offset") FROM __alkstore_offsets WHERE stream = ?'
COUNT_TRIMMED = "SELECT COUNT(*) FROM __alkstore_events WHERE stream = ? AND id > ? AND id <= ?"
RECORD_TRIM = """
INSERT INTO __alkstore_stream_trims (stream, trimmed_through) VALUES (?, ?)
ON CONFLICT (stream) DO UPDATE SET trimmed_through = excluded.trimmed_through
WHERE excluded.trimmed_through > __alkstore_stream_trims.trimmed_through
"""
# The table's newest row is never deleted: SQLite hands out MAX(rowid) + 1, so
# deleting it would let the next event (of any stream) reuse its id, under
# readers and the watcher that have seen it. It stays, emptied, behind its
# stream's trimmed_through (where no read reaches) until a newer row exists.
DELETE_TRIMMED = """
DELETE FROM __alkstore_events WHERE id IN (
    SELECT id FROM __alkstore_events WHERE stream = ? AND id <= ?
    AND id < (SELECT MAX(id) FROM __alkstore_events) ORDER BY id LIMIT ?)
"""
EMPTY_TRIMMED_NEWEST = """
UPDATE __alkstore_events SET key = NULL, payload = 'null'
WHERE id = (SELECT MAX(id) FROM __alkstore_events) AND stream = ? AND id <= ?
AND payload != 'null'
"""

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
# Along the primary key from the id last seen, never a scan of a whole index.
NEW_JOBS = "SELECT MAX(id), queue FROM __alkstore_jobs NOT INDEXED WHERE id > ? GROUP BY queue"

# Locks

TRY_LOCK = """
INSERT INTO __alkstore_locks (name, owner, expires_at) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE __alkstore_locks.expires_at <= ?
RETURNING owner
"""
LOCK_HOLDER = "SELECT owner, expires_at FROM __alkstore_locks WHERE name = ?"
RENEW_LOCK = """
UPDATE __alkstore_locks SET expires_at = ? WHERE name = ? AND owner = ? AND expires_at > ?
"""
RELEASE_LOCK = "DELETE FROM __alkstore_locks WHERE name = ? AND owner = ? RETURNING expires_at"
# A sweep of lapsed locks, one window of names at a time (see ``_lock.LapsedLocks``).
LOCK_WINDOW_END = """
SELECT max(name) FROM (SELECT name FROM __alkstore_locks WHERE name > ? ORDER BY name LIMIT ?)
"""
DELETE_LAPSED_LOCKS = """
DELETE FROM __alkstore_locks WHERE name > ? AND name <= ? AND expires_at < ?
"""

# Schedules

GET_SCHEDULE = """
SELECT spec, interval_s, anchor, next_fire_at, tz, last_fired_at
FROM __alkstore_schedules WHERE name = ?
"""
UPSERT_SCHEDULE = """
INSERT INTO __alkstore_schedules (name, spec, interval_s, queue, payload, priority,
    max_attempts, expires_s, anchor, next_fire_at, tz, job_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, interval_s = excluded.interval_s,
    queue = excluded.queue, payload = excluded.payload, priority = excluded.priority,
    max_attempts = excluded.max_attempts, expires_s = excluded.expires_s,
    next_fire_at = excluded.next_fire_at, tz = excluded.tz, job_key = excluded.job_key
"""
DELETE_SCHEDULE = "DELETE FROM __alkstore_schedules WHERE name = ?"
# The columns of a DueSchedule, in its fields' order: DueSchedule(*row).
DUE_SCHEDULES = """
SELECT name, interval_s, queue, payload, priority, max_attempts, expires_s, next_fire_at,
    spec, tz, job_key
FROM __alkstore_schedules WHERE next_fire_at <= ?
"""
NEXT_SCHEDULE = "SELECT MIN(next_fire_at) FROM __alkstore_schedules"
ADVANCE_SCHEDULE = """
UPDATE __alkstore_schedules SET next_fire_at = :advance_to, last_fired_at = :boundary
WHERE name = :name AND next_fire_at = :boundary
"""

# Inspection: reads only, each one statement (one snapshot), never a write lock.

# Queue statistics, each count read from an index, never by a scan of the
# table: the names by a skip-scan of each index that leads with the queue,
# then per queue one statement of counts and one per priority (ready later,
# oldest ready), in one read transaction, so they see one snapshot. Pending
# and claimed rows on __alkstore_jobs_live; those past expiry through
# __alkstore_jobs_expiring (only rows past expiry are looked up in the table);
# dead rows on __alkstore_dead_by_queue.
QUEUE_NAMES = """
WITH RECURSIVE
live(name) AS (
    SELECT MIN(queue) FROM __alkstore_jobs
    UNION ALL
    SELECT (SELECT MIN(queue) FROM __alkstore_jobs WHERE queue > name)
    FROM live WHERE name IS NOT NULL
),
dead(name) AS (
    SELECT MIN(queue) FROM __alkstore_dead
    UNION ALL
    SELECT (SELECT MIN(queue) FROM __alkstore_dead WHERE queue > name)
    FROM dead WHERE name IS NOT NULL
)
SELECT name FROM live WHERE name IS NOT NULL
UNION SELECT name FROM dead WHERE name IS NOT NULL
"""

_PAST_EXPIRY = (
    "SELECT COUNT(*) FROM __alkstore_jobs INDEXED BY __alkstore_jobs_expiring "
    "WHERE queue = :queue AND expires_at <= :now AND deadline IS NULL"
)
# pending, due past expiry, later past expiry, claimed, dead.
QUEUE_COUNTS = f"""
SELECT
    (SELECT COUNT(*) FROM __alkstore_jobs WHERE queue = :queue AND deadline IS NULL),
    ({_PAST_EXPIRY} AND run_at <= :now),
    ({_PAST_EXPIRY} AND run_at > :now),
    (SELECT COUNT(*) FROM __alkstore_jobs WHERE queue = :queue AND deadline IS NOT NULL),
    (SELECT COUNT(*) FROM __alkstore_dead WHERE queue = :queue)
"""

# Per priority of the queue's pending rows (found by a skip-scan of
# __alkstore_jobs_live): how many are ready later (a range of the index), and
# the first ready one in run_at order, past-expiry rows skipped on the way.
# Neither reads the rows that are ready now. Returns (later, oldest ready run_at).
PENDING_BY_PRIORITY = f"""{_PRIORITIES}SELECT
    COALESCE(SUM((
        SELECT COUNT(*) FROM __alkstore_jobs
        WHERE queue = :queue AND deadline IS NULL AND priority = p AND run_at > :now
    )), 0),
    MIN((
        SELECT run_at FROM __alkstore_jobs
        WHERE queue = :queue AND deadline IS NULL AND priority = p AND run_at <= :now
          AND (expires_at IS NULL OR expires_at > :now)
        ORDER BY run_at LIMIT 1
    ))
FROM priorities WHERE p IS NOT NULL
"""

# Live and dead rows in one shape: JOB_COLUMNS (key last), then died_at (NULL unless dead).
# Keyset pages: only ids above :after (0 for the first page), the first :limit by id.
#
# A part of a queue (its pending rows, its dead letters) is read one of two
# ways, chosen per call (the inspector's _walk_pays): along the primary key
# from :after, reading the other queues' rows on the way, or through the
# part's index and sorted by id, reading every row of the part. SQLite's
# planner cannot tell a queue of ten jobs from one of a million (without
# statistics it sorts both; with them, it walks both), so each is named.
_JOBS_READ = {True: "NOT INDEXED", False: "INDEXED BY __alkstore_jobs_live"}
_DEAD_READ = {True: "NOT INDEXED", False: "INDEXED BY __alkstore_dead_by_queue"}
_FIRST = " ORDER BY id LIMIT :limit"


def _pending_jobs(along_ids: bool) -> str:
    return (
        f"SELECT {JOB_COLUMNS}, NULL AS died_at FROM __alkstore_jobs {_JOBS_READ[along_ids]}"
        " WHERE queue = :queue AND deadline IS NULL AND id > :after"
    )


def _dead_jobs(along_ids: bool) -> str:
    return f"""
SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts,
    worker_id, NULL, last_error, key, died_at
FROM __alkstore_dead {_DEAD_READ[along_ids]} WHERE queue = :queue AND id > :after
"""


# The claimed rows are few and the pending ones may be millions: the claimed
# rows' range of the index, never the primary key.
_CLAIMED_JOBS = (
    f"SELECT {JOB_COLUMNS}, NULL AS died_at FROM __alkstore_jobs INDEXED BY __alkstore_jobs_live"
    " WHERE queue = :queue AND deadline IS NOT NULL AND id > :after"
)


@functools.cache
def list_jobs(state: str | None, pending_along_ids: bool, dead_along_ids: bool) -> str:
    """The page of ``state``'s jobs (every state with None), each part read as chosen."""
    pending = _pending_jobs(pending_along_ids) + _FIRST
    dead = _dead_jobs(dead_along_ids) + _FIRST
    if state == "pending":
        return pending
    if state == "processing":
        return _CLAIMED_JOBS + _FIRST
    if state == "dead":
        return dead
    # Three parts, each stopping at its first :limit rows by id, so the merge
    # sorts at most 3 times :limit rows, not every row of the queue.
    return f"""
SELECT * FROM (
    SELECT * FROM ({pending})
    UNION ALL SELECT * FROM ({_CLAIMED_JOBS}{_FIRST})
    UNION ALL SELECT * FROM ({dead})
)
ORDER BY id LIMIT :limit
"""


# What reading a part along the primary key from :after would walk past (the
# table's ids above :after), and how many rows the part has there, counted on
# its index up to :enough.
JOBS_SPAN = """
SELECT (SELECT MAX(id) FROM __alkstore_jobs) - MAX(:after, (SELECT MIN(id) FROM __alkstore_jobs))
"""
PENDING_PART = """
SELECT COUNT(*) FROM (
    SELECT 1 FROM __alkstore_jobs INDEXED BY __alkstore_jobs_live
    WHERE queue = :queue AND deadline IS NULL AND id > :after LIMIT :enough
)
"""
DEAD_SPAN = """
SELECT (SELECT MAX(id) FROM __alkstore_dead) - MAX(:after, (SELECT MIN(id) FROM __alkstore_dead))
"""
DEAD_PART = """
SELECT COUNT(*) FROM (
    SELECT 1 FROM __alkstore_dead INDEXED BY __alkstore_dead_by_queue
    WHERE queue = :queue AND id > :after LIMIT :enough
)
"""

# Rows of two kinds: (stream, head, NULL, NULL, NULL) for each stream with events or a
# trim, and (stream, NULL, consumer, offset, lag) for each saved offset. The distinct
# streams are found by skipping through the (stream, id) index, one probe per stream,
# never a scan of every event. Offsets are rowids shared by all streams, so the lag is
# a count (of the events the consumer can still read).
STREAM_STATS = """
WITH RECURSIVE streams(name) AS (
    SELECT MIN(stream) FROM __alkstore_events
    UNION ALL
    SELECT (SELECT MIN(stream) FROM __alkstore_events WHERE stream > name)
    FROM streams WHERE name IS NOT NULL
),
named(name) AS (
    SELECT name FROM streams WHERE name IS NOT NULL
    UNION SELECT stream FROM __alkstore_stream_trims
)
SELECT name,
    MAX(COALESCE((SELECT MAX(id) FROM __alkstore_events WHERE stream = name), 0),
        COALESCE((SELECT trimmed_through FROM __alkstore_stream_trims WHERE stream = name), 0)),
    NULL, NULL, NULL
FROM named
UNION ALL
SELECT stream, NULL, consumer, "offset",
    (SELECT COUNT(*) FROM __alkstore_events AS e WHERE e.stream = o.stream AND e.id > MAX(
        o."offset",
        COALESCE((SELECT trimmed_through FROM __alkstore_stream_trims AS t
                  WHERE t.stream = o.stream), 0)))
FROM __alkstore_offsets AS o
"""

HELD_LOCKS = "SELECT name, owner, expires_at FROM __alkstore_locks WHERE expires_at > ?"

LIST_SCHEDULES = (
    "SELECT name, spec, queue, payload, next_fire_at, tz, last_fired_at FROM __alkstore_schedules"
)

# Which file an adopted connection's main database is ("" in memory).
MAIN_FILE = "SELECT file FROM pragma_database_list WHERE name = 'main'"
