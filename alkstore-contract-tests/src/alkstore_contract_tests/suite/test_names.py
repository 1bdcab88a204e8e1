"""Name rules hold at every entry point, ``*_tx`` counterparts included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import alkstore
from alkstore import Wake

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
