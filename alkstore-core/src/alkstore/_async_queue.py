"""Queues in the async API: every call that touches the database is awaited."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from alkstore._async_job import AsyncJob
from alkstore._call_deadline import deadline_in
from alkstore._codec import encode
from alkstore._job import ClaimedJob, Job
from alkstore._names import check_identifier, queue_wake_key
from alkstore._options import EnqueueOpts, QueueOpts, check_duration, check_flag, check_int
from alkstore._queue import (
    MAX_BATCH,
    check_job_id,
    claim_order,
    dead_job_ids,
    fenced_claims,
    wait_for_work,
)
from alkstore._stamp import JobStamp
from alkstore._tracing import stamp_unless_traced, traced_enqueue_async
from alkstore._values import JobInfo

if TYPE_CHECKING:
    from alkstore._async_store import AsyncStore
    from alkstore._queue import Queue
    from alkstore._receivers import WakeReceiver

__all__ = ["AsyncQueue"]


class AsyncQueue:
    """A named job queue of an :class:`~alkstore.AsyncStore`: :class:`~alkstore.Queue`
    with ``await`` in front of each call. A cheap view: ``store.queue(name, opts)``.

    Same names, arguments, results and errors as the sync queue. An engine
    subclasses it to do the hooks natively; the defaults run the sync hooks
    of the store's companion on the store's threads.
    """

    def __init__(self, store: AsyncStore, name: str, opts: QueueOpts) -> None:
        self._store = store
        self.name = name
        """The queue's name."""
        self.opts = opts
        """The queue's options: what ``store.queue`` declared, else the defaults."""
        self._twin_queue: Queue | None = None

    async def enqueue(self, payload: object, opts: EnqueueOpts | None = None) -> int:
        """Add a job and commit; return its id.

        Raises:
            Codec: ``payload`` is not a JSON value (nothing is written).
        """
        self._store._check_open()
        stamp = self._store._stamp(self.opts, opts)
        payload_json = encode(payload)
        plain = stamp_unless_traced(stamp)
        if plain is not None:
            return await self._enqueue(plain, payload_json)
        enqueue = self._enqueue
        return await traced_enqueue_async(self.name, stamp, lambda s: enqueue(s, payload_json))

    async def claim_one(self, worker_id: str) -> AsyncJob | None:
        """Claim the next ready job for ``worker_id``; None when none is ready."""
        self._store._check_open()
        jobs = await self._claim(check_identifier(worker_id, "worker_id"), 1)
        if not jobs:
            return None
        self._store._claims.remember(self.name, jobs)
        return jobs[0]

    async def claim_batch(self, worker_id: str, n: int) -> list[AsyncJob]:
        """Claim up to ``n`` ready jobs in claim order; empty when none is ready."""
        self._store._check_open()
        worker_id = check_identifier(worker_id, "worker_id")
        jobs = await self._claim(worker_id, check_int(n, "n", minimum=1, maximum=MAX_BATCH))
        if jobs:
            jobs.sort(key=claim_order)
            self._store._claims.remember(self.name, jobs)
        return jobs

    async def ack_batch(self, job_ids: Iterable[int | ClaimedJob[Any]], worker_id: str) -> int:
        """Ack every job in ``job_ids`` that ``worker_id`` still holds; return how many
        (fenced like ``Queue.ack_batch``)."""
        self._store._check_open()
        worker_id = check_identifier(worker_id, "worker_id")
        claims = fenced_claims(job_ids, self._store._claims, self.name, worker_id)
        if not claims:
            return 0
        acked = await self._ack_batch(claims, worker_id)
        self._store._claims.batch_acked(self.name, claims, acked)
        return acked

    async def cancel(self, job_id: int) -> bool:
        """Delete the job whatever its state (not an interrupt); True if it existed."""
        self._store._check_open()
        return await self._cancel(check_job_id(job_id))

    async def get_job(self, job_id: int) -> JobInfo | None:
        """Return a snapshot of a pending, processing or dead job; None if there is none."""
        self._store._check_open()
        return await self._get_job(check_job_id(job_id))

    async def sweep_expired(self) -> int:
        """Move past-expiry jobs to dead letters and purge old dead letters (see
        ``Queue.sweep_expired``); return how many moved."""
        self._store._check_open()
        return await self._sweep_expired()

    async def requeue_dead(
        self, job_ids: Iterable[int] | None = None, *, reset_attempts: bool = True
    ) -> int:
        """Move dead jobs back to ready; return how many moved (see ``Queue.requeue_dead``)."""
        self._store._check_open()
        ids = dead_job_ids(job_ids)
        if ids == []:
            return 0
        return await self._requeue_dead(ids, check_flag(reset_attempts, "reset_attempts"))

    async def purge_dead(self, older_than_s: float | None = None) -> int:
        """Delete dead jobs; return how many went (see ``Queue.purge_dead``)."""
        self._store._check_open()
        if older_than_s is not None:
            older_than_s = check_duration(older_than_s, "older_than_s", zero_ok=True)
        return await self._purge_dead(older_than_s)

    async def wait(self, timeout: float | None) -> bool:
        """Await until this queue may have work or ``timeout`` passes (see ``Queue.wait``)."""
        self._store._check_open()
        seconds = None if timeout is None else check_duration(timeout, "timeout", zero_ok=True)
        # Listening before looking: a commit between the look and the wait still wakes us.
        with await self._store._watch(queue_wake_key(self.name)) as wakes:
            return await self._wait_watching(wakes, seconds)

    async def _wait_watching(self, wakes: WakeReceiver, seconds: float | None) -> bool:
        """``wait``, with ``wakes`` (of this queue) subscribed before the look."""
        with deadline_in(seconds):
            until_ready = await self._until_ready()
        plan = wait_for_work(until_ready, seconds)
        if plan is None:
            return True
        recv_timeout, look_again = plan
        woken = await wakes.recv_async(recv_timeout) is not None
        return woken or (look_again and not wakes.closed)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.opts}>"

    # Engine hooks: arguments are already checked, encoded and stamped. The
    # defaults run the companion's sync hooks on the store's threads.

    async def _twin(self) -> Queue:
        """This queue in the store's sync companion."""
        if self._twin_queue is None:
            companion = await self._store._companion()
            self._twin_queue = companion._queue(self.name, self.opts)
        return self._twin_queue

    async def _enqueue(self, stamp: JobStamp, payload_json: str) -> int:
        """Insert one job in its own transaction; return its id."""
        twin = self._twin_queue or await self._twin()  # the hot path skips an await
        return await self._store._offloaded(twin._enqueue, stamp, payload_json)

    async def _claim(self, worker_id: str, n: int) -> list[AsyncJob]:
        """Claim up to ``n`` ready jobs (any order); a cancelled claim's jobs lapse."""
        jobs = await self._store._offloaded((await self._twin())._claim, worker_id, n)
        return [AsyncJob.of(self, job) for job in jobs]

    async def _ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> int:
        return await self._store._offloaded((await self._twin())._ack_batch, claims, worker_id)

    async def _cancel(self, job_id: int) -> bool:
        return await self._store._offloaded((await self._twin())._cancel, job_id)

    async def _get_job(self, job_id: int) -> JobInfo | None:
        return await self._store._offloaded((await self._twin())._get_job, job_id)

    async def _sweep_expired(self) -> int:
        return await self._store._offloaded((await self._twin())._sweep_expired)

    async def _requeue_dead(self, job_ids: list[int] | None, reset_attempts: bool) -> int:
        queue = await self._twin()
        return await self._store._offloaded(queue._requeue_dead, job_ids, reset_attempts)

    async def _purge_dead(self, older_than_s: float | None) -> int:
        return await self._store._offloaded((await self._twin())._purge_dead, older_than_s)

    async def _until_ready(self) -> float | None:
        """Seconds until a job turns ready by the clock; <= 0 if one is ready; None if none will."""
        return await self._store._offloaded((await self._twin())._until_ready)

    async def _ack_job(self, job: AsyncJob) -> bool:
        return await self._store._offloaded((await self._twin())._ack_job, _twin_of(job))

    async def _retry_job(self, job: AsyncJob, error: str, delay_s: float) -> bool:
        queue = await self._twin()
        return await self._store._offloaded(queue._retry_job, _twin_of(job), error, delay_s)

    async def _fail_job(self, job: AsyncJob, error: str) -> bool:
        return await self._store._offloaded((await self._twin())._fail_job, _twin_of(job), error)

    async def _release_job(self, job: AsyncJob) -> bool:
        return await self._store._offloaded((await self._twin())._release_job, _twin_of(job))

    async def _heartbeat_job(self, job: AsyncJob, extend_s: float) -> bool:
        twin = _twin_of(job)
        moved = await self._store._offloaded((await self._twin())._heartbeat_job, twin, extend_s)
        job.deadline = twin.deadline
        return moved


def _twin_of(job: AsyncJob) -> Job:
    twin = job._twin
    if not isinstance(twin, Job):
        raise TypeError(
            f"{job!r} was claimed natively, but its queue settles it through the sync "
            "companion: an engine that claims natively must settle natively too"
        )
    return twin
