"""The engine's schema: created or migrated on open under an advisory lock, then checked.

Version 1 indexed names themselves; version 2 indexes their keys (``_sql``),
so names too long for a btree entry work; version 3 adds unique job keys,
the stamps a requeued dead letter gets back, jobs' trace context, and a cron
schedule's time zone; version 4 records how far each stream is trimmed
(``Stream.trim``). An older schema is migrated in place, rows kept, by the
first process to open it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from alkstore import Database
from alkstore_postgres._plan import Fetch, Operation, Plan, Statement
from alkstore_postgres._sql import INDEXES, SCHEMA_DDL, TABLES, UNIQUE_INDEXES, key_of, render

__all__ = ["SCHEMA_VERSION", "migration"]


def _add_keys(table: str, keys: Mapping[str, str]) -> tuple[str, ...]:
    """Templates giving ``table`` a key column for each name column, filled from it."""
    return (
        f"ALTER TABLE {{s}}.{table} " + ", ".join(f"ADD COLUMN {key} bytea" for key in keys),
        f"UPDATE {{s}}.{table} SET "
        + ", ".join(f"{key} = {key_of(name)}" for key, name in keys.items()),
        f"ALTER TABLE {{s}}.{table} "
        + ", ".join(f"ALTER COLUMN {key} SET NOT NULL" for key in keys),
    )


_V1_TO_V2 = (
    "DROP INDEX {s}.jobs_ready, {s}.jobs_claimed, {s}.jobs_expiring, {s}.dead_by_queue",
    *_add_keys("jobs", {"queue_key": "queue"}),
    *_add_keys("dead", {"queue_key": "queue"}),
    *_add_keys("stream_heads", {"stream_key": "stream"}),
    "ALTER TABLE {s}.stream_heads DROP CONSTRAINT stream_heads_pkey, ADD PRIMARY KEY (stream_key)",
    *_add_keys("events", {"stream_key": "stream"}),
    'ALTER TABLE {s}.events DROP CONSTRAINT events_pkey, ADD PRIMARY KEY (stream_key, "offset")',
    "ALTER TABLE {s}.events DROP COLUMN stream",
    *_add_keys("offsets", {"stream_key": "stream", "consumer_key": "consumer"}),
    "ALTER TABLE {s}.offsets DROP CONSTRAINT offsets_pkey, "
    "ADD PRIMARY KEY (stream_key, consumer_key)",
    *_add_keys("locks", {"name_key": "name"}),
    "ALTER TABLE {s}.locks DROP CONSTRAINT locks_pkey, ADD PRIMARY KEY (name_key)",
    *_add_keys("schedules", {"name_key": "name"}),
    "ALTER TABLE {s}.schedules DROP CONSTRAINT schedules_pkey, ADD PRIMARY KEY (name_key)",
    # the indexes dropped above come back on keys with the current schema's DDL
)

_V2_TO_V3 = (
    "ALTER TABLE {s}.jobs ADD COLUMN key text, ADD COLUMN key_digest bytea, "
    "ADD COLUMN traceparent text",
    "ALTER TABLE {s}.dead ADD COLUMN key text, ADD COLUMN visibility_timeout_s double precision, "
    "ADD COLUMN backoff_base_s double precision, ADD COLUMN traceparent text",
    # the unique index on job keys comes with the current schema's DDL
    # Schedules: the time zone of a cron spec (ScheduleOpts.tz; NULL is UTC, and
    # every @every schedule). Older rows are @every schedules: NULL fits.
    "ALTER TABLE {s}.schedules ADD COLUMN tz text, ADD COLUMN job_key text",
)

# A constant default: PostgreSQL adds the column without rewriting the table.
_V3_TO_V4 = ("ALTER TABLE {s}.stream_heads ADD COLUMN trimmed_through bigint NOT NULL DEFAULT 0",)

# Schedules remember the boundary they fired last (Schedule.last_fire_at).
_V4_TO_V5 = ("ALTER TABLE {s}.schedules ADD COLUMN last_fired_at double precision",)

# Dead letters past their retention found by an index (dead_purgeable), which
# comes with the current schema's DDL: nothing to change before it.
_V5_TO_V6: tuple[str, ...] = ()

_MIGRATIONS: Mapping[int, tuple[str, ...]] = {
    1: _V1_TO_V2, 2: _V2_TO_V3, 3: _V3_TO_V4, 4: _V4_TO_V5, 5: _V5_TO_V6,
}  # fmt: skip
"""Templates taking a schema from the version they are keyed by to the next one."""

SCHEMA_VERSION = 6

# One query over the catalog, no table read: every engine table's columns with
# their types, and every engine index (relkind 'i', no columns listed).
_SHAPE = (
    "SELECT c.relname, c.relkind = 'i', a.attname, format_type(a.atttypid, a.atttypmod) "
    "FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_attribute AS a ON a.attrelid = c.oid AND c.relkind <> 'i' "
    "AND a.attnum > 0 AND NOT a.attisdropped "
    "WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'i') "
    "AND c.relname = ANY(%(names)s) ORDER BY c.relname, a.attnum"
)


class _Shape:
    """What the catalog says of the engine's tables and indexes in a schema."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.tables: dict[str, dict[str, str]] = {}
        self.indexes: set[str] = set()
        for relation, is_index, column, kind in rows:
            if is_index:
                self.indexes.add(relation)
            else:
                columns = self.tables.setdefault(relation, {})
                if column is not None:
                    columns[column] = kind

    @classmethod
    def read(cls, schema: str) -> Plan[_Shape]:
        """The shape of ``schema`` as the catalog says now."""
        names = [*TABLES, *(f"{table}_pkey" for table in TABLES), *INDEXES, *UNIQUE_INDEXES]
        return cls((yield Statement(_SHAPE, {"schema": schema, "names": names}, Fetch.ALL)))

    def problems(self) -> list[str]:
        """Each difference from the current version's tables and indexes, in words."""
        found: list[str] = []
        for table, (columns, _) in TABLES.items():
            have = self.tables.get(table)
            if have is None:
                found.append(f"table {table} is missing")
                continue
            expected = {name: kind for name, kind, _ in columns}
            for name, kind in expected.items():
                if name not in have:
                    found.append(f"table {table} has no column {name}")
                elif have[name] != kind:
                    found.append(f"column {table}.{name} is {have[name]}, not {kind}")
            found.extend(
                f"table {table} has a column {name} alkstore does not use"
                for name in have
                if name not in expected
            )
        wanted = [*(f"{table}_pkey" for table in TABLES), *INDEXES, *UNIQUE_INDEXES]
        found.extend(f"index {index} is missing" for index in wanted if index not in self.indexes)
        return found


def migration(schema: str) -> Plan[int]:
    """Bring ``schema`` to :data:`SCHEMA_VERSION` and check it; return the version found.

    Processes opening a schema at once serialise on an advisory lock keyed by
    its name, so each finds it absent, older (and migrates it, rows kept) or
    current. Then every engine table, column (with its type) and index is
    checked, so a damaged or altered schema is refused at open rather than
    failing later, on whichever call first touches the altered part.

    Raises:
        alkstore.Database: the stored version is not a version number, is newer
            than this alkstore-postgres understands (upgrade it), the schema
            holds engine tables but no version or a ``meta`` table of someone
            else's, or a table, column or index is missing or altered (each named).
        psycopg.Error: the server failed a statement.
    """
    key = int.from_bytes(
        hashlib.blake2b(schema.encode(), digest_size=8).digest(), "big", signed=True
    )
    yield Operation(f"preparing schema {schema!r}", transaction=True)
    if (yield from _is_current(schema)):
        # Nothing to write: a role without CREATE, or a read-only standby, opens it.
        yield from _check_shape(schema)
        return SCHEMA_VERSION
    yield Statement("SELECT pg_advisory_xact_lock(%(key)s)", {"key": key})
    yield Statement(render("CREATE SCHEMA IF NOT EXISTS {s}", schema))
    yield Statement(render(SCHEMA_DDL[0], schema))  # meta, where the version is
    found = yield from _stored_version(schema)
    if found == 0 and set((yield from _Shape.read(schema)).tables) - {"meta"}:
        raise Database(
            f"schema {schema!r} holds tables named like alkstore's but no alkstore schema "
            "version (no row 'schema_version' in its meta table): it is not an alkstore "
            "schema, or the row was deleted; choose another schema (option 'schema')"
        )
    if found < SCHEMA_VERSION:
        # An older schema is migrated step by step; a new one gets the current DDL only.
        for version in range(found, SCHEMA_VERSION) if found else ():
            for template in _MIGRATIONS[version]:
                yield Statement(render(template, schema))
        for template in SCHEMA_DDL:
            yield Statement(render(template, schema))
        yield Statement(
            render(
                "INSERT INTO {s}.meta (key, value) VALUES ('schema_version', %(version)s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                schema,
            ),
            {"version": str(SCHEMA_VERSION)},
        )
    yield from _check_shape(schema)
    return found


def _is_current(schema: str) -> Plan[bool]:
    """Whether ``schema`` holds this version's tables already, read without writing."""
    meta = yield Statement(
        "SELECT to_regclass(%(meta)s) IS NOT NULL",
        {"meta": render("{s}.meta", schema)},
        Fetch.ONE,
    )
    return bool(meta and meta[0]) and (yield from _stored_version(schema)) == SCHEMA_VERSION


def _check_shape(schema: str) -> Plan[None]:
    problems = (yield from _Shape.read(schema)).problems()
    if problems:
        raise Database(
            f"the alkstore tables in schema {schema!r} (version {SCHEMA_VERSION}) were "
            f"altered: {'; '.join(problems)}; restore them from a backup"
        )


def _check_meta_is_ours(schema: str) -> Plan[None]:
    """Refuse a ``meta`` table of someone else's, before reading a version from it."""
    meta = (yield from _Shape.read(schema)).tables.get("meta", {})
    if not {"key", "value"} <= meta.keys():
        raise Database(
            f"schema {schema!r} holds a table meta that is not alkstore's (it has no "
            "columns key and value): choose another schema (option 'schema')"
        )


def _stored_version(schema: str) -> Plan[int]:
    """The version in the schema's meta table: 0 when there is none yet.

    Raises:
        alkstore.Database: it is not a whole number, or is newer than this
            alkstore-postgres understands.
    """
    yield from _check_meta_is_ours(schema)
    row = yield Statement(
        render("SELECT value FROM {s}.meta WHERE key = 'schema_version'", schema), fetch=Fetch.ONE
    )
    if row is None:
        return 0
    text = row[0]
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise Database(
            f"the alkstore schema version stored in {schema!r}.meta is {text!r}, which no "
            f"alkstore-postgres writes (it writes whole numbers, {SCHEMA_VERSION} today): "
            "the schema was altered; restore it from a backup"
        )
    version = int(text)
    if version > SCHEMA_VERSION:
        raise Database(
            f"schema {schema!r} is alkstore version {version}, newer than this "
            f"alkstore-postgres understands ({SCHEMA_VERSION}); upgrade alkstore-postgres"
        )
    return version
