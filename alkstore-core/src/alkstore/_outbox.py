"""The outbox: jobs enqueued inside the business transaction, delivered later."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from alkstore._handler_shapes import check_handler
from alkstore._options import EnqueueOpts
from alkstore._queue import Queue
from alkstore._run_stats import call_to_completion

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

    def run_once(self, worker_id: str, deliver: Callable[[Any], object]) -> bool:
        """Claim one send and pass its payload to ``deliver``.

        ``deliver`` returning acks the send; raising an ``Exception`` retries
        it on the backoff curve (dead letters after the last attempt), with the
        exception recorded as ``last_error``. A coroutine function (or a
        ``deliver`` that returns a coroutine) runs to its end on an event loop
        of its own, as a Worker's handler does. Returns True if a send was
        handled, False if none was ready.

        Raises:
            TypeError: ``deliver`` is not callable, or is a generator function,
                whose call would run none of its body (checked before any claim).
        """
        check_handler(deliver, "deliver")
        job = self._queue.claim_one(worker_id)
        if job is None:
            return False
        try:
            call_to_completion(deliver, job.payload)
        except Exception as exc:  # the delivery failed: retry on the curve
            job.retry(exc)
        else:
            job.ack()
        return True

    def requeue_dead(
        self, job_ids: Iterable[int] | None = None, *, reset_attempts: bool = True
    ) -> int:
        """Move dead sends back to ready; return how many moved (see ``Queue.requeue_dead``)."""
        return self._queue.requeue_dead(job_ids, reset_attempts=reset_attempts)

    def purge_dead(self, older_than_s: float | None = None) -> int:
        """Delete dead sends; return how many went (see ``Queue.purge_dead``)."""
        return self._queue.purge_dead(older_than_s)

    def __repr__(self) -> str:
        return f"<Outbox {self.name!r}>"


def backing_queue(outbox: Outbox) -> Queue:
    """The queue behind ``outbox``, for core's operator tools (it is reachable no
    other way: its name is reserved)."""
    return outbox._queue
