"""Named locks in the async API."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from alkstore._lock import Lock
from alkstore._options import check_duration

if TYPE_CHECKING:
    from alkstore._async_store import AsyncStore

__all__ = ["AsyncLock"]


class AsyncLock:
    """A held named lock, as ``await store.try_lock`` returned it: :class:`~alkstore.Lock`
    with ``await`` in front of each call. ``async with`` releases it on exit.

    An engine subclasses it to renew and release natively; the defaults run
    the sync lock of the store's companion (the *twin*) on the store's threads.
    """

    def __init__(
        self, store: AsyncStore, name: str, owner: str, ttl_s: float, twin: Lock | None = None
    ) -> None:
        self._store = store
        self.name = name
        """The lock's name."""
        self.owner = owner
        """Who holds it when held through this handle: the owner given to ``store.lock``."""
        self.ttl_s = ttl_s
        """The TTL of the latest acquire or renew."""
        self._twin_lock = twin

    async def renew(self, ttl_s: float | None = None) -> bool:
        """Extend the lock to ``now + ttl_s`` (default: the current TTL); False once lost."""
        self._store._check_open()
        seconds = self.ttl_s if ttl_s is None else check_duration(ttl_s, "ttl_s", zero_ok=False)
        renewed = await self._renew(seconds)
        if renewed:
            self.ttl_s = seconds
        return renewed

    async def release(self) -> bool:
        """Release the lock; False if this owner no longer held it."""
        self._store._check_open()
        return await self._release()

    async def __aenter__(self) -> AsyncLock:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._store.closed:
            await self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} owner={self.owner!r} ttl_s={self.ttl_s}>"

    # Engine hooks; the defaults run the twin's.

    async def _renew(self, ttl_s: float) -> bool:
        return await self._store._offloaded(self._twin()._renew, ttl_s)

    async def _release(self) -> bool:
        return await self._store._offloaded(self._twin()._release)

    def _twin(self) -> Lock:
        if self._twin_lock is None:
            raise TypeError(f"{type(self).__name__} has no sync twin: implement its hooks")
        return self._twin_lock
