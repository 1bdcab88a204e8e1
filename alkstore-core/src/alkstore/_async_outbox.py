"""The outbox in the async API."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from alkstore._async_queue import AsyncQueue
from alkstore._handler_shapes import check_handler, check_result, is_coroutine_handler
from alkstore._options import EnqueueOpts

__all__ = ["AsyncOutbox"]


class AsyncOutbox:
    """A named outbox over its backing queue, for asyncio code: :class:`~alkstore.Outbox`
    with ``await`` in front of each call."""

    def __init__(self, name: str, backing_queue: AsyncQueue) -> None:
        self.name = name
        """The outbox's name."""
        self._queue = backing_queue

    @property
    def queue_name(self) -> str:
        """The backing queue's name."""
        return self._queue.name

    async def enqueue(self, payload: object, opts: EnqueueOpts | None = None) -> int:
        """Add a send in its own transaction; return its job id."""
        return await self._queue.enqueue(payload, opts)

    async def run_once(
        self, worker_id: str, deliver: Callable[[Any], Awaitable[object] | object]
    ) -> bool:
        """Claim one send and pass its payload to ``deliver`` (a function or a
        coroutine function; a plain function runs on a thread, and a coroutine
        it returns is awaited here).

        ``deliver`` returning acks the send; raising an ``Exception`` retries it
        on the backoff curve. True if a send was handled, False if none was ready.

        Raises:
            TypeError: ``deliver`` is not callable, or is a generator function,
                whose call would run none of its body (checked before any claim).
        """
        check_handler(deliver, "deliver")
        job = await self._queue.claim_one(worker_id)
        if job is None:
            return False
        try:
            if is_coroutine_handler(deliver):
                result = deliver(job.payload)
            else:
                result = await asyncio.to_thread(deliver, job.payload)
            check_result(result)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # the delivery failed: retry on the curve
            await job.retry(exc)
        else:
            await job.ack()
        return True

    async def requeue_dead(
        self, job_ids: Iterable[int] | None = None, *, reset_attempts: bool = True
    ) -> int:
        """Move dead sends back to ready; return how many moved (see ``Queue.requeue_dead``)."""
        return await self._queue.requeue_dead(job_ids, reset_attempts=reset_attempts)

    async def purge_dead(self, older_than_s: float | None = None) -> int:
        """Delete dead sends; return how many went (see ``Queue.purge_dead``)."""
        return await self._queue.purge_dead(older_than_s)

    def __repr__(self) -> str:
        return f"<AsyncOutbox {self.name!r}>"
