"""Every SQL statement the engine runs, apart from how connections are driven.

``{s}`` is the engine's schema (quoted) and ``{now}`` the database server's
clock at the start of the statement, in Unix seconds: every deadline, run
time, expiry and lock TTL comes from the server, so worker hosts with skewed
clocks still agree. Values are always bound, never interpolated.
"""

from __future__ import annotations

import functools

__all__ = ["Statements"]

NOW = "extract(epoch FROM statement_timestamp())::float8"

SCHEMA = """
CREATE TABLE IF NOT EXISTS {s}.jobs (
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
CREATE INDEX IF NOT EXISTS jobs_ready
    ON {s}.jobs (queue, priority DESC, run_at, id) WHERE deadline IS NULL;
CREATE INDEX IF NOT EXISTS jobs_claimed ON {s}.jobs (queue, deadline) WHERE deadline IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_expiring
    ON {s}.jobs (queue, expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS {s}.dead (
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
CREATE INDEX IF NOT EXISTS dead_by_queue ON {s}.dead (queue, died_at);
CREATE TABLE IF NOT EXISTS {s}.stream_heads (stream text PRIMARY KEY, head bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.events (
    stream text NOT NULL,
    "offset" bigint NOT NULL,
    key text,
    payload text NOT NULL,
    created_at float8 NOT NULL,
    PRIMARY KEY (stream, "offset")
);
CREATE TABLE IF NOT EXISTS {s}.offsets (
    stream text NOT NULL,
    consumer text NOT NULL,
    "offset" bigint NOT NULL,
    PRIMARY KEY (stream, consumer)
);
CREATE TABLE IF NOT EXISTS {s}.locks (
    name text PRIMARY KEY,
    owner text NOT NULL,
    expires_at float8 NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.schedules (
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

_DEAD_COLUMNS = (
    "id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts, "
    "retention_s, worker_id, last_error, died_at"
)
_MOVED = (
    "id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts, "
    "retention_s, worker_id"
)
HOLDS = "id = %(id)s AND attempts = %(attempts)s AND worker_id = %(worker)s AND deadline >= {now}"
READY = "deadline IS NULL AND run_at <= {now} AND (expires_at IS NULL OR expires_at > {now})"
_LISTED = (
    "id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts, "
    "worker_id"
)


class Statements:
    """The statements of one schema, rendered once."""

    def __init__(self, schema: str) -> None:
        quoted = '"' + schema.replace('"', '""') + '"'
        render = functools.partial(_render, quoted)
        self.schema_ddl = [render(part) for part in SCHEMA.split(";") if part.strip()]
        self.enqueue = render(
            "INSERT INTO {s}.jobs (queue, payload, priority, run_at, created_at, expires_at, "
            "max_attempts, visibility_timeout_s, backoff_base_s, retention_s) "
            "VALUES (%(queue)s, %(payload)s, %(priority)s, "
            "COALESCE(%(run_at)s, {now} + %(delay)s), {now}, {now} + %(expires_in)s, "
            "%(max_attempts)s, %(visibility)s, %(backoff)s, %(retention)s) "
            "RETURNING id, pg_notify(%(channel)s, %(key)s)"
        )
        # Buffered enqueues of a transaction: ids reserved ahead, rows sent together.
        self.reserve_job_ids = render(
            "SELECT nextval(pg_get_serial_sequence('{s}.jobs', 'id')) "
            "FROM generate_series(1, %(reserve)s)"
        )
        # One statement for any number of rows: a column array per parameter, sent
        # in binary (%(...)b): text arrays would be escaped element by element.
        self.enqueue_reserved = render(
            "INSERT INTO {s}.jobs (id, queue, payload, priority, run_at, created_at, expires_at, "
            "max_attempts, visibility_timeout_s, backoff_base_s, retention_s) "
            "OVERRIDING SYSTEM VALUE "
            "SELECT id, queue, payload, priority, COALESCE(run_at, {now} + delay), {now}, "
            "{now} + expires_in, max_attempts, visibility, backoff, retention "
            "FROM unnest(%(id)b::bigint[], %(queue)b::text[], %(payload)b::text[], "
            "%(priority)b::int[], %(run_at)b::float8[], %(delay)b::float8[], "
            "%(expires_in)b::float8[], %(max_attempts)b::int[], %(visibility)b::float8[], "
            "%(backoff)b::float8[], %(retention)b::float8[]) "
            "AS t(id, queue, payload, priority, run_at, delay, expires_in, max_attempts, "
            "visibility, backoff, retention)"
        )
        self.lapsed_to_dead = render(
            f"WITH moved AS (DELETE FROM {{s}}.jobs WHERE id IN ("
            "SELECT id FROM {s}.jobs WHERE queue = %(queue)s AND deadline < {now} "
            "AND attempts >= max_attempts FOR UPDATE SKIP LOCKED) "
            f"RETURNING {_MOVED}) "
            f"INSERT INTO {{s}}.dead ({_DEAD_COLUMNS}) SELECT {_MOVED}, "
            "'claim lapsed (visibility timeout) on the last of ' || max_attempts || "
            "' attempts', {now} FROM moved"
        )
        # attempts < max_attempts: each statement has its own now, and a job
        # lapsing between the two statements must still go to dead letters.
        self.lapsed_to_pending = render(
            "UPDATE {s}.jobs SET deadline = NULL WHERE id IN ("
            "SELECT id FROM {s}.jobs WHERE queue = %(queue)s AND deadline < {now} "
            "AND attempts < max_attempts FOR UPDATE SKIP LOCKED)"
        )
        self.claim = render(
            "UPDATE {s}.jobs SET attempts = attempts + 1, "
            "deadline = {now} + visibility_timeout_s, worker_id = %(worker)s "
            "WHERE id IN (SELECT id FROM {s}.jobs WHERE queue = %(queue)s "
            "AND deadline IS NULL AND run_at <= {now} "
            "AND (expires_at IS NULL OR expires_at > {now}) "
            "ORDER BY priority DESC, run_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED) "
            "RETURNING id, payload, priority, attempts, max_attempts, run_at, deadline, "
            "backoff_base_s, visibility_timeout_s"
        )
        self.ack = render("DELETE FROM {s}.jobs WHERE " + HOLDS)
        self.ack_batch = render(
            "DELETE FROM {s}.jobs WHERE queue = %(queue)s AND worker_id = %(worker)s "
            "AND deadline >= {now} AND id = ANY(%(ids)s)"
        )
        self.retry = render(
            "UPDATE {s}.jobs SET deadline = NULL, run_at = {now} + %(delay)s, "
            "last_error = %(error)s WHERE " + HOLDS + " AND attempts < max_attempts "
            "RETURNING pg_notify(%(channel)s, %(key)s)"
        )
        # A release gives the claim's attempt back: pending as if never claimed.
        self.release = render(
            "UPDATE {s}.jobs SET deadline = NULL, attempts = attempts - 1 WHERE "
            + HOLDS
            + " RETURNING pg_notify(%(channel)s, %(key)s)"
        )
        self.to_dead_if_held = render(
            f"WITH moved AS (DELETE FROM {{s}}.jobs WHERE {HOLDS} RETURNING {_MOVED}) "
            f"INSERT INTO {{s}}.dead ({_DEAD_COLUMNS}) "
            f"SELECT {_MOVED}, %(error)s, {{now}} FROM moved"
        )
        self.heartbeat = render(
            "UPDATE {s}.jobs SET deadline = {now} + %(extend)s WHERE "
            + HOLDS
            + " RETURNING deadline"
        )
        self.cancel_live = render("DELETE FROM {s}.jobs WHERE id = %(id)s AND queue = %(queue)s")
        self.cancel_dead = render("DELETE FROM {s}.dead WHERE id = %(id)s AND queue = %(queue)s")
        self.get_live = render(
            "SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, "
            "max_attempts, worker_id, deadline, last_error "
            "FROM {s}.jobs WHERE id = %(id)s AND queue = %(queue)s"
        )
        self.get_dead = render(
            "SELECT id, queue, payload, priority, run_at, created_at, expires_at, attempts, "
            "max_attempts, worker_id, last_error, died_at "
            "FROM {s}.dead WHERE id = %(id)s AND queue = %(queue)s"
        )
        self.expired_to_dead = render(
            f"WITH moved AS (DELETE FROM {{s}}.jobs WHERE queue = %(queue)s "
            f"AND expires_at <= {{now}} RETURNING {_MOVED}) "
            f"INSERT INTO {{s}}.dead ({_DEAD_COLUMNS}) "
            f"SELECT {_MOVED}, 'expired', {{now}} FROM moved"
        )
        self.purge_dead = render(
            "DELETE FROM {s}.dead WHERE queue = %(queue)s AND retention_s IS NOT NULL "
            "AND died_at + retention_s <= {now}"
        )
        self.next_ready = render(
            "SELECT LEAST("
            "(SELECT MIN(run_at) FROM {s}.jobs WHERE queue = %(queue)s AND deadline IS NULL "
            "AND (expires_at IS NULL OR expires_at > {now})), "
            "(SELECT MIN(deadline) FROM {s}.jobs WHERE queue = %(queue)s "
            "AND deadline IS NOT NULL)) - {now}"
        )
        self.publish = render(
            "WITH head AS (INSERT INTO {s}.stream_heads AS h (stream, head) "
            "VALUES (%(stream)s, 1) ON CONFLICT (stream) DO UPDATE SET head = h.head + 1 "
            "RETURNING head) "
            'INSERT INTO {s}.events (stream, "offset", key, payload, created_at) '
            "SELECT %(stream)s, head, %(key)s, %(payload)s, {now} FROM head "
            'RETURNING "offset", pg_notify(%(channel)s, %(wake)s)'
        )
        # A transaction's later publishes to a stream whose head it holds locked.
        self.publish_held = render(
            "WITH head AS (UPDATE {s}.stream_heads SET head = %(head)s WHERE stream = %(stream)s) "
            'INSERT INTO {s}.events (stream, "offset", key, payload, created_at) '
            'SELECT %(stream)s, "offset", key, payload, {now} '
            "FROM unnest(%(offset)b::bigint[], %(key)b::text[], %(payload)b::text[]) "
            'AS t("offset", key, payload)'
        )
        self.read_since = render(
            'SELECT "offset", key, payload, created_at FROM {s}.events '
            'WHERE stream = %(stream)s AND "offset" > %(offset)s ORDER BY "offset" LIMIT %(limit)s'
        )
        self.get_offset = render(
            'SELECT "offset" FROM {s}.offsets WHERE stream = %(stream)s AND consumer = %(consumer)s'
        )
        self.save_offset = render(
            'INSERT INTO {s}.offsets AS o (stream, consumer, "offset") '
            "VALUES (%(stream)s, %(consumer)s, %(offset)s) "
            'ON CONFLICT (stream, consumer) DO UPDATE SET "offset" = excluded."offset" '
            'WHERE o."offset" < excluded."offset"'
        )
        self.notify = "SELECT pg_notify(%(channel)s, %(key)s)"
        self.try_lock = render(
            "INSERT INTO {s}.locks AS l (name, owner, expires_at) "
            "VALUES (%(name)s, %(owner)s, {now} + %(ttl)s) "
            "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
            "expires_at = excluded.expires_at WHERE l.expires_at <= {now} RETURNING owner"
        )
        self.lock_held = render(
            "SELECT 1 FROM {s}.locks WHERE name = %(name)s AND owner = %(owner)s "
            "AND expires_at > {now}"
        )
        self.renew_lock = render(
            "UPDATE {s}.locks SET expires_at = {now} + %(ttl)s WHERE name = %(name)s "
            "AND owner = %(owner)s AND expires_at > {now}"
        )
        self.release_lock = render(
            "DELETE FROM {s}.locks WHERE name = %(name)s AND owner = %(owner)s "
            "RETURNING expires_at > {now}"
        )
        self.get_schedule = render(
            "SELECT spec, anchor, next_fire_at, {now} FROM {s}.schedules "
            "WHERE name = %(name)s FOR UPDATE"
        )
        self.now = render("SELECT {now}")
        self.upsert_schedule = render(
            "INSERT INTO {s}.schedules (name, spec, interval_s, queue, payload, priority, "
            "max_attempts, expires_s, anchor, next_fire_at) VALUES (%(name)s, %(spec)s, "
            "%(interval)s, %(queue)s, %(payload)s, %(priority)s, %(max_attempts)s, "
            "%(expires)s, %(anchor)s, %(next)s) ON CONFLICT (name) DO UPDATE SET "
            "spec = excluded.spec, interval_s = excluded.interval_s, queue = excluded.queue, "
            "payload = excluded.payload, priority = excluded.priority, "
            "max_attempts = excluded.max_attempts, expires_s = excluded.expires_s, "
            "next_fire_at = excluded.next_fire_at"
        )
        self.delete_schedule = render("DELETE FROM {s}.schedules WHERE name = %(name)s")
        self.due_schedules = render(
            "SELECT name, interval_s, queue, payload, priority, max_attempts, expires_s, "
            "next_fire_at, {now} FROM {s}.schedules WHERE next_fire_at <= {now}"
        )
        self.next_schedule = render("SELECT MIN(next_fire_at) - {now} FROM {s}.schedules")
        self.advance_schedule = render(
            "UPDATE {s}.schedules SET next_fire_at = %(to)s "
            "WHERE name = %(name)s AND next_fire_at = %(from)s"
        )

        # Inspection: each listing is one plain SELECT (one snapshot, no row locks).
        self.queue_stats = render(
            "SELECT queue, sum(ready)::bigint, sum(scheduled)::bigint, sum(expired)::bigint, "
            "sum(processing)::bigint, sum(dead)::bigint, {now} - min(oldest_ready) FROM ("
            f"SELECT queue, count(*) FILTER (WHERE {READY}) AS ready, "
            "count(*) FILTER (WHERE deadline IS NULL AND run_at > {now} "
            "AND (expires_at IS NULL OR expires_at > {now})) AS scheduled, "
            "count(*) FILTER (WHERE deadline IS NULL AND expires_at <= {now}) AS expired, "
            "count(*) FILTER (WHERE deadline IS NOT NULL) AS processing, 0 AS dead, "
            f"min(run_at) FILTER (WHERE {READY}) AS oldest_ready "
            "FROM {s}.jobs GROUP BY queue "
            "UNION ALL SELECT queue, 0, 0, 0, 0, count(*), NULL FROM {s}.dead GROUP BY queue"
            ") AS counts GROUP BY queue"
        )
        # Live and dead rows in one shape: ..., deadline, last_error, died_at.
        live = f"SELECT {_LISTED}, deadline, last_error, NULL::float8 AS died_at FROM {{s}}.jobs"
        pending = f"{live} WHERE queue = %(queue)s AND deadline IS NULL"
        claimed = f"{live} WHERE queue = %(queue)s AND deadline IS NOT NULL"
        dead = f"SELECT {_LISTED}, NULL, last_error, died_at FROM {{s}}.dead"
        dead += " WHERE queue = %(queue)s"
        order = " ORDER BY id LIMIT %(limit)s"
        self.list_jobs: dict[str | None, str] = {
            "pending": render(pending + order),
            "processing": render(claimed + order),
            "dead": render(dead + order),
            None: render(f"{pending} UNION ALL {claimed} UNION ALL {dead}{order}"),
        }
        # Offsets are contiguous per stream (each publish takes head + 1 under the
        # head row's lock, and a rollback returns it), so the lag is a subtraction.
        self.stream_stats = render(
            'SELECT COALESCE(h.stream, o.stream), COALESCE(h.head, 0), o.consumer, o."offset", '
            'GREATEST(COALESCE(h.head, 0) - o."offset", 0) '
            "FROM {s}.stream_heads AS h FULL JOIN {s}.offsets AS o ON o.stream = h.stream"
        )
        self.held_locks = render(
            "SELECT name, owner, expires_at FROM {s}.locks WHERE expires_at > {now}"
        )
        self.list_schedules = render(
            "SELECT name, spec, queue, payload, next_fire_at FROM {s}.schedules"
        )


def _render(schema: str, template: str) -> str:
    return template.replace("{s}", schema).replace("{now}", NOW)
