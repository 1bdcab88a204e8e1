"""Inspection: a read-only view of every mechanism's stored state, for operators.

``store.inspect()`` returns an :class:`Inspector`. Each call is one short
read; none takes a lock a worker waits on, so a dashboard may call them every
second on a busy store.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, get_args

from alkstore._names import check_identifier
from alkstore._options import check_int
from alkstore._values import JobInfo, JobState, Schedule

if TYPE_CHECKING:
    from alkstore._store import Store

__all__ = [
    "JOB_STATES",
    "MAX_JOBS_LISTED",
    "ConsumerStats",
    "Inspector",
    "LockInfo",
    "QueueStats",
    "StreamStats",
]

JOB_STATES: tuple[JobState, ...] = get_args(JobState)

MAX_JOBS_LISTED = 10_000
"""The largest ``limit`` :meth:`Inspector.jobs` accepts."""

_MAX_JOB_ID = 2**63 - 1


@dataclass(frozen=True, slots=True)
class QueueStats:
    """How many jobs a queue holds in each state, at one moment.

    The states partition the queue's rows: ``ready + scheduled + expired`` are
    the pending jobs, and ``total`` is every row, dead letters included.
    """

    name: str
    """The queue's name; an outbox's backing queue shows as ``__alkstore_outbox:{name}``."""
    ready: int
    """Pending, ready now and not expired: what the next claims would get."""
    scheduled: int
    """Pending with a future ready time (delayed, or backing off after a retry)."""
    expired: int
    """Pending past their expiry: never handed out; ``sweep_expired`` moves them to dead."""
    processing: int
    """Claimed (a lapsed claim counts until the next claim or sweep returns it)."""
    dead: int
    """Dead letters: jobs that ran out of attempts, failed for good or expired."""
    oldest_ready_age_s: float | None
    """How long the longest-waiting ready job has been ready; None with none ready."""

    @property
    def total(self) -> int:
        """Every row of the queue, dead letters included."""
        return self.ready + self.scheduled + self.expired + self.processing + self.dead


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    """One consumer's saved position in a stream."""

    name: str
    """The consumer's name."""
    offset: int
    """The saved offset (the last event the consumer handled)."""
    lag: int
    """How many events of the stream come after ``offset``."""


@dataclass(frozen=True, slots=True)
class StreamStats:
    """A stream's head and where each of its consumers stands."""

    name: str
    """The stream's name."""
    head: int
    """The offset of the newest committed event; 0 while the stream is empty."""
    consumers: tuple[ConsumerStats, ...]
    """Every consumer with a saved offset, by name."""


@dataclass(frozen=True, slots=True)
class LockInfo:
    """A named lock that is held now (not past its TTL)."""

    name: str
    """The lock's name."""
    owner: str
    """Who holds it."""
    expires_at: float
    """Unix seconds when the hold lapses unless renewed."""


def check_jobs_query(
    queue: object, state: object, limit: object, after: object = None
) -> tuple[str, JobState | None, int, int | None]:
    """The arguments of ``Inspector.jobs``, checked."""
    if not isinstance(queue, str) or not queue:
        raise TypeError(f"queue must be a non-empty str, not {queue!r}")
    queue = check_identifier(queue, "queue name")  # reserved names welcome: outboxes show here
    if state is not None and state not in JOB_STATES:
        raise ValueError(f"state must be one of {', '.join(JOB_STATES)} or None, not {state!r}")
    limit = check_int(limit, "limit", minimum=1, maximum=MAX_JOBS_LISTED)
    if after is not None:
        after = check_int(after, "after", minimum=0, maximum=_MAX_JOB_ID)
    return queue, state, limit, after


def jobs_after_not_in_engine(inspector: object) -> NotImplementedError:
    """The error of an engine written before keyset listing (contract 1.6)."""
    return NotImplementedError(
        f"{inspector!r}: its engine does not implement jobs(after=...) (engine contract 1.6); "
        "upgrade the engine"
    )


class Inspector(abc.ABC):
    """Read-only listings of a store's queues, jobs, streams, locks and schedules.

    Lists are sorted by name (jobs by id) and reflect one moment each; two
    calls may see different moments. Reserved names (the scheduler lock, outbox
    backing queues) are listed like any other: they are part of the state.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def queues(self) -> list[QueueStats]:
        """Every queue that holds at least one row, in any state."""
        self._store._check_open()
        return self._queues()

    def jobs(
        self,
        queue: str,
        state: JobState | None = None,
        *,
        limit: int = 100,
        after: int | None = None,
    ) -> list[JobInfo]:
        """The first ``limit`` jobs of ``queue`` by id, in ``state`` or in any state.

        ``queue`` may be any queue name, an outbox's backing queue included.
        Dead letters carry ``last_error`` and ``died_at``. With ``after``, only
        jobs whose id is greater: pass the last id of one page to get the next
        (keyset pagination, read from an index however deep the page).
        """
        self._store._check_open()
        queue, state, limit, after = check_jobs_query(queue, state, limit, after)
        if after is None:
            return self._jobs(queue, state, limit)
        return self._jobs_after(queue, state, limit, after)

    def streams(self) -> list[StreamStats]:
        """Every stream with an event or a saved consumer offset."""
        self._store._check_open()
        return self._streams()

    def locks(self) -> list[LockInfo]:
        """Every lock held now; expired holds are left out."""
        self._store._check_open()
        return self._locks()

    def schedules(self) -> list[Schedule]:
        """Every schedule, with the next boundary a runner will fire."""
        self._store._check_open()
        return self._schedules()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._store!r}>"

    # Engine hooks: arguments are already checked.

    @abc.abstractmethod
    def _queues(self) -> list[QueueStats]:
        """Count rows per queue and state, sorted by queue name."""

    @abc.abstractmethod
    def _jobs(self, queue: str, state: JobState | None, limit: int) -> list[JobInfo]:
        """List up to ``limit`` jobs of ``queue`` in ``state`` (any when None), by id."""

    def _jobs_after(
        self, queue: str, state: JobState | None, limit: int, after: int
    ) -> list[JobInfo]:
        """Like ``_jobs``, only jobs with an id greater than ``after`` (contract 1.6)."""
        raise jobs_after_not_in_engine(self)

    @abc.abstractmethod
    def _streams(self) -> list[StreamStats]:
        """List streams by name, each with its consumers by name."""

    @abc.abstractmethod
    def _locks(self) -> list[LockInfo]:
        """List unexpired locks by name."""

    @abc.abstractmethod
    def _schedules(self) -> list[Schedule]:
        """List schedules by name."""
