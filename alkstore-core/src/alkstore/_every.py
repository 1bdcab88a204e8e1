"""The schedule spec grammar (``@every <n><unit>``) and boundary arithmetic.

An ``@every`` schedule's boundaries are anchored at its creation time: ``anchor
+ k * interval`` for k = 1, 2, ... A cron schedule's are wall-clock times in its
zone (``_cron``). Core's scheduler asks :func:`plan_fires` (or
:func:`plan_cron_fires`) which boundaries a runner owes, so catch-up and
skip-forward behave identically on every engine.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from alkstore._cron import CronSpec, is_cron, parse_cron
from alkstore._errors import InvalidSpec

__all__ = [
    "MAX_CATCH_UP",
    "MAX_INTERVAL_S",
    "MAX_SKIPPED_COUNTED",
    "FirePlan",
    "PlacedSchedule",
    "first_boundary_after",
    "parse_every",
    "parse_spec",
    "place_schedule",
    "plan_cron_fires",
    "plan_fires",
]

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}

MAX_INTERVAL_S = 36_500 * 86_400
"""The longest interval a spec may name: 36,500 days (about a century)."""

MAX_CATCH_UP = 64
"""At most this many missed boundaries are fired; past that, skip forward."""

MAX_SKIPPED_COUNTED = 1_000
"""A cron plan counts skipped boundaries up to this many (each is a step of the
cron arithmetic); past it, ``FirePlan.skipped`` is a lower bound."""

_SPEC = re.compile(r"@every ([1-9][0-9]*)([smhd])", re.ASCII)


def parse_every(spec: object) -> int:
    """Return the interval in seconds that ``spec`` names.

    The grammar is exactly ``@every <n><unit>``: one space, ``n`` a positive
    decimal integer without leading zeros, ``unit`` one of ``s m h d``.

    Raises:
        InvalidSpec: anything else, naming what is wrong.
    """
    if not isinstance(spec, str):
        raise InvalidSpec(f"schedule spec must be a str, not {type(spec).__name__}")
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise InvalidSpec(
            f"schedule spec {spec!r} is not '@every <n><unit>' "
            "(n a positive integer without leading zeros, unit one of s, m, h, d)"
        )
    digits, unit = match[1], match[2]
    # Bound the digits first: int() of thousands of digits is slow or refused.
    if len(digits) > 12 or int(digits) * UNIT_SECONDS[unit] > MAX_INTERVAL_S:
        raise InvalidSpec(f"schedule spec {spec!r} names more than 36500 days")
    return int(digits) * UNIT_SECONDS[unit]


def parse_spec(spec: object, tz: str | None) -> int:
    """Check ``spec`` in zone ``tz``; return its interval in seconds, 0 for a cron spec.

    Raises:
        InvalidSpec: ``spec`` is neither ``@every <n><unit>`` nor a cron spec
            (see ``parse_cron``), or an ``@every`` spec was given a zone: an
            interval is elapsed time, not a wall-clock time, so no zone moves it.
    """
    if not isinstance(spec, str):
        raise InvalidSpec(f"schedule spec must be a str, not {type(spec).__name__}")
    if is_cron(spec):
        parse_cron(spec, tz)
        return 0
    interval_s = parse_every(spec)
    if tz is not None:
        raise InvalidSpec(
            f"schedule spec {spec!r} is an interval, which no time zone moves: "
            f"ScheduleOpts(tz={tz!r}) applies only to cron specs (leave tz out, or "
            "use a cron spec such as '0 3 * * *')"
        )
    return interval_s


@dataclass(frozen=True, slots=True)
class FirePlan:
    """Which boundaries a scheduler runner fires now, and where it goes next."""

    fire_at: tuple[float, ...]
    """Elapsed boundaries to fire, oldest first, at most :data:`MAX_CATCH_UP`."""
    next_fire_at: float
    """The first boundary after ``now``: the schedule's next fire time once
    every boundary in ``fire_at`` has fired."""
    skipped: int
    """Elapsed boundaries dropped because they exceeded the catch-up cap."""
    skipped_at_least: bool = False
    """True when ``skipped`` is a lower bound: counting stopped at
    :data:`MAX_SKIPPED_COUNTED` (cron plans only)."""


def plan_fires(next_fire_at: float, interval_s: float, now: float) -> FirePlan:
    """Plan the fires a runner owes at ``now`` for a schedule due at ``next_fire_at``.

    Every boundary ``next_fire_at + k * interval_s <= now`` has elapsed. The
    oldest :data:`MAX_CATCH_UP` of them fire; the rest are skipped, and the
    schedule moves on to the first boundary after ``now``.
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    if now < next_fire_at:
        return FirePlan(fire_at=(), next_fire_at=next_fire_at, skipped=0)
    elapsed = math.floor((now - next_fire_at) / interval_s) + 1
    # Float division can land one step off near a boundary: settle it exactly.
    while next_fire_at + elapsed * interval_s <= now:
        elapsed += 1
    while elapsed > 1 and next_fire_at + (elapsed - 1) * interval_s > now:
        elapsed -= 1
    fired = min(elapsed, MAX_CATCH_UP)
    return FirePlan(
        fire_at=tuple(next_fire_at + k * interval_s for k in range(fired)),
        next_fire_at=next_fire_at + elapsed * interval_s,
        skipped=elapsed - fired,
    )


def plan_cron_fires(next_fire_at: float, cron: CronSpec, now: float) -> FirePlan:
    """Plan the fires a runner owes at ``now`` for a cron schedule due at ``next_fire_at``.

    The same rules as :func:`plan_fires`: ``next_fire_at`` and every later
    boundary up to ``now`` have elapsed; the oldest :data:`MAX_CATCH_UP` fire,
    the rest are skipped, and the schedule moves on to the first boundary
    after ``now``.
    """
    if now < next_fire_at:
        return FirePlan(fire_at=(), next_fire_at=next_fire_at, skipped=0)
    fire_at = [next_fire_at]
    boundary = cron.next_after(next_fire_at)
    while boundary <= now and len(fire_at) < MAX_CATCH_UP:
        fire_at.append(boundary)
        boundary = cron.next_after(boundary)
    skipped = 0
    while boundary <= now and skipped < MAX_SKIPPED_COUNTED:
        skipped += 1
        boundary = cron.next_after(boundary)
    if boundary <= now:  # too many to count: go straight to the first after now
        return FirePlan(tuple(fire_at), cron.next_after(now), skipped, skipped_at_least=True)
    return FirePlan(tuple(fire_at), boundary, skipped)


def first_boundary_after(anchor: float, interval_s: float, now: float) -> float:
    """The first boundary ``anchor + k * interval_s`` (k >= 1) later than ``now``.

    Where a schedule whose spec changed resumes: its boundaries stay anchored
    at its creation time.
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    steps = max(1, math.floor((now - anchor) / interval_s) + 1)
    while anchor + steps * interval_s <= now:
        steps += 1
    return anchor + steps * interval_s


@dataclass(frozen=True, slots=True)
class PlacedSchedule:
    """Where a schedule stands: its spec, its anchor and its next boundary."""

    spec: str
    """The spec as given: ``@every ...``, a cron expression or a cron alias."""
    anchor: float
    """When the schedule was created (an ``@every`` schedule's grid starts there)."""
    next_fire_at: float
    """Unix seconds of the next boundary to fire."""
    tz: str | None = None
    """The time zone of a cron spec as given (``ScheduleOpts.tz``); None for
    UTC and for ``@every`` (engine contract 1.4)."""


def place_schedule(
    existing: PlacedSchedule | None,
    spec: str,
    interval_s: float,
    now: float,
    tz: str | None = None,
) -> PlacedSchedule:
    """Where ``store.schedule(...)`` puts a schedule, given where it stood.

    A new schedule is anchored at ``now``; an ``@every`` one first fires one
    interval later, a cron one at its first boundary after ``now`` (in zone
    ``tz``; ``interval_s`` is 0 for a cron spec). Replacing it with the same
    spec and zone changes nothing of its timing (a deploy that re-declares its
    schedules must not delay them); with another spec or zone it keeps its
    anchor and resumes at the first new boundary after ``now``. Engines call
    this inside the transaction that reads and upserts the row.

    Raises:
        InvalidSpec: ``spec`` (with ``tz``) is not a valid spec.
    """
    if existing is not None and existing.spec == spec and existing.tz == tz:
        return existing
    anchor = now if existing is None else existing.anchor
    if is_cron(spec):
        return PlacedSchedule(spec, anchor, parse_cron(spec, tz).next_after(now), tz)
    if existing is None:
        return PlacedSchedule(spec, now, now + interval_s, tz)
    return PlacedSchedule(spec, anchor, first_boundary_after(anchor, interval_s, now), tz)
