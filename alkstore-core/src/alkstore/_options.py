"""Options for queues, enqueues and schedules, validated on construction.

A bad value raises ``ValueError`` naming the field (an unknown time zone
``InvalidSpec``, a ``ValueError`` too), so a mistake surfaces where it is
written, not later inside an engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from alkstore._cron import check_tz
from alkstore._names import check_identifier

__all__ = [
    "MAX_DURATION_S",
    "OUTBOX_QUEUE_OPTS",
    "EnqueueOpts",
    "QueueOpts",
    "ScheduleOpts",
]

MAX_DURATION_S = 36_500 * 86_400.0
"""The longest duration any option accepts: 36,500 days (about a century)."""

MAX_TIMESTAMP = 253_402_300_799.0
"""The latest ``run_at`` accepted: 9999-12-31T23:59:59Z."""

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def check_duration(value: object, field: str, *, zero_ok: bool) -> float:
    """Return ``value`` as float seconds if it is a sane duration.

    Raises:
        ValueError: naming ``field``, for a non-number, NaN, infinity, a
            negative value (or zero unless ``zero_ok``) or more than a century.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"{field} must be finite, got {value!r}")
    if seconds < 0 or (seconds == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ValueError(f"{field} must be {bound} seconds, got {value!r}")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{field} must be at most {MAX_DURATION_S:.0f} seconds, got {value!r}")
    return seconds


def option_seconds(name: str, value: object, *, maximum: float = 86_400.0) -> float:
    """An engine option in seconds: a number, or its text from a URL query string.

    Raises:
        ValueError: naming ``name``, unless ``0 < value <= maximum``.
    """
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number of seconds, not {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 < seconds <= maximum):
        raise ValueError(
            f"{name} must be more than 0 and at most {maximum:g} seconds, got {value!r}"
        )
    return seconds


def check_int(
    value: object, field: str, *, minimum: int = _INT32_MIN, maximum: int = _INT32_MAX
) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[minimum, maximum]``.

    Raises:
        ValueError: naming ``field``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an int, not {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{field} must be in [{minimum}, {maximum}], got {value}")
    return value


def check_flag(value: object, field: str) -> bool:
    """Return ``value`` if it is a bool (``1`` or ``"no"`` are mistakes, not flags)."""
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be a bool, not {type(value).__name__}")
    return value


def check_timestamp(value: object, field: str) -> float:
    """Return ``value`` as Unix seconds: a number, or a timezone-aware datetime.

    Raises:
        ValueError: naming ``field``, for a naive datetime or an absurd time.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{field} must be timezone-aware; a naive datetime is ambiguous")
        seconds = value.timestamp()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"{field} must be Unix seconds or an aware datetime, not {type(value).__name__}"
        )
    else:
        seconds = float(value)
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_TIMESTAMP):
        raise ValueError(f"{field} must be a time between 1970 and 9999, got {value!r}")
    return seconds


def _set(instance: object, field: str, value: object) -> None:
    """Normalise a field of a frozen dataclass during ``__post_init__``."""
    object.__setattr__(instance, field, value)


@dataclass(frozen=True, slots=True)
class QueueOpts:
    """How jobs of a queue behave; stamped onto each job row at enqueue.

    Queues are names, not config owners: declaring new opts affects jobs
    enqueued afterwards and never rewrites existing rows.
    """

    visibility_timeout_s: float = 300.0
    """How long a claim lasts before the job may be claimed again (> 0)."""
    max_attempts: int = 3
    """Claims a job gets before it goes to dead letters (>= 1)."""
    backoff_base_s: float = 5.0
    """Base of the retry backoff curve (>= 0)."""
    dead_letter_retention_s: float | None = None
    """How long ``sweep_expired`` keeps dead rows; None keeps them forever."""

    def __post_init__(self) -> None:
        _set(
            self,
            "visibility_timeout_s",
            check_duration(self.visibility_timeout_s, "visibility_timeout_s", zero_ok=False),
        )
        check_int(self.max_attempts, "max_attempts", minimum=1)
        _set(
            self,
            "backoff_base_s",
            check_duration(self.backoff_base_s, "backoff_base_s", zero_ok=True),
        )
        if self.dead_letter_retention_s is not None:
            _set(
                self,
                "dead_letter_retention_s",
                check_duration(
                    self.dead_letter_retention_s, "dead_letter_retention_s", zero_ok=True
                ),
            )


OUTBOX_QUEUE_OPTS = QueueOpts(
    visibility_timeout_s=60.0, max_attempts=5, backoff_base_s=5.0, dead_letter_retention_s=None
)
"""The options of every outbox's backing queue."""


@dataclass(frozen=True, slots=True)
class EnqueueOpts:
    """Per-job options; each overrides nothing but what it names."""

    delay: float | None = None
    """Seconds from enqueue until the job is ready (>= 0). Exclusive with ``run_at``."""
    run_at: float | datetime | None = None
    """When the job is ready: Unix seconds or an aware datetime, compared with the
    database's clock (on PostgreSQL the server's, not this host's). Exclusive with ``delay``."""
    priority: int = 0
    """Higher is claimed first (32-bit signed range)."""
    max_attempts: int | None = None
    """Overrides the queue's ``max_attempts`` for this job (>= 1)."""
    expires: float | None = None
    """Seconds from enqueue after which the job is never handed out (> 0)."""
    key: str | None = None
    """A unique key: at most one live job (ready, scheduled or processing) per
    ``(queue, key)``. Enqueueing while one lives writes nothing and returns its
    id; once it is acked, cancelled or dead the key is free again."""

    def __post_init__(self) -> None:
        if self.delay is not None and self.run_at is not None:
            raise ValueError("delay and run_at are exclusive: give at most one")
        if self.delay is not None:
            _set(self, "delay", check_duration(self.delay, "delay", zero_ok=True))
        if self.run_at is not None:
            _set(self, "run_at", check_timestamp(self.run_at, "run_at"))
        check_int(self.priority, "priority")
        if self.max_attempts is not None:
            check_int(self.max_attempts, "max_attempts", minimum=1)
        if self.expires is not None:
            _set(self, "expires", check_duration(self.expires, "expires", zero_ok=False))
        if self.key is not None:
            check_identifier(self.key, "key")


@dataclass(frozen=True, slots=True)
class ScheduleOpts:
    """Options of the job a schedule enqueues at each boundary."""

    priority: int = 0
    """Priority of each enqueued job (32-bit signed range)."""
    max_attempts: int | None = None
    """Overrides the target queue's ``max_attempts`` (>= 1)."""
    expires: float | None = None
    """Seconds after each fire when its job expires (> 0)."""
    tz: str | None = None
    """The IANA time zone a cron spec's fields are read in (``"Europe/Berlin"``);
    None is UTC. An ``@every`` spec takes none. An unknown zone raises
    ``InvalidSpec`` here."""
    key: str | None = None
    """A unique key for each fire's job (``EnqueueOpts.key``): a boundary that
    comes while the previous fire's job is still live adds no job."""

    def __post_init__(self) -> None:
        check_int(self.priority, "priority")
        if self.max_attempts is not None:
            check_int(self.max_attempts, "max_attempts", minimum=1)
        if self.expires is not None:
            _set(self, "expires", check_duration(self.expires, "expires", zero_ok=False))
        if self.tz is not None:
            check_tz(self.tz)
        if self.key is not None:
            check_identifier(self.key, "key")

    def as_enqueue_opts(self) -> EnqueueOpts:
        """Return the EnqueueOpts each fire of the schedule uses."""
        return EnqueueOpts(
            priority=self.priority, max_attempts=self.max_attempts, expires=self.expires,
            key=self.key,
        )  # fmt: skip
