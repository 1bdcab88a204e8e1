"""The outbox: jobs enqueued inside the business transaction, delivered later."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alkstore._options import EnqueueOpts
from alkstore._queue import Queue

__all__ = ["Outbox", "backing_queue"]


class Outbox:
    """A named outbox over its backing queue ``__alkstore_outbox:{name}``.

    Put sends in the business transaction with ``tx.outbox_enqueue_tx(name,
    ...)``: the send exists exactly when the business write commits. Deliver
    them with :meth:`run_once` in a loop. The backing queue uses
    ``QueueOpts(visibility_timeout_s=60, max_attempts=5, backoff_base_s=5)``.
    """

    def __init__(self, name: str, backing_queue: Queue) -> None:
        self.name = name
        """The outbox's name."""
        self._queue = backing_queue

    @property
    def queue_name(self) -> str:
        """The backing queue's name."""
        return self._queue.name

    def enqueue(self, payload: object, opts: EnqueueOpts | None = None) -> int:
        """Add a send in its own transaction; return its job id."""
        return self._queue.enqueue(payload, opts)

    def run_once(self, worker_id: str, deliver: Callable[[Any], None]) -> bool:
        """Claim one send and pass its payload to ``deliver``.

        ``deliver`` returning acks the send; raising an ``Exception`` retries
        it on the backoff curve (dead letters after the last attempt), with the
        exception recorded as ``last_error``. Returns True if a send was
        handled, False if none was ready.

        Raises:
            TypeError: ``deliver`` is not callable (checked before any claim).
        """
        if not callable(deliver):
            raise TypeError(f"deliver must be callable, not {type(deliver).__name__}")
        job = self._queue.claim_one(worker_id)
        if job is None:
            return False
        try:
            deliver(job.payload)
        except Exception as exc:  # the delivery failed: retry on the curve
            job.retry(exc)
        else:
            job.ack()
        return True

    def __repr__(self) -> str:
        return f"<Outbox {self.name!r}>"


def backing_queue(outbox: Outbox) -> Queue:
    """The queue behind ``outbox``, for core's operator tools (it is reachable no
    other way: its name is reserved)."""
    return outbox._queue
