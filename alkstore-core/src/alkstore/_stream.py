"""Streams: durable, commit-ordered event logs with explicit consumer offsets."""

from __future__ import annotations

import abc
import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from alkstore._call_deadline import deadline_at
from alkstore._codec import encode
from alkstore._errors import InvalidName
from alkstore._names import check_identifier, stream_wake_key
from alkstore._options import check_duration, check_flag, check_int
from alkstore._receivers import Receiver, WakeReceiver, check_timeout
from alkstore._values import StreamEvent

if TYPE_CHECKING:
    from alkstore._store import Store

__all__ = [
    "MAX_READ", "EventReceiver", "Replay", "Stream", "TrimRule", "check_limit", "follow",
    "offset_past_head", "retention_rule", "trim_rule",
]  # fmt: skip

MAX_READ = 10_000
"""The largest ``limit`` a single read accepts."""

_READ_AHEAD = 1000
"""Events a receiver reads in one go when its buffer runs dry."""

MAX_OFFSET = 2**63 - 1
"""Offsets are 64-bit signed integers in every engine."""


@dataclass(frozen=True, slots=True)
class TrimRule:
    """Which events a trim deletes: a prefix of the stream, through a *cutoff*.

    The retention limits each bound what the stream keeps — no event older
    than ``max_age_s`` (by the engine's clock), no more than the newest
    ``keep_last`` — so an event goes when either says so: their cutoff is the
    later of the offset before the first event young enough (with none, the
    head) and the offset before the newest ``keep_last``. The cutoff is then
    held to ``up_to``, to the head, and, with ``spare_consumers``, to the
    lowest saved consumer offset. None is no limit.

    The engine records the cutoff as the stream's ``trimmed_through`` (which
    only rises; engines whose offsets have gaps record the last event taken)
    and deletes every event at or below it; it returns how many events the
    trim took from readers.
    """

    up_to: int | None = None
    """Trim no further than this offset; None is no limit."""
    max_age_s: float | None = None
    """Keep no event older than this many seconds; None is no limit."""
    keep_last: int | None = None
    """Keep no more than the newest this many events; None is no limit."""
    spare_consumers: bool = False
    """Trim no further than the lowest saved consumer offset."""


def trim_rule(up_to: object) -> TrimRule:
    """``Stream.trim``'s argument, checked, as a rule."""
    return TrimRule(up_to=check_offset(up_to))


def retention_rule(max_age_s: object, keep_last: object, force: object) -> TrimRule:
    """``Stream.retain``'s arguments, checked, as a rule."""
    if max_age_s is None and keep_last is None:
        raise ValueError("retain needs max_age_s, keep_last or both")
    return TrimRule(
        max_age_s=None
        if max_age_s is None
        else check_duration(max_age_s, "max_age_s", zero_ok=True),
        keep_last=None
        if keep_last is None
        else check_int(keep_last, "keep_last", minimum=0, maximum=MAX_OFFSET),
        spare_consumers=not check_flag(force, "force"),
    )


class Stream(abc.ABC):
    """A durable event log. A cheap view: get one with ``store.stream(name)``.

    Offsets are positive, strictly increasing and commit-ordered: a reader
    that has seen offset N never later finds a newly committed event at an
    offset <= N. Every committed event stays readable by every consumer whose
    saved offset has not passed it, until it is trimmed (``trim``,
    ``retain``); a read that reaches back into trimmed events raises
    :class:`~alkstore.StreamTrimmed` rather than skip them. Offsets are never
    reused, trimmed or not. Consumer offsets only move forward and are saved
    only when asked (``save_offset``), never automatically.
    """

    def __init__(self, store: Store, name: str) -> None:
        self._store = store
        self.name = name
        """The stream's name."""

    def publish(self, payload: object) -> int:
        """Append ``payload`` and commit; return its offset.

        Raises:
            Codec: ``payload`` is not a JSON value (nothing is written).
        """
        self._store._check_open()
        return self._publish(None, encode(payload))

    def publish_with_key(self, key: str, payload: object) -> int:
        """Append ``payload`` tagged with ``key`` and commit; return its offset."""
        self._store._check_open()
        return self._publish(check_key(key), encode(payload))

    def read_since(self, offset: int, limit: int = 1000) -> list[StreamEvent]:
        """Return committed events with offsets greater than ``offset``, ascending.

        Raises:
            StreamTrimmed: events after ``offset`` were trimmed (``offset`` is
                below the stream's ``trimmed_through``).
        """
        self._store._check_open()
        return self._read_since(check_offset(offset), check_limit(limit))

    def read_from_consumer(self, consumer: str, limit: int = 1000) -> list[StreamEvent]:
        """Return events after ``consumer``'s saved offset, ascending.

        Raises:
            StreamTrimmed: events after the saved offset were trimmed.
        """
        offset = self.get_offset(consumer)
        return self._read_since(offset, check_limit(limit))

    def trim(self, up_to: int) -> int:
        """Delete the events with offsets up to ``up_to`` (at most the head); return
        how many went.

        Unconditional: consumers whose saved offset is below ``up_to`` will get
        :class:`~alkstore.StreamTrimmed` on their next read (``retain`` spares
        them). The head stays, so no offset is ever handed out again.
        """
        self._store._check_open()
        return self._trim(trim_rule(up_to))

    def retain(
        self, *, max_age_s: float | None = None, keep_last: int | None = None, force: bool = False
    ) -> int:
        """Trim the events older than ``max_age_s`` and those before the newest
        ``keep_last`` (an event goes when either limit says so); return how many went.

        Never past the lowest saved consumer offset unless ``force``: a
        consumer that falls behind keeps its events until it reads them.

        Raises:
            ValueError: neither limit given, or one is negative.
        """
        self._store._check_open()
        return self._trim(retention_rule(max_age_s, keep_last, force))

    def trimmed_through(self) -> int:
        """The offset the stream is trimmed through (0 if it never was): every event
        up to it is gone, every later one is readable."""
        self._store._check_open()
        return self._trimmed_through()

    def get_offset(self, consumer: str) -> int:
        """Return ``consumer``'s saved offset; 0 when it never saved one."""
        self._store._check_open()
        return self._get_offset(check_identifier(consumer, "consumer name"))

    def save_offset(self, consumer: str, offset: int) -> bool:
        """Save ``offset`` for ``consumer`` if it is ahead of the saved one.

        Returns True if the offset advanced; False (and nothing changes) if it
        would move back or stay put.

        Raises:
            ValueError: ``offset`` is past the stream's head (the last offset
                published): saving it would skip every event published until
                the head reached it.
        """
        self._store._check_open()
        consumer = check_identifier(consumer, "consumer name")
        offset = check_offset(offset)
        return False if offset == 0 else self._save_offset(consumer, offset)

    def subscribe(self, consumer: str) -> EventReceiver:
        """Replay events after ``consumer``'s saved offset, then wait for new ones."""
        self._store._check_open()
        consumer = check_identifier(consumer, "consumer name")
        # Listening before the first read: no event slips between.
        wakes = self._store._watch(stream_wake_key(self.name))
        try:
            start = self._get_offset(consumer)
        except BaseException:
            wakes.close()
            raise
        return EventReceiver(self, consumer, wakes, start)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # Engine hooks: arguments are already checked and encoded.

    def _publish(self, key: str | None, payload_json: str) -> int:
        """Append one event in its own transaction; return its offset.

        By default, through a transaction of the engine's own (``_begin_tx`` and
        ``_publish_tx``); an engine overrides it when one statement does it faster.
        """
        with self._store.begin_tx() as tx:
            return tx._publish_tx(self.name, key, payload_json)

    @abc.abstractmethod
    def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        """Return up to ``limit`` committed events after ``offset``, ascending."""

    @abc.abstractmethod
    def _get_offset(self, consumer: str) -> int:
        """Return the consumer's saved offset, 0 if none."""

    def _save_offset(self, consumer: str, offset: int) -> bool:
        """Raise the consumer's offset to ``offset`` (positive) if higher; True if it moved.

        Raises ``offset_past_head(...)`` for an offset past the stream's head. By
        default, through a transaction of the engine's own (``_save_offset_tx``).
        """
        with self._store.begin_tx() as tx:
            return tx._save_offset_tx(self.name, consumer, offset)

    # Extensions of contract 1.5: defaults refuse, naming the contract. An engine
    # that trims also raises ``StreamTrimmed`` from ``_read_since`` for a read
    # after an offset below ``trimmed_through``, in the same snapshot as the read.

    def _trim(self, rule: TrimRule) -> int:
        """Delete the events ``rule`` selects (see :class:`TrimRule`) in one
        transaction; return how many went."""
        raise not_in_engine(self, "trim")

    def _trimmed_through(self) -> int:
        """The stream's ``trimmed_through`` (0 if never trimmed)."""
        raise not_in_engine(self, "trim")


class Replay(Receiver[StreamEvent]):
    """What every stream receiver keeps: its position, the events read ahead,
    the last one delivered, and the wake receiver it waits on."""

    def __init__(self, consumer: str, wakes: WakeReceiver, start_offset: int) -> None:
        self.consumer = consumer
        self._wakes = wakes
        self._position = start_offset
        self._buffer: deque[StreamEvent] = deque()
        self.last_delivered: int | None = None
        """Offset of the last event ``recv`` returned; None before the first."""

    @property
    def closed(self) -> bool:
        """True once the receiver will deliver nothing more."""
        return self._wakes.closed

    def close(self) -> None:
        """Stop receiving; idempotent."""
        self._wakes.close()

    async def recv_async(self, timeout: float | None = None) -> StreamEvent | None:
        """The next event, awaited; None when ``timeout`` passes or the receiver closes."""
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._wakes.closed:
                return None
            with deadline_at(deadline):
                read = await self._read_async(self._position)
            if self._absorb(read):
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            await self._wakes.recv_async(remaining)
        return self._deliver()

    @abc.abstractmethod
    async def _read_async(self, after: int) -> list[StreamEvent]:
        """Up to ``_READ_AHEAD`` committed events after offset ``after``."""

    def _absorb(self, events: list[StreamEvent]) -> bool:
        self._buffer.extend(events)
        if events:
            self._position = events[-1].offset
        return bool(events)

    def _deliver(self) -> StreamEvent:
        event = self._buffer.popleft()
        self.last_delivered = event.offset
        return event

    def _offset_to_save(self, offset: int | None) -> int | None:
        """``offset``, or the last delivered one when None (None if nothing was)."""
        return self.last_delivered if offset is None else offset

    def _describe(self, stream: str) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"<{type(self).__name__} stream={stream!r} consumer={self.consumer!r} "
            f"last_delivered={self.last_delivered} {state}>"
        )


class EventReceiver(Replay):
    """Durable consumption of one stream by one consumer.

    Replays from the consumer's saved offset, then waits for new events.
    Offsets are saved only by :meth:`save_offset`. Use one receiver from one
    thread at a time.
    """

    def __init__(
        self, stream: Stream, consumer: str, wakes: WakeReceiver, start_offset: int
    ) -> None:
        super().__init__(consumer, wakes, start_offset)
        self.stream = stream
        """The stream this receiver reads."""

    def recv(self, timeout: float | None = None) -> StreamEvent | None:
        """Return the next event; None when ``timeout`` passes or the receiver closes.

        Raises:
            Database: a read failed; during an outage, near ``timeout``.
        """
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._wakes.closed:
                return None
            with deadline_at(deadline):
                read = self.stream.read_since(self._position, _READ_AHEAD)
            if self._absorb(read):
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            self._wakes.recv(remaining)
        return self._deliver()

    async def _read_async(self, after: int) -> list[StreamEvent]:
        # The sync stream's read, on a thread: the loop never blocks on it.
        return await asyncio.to_thread(self.stream.read_since, after, _READ_AHEAD)

    def save_offset(self, offset: int | None = None) -> bool:
        """Save ``offset`` (default: the last delivered event's) for this consumer.

        Returns True if the saved offset advanced. With nothing delivered yet
        and no ``offset`` given, saves nothing and returns False.
        """
        to_save = self._offset_to_save(offset)
        return False if to_save is None else self.stream.save_offset(self.consumer, to_save)

    def __repr__(self) -> str:
        return self._describe(self.stream.name)


def follow(stream: Stream, after: int, label: str) -> EventReceiver:
    """Events of ``stream`` after offset ``after``, then new ones as they commit,
    for no consumer (``label`` names the reader): what ``alkstore tail`` prints."""
    stream._store._check_open()
    return EventReceiver(stream, label, stream._store._watch(stream_wake_key(stream.name)), after)


def check_key(key: object) -> str:
    """Return ``key`` if it is a ``str`` of valid Unicode text (it may be empty).

    Raises:
        InvalidName: like any name, for a non-``str`` or lone surrogates.
    """
    if not isinstance(key, str):
        raise InvalidName(f"key must be a str, not {type(key).__name__}")
    if key and not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidName(
                f"key {key!r} is not valid Unicode text (it holds lone surrogates)"
            ) from None
    return key


def check_offset(offset: object) -> int:
    """Return ``offset`` if it is an int in ``[0, 2**63 - 1]``."""
    return check_int(offset, "offset", minimum=0, maximum=MAX_OFFSET)


def not_in_engine(stream: object, operation: str) -> NotImplementedError:
    return NotImplementedError(
        f"{stream!r}: its engine does not implement {operation} (engine contract 1.5); "
        "upgrade the engine"
    )


def offset_past_head(stream: str, offset: int, head: int) -> ValueError:
    """The error engines raise for a consumer offset beyond the stream's head."""
    return ValueError(
        f"offset {offset} is past the head of stream {stream!r} (offset {head}): "
        "saving it would skip every event published until the head reached it"
    )


def check_limit(limit: object) -> int:
    """Return ``limit`` if it is an int in ``[1, MAX_READ]``."""
    return check_int(limit, "limit", minimum=1, maximum=MAX_READ)
