"""Streams on SQLite: one event table, offsets are rowids.

SQLite has one writer at a time, so rowids are handed out in commit order:
a reader that has seen offset N never later finds a new event at or below N.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from alkstore import StreamEvent
from alkstore.engine import Stream, decode, offset_past_head
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import translate

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["SQLiteStream", "insert_event", "raise_offset"]


def insert_event(
    connection: sqlite3.Connection, stream: str, key: str | None, payload_json: str
) -> int:
    """Append an event on ``connection``; return its offset."""
    cursor = connection.execute(_sql.PUBLISH, (stream, key, payload_json, time.time()))
    offset = cursor.lastrowid
    assert offset is not None
    return offset


def raise_offset(connection: sqlite3.Connection, stream: str, consumer: str, offset: int) -> bool:
    """Move the consumer's offset up to ``offset`` on ``connection``; True if it moved.

    Raises:
        ValueError: ``offset`` is past the stream's head as ``connection`` sees it.
    """
    head: int = connection.execute(_sql.STREAM_HEAD, (stream,)).fetchone()[0]
    if offset > head:
        raise offset_past_head(stream, offset, head)
    return connection.execute(_sql.SAVE_OFFSET, (stream, consumer, offset)).rowcount == 1


class SQLiteStream(Stream):
    """A stream in the store's file."""

    _store: SQLiteStore

    def _publish(self, key: str | None, payload_json: str) -> int:
        with translate(f"publish to {self.name!r}"), self._store.connection() as connection:
            offset = insert_event(connection, self.name, key, payload_json)
        self._store.committed()
        return offset

    def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        with translate(f"read {self.name!r}"), self._store.connection() as connection:
            rows = connection.execute(_sql.READ_SINCE, (self.name, offset, limit)).fetchall()
        return [
            StreamEvent(offset=row[0], stream=self.name, key=row[1], payload=decode(row[2]),
                        created_at=row[3])
            for row in rows
        ]  # fmt: skip

    def _get_offset(self, consumer: str) -> int:
        with translate(f"read offset of {consumer!r}"), self._store.connection() as connection:
            row = connection.execute(_sql.GET_OFFSET, (self.name, consumer)).fetchone()
        return 0 if row is None else int(row[0])

    def _save_offset(self, consumer: str, offset: int) -> bool:
        with translate(f"save offset of {consumer!r}"), self._store.connection() as connection:
            return raise_offset(connection, self.name, consumer, offset)
