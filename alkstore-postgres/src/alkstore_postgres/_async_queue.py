"""Queues of the async store: the sync queue's plans (``_queue.QueuePlans``), awaited."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alkstore import QueueOpts
from alkstore.engine import AsyncJob, AsyncQueue, JobStamp
from alkstore_postgres._queue import QueuePlans, claimed_jobs

if TYPE_CHECKING:
    from alkstore_postgres._async_store import PostgresAsyncStore

__all__ = ["PostgresAsyncQueue"]


class PostgresAsyncQueue(AsyncQueue):
    """A queue in the store's schema. Claims and settling calls are native;
    ``cancel``, ``get_job`` and ``sweep_expired`` are core's (the companion)."""

    _store: PostgresAsyncStore

    def __init__(self, store: PostgresAsyncStore, name: str, opts: QueueOpts) -> None:
        super().__init__(store, name, opts)
        self._plans = QueuePlans(store.sql, name)

    async def _enqueue(self, stamp: JobStamp, payload_json: str) -> int:
        return await self._store.run(self._plans.enqueue(stamp, payload_json))

    async def _claim(self, worker_id: str, n: int) -> list[AsyncJob]:
        rows = await self._store.run(self._plans.claim(worker_id, n))
        return claimed_jobs(AsyncJob, self, rows, worker_id)

    async def _ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> int:
        return await self._store.run(self._plans.ack_batch(claims, worker_id))

    async def _until_ready(self) -> float | None:
        return await self._store.run(self._plans.until_ready())

    async def _requeue_dead(self, job_ids: list[int] | None, reset_attempts: bool) -> int:
        plan = self._plans.requeue_dead(job_ids, reset_attempts, self.opts)
        return await self._store.run(plan)

    async def _purge_dead(self, older_than_s: float | None) -> int:
        return await self._store.run(self._plans.purge_dead(older_than_s))

    async def _ack_job(self, job: AsyncJob) -> bool:
        return await self._store.run(self._plans.ack(job.id, job.attempts, job.worker_id))

    async def _retry_job(self, job: AsyncJob, error: str, delay_s: float) -> bool:
        plan = self._plans.retry(job.id, job.attempts, job.worker_id, error, delay_s)
        return await self._store.run(plan)

    async def _fail_job(self, job: AsyncJob, error: str) -> bool:
        plan = self._plans.fail(job.id, job.attempts, job.worker_id, error)
        return await self._store.run(plan)

    async def _release_job(self, job: AsyncJob) -> bool:
        return await self._store.run(self._plans.release(job.id, job.attempts, job.worker_id))

    async def _heartbeat_job(self, job: AsyncJob, extend_s: float) -> bool:
        plan = self._plans.heartbeat(job.id, job.attempts, job.worker_id, extend_s)
        deadline = await self._store.run(plan)
        if deadline is None:
            return False
        job.deadline = deadline
        return True
