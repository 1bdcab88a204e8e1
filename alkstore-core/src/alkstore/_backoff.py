"""The retry backoff curve: equal-jitter exponential, capped at one day.

Every engine computes ``retry(error, None)`` delays with this one function, so
the arithmetic is identical whichever database holds the job.
"""

from __future__ import annotations

import math
import random

__all__ = ["MAX_BACKOFF_S", "backoff_ceiling", "backoff_delay"]

MAX_BACKOFF_S = 86_400.0
"""No retry is delayed by more than a day."""

_MAX_EXPONENT = 1_023  # 2.0 ** 1024 overflows a float


def backoff_ceiling(base_s: float, attempts: int) -> float:
    """Return ``min(base_s * 2 ** (attempts - 1), 86400)``.

    ``attempts`` is the number of times the job has been claimed, counting the
    claim being retried (so at least 1).
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    if not math.isfinite(base_s) or base_s < 0:
        raise ValueError(f"backoff_base_s must be a finite number >= 0, got {base_s}")
    exponent = min(attempts - 1, _MAX_EXPONENT)
    return min(base_s * 2.0**exponent, MAX_BACKOFF_S)


def backoff_delay(base_s: float, attempts: int, jitter: float | None = None) -> float:
    """Return the delay before the next attempt: uniform in ``[ceiling/2, ceiling]``.

    ``jitter`` in ``[0, 1]`` picks the point in that range (0 → ceiling/2,
    1 → ceiling); ``None`` draws it at random.
    """
    if jitter is None:
        jitter = random.random()
    elif not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be in [0, 1], got {jitter}")
    ceiling = backoff_ceiling(base_s, attempts)
    half = ceiling / 2.0
    return half + half * jitter
