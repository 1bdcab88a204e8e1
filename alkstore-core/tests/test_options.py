"""Options validate on construction and name the field they refuse."""

from __future__ import annotations

import datetime
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alkstore import EnqueueOpts, QueueOpts, ScheduleOpts
from alkstore._options import OUTBOX_QUEUE_OPTS, option_seconds
from alkstore._stamp import stamp_job

NOT_NUMBERS = ["5", None, True, [1], object()]
NOT_INTS = [1.0, "1", True, None]


def test_queue_defaults_are_the_contracts() -> None:
    assert QueueOpts() == QueueOpts(300, 3, 5, None)


def test_the_outbox_queue_uses_60_5_5_forever() -> None:
    assert QueueOpts(60, 5, 5, None) == OUTBOX_QUEUE_OPTS


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("visibility_timeout_s", -1),
        ("visibility_timeout_s", 0),
        ("visibility_timeout_s", math.nan),
        ("visibility_timeout_s", math.inf),
        ("visibility_timeout_s", 1e12),
        ("backoff_base_s", -0.5),
        ("backoff_base_s", math.nan),
        ("dead_letter_retention_s", -1),
        ("max_attempts", 0),
        ("max_attempts", -3),
        ("max_attempts", 2**31),
        *[("visibility_timeout_s", value) for value in NOT_NUMBERS],
        *[("max_attempts", value) for value in NOT_INTS],
    ],
)
def test_queue_opts_refuse_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        QueueOpts(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("delay", -1),
        ("delay", math.inf),
        ("delay", "soon"),
        ("run_at", -1),
        ("run_at", math.nan),
        ("run_at", 1e15),
        ("run_at", datetime.datetime(2030, 1, 1)),  # naive: ambiguous
        ("run_at", "2030-01-01"),
        ("priority", 1.5),
        ("priority", "high"),
        ("priority", True),
        ("priority", None),
        ("priority", 2**31),
        ("priority", -(2**31) - 1),
        ("max_attempts", 0),
        ("max_attempts", 2.0),
        ("expires", 0),
        ("expires", -10),
        ("expires", math.nan),
    ],
)
def test_enqueue_opts_refuse_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        EnqueueOpts(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", "1"), ("priority", False), ("max_attempts", 0), ("expires", -1)],
)
def test_schedule_opts_refuse_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ScheduleOpts(**{field: value})  # type: ignore[arg-type]


def test_delay_and_run_at_are_exclusive() -> None:
    with pytest.raises(ValueError, match="delay and run_at"):
        EnqueueOpts(delay=1, run_at=2_000_000_000)


def test_numbers_are_normalised_to_float_seconds() -> None:
    opts = QueueOpts(visibility_timeout_s=30, backoff_base_s=0, dead_letter_retention_s=60)
    assert isinstance(opts.visibility_timeout_s, float)
    assert isinstance(opts.backoff_base_s, float)
    assert isinstance(opts.dead_letter_retention_s, float)


def test_an_aware_run_at_becomes_unix_seconds() -> None:
    moment = datetime.datetime(2030, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert EnqueueOpts(run_at=moment).run_at == 1_893_456_000.0


def test_sub_second_durations_work() -> None:
    assert QueueOpts(visibility_timeout_s=0.05).visibility_timeout_s == 0.05
    assert EnqueueOpts(delay=0.001, expires=0.2).delay == 0.001


def test_options_are_frozen() -> None:
    opts = QueueOpts()
    with pytest.raises(AttributeError):
        opts.max_attempts = 9  # type: ignore[misc]


def test_stamping_takes_the_queue_opts_and_the_jobs_overrides() -> None:
    queue_opts = QueueOpts(visibility_timeout_s=30, max_attempts=4, backoff_base_s=2)
    stamp = stamp_job(queue_opts, EnqueueOpts(priority=7, max_attempts=9, delay=3, expires=60))
    assert stamp.priority == 7
    assert stamp.max_attempts == 9
    assert stamp.visibility_timeout_s == 30
    assert stamp.backoff_base_s == 2
    assert stamp.dead_letter_retention_s is None
    assert stamp.delay_s == 3
    assert stamp.run_at is None
    assert stamp.expires_in_s == 60


@given(st.integers(1, 1_000), st.one_of(st.none(), st.integers(1, 1_000)))
def test_a_job_max_attempts_overrides_the_queue_only_when_given(
    queue_max: int, job_max: int | None
) -> None:
    stamp = stamp_job(QueueOpts(max_attempts=queue_max), EnqueueOpts(max_attempts=job_max))
    assert stamp.max_attempts == (queue_max if job_max is None else job_max)


def test_stamping_without_enqueue_opts_uses_the_defaults() -> None:
    stamp = stamp_job(QueueOpts(), None)
    assert (stamp.priority, stamp.max_attempts, stamp.delay_s, stamp.run_at) == (0, 3, 0.0, None)


def test_stamping_refuses_options_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="EnqueueOpts"):
        stamp_job(QueueOpts(), QueueOpts())  # type: ignore[arg-type]


def test_schedule_opts_become_the_enqueue_opts_of_each_fire() -> None:
    opts = ScheduleOpts(priority=2, max_attempts=4, expires=30)
    assert opts.as_enqueue_opts() == EnqueueOpts(priority=2, max_attempts=4, expires=30)


@pytest.mark.parametrize(
    ("value", "seconds"), [(1, 1.0), (0.5, 0.5), ("2.5", 2.5), ("86400", 86400.0)]
)
def test_engine_options_in_seconds_accept_numbers_and_url_text(
    value: object, seconds: float
) -> None:
    assert option_seconds("busy_timeout_s", value) == seconds


@pytest.mark.parametrize("value", [0, -1, "soon", "nan", "inf", True, None, 86_401])
def test_engine_options_in_seconds_refuse_nonsense_by_name(value: object) -> None:
    with pytest.raises(ValueError, match="busy_timeout_s"):
        option_seconds("busy_timeout_s", value)
