"""The schedule spec grammar (``@every <n><unit>``) and boundary arithmetic.

A schedule's boundaries are anchored at its creation time: ``anchor + k *
interval`` for k = 1, 2, ... Engines ask :func:`plan_fires` which boundaries a
runner owes, so catch-up and skip-forward behave identically on every engine.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from alkstore._errors import InvalidSpec

__all__ = [
    "MAX_CATCH_UP",
    "MAX_INTERVAL_S",
    "FirePlan",
    "PlacedSchedule",
    "first_boundary_after",
    "parse_every",
    "place_schedule",
    "plan_fires",
]

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}

MAX_INTERVAL_S = 36_500 * 86_400
"""The longest interval a spec may name: 36,500 days (about a century)."""

MAX_CATCH_UP = 64
"""At most this many missed boundaries are fired; past that, skip forward."""

_SPEC = re.compile(r"@every ([1-9][0-9]*)([smhd])", re.ASCII)


def parse_every(spec: object) -> int:
    """Return the interval in seconds that ``spec`` names.

    The grammar is exactly ``@every <n><unit>``: one space, ``n`` a positive
    decimal integer without leading zeros, ``unit`` one of ``s m h d``.

    Raises:
        InvalidSpec: anything else, cron strings included, naming what is wrong.
    """
    if not isinstance(spec, str):
        raise InvalidSpec(f"schedule spec must be a str, not {type(spec).__name__}")
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise InvalidSpec(
            f"schedule spec {spec!r} is not '@every <n><unit>' "
            "(n a positive integer without leading zeros, unit one of s, m, h, d; "
            "cron strings are not supported)"
        )
    digits, unit = match[1], match[2]
    # Bound the digits first: int() of thousands of digits is slow or refused.
    if len(digits) > 12 or int(digits) * UNIT_SECONDS[unit] > MAX_INTERVAL_S:
        raise InvalidSpec(f"schedule spec {spec!r} names more than 36500 days")
    return int(digits) * UNIT_SECONDS[unit]


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
    anchor: float
    next_fire_at: float


def place_schedule(
    existing: PlacedSchedule | None, spec: str, interval_s: float, now: float
) -> PlacedSchedule:
    """Where ``store.schedule(...)`` puts a schedule, given where it stood.

    A new schedule is anchored at ``now`` and first fires one interval later.
    Replacing it with the same spec changes nothing of its timing (a deploy
    that re-declares its schedules must not delay them); with another spec it
    keeps its anchor and resumes at the first new boundary after ``now``.
    Engines call this inside the transaction that reads and upserts the row.
    """
    if existing is None:
        return PlacedSchedule(spec, now, now + interval_s)
    if existing.spec == spec:
        return existing
    return PlacedSchedule(
        spec, existing.anchor, first_boundary_after(existing.anchor, interval_s, now)
    )
