"""The wake fan-out every engine feeds: registry by key, failure as an event."""

from __future__ import annotations

import threading

import pytest

import alkstore
from alkstore import Wake
from alkstore._names import queue_wake_key, stream_wake_key
from alkstore.engine import WakeFanout


def test_each_receiver_of_a_key_gets_its_wakes_and_no_other_keys() -> None:
    fanout = WakeFanout(coalesce=True)
    orders, orders_too, other = (fanout.subscribe(k) for k in ("orders", "orders", "other"))
    fanout.deliver(["orders", "nobody-listens"])
    assert orders.recv(0) == Wake("orders")
    assert orders_too.recv(0) == Wake("orders")
    assert other.recv(0) is None


def test_coalescing_is_the_engines_choice() -> None:
    coalescing, separate = WakeFanout(coalesce=True), WakeFanout(coalesce=False)
    receivers = [fanout.subscribe("k") for fanout in (coalescing, separate)]
    for fanout in (coalescing, separate):
        fanout.deliver(["k", "k", "k"])
    assert [receiver.pending for receiver in receivers] == [1, 3]


def test_wakes_of_alkstores_own_keys_coalesce_whatever_the_engine_chose() -> None:
    """A queue's wakes only say "look again": a worker's receiver, kept while
    it is busy, holds one however many jobs were enqueued meanwhile."""
    separate = WakeFanout(coalesce=False)
    queue_wakes = separate.subscribe(queue_wake_key("jobs"))
    stream_wakes = separate.subscribe(stream_wake_key("events"))
    user_wakes = separate.subscribe("orders")
    separate.deliver([queue_wake_key("jobs"), stream_wake_key("events"), "orders"] * 3)
    assert [queue_wakes.pending, stream_wakes.pending, user_wakes.pending] == [1, 1, 3]


def test_a_reconnect_wake_reaches_every_receiver_whatever_its_key() -> None:
    fanout = WakeFanout(coalesce=False)
    receivers = [fanout.subscribe(key) for key in ("a", "b")]
    fanout.deliver_to_all(Wake(alkstore.RECONNECT_CHANNEL))
    assert [r.recv(0) for r in receivers] == [Wake(alkstore.RECONNECT_CHANNEL)] * 2


def test_closing_its_last_receiver_tells_the_engine_once_per_receiver() -> None:
    unsubscribed: list[str] = []
    fanout = WakeFanout(coalesce=True, on_unsubscribe=unsubscribed.append)
    first, second = fanout.subscribe("k"), fanout.subscribe("k")
    first.close()
    assert fanout.has_receivers("k")
    second.close()
    second.close()
    assert not fanout.has_receivers("k")
    assert fanout.keys() == set()
    assert unsubscribed == ["k", "k"]


def test_failure_closes_every_receiver_and_later_subscribes_name_the_cause() -> None:
    unsubscribed: list[str] = []
    fanout = WakeFanout(coalesce=True, on_unsubscribe=unsubscribed.append)
    receiver = fanout.subscribe("k")
    waiter = threading.Thread(target=receiver.recv)
    waiter.start()
    cause = OSError("the socket died")
    fanout.fail(cause, "the wake path died: the socket died")
    waiter.join(5)
    assert not waiter.is_alive()
    assert receiver.closed
    assert unsubscribed == []  # the engine closed them; nothing to UNLISTEN one by one
    with pytest.raises(alkstore.Database, match="the wake path died") as raised:
        fanout.subscribe("k")
    assert raised.value.__cause__ is cause
    assert fanout.error is not None


def test_after_close_subscribes_raise_closed_and_nothing_is_delivered() -> None:
    fanout = WakeFanout(coalesce=True)
    receiver = fanout.subscribe("k")
    fanout.close()
    fanout.deliver(["k"])
    assert receiver.closed
    assert receiver.recv(0) is None
    with pytest.raises(alkstore.Closed):
        fanout.subscribe("k")
    assert "closed" in repr(fanout)
