"""The outbox: sends that exist exactly when the business transaction commits."""

from __future__ import annotations

from typing import Any

import pytest

import alkstore
from alkstore import EnqueueOpts


def test_outbox_enqueue_tx_commits_with_the_transaction_and_is_delivered_once(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.outbox_enqueue_tx("webhooks", None, {"order": 1})
        raise RuntimeError("roll back")
    assert not peer.outbox("webhooks").run_once("w", lambda payload: None)
    with store.transaction() as tx:
        tx.outbox_enqueue_tx("webhooks", None, {"order": 2})
    delivered: list[Any] = []
    assert peer.outbox("webhooks").run_once("w", delivered.append)
    assert delivered == [{"order": 2}]
    assert not peer.outbox("webhooks").run_once("w", delivered.append)


def test_outbox_enqueue_works_outside_a_transaction(store: alkstore.Store) -> None:
    outbox = store.outbox("webhooks")
    assert outbox.enqueue({"n": 1}) > 0
    delivered: list[Any] = []
    assert outbox.run_once("w", delivered.append)
    assert delivered == [{"n": 1}]


def test_outboxes_are_separate(store: alkstore.Store) -> None:
    store.outbox("a").enqueue(1)
    assert not store.outbox("b").run_once("w", lambda payload: None)


def test_a_failing_delivery_is_retried_then_dead_lettered(store: alkstore.Store) -> None:
    outbox = store.outbox("hooks")
    outbox.enqueue("x", EnqueueOpts(max_attempts=1))
    attempts: list[Any] = []

    def endpoint_down(payload: Any) -> None:
        attempts.append(payload)
        raise ConnectionError("endpoint down")

    assert outbox.run_once("w", endpoint_down)
    assert attempts == ["x"]
    assert not outbox.run_once("w", endpoint_down), "a dead send is never delivered again"


def test_a_failed_delivery_waits_on_the_backoff_curve(store: alkstore.Store) -> None:
    outbox = store.outbox("hooks")
    outbox.enqueue("x")

    def flaky(payload: Any) -> None:
        raise TimeoutError("slow")

    assert outbox.run_once("w", flaky)
    # Backoff base 5 s, first attempt: the retry is at least 2.5 s away.
    assert not outbox.run_once("w", flaky)


def test_the_backing_queue_is_reachable_only_through_the_outbox(store: alkstore.Store) -> None:
    with pytest.raises(alkstore.ReservedName):
        store.queue("__alkstore_outbox:webhooks")
    with pytest.raises(alkstore.ReservedName), store.transaction() as tx:
        tx.enqueue_tx("__alkstore_outbox:webhooks", None, 1)
    with pytest.raises(alkstore.ReservedName):
        store.schedule("s", "@every 1h", "__alkstore_outbox:webhooks", 1)
