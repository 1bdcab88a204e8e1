"""Streams on PostgreSQL, commit-ordered.

A publish increments the stream's head row and takes its offset from it. The
row stays locked until the publishing transaction ends, so a second publisher
to the same stream waits and takes the next offset only after the first has
committed (or reuses it after a rollback): offsets become visible in order,
and a reader that has seen offset N never later finds a new event at or
below N. The price: publishers to one stream serialise on their commits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from alkstore import StreamEvent
from alkstore.engine import Stream, decode, offset_past_head, stream_wake_key
from alkstore_postgres._errors import translate
from alkstore_postgres._names import stored, unstored

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresStream", "insert_event", "raise_offset"]


Execute = Callable[[str, dict[str, Any]], psycopg.Cursor[Any]]
"""Runs one statement: ``connection.execute``, or a transaction's own runner."""


def insert_event(
    store: PostgresStore, execute: Execute, stream: str, key: str | None, payload_json: str
) -> int:
    """Append an event with ``execute``; return its offset."""
    row = execute(
        store.sql.publish,
        {
            "stream": stored(stream),
            "key": None if key is None else stored(key),
            "payload": payload_json,
            **store.wake_params(stream_wake_key(stream), "channel", "wake"),
        },
    ).fetchone()
    assert row is not None
    return int(row[0])


def raise_offset(
    store: PostgresStore, execute: Execute, stream: str, consumer: str, offset: int
) -> bool:
    """Move the consumer's offset up to ``offset``; True if it moved.

    Raises:
        ValueError: ``offset`` is past the stream's head, as ``execute`` sees it.
    """
    params = {"stream": stored(stream), "consumer": stored(consumer), "offset": offset}
    if execute(store.sql.save_offset, params).rowcount == 1:
        return True
    row = execute(store.sql.stream_head, params).fetchone()
    head = 0 if row is None else int(row[0])
    if offset > head:
        raise offset_past_head(stream, offset, head)
    return False


class PostgresStream(Stream):
    """A stream in the store's schema."""

    _store: PostgresStore

    def _publish(self, key: str | None, payload_json: str) -> int:
        with translate(f"publish to {self.name!r}"), self._store.connection() as connection:
            return insert_event(self._store, connection.execute, self.name, key, payload_json)

    def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        params = {"stream": stored(self.name), "offset": offset, "limit": limit}
        with translate(f"read {self.name!r}"), self._store.connection() as connection:
            rows = connection.execute(self._store.sql.read_since, params).fetchall()
        return [
            StreamEvent(
                offset=row[0],
                stream=self.name,
                key=None if row[1] is None else unstored(row[1]),
                payload=decode(row[2]),
                created_at=row[3],
            )
            for row in rows
        ]

    def _get_offset(self, consumer: str) -> int:
        params = {"stream": stored(self.name), "consumer": stored(consumer)}
        with translate(f"read offset of {consumer!r}"), self._store.connection() as connection:
            row = connection.execute(self._store.sql.get_offset, params).fetchone()
        return 0 if row is None else int(row[0])

    def _save_offset(self, consumer: str, offset: int) -> bool:
        with translate(f"save offset of {consumer!r}"), self._store.connection() as connection:
            return raise_offset(self._store, connection.execute, self.name, consumer, offset)
