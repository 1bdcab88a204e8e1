"""The equal-jitter backoff curve every engine uses for ``retry(error, None)``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alkstore._backoff import MAX_BACKOFF_S, backoff_delay
from alkstore.engine import backoff_ceiling

bases = st.floats(0, 10_000, allow_nan=False)
attempts = st.integers(1, 10_000)
jitters = st.floats(0, 1)


@given(bases, attempts)
def test_ceiling_doubles_per_attempt_and_caps_at_a_day(base: float, attempt: int) -> None:
    ceiling = backoff_ceiling(base, attempt)
    assert ceiling <= 86_400
    assert ceiling == min(base * 2.0 ** min(attempt - 1, 1_023), 86_400)


@given(bases, attempts)
def test_random_delay_lies_in_half_ceiling_to_ceiling(base: float, attempt: int) -> None:
    ceiling = backoff_ceiling(base, attempt)
    delay = backoff_delay(base, attempt)
    assert ceiling / 2 <= delay <= ceiling


@given(bases, attempts, jitters)
def test_jitter_picks_the_point_in_the_range(base: float, attempt: int, jitter: float) -> None:
    ceiling = backoff_ceiling(base, attempt)
    delay = backoff_delay(base, attempt, jitter)
    assert ceiling / 2 <= delay <= ceiling
    assert delay == pytest.approx(ceiling / 2 + jitter * ceiling / 2)


@given(bases, st.integers(1, 100))
def test_ceiling_never_shrinks_with_more_attempts(base: float, attempt: int) -> None:
    assert backoff_ceiling(base, attempt + 1) >= backoff_ceiling(base, attempt)


def test_the_documented_curve() -> None:
    assert [backoff_ceiling(5, n) for n in range(1, 6)] == [5, 10, 20, 40, 80]
    assert backoff_delay(5, 1, jitter=0.0) == 2.5
    assert backoff_delay(5, 1, jitter=1.0) == 5.0
    assert backoff_ceiling(5, 20) == MAX_BACKOFF_S == 86_400
    assert backoff_ceiling(5, 1_000_000) == 86_400


def test_random_delays_spread_over_the_range() -> None:
    delays = {backoff_delay(8, 1) for _ in range(200)}
    assert min(delays) < 5
    assert max(delays) > 7


@pytest.mark.parametrize(
    ("base", "attempt", "jitter", "says"),
    [
        (5, 0, None, "attempts"),
        (-1, 1, None, "backoff_base_s"),
        (float("nan"), 1, None, "backoff_base_s"),
        (float("inf"), 1, None, "backoff_base_s"),
        (5, 1, 1.5, "jitter"),
        (5, 1, -0.1, "jitter"),
    ],
)
def test_nonsense_inputs_are_refused(
    base: float, attempt: int, jitter: float | None, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        backoff_delay(base, attempt, jitter)
