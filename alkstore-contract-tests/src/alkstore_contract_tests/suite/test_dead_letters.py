"""Acting on dead letters (contract 1.4): ``requeue_dead`` and ``purge_dead``.

A requeued job is the same job again: its id, payload, priority, key, stamps
and last error, ready now, no longer expiring, its attempts given back unless
asked otherwise. Purging deletes dead letters of one queue, all or the old ones.
"""

from __future__ import annotations

import threading
import time

import pytest

import alkstore
from alkstore import EnqueueOpts, QueueOpts
from alkstore_contract_tests.suite._support import start_thread


def dead_job(queue: alkstore.Queue, payload: object, opts: EnqueueOpts | None = None) -> int:
    """Enqueue ``payload``, claim it and fail it: a dead letter's id."""
    job_id = queue.enqueue(payload, opts)
    job = queue.claim_one("w")
    assert job is not None
    assert job.id == job_id, "the queue should hold only this job"
    assert job.fail(f"boom {payload}")
    return job_id


def state_of(queue: alkstore.Queue, job_id: int) -> str | None:
    info = queue.get_job(job_id)
    return None if info is None else info.state


def test_requeue_dead_brings_every_dead_job_back_as_it_was(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=40, max_attempts=4))
    first = dead_job(queue, "a", EnqueueOpts(priority=3, key="key-a", max_attempts=2))
    second = dead_job(queue, {"b": [1, 2]})
    died = queue.get_job(first)
    assert died is not None
    assert queue.requeue_dead() == 2
    back = queue.get_job(first)
    assert back is not None
    assert (back.state, back.payload, back.priority, back.key) == ("pending", "a", 3, "key-a")
    assert (back.attempts, back.max_attempts, back.last_error) == (0, 2, "boom a")
    assert (back.created_at, back.died_at, back.deadline) == (died.created_at, None, None)
    assert back.run_at <= time.time() + 1
    claimed = queue.claim_batch("w", 10)
    assert [job.id for job in claimed] == [first, second]  # its priority kept: first
    jobs = {job.id: job for job in claimed}
    assert (jobs[first].attempts, jobs[first].key) == (1, "key-a")
    assert jobs[second].payload == {"b": [1, 2]}
    assert jobs[first].visibility_timeout_s == 40
    assert store.inspect().jobs("q", "dead") == []


def test_requeue_dead_of_given_ids_moves_only_those_dead_jobs_of_this_queue(
    store: alkstore.Store,
) -> None:
    queue, other = store.queue("q"), store.queue("other")
    wanted, left = dead_job(queue, "wanted"), dead_job(queue, "left")
    elsewhere = dead_job(other, "elsewhere")
    live = queue.enqueue("live")
    asked = [wanted, wanted, elsewhere, live, 987_654_321]
    assert queue.requeue_dead(asked) == 1
    assert (state_of(queue, wanted), state_of(queue, left)) == ("pending", "dead")
    assert (state_of(other, elsewhere), state_of(queue, live)) == ("dead", "pending")
    assert queue.requeue_dead([]) == 0
    assert queue.requeue_dead(iter([left])) == 1


def test_requeue_dead_can_keep_the_attempts_for_one_more_claim(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=1))
    job_id = dead_job(queue, "x")
    assert queue.requeue_dead([job_id], reset_attempts=False) == 1
    info = queue.get_job(job_id)
    assert info is not None
    assert (info.state, info.attempts) == ("pending", 1)
    job = queue.claim_one("w")
    assert job is not None
    assert job.attempts == 2
    assert job.retry("again")  # past its attempts: dead again, not retried
    assert state_of(queue, job_id) == "dead"


def test_a_requeued_expired_job_no_longer_expires(store: alkstore.Store) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue("late", EnqueueOpts(expires=0.05))
    time.sleep(0.1)
    assert queue.sweep_expired() == 1
    assert state_of(queue, job_id) == "dead"
    assert queue.requeue_dead() == 1
    info = queue.get_job(job_id)
    assert info is not None
    assert info.expires_at is None
    assert queue.sweep_expired() == 0
    job = queue.claim_one("w")
    assert job is not None
    assert job.id == job_id


def test_a_dead_job_whose_key_a_live_job_holds_stays_dead(store: alkstore.Store) -> None:
    queue = store.queue("q")
    dead = dead_job(queue, "old", EnqueueOpts(key="k"))
    twin = dead_job(queue, "older twin", EnqueueOpts(key="t"))
    also_twin = dead_job(queue, "younger twin", EnqueueOpts(key="t"))
    live = queue.enqueue("new", EnqueueOpts(key="k"))
    assert queue.requeue_dead() == 1  # of the twins, one; "old" meets the live "new"
    assert state_of(queue, dead) == "dead"
    assert sorted([str(state_of(queue, twin)), str(state_of(queue, also_twin))]) == [
        "dead", "pending",
    ]  # fmt: skip
    assert queue.cancel(live)
    assert queue.requeue_dead([dead]) == 1
    assert state_of(queue, dead) == "pending"


def test_a_requeue_wakes_the_queues_waiters(store: alkstore.Store, peer: alkstore.Store) -> None:
    queue = store.queue("q")
    job_id = dead_job(queue, "x")
    woke = threading.Event()

    def wait() -> None:
        if peer.queue("q").wait(10):
            woke.set()

    waiter = start_thread(wait)
    time.sleep(0.3)  # parked: nothing is ready
    assert not woke.is_set()
    assert queue.requeue_dead([job_id]) == 1
    waiter.join(10)
    assert woke.is_set()


def test_requeues_racing_move_each_dead_job_once(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    queue = store.queue("q")
    ids = [dead_job(queue, n) for n in range(20)]
    moved: list[int] = []
    start = threading.Barrier(2)

    def requeue(through: alkstore.Store) -> None:
        start.wait(10)
        moved.append(through.queue("q").requeue_dead())

    racers = [start_thread(lambda s=s: requeue(s)) for s in (store, peer)]  # type: ignore[misc]
    for racer in racers:
        racer.join(30)
    assert sum(moved) == 20
    assert sorted(job.id for job in queue.claim_batch("w", 100)) == ids


def test_purge_dead_deletes_this_queues_dead_jobs_only(store: alkstore.Store) -> None:
    queue, other = store.queue("q"), store.queue("other")
    gone = [dead_job(queue, n) for n in range(3)]
    kept = dead_job(other, "kept")
    live = queue.enqueue("live")
    assert queue.purge_dead() == 3
    assert all(queue.get_job(job_id) is None for job_id in gone)
    assert (state_of(other, kept), state_of(queue, live)) == ("dead", "pending")
    assert queue.purge_dead() == 0


def test_purge_dead_older_than_keeps_the_recent_ones(store: alkstore.Store) -> None:
    queue = store.queue("q")
    old = dead_job(queue, "old")
    time.sleep(1.0)
    recent = dead_job(queue, "recent")
    assert queue.purge_dead(older_than_s=0.5) == 1
    assert (state_of(queue, old), state_of(queue, recent)) == (None, "dead")
    assert queue.purge_dead(older_than_s=3600) == 0
    assert queue.purge_dead(older_than_s=0) == 1


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda q: q.requeue_dead("12"), TypeError),
        (lambda q: q.requeue_dead(5), TypeError),
        (lambda q: q.requeue_dead([0]), ValueError),
        (lambda q: q.requeue_dead([2**63]), ValueError),
        (lambda q: q.requeue_dead(["1"]), ValueError),
        (lambda q: q.requeue_dead(reset_attempts=1), ValueError),
        (lambda q: q.purge_dead(-1), ValueError),
        (lambda q: q.purge_dead(float("nan")), ValueError),
        (lambda q: q.purge_dead("1"), ValueError),
    ],
    ids=["str", "int", "zero", "too-big", "str-id", "int-flag", "negative", "nan", "str-age"],
)  # fmt: skip
def test_bad_arguments_are_refused_and_change_nothing(
    store: alkstore.Store, call: object, error: type[Exception]
) -> None:
    queue = store.queue("q")
    job_id = dead_job(queue, "x")
    with pytest.raises(error):
        call(queue)  # type: ignore[operator]
    assert state_of(queue, job_id) == "dead"
