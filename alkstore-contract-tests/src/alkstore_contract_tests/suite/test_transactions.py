"""The transaction seam: every side effect commits or rolls back with the business write."""

from __future__ import annotations

import time

import pytest

import alkstore
from alkstore import Wake
from alkstore.engine import TestProvider
from alkstore_contract_tests.suite._api import business_rows, write_business_row
from alkstore_contract_tests.suite._support import SIDE_EFFECTS, needs


def visible(store: alkstore.Store, kind: str, wakes: alkstore.WakeReceiver) -> bool:
    """Whether the side effect ``kind`` can be seen from ``store``."""
    if kind == "enqueue_tx":
        return store.queue("emails").claim_one("w") is not None
    if kind in ("publish_tx", "publish_with_key_tx"):
        return store.stream("orders").read_since(0) != []
    if kind == "notify_tx":
        return wakes.recv(0.3) == Wake("orders")
    if kind == "save_offset_tx":
        return store.stream("orders").get_offset("projection") > 0
    return store.outbox("hooks").run_once("w", lambda payload: None)


@pytest.mark.parametrize("kind", sorted(SIDE_EFFECTS))
def test_a_rollback_by_exception_leaves_no_ghost(
    store: alkstore.Store, peer: alkstore.Store, kind: str
) -> None:
    with peer.listen("orders") as wakes:
        with pytest.raises(RuntimeError), store.transaction() as tx:
            SIDE_EFFECTS[kind](tx)
            raise RuntimeError("the business rule failed")
        assert not visible(peer, kind, wakes)


@pytest.mark.parametrize("kind", sorted(SIDE_EFFECTS))
def test_an_explicit_rollback_leaves_no_ghost(
    store: alkstore.Store, peer: alkstore.Store, kind: str
) -> None:
    with peer.listen("orders") as wakes:
        tx = store.begin_tx()
        SIDE_EFFECTS[kind](tx)
        tx.rollback()
        assert not visible(peer, kind, wakes)


@pytest.mark.parametrize("kind", sorted(SIDE_EFFECTS))
def test_a_commit_makes_the_side_effect_visible(
    store: alkstore.Store, peer: alkstore.Store, kind: str
) -> None:
    with peer.listen("orders") as wakes:
        with store.transaction() as tx:
            SIDE_EFFECTS[kind](tx)
        assert visible(peer, kind, wakes)


def test_side_effects_and_the_business_write_commit_together(
    provider: TestProvider, store: alkstore.Store, peer: alkstore.Store
) -> None:
    needs(provider, "write_business_row")
    with pytest.raises(RuntimeError), store.transaction() as tx:
        write_business_row(provider, tx, "rolled-back")
        tx.enqueue_tx("emails", None, "rolled-back")
        raise RuntimeError("roll back")
    assert "rolled-back" not in business_rows(provider, peer)
    assert peer.queue("emails").claim_one("w") is None
    with store.transaction() as tx:
        write_business_row(provider, tx, "committed")
        tx.enqueue_tx("emails", None, "committed")
        tx.publish_tx("orders", "committed")
    assert business_rows(provider, peer) == {"committed"}
    job = peer.queue("emails").claim_one("w")
    assert job is not None
    assert job.payload == "committed"
    assert [e.payload for e in peer.stream("orders").read_since(0)] == ["committed"]


def test_what_a_transaction_publishes_is_stored_whole(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        plain = tx.publish_tx("orders", {"n": 1})
        keyed = tx.publish_with_key_tx("orders", "customer-7", {"n": 2})
    events = store.stream("orders").read_since(0)
    assert [(e.offset, e.stream, e.key, e.payload) for e in events] == [
        (plain, "orders", None, {"n": 1}), (keyed, "orders", "customer-7", {"n": 2}),
    ]  # fmt: skip


def test_save_offset_tx_advances_once_and_never_back(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        offsets = [tx.publish_tx("orders", n) for n in range(6)]
        assert tx.save_offset_tx("orders", "c", offsets[4])
        assert not tx.save_offset_tx("orders", "c", offsets[4])
        assert not tx.save_offset_tx("orders", "c", offsets[2])
        assert tx.save_offset_tx("orders", "c", offsets[5])
    assert store.stream("orders").get_offset("c") == offsets[5]
    with store.transaction() as tx:
        assert not tx.save_offset_tx("orders", "c", offsets[5])


def test_enqueue_tx_stamps_the_opts_this_store_declared(store: alkstore.Store) -> None:
    store.queue("emails", alkstore.QueueOpts(max_attempts=7))
    with store.transaction() as tx:
        declared = tx.enqueue_tx("emails", None, 1)
        default = tx.enqueue_tx("other", alkstore.EnqueueOpts(priority=2), 1)
        outbox = tx.outbox_enqueue_tx("hooks", alkstore.EnqueueOpts(max_attempts=9), 1)
    declared_info = store.queue("emails").get_job(declared)
    default_info = store.queue("other").get_job(default)
    assert declared_info is not None
    assert default_info is not None
    assert declared_info.max_attempts == 7
    assert (default_info.max_attempts, default_info.priority) == (3, 2)
    assert outbox > 0


def test_a_handle_is_closed_after_commit_or_rollback(store: alkstore.Store) -> None:
    tx = store.begin_tx()
    tx.commit()
    with pytest.raises(alkstore.Closed):
        tx.enqueue_tx("q", None, 1)
    with pytest.raises(alkstore.Closed):
        tx.rollback()
    tx = store.begin_tx()
    tx.rollback()
    with pytest.raises(alkstore.Closed):
        tx.commit()


def test_a_commit_after_a_failed_statement_never_reports_what_it_dropped(
    provider: TestProvider, store: alkstore.Store, peer: alkstore.Store
) -> None:
    """After a failed statement an engine may go on (SQLite rolls back only the
    statement) or abort the whole transaction (PostgreSQL): either way a commit
    that returns has committed what was written before, and one that did not
    says so — even though the caller caught the statement's error."""
    if not provider.speaks_sql:
        pytest.skip("the provider's engine does not run SQL (TestProvider.speaks_sql)")
    tx = store.begin_tx()
    job_id = tx.enqueue_tx("emails", None, "written before the failure")
    with pytest.raises(alkstore.Database):
        tx.execute("SELECT * FROM alkstore_contract_no_such_table")
    try:
        tx.commit()
    except alkstore.Database:
        assert peer.queue("emails").get_job(job_id) is None
    else:
        assert peer.queue("emails").get_job(job_id) is not None
    with pytest.raises(alkstore.Closed):
        tx.enqueue_tx("emails", None, "after the end")
    for _ in range(8):  # more than a small pool holds: each connection came back usable
        with store.transaction() as again:
            again.enqueue_tx("after", None, "the store goes on")
    assert len(peer.queue("after").claim_batch("w", 10)) == 8


def test_tx_connection_is_the_drivers(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        assert tx.connection is not None


def test_many_enqueues_in_one_transaction_each_get_their_own_job(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    # Engines may send a transaction's enqueues together; the ids must still
    # name exactly the jobs enqueued, across other writes in between.
    with store.transaction() as tx:
        first = {tx.enqueue_tx("emails", None, n): n for n in range(40)}
        tx.publish_tx("orders", "between")
        second = {tx.enqueue_tx("other", None, n): n for n in range(40, 80)}
        tx.save_offset_tx("orders", "c", 1)
        third = {tx.enqueue_tx("emails", None, n): n for n in range(80, 100)}
    expected = {**first, **second, **third}
    assert len(expected) == 100
    for job_id, payload in expected.items():
        queue = "other" if 40 <= payload < 80 else "emails"
        info = peer.queue(queue).get_job(job_id)
        assert info is not None, job_id
        assert info.payload == payload


def test_a_rolled_back_batch_of_enqueues_leaves_nothing(store: alkstore.Store) -> None:
    with pytest.raises(RuntimeError), store.transaction() as tx:
        ids = [tx.enqueue_tx("emails", None, n) for n in range(50)]
        raise RuntimeError("abandon")
    assert all(store.queue("emails").get_job(job_id) is None for job_id in ids)
    assert store.queue("emails").claim_one("w") is None


def test_options_of_every_enqueue_in_a_transaction_are_stamped(store: alkstore.Store) -> None:
    queue = store.queue("emails", alkstore.QueueOpts(visibility_timeout_s=30, max_attempts=4))
    at = time.time() + 3_600
    with store.transaction() as tx:
        plain = tx.enqueue_tx("emails", None, "plain")
        delayed = tx.enqueue_tx("emails", alkstore.EnqueueOpts(delay=60), "delayed")
        tuned = tx.enqueue_tx(
            "emails", alkstore.EnqueueOpts(priority=5, max_attempts=7, expires=100), "tuned"
        )
        timed = tx.enqueue_tx("emails", alkstore.EnqueueOpts(run_at=at), "timed")
    now = time.time()

    def info(job_id: int) -> alkstore.JobInfo:
        found = queue.get_job(job_id)
        assert found is not None
        return found

    assert (info(plain).max_attempts, info(plain).priority, info(plain).expires_at) == (4, 0, None)
    assert info(plain).run_at <= now
    assert now + 50 < info(delayed).run_at < now + 70
    assert (info(tuned).priority, info(tuned).max_attempts) == (5, 7)
    assert now + 90 < (info(tuned).expires_at or 0) < now + 110
    assert abs(info(timed).run_at - at) < 0.01
    assert [job.payload for job in queue.claim_batch("w", 10)] == ["tuned", "plain"]
