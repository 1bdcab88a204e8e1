"""An AsyncStore belongs to the event loop it was opened in (docs/asyncio.md).

Used from another loop it refuses every call that touches the database with a
``RuntimeError`` that says so, and writes nothing, rather than half working
(a pool that cannot refill, wakes that never come). It goes on working on its
own loop. These tests drive the async API directly, in either API mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest

import alkstore
from alkstore.engine import StoreTarget, TestProvider

WRONG_LOOP = "belongs to the event loop it was opened in"


@pytest.fixture
def own_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def async_store(
    provider: TestProvider, target: StoreTarget, own_loop: asyncio.AbstractEventLoop
) -> Iterator[alkstore.AsyncStore]:
    store = own_loop.run_until_complete(provider.engine.open_async(target.target, **target.options))
    yield store
    own_loop.run_until_complete(store.close())


def test_calls_from_another_event_loop_are_refused_and_write_nothing(
    async_store: alkstore.AsyncStore, own_loop: asyncio.AbstractEventLoop
) -> None:
    store = async_store
    queue, stream = store.queue("q"), store.stream("s")
    own_loop.run_until_complete(queue.enqueue("mine"))
    job = own_loop.run_until_complete(queue.claim_one("w"))
    assert job is not None
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.notify("c", 1),
        lambda: store.listen("c"),
        lambda: queue.enqueue("theirs"),
        lambda: queue.claim_one("w"),
        lambda: stream.publish("theirs"),
        lambda: stream.read_since(0),
        lambda: store.try_lock("l", "o", 60),
        store.begin_tx,
        lambda: store.schedule("tick", "@every 1h", "q", 1),
        lambda: store.inspect().queues(),
        job.ack,
        store.close,
    ]

    async def from_another_loop() -> None:
        for call in calls:
            with pytest.raises(RuntimeError, match=WRONG_LOOP):
                await call()
        with pytest.raises(RuntimeError, match=WRONG_LOOP):
            store.queue("q")  # a getter too, when called on the wrong loop

    asyncio.run(from_another_loop())
    assert not store.closed

    async def on_its_own_loop() -> None:
        assert [j.payload for j in await store.inspect().jobs("q")] == ["mine"]
        assert await stream.read_since(0) == []
        assert await store.inspect().locks() == []
        assert await store.inspect().schedules() == []
        assert await job.ack()
        async with store.transaction() as tx:
            await tx.enqueue_tx("q", None, "later")
        assert await queue.claim_one("w") is not None

    own_loop.run_until_complete(on_its_own_loop())


def test_handles_made_outside_any_loop_work_on_the_stores_loop(
    async_store: alkstore.AsyncStore, own_loop: asyncio.AbstractEventLoop
) -> None:
    queue = async_store.queue("q")  # plain calls, from code no loop runs
    outbox = async_store.outbox("mail")
    assert own_loop.run_until_complete(queue.enqueue(1)) > 0
    assert own_loop.run_until_complete(outbox.enqueue({"to": "a"})) > 0
