"""Queues on a real SQLite file, at full depth."""

from __future__ import annotations

import threading
import time

import pytest

import alkstore
from alkstore import EnqueueOpts, QueueOpts
from alkstore_sqlite import SQLiteStore


def test_claim_order_is_priority_then_ready_time_then_enqueue_order(store: SQLiteStore) -> None:
    queue = store.queue("q")
    now = time.time()
    queue.enqueue("low-a")
    queue.enqueue("low-old", EnqueueOpts(priority=0, run_at=now - 10))
    queue.enqueue("high", EnqueueOpts(priority=5))
    queue.enqueue("low-b")
    queue.enqueue("mid", EnqueueOpts(priority=1))
    claimed = [job.payload for job in queue.claim_batch("w", 10)]
    assert claimed == ["high", "mid", "low-old", "low-a", "low-b"]


def test_claim_one_returns_none_when_nothing_is_ready(store: SQLiteStore) -> None:
    queue = store.queue("q")
    assert queue.claim_one("w") is None
    queue.enqueue(1, EnqueueOpts(delay=60))
    assert queue.claim_one("w") is None
    assert queue.claim_batch("w", 5) == []


def test_delay_and_run_at_hold_a_job_back(store: SQLiteStore) -> None:
    queue = store.queue("q")
    queue.enqueue("delayed", EnqueueOpts(delay=0.15))
    queue.enqueue("scheduled", EnqueueOpts(run_at=time.time() + 0.15))
    assert queue.claim_one("w") is None
    time.sleep(0.2)
    assert {job.payload for job in queue.claim_batch("w", 5)} == {"delayed", "scheduled"}


def test_claiming_stamps_attempts_deadline_and_worker(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = queue.enqueue({"x": 1})
    before = time.time()
    job = queue.claim_one("worker-7")
    assert job is not None
    assert (job.id, job.attempts, job.max_attempts, job.worker_id) == (job_id, 1, 3, "worker-7")
    assert before + 30 <= job.deadline <= time.time() + 30
    info = queue.get_job(job_id)
    assert info is not None
    assert (info.state, info.attempts, info.worker_id) == ("processing", 1, "worker-7")


def test_ack_deletes_and_is_fenced(store: SQLiteStore) -> None:
    queue = store.queue("q")
    queue.enqueue(1)
    job = queue.claim_one("w")
    assert job is not None
    assert job.ack()
    assert not job.ack()
    assert queue.get_job(job.id) is None


def test_a_lapsed_claim_is_reclaimed_and_consumes_an_attempt(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.1))
    queue.enqueue("work")
    first = queue.claim_one("slow")
    assert first is not None
    assert queue.claim_one("other") is None
    time.sleep(0.15)
    second = queue.claim_one("other")
    assert second is not None
    assert (second.id, second.attempts) == (first.id, 2)
    # The first handle is fenced: its claim lapsed and was taken.
    assert not first.ack()
    assert not first.heartbeat(10)
    assert not first.retry("late")
    assert not first.fail("late")
    assert second.ack()


def test_a_lapsed_claim_with_no_attempts_left_goes_dead(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.05, max_attempts=1))
    job_id = queue.enqueue("work")
    assert queue.claim_one("w") is not None
    time.sleep(0.1)
    assert queue.claim_one("w") is None
    info = queue.get_job(job_id)
    assert info is not None
    assert info.state == "dead"
    assert info.last_error is not None
    assert "lapsed" in info.last_error


def test_heartbeat_sets_an_absolute_deadline_and_is_refused_late(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.2))
    queue.enqueue(1)
    job = queue.claim_one("w")
    assert job is not None
    assert job.heartbeat(0.5)
    assert job.deadline == pytest.approx(time.time() + 0.5, abs=0.05)
    assert job.heartbeat(0.05)  # absolute, not added: the deadline moves earlier
    time.sleep(0.1)
    assert not job.heartbeat(10)


def test_retry_with_a_delay_and_on_the_backoff_curve(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(backoff_base_s=0.2, max_attempts=5))
    job_id = queue.enqueue(1)
    job = queue.claim_one("w")
    assert job is not None
    before = time.time()
    assert job.retry(ValueError("flaky"))
    info = queue.get_job(job_id)
    assert info is not None
    assert info.state == "pending"
    assert info.last_error == "ValueError: flaky"
    assert before + 0.1 - 0.01 <= info.run_at <= time.time() + 0.2  # [ceiling/2, ceiling]
    assert queue.claim_one("w") is None
    time.sleep(0.25)
    job = queue.claim_one("w")
    assert job is not None
    assert job.attempts == 2
    assert job.retry("now", 0)
    again = queue.claim_one("w")
    assert again is not None
    assert again.attempts == 3


def test_retry_with_no_attempts_left_dead_letters(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=1))
    job_id = queue.enqueue({"n": 1})
    job = queue.claim_one("w")
    assert job is not None
    assert job.retry("boom", 0)
    info = queue.get_job(job_id)
    assert info is not None
    assert (info.state, info.last_error, info.payload) == ("dead", "boom", {"n": 1})
    assert info.died_at is not None
    assert queue.claim_one("w") is None


def test_fail_dead_letters_now(store: SQLiteStore) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue(1)
    job = queue.claim_one("w")
    assert job is not None
    assert job.fail("bad input")
    info = queue.get_job(job_id)
    assert info is not None
    assert (info.state, info.last_error, info.attempts) == ("dead", "bad input", 1)


def test_enqueue_opts_override_and_stamp_the_row(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=4))
    job_id = queue.enqueue(1, EnqueueOpts(priority=9, max_attempts=2, expires=60))
    store.queue("q", QueueOpts(max_attempts=8))  # later opts never rewrite rows
    info = queue.get_job(job_id)
    assert info is not None
    assert (info.priority, info.max_attempts) == (9, 2)
    assert info.expires_at == pytest.approx(info.created_at + 60)


def test_an_expired_job_is_never_handed_out_and_sweep_moves_it(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=60))
    pending = queue.enqueue("pending", EnqueueOpts(expires=0.05))
    processing = queue.enqueue("processing", EnqueueOpts(expires=0.05, priority=1))
    keeper = queue.enqueue("keeper")
    assert queue.claim_one("w") is not None  # takes "processing"
    time.sleep(0.1)
    job = queue.claim_one("w")
    assert job is not None
    assert job.id == keeper
    assert queue.sweep_expired() == 2
    for job_id in (pending, processing):
        info = queue.get_job(job_id)
        assert info is not None
        assert (info.state, info.last_error) == ("dead", "expired")


def test_sweep_purges_dead_letters_past_retention(store: SQLiteStore) -> None:
    queue = store.queue("q", QueueOpts(dead_letter_retention_s=0.05))
    kept = store.queue("forever")
    job_ids = []
    for q in (queue, kept):
        job_ids.append(q.enqueue(1))
        job = q.claim_one("w")
        assert job is not None
        job.fail("x")
    time.sleep(0.1)
    queue.sweep_expired()
    kept.sweep_expired()
    assert queue.get_job(job_ids[0]) is None
    assert kept.get_job(job_ids[1]) is not None


def test_ack_batch_acks_only_what_the_worker_still_holds(store: SQLiteStore) -> None:
    queue = store.queue("q")
    for n in range(4):
        queue.enqueue(n)
    mine = queue.claim_batch("me", 3)
    theirs = queue.claim_one("them")
    assert theirs is not None
    assert queue.ack_batch([job.id for job in mine] + [theirs.id], "me") == 3
    assert theirs.ack()


def test_cancel_deletes_in_any_state(store: SQLiteStore) -> None:
    queue = store.queue("q")
    pending = queue.enqueue(1)
    dead = queue.enqueue(2)
    job = queue.claim_one("w")
    assert job is not None
    job.fail("x")
    assert queue.cancel(pending)
    assert queue.cancel(dead)
    assert not queue.cancel(dead)
    assert queue.get_job(pending) is None


def test_queues_are_separate(store: SQLiteStore) -> None:
    store.queue("a").enqueue("for a")
    job_id = store.queue("b").enqueue("for b")
    job = store.queue("a").claim_one("w")
    assert job is not None
    assert job.payload == "for a"
    assert store.queue("a").get_job(job_id) is None
    assert not store.queue("a").cancel(job_id)


def test_wait_wakes_on_an_enqueue_from_another_store(store: SQLiteStore, peer: SQLiteStore) -> None:
    queue = store.queue("q")
    assert not queue.wait(0.05)
    threading.Timer(0.05, peer.queue("q").enqueue, [1]).start()
    started = time.monotonic()
    assert queue.wait(5)
    assert time.monotonic() - started < 2
    assert queue.claim_one("w") is not None


def test_wait_returns_when_a_delayed_job_turns_ready(store: SQLiteStore) -> None:
    queue = store.queue("q")
    queue.enqueue(1, EnqueueOpts(delay=0.1))
    started = time.monotonic()
    assert queue.wait(5)
    assert 0.05 < time.monotonic() - started < 2
    assert queue.claim_one("w") is not None


def test_claims_are_exclusive_across_threads(store: SQLiteStore) -> None:
    queue = store.queue("q")
    with store.transaction() as tx:
        for n in range(300):
            tx.enqueue_tx("q", None, n)
    seen: list[int] = []
    lock = threading.Lock()

    def work(worker: str) -> None:
        while jobs := queue.claim_batch(worker, 7):
            with lock:
                seen.extend(job.payload for job in jobs)
            assert queue.ack_batch([job.id for job in jobs], worker) == len(jobs)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(300))


def test_outbox_sends_commit_with_the_business_write_and_deliver_once(
    store: SQLiteStore,
) -> None:
    outbox = store.outbox("webhooks")
    with store.transaction() as tx:
        tx.execute("CREATE TABLE orders (id INTEGER)")
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES (1)")
        tx.outbox_enqueue_tx("webhooks", None, {"order": 1})
        raise RuntimeError("rolled back")
    assert not outbox.run_once("w", lambda payload: None)
    with store.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES (2)")
        job_id = tx.outbox_enqueue_tx("webhooks", EnqueueOpts(max_attempts=2), {"order": 2})
    delivered: list[object] = []
    assert outbox.run_once("w", delivered.append)
    assert delivered == [{"order": 2}]
    assert not outbox.run_once("w", delivered.append)
    assert job_id > 0
    with pytest.raises(alkstore.ReservedName):  # the backing queue is not reachable by name
        store.queue("__alkstore_outbox:webhooks")


def test_a_failing_delivery_retries_then_dead_letters(store: SQLiteStore) -> None:
    outbox = store.outbox("hooks")
    job_id = outbox.enqueue("x", EnqueueOpts(max_attempts=2))

    def down(payload: object) -> None:
        raise ConnectionError("endpoint down")

    assert outbox.run_once("w", down)
    backing = store._queue(outbox.queue_name, alkstore.engine.OUTBOX_QUEUE_OPTS)
    info = backing.get_job(job_id)
    assert info is not None
    assert (info.state, info.last_error) == ("pending", "ConnectionError: endpoint down")
    assert info.run_at > time.time() + 1  # backoff base 5 s: at least 2.5 s away
