"""A server restart mid-work loses nothing committed, and the Store carries on:
no user call after the restart fails on a connection the restart closed."""

from __future__ import annotations

import contextlib

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
