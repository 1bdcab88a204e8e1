"""The dashboard's overview reads on each engine: taken per page while cheap,
shared by every viewer once slow, the next one brought by a wake.

These tests make every read "slow" (``budget_s=0``) and the period long, so
a new read can only have come from a wake. The server-sent events built on
them are tested through a real server in the product's tests/test_web_live.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import alkstore
from alkstore.web._backlog import Backlog
from alkstore.web._overview import Overview, OverviewRead
from alkstore.web._source import Source

WAIT_S = 20.0
LONG_PERIOD_S = 3600.0


@pytest.fixture
def dsn(target: str) -> str:
    """A fresh, empty store's target (conftest): a SQLite file, or a PostgreSQL schema."""
    return target


def ready(read: OverviewRead, queue: str) -> int:
    return next(stats.ready for stats in read.queues if stats.name == queue)


def shared_overview(store: alkstore.Store | alkstore.AsyncStore) -> Overview:
    """An overview whose every read is shared and only a wake brings the next."""
    return Overview(Source(store), Backlog(), budget_s=0.0, period_s=LONG_PERIOD_S, min_gap_s=0.05)


def test_a_slow_read_is_shared_and_the_next_comes_on_a_wake(dsn: str) -> None:
    async def scenario() -> None:
        with alkstore.open(dsn) as store:
            store.queue("mail").enqueue(1)
            overview = shared_overview(store)
            first = await overview.current()
            assert ready(first, "mail") == 1
            again = await overview.current()
            assert again.number == first.number, "a shared read is served, not repeated"
            await asyncio.sleep(0.2)  # the background reader now watches "mail"
            await asyncio.to_thread(store.queue("mail").enqueue, 2)
            woken = await overview.next_after(first.number, WAIT_S)
            assert woken is not None, "no read followed the enqueue's wake"
            assert ready(woken, "mail") == 2
            assert (await overview.current()).number >= woken.number

    asyncio.run(scenario())


def test_an_async_store_shares_its_reads_alike(dsn: str) -> None:
    async def scenario() -> None:
        async with alkstore.open_async(dsn) as store:
            await store.queue("mail").enqueue(1)
            overview = shared_overview(store)
            first = await overview.current()
            await asyncio.sleep(0.2)
            await store.queue("mail").enqueue(2)
            woken = await overview.next_after(first.number, WAIT_S)
            assert woken is not None
            assert ready(woken, "mail") == 2

    asyncio.run(scenario())


def test_cheap_reads_are_taken_per_page_and_never_older_than_it(dsn: str) -> None:
    async def scenario() -> None:
        with alkstore.open(dsn) as store:
            overview = Overview(Source(store), Backlog(), budget_s=3600.0)
            numbers = []
            for expected in range(1, 4):
                store.queue("mail").enqueue(expected)
                read = await overview.current()
                assert ready(read, "mail") == expected
                numbers.append(read.number)
            assert numbers == sorted(set(numbers))

    asyncio.run(scenario())


def test_a_failing_background_read_is_kept_as_the_failure_and_retried(dsn: str) -> None:
    async def scenario() -> None:
        store = alkstore.open(dsn)
        store.queue("mail").enqueue(1)
        overview = Overview(Source(store), Backlog(), budget_s=0.0, period_s=0.2, min_gap_s=0.05)
        first = await overview.current()
        store.close()
        deadline = time.monotonic() + WAIT_S
        while overview.failure is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert overview.failure is not None
        assert "closed" in overview.failure.lower()
        assert await overview.next_after(first.number, 0.5) is None, "no read came of it"
        shown = await overview.current()  # the last read that worked, under the failure
        assert shown is not None
        assert shown.number == first.number
        assert not overview.recent(shown)
        with pytest.raises(alkstore.Closed):  # a page's own read: a 503 page
            await Overview(Source(store), Backlog()).current(wait_s=WAIT_S)
        assert "Overview of" in repr(overview)

    asyncio.run(scenario())


def test_a_page_that_cannot_wait_is_told_a_read_is_under_way_and_gets_it_live(dsn: str) -> None:
    async def scenario() -> None:
        with alkstore.open(dsn) as store:
            store.queue("mail").enqueue(1)
            overview = Overview(Source(store), Backlog(), budget_s=3600.0)
            # A read runs on a thread (or the server): none has ended after no wait.
            assert await overview.current(wait_s=0.0) is None
            arrived = await overview.next_after(0, WAIT_S)
            assert arrived is not None, "the page's read never reached the live viewers"
            assert ready(arrived, "mail") == 1
            store.queue("mail").enqueue(2)
            shown = await overview.current(wait_s=0.0)
            assert shown is not None, "the last read, not none"
            assert shown.number >= arrived.number
            own = await overview.current(wait_s=WAIT_S)
            assert own is not None
            assert ready(own, "mail") == 2

    asyncio.run(scenario())


def test_a_stale_shared_read_is_served_at_once_and_a_fresh_one_follows(dsn: str) -> None:
    async def scenario() -> None:
        async with alkstore.open_async(dsn) as store:
            await store.queue("mail").enqueue(1)
            overview = Overview(
                Source(store), Backlog(), budget_s=0.0, period_s=0.2, min_gap_s=0.05, idle_s=0.1
            )
            await overview.current()
            await asyncio.sleep(1.5)  # nobody looks: the background reader stops
            await store.queue("mail").enqueue(2)
            served = await overview.current(wait_s=0.0)
            assert served is not None
            assert ready(served, "mail") == 1
            assert not overview.recent(served), "served as it was, and shown as stale"
            fresh = await overview.next_after(served.number, WAIT_S)
            assert fresh is not None, "no read followed a stale one"
            assert ready(fresh, "mail") == 2
            assert overview.recent(fresh)

    asyncio.run(scenario())


def test_pages_before_the_first_read_ends_wait_on_it_rather_than_read_again(dsn: str) -> None:
    async def scenario() -> None:
        with alkstore.open(dsn) as store:
            store.queue("mail").enqueue(1)
            overview = Overview(
                Source(store), Backlog(), budget_s=3600.0, period_s=3600.0, min_gap_s=3600.0
            )
            # Five pages at once: the first starts the read, the others join it.
            pages = await asyncio.gather(*(overview.current(wait_s=0.0) for _ in range(5)))
            assert pages == [None] * 5
            first = await overview.next_after(0, WAIT_S)
            assert first is not None
            assert first.number == 1
            assert await overview.next_after(1, 0.5) is None, "a page took a read of its own"

    asyncio.run(scenario())
