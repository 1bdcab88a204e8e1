"""The dashboard's only way into the store: the public API, sync or async.

A sync :class:`~alkstore.Store` is called on Starlette's thread pool, so a
slow read never blocks the event loop; an :class:`~alkstore.AsyncStore` is
awaited directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

from starlette.concurrency import run_in_threadpool

from alkstore import (
    AsyncStore,
    JobInfo,
    JobState,
    LockInfo,
    QueueStats,
    Schedule,
    Store,
    StreamStats,
    WakeReceiver,
)
from alkstore._call_deadline import deadline_in
from alkstore._discovery import redact
from alkstore._names import OUTBOX_QUEUE_PREFIX

__all__ = ["OUTAGE_WAIT_S", "Source"]

OUTAGE_WAIT_S = 2.0
"""How long a page's read waits for a connection the engine cannot make (an
outage) before the page shows the failure, rather than the engine's whole
connect timeout; a store that is only busy is waited for as ever."""


class Source:
    """Reads and operator actions of one store, each awaited."""

    def __init__(self, store: Store | AsyncStore) -> None:
        if not isinstance(store, (Store, AsyncStore)):
            raise TypeError(f"store must be an alkstore Store or AsyncStore, not {store!r}")
        self._store = store
        self.target = redact(str(store.location))
        """Where the store is, its password hidden: safe to show."""
        self.engine = type(store).__name__

    async def _do(self, action: Callable[[Any], Any]) -> Any:
        if isinstance(self._store, AsyncStore):
            with deadline_in(OUTAGE_WAIT_S):
                result = action(self._store)
                return await result if inspect.isawaitable(result) else result
        return await run_in_threadpool(_within_outage_wait, action, self._store)

    async def queues(self) -> list[QueueStats]:
        return cast("list[QueueStats]", await self._do(lambda s: s.inspect().queues()))

    async def streams(self) -> list[StreamStats]:
        return cast("list[StreamStats]", await self._do(lambda s: s.inspect().streams()))

    async def locks(self) -> list[LockInfo]:
        return cast("list[LockInfo]", await self._do(lambda s: s.inspect().locks()))

    async def schedules(self) -> list[Schedule]:
        return cast("list[Schedule]", await self._do(lambda s: s.inspect().schedules()))

    async def watch(self, key: str) -> WakeReceiver:
        """A receiver of the wakes under ``key`` (``queue_wake_key`` and the like)."""
        if isinstance(self._store, AsyncStore):
            return await self._store._watch(key)
        return await run_in_threadpool(self._store._watch, key)

    async def jobs(
        self, queue: str, state: JobState | None, limit: int, after: int | None
    ) -> list[JobInfo]:
        return cast(
            "list[JobInfo]",
            await self._do(lambda s: s.inspect().jobs(queue, state, limit=limit, after=after)),
        )

    async def get_job(self, queue: str, job_id: int) -> JobInfo | None:
        return cast("JobInfo | None", await self._do(lambda s: _queue(s, queue).get_job(job_id)))

    async def requeue_dead(self, queue: str, job_ids: list[int] | None) -> int:
        return cast("int", await self._do(lambda s: _queue(s, queue).requeue_dead(job_ids)))

    async def cancel(self, queue: str, job_id: int) -> bool:
        return cast("bool", await self._do(lambda s: _queue(s, queue).cancel(job_id)))

    async def purge_dead(self, queue: str) -> int:
        return cast("int", await self._do(lambda s: _queue(s, queue).purge_dead()))

    def __repr__(self) -> str:
        return f"<Source {self.engine} {self.target!r}>"


def _queue(store: Any, name: str) -> Any:
    """The queue ``name``, an outbox's backing queue (reserved name) included."""
    if name.startswith(OUTBOX_QUEUE_PREFIX):
        return store.outbox(name[len(OUTBOX_QUEUE_PREFIX) :])._queue
    return store.queue(name)


def _within_outage_wait(action: Callable[[Any], Any], store: Store) -> Any:
    with deadline_in(OUTAGE_WAIT_S):
        return action(store)
