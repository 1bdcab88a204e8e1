"""Publishes inside a transaction after its first to a stream, held and sent together.

A transaction's first publish to a stream takes its offset from the
stream's head row and keeps that row locked until the transaction ends
(``_stream``). From then on no one else can take an offset of that stream,
so the transaction's next offsets are known without asking: ``publish_tx``
returns at once and the event waits here. The waiting events go out as one
statement per stream (the rows as binary column arrays, the head moved to
the last offset), pipelined before anything else runs on the connection and
always before commit. Their wake was sent with the first publish.

What the caller runs through ``tx.execute`` (a ``ROLLBACK TO SAVEPOINT``
could undo a head move) makes the transaction forget the heads it knew: its
next publish to each stream reads it again. Once the caller has taken
``tx.connection`` nothing is held any more (``TxPlans.flush``): it may run
statements there that the transaction never sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alkstore_postgres._names import stored
from alkstore_postgres._plan import Statement

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements

__all__ = ["EventBuffer"]


@dataclass
class _Held:
    """One stream's head, locked by the transaction, and the events held for it."""

    next_offset: int
    offsets: list[int] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)


class EventBuffer:
    """The publishes of one transaction not yet sent to the server."""

    def __init__(self, sql: Statements) -> None:
        self._sql = sql
        self._streams: dict[str, _Held] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"<EventBuffer {self._count} events for {sorted(self._streams)}>"

    def locked(self, stream: str, offset: int) -> None:
        """Note that the transaction's publish at ``offset`` locked ``stream``'s head."""
        self._streams[stream] = _Held(next_offset=offset + 1)

    def publish(self, stream: str, key: str | None, payload_json: str) -> int | None:
        """Hold an event for a stream whose head the transaction has locked; its offset.

        None when the head is not known: the caller publishes through the server.
        """
        held = self._streams.get(stream)
        if held is None:
            return None
        offset = held.next_offset
        held.next_offset += 1
        held.offsets.append(offset)
        held.keys.append(None if key is None else stored(key))
        held.payloads.append(payload_json)
        self._count += 1
        return offset

    def take_statements(self) -> list[Statement]:
        """The statements that send the held events, one per stream (to
        pipeline); nothing is held afterwards."""
        if not self._count:
            return []
        statement = self._sql.publish_held
        statements = []
        for stream, held in self._streams.items():
            if not held.offsets:
                continue
            params: dict[str, Any] = {
                "stream": stored(stream), "head": held.offsets[-1], "offset": held.offsets,
                "key": held.keys, "payload": held.payloads,
            }  # fmt: skip
            statements.append(Statement(statement, params))
            held.offsets, held.keys, held.payloads = [], [], []
        self._count = 0
        return statements

    def forget_heads(self) -> None:
        """Stop assuming any head is known (the caller ran its own statements)."""
        assert not self._count, "send the held events first"
        self._streams.clear()

    def discard(self) -> None:
        """Forget everything held (the transaction rolled back)."""
        self._streams.clear()
        self._count = 0
