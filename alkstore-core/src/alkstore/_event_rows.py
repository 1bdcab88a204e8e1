"""Stream events built from the rows of a read, at the speed a replay needs.

A frozen dataclass's generated ``__init__`` sets each field through
``object.__setattr__``, by keyword: on a replay that was more than the
payload's decoding. :func:`stream_events` fills the slots directly instead;
what it returns is the same :class:`~alkstore.StreamEvent`, equal, hashable
and frozen like one built by its constructor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from alkstore._codec import decode
from alkstore._values import StreamEvent

__all__ = ["EventRow", "stream_events"]

EventRow = tuple[int, Any, "str | bytes", float]
"""A stored event as an engine reads it: offset, key (as stored), payload JSON, created_at."""

Setter = Callable[[StreamEvent, Any], None]


def _slot(name: str) -> Setter:
    setter: Setter = getattr(StreamEvent, name).__set__
    return setter


_new = object.__new__
_offset, _stream, _key, _payload, _created_at = map(
    _slot, ("offset", "stream", "key", "payload", "created_at")
)


def stream_events(
    stream: str, rows: Iterable[EventRow], stored_key: Callable[[Any], str] | None = None
) -> list[StreamEvent]:
    """The events of ``rows``, read from ``stream``, their payloads decoded.

    ``stored_key`` turns a stored key back into the one published (a key of
    None stays None); without it keys are taken as stored.

    Raises:
        Codec: a stored payload is not valid JSON.
    """
    events: list[StreamEvent] = []
    append = events.append
    for offset, key, payload, created_at in rows:
        event = _new(StreamEvent)
        _offset(event, offset)
        _stream(event, stream)
        _key(event, key if key is None or stored_key is None else stored_key(key))
        _payload(event, decode(payload))
        _created_at(event, created_at)
        append(event)
    return events
