"""Streams on SQLite: one event table, offsets are rowids.

SQLite has one writer at a time, so rowids are handed out in commit order:
a reader that has seen offset N never later finds a new event at or below N.

A trim first records how far it goes (``__alkstore_stream_trims``), then
deletes the rows in chunks, each its own short write transaction: a read
checks the record after reading, so it raises ``StreamTrimmed`` whether or not
the rows it missed are gone yet, and writers wait for one chunk at most.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from alkstore import StreamEvent, StreamTrimmed
from alkstore.engine import Stream, TrimRule, offset_past_head, stream_events
from alkstore_sqlite import _sql
from alkstore_sqlite._errors import translate
from alkstore_sqlite._pool import Statements

if TYPE_CHECKING:
    from alkstore_sqlite._store import SQLiteStore

__all__ = ["SQLiteStream", "insert_event", "raise_offset"]

_TRIM_CHUNK = 5_000
"""Rows one trimming transaction deletes."""


def insert_event(connection: Statements, stream: str, key: str | None, payload_json: str) -> int:
    """Append an event on ``connection``; return its offset."""
    cursor = connection.execute(_sql.PUBLISH, (stream, key, payload_json, time.time()))
    offset = cursor.lastrowid
    assert offset is not None
    return offset


def raise_offset(connection: Statements, stream: str, consumer: str, offset: int) -> bool:
    """Move the consumer's offset up to ``offset`` on ``connection``; True if it moved.

    Raises:
        ValueError: ``offset`` is past the stream's head as ``connection`` sees it.
    """
    head: int = connection.execute(_sql.STREAM_HEAD, {"stream": stream}).fetchone()[0]
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
            # After the read: a trim that took what the read missed is recorded by now.
            trimmed_through = _trimmed_through(connection, self.name)
        if offset < trimmed_through:
            raise StreamTrimmed(self.name, offset, trimmed_through)
        return stream_events(self.name, rows)

    def _get_offset(self, consumer: str) -> int:
        with translate(f"read offset of {consumer!r}"), self._store.connection() as connection:
            row = connection.execute(_sql.GET_OFFSET, (self.name, consumer)).fetchone()
        return 0 if row is None else int(row[0])

    def _save_offset(self, consumer: str, offset: int) -> bool:
        with translate(f"save offset of {consumer!r}"), self._store.connection() as connection:
            return raise_offset(connection, self.name, consumer, offset)

    def _trimmed_through(self) -> int:
        with translate(f"read how far {self.name!r} is trimmed"), self._store.connection() as c:
            return _trimmed_through(c, self.name)

    def _trim(self, rule: TrimRule) -> int:
        with translate(f"trim {self.name!r}"):
            with self._store.in_transaction() as connection:
                old = _trimmed_through(connection, self.name)
                cutoff = _cutoff(connection, self.name, rule, old)
                trimmed = connection.execute(
                    _sql.COUNT_TRIMMED, (self.name, old, cutoff)
                ).fetchone()[0]
                if trimmed:
                    connection.execute(_sql.RECORD_TRIM, (self.name, cutoff))
            # Also what a trim cut short (a crash between chunks) left behind.
            self._delete_through(cutoff)
        return int(trimmed)

    def _delete_through(self, cutoff: int) -> None:
        """Delete the rows a recorded trim took, a chunk per write transaction."""
        while True:
            with self._store.in_transaction() as connection:
                deleted = connection.execute(
                    _sql.DELETE_TRIMMED, (self.name, cutoff, _TRIM_CHUNK)
                ).rowcount
                if deleted < _TRIM_CHUNK:
                    connection.execute(_sql.EMPTY_TRIMMED_NEWEST, (self.name, cutoff))
                    return


def _retention_cutoff(
    connection: sqlite3.Connection, stream: str, rule: TrimRule, old: int, head: int
) -> int:
    """The retention limits' cutoff: the later of each limit's (see ``TrimRule``)."""
    cutoffs = []
    if rule.keep_last is not None:
        row = connection.execute(_sql.CUTOFF_KEEP_LAST, (stream, rule.keep_last)).fetchone()
        cutoffs.append(old if row is None else row[0])
    if rule.max_age_s is not None:
        young = (stream, old, time.time() - rule.max_age_s)
        row = connection.execute(_sql.FIRST_YOUNG_EVENT, young).fetchone()
        cutoffs.append(head if row is None else row[0] - 1)
    return max(cutoffs)


def _trimmed_through(connection: sqlite3.Connection, stream: str) -> int:
    row = connection.execute(_sql.TRIMMED_THROUGH, (stream,)).fetchone()
    return 0 if row is None else int(row[0])


def _cutoff(connection: sqlite3.Connection, stream: str, rule: TrimRule, old: int) -> int:
    """The last event ``rule`` trims (see ``TrimRule``); ``old`` or less: none."""
    cutoff: int = connection.execute(_sql.STREAM_HEAD, {"stream": stream}).fetchone()[0]
    if rule.up_to is not None:
        cutoff = min(cutoff, rule.up_to)
    if rule.keep_last is not None or rule.max_age_s is not None:
        cutoff = min(cutoff, _retention_cutoff(connection, stream, rule, old, cutoff))
    if rule.spare_consumers:
        (lowest,) = connection.execute(_sql.LOWEST_CONSUMER, (stream,)).fetchone()
        if lowest is not None:
            cutoff = min(cutoff, lowest)
    if cutoff <= old:
        return old
    last: int | None = connection.execute(_sql.LAST_EVENT_THROUGH, (stream, cutoff)).fetchone()[0]
    return old if last is None else max(old, last)
