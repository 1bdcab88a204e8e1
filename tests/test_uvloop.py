"""The asyncio API on uvloop, the event loop uvicorn and many services run.

Nothing in alkstore names an event loop: PostgreSQL's connections wait
through the loop's readers, SQLite's wakes reach it from the watcher thread.
These tests run the parts that touch the loop the most — wakes, a Worker,
streams, transactions and cancelled awaits — on uvloop, on both engines.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Awaitable, Callable

import pytest

import alkstore

uvloop = pytest.importorskip("uvloop", reason="uvloop does not install on this platform")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uvloop has no Windows loop")

JOBS = 60
CANCELLED_CLAIMS = 300


def run_on_uvloop(main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main()`` on a fresh uvloop loop, checking that the loop is uvloop's."""

    async def checked() -> None:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        await asyncio.wait_for(main(), timeout=60)

    uvloop.run(checked())


def test_wakes_a_worker_and_a_stream_work_on_uvloop(dsn: str) -> None:
    handled: list[int] = []

    async def main() -> None:
        async with alkstore.open_async(dsn) as store:
            wakes = await store.listen("cache")
            await store.notify("cache", {"key": "prices"})
            assert (await wakes.recv_async(timeout=10)) is not None
            wakes.close()

            all_handled = asyncio.Event()

            async def handle(job: alkstore.AsyncJob) -> None:
                handled.append(job.payload["n"])
                if len(handled) == JOBS:
                    all_handled.set()

            stop = asyncio.Event()
            worker = asyncio.create_task(
                alkstore.Worker(store, "uv", handle, concurrency=4).run_async(stop)
            )
            orders = store.stream("orders")
            for n in range(JOBS):  # each job and its event commit together
                async with store.transaction() as tx:
                    await tx.enqueue_tx("uv", None, {"n": n})
                    await tx.publish_tx("orders", {"n": n})
            await asyncio.wait_for(all_handled.wait(), timeout=30)
            stop.set()
            await worker
            events = await orders.read_since(0, limit=JOBS + 1)
            assert [event.payload["n"] for event in events] == list(range(JOBS))

    run_on_uvloop(main)
    assert sorted(handled) == list(range(JOBS))


def test_cancelled_claims_on_uvloop_lose_no_job(dsn: str) -> None:
    """Claims and acks cut short at random points: no job is lost, and no acked one
    is handed out again; a claim a cancellation cut off comes back on its lease."""
    acked: set[int] = set()
    uncertain: set[int] = set()  # claimed, then cancelled during the ack

    async def main() -> None:
        async with alkstore.open_async(dsn) as store:
            # A claim cut off after its commit still counts an attempt: with the
            # default 3, a job whose lease lapsed twice meanwhile would die.
            options = alkstore.QueueOpts(
                visibility_timeout_s=0.5, max_attempts=CANCELLED_CLAIMS + 1
            )
            queue = store.queue("uv", options)
            async with store.transaction() as tx:
                ids = {await tx.enqueue_tx("uv", None, {"n": n}) for n in range(JOBS)}
            rng = random.Random(7)
            for _ in range(CANCELLED_CLAIMS):
                work = _claim_ack_then_hang(queue, acked, uncertain)
                with pytest.raises(asyncio.TimeoutError):  # the builtin one only from 3.11
                    await asyncio.wait_for(work, rng.uniform(0, 0.004))
            await asyncio.sleep(0.6)  # every lapsed claim is claimable again
            drained = set()
            while (job := await queue.claim_one("collector")) is not None:
                drained.add(job.id)
                await job.ack()
            assert not drained & acked, "an acked job was handed out again"
            assert ids <= acked | uncertain | drained, "a job was lost"
            left = [s.total for s in await store.inspect().queues() if s.name == "uv"]
            assert left in ([], [0]), "jobs were left behind"

    run_on_uvloop(main)


async def _claim_ack_then_hang(
    queue: alkstore.AsyncQueue, acked: set[int], uncertain: set[int]
) -> None:
    """Claim and ack one job, then wait to be cancelled (the caller's timeout)."""
    job = await queue.claim_one("cancelled")
    if job is not None:
        uncertain.add(job.id)
        await job.ack()
        uncertain.discard(job.id)
        acked.add(job.id)
    await asyncio.Event().wait()
