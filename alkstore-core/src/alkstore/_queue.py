"""Queues: durable at-least-once jobs with visibility timeouts and dead letters."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from alkstore._call_deadline import deadline_in
from alkstore._claims import ClaimLedger
from alkstore._codec import encode
from alkstore._job import ClaimedJob, Job
from alkstore._names import check_identifier, queue_wake_key
from alkstore._options import EnqueueOpts, QueueOpts, check_duration, check_flag, check_int
from alkstore._stamp import JobStamp
from alkstore._tracing import stamp_unless_traced, traced_enqueue
from alkstore._values import JobInfo

if TYPE_CHECKING:
    from alkstore._receivers import WakeReceiver
    from alkstore._store import Store

__all__ = [
    "CLOCK_LOOK_S", "EXPIRED", "LAPSED_ON_LAST_ATTEMPT", "MAX_BATCH", "Queue", "check_job_id",
    "claim_order", "dead_job_ids", "fenced_claims", "not_in_engine", "wait_for_work",
]  # fmt: skip

CLOCK_LOOK_S = 5.0
"""The longest ``Queue.wait`` sleeps on this host's clock for a job the database's
clock makes due later, before it answers "look again" (see ``wait_for_work``)."""
MAX_BATCH = 10_000
"""The largest ``n`` a single ``claim_batch`` accepts."""

_MAX_JOB_ID = 2**63 - 1

LAPSED_ON_LAST_ATTEMPT = "claim lapsed on its last attempt"
"""The ``last_error`` of a job whose claim lapsed when it had no attempt left."""

EXPIRED = "expired"
"""The ``last_error`` of a job moved to dead letters because it expired."""


def claim_order(job: ClaimedJob[Any]) -> tuple[int, float, int]:
    """Sort key of the claim order: priority (highest first), ready time, enqueue order."""
    return (-job.priority, job.run_at, job.id)


class Queue(abc.ABC):
    """A named job queue. A cheap view: get one with ``store.queue(name, opts)``.

    Each ready job is handed to exactly one claimer under any concurrency, in
    the order priority (highest first), ready time, enqueue order. Claiming
    increments ``attempts`` and sets the deadline ``now + visibility_timeout_s``.
    A job whose deadline passes is claimable again, and that reclaim consumes
    an attempt; a job out of attempts goes to dead letters instead.

    ``opts`` are stamped onto each job at enqueue; later opts never rewrite
    existing jobs.
    """

    def __init__(self, store: Store, name: str, opts: QueueOpts) -> None:
        self._store = store
        self.name = name
        """The queue's name."""
        self.opts = opts
        """The queue's options: what ``store.queue`` declared, else the defaults."""

    def enqueue(self, payload: object, opts: EnqueueOpts | None = None) -> int:
        """Add a job and commit; return its id.

        Raises:
            Codec: ``payload`` is not a JSON value (nothing is written).
        """
        self._store._check_open()
        stamp = self._store._stamp(self.opts, opts)
        payload_json = encode(payload)
        plain = stamp_unless_traced(stamp)
        if plain is not None:
            return self._enqueue(plain, payload_json)
        return traced_enqueue(self.name, stamp, lambda s: self._enqueue(s, payload_json))

    def claim_one(self, worker_id: str) -> Job | None:
        """Claim the next ready job for ``worker_id``; None when none is ready."""
        self._store._check_open()
        jobs = self._claim(check_identifier(worker_id, "worker_id"), 1)
        if not jobs:
            return None
        self._store._claims.remember(self.name, jobs)
        return jobs[0]

    def claim_batch(self, worker_id: str, n: int) -> list[Job]:
        """Claim up to ``n`` ready jobs in claim order; empty when none is ready."""
        self._store._check_open()
        worker_id = check_identifier(worker_id, "worker_id")
        jobs = self._claim(worker_id, check_int(n, "n", minimum=1, maximum=MAX_BATCH))
        if jobs:
            jobs.sort(key=claim_order)
            self._store._claims.remember(self.name, jobs)
        return jobs

    def ack_batch(self, job_ids: Iterable[int | Job], worker_id: str) -> int:
        """Ack every job in ``job_ids`` that ``worker_id`` still holds; return how many.

        Fenced like :meth:`Job.ack`: a job counts only while the claim it was
        acked for still holds. Pass the claimed :class:`Job` handles, or their
        ids: an id is fenced by the attempt of the claim this store handed to
        ``worker_id``, so a stale id whose job was claimed again since (by
        another process using the same worker id) acks nothing. An id this
        store never handed to ``worker_id`` acks that worker's current claim.
        """
        self._store._check_open()
        worker_id = check_identifier(worker_id, "worker_id")
        claims = fenced_claims(job_ids, self._store._claims, self.name, worker_id)
        if not claims:
            return 0
        acked = self._ack_batch(claims, worker_id)
        self._store._claims.batch_acked(self.name, claims, acked)
        return acked

    def cancel(self, job_id: int) -> bool:
        """Delete the job whatever its state (not an interrupt); True if it existed."""
        self._store._check_open()
        return self._cancel(check_job_id(job_id))

    def get_job(self, job_id: int) -> JobInfo | None:
        """Return a snapshot of a pending, processing or dead job; None if there is none."""
        self._store._check_open()
        return self._get_job(check_job_id(job_id))

    def sweep_expired(self) -> int:
        """Move every past-expiry job of this queue, in any state, to dead letters,
        and purge dead letters older than their retention. Return how many
        past-expiry jobs moved (a claim that lapsed on its last attempt, which
        the sweep sends to dead letters as the next claim would, is not counted).
        """
        self._store._check_open()
        return self._sweep_expired()

    def requeue_dead(
        self, job_ids: Iterable[int] | None = None, *, reset_attempts: bool = True
    ) -> int:
        """Move dead jobs of this queue (all of them, or those in ``job_ids``) back
        to ready; return how many moved.

        A requeued job keeps its id, payload, priority, key, stamps and last
        error; it is ready now and no longer expires. ``reset_attempts`` gives
        it its full ``max_attempts`` again; without it the job keeps its count
        and gets one more claim. A dead job whose key a live job holds stays
        dead (at most one live job per key), as do ids that are not dead jobs
        of this queue: neither is counted.
        """
        self._store._check_open()
        ids = dead_job_ids(job_ids)
        if ids == []:
            return 0
        return self._requeue_dead(ids, check_flag(reset_attempts, "reset_attempts"))

    def purge_dead(self, older_than_s: float | None = None) -> int:
        """Delete this queue's dead jobs (only those dead for at least
        ``older_than_s`` seconds, if given); return how many went."""
        self._store._check_open()
        if older_than_s is not None:
            older_than_s = check_duration(older_than_s, "older_than_s", zero_ok=True)
        return self._purge_dead(older_than_s)

    def wait(self, timeout: float | None) -> bool:
        """Block until this queue may have work or ``timeout`` passes.

        Wake-driven, not polling. True means "look again": a claim may still
        find nothing. False means the timeout passed (or the store closed).

        Raises:
            Database: the look at the queue failed: during an outage, near
                ``timeout`` (half a second at least), not after the engine's
                whole connect timeout.
        """
        self._store._check_open()
        seconds = None if timeout is None else check_duration(timeout, "timeout", zero_ok=True)
        # Listening before looking: a commit between the look and the wait still wakes us.
        with self._store._watch(queue_wake_key(self.name)) as wakes:
            return self._wait_watching(wakes, seconds)

    def _wait_watching(self, wakes: WakeReceiver, seconds: float | None) -> bool:
        """``wait``, with ``wakes`` (of this queue) subscribed before the look."""
        with deadline_in(seconds):
            until_ready = self._until_ready()
        plan = wait_for_work(until_ready, seconds)
        if plan is None:
            return True
        recv_timeout, look_again = plan
        return wakes.recv(recv_timeout) is not None or (look_again and not wakes.closed)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.opts}>"

    # Engine hooks: arguments are already checked, encoded and stamped.

    def _enqueue(self, stamp: JobStamp, payload_json: str) -> int:
        """Insert one job in its own transaction; return its id.

        By default, through a transaction of the engine's own (``_begin_tx`` and
        ``_enqueue_tx``); an engine overrides it when one statement does it faster.
        """
        with self._store.begin_tx() as tx:
            return tx._enqueue_tx(self.name, stamp, payload_json)

    @abc.abstractmethod
    def _claim(self, worker_id: str, n: int) -> list[Job]:
        """Claim up to ``n`` jobs atomically, the first ``n`` in claim order.

        A lapsed claim is claimable again; one that lapsed on its last attempt
        goes to dead letters instead, with ``LAPSED_ON_LAST_ATTEMPT`` as its
        error. The list may come in any order: core sorts it.
        """

    @abc.abstractmethod
    def _ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> int:
        """Delete the listed jobs still claimed by ``worker_id``; return the count.

        ``claims`` pairs each job id (ascending) with the attempt its claim must
        be at, or None when any unexpired claim by ``worker_id`` will do.
        """

    @abc.abstractmethod
    def _cancel(self, job_id: int) -> bool:
        """Delete the job of this queue in any state; True if a row went."""

    @abc.abstractmethod
    def _get_job(self, job_id: int) -> JobInfo | None:
        """Return the job of this queue in any state, or None."""

    @abc.abstractmethod
    def _sweep_expired(self) -> int:
        """Dead-letter past-expiry jobs, purge dead rows past retention."""

    @abc.abstractmethod
    def _until_ready(self) -> float | None:
        """Seconds (on the engine's clock) until a job of this queue may be claimable.

        The least of ``run_at - now`` over pending, unexpired jobs and of
        ``deadline - now`` over processing ones (a lapse frees them); zero or
        less means now; None when the queue holds no live job.
        """

    @abc.abstractmethod
    def _ack_job(self, job: Job) -> bool:
        """Delete the job if ``job``'s claim still holds."""

    @abc.abstractmethod
    def _retry_job(self, job: Job, error: str, delay_s: float) -> bool:
        """Release the job to run after ``delay_s``, recording ``error``, if ``job``'s
        claim still holds. Core calls it only while the job has attempts left (it
        dead-letters the last one through ``_fail_job``)."""

    @abc.abstractmethod
    def _fail_job(self, job: Job, error: str) -> bool:
        """Dead-letter the job now, recording ``error``, if ``job``'s claim still holds."""

    @abc.abstractmethod
    def _release_job(self, job: Job) -> bool:
        """Return the job to pending, ready at its old ``run_at``, with the attempt
        this claim used given back, if ``job``'s claim still holds."""

    @abc.abstractmethod
    def _heartbeat_job(self, job: Job, extend_s: float) -> bool:
        """Set the deadline to ``now + extend_s`` if the claim holds and has not
        lapsed; on success also update ``job.deadline``."""

    # Extensions of contract 1.4: defaults refuse, naming the contract.

    def _requeue_dead(self, job_ids: list[int] | None, reset_attempts: bool) -> int:
        """Move this queue's dead jobs (all, or those of ``job_ids``: ascending,
        distinct, possibly not dead) back to pending, in one transaction, and
        wake the queue's waiters; return how many moved.

        Each keeps its id, payload, priority, key, ``max_attempts``, stamps and
        ``last_error``; ``run_at`` is now, ``expires_at`` None, no claim;
        ``attempts`` is 0 if ``reset_attempts``, else kept. One whose key a live
        job holds (or an earlier one of the same move took) stays dead.
        """
        raise not_in_engine(self, "requeue_dead")

    def _purge_dead(self, older_than_s: float | None) -> int:
        """Delete this queue's dead jobs (those with ``died_at <= now -
        older_than_s`` if given); return how many went."""
        raise not_in_engine(self, "purge_dead")


def wait_for_work(
    until_ready: float | None, timeout: float | None
) -> tuple[float | None, bool] | None:
    """How ``Queue.wait`` waits, given when work turns ready by the clock (``_until_ready``).

    None: work is ready now. Else ``(seconds, look_again)``: wait that long
    for a wake; if none comes, ``look_again`` says whether the wait still
    answers "look again": the clock has made work ready meanwhile, or may have.
    The database's clock is not this process's monotonic one, so a wait for it
    is cut into slices of at most ``CLOCK_LOOK_S``: a step of the database's
    clock, or this host sleeping, cannot hold a due job back longer.
    """
    if until_ready is None:
        return (None, True) if timeout is None else (timeout, False)
    if until_ready <= 0:
        return None
    clock_wait = min(until_ready, CLOCK_LOOK_S)
    if timeout is not None and timeout < clock_wait:
        return timeout, False
    return clock_wait, True


def fenced_claims(
    job_ids: Iterable[int | ClaimedJob[Any]], ledger: ClaimLedger, queue: str, worker_id: str
) -> list[tuple[int, int | None]]:
    """The (job id, claim attempt) pairs an ``ack_batch`` of ``job_ids`` settles, sorted.

    A handle brings its claim's attempt (a released one acks nothing); a bare
    id the attempt this store handed to ``worker_id``, if it remembers one.
    """
    claims: dict[int, int | None] = {}
    bare_ids: list[int] = []
    for item in job_ids:
        if isinstance(item, ClaimedJob):
            if not item._released:
                claims[item.id] = item.attempts
        else:
            bare_ids.append(check_job_id(item))
    if bare_ids:  # a handle's own claim wins over what the ledger says of its id
        for job_id, attempt in ledger.attempts(queue, bare_ids, worker_id):
            claims.setdefault(job_id, attempt)
    return sorted(claims.items())


def dead_job_ids(job_ids: Iterable[int] | None) -> list[int] | None:
    """``requeue_dead``'s ``job_ids`` checked, ascending and distinct; None for all."""
    if job_ids is None:
        return None
    if isinstance(job_ids, (str, bytes)) or not isinstance(job_ids, Iterable):
        raise TypeError(
            f"job_ids must be an iterable of job ids or None, not {type(job_ids).__name__}"
        )
    return sorted({check_job_id(job_id) for job_id in job_ids})


def not_in_engine(queue: object, operation: str) -> NotImplementedError:
    return NotImplementedError(
        f"{queue!r}: its engine does not implement {operation} (engine contract 1.4); "
        "upgrade the engine"
    )


def check_job_id(job_id: object) -> int:
    """Return ``job_id`` if it is a positive 64-bit int."""
    if type(job_id) is int and 0 < job_id <= _MAX_JOB_ID:  # the common case, cheaply
        return job_id
    return check_int(job_id, "job_id", minimum=1, maximum=_MAX_JOB_ID)
