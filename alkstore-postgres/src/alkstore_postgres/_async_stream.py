"""Streams of the async store: the sync stream's plans (``_stream.StreamPlans``), awaited."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alkstore import StreamEvent
from alkstore.engine import AsyncStream, TrimRule
from alkstore_postgres._stream import StreamPlans

if TYPE_CHECKING:
    from alkstore_postgres._async_store import PostgresAsyncStore

__all__ = ["PostgresAsyncStream"]


class PostgresAsyncStream(AsyncStream):
    """A stream in the store's schema, every hook native."""

    _store: PostgresAsyncStore

    def __init__(self, store: PostgresAsyncStore, name: str) -> None:
        super().__init__(store, name)
        self._plans = StreamPlans(store.sql, name)

    async def _publish(self, key: str | None, payload_json: str) -> int:
        return await self._store.run(self._plans.publish(key, payload_json))

    async def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        return await self._store.run(self._plans.read_since(offset, limit))

    async def _get_offset(self, consumer: str) -> int:
        return await self._store.run(self._plans.get_offset(consumer))

    async def _save_offset(self, consumer: str, offset: int) -> bool:
        return await self._store.run(self._plans.save_offset(consumer, offset))

    async def _trimmed_through(self) -> int:
        return await self._store.run(self._plans.trimmed_through())

    async def _trim(self, rule: TrimRule) -> int:
        cutoff, trimmed = await self._store.run(self._plans.record_trim(rule))
        await self._store.run(self._plans.delete_trimmed(cutoff))
        return trimmed
