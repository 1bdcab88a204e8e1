"""The Worker's book of held claims, and every decision its two runners share.

``Worker.run`` (threads, a sync ``Store``) and ``Worker.run_async`` (asyncio,
an ``AsyncStore`` or a sync ``Store``) differ only in how they wait and how
they call the database. What to claim and when, each claim's lease and
heartbeat schedule, what a handler's outcome means for its job, how long a
failing settle is retried, what is counted, and when the worker stops from
inside are decided here, once.

Leases are durations: the claim's visibility timeout as stamped on its row,
renewed by the server's clock and scheduled by this host's monotonic clock,
so the host's wall clock, however wrong, changes nothing.

Every job's life is logged here too, on the ``alkstore.worker`` logger, so
both runners log alike: its start and success at DEBUG, a retry and a lapsed
claim at WARNING, a dead letter at ERROR, each record with the ``extra``
fields of :func:`job_fields`.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alkstore._job import ClaimedJob, describe_error
from alkstore._outage import Outage, is_permanent
from alkstore._run_stats import RunStats

__all__ = ["BEAT_ROUND", "JOB_LOG_FIELDS", "Held", "Ledger", "Verdict", "job_fields"]

log = logging.getLogger("alkstore.worker")

BEAT_ROUND = 32
"""The most heartbeats the keeper sends before it looks again at which are due."""

SUCCEEDED, FAILED, RELEASED, LOST = "succeeded", "failed", "released", "lost"
"""What became of a claim, as counted in :class:`~alkstore.RunStats`."""


JOB_LOG_FIELDS = ("queue", "job_id", "attempt", "duration_s", "worker_id", "outcome", "error")
"""The ``extra`` fields of every job record (attributes of the ``LogRecord``)."""

STARTED, SUCCEEDED_LOG, RETRYING, DEAD, LAPSED, RELEASED_LOG = (
    "started", "succeeded", "retrying", "dead", "lapsed", "released",
)  # fmt: skip
"""A job record's ``outcome`` field."""


def job_fields(
    job: ClaimedJob[Any],
    worker_id: str,
    outcome: str,
    duration_s: float | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """The structured ``extra`` of a job record, every field of :data:`JOB_LOG_FIELDS`."""
    return {
        "queue": job.queue, "job_id": job.id, "attempt": job.attempts,
        "duration_s": None if duration_s is None else round(duration_s, 6),
        "worker_id": worker_id, "outcome": outcome, "error": error,
    }  # fmt: skip


class Verdict(enum.Enum):
    """What a handler's outcome means for its job."""

    ACK = "ack"
    """The handler returned: the job is done."""
    RETRY = "retry"
    """It raised an ``Exception``: retry on the backoff curve (dead letters after the last)."""
    ABORT = "abort"
    """It raised another ``BaseException``: release the job and stop the worker."""


@dataclass(eq=False)
class Held:
    """A claim the worker holds; times are ``time.monotonic()`` readings."""

    job: ClaimedJob[Any]
    """A ``Job`` (sync store) or an ``AsyncJob`` (async store)."""
    lease_s: float
    beat_at: float
    """When it next needs a heartbeat."""
    lapses_at: float
    """When the claim lapses at the earliest, unless renewed."""
    started: bool = False
    """A handler took it (or the shutdown did, to release it)."""
    heartbeat_failed: bool = False
    sequence: int = 0
    ran_from: float | None = None
    """When its handler started (monotonic), once it has."""
    ran_s: float | None = None
    """How long its handler ran, once it returned or raised."""
    error: BaseException | None = None
    """What its handler raised, if it did."""
    lapse_told: bool = False
    """A warning already said that its claim was lost."""
    settle_unknown: bool = False
    """A settle of it failed with no answer: it may have committed all the same."""
    held_at: float = 0.0
    """When the worker took it into its hold (the claim's answer came)."""


def _lapsed_by(held: Held, now: float) -> bool:
    """Whether ``held``'s claim may have lapsed by ``now``: its heartbeat found it
    gone, or its lease ran out while it waited in the hold, no renewal in time.
    (A lease that ran out before the claim's answer came, being shorter than
    its round trip, is not held against the job: it runs, as it would have.)"""
    if held.heartbeat_failed:
        return True
    return held.held_at < held.lapses_at <= now


class Ledger:
    """The claims one worker holds, what it has done with the others, and its stop state.

    Safe to use from several threads: the thread runner's threads wait on
    :attr:`changed`; the asyncio runner registers a ``poke`` that is called
    whenever something it may wait for happens from another thread (an abort,
    a hurry).
    """

    def __init__(
        self, queue_name: str, worker_id: str, concurrency: int, batch_size: int, lease_s: float
    ) -> None:
        self.queue_name = queue_name
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.default_lease_s = lease_s
        self.changed = threading.Condition()
        """Notified whenever a claim is held, started or dropped, and on abort or hurry."""
        self.outage = Outage(log, f"worker {worker_id!r} on {queue_name!r}")
        self.aborted: BaseException | None = None
        """What stops the worker from inside: a handler's BaseException, a thread's death."""
        self.hurried = threading.Event()
        self._held: dict[int, Held] = {}
        self._sequence = itertools.count()
        self._counts = dict.fromkeys((SUCCEEDED, FAILED, RELEASED, LOST), 0)
        self._started_at: float | None = None
        self._pokes: list[Callable[[], None]] = []

    # A run's life

    def begin(self) -> None:
        """A run starts: forget the last run's abort and hurry."""
        with self.changed:
            self.aborted = None
            self._started_at = time.monotonic()
        self.hurried.clear()

    def on_change(self, poke: Callable[[], None] | None) -> None:
        """Call ``poke`` (thread-safe) on an abort or a hurry; None stops calling it."""
        with self.changed:
            self._pokes = [] if poke is None else [poke]

    def stats(self) -> RunStats:
        with self.changed:
            elapsed = 0.0 if self._started_at is None else time.monotonic() - self._started_at
            return RunStats(**self._counts, in_flight=len(self._held), elapsed_s=elapsed)

    def in_flight(self) -> int:
        with self.changed:
            return len(self._held)

    # Claiming

    def claim_room(self) -> int:
        """How many jobs to claim now: none unless a handler would idle or half
        the batch is done, then enough to fill the batch."""
        with self.changed:
            held = len(self._held)
            wanted = held < self.concurrency or held <= self.batch_size // 2
            return self.batch_size - held if wanted else 0

    def hold(self, jobs: list[ClaimedJob[Any]], claimed_at: float) -> list[Held]:
        """Hold freshly claimed jobs; ``claimed_at`` is the monotonic time the claim was sent."""
        fresh = []
        held_at = time.monotonic()
        with self.changed:
            for job in jobs:
                lease = self._lease(job)
                held = Held(
                    job, lease, beat_at=claimed_at + lease / 3, lapses_at=claimed_at + lease,
                    sequence=next(self._sequence), held_at=held_at,
                )  # fmt: skip
                self._held[job.id] = held
                fresh.append(held)
            self.changed.notify_all()
        return fresh

    def _lease(self, job: ClaimedJob[Any]) -> float:
        """The claim's lease: a duration from the job's row, never from the host's clock."""
        if job.visibility_timeout_s is not None:
            return job.visibility_timeout_s
        return self.default_lease_s

    def claim_failed(self, error: BaseException) -> float:
        """A claim failed; return the pause before trying again."""
        return self._outage_pause(f"claiming from {self.queue_name!r}", error)

    def park_failed(self, error: BaseException) -> float:
        """A park failed; return the pause before trying again."""
        return self._outage_pause(f"waiting on {self.queue_name!r}", error)

    def _outage_pause(self, action: str, error: BaseException) -> float:
        """The pause before trying ``action`` again; none when ``error`` is
        permanent, which stops the worker (its run raises ``error``)."""
        if is_permanent(error):
            self.outage.ended_by(action, error)
            self.abort(error)
            return 0.0
        return self.outage.failed(action, error)

    def answered(self) -> None:
        """A database call succeeded."""
        self.outage.succeeded()

    # Running handlers

    def next_unstarted(self) -> Held | None:
        """Take the oldest held job no handler has started, if any, and mark it started.

        A claim that lapsed while it waited (its heartbeat said so, or its
        lease ran out before one could renew it) is not started: another
        worker may hold the job by now. It is dropped instead, unrun, and
        comes back to the queue at its deadline.
        """
        now = time.monotonic()
        with self.changed:
            waiting = sorted(
                (held for held in self._held.values() if not held.started),
                key=lambda held: held.sequence,
            )
            lapsed = [held for held in waiting if _lapsed_by(held, now)]
            for held in lapsed:
                held.started = held.lapse_told = True
            chosen = next((held for held in waiting if not held.started), None)
            if chosen is not None:
                chosen.started = True
        if lapsed:
            self._drop_lapsed_unstarted(lapsed)
        return chosen

    def _drop_lapsed_unstarted(self, lapsed: list[Held]) -> None:
        log.warning(
            "%d held jobs of %r lapsed before a handler was free, and were not run: "
            "they come back to the queue (a smaller batch_size, or a longer visibility "
            "timeout, keeps held jobs from waiting that long)",
            len(lapsed), self.queue_name,
        )  # fmt: skip
        for held in lapsed:
            self.drop(held, LOST)

    def starting(self, held: Held) -> None:
        """A handler is about to run ``held``'s job (DEBUG record)."""
        held.ran_from = time.monotonic()
        job = held.job
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "job %s of %r started (attempt %d of %d)",
                job.id, job.queue, job.attempts, job.max_attempts,
                extra=job_fields(job, self.worker_id, STARTED),
            )  # fmt: skip

    def judge(self, held: Held, error: BaseException | None) -> Verdict:
        """What the handler's outcome (``error`` raised, or None) means for ``held``.

        A ``BaseException`` that is not an ``Exception`` stops the worker at
        once, before its job is released: no claim may take the job back meanwhile.
        """
        if held.ran_from is not None:
            held.ran_s = time.monotonic() - held.ran_from
        held.error = error
        job = held.job
        if error is None:
            return Verdict.ACK
        if isinstance(error, (Exception, asyncio.CancelledError)):
            # A CancelledError here is the handler's own (something it awaited was
            # cancelled), not the worker being stopped: the runner tells them apart.
            return Verdict.RETRY  # logged once settled: retried, dead, or lapsed
        log.error(
            "job %s of %r: the handler raised %s; the worker stops and releases its claims",
            job.id, job.queue, describe_error(error),
            extra=job_fields(job, self.worker_id, RELEASED_LOG, held.ran_s, describe_error(error)),
        )  # fmt: skip
        self.abort(error)
        return Verdict.ABORT

    # Settling

    def settle_failed(self, held: Held, error: BaseException) -> float | None:
        """A settle failed: the pause before trying it again, or None to give up.

        Settles are fenced, so retrying one whose outcome is unknown is safe.
        Give up once the claim would lapse before the next try, or the worker
        no longer holds it: the job is then claimed and run again (at least once).
        """
        held.settle_unknown = True
        pause = self._outage_pause(f"settling job {held.job.id}", error)
        lapses = time.monotonic() + pause >= held.lapses_at
        return None if is_permanent(error) or lapses or not self.holds(held) else pause

    def release_failed(self, held: Held, error: BaseException) -> None:
        # The claim lapses by itself at its deadline; the job is then claimed again.
        if not is_permanent(error):  # the run raises it: no outage to report
            self.outage.failed(f"releasing job {held.job.id}", error)

    def holds(self, held: Held) -> bool:
        with self.changed:
            return self._held.get(held.job.id) is held

    def drop(self, held: Held, outcome: str) -> None:
        """Forget ``held``, count ``outcome`` (once, whoever drops it first) and log it."""
        with self.changed:
            dropped = self._held.pop(held.job.id, None) is not None
            if dropped:
                self._counts[outcome] += 1
            self.changed.notify_all()
        if dropped:
            self._log_outcome(held, outcome)

    def _log_outcome(self, held: Held, outcome: str) -> None:
        """One record of what became of a claim: at DEBUG unless something went wrong."""
        job, ran_s = held.job, held.ran_s
        attempt = f"attempt {job.attempts} of {job.max_attempts}"
        if outcome == SUCCEEDED:
            self._debug(held, SUCCEEDED_LOG, "job %s of %r succeeded in %.3f s (%s)",
                        job.id, job.queue, ran_s or 0.0, attempt)  # fmt: skip
        elif outcome == FAILED:
            assert held.error is not None
            self._failed(held, job.attempts >= job.max_attempts, describe_error(held.error))
        elif outcome == RELEASED:
            self._debug(held, RELEASED_LOG,
                        "job %s of %r released unfinished (%s given back)",
                        job.id, job.queue, attempt)  # fmt: skip
        elif job._outcome is not None:  # LOST: the handler settled the claim itself
            how, error = job._outcome
            if how == "acked":
                self._debug(held, SUCCEEDED_LOG, "job %s of %r succeeded in %.3f s "
                            "(%s; acked by its handler)", job.id, job.queue, ran_s or 0.0,
                            attempt)  # fmt: skip
            else:
                self._failed(held, how == "dead", error, by_handler=True)
        else:
            self._lapsed(held)

    def _failed(
        self, held: Held, dead: bool, error: str | None, *, by_handler: bool = False
    ) -> None:
        job, error_info = held.job, held.error
        exc_info = (
            None
            if by_handler or error_info is None
            else (type(error_info), error_info, error_info.__traceback__)
        )
        attempt = f"attempt {job.attempts} of {job.max_attempts}"
        fields = job_fields(job, self.worker_id, DEAD if dead else RETRYING, held.ran_s, error)
        if dead and by_handler:
            log.error("job %s of %r was sent to dead letters by its handler (%s): %s",
                      job.id, job.queue, attempt, error, extra=fields)  # fmt: skip
        elif dead:
            log.error(
                "job %s of %r failed on its last attempt (%d of %d) and went to dead letters: %s",
                job.id, job.queue, job.attempts, job.max_attempts, error,
                exc_info=exc_info, extra=fields,
            )  # fmt: skip
        elif by_handler:
            log.warning("job %s of %r was retried by its handler (%s): %s",
                        job.id, job.queue, attempt, error, extra=fields)  # fmt: skip
        else:
            log.warning("job %s of %r failed (%s) and will be retried: %s",
                        job.id, job.queue, attempt, error, exc_info=exc_info,
                        extra=fields)  # fmt: skip

    def _lapsed(self, held: Held) -> None:
        """The worker's settling call found the claim gone: it lapsed or another took it."""
        job = held.job
        error = None if held.error is None else describe_error(held.error)
        if held.ran_s is None:  # never run, or cut short at shutdown
            done = "before it could be released"
        elif error is None:
            done = "before its success could be acked"
        else:
            done = f"before its failure could be recorded ({error})"
        level = logging.DEBUG if held.lapse_told else logging.WARNING
        log.log(
            level,
            "job %s of %r lost its claim %s (attempt %d of %d); it may run again elsewhere",
            job.id, job.queue, done, job.attempts, job.max_attempts,
            extra=job_fields(job, self.worker_id, LAPSED, held.ran_s, error),
        )  # fmt: skip

    def _debug(self, held: Held, outcome: str, message: str, *args: object) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                message, *args,
                extra=job_fields(held.job, self.worker_id, outcome, held.ran_s),
            )  # fmt: skip

    # Heartbeats

    def beat_interval(self) -> float:
        """How long to sleep between looks for claims due a heartbeat."""
        with self.changed:
            leases = [held.lease_s for held in self._held.values()]
        shortest = min(leases, default=self.default_lease_s)
        return min(max(shortest / 6, 0.01), 1.0)

    def due_for_beat(self) -> list[Held]:
        """Up to ``BEAT_ROUND`` claims due a heartbeat now (a third of a lease after
        their claim or last renewal): running jobs first, then the most overdue.

        When heartbeats fall behind (a batch too large to renew in time), a
        running job's claim is the one that must not lapse (a held one that
        lapses is not started), so the keeper asks again after each round,
        and a job started meanwhile goes to the front.
        """
        now = time.monotonic()
        with self.changed:
            due = [held for held in self._held.values() if held.beat_at <= now]
        return heapq.nsmallest(
            BEAT_ROUND, due, key=lambda held: (held.ran_from is None, held.beat_at)
        )

    def beat_answered(self, held: Held, sent_at: float, alive: bool) -> None:
        """A heartbeat sent at ``sent_at`` returned ``alive``."""
        self.outage.succeeded()
        held.beat_at = sent_at + held.lease_s / 3
        if alive:
            held.lapses_at = sent_at + held.lease_s
        elif not held.heartbeat_failed:
            held.heartbeat_failed = held.lapse_told = True
            job = held.job
            log.warning(
                "job %s of %r lost its claim while running (attempt %d of %d); "
                "another worker may run it",
                job.id, job.queue, job.attempts, job.max_attempts,
                extra=job_fields(job, self.worker_id, LAPSED),
            )  # fmt: skip

    def beat_failed(self, held: Held, error: BaseException) -> None:
        # Not lost yet: the claim holds until its deadline. Try again soon.
        pause = self._outage_pause(f"heartbeating job {held.job.id}", error)
        held.beat_at = time.monotonic() + min(pause, held.lease_s / 3)

    # Stopping

    def abort(self, error: BaseException) -> None:
        """Stop the worker from inside; its run re-raises ``error`` once it has shut down."""
        with self.changed:
            if self.aborted is None:
                self.aborted = error
            self.changed.notify_all()
            pokes = list(self._pokes)
        for poke in pokes:
            poke()

    def hurry(self) -> None:
        """End a shutdown's grace period now."""
        self.hurried.set()
        with self.changed:
            self.changed.notify_all()
            pokes = list(self._pokes)
        for poke in pokes:
            poke()

    def take_unstarted(self) -> list[Held]:
        """At shutdown: the held jobs no handler started, which none may start now."""
        with self.changed:
            waiting = [held for held in self._held.values() if not held.started]
            for held in waiting:
                held.started = True
            return waiting

    def all_held(self) -> list[Held]:
        with self.changed:
            return list(self._held.values())

    def note_cut_short(self) -> None:
        """The grace period ended with jobs still running: they are released."""
        running = self.in_flight()
        if running:
            log.warning("grace period cut short: releasing %d running jobs", running)

    def raise_if_aborted(self) -> None:
        with self.changed:
            error, self.aborted = self.aborted, None
        if error is not None:
            raise error

    def guarded(self, target: Callable[[], None], role: str) -> Callable[[], None]:
        """``target`` for a thread of the worker: its death stops the worker, loudly."""

        def run() -> None:
            try:
                target()
            except BaseException as exc:
                self.helper_died(role, exc)

        return run

    def helper_died(self, role: str, error: BaseException) -> None:
        """A thread or task of the worker died of ``error``: stop the worker, loudly."""
        log.error(
            "the worker's %s died; the worker stops", role,
            exc_info=(type(error), error, error.__traceback__),
        )  # fmt: skip
        self.abort(error)
