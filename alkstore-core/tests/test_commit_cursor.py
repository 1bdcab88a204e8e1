"""The commit cursor: ids assigned at insert, committed in any order, each reported once.

test_commit_cursor_postgres.py shows the trap and the cure on a real table.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alkstore.engine import CommitCursor


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_ids_in_order_come_out_once_and_move_the_cursor() -> None:
    cursor = CommitCursor(grace_s=5)
    assert cursor.read_after == 0
    assert cursor.fresh([2, 1, 3, 3]) == [1, 2, 3]
    assert cursor.read_after == 3
    assert cursor.fresh([1, 2, 3]) == []
    assert cursor.fresh([4]) == [4]
    assert cursor.awaited == 0


def test_an_id_that_commits_late_is_awaited_and_reported() -> None:
    cursor = CommitCursor(10, grace_s=5)
    assert cursor.fresh([12]) == [12]  # 11 was inserted first and is not committed yet
    assert cursor.read_after == 10
    assert cursor.awaited == 1
    assert cursor.fresh([12]) == []  # the next read covers 11 again; 12 is not news
    assert cursor.fresh([11, 12]) == [11]
    assert cursor.read_after == 12
    assert cursor.awaited == 0


def test_a_gap_filled_in_the_middle_splits_and_the_cursor_follows_the_oldest_part() -> None:
    cursor = CommitCursor(grace_s=5)
    assert cursor.fresh([1, 6]) == [1, 6]
    assert cursor.fresh([3]) == [3]
    assert (cursor.read_after, cursor.awaited) == (1, 3)  # 2, 4 and 5
    assert cursor.fresh([2, 3, 6]) == [2]
    assert (cursor.read_after, cursor.awaited) == (3, 2)
    assert cursor.fresh([5]) == [5]
    assert cursor.fresh([4]) == [4]
    assert (cursor.read_after, cursor.awaited) == (6, 0)


def test_a_gap_unfilled_for_the_grace_period_is_given_up() -> None:
    # A rolled-back insert leaves an id that never commits.
    clock = Clock()
    cursor = CommitCursor(grace_s=5, clock=clock)
    assert cursor.fresh([1, 3]) == [1, 3]
    clock.now = 4.9
    assert cursor.fresh([1, 3]) == []
    assert cursor.read_after == 1
    clock.now = 5.0
    assert cursor.fresh([3]) == []
    assert cursor.read_after == 3
    assert cursor.fresh([2]) == []  # later than the grace: the price of moving on


def test_gaps_are_given_up_in_the_order_they_opened_each_after_its_own_grace() -> None:
    clock = Clock()
    cursor = CommitCursor(grace_s=5, clock=clock)
    cursor.fresh([2])  # awaits 1 from t=0
    clock.now = 3.0
    cursor.fresh([5])  # awaits 3 and 4 from t=3
    clock.now = 6.0
    cursor.fresh([])
    assert (cursor.read_after, cursor.awaited) == (2, 2)
    assert cursor.fresh([4]) == [4]
    clock.now = 8.0
    cursor.fresh([])
    assert (cursor.read_after, cursor.awaited) == (5, 0)


def test_a_grace_of_zero_is_the_naive_reader() -> None:
    cursor = CommitCursor(grace_s=0)
    assert cursor.fresh([2]) == [2]
    assert cursor.read_after == 2
    assert cursor.fresh([1, 2]) == []


def test_a_baseline_awaits_the_ids_missing_among_those_already_committed() -> None:
    # Committed at the baseline: up to 10, then 12 and 14; 11 and 13 are in flight.
    cursor = CommitCursor(10, seen=[12, 14, 9], grace_s=5)
    assert (cursor.read_after, cursor.awaited) == (10, 2)
    assert cursor.fresh([11, 12, 13, 14, 15]) == [11, 13, 15]


@pytest.mark.parametrize("grace_s", [-1.0, float("inf"), float("nan")])
def test_the_grace_period_must_be_a_finite_number_of_seconds(grace_s: float) -> None:
    with pytest.raises(ValueError, match="grace_s"):
        CommitCursor(grace_s=grace_s)


def test_the_repr_tells_where_it_stands() -> None:
    cursor = CommitCursor(grace_s=5)
    cursor.fresh([1, 4])
    assert repr(cursor) == "<CommitCursor read_after=1 top=4 awaited=2 in 1 gaps>"


@given(st.data())
def test_every_committed_id_comes_out_exactly_once_whatever_the_commit_order(
    data: st.DataObject,
) -> None:
    inserted = data.draw(st.integers(1, 40), label="inserted")
    commit_order = data.draw(st.permutations(range(1, inserted + 1)), label="commit order")
    rolled_back = data.draw(st.sets(st.sampled_from(commit_order)), label="rolled back")
    looks = data.draw(st.lists(st.booleans(), min_size=inserted, max_size=inserted))
    cursor = CommitCursor(grace_s=60, clock=lambda: 0.0)
    committed: set[int] = set()
    reported: list[int] = []

    def read() -> None:
        reported.extend(cursor.fresh([i for i in committed if i > cursor.read_after]))

    for id_, looks_now in zip(commit_order, looks, strict=True):
        if id_ not in rolled_back:
            committed.add(id_)
        if looks_now:
            read()
    read()
    assert sorted(reported) == sorted(committed)
    assert len(reported) == len(set(reported))
