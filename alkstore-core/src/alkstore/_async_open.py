"""Opening a store for asyncio code: ``alkstore.open_async``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from alkstore._async_store import AsyncStore
from alkstore._discovery import engine_for_target, redact

if TYPE_CHECKING:
    from alkstore._store import Store

__all__ = ["OffloadedStore", "Opening", "open_async", "open_offloaded"]


def open_async(target: str | os.PathLike[str], **options: Any) -> Opening:
    """Open the store at ``target`` for asyncio code.

    Takes what :func:`alkstore.open` takes. Both forms work::

        store = await alkstore.open_async("app.db")      # close it with await store.close()
        async with alkstore.open_async("postgresql://…") as store:
            ...

    Raises:
        EngineNotFound: no installed engine handles ``target``.
    """
    return Opening(target, options)


class Opening:
    """What :func:`open_async` returns: await it for the :class:`AsyncStore`, or
    use it with ``async with`` to close the store on exit."""

    def __init__(self, target: str | os.PathLike[str], options: dict[str, Any]) -> None:
        self._target = target
        self._options = options
        self._store: AsyncStore | None = None

    def __await__(self) -> Generator[Any, None, AsyncStore]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncStore:
        self._store = await self._open()
        return self._store

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._store is not None:
            await self._store.close()

    async def _open(self) -> AsyncStore:
        engine, target = engine_for_target(self._target)
        return await engine.open_async(target, **self._options)

    def __repr__(self) -> str:
        target = self._target
        shown = os.fspath(target) if isinstance(target, os.PathLike) else redact(str(target))
        return f"<Opening of {shown!r}>"


class OffloadedStore(AsyncStore):
    """The async API over a sync :class:`Store`, by thread offload: what an engine
    without native async hooks serves ``open_async`` with."""

    def __init__(self, store: Store) -> None:
        super().__init__(
            store.location, store.capabilities, scheduler_lease_s=store.scheduler_lease_s
        )
        self._share_declarations(store)
        self._companion_store = store
        self.job_keys = store.job_keys

    def __repr__(self) -> str:
        companion = self._companion_store
        state = "closed" if self._closed else "open"
        return f"<AsyncStore over {type(companion).__name__} {self.location!r} {state}>"

    def _open_companion(self) -> Store:
        assert self._companion_store is not None
        return self._companion_store


async def open_offloaded(engine_open: Any, target: str, options: dict[str, Any]) -> AsyncStore:
    """Open a sync store with ``engine_open(target, **options)`` on a thread of its
    own (gone once the store is open) and serve the async API over it. A
    cancelled open closes the store it made."""
    opener = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="alkstore-open")
    opening = asyncio.wrap_future(opener.submit(lambda: engine_open(target, **options)))
    opener.shutdown(wait=False)
    try:
        store = await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_close_quietly)
        raise
    return OffloadedStore(store)


def _close_quietly(opening: asyncio.Future[Store]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        with contextlib.suppress(Exception):
            opening.result().close()
