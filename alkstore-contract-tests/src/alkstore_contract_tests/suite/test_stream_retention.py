"""Stream retention (contract 1.5): ``trim``, ``retain`` and ``trimmed_through``.

A trim deletes a prefix of the stream and records how far it went. A read
reaching back into it raises ``StreamTrimmed`` — never a silent skip — and
offsets are never handed out again: the head stays where it was.
"""

from __future__ import annotations

import threading
import time

import pytest

import alkstore
from alkstore import StreamEvent, StreamTrimmed
from alkstore_contract_tests.suite._api import make_consumer
from alkstore_contract_tests.suite._support import start_thread


def publish(stream: alkstore.Stream, count: int, start: int = 0) -> list[int]:
    return [stream.publish({"n": n}) for n in range(start, start + count)]


def numbers(events: list[StreamEvent]) -> list[int]:
    return [event.payload["n"] for event in events]


def head_of(store: alkstore.Store, name: str) -> int:
    (stats,) = [s for s in store.inspect().streams() if s.name == name]
    return stats.head


def test_trim_deletes_through_the_offset_and_says_how_many(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 10)
    assert stream.trimmed_through() == 0
    assert stream.trim(offsets[3]) == 4
    assert stream.trimmed_through() == offsets[3]
    assert numbers(stream.read_since(offsets[3])) == list(range(4, 10))
    assert stream.trim(offsets[3]) == 0, "nothing is left there to trim"
    assert stream.trim(offsets[1]) == 0, "a trim never moves back"
    assert stream.trimmed_through() == offsets[3]


def test_a_read_reaching_into_trimmed_events_raises_instead_of_skipping(
    store: alkstore.Store,
) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 5)
    stream.trim(offsets[2])
    for after in (0, offsets[0], offsets[2] - 1):
        with pytest.raises(StreamTrimmed) as raised:
            stream.read_since(after)
        assert (raised.value.stream, raised.value.after) == ("orders", after)
        assert raised.value.trimmed_through == offsets[2]
        assert isinstance(raised.value, alkstore.Error)
    stream.save_offset("late", offsets[0])
    with pytest.raises(StreamTrimmed):
        stream.read_from_consumer("late")
    assert stream.save_offset("late", offsets[2]), "the documented reset: skip the gap on purpose"
    assert numbers(stream.read_from_consumer("late")) == [3, 4]


def test_offsets_are_never_reused_after_a_trim(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 3)
    assert stream.trim(offsets[-1]) == 3
    assert stream.read_since(offsets[-1]) == []
    assert head_of(store, "orders") == offsets[-1], "the head stays where it was"
    assert stream.save_offset("reader", offsets[-1]), "the head is still a valid offset"
    later = stream.publish({"n": 3})
    assert later > offsets[-1]
    assert numbers(stream.read_since(offsets[-1])) == [3]


def test_a_trim_past_the_head_stops_at_it(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 3)
    assert stream.trim(2**63 - 1) == 3
    assert stream.trimmed_through() == offsets[-1]
    later = stream.publish({"n": 3})
    assert numbers(stream.read_since(offsets[-1])) == [3], f"event {later} was trimmed ahead"
    assert store.stream("never-published").trim(10) == 0


def test_a_trim_leaves_other_streams_alone(store: alkstore.Store) -> None:
    orders, audit = store.stream("orders"), store.stream("audit")
    for n in range(4):
        orders.publish({"n": n})
        audit.publish({"n": n})
    assert orders.trim(orders.read_since(0)[-1].offset) == 4
    assert numbers(audit.read_since(0)) == [0, 1, 2, 3]
    assert audit.trimmed_through() == 0


def test_trim_refuses_bad_offsets(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    for bad in (-1, 2**63, 1.5, "3", True, None):
        with pytest.raises(ValueError, match="offset"):
            stream.trim(bad)  # type: ignore[arg-type]


def test_retain_keeps_the_newest_events(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 10)
    assert stream.retain(keep_last=3) == 7
    assert numbers(stream.read_since(stream.trimmed_through())) == [7, 8, 9]
    assert stream.trimmed_through() == offsets[6]
    assert stream.retain(keep_last=3) == 0
    assert stream.retain(keep_last=0) == 3
    assert stream.read_since(offsets[-1]) == []


def test_retain_by_age_trims_only_older_events(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    old = publish(stream, 4)
    time.sleep(1.2)
    publish(stream, 2, start=4)
    assert stream.retain(max_age_s=1.0) == 4
    assert stream.trimmed_through() == old[-1]
    assert numbers(stream.read_since(old[-1])) == [4, 5]
    assert stream.retain(max_age_s=3600) == 0


def test_retain_with_both_limits_trims_what_either_allows(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    publish(stream, 4)
    time.sleep(1.2)
    publish(stream, 4, start=4)
    assert stream.retain(max_age_s=3600, keep_last=2) == 6, "keep_last trims more here"
    publish(stream, 1, start=8)
    assert stream.retain(max_age_s=0, keep_last=100) == 3, "and max_age_s here"


def test_retain_spares_the_slowest_consumer_unless_forced(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 10)
    stream.save_offset("fast", offsets[8])
    stream.save_offset("slow", offsets[2])
    assert stream.retain(keep_last=1) == 3, "only what both consumers have read"
    assert numbers(stream.read_from_consumer("slow")) == list(range(3, 10))
    assert stream.retain(keep_last=1, force=True) == 6
    with pytest.raises(StreamTrimmed):
        stream.read_from_consumer("slow")


def test_retain_needs_a_limit_and_checks_each(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    with pytest.raises(ValueError, match="max_age_s, keep_last"):
        stream.retain()
    with pytest.raises(ValueError, match="keep_last"):
        stream.retain(keep_last=-1)
    with pytest.raises(ValueError, match="max_age_s"):
        stream.retain(max_age_s=float("nan"))
    with pytest.raises(ValueError, match="force"):
        stream.retain(keep_last=1, force="yes")  # type: ignore[arg-type]


def test_a_receiver_behind_a_trim_raises_on_its_next_read(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 3)
    receiver = stream.subscribe("late")
    try:
        stream.trim(offsets[1])
        with pytest.raises(StreamTrimmed):
            receiver.recv(timeout=5)
    finally:
        receiver.close()


def test_a_consumer_behind_a_trim_stops_with_the_error(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 5)
    stream.save_offset("late", offsets[0])
    stream.trim(offsets[3])
    handled: list[int] = []
    consumer = make_consumer(store, stream, "late", lambda event: handled.append(event.offset))
    raised: list[BaseException] = []
    stop = threading.Event()

    def run() -> None:
        try:
            consumer.run(stop)
        except BaseException as exc:  # the test inspects it
            raised.append(exc)

    thread = start_thread(run)
    thread.join(30)
    stop.set()
    assert not thread.is_alive(), "the consumer kept running behind a trim"
    assert handled == [], "events after the gap were handled as if nothing was lost"
    [error] = raised
    assert isinstance(error, StreamTrimmed)
    assert error.trimmed_through == offsets[3]
    assert stream.get_offset("late") == offsets[0]


def test_inspection_shows_the_head_and_the_lag_a_consumer_can_still_read(
    store: alkstore.Store,
) -> None:
    stream = store.stream("orders")
    offsets = publish(stream, 5)
    stream.save_offset("late", offsets[0])
    stream.trim(offsets[2])
    (stats,) = [s for s in store.inspect().streams() if s.name == "orders"]
    assert stats.head == offsets[-1]
    assert [(c.name, c.offset, c.lag) for c in stats.consumers] == [("late", offsets[0], 2)]
    stream.trim(offsets[-1])
    (stats,) = [s for s in store.inspect().streams() if s.name == "orders"]
    assert (stats.head, stats.consumers[0].lag) == (offsets[-1], 0)
