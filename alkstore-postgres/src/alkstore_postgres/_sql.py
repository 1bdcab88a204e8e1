"""Every SQL statement the engine runs, apart from how connections are driven.

Templates name their parts in braces, filled in once per store with
``psycopg.sql`` (:func:`render`): ``{s}`` is the engine's schema, ``{now}``
the database server's clock at the start of the statement, in Unix seconds
(every deadline, run time, expiry and lock TTL comes from the server, so
worker hosts with skewed clocks still agree), and ``{queue_key}``,
``{stream_key}``, ``{consumer_key}`` and ``{name_key}`` the key of the name
bound as ``%(queue)s``, ``%(stream)s``, ``%(consumer)s`` or ``%(name)s``.
Values are always bound, never interpolated.

Names are found by key. A name may be 1,000 characters of 4 bytes each, more
than the 2,704 bytes a btree index entry holds, so every index and unique key
on a name is on its key instead: the SHA-256 of its UTF-8 text (a weak hash
would let a crafted name collide on a unique key and make ``ON CONFLICT``
write another name's row). The server computes each key from the bound name
in the statement that uses it, so a key never disagrees with its name; the
rows keep the names themselves. The digest is written out in each statement
rather than wrapped in a SQL function: ``convert_to`` is STABLE, so an
IMMUTABLE wrapper is never inlined, and each index expression calling it
would run the SQL-function machinery on every insert and claim.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from psycopg import sql

__all__ = ["INDEXES", "SCHEMA_DDL", "TABLES", "UNIQUE_INDEXES", "Statements", "key_of", "render"]

NOW = "extract(epoch FROM statement_timestamp())::float8"


def key_of(expression: str) -> str:
    """SQL for the key of the stored name ``expression`` (a column or a placeholder)."""
    return f"sha256(convert_to({expression}, 'UTF8'))"


_STAMP_TYPES = {
    "queue": "text", "priority": "int", "run_at": "float8", "delay": "float8",
    "expires_in": "float8", "max_attempts": "int", "visibility": "float8",
    "backoff": "float8", "retention": "float8",
}  # fmt: skip


def _stamped(column: str) -> str:
    """SQL for a buffered row's ``column`` of ``STAMP_COLUMNS``: the element of its
    stamp in that column's array (see ``Statements.enqueue_reserved``)."""
    return f"(%({column})b::{_STAMP_TYPES[column]}[])[t.stamp]"


_KEYS = {
    "queue_key": key_of("%(queue)s"),
    "stream_key": key_of("%(stream)s"),
    "consumer_key": key_of("%(consumer)s"),
    "name_key": key_of("%(name)s"),
    "job_key_digest": key_of("%(job_key)s"),
}

Column = tuple[str, str, str]
"""A column: its name, its type as ``format_type`` spells it, the rest of its declaration."""

TABLES: Mapping[str, tuple[tuple[Column, ...], tuple[str, ...]]] = {
    "meta": ((("key", "text", "NOT NULL"), ("value", "text", "NOT NULL")), ("key",)),
    "jobs": (
        (
            ("id", "bigint", "GENERATED ALWAYS AS IDENTITY"),
            ("queue_key", "bytea", "NOT NULL"),
            ("queue", "text", "NOT NULL"),
            ("payload", "text", "NOT NULL"),
            ("priority", "integer", "NOT NULL"),
            ("run_at", "double precision", "NOT NULL"),
            ("created_at", "double precision", "NOT NULL"),
            ("expires_at", "double precision", ""),
            ("attempts", "integer", "NOT NULL DEFAULT 0"),
            ("max_attempts", "integer", "NOT NULL"),
            ("visibility_timeout_s", "double precision", "NOT NULL"),
            ("backoff_base_s", "double precision", "NOT NULL"),
            ("retention_s", "double precision", ""),
            ("worker_id", "text", ""),
            ("deadline", "double precision", ""),
            ("last_error", "text", ""),
            ("key", "text", ""),
            ("key_digest", "bytea", ""),
            ("traceparent", "text", ""),
        ),
        ("id",),
    ),
    "dead": (
        (
            ("id", "bigint", "NOT NULL"),
            ("queue_key", "bytea", "NOT NULL"),
            ("queue", "text", "NOT NULL"),
            ("payload", "text", "NOT NULL"),
            ("priority", "integer", "NOT NULL"),
            ("run_at", "double precision", "NOT NULL"),
            ("created_at", "double precision", "NOT NULL"),
            ("expires_at", "double precision", ""),
            ("attempts", "integer", "NOT NULL"),
            ("max_attempts", "integer", "NOT NULL"),
            ("retention_s", "double precision", ""),
            ("worker_id", "text", ""),
            ("last_error", "text", ""),
            ("died_at", "double precision", "NOT NULL"),
            ("key", "text", ""),
            ("visibility_timeout_s", "double precision", ""),
            ("backoff_base_s", "double precision", ""),
            ("traceparent", "text", ""),
        ),
        ("id",),
    ),
    "stream_heads": (
        (
            ("stream_key", "bytea", "NOT NULL"),
            ("stream", "text", "NOT NULL"),
            ("head", "bigint", "NOT NULL"),
            ("trimmed_through", "bigint", "NOT NULL DEFAULT 0"),
        ),
        ("stream_key",),
    ),
    # An event's stream name is its head row's: events hold only the key.
    "events": (
        (
            ("stream_key", "bytea", "NOT NULL"),
            ("offset", "bigint", "NOT NULL"),
            ("key", "text", ""),
            ("payload", "text", "NOT NULL"),
            ("created_at", "double precision", "NOT NULL"),
        ),
        ("stream_key", "offset"),
    ),
    "offsets": (
        (
            ("stream_key", "bytea", "NOT NULL"),
            ("consumer_key", "bytea", "NOT NULL"),
            ("stream", "text", "NOT NULL"),
            ("consumer", "text", "NOT NULL"),
            ("offset", "bigint", "NOT NULL"),
        ),
        ("stream_key", "consumer_key"),
    ),
    "locks": (
        (
            ("name_key", "bytea", "NOT NULL"),
            ("name", "text", "NOT NULL"),
            ("owner", "text", "NOT NULL"),
            ("expires_at", "double precision", "NOT NULL"),
        ),
        ("name_key",),
    ),
    "schedules": (
        (
            ("name_key", "bytea", "NOT NULL"),
            ("name", "text", "NOT NULL"),
            ("spec", "text", "NOT NULL"),
            ("interval_s", "bigint", "NOT NULL"),
            ("queue", "text", "NOT NULL"),
            ("payload", "text", "NOT NULL"),
            ("priority", "integer", "NOT NULL"),
            ("max_attempts", "integer", ""),
            ("expires_s", "double precision", ""),
            ("anchor", "double precision", "NOT NULL"),
            ("next_fire_at", "double precision", "NOT NULL"),
            ("tz", "text", ""),  # since version 3: a cron spec's zone, NULL for UTC
            ("job_key", "text", ""),  # since version 3: each fire's unique key
            ("last_fired_at", "double precision", ""),  # since version 5: the last fire
        ),
        ("name_key",),
    ),
}
"""The engine's tables: columns and primary key (its index is ``<table>_pkey``)."""

INDEXES: Mapping[str, str] = {
    "jobs_ready": "{s}.jobs (queue_key, priority DESC, run_at, id) WHERE deadline IS NULL",
    "jobs_claimed": "{s}.jobs (queue_key, deadline) WHERE deadline IS NOT NULL",
    "jobs_expiring": "{s}.jobs (queue_key, expires_at) WHERE expires_at IS NOT NULL",
    "dead_by_queue": "{s}.dead (queue_key, died_at)",
    # A sweep's retention purge reads only the rows it may delete, not every
    # dead letter of the queue (since version 6).
    "dead_purgeable": "{s}.dead (queue_key, (died_at + retention_s)) WHERE retention_s IS NOT NULL",
}
"""The secondary indexes, by name: what each is ``ON``."""

UNIQUE_INDEXES: Mapping[str, str] = {
    # At most one live job per (queue, key): a job key's digest, as for names.
    "jobs_key": "{s}.jobs (queue_key, key_digest) WHERE key_digest IS NOT NULL",
}
"""The unique secondary indexes, by name: what each is ``ON``."""


def _table_ddl(table: str) -> str:
    columns, primary_key = TABLES[table]
    declared = [" ".join(filter(None, (_quoted(name), kind, rest))) for name, kind, rest in columns]
    declared.append(f"PRIMARY KEY ({', '.join(map(_quoted, primary_key))})")
    return f"CREATE TABLE IF NOT EXISTS {{s}}.{table} ({', '.join(declared)})"


def _quoted(column: str) -> str:
    return sql.Identifier(column).as_string(None)


SCHEMA_DDL: tuple[str, ...] = (
    *(_table_ddl(table) for table in TABLES),
    *(f"CREATE INDEX IF NOT EXISTS {name} ON {on}" for name, on in INDEXES.items()),
    *(f"CREATE UNIQUE INDEX IF NOT EXISTS {name} ON {on}" for name, on in UNIQUE_INDEXES.items()),
)
"""Templates creating the current schema where it is absent (``meta`` first)."""

_PLACEHOLDER = re.compile(r"%(\([^)]*\))?[sbt]")


def render(template: str, schema: str) -> str:
    """``template`` as psycopg runs it, its braced parts filled in for ``schema``.

    The schema is quoted by :class:`psycopg.sql.Identifier`, so any name
    PostgreSQL accepts is safe. psycopg reads ``%`` placeholders only in a
    statement run with parameters, and the engine runs a statement with
    parameters exactly when it has placeholders: there, a ``%`` in the
    schema's name is doubled to stay a ``%``.
    """
    bound = _PLACEHOLDER.search(template) is not None or any(
        f"{{{name}}}" in template for name in _KEYS
    )
    return _render(template, schema, bound=bound)


def _render(template: str, schema: str, *, bound: bool) -> str:
    quoted = sql.Identifier(schema).as_string(None)
    jobs = sql.Literal(f"{quoted}.jobs").as_string(None)
    if bound:
        quoted, jobs = quoted.replace("%", "%%"), jobs.replace("%", "%%")
    parts = {"s": quoted, "jobs_table": jobs, "now": NOW, **_KEYS}
    return (
        sql.SQL(template)
        .format(**{name: sql.SQL(text) for name, text in parts.items()})
        .as_string(None)
    )


def render_bound(template: str, schema: str) -> str:
    """Like :func:`render`, for a statement always run with parameters
    (``tx.execute`` passes them even when empty)."""
    return _render(template, schema, bound=True)


_DEAD_COLUMNS = (
    "id, queue_key, queue, payload, priority, run_at, created_at, expires_at, attempts, "
    "max_attempts, retention_s, worker_id, key, visibility_timeout_s, backoff_base_s, "
    "traceparent, last_error, died_at"
)
_MOVED = (
    "id, queue_key, queue, payload, priority, run_at, created_at, expires_at, attempts, "
    "max_attempts, retention_s, worker_id, key, visibility_timeout_s, backoff_base_s, "
    "traceparent"
)
HOLDS = "id = %(id)s AND attempts = %(attempts)s AND worker_id = %(worker)s AND deadline >= {now}"
READY = "deadline IS NULL AND run_at <= {now} AND (expires_at IS NULL OR expires_at > {now})"
_LISTED = (
    "id, queue, payload, priority, run_at, created_at, expires_at, attempts, max_attempts, "
    "worker_id, key"
)


def _first_key(table: str, where: str, after: str = "") -> str:
    condition = " AND ".join(filter(None, (where, after)))
    return (
        f"SELECT queue_key FROM {{s}}.{table}{' WHERE ' + condition if condition else ''} "
        "ORDER BY queue_key LIMIT 1"
    )


def _skip_scan(name: str, table: str, where: str) -> str:
    """A CTE ``name(k)`` of the distinct queue keys of ``table``'s rows matching ``where``."""
    return (
        f"{name}(k) AS (({_first_key(table, where)}) UNION ALL "
        f"SELECT ({_first_key(table, where, 'queue_key > k')}) FROM {name} WHERE k IS NOT NULL)"
    )


# A probe first, run once per statement: an index scan stopping at the first
# lapsed claim. Without it the planner reads the queue's lapsed range of
# jobs_claimed with a bitmap scan, which never marks the entries of acked jobs
# dead, so until a vacuum every claim read all of them again; an index scan
# marks each one it passes, and later claims skip it.
_ANY_LAPSED = "EXISTS (SELECT 1 FROM {s}.jobs WHERE queue_key = {queue_key} AND deadline < {now})"
_EXPIRED = "FROM {s}.jobs WHERE queue_key = k AND expires_at <= c.now AND deadline IS NULL"
_QUEUE_STATS = (
    "WITH RECURSIVE clock(now) AS (SELECT {now}), "
    + _skip_scan("pending", "jobs", "deadline IS NULL")
    + ", "
    + _skip_scan("claimed", "jobs", "deadline IS NOT NULL")
    + ", "
    + _skip_scan("dead", "dead", "")
    + ", "
    "keys(k) AS (SELECT k FROM pending WHERE k IS NOT NULL "
    "UNION SELECT k FROM claimed WHERE k IS NOT NULL "
    "UNION SELECT k FROM dead WHERE k IS NOT NULL) "
    "SELECT COALESCE("
    "(SELECT queue FROM {s}.jobs WHERE queue_key = k AND deadline IS NULL LIMIT 1), "
    "(SELECT queue FROM {s}.jobs WHERE queue_key = k AND deadline IS NOT NULL LIMIT 1), "
    "(SELECT queue FROM {s}.dead WHERE queue_key = k LIMIT 1)), "
    "p.n, p.n - q.later, "
    "x.due, x.later, "
    "(SELECT count(*) FROM {s}.jobs WHERE queue_key = k AND deadline IS NOT NULL), "
    "(SELECT count(*) FROM {s}.dead WHERE queue_key = k), "
    "c.now - q.oldest "
    "FROM keys CROSS JOIN clock AS c CROSS JOIN LATERAL ("
    "SELECT count(*) AS n FROM {s}.jobs WHERE queue_key = k AND deadline IS NULL) AS p "
    # Past expiry, due and later: one range of jobs_expiring, each row fetched once.
    "CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE run_at <= c.now) AS due, "
    f"count(*) FILTER (WHERE run_at > c.now) AS later {_EXPIRED}) AS x "
    # Per priority (a skip-scan): its rows ready later, a range of the index, and
    # its first ready row: neither reads the rows that are ready now.
    "CROSS JOIN LATERAL (WITH RECURSIVE priorities(p) AS ("
    "SELECT max(priority) FROM {s}.jobs WHERE queue_key = k AND deadline IS NULL "
    "UNION ALL SELECT (SELECT max(priority) FROM {s}.jobs "
    "WHERE queue_key = k AND deadline IS NULL AND priority < pr.p) "
    "FROM priorities AS pr WHERE pr.p IS NOT NULL) "
    "SELECT COALESCE(sum((SELECT count(*) FROM {s}.jobs WHERE queue_key = k "
    "AND deadline IS NULL AND priority = pr.p AND run_at > c.now)), 0)::bigint AS later, "
    "min((SELECT run_at FROM {s}.jobs WHERE queue_key = k AND deadline IS NULL "
    "AND priority = pr.p AND run_at <= c.now AND (expires_at IS NULL OR expires_at > c.now) "
    "ORDER BY priority DESC, run_at LIMIT 1)) AS oldest "
    "FROM priorities AS pr WHERE pr.p IS NOT NULL) AS q"
)
"""Per queue: name, pending, due, due past expiry, later past expiry, claimed, dead,
oldest ready age (seconds, NULL with none ready)."""


class Statements:
    """The statements of one schema, rendered once."""

    def __init__(self, schema: str) -> None:  # noqa: PLR0915 - one statement per SQL statement
        self.schema = schema
        render = functools.partial(_render_in, schema)
        insert_job = (
            "INSERT INTO {s}.jobs (queue_key, queue, payload, priority, run_at, created_at, "
            "expires_at, max_attempts, visibility_timeout_s, backoff_base_s, retention_s, "
            "key, key_digest, traceparent) "
            "VALUES ({queue_key}, %(queue)s, %(payload)s, %(priority)s, "
            "COALESCE(%(run_at)s, {now} + %(delay)s), {now}, {now} + %(expires_in)s, "
            "%(max_attempts)s, %(visibility)s, %(backoff)s, %(retention)s, "
            "%(job_key)s, {job_key_digest}, %(traceparent)s) "
        )
        inserted = "RETURNING id, pg_notify(%(channel)s, %(key)s)"
        self.enqueue = render(insert_job + inserted)
        # A keyed job whose key a live job of its queue holds: nothing is written
        # (the insert waits for a transaction inserting the same key to end).
        self.enqueue_keyed = render(
            insert_job
            + "ON CONFLICT (queue_key, key_digest) WHERE key_digest IS NOT NULL DO NOTHING "
            + inserted
        )
        self.live_job_with_key = render(
            "SELECT id, expires_at <= {now} FROM {s}.jobs WHERE queue_key = {queue_key} "
            "AND key_digest = {job_key_digest}"
        )
        # Buffered enqueues of a transaction: ids reserved ahead, rows sent together.
        # The sequence is looked up once (an InitPlan), not once per id: the lookup
        # cost more than the nextval.
        self.reserve_job_ids = render(
            "SELECT nextval((SELECT pg_get_serial_sequence({jobs_table}, 'id')::regclass)) "
            "FROM generate_series(1, %(reserve)s)"
        )
        # One statement for any number of rows, its parameters arrays sent in binary
        # (%(...)b: text arrays would be escaped element by element): a column array
        # for each per-row value, and the distinct stamps of the rows (most often
        # one), which each row names by its place (1-based) in the stamp arrays.
        self.enqueue_reserved = render(
            "INSERT INTO {s}.jobs (id, queue_key, queue, payload, priority, run_at, created_at, "
            "expires_at, max_attempts, visibility_timeout_s, backoff_base_s, retention_s, "
            f"traceparent) OVERRIDING SYSTEM VALUE SELECT id, {key_of(_stamped('queue'))}, "
            f"{_stamped('queue')}, payload, {_stamped('priority')}, "
            f"COALESCE({_stamped('run_at')}, {{now}} + {_stamped('delay')}), {{now}}, "
            f"{{now}} + {_stamped('expires_in')}, {_stamped('max_attempts')}, "
            f"{_stamped('visibility')}, {_stamped('backoff')}, {_stamped('retention')}, "
            "traceparent FROM unnest(%(id)b::bigint[], %(payload)b::text[], "
            "%(traceparent)b::text[], %(stamp)b::int[]) AS t(id, payload, traceparent, stamp)"
        )
        self.lapsed_to_dead = render(
            "WITH moved AS (DELETE FROM {s}.jobs WHERE id IN ("
            "SELECT id FROM {s}.jobs WHERE " + _ANY_LAPSED + " AND queue_key = {queue_key} "
            "AND deadline < {now} AND attempts >= max_attempts FOR UPDATE SKIP LOCKED) "
            f"RETURNING {_MOVED}) "
            f"INSERT INTO {{s}}.dead ({_DEAD_COLUMNS}) SELECT {_MOVED}, %(lapsed)s, {{now}} "
            "FROM moved"
        )
        # attempts < max_attempts: each statement has its own now, and a job
        # lapsing between the two statements must still go to dead letters.
        self.lapsed_to_pending = render(
            "UPDATE {s}.jobs SET deadline = NULL WHERE id IN ("
            "SELECT id FROM {s}.jobs WHERE " + _ANY_LAPSED + " AND queue_key = {queue_key} "
            "AND deadline < {now} AND attempts < max_attempts FOR UPDATE SKIP LOCKED)"
        )
        claim = (
            "UPDATE {s}.jobs SET attempts = attempts + 1, "
            "deadline = {now} + visibility_timeout_s, worker_id = %(worker)s "
            "WHERE id IN (SELECT id FROM {s}.jobs WHERE queue_key = {queue_key} "
            "AND deadline IS NULL AND run_at <= {now} "
            "AND (expires_at IS NULL OR expires_at > {now}) "
            "ORDER BY priority DESC, run_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED) "
        )
        claimed = (
            "RETURNING id, payload, priority, attempts, max_attempts, run_at, deadline, "
            "backoff_base_s, visibility_timeout_s, key, traceparent"
        )
        self.claim = render(claim + claimed)
        # The common claim, one statement: when no claim of the queue has lapsed.
        # When one has, it claims nothing and answers one row of NULLs instead,
        # and the caller releases the lapsed claims and claims in one transaction
        # (lapsed_to_dead, lapsed_to_pending, claim).
        self.claim_unless_lapsed = render(
            f"WITH claimed AS ({claim}AND NOT {_ANY_LAPSED} {claimed}) "
            "SELECT * FROM claimed UNION ALL "
            "SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
            f"WHERE {_ANY_LAPSED}"
        )
        self.ack = render("DELETE FROM {s}.jobs WHERE " + HOLDS)
        # A NULL attempt acks any unexpired claim by the worker; a number only that claim.
        # The queue is matched by name, which no index holds, so each id is looked up
        # by primary key: matched by key, the planner read the queue's range of
        # jobs_claimed, whose entries for acked jobs stay until a vacuum (a bitmap
        # scan never marks them dead), and each ack of a drain read more of them.
        # The arrays go in binary: psycopg writes a text array element by element.
        self.ack_batch = render(
            "DELETE FROM {s}.jobs AS j USING unnest(%(ids)b::bigint[], %(attempts)b::int[]) "
            "AS c(id, attempts) WHERE j.id = c.id "
            "AND j.attempts = COALESCE(c.attempts, j.attempts) "
            "AND j.queue = %(queue)s AND j.worker_id = %(worker)s AND j.deadline >= {now}"
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
        self.cancel_live = render(
            "DELETE FROM {s}.jobs WHERE id = %(id)s AND queue_key = {queue_key}"
        )
        self.cancel_dead = render(
            "DELETE FROM {s}.dead WHERE id = %(id)s AND queue_key = {queue_key}"
        )
        self.get_live = render(
            f"SELECT {_LISTED}, deadline, last_error "
            "FROM {s}.jobs WHERE id = %(id)s AND queue_key = {queue_key}"
        )
        self.get_dead = render(
            f"SELECT {_LISTED}, last_error, died_at "
            "FROM {s}.dead WHERE id = %(id)s AND queue_key = {queue_key}"
        )
        self.expired_to_dead = render(
            f"WITH moved AS (DELETE FROM {{s}}.jobs WHERE queue_key = {{queue_key}} "
            f"AND expires_at <= {{now}} RETURNING {_MOVED}) "
            f"INSERT INTO {{s}}.dead ({_DEAD_COLUMNS}) "
            f"SELECT {_MOVED}, %(expired)s, {{now}} FROM moved"
        )
        self.expired_one_to_dead = render(
            f"WITH moved AS (DELETE FROM {{s}}.jobs WHERE id = %(id)s "
            f"AND expires_at <= {{now}} RETURNING {_MOVED}) "
            f"INSERT INTO {{s}}.dead ({_DEAD_COLUMNS}) "
            f"SELECT {_MOVED}, %(expired)s, {{now}} FROM moved"
        )
        self.purge_dead = render(
            "DELETE FROM {s}.dead WHERE queue_key = {queue_key} AND retention_s IS NOT NULL "
            "AND died_at + retention_s <= {now}"
        )
        # Dead letters back to pending, ready now and no longer expiring, each
        # row locked first: a requeue racing this one skips the rows this one
        # moved. A row whose key a live job holds (or an earlier row of this
        # move took) conflicts and stays dead. Returns how many moved.
        requeue = (
            "WITH moved AS (INSERT INTO {s}.jobs (id, queue_key, queue, payload, priority, "
            "run_at, created_at, expires_at, attempts, max_attempts, visibility_timeout_s, "
            "backoff_base_s, retention_s, worker_id, last_error, key, key_digest, traceparent) "
            "OVERRIDING SYSTEM VALUE SELECT id, queue_key, queue, payload, priority, {now}, "
            "created_at, NULL, CASE WHEN %(reset)s THEN 0 ELSE attempts END, max_attempts, "
            "COALESCE(visibility_timeout_s, %(visibility)s), "
            "COALESCE(backoff_base_s, %(backoff)s), retention_s, worker_id, last_error, "
            f"key, {key_of('key')}, traceparent FROM {{s}}.dead WHERE queue_key = {{queue_key}} "
            "{only} ORDER BY id FOR UPDATE ON CONFLICT DO NOTHING RETURNING id), "
            "gone AS (DELETE FROM {s}.dead WHERE id IN (SELECT id FROM moved) RETURNING id) "
            "SELECT count(*) FROM gone"
        )
        self.requeue_dead = render(requeue.replace("{only}", ""))
        self.requeue_dead_ids = render(requeue.replace("{only}", "AND id = ANY(%(ids)s)"))
        self.purge_dead_all = render("DELETE FROM {s}.dead WHERE queue_key = {queue_key}")
        self.purge_dead_older = render(
            "DELETE FROM {s}.dead WHERE queue_key = {queue_key} AND died_at <= {now} - %(older)s"
        )
        # The first pending run_at not past expiry, per priority (a skip-scan of
        # jobs_ready: a few index entries however many jobs are scheduled), or
        # the first claim's deadline.
        self.next_ready = render(
            "WITH RECURSIVE priorities(p) AS ("
            "SELECT max(priority) FROM {s}.jobs WHERE queue_key = {queue_key} "
            "AND deadline IS NULL "
            "UNION ALL SELECT (SELECT max(priority) FROM {s}.jobs "
            "WHERE queue_key = {queue_key} AND deadline IS NULL AND priority < pr.p) "
            "FROM priorities AS pr WHERE pr.p IS NOT NULL) "
            "SELECT LEAST("
            "(SELECT min((SELECT run_at FROM {s}.jobs WHERE queue_key = {queue_key} "
            "AND deadline IS NULL AND priority = pr.p "
            "AND (expires_at IS NULL OR expires_at > {now}) "
            "ORDER BY priority DESC, run_at LIMIT 1)) "
            "FROM priorities AS pr WHERE pr.p IS NOT NULL), "
            "(SELECT MIN(deadline) FROM {s}.jobs WHERE queue_key = {queue_key} "
            "AND deadline IS NOT NULL)) - {now}"
        )
        self.publish = render(
            "WITH head AS (INSERT INTO {s}.stream_heads AS h (stream_key, stream, head) "
            "VALUES ({stream_key}, %(stream)s, 1) "
            "ON CONFLICT (stream_key) DO UPDATE SET head = h.head + 1 RETURNING head) "
            'INSERT INTO {s}.events (stream_key, "offset", key, payload, created_at) '
            "SELECT {stream_key}, head, %(key)s, %(payload)s, {now} FROM head "
            'RETURNING "offset", pg_notify(%(channel)s, %(wake)s)'
        )
        # A transaction's later publishes to a stream whose head it holds locked.
        self.publish_held = render(
            "WITH head AS (UPDATE {s}.stream_heads SET head = %(head)s "
            "WHERE stream_key = {stream_key}) "
            'INSERT INTO {s}.events (stream_key, "offset", key, payload, created_at) '
            'SELECT {stream_key}, "offset", key, payload, {now} '
            "FROM unnest(%(offset)b::bigint[], %(key)b::text[], %(payload)b::text[]) "
            'AS t("offset", key, payload)'
        )
        # Nothing past trimmed_through: a read that comes back empty looks at the
        # record again (see StreamPlans.read_since), so it never misses trimmed
        # events without knowing.
        self.read_since = render(
            'SELECT "offset", key, payload, created_at FROM {s}.events '
            'WHERE stream_key = {stream_key} AND "offset" > %(offset)s '
            "AND %(offset)s >= COALESCE((SELECT trimmed_through FROM {s}.stream_heads "
            "WHERE stream_key = {stream_key}), 0) "
            'ORDER BY "offset" LIMIT %(limit)s'
        )
        self.trimmed_through = render(
            "SELECT COALESCE((SELECT trimmed_through FROM {s}.stream_heads "
            "WHERE stream_key = {stream_key}), 0)"
        )
        # Trimming (TrimRule). Offsets of a stream are contiguous, so "the newest
        # N" is a subtraction and a trim's count the distance it moved.
        self.trim_bounds = render(
            "SELECT head, trimmed_through FROM {s}.stream_heads WHERE stream_key = {stream_key}"
        )
        self.first_young_event = render(
            'SELECT "offset" FROM {s}.events WHERE stream_key = {stream_key} '
            'AND "offset" > %(old)s AND created_at >= {now} - %(age)s ORDER BY "offset" LIMIT 1'
        )
        self.lowest_consumer = render(
            'SELECT MIN("offset") FROM {s}.offsets WHERE stream_key = {stream_key}'
        )
        self.lock_trim = render(
            "SELECT trimmed_through FROM {s}.stream_heads WHERE stream_key = {stream_key} "
            "FOR UPDATE"
        )
        self.record_trim = render(
            "UPDATE {s}.stream_heads SET trimmed_through = %(cutoff)s "
            "WHERE stream_key = {stream_key}"
        )
        self.delete_trimmed = render(
            'DELETE FROM {s}.events WHERE stream_key = {stream_key} AND "offset" IN ('
            'SELECT "offset" FROM {s}.events WHERE stream_key = {stream_key} '
            'AND "offset" <= %(cutoff)s ORDER BY "offset" LIMIT %(chunk)s)'
        )
        self.stream_head = render(
            "SELECT COALESCE((SELECT head FROM {s}.stream_heads "
            "WHERE stream_key = {stream_key}), 0)"
        )
        self.get_offset = render(
            'SELECT "offset" FROM {s}.offsets '
            "WHERE stream_key = {stream_key} AND consumer_key = {consumer_key}"
        )
        # Never past the head: a consumer there would skip every event until it.
        self.save_offset = render(
            'INSERT INTO {s}.offsets AS o (stream_key, consumer_key, stream, consumer, "offset") '
            "SELECT {stream_key}, {consumer_key}, %(stream)s, %(consumer)s, %(offset)s "
            "WHERE %(offset)s <= COALESCE("
            "(SELECT head FROM {s}.stream_heads WHERE stream_key = {stream_key}), 0) "
            'ON CONFLICT (stream_key, consumer_key) DO UPDATE SET "offset" = excluded."offset" '
            'WHERE o."offset" < excluded."offset"'
        )
        self.notify = "SELECT pg_notify(%(channel)s, %(key)s)"
        # Which storage a connection reaches: the jobs table's oid (NULL where the
        # schema has none; oids are unique across a cluster's databases) and the
        # database's name. adopt_tx compares a connection's with the store's.
        self.storage = render("SELECT to_regclass({jobs_table})::oid, current_database()")
        self.try_lock = render(
            "INSERT INTO {s}.locks AS l (name_key, name, owner, expires_at) "
            "VALUES ({name_key}, %(name)s, %(owner)s, {now} + %(ttl)s) "
            "ON CONFLICT (name_key) DO UPDATE SET owner = excluded.owner, "
            "expires_at = excluded.expires_at WHERE l.expires_at <= {now} RETURNING owner"
        )
        self.lock_held = render(
            "SELECT 1 FROM {s}.locks WHERE name_key = {name_key} AND owner = %(owner)s "
            "AND expires_at > {now}"
        )
        self.renew_lock = render(
            "UPDATE {s}.locks SET expires_at = {now} + %(ttl)s WHERE name_key = {name_key} "
            "AND owner = %(owner)s AND expires_at > {now}"
        )
        self.release_lock = render(
            "DELETE FROM {s}.locks WHERE name_key = {name_key} AND owner = %(owner)s "
            "RETURNING expires_at > {now}"
        )
        # A sweep of lapsed locks, one window of keys at a time (``_lock.LapsedLocks``):
        # deletes the window's locks lapsed past the grace, skipping rows another
        # transaction holds (two sweeps never wait on each other), and answers the
        # window's last key (no row past the table's end).
        self.sweep_lapsed_locks = render(
            "WITH win AS (SELECT name_key FROM {s}.locks WHERE name_key > %(after)s "
            "ORDER BY name_key LIMIT %(window)s), "
            "lapsed AS (SELECT name_key FROM {s}.locks "
            "WHERE name_key IN (SELECT name_key FROM win) "
            "AND expires_at < {now} - %(grace)s FOR UPDATE SKIP LOCKED), "
            "gone AS (DELETE FROM {s}.locks WHERE name_key IN (SELECT name_key FROM lapsed)) "
            "SELECT name_key FROM win ORDER BY name_key DESC LIMIT 1"
        )
        self.get_schedule = render(
            "SELECT spec, anchor, next_fire_at, tz, {now}, last_fired_at FROM {s}.schedules "
            "WHERE name_key = {name_key} FOR UPDATE"
        )
        self.now = render("SELECT {now}")
        self.upsert_schedule = render(
            "INSERT INTO {s}.schedules (name_key, name, spec, interval_s, queue, payload, "
            "priority, max_attempts, expires_s, anchor, next_fire_at, tz, job_key) VALUES "
            "({name_key}, %(name)s, %(spec)s, %(interval)s, %(queue)s, %(payload)s, "
            "%(priority)s, %(max_attempts)s, %(expires)s, %(anchor)s, %(next)s, %(tz)s, "
            "%(job_key)s) "
            "ON CONFLICT (name_key) DO UPDATE SET "
            "spec = excluded.spec, interval_s = excluded.interval_s, queue = excluded.queue, "
            "payload = excluded.payload, priority = excluded.priority, "
            "max_attempts = excluded.max_attempts, expires_s = excluded.expires_s, "
            "next_fire_at = excluded.next_fire_at, tz = excluded.tz, job_key = excluded.job_key"
        )
        self.delete_schedule = render("DELETE FROM {s}.schedules WHERE name_key = {name_key}")
        # A DueSchedule's fields in order, then the server's now.
        self.due_schedules = render(
            "SELECT name, interval_s, queue, payload, priority, max_attempts, expires_s, "
            "next_fire_at, spec, tz, job_key, {now} FROM {s}.schedules "
            "WHERE next_fire_at <= {now}"
        )
        self.next_schedule = render("SELECT MIN(next_fire_at) - {now} FROM {s}.schedules")
        self.advance_schedule = render(
            "UPDATE {s}.schedules SET next_fire_at = %(to)s, last_fired_at = %(from)s "
            "WHERE name_key = {name_key} AND next_fire_at = %(from)s"
        )

        # Inspection: each listing is one plain SELECT (one snapshot, no row locks).
        # Queue statistics read every count from an index: queue keys by a
        # skip-scan of each index that leads with the key, then per key the
        # pending rows (jobs_ready, index-only; those ready later counted per
        # priority, a range of the same index), those past
        # expiry (jobs_expiring: only they are fetched from the heap), claimed
        # (jobs_claimed) and dead (dead_by_queue) rows, and the oldest ready job
        # as the first ready row of each priority (jobs_ready, priorities by a
        # skip-scan). Run after SET LOCAL enable_seqscan = off (and jit = off):
        # for a key that holds most of the table the planner would otherwise scan
        # the whole table once per queue, small queues included.
        self.queue_stats = render(_QUEUE_STATS)
        # Live and dead rows in one shape: ..., key, deadline, last_error, died_at.
        live = f"SELECT {_LISTED}, deadline, last_error, NULL::float8 AS died_at FROM {{s}}.jobs"
        # Keyset pages: only ids above %(after)s (0 for the first page).
        mine = "queue_key = {queue_key} AND id > %(after)s"
        pending = f"{live} WHERE {mine} AND deadline IS NULL"
        claimed = f"{live} WHERE {mine} AND deadline IS NOT NULL"
        dead = f"SELECT {_LISTED}, NULL, last_error, died_at FROM {{s}}.dead WHERE {mine}"
        order = " ORDER BY id LIMIT %(limit)s"
        # Each part stops at its first rows by id: the merge sorts at most 3 times limit rows.
        parts = " UNION ALL ".join(f"({part}{order})" for part in (pending, claimed, dead))
        self.list_jobs: dict[str | None, str] = {
            "pending": render(pending + order),
            "processing": render(claimed + order),
            "dead": render(dead + order),
            None: render(parts + order),
        }
        # Offsets are contiguous per stream (each publish takes head + 1 under the
        # head row's lock, and a rollback returns it), so the lag is a subtraction (of
        # the events the consumer can still read: none at or below trimmed_through).
        self.stream_stats = render(
            'SELECT COALESCE(h.stream, o.stream), COALESCE(h.head, 0), o.consumer, o."offset", '
            'GREATEST(COALESCE(h.head, 0) - GREATEST(o."offset", h.trimmed_through), 0) '
            "FROM {s}.stream_heads AS h FULL JOIN {s}.offsets AS o "
            "ON o.stream_key = h.stream_key"
        )
        self.held_locks = render(
            "SELECT name, owner, expires_at FROM {s}.locks WHERE expires_at > {now}"
        )
        self.list_schedules = render(
            "SELECT name, spec, queue, payload, next_fire_at, tz, last_fired_at FROM {s}.schedules"
        )


def _render_in(schema: str, template: str) -> str:
    return render(template, schema)
