"""Value types returned to callers: wakes, stream events, job snapshots, schedules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from alkstore._payload import HasPayload
from alkstore._short_repr import dataclass_repr

__all__ = ["JobInfo", "JobState", "Schedule", "StreamEvent", "Wake"]

JobState = Literal["pending", "processing", "dead"]
"""Where a job row stands: ``pending`` (ready, scheduled or expired), ``processing``
(claimed) or ``dead`` (in dead letters)."""


@dataclass(frozen=True, slots=True)
class Wake:
    """Something on ``channel`` changed: re-read the state you care about.

    A wake never carries the payload. Wakes are at-least-once and may be
    coalesced, so handling one must be idempotent.
    """

    channel: str
    """The channel that was notified."""


@dataclass(frozen=True, slots=True)
class StreamEvent(HasPayload):
    """One committed event of a stream."""

    offset: int
    """Position in the stream: positive, strictly increasing, commit-ordered."""
    stream: str
    """The stream's name."""
    key: str | None
    """The key given to ``publish_with_key``, else None."""
    payload: Any
    """The event's payload, as published (``payload_as`` builds a type from it)."""
    created_at: float
    """Unix seconds when the event was published."""

    __repr__ = dataclass_repr


@dataclass(frozen=True, slots=True)
class JobInfo(HasPayload):
    """A snapshot of one job row, in any state, as ``Queue.get_job`` saw it."""

    id: int
    """The job's id: positive, unique across the store."""
    queue: str
    """The queue's name."""
    state: JobState
    """``pending``, ``processing`` or ``dead``."""
    payload: Any
    """The job's payload, as enqueued (``payload_as`` builds a type from it)."""
    priority: int
    """Higher is claimed first."""
    attempts: int
    """Claims so far (a lapsed claim counts)."""
    max_attempts: int
    """Claims allowed before the job goes to dead letters."""
    run_at: float
    """When the job is (or was) ready, Unix seconds."""
    created_at: float
    """When the job was enqueued, Unix seconds."""
    expires_at: float | None
    """When a pending job stops being handed out, Unix seconds; None never."""
    worker_id: str | None
    """Who holds the claim while processing; who held the last one otherwise."""
    deadline: float | None
    """When the current claim lapses; None unless processing."""
    last_error: str | None
    """The last failure's message (a handler's exception, a lapse, an expiry), else None."""
    died_at: float | None
    """When the job went to dead letters; None unless dead."""
    key: str | None = None
    """The job's unique key (``EnqueueOpts.key``), else None."""

    __repr__ = dataclass_repr


@dataclass(frozen=True, slots=True)
class Schedule:
    """A named schedule: enqueue ``payload`` into ``queue`` at every boundary of ``spec``."""

    name: str
    """The schedule's name."""
    spec: str
    """``@every N{s,m,h,d}``, a five-field cron expression or an alias such as ``@daily``."""
    queue: str
    """The queue each fire enqueues into."""
    payload: Any
    """The payload of each fire's job."""
    next_fire_at: float
    """Unix seconds of the next boundary a runner will fire."""
    tz: str | None = None
    """The time zone of a cron spec, as given in ``ScheduleOpts.tz``; None for
    UTC (the default) and for ``@every`` specs."""
    last_fire_at: float | None = None
    """Unix seconds of the boundary a runner fired last (its job enqueued); None
    before the first. A boundary skipped after a long outage is not a fire;
    changing the schedule keeps it (engine contract 1.7)."""

    __repr__ = dataclass_repr
