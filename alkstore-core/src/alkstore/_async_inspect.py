"""Read-only listings for the async API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alkstore._inspect import (
    ConsumerStats,
    Inspector,
    LockInfo,
    QueueStats,
    StreamStats,
    check_jobs_query,
)
from alkstore._values import JobInfo, JobState, Schedule

if TYPE_CHECKING:
    from alkstore._async_store import AsyncStore

__all__ = ["AsyncInspector", "ConsumerStats"]


class AsyncInspector:
    """Read-only listings of a store's queues, jobs, streams, locks and schedules:
    :class:`~alkstore.Inspector` with ``await`` in front of each call.

    An engine may subclass it to list natively; the defaults run the sync
    inspector of the store's companion on the store's threads.
    """

    def __init__(self, store: AsyncStore) -> None:
        self._store = store

    async def queues(self) -> list[QueueStats]:
        """Every queue that holds at least one row, in any state."""
        self._store._check_open()
        return await self._queues()

    async def jobs(
        self,
        queue: str,
        state: JobState | None = None,
        *,
        limit: int = 100,
        after: int | None = None,
    ) -> list[JobInfo]:
        """The first ``limit`` jobs of ``queue`` by id, in ``state`` or in any state;
        with ``after``, only those whose id is greater (the next page)."""
        self._store._check_open()
        queue, state, limit, after = check_jobs_query(queue, state, limit, after)
        if after is None:
            return await self._jobs(queue, state, limit)
        return await self._jobs_after(queue, state, limit, after)

    async def streams(self) -> list[StreamStats]:
        """Every stream with an event or a saved consumer offset."""
        self._store._check_open()
        return await self._streams()

    async def locks(self) -> list[LockInfo]:
        """Every lock held now; expired holds are left out."""
        self._store._check_open()
        return await self._locks()

    async def schedules(self) -> list[Schedule]:
        """Every schedule, with the next boundary a runner will fire."""
        self._store._check_open()
        return await self._schedules()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._store!r}>"

    # Engine hooks; the defaults run the companion's inspector.

    async def _twin(self) -> Inspector:
        return (await self._store._companion())._inspect()

    async def _queues(self) -> list[QueueStats]:
        return await self._store._offloaded((await self._twin())._queues)

    async def _jobs(self, queue: str, state: JobState | None, limit: int) -> list[JobInfo]:
        return await self._store._offloaded((await self._twin())._jobs, queue, state, limit)

    async def _jobs_after(
        self, queue: str, state: JobState | None, limit: int, after: int
    ) -> list[JobInfo]:
        twin = await self._twin()
        return await self._store._offloaded(twin._jobs_after, queue, state, limit, after)

    async def _streams(self) -> list[StreamStats]:
        return await self._store._offloaded((await self._twin())._streams)

    async def _locks(self) -> list[LockInfo]:
        return await self._store._offloaded((await self._twin())._locks)

    async def _schedules(self) -> list[Schedule]:
        return await self._store._offloaded((await self._twin())._schedules)
