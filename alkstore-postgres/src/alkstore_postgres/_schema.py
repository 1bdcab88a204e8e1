"""The engine's schema, created and migrated on open under an advisory lock."""

from __future__ import annotations

import hashlib

import psycopg

from alkstore_postgres._sql import Statements

__all__ = ["SCHEMA_VERSION", "migrate"]

SCHEMA_VERSION = 1


def migrate(connection: psycopg.Connection, schema: str, statements: Statements) -> int:
    """Bring ``schema`` to :data:`SCHEMA_VERSION`; return the version found.

    Processes opening a fresh database at once serialise on an advisory lock
    keyed by the schema name, so each finds the schema absent or current.

    Raises:
        RuntimeError: the schema was written by a newer alkstore-postgres.
    """
    quoted = '"' + schema.replace('"', '""') + '"'
    key = int.from_bytes(
        hashlib.blake2b(schema.encode(), digest_size=8).digest(), "big", signed=True
    )
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        connection.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {quoted}.meta (key text PRIMARY KEY, value text NOT NULL)"
        )
        row = connection.execute(
            f"SELECT value FROM {quoted}.meta WHERE key = 'schema_version'"
        ).fetchone()
        found = int(row[0]) if row else 0
        if found > SCHEMA_VERSION:
            raise RuntimeError(
                f"schema {schema!r} is alkstore version {found}, newer than this "
                f"alkstore-postgres understands ({SCHEMA_VERSION}); upgrade alkstore-postgres"
            )
        if found < SCHEMA_VERSION:
            for statement in statements.schema_ddl:
                connection.execute(statement)
            connection.execute(
                f"INSERT INTO {quoted}.meta (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
    return found
