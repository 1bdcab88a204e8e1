"""Streams, consumer offsets and notify/listen on a real SQLite file."""

from __future__ import annotations

import asyncio
import threading

import pytest

import alkstore
from alkstore import Wake
from alkstore_sqlite import SQLiteStore


def test_publish_and_read_since_in_offset_order(store: SQLiteStore) -> None:
    stream = store.stream("orders")
    offsets = [stream.publish({"n": n}) for n in range(5)]
    keyed = stream.publish_with_key("customer-7", {"n": 5})
    assert offsets == sorted(offsets)
    assert all(offset > 0 for offset in offsets)
    assert keyed > offsets[-1]
    events = stream.read_since(0)
    assert [e.offset for e in events] == [*offsets, keyed]
    assert [e.payload for e in events] == [{"n": n} for n in range(6)]
    assert events[-1].key == "customer-7"
    assert events[0].key is None
    assert stream.read_since(offsets[2], limit=2) == events[3:5]


def test_streams_are_separate(store: SQLiteStore) -> None:
    store.stream("a").publish("a1")
    store.stream("b").publish("b1")
    assert [e.payload for e in store.stream("a").read_since(0)] == ["a1"]


def test_offsets_only_move_forward(store: SQLiteStore) -> None:
    stream = store.stream("orders")
    assert stream.get_offset("projection") == 0
    assert not stream.save_offset("projection", 0)
    assert stream.save_offset("projection", 5)
    assert not stream.save_offset("projection", 3)
    assert not stream.save_offset("projection", 5)
    assert stream.get_offset("projection") == 5
    assert stream.save_offset("projection", 9)
    assert stream.get_offset("other") == 0


def test_read_from_consumer_starts_after_its_offset(store: SQLiteStore) -> None:
    stream = store.stream("orders")
    first = stream.publish(1)
    stream.publish(2)
    stream.save_offset("c", first)
    assert [e.payload for e in stream.read_from_consumer("c")] == [2]


def test_subscribe_replays_then_follows_commits_from_another_store(
    store: SQLiteStore, peer: SQLiteStore
) -> None:
    stream = store.stream("orders")
    stream.publish("old")
    with stream.subscribe("projection") as events:
        replayed = events.recv(1)
        assert replayed is not None
        assert replayed.payload == "old"
        threading.Timer(0.05, peer.stream("orders").publish, ["new"]).start()
        followed = events.recv(5)
        assert followed is not None
        assert followed.payload == "new"
        assert events.save_offset()
    assert stream.get_offset("projection") == followed.offset
    with stream.subscribe("projection") as resumed:
        assert resumed.recv(0.05) is None


def test_listen_wakes_on_notify_from_another_store(store: SQLiteStore, peer: SQLiteStore) -> None:
    with store.listen("orders") as wakes:
        threading.Timer(0.05, peer.notify, ["orders", {"id": 1}]).start()
        assert wakes.recv(5) == Wake("orders")


def test_listen_starts_from_now_and_ignores_other_channels(store: SQLiteStore) -> None:
    store.notify("orders", 1)
    with store.listen("orders") as wakes:
        store.notify("other", 1)
        # An old notify may still be in flight (at-least-once), never a later one missed:
        while wakes.recv(0.05) is not None:
            pass
        store.notify("orders", 2)
        assert wakes.recv(5) == Wake("orders")


def test_many_notifies_coalesce_but_none_is_lost(store: SQLiteStore, peer: SQLiteStore) -> None:
    with store.listen("c") as wakes:
        for n in range(20):
            peer.notify("c", n)
        assert wakes.recv(5) == Wake("c")


def test_each_listener_gets_its_own_wake(store: SQLiteStore) -> None:
    receivers = [store.listen("c") for _ in range(50)]
    store.notify("c", None)
    assert all(r.recv(5) == Wake("c") for r in receivers)


def test_a_notify_committed_after_listen_is_never_lost(
    store: SQLiteStore, peer: SQLiteStore
) -> None:
    for n in range(30):
        with store.listen(f"c{n}") as wakes:
            peer.notify(f"c{n}", n)
            assert wakes.recv(5) == Wake(f"c{n}"), f"round {n}"


def test_recv_async_and_async_iteration(store: SQLiteStore, peer: SQLiteStore) -> None:
    async def scenario() -> Wake | None:
        wakes = store.listen("c")
        asyncio.get_running_loop().call_later(0.05, peer.notify, "c", 1)
        wake = await wakes.recv_async(5)
        wakes.close()
        return wake

    assert asyncio.run(scenario()) == Wake("c")


def test_close_closes_receivers_and_refuses_calls(path: str) -> None:
    store = alkstore.open(path)
    wakes = store.listen("c")
    events = store.stream("s").subscribe("c")
    store.close()
    assert wakes.closed
    assert wakes.recv(1) is None
    assert events.recv(1) is None
    with pytest.raises(alkstore.Closed):
        store.notify("c", 1)
    with pytest.raises(alkstore.Closed):
        store.listen("c")
