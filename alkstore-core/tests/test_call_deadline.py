"""The deadline a caller's timeout sets for the engine's waits for a connection."""

from __future__ import annotations

import asyncio
import time

import pytest

from alkstore._call_deadline import SHORTEST_WAIT_S, deadline_at, deadline_in
from alkstore.engine import wait_budget


def test_without_a_deadline_the_engine_waits_its_own_longest() -> None:
    assert wait_budget(10.0) == 10.0
    with deadline_in(None):
        assert wait_budget(10.0) == 10.0


def test_a_deadline_cuts_the_wait_to_what_it_leaves() -> None:
    with deadline_in(2.0):
        assert 1.5 < wait_budget(10.0) <= 2.0
        assert wait_budget(1.0) == 1.0  # the engine's own bound, when shorter
    assert wait_budget(10.0) == 10.0  # and it ends with the block


def test_a_reached_deadline_still_leaves_the_shortest_wait() -> None:
    with deadline_in(0):
        assert wait_budget(10.0) == SHORTEST_WAIT_S
    with deadline_at(time.monotonic() - 60):
        assert wait_budget(10.0) == SHORTEST_WAIT_S


def test_an_inner_deadline_never_outlasts_the_enclosing_one() -> None:
    with deadline_in(2.0):
        with deadline_in(30.0):
            assert wait_budget(10.0) <= 2.0
        with deadline_in(1.0):
            assert wait_budget(10.0) <= 1.0
        assert wait_budget(10.0) > 1.0


def test_the_deadline_follows_the_call_onto_a_thread_and_not_into_other_tasks() -> None:
    async def main() -> tuple[float, float]:
        other = asyncio.Event()

        async def elsewhere() -> float:
            await other.wait()
            return wait_budget(10.0)

        task = asyncio.create_task(elsewhere())
        with deadline_in(1.0):
            on_thread = await asyncio.to_thread(wait_budget, 10.0)
            other.set()
            return on_thread, await task

    on_thread, in_other_task = asyncio.run(main())
    assert on_thread <= 1.0
    assert in_other_task == 10.0


@pytest.mark.parametrize("longest", [0.1, 0.0])
def test_an_engine_bound_shorter_than_the_shortest_wait_is_kept(longest: float) -> None:
    with deadline_in(0):
        assert wait_budget(longest) == longest
