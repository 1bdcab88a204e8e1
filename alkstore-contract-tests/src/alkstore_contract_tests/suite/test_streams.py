"""Streams: commit-ordered offsets, explicit monotonic consumer offsets, replay."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import alkstore
from alkstore_contract_tests.suite._support import OpenStore


def test_publish_returns_positive_increasing_offsets_read_in_order(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = [stream.publish({"n": n}) for n in range(5)]
    keyed = stream.publish_with_key("customer-1", {"n": 5})
    assert offsets[0] > 0
    assert offsets == sorted(set(offsets))
    assert keyed > offsets[-1]
    events = stream.read_since(0)
    assert [e.offset for e in events] == [*offsets, keyed]
    assert [e.payload for e in events] == [{"n": n} for n in range(6)]
    assert [e.key for e in events] == [None] * 5 + ["customer-1"]
    assert all(e.stream == "orders" for e in events)
    assert events[0].created_at <= events[-1].created_at


def test_read_since_is_exclusive_and_honours_the_limit(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = [stream.publish(n) for n in range(6)]
    assert [e.payload for e in stream.read_since(offsets[1], limit=3)] == [2, 3, 4]
    assert stream.read_since(offsets[-1]) == []


def test_read_since_returns_up_to_the_limit_however_large(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        offsets = [tx.publish_tx("orders", n) for n in range(1_200)]
    stream = store.stream("orders")
    assert [e.offset for e in stream.read_since(0)] == offsets[:1_000]
    assert [e.offset for e in stream.read_since(0, limit=10_000)] == offsets
    assert [e.offset for e in stream.read_since(offsets[99], limit=1)] == [offsets[100]]
    stream.save_offset("projection", offsets[149])
    assert [e.offset for e in stream.read_from_consumer("projection", 2_000)] == offsets[150:]


def test_streams_do_not_mix(store: alkstore.Store) -> None:
    store.stream("a").publish("a")
    store.stream("b").publish("b")
    assert [e.payload for e in store.stream("a").read_since(0)] == ["a"]


def test_a_consumer_offset_starts_at_zero_and_only_moves_forward(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = [stream.publish(n) for n in range(5)]
    assert stream.get_offset("projection") == 0
    assert stream.save_offset("projection", offsets[3])
    assert not stream.save_offset("projection", offsets[3])
    assert not stream.save_offset("projection", offsets[1])
    assert stream.get_offset("projection") == offsets[3]
    assert store.stream("other").get_offset("projection") == 0


@settings(max_examples=20)
@given(saves=st.lists(st.integers(0, 30), max_size=15))
def test_offsets_are_monotonic_under_any_sequence_of_saves(
    store: alkstore.Store, saves: list[int]
) -> None:
    stream = store.stream("monotonic")
    while len(published := stream.read_since(0)) < 30:  # examples share the store
        stream.publish(len(published))
    offsets = [0, *(event.offset for event in published)]
    consumer = f"consumer-{uuid.uuid4()}"  # a fresh consumer each example
    highest = 0
    for offset in (offsets[n] for n in saves):
        assert stream.save_offset(consumer, offset) == (offset > highest)
        highest = max(highest, offset)
        assert stream.get_offset(consumer) == highest


def test_read_from_consumer_continues_after_its_saved_offset(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    first = stream.publish(1)
    stream.publish(2)
    stream.save_offset("projection", first)
    assert [e.payload for e in stream.read_from_consumer("projection")] == [2]


def test_subscribe_replays_then_follows_and_saves_only_when_asked(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    stream = store.stream("orders")
    stream.publish("old")
    with stream.subscribe("projection") as events:
        replayed = events.recv(5)
        assert replayed is not None
        assert replayed.payload == "old"
        assert stream.get_offset("projection") == 0  # no automatic saves
        threading.Timer(0.05, peer.stream("orders").publish, ["new"]).start()
        followed = events.recv(5)
        assert followed is not None
        assert followed.payload == "new"
        assert events.save_offset()
    assert stream.get_offset("projection") == followed.offset
    with stream.subscribe("projection") as resumed:
        assert resumed.recv(0.2) is None


def test_subscribe_resumes_after_a_restart_from_the_saved_offset(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    stream = store.stream("orders")
    for n in range(3):
        stream.publish(n)
    with stream.subscribe("projection") as events:
        first = events.recv(5)
        assert first is not None
        events.save_offset()
    with peer.stream("orders").subscribe("projection") as events:
        assert [e.payload for e in iter(lambda: events.recv(0.3), None)] == [1, 2]


def test_offsets_are_commit_ordered_under_concurrent_publishers(
    open_store: OpenStore, store: alkstore.Store
) -> None:
    publishers = [open_store() for _ in range(3)]

    def publish(publisher: alkstore.Store) -> None:
        for n in range(40):
            with publisher.transaction() as tx:
                tx.publish_tx("busy", n)
                tx.publish_tx("busy", n)

    threads = [threading.Thread(target=publish, args=(p,)) for p in publishers]
    for thread in threads:
        thread.start()
    stream = store.stream("busy")
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while any(thread.is_alive() for thread in threads) or len(seen) < 240:
        offsets = [event.offset for event in stream.read_since(0, limit=10_000)]
        assert time.monotonic() < deadline, f"read {len(seen)} of 240 events within 60 s"
        new = [offset for offset in offsets if offset not in seen]
        highest = max(seen, default=0)
        assert all(offset > highest for offset in new), (
            f"offsets {sorted(o for o in new if o <= highest)} appeared after the reader "
            f"had seen offset {highest}"
        )
        seen.update(new)
    for thread in threads:
        thread.join()


@pytest.mark.parametrize("limit", [0, -1, 10_001])
def test_read_limits_outside_1_to_10000_are_refused(store: alkstore.Store, limit: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        store.stream("orders").read_since(0, limit)
