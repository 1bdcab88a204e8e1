"""Streams in the async API: publishing, reading and offsets are awaited."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alkstore._codec import encode
from alkstore._names import check_identifier, stream_wake_key
from alkstore._receivers import WakeReceiver
from alkstore._stream import (
    _READ_AHEAD,
    Replay,
    TrimRule,
    check_key,
    check_limit,
    check_offset,
    retention_rule,
    trim_rule,
)
from alkstore._values import StreamEvent

if TYPE_CHECKING:
    from alkstore._async_store import AsyncStore
    from alkstore._stream import Stream

__all__ = ["AsyncEventReceiver", "AsyncStream"]


class AsyncStream:
    """A durable event log of an :class:`~alkstore.AsyncStore`: :class:`~alkstore.Stream`
    with ``await`` in front of each call. A cheap view: ``store.stream(name)``.

    An engine subclasses it to do the hooks natively; the defaults run the
    sync hooks of the store's companion on the store's threads.
    """

    def __init__(self, store: AsyncStore, name: str) -> None:
        self._store = store
        self.name = name
        """The stream's name."""
        self._twin_stream: Stream | None = None

    async def publish(self, payload: object) -> int:
        """Append ``payload`` and commit; return its offset.

        Raises:
            Codec: ``payload`` is not a JSON value (nothing is written).
        """
        self._store._check_open()
        return await self._publish(None, encode(payload))

    async def publish_with_key(self, key: str, payload: object) -> int:
        """Append ``payload`` tagged with ``key`` and commit; return its offset."""
        self._store._check_open()
        return await self._publish(check_key(key), encode(payload))

    async def read_since(self, offset: int, limit: int = 1000) -> list[StreamEvent]:
        """Return committed events with offsets greater than ``offset``, ascending.

        Raises:
            StreamTrimmed: events after ``offset`` were trimmed.
        """
        self._store._check_open()
        return await self._read_since(check_offset(offset), check_limit(limit))

    async def read_from_consumer(self, consumer: str, limit: int = 1000) -> list[StreamEvent]:
        """Return events after ``consumer``'s saved offset, ascending.

        Raises:
            StreamTrimmed: events after the saved offset were trimmed.
        """
        offset = await self.get_offset(consumer)
        return await self._read_since(offset, check_limit(limit))

    async def trim(self, up_to: int) -> int:
        """Delete the events with offsets up to ``up_to`` (at most the head); return
        how many went (see :meth:`Stream.trim <alkstore.Stream.trim>`)."""
        self._store._check_open()
        return await self._trim(trim_rule(up_to))

    async def retain(
        self, *, max_age_s: float | None = None, keep_last: int | None = None, force: bool = False
    ) -> int:
        """Trim by age and/or count, sparing consumers unless ``force``; return how
        many went (see :meth:`Stream.retain <alkstore.Stream.retain>`)."""
        self._store._check_open()
        return await self._trim(retention_rule(max_age_s, keep_last, force))

    async def trimmed_through(self) -> int:
        """The offset the stream is trimmed through (0 if it never was)."""
        self._store._check_open()
        return await self._trimmed_through()

    async def get_offset(self, consumer: str) -> int:
        """Return ``consumer``'s saved offset; 0 when it never saved one."""
        self._store._check_open()
        return await self._get_offset(check_identifier(consumer, "consumer name"))

    async def save_offset(self, consumer: str, offset: int) -> bool:
        """Save ``offset`` for ``consumer`` if ahead of the saved one; True if it advanced.

        Raises:
            ValueError: ``offset`` is past the stream's head.
        """
        self._store._check_open()
        consumer = check_identifier(consumer, "consumer name")
        offset = check_offset(offset)
        return False if offset == 0 else await self._save_offset(consumer, offset)

    async def subscribe(self, consumer: str) -> AsyncEventReceiver:
        """Replay events after ``consumer``'s saved offset, then wait for new ones."""
        self._store._check_open()
        consumer = check_identifier(consumer, "consumer name")
        # Listening before the first read: no event slips between.
        wakes = await self._store._watch(stream_wake_key(self.name))
        try:
            start = await self._get_offset(consumer)
        except BaseException:
            wakes.close()
            raise
        return AsyncEventReceiver(self, consumer, wakes, start)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # Engine hooks: arguments are already checked and encoded. The defaults
    # run the companion's sync hooks on the store's threads.

    async def _twin(self) -> Stream:
        """This stream in the store's sync companion."""
        if self._twin_stream is None:
            companion = await self._store._companion()
            self._twin_stream = companion._stream(self.name)
        return self._twin_stream

    async def _publish(self, key: str | None, payload_json: str) -> int:
        """Append one event in its own transaction; return its offset."""
        return await self._store._offloaded((await self._twin())._publish, key, payload_json)

    async def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        return await self._store._offloaded((await self._twin())._read_since, offset, limit)

    async def _get_offset(self, consumer: str) -> int:
        return await self._store._offloaded((await self._twin())._get_offset, consumer)

    async def _save_offset(self, consumer: str, offset: int) -> bool:
        """Raise the offset if higher; raise ``offset_past_head(...)`` past the head."""
        return await self._store._offloaded((await self._twin())._save_offset, consumer, offset)

    async def _trim(self, rule: TrimRule) -> int:
        return await self._store._offloaded((await self._twin())._trim, rule)

    async def _trimmed_through(self) -> int:
        return await self._store._offloaded((await self._twin())._trimmed_through)


class AsyncEventReceiver(Replay):
    """Durable consumption of one stream by one consumer, for asyncio code.

    ``await recv_async(timeout)`` or ``async for event in receiver``; offsets
    are saved only by ``await save_offset()``. The sync ``recv`` is refused:
    it would block the event loop on reads.
    """

    def __init__(
        self, stream: AsyncStream, consumer: str, wakes: WakeReceiver, start_offset: int
    ) -> None:
        super().__init__(consumer, wakes, start_offset)
        self.stream = stream
        """The stream this receiver reads."""

    def recv(self, timeout: float | None = None) -> StreamEvent | None:
        """Refused: use ``await recv_async(timeout)`` or ``async for``."""
        raise TypeError(
            "an AsyncEventReceiver reads through the async API: "
            "use 'await receiver.recv_async(timeout)' or 'async for event in receiver'"
        )

    async def _read_async(self, after: int) -> list[StreamEvent]:
        return await self.stream._read_since(after, _READ_AHEAD)

    async def save_offset(self, offset: int | None = None) -> bool:
        """Save ``offset`` (default: the last delivered event's); True if it advanced."""
        to_save = self._offset_to_save(offset)
        return False if to_save is None else await self.stream.save_offset(self.consumer, to_save)

    def __repr__(self) -> str:
        return self._describe(self.stream.name)
