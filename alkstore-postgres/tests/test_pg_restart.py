"""A server restart mid-work loses nothing committed, and the Store carries on:
no user call after the restart fails on a connection the restart closed."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

import alkstore
from alkstore import RECONNECT_CHANNEL, Wake
from alkstore_postgres import PostgresStore
from alkstore_postgres.testing import ThrowawayServer


def test_a_server_restart_loses_nothing_and_fails_no_later_call(
    throwaway_server: ThrowawayServer,
) -> None:
    store = alkstore.open(throwaway_server.dsn, pool_max_size=4)
    assert isinstance(store, PostgresStore)
    try:
        queue, stream = store.queue("work"), store.stream("orders")
        job_ids = [queue.enqueue(n) for n in range(20)]
        offsets = [stream.publish(n) for n in range(10)]
        assert stream.save_offset("projection", offsets[4])
        wakes = store.listen("orders")
        with contextlib.ExitStack() as held:  # four idle pooled connections for the restart
            for _ in range(4):
                held.enter_context(store.connection())

        throwaway_server.stop()
        throwaway_server.start()

        claimed = queue.claim_batch("w", 100)  # the first call after the restart succeeds
        assert sorted(job.id for job in claimed) == job_ids
        assert [e.offset for e in stream.read_since(0)] == offsets
        assert stream.get_offset("projection") == offsets[4]
        later = [queue.enqueue(f"after the restart {n}") for n in range(20)]
        assert min(later) > max(job_ids)
        assert wakes.recv(30) == Wake(RECONNECT_CHANNEL)
        store.notify("orders", 1)
        assert wakes.recv(10) == Wake("orders")
    finally:
        store.close()


# A spinning listener never yields to the loop, so no asyncio timeout can end
# the test: pytest-timeout's thread ends it (and its process) instead.
@pytest.mark.timeout(120, method="thread")
def test_an_async_store_keeps_its_event_loop_free_while_the_server_is_down(
    throwaway_server: ThrowawayServer,
) -> None:
    """Receivers that come and go during an outage (parked workers do) must not
    make the LISTEN task spin: the loop keeps turning, and the wakes come back."""

    async def scenario() -> None:
        store = await alkstore.open_async(throwaway_server.dsn, connect_timeout_s=2)
        try:
            wakes = await store.listen("orders")
            throwaway_server.stop()
            await asyncio.sleep(0.5)  # the listener notices the loss
            cpu_before, started = time.process_time(), time.monotonic()
            for n in range(5):
                passing = await asyncio.wait_for(store.listen(f"passing {n}"), 5)
                passing.close()
                await asyncio.sleep(0.2)
            lag = time.monotonic() - started - 5 * 0.2
            cpu = time.process_time() - cpu_before
            assert lag < 1.0, f"the event loop stalled for {lag:.1f} s"
            assert cpu < 0.5, f"{cpu:.2f} s of CPU in 1 s of outage: the listener spins"
            throwaway_server.start()
            assert await asyncio.wait_for(wakes.recv_async(), 30) == Wake(RECONNECT_CHANNEL)
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_the_pool_is_back_within_seconds_of_a_long_outage_ending(
    throwaway_server: ThrowawayServer,
) -> None:
    """psycopg_pool doubles its reconnect delay for as long as the outage lasts;
    the engine's pools give up on an attempt after a few seconds and start
    afresh. After 16 s down, the default's next attempt would come 15 s after
    the restart; the store answers within a few seconds."""
    store = alkstore.open(throwaway_server.dsn, connect_timeout_s=1, pool_max_size=2)
    try:
        queue = store.queue("work")
        queue.enqueue("before")
        throwaway_server.stop()
        down_until = time.monotonic() + 16
        while time.monotonic() < down_until:  # asking all along, as a runner does
            with pytest.raises(alkstore.Database):
                queue.enqueue("during")
            time.sleep(0.5)
        throwaway_server.start()
        back = time.monotonic()
        while True:
            try:
                queue.enqueue("after")
                break
            except alkstore.Database:
                assert time.monotonic() - back < 30, "the store never came back"
                time.sleep(0.1)
        assert time.monotonic() - back < 6
    finally:
        store.close()
