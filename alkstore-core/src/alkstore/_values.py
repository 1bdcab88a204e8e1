"""Value types returned to callers: wakes, stream events, job snapshots, schedules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from alkstore._payload import HasPayload

__all__ = ["JobInfo", "JobState", "Schedule", "StreamEvent", "Wake"]

JobState = Literal["pending", "processing", "dead"]


@dataclass(frozen=True, slots=True)
class Wake:
    """Something on ``channel`` changed: re-read the state you care about.

    A wake never carries the payload. Wakes are at-least-once and may be
    coalesced, so handling one must be idempotent.
    """

    channel: str


@dataclass(frozen=True, slots=True)
class StreamEvent(HasPayload):
    """One committed event of a stream."""

    offset: int
    """Position in the stream: positive, strictly increasing, commit-ordered."""
    stream: str
    key: str | None
    """The key given to ``publish_with_key``, else None."""
    payload: Any
    created_at: float
    """Unix seconds when the event was published."""


@dataclass(frozen=True, slots=True)
class JobInfo(HasPayload):
    """A snapshot of one job row, in any state, as ``Queue.get_job`` saw it."""

    id: int
    queue: str
    state: JobState
    payload: Any
    priority: int
    attempts: int
    """Claims so far (a lapsed claim counts)."""
    max_attempts: int
    run_at: float
    """When the job is (or was) ready, Unix seconds."""
    created_at: float
    expires_at: float | None
    worker_id: str | None
    """Who holds the claim while processing; who held the last one otherwise."""
    deadline: float | None
    """When the current claim lapses; None unless processing."""
    last_error: str | None
    died_at: float | None
    """When the job went to dead letters; None unless dead."""
    key: str | None = None
    """The job's unique key (``EnqueueOpts.key``), else None."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A named schedule: enqueue ``payload`` into ``queue`` at every boundary of ``spec``."""

    name: str
    spec: str
    queue: str
    payload: Any
    next_fire_at: float
    """Unix seconds of the next boundary a runner will fire."""
    tz: str | None = None
    """The time zone of a cron spec, as given in ``ScheduleOpts.tz``; None for
    UTC (the default) and for ``@every`` specs."""
