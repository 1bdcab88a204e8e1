"""How ``Queue.wait`` splits its wait between wakes and the database's clock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import alkstore
from alkstore import EnqueueOpts
from alkstore._queue import CLOCK_LOOK_S, wait_for_work


@pytest.mark.parametrize("timeout", [None, 0.0, 1.0, 3_600.0])
def test_work_ready_now_needs_no_wait(timeout: float | None) -> None:
    assert wait_for_work(0.0, timeout) is None
    assert wait_for_work(-5.0, timeout) is None


def test_with_nothing_due_later_only_a_wake_or_the_timeout_ends_the_wait() -> None:
    assert wait_for_work(None, None) == (None, True)
    assert wait_for_work(None, 2.5) == (2.5, False)


def test_a_job_due_soon_is_waited_for_on_the_clock() -> None:
    assert wait_for_work(1.5, None) == (1.5, True)
    assert wait_for_work(1.5, 60.0) == (1.5, True)
    assert wait_for_work(1.5, 0.5) == (0.5, False)


def test_a_job_due_later_is_looked_at_again_every_few_seconds() -> None:
    """The database's clock may step, or this host sleep: a due job is not held
    back by a long sleep computed before either happened."""
    assert wait_for_work(3_600.0, None) == (CLOCK_LOOK_S, True)
    assert wait_for_work(3_600.0, 1_800.0) == (CLOCK_LOOK_S, True)
    assert wait_for_work(3_600.0, 1.0) == (1.0, False)


def test_a_wait_sees_a_job_a_clock_step_made_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite reads this host's clock: stepped an hour forward while a wait
    sleeps, the job delayed by an hour is claimed within a slice, not an hour."""
    with alkstore.open(tmp_path / "a.db") as store:
        queue = store.queue("q")
        queue.enqueue("later", EnqueueOpts(delay=3_600))
        real_time = time.time
        step = threading.Timer(
            0.3, lambda: monkeypatch.setattr(time, "time", lambda: real_time() + 3_600)
        )
        step.start()
        started = time.monotonic()
        assert queue.wait(None)
        step.join()
        assert time.monotonic() - started < CLOCK_LOOK_S + 3
        job = queue.claim_one("w")
        assert job is not None
        assert job.payload == "later"
