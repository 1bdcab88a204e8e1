"""The claimed-job handle of the async API: every settling call is awaited."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alkstore._job import ClaimedJob, Job, describe_error
from alkstore._options import check_duration

if TYPE_CHECKING:
    from alkstore._async_queue import AsyncQueue

__all__ = ["AsyncJob"]


class AsyncJob(ClaimedJob["AsyncQueue"]):
    """A job claimed through an :class:`~alkstore.AsyncQueue`: :class:`~alkstore.Job`
    with ``await`` in front of each settling call.

    Fenced like ``Job``: once the claim has lapsed or another claim has taken
    the job, ``ack``, ``retry``, ``fail`` and ``heartbeat`` return False and
    change nothing.
    """

    __slots__ = ()

    async def ack(self) -> bool:
        """Finish the job: delete its row. False if the claim was lost."""
        self._queue._store._check_open()
        return self._acked(not self._released and await self._queue._ack_job(self))

    async def retry(self, error: str | BaseException, delay_s: float | None = None) -> bool:
        """Release the job for another attempt after ``delay_s`` seconds (see ``Job.retry``)."""
        self._queue._store._check_open()
        delay = self._retry_delay(delay_s)
        if self._released:
            return False
        described = describe_error(error)
        if self.attempts >= self.max_attempts:  # the claim's attempts are the row's: fenced
            return self._note(await self._queue._fail_job(self, described), "dead", described)
        return self._note(
            await self._queue._retry_job(self, described, delay), "retried", described
        )

    async def fail(self, error: str | BaseException) -> bool:
        """Move the job to dead letters now, recording ``error``. False if the claim was lost."""
        self._queue._store._check_open()
        described = describe_error(error)
        return self._note(
            not self._released and await self._queue._fail_job(self, described), "dead", described
        )

    async def heartbeat(self, extend_s: float) -> bool:
        """Move the deadline to ``now + extend_s``; False once the deadline has passed."""
        self._queue._store._check_open()
        seconds = check_duration(extend_s, "extend_s", zero_ok=False)
        return not self._released and await self._queue._heartbeat_job(self, seconds)

    async def release(self) -> bool:
        """Give the job back unfinished, its attempt returned (see ``Job.release``)."""
        self._queue._store._check_open()
        if self._released:
            return False
        self._released = await self._queue._release_job(self)
        return self._released

    @classmethod
    def of(cls, queue: AsyncQueue, job: Job) -> AsyncJob:
        """The async handle on ``job``, a claim made through ``queue``'s sync twin."""
        handle = cls(
            queue=queue, id=job.id, payload=job.payload, priority=job.priority,
            attempts=job.attempts, max_attempts=job.max_attempts, run_at=job.run_at,
            deadline=job.deadline, worker_id=job.worker_id, backoff_base_s=job._backoff_base_s,
            visibility_timeout_s=job.visibility_timeout_s, key=job.key,
            traceparent=job.traceparent,
        )  # fmt: skip
        handle._twin = job
        return handle
