"""Inspection: read-only listings of queues, jobs, streams, locks and schedules."""

from __future__ import annotations

import time
from typing import Any

import pytest

import alkstore
from alkstore import ConsumerStats, EnqueueOpts, LockInfo, QueueOpts, QueueStats, StreamStats
from alkstore.engine import StoreTarget, TestProvider
from alkstore_contract_tests.suite._runner import Runner
from alkstore_contract_tests.suite._support import eventually, needs, start_thread


def stats_of(store: alkstore.Store, queue: str = "q") -> QueueStats:
    found = [stats for stats in store.inspect().queues() if stats.name == queue]
    assert len(found) == 1, f"queue {queue!r} should be listed once"
    return found[0]


def counts(stats: QueueStats) -> tuple[int, int, int, int, int]:
    return (stats.ready, stats.scheduled, stats.expired, stats.processing, stats.dead)


def claim(queue: alkstore.Queue, worker: str = "w") -> alkstore.Job:
    job = queue.claim_one(worker)
    assert job is not None, "expected a job to be ready"
    return job


# Queues


def test_inspect_counts_ready_jobs_and_how_long_the_oldest_has_waited(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q")
    queue.enqueue("old", EnqueueOpts(run_at=time.time() - 30))
    queue.enqueue("new")
    stats = stats_of(store)
    assert counts(stats) == (2, 0, 0, 0, 0)
    assert stats.total == 2
    assert stats.oldest_ready_age_s == pytest.approx(30, abs=2)


def test_inspect_oldest_ready_age_looks_across_priorities_and_past_expired_jobs(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q")
    now = time.time()
    queue.enqueue("urgent, new", EnqueueOpts(priority=9, run_at=now - 5))
    queue.enqueue("low, oldest ready", EnqueueOpts(priority=-3, run_at=now - 40))
    queue.enqueue("older still, but expiring", EnqueueOpts(run_at=now - 90, expires=0.2))
    queue.enqueue("later", EnqueueOpts(priority=-3, delay=60))
    eventually(lambda: stats_of(store).expired == 1)
    stats = stats_of(store)
    assert counts(stats) == (2, 1, 1, 0, 0)
    assert stats.oldest_ready_age_s == pytest.approx(40, abs=2), "a job past expiry is not ready"


def test_inspect_lists_a_queue_whose_only_jobs_are_claimed(store: alkstore.Store) -> None:
    queue = store.queue("busy")
    queue.enqueue(1)
    claim(queue)
    store.queue("idle").enqueue(2, EnqueueOpts(delay=60))
    assert [(stats.name, counts(stats)) for stats in store.inspect().queues()] == [
        ("busy", (0, 0, 0, 1, 0)), ("idle", (0, 1, 0, 0, 0)),
    ]  # fmt: skip


def test_inspect_counts_delayed_jobs_as_scheduled_not_ready(store: alkstore.Store) -> None:
    store.queue("q").enqueue(1, EnqueueOpts(delay=60))
    stats = stats_of(store)
    assert counts(stats) == (0, 1, 0, 0, 0)
    assert stats.oldest_ready_age_s is None


def test_inspect_counts_pending_jobs_past_expiry_as_expired(store: alkstore.Store) -> None:
    queue = store.queue("q")
    queue.enqueue("expiring", EnqueueOpts(expires=0.3))
    queue.enqueue("delayed and expiring", EnqueueOpts(delay=60, expires=0.3))
    assert counts(stats_of(store)) == (1, 1, 0, 0, 0)
    eventually(lambda: counts(stats_of(store)) == (0, 0, 2, 0, 0))
    assert stats_of(store).oldest_ready_age_s is None


def test_inspect_counts_claimed_jobs_as_processing(store: alkstore.Store) -> None:
    queue = store.queue("q")
    queue.enqueue(1)
    queue.enqueue(2)
    claim(queue)
    assert counts(stats_of(store)) == (1, 0, 0, 1, 0)


def test_inspect_counts_a_claimed_job_past_its_expiry_as_processing_only(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=60))
    queue.enqueue(1, EnqueueOpts(expires=0.2))
    claim(queue)
    time.sleep(0.3)
    stats = stats_of(store)
    assert counts(stats) == (0, 0, 0, 1, 0)
    assert stats.total == 1


def test_inspect_counts_dead_letters_and_lists_them_with_their_error(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue({"order": 7})
    assert claim(queue).fail("bad input")
    assert counts(stats_of(store)) == (0, 0, 0, 0, 1)
    [dead] = store.inspect().jobs("q", "dead")
    assert (dead.id, dead.state, dead.payload, dead.last_error) == (
        job_id, "dead", {"order": 7}, "bad input",
    )  # fmt: skip
    assert dead.died_at is not None


def test_inspect_lists_a_queue_while_it_holds_any_row_even_only_dead_ones(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q")
    assert store.inspect().queues() == []
    queue.enqueue(1)
    assert claim(queue).ack()
    assert store.inspect().queues() == [], "an emptied queue is not listed"
    queue.enqueue(2)
    assert claim(queue).fail("x")
    assert store.inspect().queues() == [QueueStats("q", 0, 0, 0, 0, 1, None)]


def test_inspect_lists_queues_by_name_each_with_its_own_counts(store: alkstore.Store) -> None:
    for name, jobs in (("b", 2), ("a", 1), ("c", 3)):
        for n in range(jobs):
            store.queue(name).enqueue(n)
    listed = store.inspect().queues()
    assert [(stats.name, stats.ready) for stats in listed] == [("a", 1), ("b", 2), ("c", 3)]


def test_inspect_lists_an_outboxs_backing_queue_under_its_reserved_name(
    store: alkstore.Store,
) -> None:
    job_id = store.outbox("webhooks").enqueue({"hook": 1})
    backing = "__alkstore_outbox:webhooks"
    assert [stats.name for stats in store.inspect().queues()] == [backing]
    assert [job.id for job in store.inspect().jobs(backing)] == [job_id]


def test_inspect_sees_what_a_peer_committed(store: alkstore.Store, peer: alkstore.Store) -> None:
    peer.queue("q").enqueue(1)
    assert counts(stats_of(store)) == (1, 0, 0, 0, 0)


# Jobs


def test_inspect_jobs_lists_every_state_by_id_as_get_job_shows_them(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=5))
    ids = [queue.enqueue(n) for n in range(2)]
    store.queue("other").enqueue("another queue's job")
    ids += [queue.enqueue(n) for n in range(2, 4)]
    assert claim(queue).fail("x")  # ids[0]: dead
    claim(queue)  # ids[1]: processing
    assert claim(queue).retry("again later", 60)  # ids[2]: pending, backing off
    listed = store.inspect().jobs("q")
    assert listed == [queue.get_job(job_id) for job_id in ids]
    assert [job.state for job in listed] == ["dead", "processing", "pending", "pending"]


def test_inspect_jobs_filters_by_state(store: alkstore.Store) -> None:
    queue = store.queue("q")
    dead, processing, pending = (queue.enqueue(n) for n in range(3))
    delayed = queue.enqueue("later", EnqueueOpts(delay=60))
    assert claim(queue).fail("x")
    claim(queue)
    inspector = store.inspect()
    assert [job.id for job in inspector.jobs("q", "pending")] == [pending, delayed]
    assert [job.id for job in inspector.jobs("q", "processing")] == [processing]
    assert [job.id for job in inspector.jobs("q", "dead")] == [dead]
    assert [job.id for job in inspector.jobs("q", None)] == [dead, processing, pending, delayed]


def test_inspect_jobs_returns_the_first_ids_up_to_the_limit_across_states(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q")
    ids = [queue.enqueue(n) for n in range(5)]
    assert claim(queue).fail("x")  # the lowest id is dead, the rest live
    claim(queue)
    inspector = store.inspect()
    assert [job.id for job in inspector.jobs("q", limit=3)] == ids[:3]
    assert [job.id for job in inspector.jobs("q", "pending", limit=2)] == ids[2:4]
    assert inspector.jobs("unknown") == []


def test_inspect_jobs_pages_by_id_after_the_last_one_seen_across_states(
    store: alkstore.Store,
) -> None:
    # Contract 1.6: keyset pages. Dead, claimed and pending rows interleave by id.
    queue = store.queue("q")
    ids = [queue.enqueue(n) for n in range(7)]
    store.queue("other").enqueue("another queue's job")
    assert claim(queue).fail("x")  # ids[0]
    claim(queue)  # ids[1]
    inspector = store.inspect()
    pages, after = [], None
    while page := inspector.jobs("q", limit=3, after=after):
        pages.append([job.id for job in page])
        after = page[-1].id
    assert pages == [ids[0:3], ids[3:6], ids[6:7]]
    assert [job.id for job in inspector.jobs("q", "pending", limit=2, after=ids[3])] == ids[4:6]
    assert [job.id for job in inspector.jobs("q", "dead", after=ids[0])] == []
    assert [job.id for job in inspector.jobs("q", "processing", after=0)] == [ids[1]]
    assert inspector.jobs("q", after=ids[-1]) == []
    assert inspector.jobs("q", after=None) == inspector.jobs("q")


def test_inspect_jobs_refuses_a_bad_after(store: alkstore.Store) -> None:
    inspector = store.inspect()
    for bad in (-1, 2**63, 1.5, "3", True):
        with pytest.raises((TypeError, ValueError), match="after"):
            inspector.jobs("q", after=bad)  # type: ignore[arg-type]


def test_inspect_jobs_refuses_a_bad_state_or_limit(store: alkstore.Store) -> None:
    inspector = store.inspect()
    with pytest.raises(ValueError, match="state"):
        inspector.jobs("q", "finished")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        inspector.jobs("q", limit=0)


def test_an_inspector_of_a_closed_store_raises_closed(store: alkstore.Store) -> None:
    inspector = store.inspect()
    store.close()
    for call in (
        inspector.queues,
        lambda: inspector.jobs("q"),
        inspector.streams,
        inspector.locks,
        inspector.schedules,
        store.inspect,
    ):
        with pytest.raises(alkstore.Closed):
            call()


# Streams


def test_inspect_shows_each_streams_head_and_consumer_lag(store: alkstore.Store) -> None:
    a, b = store.stream("a"), store.stream("b")
    a1, _, _, b2, a3 = a.publish(1), b.publish(1), a.publish(2), b.publish(2), a.publish(3)
    a.save_offset("reporting", a1)  # behind by a2 and a3: b's events in between do not count
    a.save_offset("billing", a3)
    b.save_offset("audit", b2)
    assert store.inspect().streams() == [
        StreamStats("a", a3, (ConsumerStats("billing", a3, 0), ConsumerStats("reporting", a1, 2))),
        StreamStats("b", b2, (ConsumerStats("audit", b2, 0),)),
    ]


def test_inspect_lists_a_stream_without_consumers_and_one_whose_consumer_caught_up(
    store: alkstore.Store,
) -> None:
    assert store.inspect().streams() == []
    head = store.stream("events").publish(1)
    quiet = store.stream("quiet").publish(1)
    store.stream("quiet").save_offset("reader", quiet)
    assert store.inspect().streams() == [
        StreamStats("events", head, ()),
        StreamStats("quiet", quiet, (ConsumerStats("reader", quiet, 0),)),
    ]


# Locks


def test_inspect_lists_held_locks_by_name_until_released(store: alkstore.Store) -> None:
    second = store.try_lock("second", "owner-b", 30)
    first = store.try_lock("first", "owner-a", 60)
    assert first is not None
    assert second is not None
    listed = store.inspect().locks()
    assert [(lock.name, lock.owner) for lock in listed] == [
        ("first", "owner-a"), ("second", "owner-b"),
    ]  # fmt: skip
    assert listed[0].expires_at == pytest.approx(time.time() + 60, abs=5)
    assert first.release()
    assert [lock.name for lock in store.inspect().locks()] == ["second"]


def test_inspect_leaves_out_an_expired_lock(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store
) -> None:
    needs(provider, "expire_lock")
    assert store.try_lock("report", "a", 60) is not None
    assert store.try_lock("other", "b", 60) is not None
    provider.expire_lock(target, "report")
    [held] = store.inspect().locks()
    assert held == LockInfo("other", "b", held.expires_at)


def test_inspect_shows_the_scheduler_lock_while_a_runner_leads_and_not_after(
    store: alkstore.Store, scheduler_lease_s: float
) -> None:
    runner = Runner(store, "the-leader", sole=True)
    try:
        [held] = eventually(lambda: store.inspect().locks())
        assert (held.name, held.owner) == (alkstore.SCHEDULER_LOCK, "the-leader")
    finally:
        errors = runner.finish()
    assert errors == []
    assert store.inspect().locks() == []


# Schedules


def test_inspect_lists_schedules_by_name_with_their_next_fire_time(store: alkstore.Store) -> None:
    nightly = store.schedule("nightly", "@every 1d", "reports", {"kind": "daily"})
    hourly = store.schedule("hourly", "@every 1h", "reports", {"kind": "hourly"})
    store.schedule("gone", "@every 1m", "reports", None)
    assert store.unschedule("gone")
    assert store.inspect().schedules() == [hourly, nightly]
    assert hourly.next_fire_at == pytest.approx(time.time() + 3600, abs=5)


# A busy store


def test_inspect_neither_waits_for_nor_sees_an_open_transaction(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    store.queue("q").enqueue("committed")
    store.stream("s").publish("committed")
    seen: dict[str, Any] = {}

    def look_while_a_peer_writes() -> None:
        tx = peer.begin_tx()
        try:
            tx.enqueue_tx("q", None, "uncommitted")
            tx.enqueue_tx("other", None, "uncommitted")
            tx.publish_tx("s", "uncommitted")
            tx.save_offset_tx("s", "reader", 1)
            inspector = store.inspect()
            seen["queues"], seen["jobs"] = inspector.queues(), inspector.jobs("q")
            seen["streams"] = inspector.streams()
        finally:
            tx.rollback()

    started = time.monotonic()
    looker = start_thread(look_while_a_peer_writes)
    looker.join(10)
    assert not looker.is_alive(), "inspect waited for another connection's transaction"
    assert time.monotonic() - started < 2
    assert [(stats.name, counts(stats)) for stats in seen["queues"]] == [("q", (1, 0, 0, 0, 0))]
    assert [job.payload for job in seen["jobs"]] == ["committed"]
    [stream] = seen["streams"]
    assert (stream.name, stream.consumers) == ("s", ())
