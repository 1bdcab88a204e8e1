"""The ``@every`` grammar and the scheduler's catch-up arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import alkstore
from alkstore._every import MAX_CATCH_UP, first_boundary_after, parse_every, plan_fires
from alkstore.engine import PlacedSchedule, place_schedule

UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}
MAX_INTERVAL_S = 36_500 * 86_400

valid_specs = st.sampled_from(sorted(UNITS)).flatmap(
    lambda unit: st.integers(1, MAX_INTERVAL_S // UNITS[unit]).map(
        lambda n: (f"@every {n}{unit}", n * UNITS[unit])
    )
)


@given(valid_specs)
def test_every_valid_spec_parses_to_its_seconds(spec_and_seconds: tuple[str, int]) -> None:
    spec, seconds = spec_and_seconds
    assert parse_every(spec) == seconds


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    """A valid spec with one character inserted, deleted or replaced."""
    spec, _ = draw(valid_specs)
    position = draw(st.integers(0, len(spec)))
    kind = draw(st.sampled_from(["insert", "delete", "replace"]))
    character = draw(st.characters())
    if kind == "insert":
        mutated = spec[:position] + character + spec[position:]
    elif kind == "delete":
        assume(position < len(spec))
        mutated = spec[:position] + spec[position + 1 :]
    else:
        assume(position < len(spec))
        mutated = spec[:position] + character + spec[position + 1 :]
    return mutated


@given(mutated_specs())
def test_every_mutation_of_a_valid_spec_is_rejected_unless_it_is_another_valid_spec(
    mutated: str,
) -> None:
    # Changing or adding a digit in the number can yield another valid spec
    # ("@every 15m" -> "@every 115m"); everything else must be refused.
    try:
        seconds = parse_every(mutated)
    except alkstore.InvalidSpec:
        return
    prefix, rest = mutated[:7], mutated[7:]
    assert prefix == "@every "
    digits = rest[:-1]
    assert digits.isascii()
    assert digits.isdigit()
    assert not digits.startswith("0")
    assert seconds == int(rest[:-1]) * UNITS[rest[-1]]


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "@every",
        "@every ",
        "@every 0s",
        "@every 00s",
        "@every 05m",
        "@every -1s",
        "@every -5m",
        "@every 1.5h",
        "@every 1e3s",
        "@every 1",
        "@every s",
        "@every 10w",
        "@every 10ms",
        "@every 10y",
        "@every 10S",
        "@every 10M",
        "@EVERY 10s",
        "every 10s",
        "@every10s",
        "@every  10s",
        " @every 10s",
        "@every 10s ",
        "@every 10s\n",
        "@every\t10s",
        "@every 10 s",
        "@every \u00a010s",
        "@every \uff11\uff10s",  # fullwidth digits
        "@every \u0663s",  # Arabic-Indic digit
        "@every 1h30m",
        "*/5 * * * *",
        "0 0 * * *",
        "@daily",
        "@hourly",
        "@every 36501d",
        "@every 99999999999999999999999999s",
    ],
)
def test_invalid_specs_are_refused(spec: str) -> None:
    with pytest.raises(alkstore.InvalidSpec, match="schedule spec"):
        parse_every(spec)


@pytest.mark.parametrize("spec", [None, 10, b"@every 10s", ["@every 10s"]])
def test_a_spec_that_is_not_a_string_is_refused(spec: object) -> None:
    with pytest.raises(alkstore.InvalidSpec, match="must be a str"):
        parse_every(spec)


def test_the_longest_spec_is_a_century_of_days() -> None:
    assert parse_every("@every 36500d") == MAX_INTERVAL_S
    assert parse_every("@every 876000h") == MAX_INTERVAL_S


intervals = st.integers(1, 86_400 * 7).map(float)
times = st.floats(0, 4e9, allow_nan=False)


@given(next_fire_at=times, interval=intervals, now=times)
def test_plan_fires_owes_each_elapsed_boundary_up_to_the_cap(
    next_fire_at: float, interval: float, now: float
) -> None:
    plan = plan_fires(next_fire_at, interval, now)
    assert len(plan.fire_at) <= MAX_CATCH_UP
    assert all(boundary <= now for boundary in plan.fire_at)
    assert list(plan.fire_at) == sorted(plan.fire_at)
    if plan.fire_at:
        assert plan.fire_at[0] == next_fire_at
    elapsed = len(plan.fire_at) + plan.skipped
    assert plan.next_fire_at == next_fire_at + elapsed * interval
    assert plan.next_fire_at > now or (elapsed == 0 and plan.next_fire_at == next_fire_at)
    # The next boundary is the first one after now: the one before it has elapsed.
    if elapsed:
        assert next_fire_at + (elapsed - 1) * interval <= now


def test_a_schedule_not_yet_due_owes_nothing() -> None:
    plan = plan_fires(1_000.0, 60.0, 999.0)
    assert plan.fire_at == ()
    assert plan.next_fire_at == 1_000.0
    assert plan.skipped == 0


def test_a_boundary_is_due_at_its_exact_time() -> None:
    plan = plan_fires(1_000.0, 60.0, 1_000.0)
    assert plan.fire_at == (1_000.0,)
    assert plan.next_fire_at == 1_060.0


def test_three_missed_boundaries_are_all_caught_up() -> None:
    plan = plan_fires(1_000.0, 60.0, 1_125.0)
    assert plan.fire_at == (1_000.0, 1_060.0, 1_120.0)
    assert plan.next_fire_at == 1_180.0
    assert plan.skipped == 0


def test_past_the_cap_it_fires_64_and_skips_to_the_next_future_boundary() -> None:
    plan = plan_fires(0.0, 1.0, 99.5)
    assert len(plan.fire_at) == 64
    assert plan.fire_at[-1] == 63.0
    assert plan.skipped == 100 - 64
    assert plan.next_fire_at == 100.0


def test_plan_fires_refuses_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        plan_fires(0.0, 0.0, 10.0)


@given(anchor=times, interval=intervals, now=times)
def test_first_boundary_after_is_the_next_boundary_on_the_anchors_grid(
    anchor: float, interval: float, now: float
) -> None:
    boundary = first_boundary_after(anchor, interval, now)
    steps = round((boundary - anchor) / interval)
    assert steps >= 1
    assert boundary == anchor + steps * interval
    assert boundary > now
    assert steps == 1 or anchor + (steps - 1) * interval <= now


def test_first_boundary_after_a_change_of_spec() -> None:
    assert first_boundary_after(1_000.0, 60.0, 1_000.0) == 1_060.0
    assert first_boundary_after(1_000.0, 60.0, 1_125.0) == 1_180.0
    assert first_boundary_after(1_000.0, 60.0, 500.0) == 1_060.0  # never before the anchor


def test_a_new_schedule_is_anchored_now_and_fires_one_interval_later() -> None:
    assert place_schedule(None, "@every 1m", 60, 1_000.0) == PlacedSchedule(
        "@every 1m", 1_000, 1_060
    )


def test_re_declaring_the_same_spec_keeps_its_timing() -> None:
    placed = PlacedSchedule("@every 1m", 1_000.0, 1_060.0)
    assert place_schedule(placed, "@every 1m", 60, 1_059.0) is placed


def test_a_new_spec_keeps_the_anchor_and_resumes_at_the_next_new_boundary() -> None:
    placed = PlacedSchedule("@every 1m", 1_000.0, 1_060.0)
    moved = place_schedule(placed, "@every 7s", 7, 1_050.0)
    assert moved == PlacedSchedule("@every 7s", 1_000.0, 1_056.0)
