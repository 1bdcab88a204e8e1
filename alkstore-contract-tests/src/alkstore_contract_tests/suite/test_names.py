"""Name rules hold at every entry point, ``*_tx`` counterparts included."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import alkstore
from alkstore import Wake
from alkstore_contract_tests.suite._support import eventually

Call = Callable[[alkstore.Store, Any], object]

ENTRY_POINTS: dict[str, Call] = {
    "notify": lambda s, n: s.notify(n, {}),
    "listen": lambda s, n: s.listen(n),
    "stream": lambda s, n: s.stream(n),
    "queue": lambda s, n: s.queue(n),
    "outbox": lambda s, n: s.outbox(n),
    "try_lock": lambda s, n: s.try_lock(n, "owner", 1),
    "schedule name": lambda s, n: s.schedule(n, "@every 1h", "jobs", {}),
    "schedule queue": lambda s, n: s.schedule("nightly", "@every 1h", n, {}),
    "unschedule": lambda s, n: s.unschedule(n),
}

TX_ENTRY_POINTS: dict[str, Callable[[alkstore.TxHandle, Any], object]] = {
    "enqueue_tx": lambda tx, n: tx.enqueue_tx(n, None, {}),
    "publish_tx": lambda tx, n: tx.publish_tx(n, {}),
    "publish_with_key_tx": lambda tx, n: tx.publish_with_key_tx(n, "k", {}),
    "notify_tx": lambda tx, n: tx.notify_tx(n, {}),
    "save_offset_tx": lambda tx, n: tx.save_offset_tx(n, "consumer", 1),
    "outbox_enqueue_tx": lambda tx, n: tx.outbox_enqueue_tx(n, None, {}),
}

BAD_NAMES = [
    ("", alkstore.InvalidName),
    (None, alkstore.InvalidName),
    (42, alkstore.InvalidName),
    ("__alkstore_", alkstore.ReservedName),
    ("__alkstore_listener_reconnected__", alkstore.ReservedName),
    ("__alkstore_scheduler", alkstore.ReservedName),
    ("__alkstore_outbox:webhooks", alkstore.ReservedName),
]


@pytest.mark.parametrize(("name", "error"), BAD_NAMES)
@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_store_entry_points_refuse_bad_names(
    store: alkstore.Store, entry_point: str, name: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        ENTRY_POINTS[entry_point](store, name)


@pytest.mark.parametrize(("name", "error"), BAD_NAMES)
@pytest.mark.parametrize("entry_point", sorted(TX_ENTRY_POINTS))
def test_tx_entry_points_refuse_bad_names_and_write_nothing(
    store: alkstore.Store, entry_point: str, name: object, error: type[Exception]
) -> None:
    with store.transaction() as tx:
        with pytest.raises(error):
            TX_ENTRY_POINTS[entry_point](tx, name)
        tx.enqueue_tx("witness", None, "the transaction goes on")
    job = store.queue("witness").claim_one("w")
    assert job is not None
    assert job.payload == "the transaction goes on"
    assert store.queue("witness").claim_one("w") is None


def test_a_locks_reserved_name_is_refused_even_for_try_lock(store: alkstore.Store) -> None:
    with pytest.raises(alkstore.ReservedName):
        store.try_lock(alkstore.SCHEDULER_LOCK, "me", 1)


unicode_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=1000).filter(
    lambda name: not name.startswith("__alkstore_")
)


@settings(max_examples=15)
@given(name=unicode_names)
def test_any_unicode_name_works_for_queues_and_streams(store: alkstore.Store, name: str) -> None:
    queue = store.queue(name)
    job_id = queue.enqueue({"name": name})
    job = queue.claim_one("w")
    assert job is not None
    assert (job.id, job.queue, job.payload) == (job_id, name, {"name": name})
    assert job.ack()
    stream = store.stream(name)
    offset = stream.publish_with_key(name, name)
    assert [(e.offset, e.key, e.payload) for e in stream.read_since(offset - 1)] == [
        (offset, name, name)
    ]


@settings(max_examples=10)
@given(name=unicode_names)
def test_any_unicode_channel_wakes_its_listener(
    store: alkstore.Store, peer: alkstore.Store, name: str
) -> None:
    with store.listen(name) as wakes:
        peer.notify(name, None)
        assert wakes.recv(5) == Wake(name)


@pytest.mark.parametrize(
    "name",
    ["a" * 1000, "ümlaut ✓ 名前", "quote'\"; DROP TABLE x; --", "sp ace", "new\nline", "x\x00y"],
)
def test_awkward_names_are_data_not_sql(store: alkstore.Store, name: str) -> None:
    store.queue(name).enqueue(1)
    assert store.queue(name).claim_one("w") is not None
    assert store.queue("a").claim_one("w") is None
    lock = store.try_lock(name, "owner", 5)
    assert lock is not None
    assert lock.release()


# Maximal names: 1,000 characters, the most the contract promises, each outside
# the Basic Multilingual Plane (4 bytes of UTF-8: 4,000 bytes a name) and drawn
# at random, so no compression shrinks them. Each has a twin differing only in
# its last character: an engine that kept a prefix, or a weak digest, of a name
# would mix the two up.

MAX_NAME = 1000


class Names:
    """Maximal names for one test, from a random generator seeded by the test's id."""

    def __init__(self, seed: str) -> None:
        self._random = random.Random(seed)

    def __call__(self) -> str:
        """A new name of 1,000 random 4-byte characters."""
        return "".join(chr(self._random.randrange(0x10000, 0x110000)) for _ in range(MAX_NAME))


def twin(name: str) -> str:
    """``name`` with only its last character changed."""
    return name[:-1] + chr(0x10000 + (ord(name[-1]) - 0x10000 + 1) % 0x100000)


@pytest.fixture
def maximal(request: pytest.FixtureRequest) -> Names:
    return Names(request.node.nodeid)


def test_maximal_channel_names_wake_their_own_listeners(
    store: alkstore.Store, peer: alkstore.Store, maximal: Names
) -> None:
    channel = maximal()
    with store.listen(channel) as wakes, store.listen(twin(channel)) as twin_wakes:
        peer.notify(channel, {"n": 1})
        assert wakes.recv(5) == Wake(channel)
        with peer.transaction() as tx:
            tx.notify_tx(channel, {"n": 2})
        assert wakes.recv(5) == Wake(channel)
        assert twin_wakes.recv(0.2) is None


def test_maximal_stream_consumer_and_key_names_keep_their_events_and_offsets(
    store: alkstore.Store, peer: alkstore.Store, maximal: Names
) -> None:
    name, consumer, key = maximal(), maximal(), maximal()
    stream = store.stream(name)
    first = stream.publish_with_key(key, 1)
    with peer.transaction() as tx:
        second = tx.publish_with_key_tx(name, key, 2)
        tx.publish_tx(name, 3)
    apart = peer.stream(twin(name)).publish(4)
    events = stream.read_since(0)
    assert [(e.offset, e.stream, e.key, e.payload) for e in events] == [
        (first, name, key, 1), (second, name, key, 2), (second + 1, name, None, 3),
    ]  # fmt: skip
    assert [(e.offset, e.payload) for e in peer.stream(twin(name)).read_since(0)] == [(apart, 4)]
    assert stream.save_offset(consumer, first)
    with peer.transaction() as tx:
        assert tx.save_offset_tx(name, twin(consumer), second)
    assert (stream.get_offset(consumer), stream.get_offset(twin(consumer))) == (first, second)
    assert [e.payload for e in stream.read_from_consumer(consumer)] == [2, 3]
    with stream.subscribe(consumer) as receiver:
        event = receiver.recv(5)
        assert event is not None
        assert (event.offset, event.stream, event.key) == (second, name, key)
        assert receiver.save_offset()
    assert stream.get_offset(consumer) == second
    stats = {s.name: s for s in store.inspect().streams()}
    assert stats[name].head == second + 1
    assert {(c.name, c.offset, c.lag) for c in stats[name].consumers} == {
        (consumer, second, 1), (twin(consumer), second, 1),
    }  # fmt: skip
    assert (stats[twin(name)].head, stats[twin(name)].consumers) == (apart, ())


def test_maximal_queue_worker_and_error_names_go_through_every_job_state(
    store: alkstore.Store, maximal: Names
) -> None:
    name, worker, error = maximal(), maximal(), maximal()
    queue = store.queue(name)
    ids = [queue.enqueue(n) for n in range(4)]
    with store.transaction() as tx:
        ids.append(tx.enqueue_tx(name, None, 4))
    other = store.queue(twin(name)).enqueue("other")
    assert queue.get_job(other) is None
    job = queue.claim_one(worker)
    assert job is not None
    assert (job.id, job.queue, job.worker_id) == (ids[0], name, worker)
    assert job.heartbeat(30)
    assert job.ack()
    retried = queue.claim_one(worker)
    assert retried is not None
    assert retried.retry(error, 0)
    info = queue.get_job(retried.id)
    assert info is not None
    assert (info.queue, info.state, info.worker_id, info.last_error) == (
        name, "pending", worker, error,
    )  # fmt: skip
    failed = queue.claim_one(worker)
    assert failed is not None
    assert failed.id == ids[2]  # the retried job is ready again, behind the older ones
    assert failed.fail(error)
    dead = queue.get_job(failed.id)
    assert dead is not None
    assert (dead.queue, dead.state, dead.worker_id, dead.last_error) == (
        name, "dead", worker, error,
    )  # fmt: skip
    assert [j.id for j in store.inspect().jobs(name, "dead")] == [failed.id]
    assert queue.cancel(failed.id)
    assert queue.cancel(retried.id)
    batch = queue.claim_batch(worker, 10)
    assert sorted(j.id for j in batch) == [ids[3], ids[4]]
    assert queue.ack_batch([j.id for j in batch], worker) == 2
    assert queue.sweep_expired() == 0
    stats = {s.name: s for s in store.inspect().queues()}
    assert name not in stats or stats[name].total == 0  # a queue with no rows may go unlisted
    assert stats[twin(name)].ready == 1
    claimed = store.queue(twin(name)).claim_one(worker)
    assert claimed is not None
    assert (claimed.id, claimed.queue) == (other, twin(name))


def test_maximal_outbox_names_deliver(store: alkstore.Store, maximal: Names) -> None:
    name, worker = maximal(), maximal()
    outbox = store.outbox(name)
    outbox.enqueue({"n": 1})
    with store.transaction() as tx:
        tx.outbox_enqueue_tx(name, None, {"n": 2})
    delivered: list[object] = []
    while outbox.run_once(worker, delivered.append):
        pass
    assert delivered == [{"n": 1}, {"n": 2}]
    assert not store.outbox(twin(name)).run_once(worker, delivered.append)


def test_maximal_lock_names_and_owners_exclude_and_release(
    store: alkstore.Store, peer: alkstore.Store, maximal: Names
) -> None:
    name, owner = maximal(), maximal()
    lock = store.try_lock(name, owner, 30)
    assert lock is not None
    assert (lock.name, lock.owner) == (name, owner)
    assert peer.try_lock(name, twin(owner), 30) is None
    again = peer.try_lock(name, owner, 30)  # the same owner: a handle, no new hold
    assert again is not None
    other = peer.try_lock(twin(name), twin(owner), 30)
    assert other is not None
    assert lock.renew(30)
    held = {info.name: info.owner for info in store.inspect().locks()}
    assert held == {name: owner, twin(name): twin(owner)}
    assert lock.release()
    taken = peer.try_lock(name, twin(owner), 30)
    assert taken is not None
    assert taken.release()
    assert other.release()


def test_maximal_schedule_names_fire_into_maximal_queues(
    store: alkstore.Store, maximal: Names
) -> None:
    name, queue = maximal(), maximal()
    created = store.schedule(name, "@every 1s", queue, {"from": "schedule"})
    assert (created.name, created.queue) == (name, queue)
    store.schedule(twin(name), "@every 1h", twin(queue), {"from": "twin"})
    listed = {s.name: s.queue for s in store.inspect().schedules()}
    assert listed == {name: queue, twin(name): twin(queue)}
    stop = threading.Event()
    runner = threading.Thread(target=store.run_schedules, args=(stop,), daemon=True)
    runner.start()
    try:
        job = eventually(lambda: store.queue(queue).claim_one("w"), timeout=10)
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive(), "run_schedules ignored its stop event"
    assert (job.queue, job.payload) == (queue, {"from": "schedule"})
    assert store.queue(twin(queue)).claim_one("w") is None
    assert store.unschedule(name)
    assert not store.unschedule(name)
    assert [s.name for s in store.inspect().schedules()] == [twin(name)]


astral_names = st.text(st.characters(min_codepoint=0x10000), min_size=MAX_NAME, max_size=MAX_NAME)


@settings(
    max_examples=5,
    suppress_health_check=[
        HealthCheck.large_base_example, HealthCheck.data_too_large, HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
    ],
)  # fmt: skip
@given(name=astral_names)
def test_any_maximal_astral_name_works_for_queues_streams_and_locks(
    store: alkstore.Store, name: str
) -> None:
    queue = store.queue(name)
    job_id = queue.enqueue(1)
    job = queue.claim_one(name)
    assert job is not None
    assert (job.id, job.queue, job.worker_id) == (job_id, name, name)
    assert job.ack()
    stream = store.stream(name)
    offset = stream.publish_with_key(name, 1)
    assert stream.save_offset(name, offset)
    assert stream.get_offset(name) == offset
    lock = store.try_lock(name, name, 5)
    assert lock is not None
    assert lock.release()
