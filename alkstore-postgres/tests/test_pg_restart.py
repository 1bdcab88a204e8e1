"""A server restart mid-work loses nothing committed, and the Store carries on."""

from __future__ import annotations

import time
from typing import Any

import alkstore
from alkstore import RECONNECT_CHANNEL, Wake


def eventually(call: Any, attempts: int = 20) -> Any:
    """Retry ``call`` through the errors a restart leaves in the pool."""
    for _ in range(attempts - 1):
        try:
            return call()
        except alkstore.Database:
            time.sleep(0.25)
    return call()


def test_a_server_restart_loses_no_committed_job_event_or_offset(throwaway_server: Any) -> None:
    store = alkstore.open(throwaway_server.dsn, pool_max_size=4)
    try:
        queue, stream = store.queue("work"), store.stream("orders")
        job_ids = [queue.enqueue(n) for n in range(20)]
        offsets = [stream.publish(n) for n in range(10)]
        assert stream.save_offset("projection", offsets[4])
        wakes = store.listen("orders")

        throwaway_server.stop()
        throwaway_server.start()

        assert wakes.recv(30) == Wake(RECONNECT_CHANNEL)
        claimed = eventually(lambda: queue.claim_batch("w", 100))
        assert sorted(job.id for job in claimed) == job_ids
        assert [e.offset for e in stream.read_since(0)] == offsets
        assert stream.get_offset("projection") == offsets[4]
        assert queue.enqueue("after the restart") > max(job_ids)
        store.notify("orders", 1)
        assert wakes.recv(10) == Wake("orders")
    finally:
        store.close()
