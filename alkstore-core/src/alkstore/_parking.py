"""A worker's parks on its queue: ``Queue.wait`` over one subscription kept for the run.

``Queue.wait`` subscribes to the queue's wakes for each wait and drops the
subscription after it. A worker parks again and again on one queue, and on an
engine that listens per key (PostgreSQL's ``LISTEN``) every fresh
subscription costs a ``LISTEN`` round trip before the look and an
``UNLISTEN`` after the wake, on the path from a wake to the next claim. So a
worker subscribes once and keeps the receiver until its run ends. Wakes that
came while it worked are dropped before each look: the look sees their
commits, and listening still comes before looking.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from alkstore._names import queue_wake_key

if TYPE_CHECKING:
    from alkstore._async_queue import AsyncQueue
    from alkstore._queue import Queue
    from alkstore._receivers import WakeReceiver

__all__ = ["AsyncParking", "Parking"]


class _StandingWakes:
    """The subscription a parking keeps; ``close`` may come from any thread."""

    def __init__(self, queue: str) -> None:
        self._queue_name = queue
        self._lock = threading.Lock()
        self._wakes: WakeReceiver | None = None
        self._closed = False

    def _reusable(self) -> WakeReceiver | None:
        """The kept receiver, emptied; None before the first wait or once the engine
        closed it (its wake path failed): then a new one is kept."""
        wakes = self._wakes
        if wakes is None or wakes.closed:
            return None
        _drop_pending(wakes)
        return wakes

    def _keep(self, wakes: WakeReceiver) -> WakeReceiver:
        with self._lock:
            if self._closed:
                wakes.close()  # the run ended meanwhile: this wait returns at once
            self._wakes = wakes
        return wakes

    def close(self) -> None:
        """End the subscription; a wait in progress returns."""
        with self._lock:
            self._closed = True
            wakes = self._wakes
        if wakes is not None:
            wakes.close()

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        else:
            state = "not subscribed yet" if self._wakes is None else "subscribed"
        return f"<{type(self).__name__} {self._queue_name!r} {state}>"


class Parking(_StandingWakes):
    """Where a worker on a sync store waits for work."""

    def __init__(self, queue: Queue) -> None:
        super().__init__(queue.name)
        self._queue = queue

    def wait(self, timeout: float) -> bool:
        """``Queue.wait(timeout)`` on the standing subscription.

        Raises:
            Closed: the store was closed.
            Database: subscribing or the look failed (the next wait tries again).
        """
        store = self._queue._store
        store._check_open()
        wakes = self._reusable()
        if wakes is None:
            wakes = self._keep(store._watch(queue_wake_key(self._queue_name)))
        return self._queue._wait_watching(wakes, timeout)


class AsyncParking(_StandingWakes):
    """Where a worker on an :class:`~alkstore.AsyncStore` awaits work."""

    def __init__(self, queue: AsyncQueue) -> None:
        super().__init__(queue.name)
        self._queue = queue

    async def wait(self, timeout: float) -> bool:
        """``AsyncQueue.wait(timeout)`` on the standing subscription (see :meth:`Parking.wait`)."""
        store = self._queue._store
        store._check_open()
        wakes = self._reusable()
        if wakes is None:
            wakes = self._keep(await store._watch(queue_wake_key(self._queue_name)))
        return await self._queue._wait_watching(wakes, timeout)


def _drop_pending(wakes: WakeReceiver) -> None:
    """Take every wake already delivered, without waiting."""
    while wakes.recv(0) is not None:
        pass
