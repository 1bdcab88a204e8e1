"""Streams on PostgreSQL, commit-ordered.

A publish increments the stream's head row and takes its offset from it. The
row stays locked until the publishing transaction ends, so a second publisher
to the same stream waits and takes the next offset only after the first has
committed (or reuses it after a rollback): offsets become visible in order,
and a reader that has seen offset N never later finds a new event at or
below N. The price: publishers to one stream serialise on their commits.

A trim records how far it goes on the head row (``trimmed_through``) in a
short transaction, then deletes the rows in chunks, each committed on its
own. A read returns only events after an offset the record has not passed;
when it returns none it reads the record, so it raises ``StreamTrimmed``
whether or not the rows it would miss are gone yet. The head row stays
locked only while the record is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alkstore import StreamEvent, StreamTrimmed
from alkstore.engine import (
    Stream,
    TrimRule,
    offset_past_head,
    stream_events,
    stream_wake_key,
)
from alkstore_postgres._names import stored, unstored, wake_params
from alkstore_postgres._plan import Fetch, Operation, Plan, Statement

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresStream", "StreamPlans", "insert_event", "raise_offset"]

_TRIM_CHUNK = 10_000
"""Rows one trimming statement deletes (each commits on its own)."""


def insert_event(sql: Statements, stream: str, key: str | None, payload_json: str) -> Plan[int]:
    """Append an event; its offset."""
    params = {
        "stream": stored(stream),
        "key": None if key is None else stored(key),
        "payload": payload_json,
        **wake_params(sql.schema, stream_wake_key(stream), "channel", "wake"),
    }
    row = yield Statement(sql.publish, params, Fetch.ONE)
    assert row is not None
    return int(row[0])


def raise_offset(sql: Statements, stream: str, consumer: str, offset: int) -> Plan[bool]:
    """Move the consumer's offset up to ``offset``; True if it moved.

    Raises:
        ValueError: ``offset`` is past the stream's head, as the transaction sees it.
    """
    params = {"stream": stored(stream), "consumer": stored(consumer), "offset": offset}
    if (yield Statement(sql.save_offset, params, Fetch.ROWCOUNT)) == 1:
        return True
    row = yield Statement(sql.stream_head, params, Fetch.ONE)
    head = 0 if row is None else int(row[0])
    if offset > head:
        raise offset_past_head(stream, offset, head)
    return False


class StreamPlans:
    """The operations of one stream, as plans (see ``_plan``), for the sync and
    the async stream."""

    def __init__(self, sql: Statements, name: str) -> None:
        self._sql = sql
        self._name = name

    def publish(self, key: str | None, payload_json: str) -> Plan[int]:
        yield Operation(f"publish to {self._name!r}")
        return (yield from insert_event(self._sql, self._name, key, payload_json))

    def read_since(self, offset: int, limit: int) -> Plan[list[StreamEvent]]:
        yield Operation(f"read {self._name!r}")
        params = {"stream": stored(self._name), "offset": offset, "limit": limit}
        rows = yield Statement(self._sql.read_since, params, Fetch.ALL, binary=True)
        if not rows:  # none after offset, or offset is behind a trim: the record says
            (trimmed_through,) = yield Statement(self._sql.trimmed_through, params, Fetch.ONE)
            if offset < trimmed_through:
                raise StreamTrimmed(self._name, offset, trimmed_through)
        return stream_events(self._name, rows, unstored)

    def trimmed_through(self) -> Plan[int]:
        yield Operation(f"read how far {self._name!r} is trimmed")
        row = yield Statement(self._sql.trimmed_through, {"stream": stored(self._name)}, Fetch.ONE)
        assert row is not None
        return int(row[0])

    def record_trim(self, rule: TrimRule) -> Plan[tuple[int, int]]:
        """Record how far ``rule`` trims; ``(cutoff, trimmed)``, trimmed 0 when it
        takes nothing. The rows go with :meth:`delete_trimmed`."""
        yield Operation(f"trim {self._name!r}", transaction=True)
        params: dict[str, object] = {"stream": stored(self._name)}
        bounds = yield Statement(self._sql.trim_bounds, params, Fetch.ONE)
        if bounds is None:
            return 0, 0  # never published to
        head, old = bounds
        cutoff = head if rule.up_to is None else min(head, rule.up_to)
        retention = []  # each limit's cutoff: an event goes when either says so
        if rule.keep_last is not None:
            retention.append(head - rule.keep_last)
        if rule.max_age_s is not None:
            young = yield Statement(
                self._sql.first_young_event, {**params, "old": old, "age": rule.max_age_s},
                Fetch.ONE,
            )  # fmt: skip
            retention.append(head if young is None else young[0] - 1)
        if retention:
            cutoff = min(cutoff, max(retention))
        (old,) = yield Statement(self._sql.lock_trim, params, Fetch.ONE)
        if rule.spare_consumers:
            (lowest,) = yield Statement(self._sql.lowest_consumer, params, Fetch.ONE)
            if lowest is not None:
                cutoff = min(cutoff, lowest)
        if cutoff <= old:
            return old, 0
        yield Statement(self._sql.record_trim, {**params, "cutoff": cutoff})
        return cutoff, cutoff - old

    def delete_trimmed(self, cutoff: int) -> Plan[None]:
        """Delete the rows of a recorded trim through ``cutoff``, a chunk per commit,
        until none is left: a chunk short of full does not mean the end, as
        another trim may have deleted rows this one had picked meanwhile."""
        yield Operation(f"delete trimmed events of {self._name!r}")
        params = {"stream": stored(self._name), "cutoff": cutoff, "chunk": _TRIM_CHUNK}
        while (yield Statement(self._sql.delete_trimmed, params, Fetch.ROWCOUNT)) > 0:
            pass

    def get_offset(self, consumer: str) -> Plan[int]:
        yield Operation(f"read offset of {consumer!r}")
        params = {"stream": stored(self._name), "consumer": stored(consumer)}
        row = yield Statement(self._sql.get_offset, params, Fetch.ONE)
        return 0 if row is None else int(row[0])

    def save_offset(self, consumer: str, offset: int) -> Plan[bool]:
        yield Operation(f"save offset of {consumer!r}")
        return (yield from raise_offset(self._sql, self._name, consumer, offset))


class PostgresStream(Stream):
    """A stream in the store's schema."""

    _store: PostgresStore

    def __init__(self, store: PostgresStore, name: str) -> None:
        super().__init__(store, name)
        self._plans = StreamPlans(store.sql, name)

    def _publish(self, key: str | None, payload_json: str) -> int:
        return self._store.run(self._plans.publish(key, payload_json))

    def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        return self._store.run(self._plans.read_since(offset, limit))

    def _get_offset(self, consumer: str) -> int:
        return self._store.run(self._plans.get_offset(consumer))

    def _save_offset(self, consumer: str, offset: int) -> bool:
        return self._store.run(self._plans.save_offset(consumer, offset))

    def _trimmed_through(self) -> int:
        return self._store.run(self._plans.trimmed_through())

    def _trim(self, rule: TrimRule) -> int:
        cutoff, trimmed = self._store.run(self._plans.record_trim(rule))
        self._store.run(self._plans.delete_trimmed(cutoff))
        return trimmed
