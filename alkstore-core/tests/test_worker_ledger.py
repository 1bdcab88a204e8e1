"""The Worker's ledger: which held claims it starts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import alkstore
from alkstore import QueueOpts
from alkstore._worker_ledger import Ledger


def test_held_claims_that_lapsed_before_a_handler_was_free_are_not_started(
    tmp_path: Path,
) -> None:
    with alkstore.open(str(tmp_path / "store.db")) as store:
        queue = store.queue("q", QueueOpts(visibility_timeout_s=0.3))
        for n in range(4):
            queue.enqueue(n)
        ledger = Ledger("q", "w", concurrency=1, batch_size=4, lease_s=0.3)
        jobs: list[Any] = queue.claim_batch("w", 4)
        waited, fresh = jobs[:2], jobs[2:]
        ledger.hold(waited, claimed_at=time.monotonic())
        time.sleep(0.35)  # a whole lease in the hold, and no heartbeat renewed them
        ledger.hold(fresh, claimed_at=time.monotonic())
        started = ledger.next_unstarted()
        assert started is not None
        assert started.job.id == fresh[0].id
        assert ledger.stats().lost == 2
        assert ledger.in_flight() == 2


def test_a_claim_whose_lease_ran_out_on_its_way_back_still_runs(tmp_path: Path) -> None:
    """A lease shorter than the claim's round trip is not held against the job."""
    with alkstore.open(str(tmp_path / "store.db")) as store:
        queue = store.queue("q", QueueOpts(visibility_timeout_s=0.05))
        queue.enqueue("x")
        ledger = Ledger("q", "w", concurrency=1, batch_size=1, lease_s=0.05)
        claimed_at = time.monotonic() - 0.1  # the claim took longer than its lease
        ledger.hold(list(queue.claim_batch("w", 1)), claimed_at=claimed_at)
        assert ledger.next_unstarted() is not None
        assert ledger.stats().lost == 0


def test_inspecting_a_queue_name_that_is_not_text_is_refused_before_any_read(
    tmp_path: Path,
) -> None:
    with (
        alkstore.open(str(tmp_path / "store.db")) as store,
        pytest.raises(alkstore.InvalidName, match="queue name"),
    ):
        store.inspect().jobs("bad\ud800")
