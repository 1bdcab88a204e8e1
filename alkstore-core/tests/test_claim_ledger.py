"""The claims a store remembers to fence ``ack_batch`` by id: an acked job's
claim is forgotten at once, so a long-running worker's memory stays flat.

A real SQLite store, sync and async; the ledger itself is core's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import alkstore
from alkstore import QueueOpts


def test_acked_claims_are_forgotten_and_unsettled_ones_kept(tmp_path: Path) -> None:
    with alkstore.open(str(tmp_path / "store.db")) as store:
        queue = store.queue("q")
        for n in range(5):
            queue.enqueue(n)
        jobs = queue.claim_batch("w", 5)
        assert len(store._claims) == 5
        assert queue.ack_batch([job.id for job in jobs[:2]], "w") == 2
        assert jobs[2].ack()
        assert jobs[3].retry("later", delay_s=3600)
        assert len(store._claims) == 2, "the retried and the held claim still fence"
        assert store._claims.attempt("q", jobs[3].id, "w") == 1
        assert store._claims.attempt("q", jobs[4].id, "w") == 1


def test_a_batch_not_acked_in_full_keeps_its_claims_to_fence_a_later_ack(
    tmp_path: Path,
) -> None:
    with alkstore.open(str(tmp_path / "store.db")) as store:
        queue = store.queue("q", QueueOpts(visibility_timeout_s=3600))
        queue.enqueue(1)
        queue.enqueue(2)
        first, second = queue.claim_batch("w", 2)
        assert first.release()
        assert queue.ack_batch([first.id, second.id], "w") == 1
        assert store._claims.attempt("q", first.id, "w") == 1, "still fences the released one"
        again = queue.claim_one("w")  # the released job, claimed again (its attempt given back)
        assert again is not None
        assert again.id == first.id
        assert store._claims.attempt("q", first.id, "w") == again.attempts
        assert queue.ack_batch([first.id], "w") == 1
        # Which ids of a batch acked in part went is unknown: theirs wait for eviction.
        assert store._claims.attempt("q", first.id, "w") is None
        assert store._claims.attempt("q", second.id, "w") == 1


def test_the_async_api_forgets_acked_claims_alike(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with alkstore.open_async(str(tmp_path / "store.db")) as store:
            queue = store.queue("q")
            for n in range(3):
                await queue.enqueue(n)
            jobs = await queue.claim_batch("w", 3)
            assert await queue.ack_batch(jobs[:2], "w") == 2
            assert await jobs[2].ack()
            assert len(store._claims) == 0

    asyncio.run(scenario())
