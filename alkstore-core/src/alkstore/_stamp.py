"""Stamping: what is written onto a job row at enqueue.

Resolution happens here, once, for every engine: the queue's declared
:class:`QueueOpts` merged with the job's :class:`EnqueueOpts`. Engines write a
:class:`JobStamp` as it is; only "now" comes from the engine (on PostgreSQL,
the database server's clock).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from alkstore._options import EnqueueOpts, QueueOpts

__all__ = ["JobStamp", "stamp_job"]

_DEFAULT_ENQUEUE_OPTS = EnqueueOpts()


@dataclass(frozen=True, slots=True)
class JobStamp:
    """Everything an engine writes onto a new job row besides its payload."""

    priority: int
    """The job's priority: higher is claimed first."""
    max_attempts: int
    """Claims the job may take before it goes to dead letters."""
    visibility_timeout_s: float
    """How long a claim lasts before another worker may reclaim the job."""
    backoff_base_s: float
    """The first retry's delay; each later retry waits twice as long, up to a day."""
    dead_letter_retention_s: float | None
    """How long ``sweep_expired`` keeps a dead letter; None keeps it until purged."""
    delay_s: float
    """Ready at ``now + delay_s`` when ``run_at`` is None."""
    run_at: float | None
    """Ready at this Unix time (absolute, from the caller)."""
    expires_in_s: float | None
    """Expires at ``now + expires_in_s``; None never expires."""
    key: str | None = None
    """The unique key (``EnqueueOpts.key``): the engine writes no second live
    job of the queue with this key (contract 1.4)."""
    traceparent: str | None = None
    """The W3C ``traceparent`` of the enqueue's span, when OpenTelemetry traces
    it: stored on the row and handed back as ``Job.traceparent`` (contract 1.4)."""


def stamp_job(queue_opts: QueueOpts, opts: EnqueueOpts | None) -> JobStamp:
    """Resolve the stamp of one job: ``opts`` over ``queue_opts``."""
    if opts is None:
        return _plain_stamp(queue_opts)
    if not isinstance(opts, EnqueueOpts):
        raise TypeError(f"opts must be EnqueueOpts or None, not {type(opts).__name__}")
    return _stamp(queue_opts, opts)


@functools.lru_cache(maxsize=256)
def _plain_stamp(queue_opts: QueueOpts) -> JobStamp:
    """The stamp of a job enqueued without options: the same for every such job."""
    return _stamp(queue_opts, _DEFAULT_ENQUEUE_OPTS)


def _stamp(queue_opts: QueueOpts, opts: EnqueueOpts) -> JobStamp:
    run_at = opts.run_at
    assert run_at is None or isinstance(run_at, float)  # normalised by EnqueueOpts
    return JobStamp(
        priority=opts.priority,
        max_attempts=queue_opts.max_attempts if opts.max_attempts is None else opts.max_attempts,
        visibility_timeout_s=queue_opts.visibility_timeout_s,
        backoff_base_s=queue_opts.backoff_base_s,
        dead_letter_retention_s=queue_opts.dead_letter_retention_s,
        delay_s=opts.delay or 0.0,
        run_at=run_at,
        expires_in_s=opts.expires,
        key=opts.key,
    )
