"""Cron specs in time zones: the grammar, daylight-saving changes on real dates,
and the boundary sequence as a property."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import alkstore
from alkstore import ScheduleOpts
from alkstore._cron import parse_cron
from alkstore._every import MAX_CATCH_UP, parse_spec, plan_cron_fires
from alkstore.engine import PlacedSchedule, place_schedule

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def at(
    zone: ZoneInfo | timezone, year: int, month: int, day: int, hour: int, minute: int, *,
    fold: int = 0,
) -> float:  # fmt: skip
    """Unix seconds of a local time (``fold=1``: its second occurrence)."""
    return datetime(year, month, day, hour, minute, tzinfo=zone, fold=fold).timestamp()


def local(instant: float, zone: ZoneInfo | timezone) -> str:
    return datetime.fromtimestamp(instant, zone).isoformat()


def boundaries(spec: str, tz: str | None, after: float, count: int) -> list[float]:
    cron = parse_cron(spec, tz)
    found = []
    for _ in range(count):
        after = cron.next_after(after)
        found.append(after)
    return found


# The grammar


@pytest.mark.parametrize(
    "spec",
    ["0 3 * * *", "*/15 9-17 * * MON-FRI", "0 0 1,15 * *", "5 4 * jan,Jul sun", "0 0 * * 7",
     "0\t3 * * *", "0  3 * * *", "0-30/10 * * * *", "0 0 29 2 *", "@hourly", "@daily",
     "@weekly", "@monthly"],
)  # fmt: skip
def test_valid_cron_specs_parse(spec: str) -> None:
    assert parse_spec(spec, None) == 0
    assert parse_spec(spec, "Europe/Berlin") == 0


@pytest.mark.parametrize(
    ("spec", "names"),
    [("", "empty"), ("0 3 * *", "4 fields"), ("0 0 3 * * *", "6 fields"),
     ("60 * * * *", "minute"), ("* 24 * * *", "hour"), ("* * 0 * *", "day-of-month"),
     ("* * * 13 *", "month"), ("* * * * 8", "day-of-week"), ("0 0 30 2 *", "never occurs"),
     ("0 0 31 4,6 *", "never occurs"), ("*/0 * * * *", "minute"), ("5-1 * * * *", "minute"),
     ("0 0 L * *", "day-of-month"), ("0 0 * * MON#2", "day-of-week"), ("0 0 ? * *", "day"),
     ("0 0 * * FOO", "day-of-week"), ("0 JAN * * *", "hour"), (" 0 3 * * *", "blanks"),
     ("0 3 * * * ", "blanks"), ("@yearly", "@every"), ("@every", "@every"),
     ("every 5m", "2 fields"), ("0 3 * * *\n", "day-of-week")],
)  # fmt: skip
def test_invalid_cron_specs_raise_invalid_spec_naming_the_problem(spec: str, names: str) -> None:
    with pytest.raises(alkstore.InvalidSpec, match=names) as raised:
        parse_spec(spec, None)
    assert raised.value.__cause__ is None  # our words, never cronsim's error


def test_an_every_spec_refuses_a_time_zone() -> None:
    with pytest.raises(alkstore.InvalidSpec, match="applies only to cron specs"):
        parse_spec("@every 1h", "Europe/Berlin")
    with pytest.raises(alkstore.InvalidSpec, match="applies only to cron specs"):
        parse_spec("@every 1h", "UTC")


@pytest.mark.parametrize("tz", ["Europe/Berln", "europe/berlin", "localtime", "", "Mars/Olympus"])
def test_schedule_opts_refuse_an_unknown_zone_at_construction(tz: str) -> None:
    with pytest.raises(alkstore.InvalidSpec, match="not an IANA time zone"):
        ScheduleOpts(tz=tz)


def test_schedule_opts_suggest_the_zone_meant() -> None:
    with pytest.raises(alkstore.InvalidSpec, match="did you mean 'Europe/Berlin'"):
        ScheduleOpts(tz="Europe/Berln")


def test_schedule_opts_refuse_a_zone_that_is_not_a_str() -> None:
    with pytest.raises(alkstore.InvalidSpec, match="not ZoneInfo"):
        ScheduleOpts(tz=BERLIN)  # type: ignore[arg-type]


def test_an_invalid_spec_is_a_value_error_too() -> None:
    with pytest.raises(ValueError, match="has 1 field"):
        parse_spec("nonsense", None)


# Boundaries, daylight-saving changes on real dates (Europe/Berlin: 2026-03-29
# 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET).


def test_a_daily_spec_fires_at_its_local_time_in_its_zone() -> None:
    found = boundaries("0 3 * * *", "Europe/Berlin", at(BERLIN, 2026, 1, 10, 12, 0), 2)
    assert [local(b, BERLIN) for b in found] == [
        "2026-01-11T03:00:00+01:00", "2026-01-12T03:00:00+01:00",
    ]  # fmt: skip


def test_without_a_zone_fields_are_read_in_utc() -> None:
    found = boundaries("0 3 * * *", None, at(UTC, 2026, 3, 28, 12, 0), 3)
    assert found == [at(UTC, 2026, 3, day, 3, 0) for day in (29, 30, 31)]


def test_a_time_skipped_by_spring_forward_fires_once_at_the_next_valid_instant() -> None:
    found = boundaries("30 2 * * *", "Europe/Berlin", at(BERLIN, 2026, 3, 28, 12, 0), 3)
    assert [local(b, BERLIN) for b in found] == [
        "2026-03-29T03:00:00+02:00",  # 02:30 does not exist that day
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_a_time_repeated_by_fall_back_fires_once_at_its_first_occurrence() -> None:
    found = boundaries("30 2 * * *", "Europe/Berlin", at(BERLIN, 2026, 10, 24, 12, 0), 3)
    assert [local(b, BERLIN) for b in found] == [
        "2026-10-25T02:30:00+02:00",  # the first 02:30 (CEST); the second (CET) never fires
        "2026-10-26T02:30:00+01:00",
        "2026-10-27T02:30:00+01:00",
    ]


def test_after_the_first_occurrence_the_repeated_hour_fires_nothing() -> None:
    second_0230 = at(BERLIN, 2026, 10, 25, 2, 30, fold=1)
    [following] = boundaries("30 2 * * *", "Europe/Berlin", second_0230 - 60, 1)
    assert local(following, BERLIN) == "2026-10-26T02:30:00+01:00"


def test_several_skipped_times_of_one_gap_fire_once_together() -> None:
    found = boundaries("*/15 * * * *", "Europe/Berlin", at(BERLIN, 2026, 3, 29, 1, 40), 4)
    assert [local(b, BERLIN) for b in found] == [
        "2026-03-29T01:45:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:00, 02:15, 02:30, 02:45 and 03:00 itself
        "2026-03-29T03:15:00+02:00",
        "2026-03-29T03:30:00+02:00",
    ]


def test_a_sub_hourly_spec_skips_the_repeated_hour() -> None:
    found = boundaries("*/30 * * * *", "Europe/Berlin", at(BERLIN, 2026, 10, 25, 1, 45), 5)
    assert [local(b, BERLIN) for b in found] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T03:00:00+01:00",  # 02:00 and 02:30 CET are times that already fired
        "2026-10-25T03:30:00+01:00",
        "2026-10-25T04:00:00+01:00",
    ]


def test_new_york_spring_forward_and_fall_back() -> None:
    # 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST
    spring = boundaries("30 2 * * *", "America/New_York", at(NEW_YORK, 2026, 3, 7, 12, 0), 2)
    assert [local(b, NEW_YORK) for b in spring] == [
        "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00",
    ]  # fmt: skip
    fall = boundaries("30 1 * * *", "America/New_York", at(NEW_YORK, 2026, 10, 31, 12, 0), 2)
    assert [local(b, NEW_YORK) for b in fall] == [
        "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00",
    ]  # fmt: skip


def test_a_zone_with_a_half_hour_shift() -> None:
    # Australia/Lord_Howe: 2026-10-04 02:00 +10:30 -> 02:30 +11:00
    zone = ZoneInfo("Australia/Lord_Howe")
    found = boundaries("15 2 * * *", "Australia/Lord_Howe", at(zone, 2026, 10, 3, 12, 0), 2)
    assert [local(b, zone) for b in found] == [
        "2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00",
    ]  # fmt: skip


def test_weekly_and_monthly_macros() -> None:
    [sunday] = boundaries("@weekly", "Europe/Berlin", at(BERLIN, 2026, 3, 25, 12, 0), 1)
    assert local(sunday, BERLIN) == "2026-03-29T00:00:00+01:00"
    [first] = boundaries("@monthly", None, at(UTC, 2026, 2, 14, 0, 0), 1)
    assert first == at(UTC, 2026, 3, 1, 0, 0)


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    found = boundaries("0 0 13 * FRI", None, at(UTC, 2026, 2, 1, 0, 0), 4)
    assert [datetime.fromtimestamp(b, UTC).date().isoformat() for b in found] == [
        "2026-02-06", "2026-02-13", "2026-02-20", "2026-02-27",
    ]  # fmt: skip


# Placement and catch-up: the same rules as @every.


def test_a_new_cron_schedule_first_fires_at_its_next_boundary() -> None:
    now = at(BERLIN, 2026, 3, 28, 12, 0)
    placed = place_schedule(None, "30 2 * * *", 0, now, "Europe/Berlin")
    assert placed == PlacedSchedule(
        "30 2 * * *", anchor=now, next_fire_at=at(BERLIN, 2026, 3, 29, 3, 0), tz="Europe/Berlin"
    )
    assert place_schedule(placed, "30 2 * * *", 0, now + 600, "Europe/Berlin") is placed


def test_another_zone_or_spec_moves_a_cron_schedule_to_its_new_next_boundary() -> None:
    now = at(UTC, 2026, 1, 10, 12, 0)
    placed = place_schedule(None, "0 3 * * *", 0, now, None)
    moved = place_schedule(placed, "0 3 * * *", 0, now, "America/New_York")
    assert moved == PlacedSchedule(
        "0 3 * * *", now, at(NEW_YORK, 2026, 1, 11, 3, 0), "America/New_York"
    )
    back_to_every = place_schedule(moved, "@every 1h", 3600, now + 30)
    assert back_to_every == PlacedSchedule("@every 1h", now, now + 3600, None)


def test_cron_catch_up_fires_at_most_64_then_skips_to_the_first_boundary_after_now() -> None:
    cron = parse_cron("* * * * *", None)
    due = at(UTC, 2026, 5, 1, 0, 0)
    now = due + 99 * 60 + 30  # 100 boundaries elapsed
    plan = plan_cron_fires(due, cron, now)
    assert plan.fire_at == tuple(due + 60 * k for k in range(MAX_CATCH_UP))
    assert plan.skipped == 100 - MAX_CATCH_UP
    assert plan.next_fire_at == due + 100 * 60
    assert not plan.skipped_at_least


def test_a_few_missed_cron_boundaries_are_all_caught_up() -> None:
    cron = parse_cron("0 * * * *", "Europe/Berlin")
    due = at(BERLIN, 2026, 3, 29, 0, 0)
    plan = plan_cron_fires(due, cron, at(BERLIN, 2026, 3, 29, 4, 10))
    assert [local(b, BERLIN)[11:] for b in plan.fire_at] == [
        "00:00:00+01:00", "01:00:00+01:00", "03:00:00+02:00", "04:00:00+02:00",
    ]  # fmt: skip
    assert (plan.skipped, local(plan.next_fire_at, BERLIN)) == (0, "2026-03-29T05:00:00+02:00")


def test_a_cron_schedule_not_yet_due_plans_nothing() -> None:
    plan = plan_cron_fires(2_000.0, parse_cron("* * * * *", None), 1_999.0)
    assert (plan.fire_at, plan.next_fire_at, plan.skipped) == ((), 2_000.0, 0)


def test_a_very_long_outage_is_skipped_without_counting_every_boundary() -> None:
    cron = parse_cron("* * * * *", None)
    due = at(UTC, 2025, 1, 1, 0, 0)
    now = due + 365 * 86_400 + 30
    plan = plan_cron_fires(due, cron, now)
    assert len(plan.fire_at) == MAX_CATCH_UP
    assert plan.skipped_at_least
    assert plan.next_fire_at == due + 365 * 86_400 + 60


# The boundary sequence as a property, against an oracle that scans instants
# minute by minute (no cron library, no wall-clock iteration).

ZONES = [
    "UTC", "Europe/Berlin", "Europe/London", "Europe/Dublin", "America/New_York",
    "America/Santiago", "America/St_Johns", "Australia/Sydney", "Australia/Lord_Howe",
    "Pacific/Chatham", "Asia/Kathmandu", "Africa/Casablanca", "Antarctica/Troll",
    "America/Havana", "Asia/Tehran",
]  # fmt: skip
WINDOW_S = 36 * 3_600
LONGEST_JUMP_BACK_S = 3 * 3_600
"""More than any zone here ever turns its clocks back (Antarctica/Troll: 2 h)."""


@functools.cache
def transitions(tz: str) -> tuple[float, ...]:
    """The instants of the zone's offset changes in 1995-2035 (to the minute)."""
    zone = ZoneInfo(tz)
    found: list[float] = []
    step = 6 * 3_600
    start = int(datetime(1995, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(2035, 1, 1, tzinfo=UTC).timestamp())
    previous = datetime.fromtimestamp(start, zone).utcoffset()
    for moment in range(start + step, end, step):
        offset = datetime.fromtimestamp(moment, zone).utcoffset()
        if offset != previous:
            low, high = moment - step, moment
            while high - low > 60:
                middle = (low + high) // 2
                if datetime.fromtimestamp(middle, zone).utcoffset() == previous:
                    low = middle
                else:
                    high = middle
            found.append(float(high))
            previous = offset
    return tuple(found)


def field(
    values: range, minimum: int, everything: range | None = None
) -> st.SearchStrategy[tuple[str, frozenset[int]]]:
    """A field's text and the values it matches: ``*``, a list, or ``*/step``
    (``everything``: what ``*`` matches, when more than the values listed)."""
    star = st.just(("*", frozenset(everything or values)))
    listed = st.frozensets(st.sampled_from(list(values)), min_size=1, max_size=4).map(
        lambda chosen: (",".join(map(str, sorted(chosen))), chosen)
    )
    stepped = st.integers(2, 20).map(
        lambda step: (
            f"*/{step}",
            frozenset(v for v in (everything or values) if (v - minimum) % step == 0),
        )
    )
    return st.one_of(star, listed, stepped)


@st.composite
def specs(draw: st.DrawFn) -> tuple[str, tuple[frozenset[int], ...], bool]:
    minute = draw(field(range(60), 0))
    hour = draw(field(range(24), 0))
    day = draw(field(range(1, 29), 1, everything=range(1, 32)))
    month = ("*", frozenset(range(1, 13)))
    weekday = draw(st.one_of(st.just(("*", frozenset(range(7)))), field(range(7), 0)))
    text = " ".join(part for part, _ in (minute, hour, day, month, weekday))
    either_day = not day[0].startswith("*") and not weekday[0].startswith("*")
    return text, (minute[1], hour[1], day[1], month[1], weekday[1]), either_day


def matches(wall: datetime, sets: tuple[frozenset[int], ...], either_day: bool) -> bool:
    minutes, hours, days, months, weekdays = sets
    on_day = wall.day in days
    on_weekday = (wall.isoweekday() % 7) in weekdays
    day_ok = (on_day or on_weekday) if either_day else (on_day and on_weekday)
    return wall.minute in minutes and wall.hour in hours and wall.month in months and day_ok


def expected(
    tz: str, sets: tuple[frozenset[int], ...], either_day: bool, start: float, end: float
) -> list[float]:
    """Every instant in (start, end] that fires, found minute by minute: a minute
    whose local time matches at its first occurrence, or the first minute after
    a jump forward that skipped a matching local time."""
    zone = ZoneInfo(tz)
    fired = []
    minute = (int(start) // 60 + 1) * 60
    # The latest local time the clocks showed by ``start``: one that starts just
    # after a jump back must know the local times the clocks showed before it.
    previous = max(
        datetime.fromtimestamp(shown, zone).replace(tzinfo=None)
        for shown in range(minute - 60 - LONGEST_JUMP_BACK_S, minute - 59, 60)
    )
    while minute <= end:
        wall = datetime.fromtimestamp(minute, zone).replace(tzinfo=None)
        skipped = wall - previous > timedelta(minutes=1)
        first_time = wall > previous  # not a local time the clocks already showed
        hit = first_time and matches(wall, sets, either_day)
        if skipped:
            gap = previous + timedelta(minutes=1)
            while gap < wall and not hit:
                hit = matches(gap, sets, either_day)
                gap += timedelta(minutes=1)
        if hit:
            fired.append(float(minute))
        previous = max(previous, wall)
        minute += 60
    return fired


EVERY_MINUTE = (
    "* * * * *",
    tuple(frozenset(r) for r in (range(60), range(24), range(1, 32), range(1, 13), range(7))),
    False,
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(ZONES).flatmap(
        lambda tz: st.tuples(
            st.just(tz),
            st.integers(0, max(0, len(transitions(tz)) - 1)),
            st.integers(-WINDOW_S // 2, WINDOW_S // 2),
        )
    ),
    specs(),
)
# Starting at the instant Berlin turned its clocks back (1995-09-24, 03:00 to 02:00).
@example(("Europe/Berlin", 1, WINDOW_S // 2 - 27), EVERY_MINUTE)
def test_boundaries_around_any_offset_change_are_each_firing_instant_once(
    where: tuple[str, int, int], spec: tuple[str, tuple[frozenset[int], ...], bool]
) -> None:
    tz, index, shift = where
    text, sets, either_day = spec
    changes = transitions(tz)
    start = (changes[index] if changes else 1_700_000_000.0) + shift - WINDOW_S / 2
    end = start + WINDOW_S
    cron = parse_cron(text, tz)
    found: list[float] = []
    instant = start
    while True:
        instant = cron.next_after(instant)
        if instant > end:
            break
        found.append(instant)
    assert found == sorted(set(found))  # strictly increasing: no instant twice
    assert found == expected(tz, sets, either_day, start, end)


# The seam: old engines, and schedules a host cannot plan.


def test_an_engine_store_without_cron_schedules_refuses_cron_specs() -> None:
    from alkstore._store import refuse_cron_unless_stored

    assert alkstore.Store.cron_schedules is False  # engines written for contract <= 1.3

    class OldStore:
        """Stands for a Store subclass of an engine written for contract 1.3."""

    with pytest.raises(
        alkstore.InvalidSpec, match=r"predates cron schedules \(engine contract 1.4"
    ):
        refuse_cron_unless_stored(OldStore(), "0 3 * * *")  # type: ignore[arg-type]


def test_a_due_schedule_from_an_old_engine_is_planned_by_its_interval() -> None:
    from alkstore._scheduler import plan_for
    from alkstore.engine import DueSchedule

    due = DueSchedule("tick", 60.0, "jobs", "1", 0, None, None, 1_000.0)  # no spec, no tz
    assert plan_for(due, 1_130.0).fire_at == (1_000.0, 1_060.0, 1_120.0)


def test_a_due_cron_schedule_is_planned_by_its_spec_and_zone() -> None:
    from alkstore._scheduler import plan_for
    from alkstore.engine import DueSchedule

    due_at = at(BERLIN, 2026, 3, 29, 1, 30)
    due = DueSchedule("x", 0, "jobs", "1", 0, None, None, due_at, "30 * * * *", "Europe/Berlin")
    plan = plan_for(due, at(BERLIN, 2026, 3, 29, 3, 40))
    assert [local(b, BERLIN)[11:16] for b in plan.fire_at] == ["01:30", "03:00", "03:30"]


def test_a_stored_zone_this_host_lacks_cannot_be_planned() -> None:
    from alkstore._scheduler import plan_for
    from alkstore.engine import DueSchedule

    due = DueSchedule("x", 0, "jobs", "1", 0, None, None, 1_000.0, "0 3 * * *", "Nowhere/Land")
    with pytest.raises(alkstore.InvalidSpec):
        plan_for(due, 2_000.0)
