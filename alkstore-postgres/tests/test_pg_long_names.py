"""Names far past what the contract asks (1,000 characters) still work on
PostgreSQL: a notification's payload takes fewer than 8,000 bytes, so a wake
for a longer name carries its digest, which the listener maps back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import alkstore

OpenStore = Callable[..., alkstore.Store]

# Past pg_notify's payload limit, in characters and in bytes (each "é" is two).
LONG_NAMES = ["q" * 20_000, "é" * 4_000 + "tail"]


@pytest.mark.parametrize("name", LONG_NAMES, ids=["ascii", "two-byte"])
def test_a_long_channel_wakes_its_own_listener_only(open_store: OpenStore, name: str) -> None:
    assert len(name.encode()) > 8_000  # more than a notification's payload holds
    store, peer = open_store(), open_store()
    with store.listen(name) as receiver, store.listen(name[:-1] + "!") as neighbour:
        peer.notify(name, {"n": 1})
        wake = receiver.recv(5)
        assert wake is not None
        assert wake.channel == name
        assert neighbour.recv(0.2) is None


@pytest.mark.parametrize("name", LONG_NAMES, ids=["ascii", "two-byte"])
def test_a_long_queue_and_stream_work_and_wake_their_waiters(
    open_store: OpenStore, name: str
) -> None:
    store, peer = open_store(), open_store()
    queue = store.queue(name)
    with store.stream(name).subscribe("c") as subscription:
        job_id = peer.queue(name).enqueue({"n": 1})
        assert queue.wait(5)
        job = queue.claim_one("w")
        assert job is not None
        assert (job.id, job.payload) == (job_id, {"n": 1})
        assert job.fail("boom")
        assert [dead.id for dead in store.inspect().jobs(name, state="dead")] == [job_id]
        offset = peer.stream(name).publish("event")
        event = subscription.recv(5)
        assert event is not None
        assert (event.offset, event.payload) == (offset, "event")
    assert store.try_lock(name, name, 5) is not None
    assert peer.try_lock(name, "another owner", 5) is None


def test_a_long_queue_wakes_an_async_waiter(dsn: str, schema: str) -> None:
    name = LONG_NAMES[0]

    async def scenario() -> None:
        async with alkstore.open_async(dsn, schema=schema) as store:
            queue = store.queue(name)
            waiting = asyncio.ensure_future(queue.wait(5))
            await asyncio.sleep(0.2)  # parked: the wake, not a look, ends the wait
            with alkstore.open(dsn, schema=schema) as peer:
                peer.queue(name).enqueue(1)
            assert await waiting
            job = await queue.claim_one("w")
            assert job is not None
            assert await job.ack()

    asyncio.run(scenario())
