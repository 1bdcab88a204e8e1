"""Edges of the contract that hostile callers find: closing under a transaction,
stale batch acks, offsets past the head, odd timeouts and odd arguments."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

import alkstore
from alkstore import QueueOpts, TxState, Wake
from alkstore.engine import TestProvider
from alkstore_contract_tests.suite._support import needs, start_thread

# Closing a store with a transaction open


def test_closing_a_store_rolls_back_its_open_transaction(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    tx = store.begin_tx()
    tx.enqueue_tx("q", None, "uncommitted")
    tx.publish_tx("s", "uncommitted")
    store.close()
    assert tx.state is TxState.ROLLED_BACK
    with pytest.raises(alkstore.Closed):
        tx.commit()
    assert peer.queue("q").claim_one("w") is None
    assert peer.stream("s").read_since(0) == []


def test_a_transaction_rolled_back_by_close_holds_nothing_a_peer_waits_for(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    tx = store.begin_tx()
    tx.publish_tx("s", "uncommitted")  # may hold the stream's head, or the write lock
    tx.enqueue_tx("q", None, "uncommitted")
    store.close()
    published: list[int] = []
    writer = start_thread(lambda: published.append(peer.stream("s").publish("after")))
    writer.join(10)
    assert published, "a peer's publish still waits for the closed store's transaction"
    assert [event.payload for event in peer.stream("s").read_since(0)] == ["after"]


def test_a_transaction_cannot_begin_on_a_closed_store(store: alkstore.Store) -> None:
    store.close()
    with pytest.raises(alkstore.Closed):
        store.begin_tx()


# Batch acks are fenced like single acks


def test_a_stale_ack_batch_by_id_leaves_a_newer_claim_under_the_same_worker_id_alone(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.2))
    job_id = queue.enqueue("work")
    stale = queue.claim_one("w")
    assert stale is not None
    time.sleep(0.3)
    again = peer.queue("q").claim_one("w")  # another process, the same worker id
    assert again is not None
    assert again.attempts == 2
    assert queue.ack_batch([job_id], "w") == 0
    info = peer.queue("q").get_job(job_id)
    assert info is not None
    assert (info.state, info.attempts) == ("processing", 2)
    assert again.ack()


def test_ack_batch_takes_claimed_jobs_and_fences_each_by_its_attempt(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.2))
    queue.enqueue("work")
    stale = queue.claim_one("w")
    assert stale is not None
    time.sleep(0.3)
    fresh = queue.claim_one("w")
    assert fresh is not None
    assert fresh.attempts == 2
    assert queue.ack_batch([stale], "w") == 0
    assert queue.ack_batch([fresh], "w") == 1
    assert queue.get_job(fresh.id) is None


def test_ack_batch_by_id_acks_the_claim_this_store_handed_out(store: alkstore.Store) -> None:
    queue = store.queue("q")
    ids = [queue.enqueue(n) for n in range(3)]
    claimed = queue.claim_batch("w", 3)
    assert sorted(job.id for job in claimed) == ids
    assert queue.ack_batch(ids, "w") == 3
    assert all(queue.get_job(job_id) is None for job_id in ids)


def test_ack_batch_acks_only_its_own_queues_jobs(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    """Ids of another queue's jobs, claimed by the same worker id, ack nothing,
    through this store or another; the jobs stay claimed."""
    mine, other = store.queue("mine"), store.queue("other")
    job_id = other.enqueue("work")
    claimed = other.claim_one("w")
    assert claimed is not None
    assert mine.ack_batch([job_id], "w") == 0
    assert peer.queue("mine").ack_batch([job_id], "w") == 0
    info = other.get_job(job_id)
    assert info is not None
    assert info.state == "processing"
    assert other.ack_batch([job_id], "w") == 1


def test_ack_batch_by_id_from_another_store_acks_the_workers_current_claim(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue("work")
    assert queue.claim_one("w") is not None
    assert peer.queue("q").ack_batch([job_id], "someone-else") == 0
    assert peer.queue("q").ack_batch([job_id], "w") == 1


# Offsets never pass the head


def test_saving_an_offset_past_the_streams_head_is_refused(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    with pytest.raises(ValueError, match="past the head"):
        stream.save_offset("projection", 1)
    head = stream.publish("first")
    for offset in (head + 1, 10**12):
        with pytest.raises(ValueError, match="past the head"):
            stream.save_offset("projection", offset)
    assert stream.get_offset("projection") == 0
    assert stream.save_offset("projection", head)
    later = stream.publish("second")
    assert [event.offset for event in stream.read_from_consumer("projection")] == [later]


def test_save_offset_tx_past_the_head_is_refused_and_sees_its_own_publishes(
    store: alkstore.Store,
) -> None:
    with store.transaction() as tx:
        with pytest.raises(ValueError, match="past the head"):
            tx.save_offset_tx("orders", "projection", 10**12)
        offset = tx.publish_tx("orders", "in the transaction")
        assert tx.save_offset_tx("orders", "projection", offset)
    assert store.stream("orders").get_offset("projection") == offset


def test_an_event_receiver_refuses_to_save_past_the_head(store: alkstore.Store) -> None:
    stream = store.stream("orders")
    stream.publish("one")
    with stream.subscribe("projection") as events:
        event = events.recv(5)
        assert event is not None
        with pytest.raises(ValueError, match="past the head"):
            events.save_offset(event.offset + 10**9)
        assert events.save_offset()
    assert stream.get_offset("projection") == event.offset


# Timeouts of receivers


def test_recv_refuses_a_nan_timeout(store: alkstore.Store) -> None:
    with store.listen("c") as wakes, store.stream("s").subscribe("r") as events:
        for receiver in (wakes, events):
            with pytest.raises(ValueError, match="NaN"):
                receiver.recv(math.nan)
            with pytest.raises(ValueError, match="NaN"):
                asyncio.run(receiver.recv_async(math.nan))


def test_recv_with_an_infinite_timeout_waits_like_none(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    with store.listen("c") as wakes:
        threading.Timer(0.1, peer.notify, ["c", None]).start()
        assert wakes.recv(math.inf) == Wake("c")
    with store.stream("s").subscribe("r") as events:
        threading.Timer(0.1, peer.stream("s").publish, ["late"]).start()
        event = events.recv(math.inf)
        assert event is not None
        assert event.payload == "late"


def test_recv_with_a_negative_timeout_only_looks(store: alkstore.Store) -> None:
    with store.listen("c") as wakes:
        started = time.monotonic()
        assert wakes.recv(-1) is None
        assert wakes.recv(-math.inf) is None
        assert time.monotonic() - started < 1


# Odd arguments


@pytest.mark.parametrize("key", [7, None, b"bytes", "\ud800"])
def test_an_unusable_event_key_is_an_invalid_name(store: alkstore.Store, key: object) -> None:
    with pytest.raises(alkstore.InvalidName):
        store.stream("s").publish_with_key(key, 1)  # type: ignore[arg-type]
    with store.transaction() as tx, pytest.raises(alkstore.InvalidName):
        tx.publish_with_key_tx("s", key, 1)  # type: ignore[arg-type]
    assert store.stream("s").read_since(0) == []


def test_an_outbox_refuses_a_deliver_that_cannot_be_called_before_claiming(
    store: alkstore.Store,
) -> None:
    outbox = store.outbox("hooks")
    job_id = outbox.enqueue("send")
    with pytest.raises(TypeError, match="callable"):
        outbox.run_once("w", None)  # type: ignore[arg-type]
    info = store.inspect().jobs(outbox.queue_name)
    assert [(job.id, job.state, job.attempts) for job in info] == [(job_id, "pending", 0)]


# Leases are durations


def test_a_claimed_job_carries_the_visibility_timeout_stamped_on_it(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    store.queue("q", QueueOpts(visibility_timeout_s=7.5)).enqueue(1)
    job = peer.queue("q").claim_one("w")  # a view declaring the default 300 s
    assert job is not None
    assert job.visibility_timeout_s == 7.5


# A transaction ended behind its handle's back


def _commit_behind_its_back(provider: TestProvider, tx: alkstore.TxHandle) -> None:
    """Run the dialect's COMMIT through ``tx.execute``; the engine may refuse it at once."""
    needs(provider, "commit_behind_its_back")
    try:
        provider.commit_behind_its_back(tx)
    except alkstore.Database as exc:
        if "behind its handle's back" not in str(exc):
            raise


def test_writes_after_a_commit_behind_the_handles_back_are_refused(
    provider: TestProvider, store: alkstore.Store
) -> None:
    tx = store.begin_tx()
    tx.enqueue_tx("before", None, "committed by the caller's COMMIT")
    _commit_behind_its_back(provider, tx)
    with pytest.raises((alkstore.Database, alkstore.Closed)):
        tx.enqueue_tx("after", None, "would escape any rollback")
    with pytest.raises((alkstore.Database, alkstore.Closed)):
        tx.publish_tx("after", "would escape any rollback")
    with pytest.raises((alkstore.Database, alkstore.Closed)):
        tx.rollback()
    assert tx.state is TxState.ENDED_ELSEWHERE
    assert store.queue("after").claim_one("w") is None
    assert store.stream("after").read_since(0) == []
    assert store.queue("before").claim_one("w") is not None


def test_a_transaction_block_committed_behind_its_back_raises_and_the_store_goes_on(
    provider: TestProvider, store: alkstore.Store
) -> None:
    refused = pytest.raises((alkstore.Database, alkstore.Closed), match="behind its handle's back")
    with refused, store.transaction() as tx:
        _commit_behind_its_back(provider, tx)
        tx.notify_tx("never", None)
    with store.transaction() as tx:
        job_id = tx.enqueue_tx("q", None, "fine")
    job = store.queue("q").claim_one("w")
    assert job is not None
    assert job.id == job_id
