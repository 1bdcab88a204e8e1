"""A closed store refuses every call with ``Closed``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import alkstore
from alkstore_contract_tests.suite._support import OpenStore


def test_every_call_after_close_raises_closed(store: alkstore.Store) -> None:
    queue, stream = store.queue("q"), store.stream("s")
    queue.enqueue(1)
    job = queue.claim_one("w")
    assert job is not None
    store.close()
    store.close()  # idempotent
    assert store.closed
    calls: list[Callable[[], object]] = [
        lambda: store.notify("c", 1),
        lambda: store.listen("c"),
        lambda: store.queue("q"),
        lambda: store.try_lock("l", "o", 1),
        store.begin_tx,
        lambda: queue.enqueue(1),
        lambda: queue.claim_one("w"),
        lambda: stream.publish(1),
        lambda: stream.read_since(0),
        job.ack,
        lambda: job.retry("x"),
        job.release,
        store.inspect,
        lambda: store.schedule("s", "@every 1s", "q", 1),
    ]
    for call in calls:
        with pytest.raises(alkstore.Closed):
            call()


def test_a_store_is_a_context_manager(open_store: OpenStore) -> None:
    store = open_store()
    with store:
        store.queue("q").enqueue(1)
    assert store.closed
