"""Queues at full depth: order, visibility, fencing, retries, release, dead letters, expiry."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import alkstore
from alkstore import EnqueueOpts, QueueOpts
from alkstore.engine import backoff_ceiling


def claim(queue: alkstore.Queue, worker: str = "w") -> alkstore.Job:
    job = queue.claim_one(worker)
    assert job is not None, "expected a job to be ready"
    return job


def info(queue: alkstore.Queue, job_id: int) -> alkstore.JobInfo:
    found = queue.get_job(job_id)
    assert found is not None, f"job {job_id} should exist"
    return found


def test_claim_order_is_priority_then_ready_time_then_enqueue_order(store: alkstore.Store) -> None:
    queue = store.queue("q")
    now = time.time()
    queue.enqueue("low-a")
    queue.enqueue("low-old", EnqueueOpts(run_at=now - 10))
    queue.enqueue("high", EnqueueOpts(priority=5))
    queue.enqueue("low-b")
    queue.enqueue("mid", EnqueueOpts(priority=1))
    queue.enqueue("negative", EnqueueOpts(priority=-1))
    assert [j.payload for j in queue.claim_batch("w", 10)] == [
        "high", "mid", "low-old", "low-a", "low-b", "negative",
    ]  # fmt: skip


def test_claim_one_picks_in_the_same_order_and_ties_go_to_enqueue_order(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q")
    now = time.time()
    at = now - 5  # several jobs share one ready time: enqueue order decides
    queue.enqueue("low-a")
    queue.enqueue("tie-1", EnqueueOpts(run_at=at))
    queue.enqueue("low-old", EnqueueOpts(run_at=now - 10))
    queue.enqueue("tie-2", EnqueueOpts(run_at=at))
    queue.enqueue("high", EnqueueOpts(priority=5))
    queue.enqueue("tie-3", EnqueueOpts(run_at=at))
    assert [claim(queue).payload for _ in range(6)] == [
        "high", "low-old", "tie-1", "tie-2", "tie-3", "low-a",
    ]  # fmt: skip
    queue.enqueue("b-tie-1", EnqueueOpts(run_at=at))
    queue.enqueue("b-tie-2", EnqueueOpts(run_at=at))
    assert [j.payload for j in queue.claim_batch("w", 1)] == ["b-tie-1"]


def test_claim_batch_takes_at_most_n_in_claim_order(store: alkstore.Store) -> None:
    queue = store.queue("q")
    for n in range(5):
        queue.enqueue(n)
    assert [j.payload for j in queue.claim_batch("w", 3)] == [0, 1, 2]
    assert [j.payload for j in queue.claim_batch("w", 3)] == [3, 4]
    assert queue.claim_batch("w", 3) == []
    assert queue.claim_one("w") is None


def test_delay_and_run_at_hold_a_job_back(store: alkstore.Store) -> None:
    queue = store.queue("q")
    queue.enqueue("delayed", EnqueueOpts(delay=0.2))
    queue.enqueue("scheduled", EnqueueOpts(run_at=time.time() + 0.2))
    assert queue.claim_one("w") is None
    time.sleep(0.3)
    assert {j.payload for j in queue.claim_batch("w", 5)} == {"delayed", "scheduled"}


def test_claiming_counts_the_attempt_and_sets_the_deadline(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = queue.enqueue({"x": 1})
    before = time.time()
    job = claim(queue, "worker-7")
    after = time.time()
    assert (job.id, job.queue, job.attempts, job.max_attempts) == (job_id, "q", 1, 3)
    assert job.worker_id == "worker-7"
    assert before + 30 - 1 <= job.deadline <= after + 30 + 1
    snapshot = info(queue, job_id)
    assert (snapshot.state, snapshot.attempts, snapshot.worker_id) == ("processing", 1, "worker-7")
    assert snapshot.deadline == pytest.approx(job.deadline, abs=1)


def test_a_claimed_jobs_times_are_floats_even_when_whole(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30, backoff_base_s=5))
    queue.enqueue("x", EnqueueOpts(run_at=1_700_000_000))
    job = claim(queue)
    times = (job.run_at, job.deadline, job.visibility_timeout_s)
    assert [type(value) for value in times] == [float] * 3, times
    assert (job.run_at, job.visibility_timeout_s) == (1_700_000_000, 30)
    [listed] = store.inspect().jobs("q")
    assert (type(listed.run_at), type(listed.created_at), type(listed.deadline)) == (float,) * 3


def test_ack_deletes_the_row_once(store: alkstore.Store) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue(1)
    job = claim(queue)
    assert job.ack()
    assert not job.ack()
    assert queue.get_job(job_id) is None


def test_a_job_id_is_never_handed_out_again(store: alkstore.Store, peer: alkstore.Store) -> None:
    """Not once the newest job is acked, dead and purged, or cancelled, nor to
    another store: a stale handle can never settle a newer job."""
    queue = store.queue("q")
    handed_out = [queue.enqueue("acked")]
    acked = claim(queue)
    assert acked.ack()
    handed_out.append(queue.enqueue("failed"))
    assert claim(queue).fail("x")
    assert queue.purge_dead() == 1
    handed_out.append(peer.queue("q").enqueue("cancelled"))
    assert queue.cancel(handed_out[-1])
    with store.transaction() as tx:
        handed_out.append(tx.enqueue_tx("q", None, "in a transaction"))
        handed_out.append(tx.enqueue_tx("q", None, "and its next"))
    assert queue.ack_batch(queue.claim_batch("w", 10), "w") == 2
    handed_out.append(peer.queue("other").enqueue("last"))
    assert handed_out == sorted(set(handed_out)), f"an id came back: {handed_out}"
    assert not acked.ack()
    assert claim(peer.queue("other")).payload == "last"


def test_a_lapsed_claim_is_claimable_again_and_the_reclaim_eats_an_attempt(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.2))
    queue.enqueue("work")
    first = claim(queue, "slow")
    assert peer.queue("q").claim_one("other") is None
    time.sleep(0.3)
    second = claim(peer.queue("q"), "other")
    assert (second.id, second.attempts) == (first.id, 2)
    assert not first.ack(), "a lapsed, re-taken claim must be fenced"
    assert not first.heartbeat(10)
    assert not first.retry("late", 0)
    assert not first.fail("late")
    assert second.ack()


def test_a_lapsed_claim_on_its_last_attempt_goes_dead_not_out(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.1, max_attempts=1))
    job_id = queue.enqueue("work")
    claim(queue)
    time.sleep(0.2)
    assert queue.claim_one("w") is None
    queue.sweep_expired()
    assert info(queue, job_id).state == "dead"


def test_a_lapsed_claim_takes_its_turn_before_later_jobs(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    """The next claim returns a lapsed claim first: it is not left claimed
    behind a backlog until the queue runs dry."""
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.2))
    lapsing = queue.enqueue("first")
    claim(queue, "slow")
    for n in range(3):
        queue.enqueue(n)
    time.sleep(0.3)
    again = claim(peer.queue("q"), "other")
    assert (again.id, again.attempts) == (lapsing, 2)


def test_a_lapsed_last_attempt_is_dead_once_the_next_claim_is_served(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.1, max_attempts=1))
    lapsing = queue.enqueue("first")
    claim(queue)
    queue.enqueue("second")
    time.sleep(0.2)
    assert claim(queue).payload == "second"
    assert info(queue, lapsing).state == "dead"


SETTLE_CALLS: dict[str, Callable[[alkstore.Job], bool]] = {
    "ack": lambda job: job.ack(),
    "retry": lambda job: job.retry("late", 0),
    "retry-backoff": lambda job: job.retry("late"),
    "fail": lambda job: job.fail("late"),
    "heartbeat": lambda job: job.heartbeat(10),
    "release": lambda job: job.release(),
}


@pytest.mark.parametrize("call", sorted(SETTLE_CALLS))
def test_a_lapsed_but_untaken_claim_is_fenced_too(store: alkstore.Store, call: str) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.1, max_attempts=5))
    job_id = queue.enqueue(1)
    job = claim(queue)
    time.sleep(0.2)
    assert not SETTLE_CALLS[call](job), f"{call} of a lapsed claim must be refused"
    snapshot = info(queue, job_id)
    assert (snapshot.attempts, snapshot.last_error) == (1, None), "it must change nothing"
    again = claim(queue)
    assert (again.id, again.attempts) == (job_id, 2)


def test_heartbeat_resets_the_deadline_absolutely_and_is_refused_once_lapsed(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=1.0))
    queue.enqueue(1)
    job = claim(queue)
    assert job.heartbeat(5)
    assert info(queue, job.id).deadline == pytest.approx(time.time() + 5, abs=1)
    assert job.heartbeat(0.1)  # absolute: the deadline moves earlier, not 5 + 0.1
    time.sleep(0.2)
    assert not job.heartbeat(5)
    assert queue.claim_one("other") is not None


def test_heartbeat_keeps_a_long_job_claimed(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=1.0))
    queue.enqueue(1)
    job = claim(queue)
    for _ in range(3):  # each heartbeat well inside the deadline, even on a loaded machine
        time.sleep(0.4)
        assert job.heartbeat(1.0)
    assert queue.claim_one("other") is None
    assert job.ack()


def test_retry_without_delay_follows_the_backoff_curve_of_the_stamped_base(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    queue = store.queue("q", QueueOpts(backoff_base_s=2, max_attempts=5))
    job_id = queue.enqueue(1)
    job = claim(peer.queue("q", QueueOpts(backoff_base_s=60)))  # the row's stamp rules
    before = time.time()
    assert job.retry(ValueError("flaky"))
    after = time.time()
    snapshot = info(queue, job_id)
    ceiling = backoff_ceiling(2, 1)
    assert before + ceiling / 2 - 0.05 <= snapshot.run_at <= after + ceiling + 0.05
    assert (snapshot.state, snapshot.last_error) == ("pending", "ValueError: flaky")
    assert queue.claim_one("w") is None


def test_retry_with_a_delay_delays_exactly_that(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=5))
    job_id = queue.enqueue(1)
    job = claim(queue)
    before = time.time()
    assert job.retry("try later", 0.2)
    assert info(queue, job_id).run_at == pytest.approx(before + 0.2, abs=0.1)
    assert queue.claim_one("w") is None
    time.sleep(0.3)
    again = claim(queue)
    assert again.attempts == 2
    assert again.retry("now", 0)
    assert claim(queue).attempts == 3


def test_retry_on_the_last_attempt_dead_letters(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=2))
    job_id = queue.enqueue({"n": 1})
    assert claim(queue).retry("first", 0)
    before = time.time()
    assert claim(queue).retry("second", 0)
    snapshot = info(queue, job_id)
    assert (snapshot.state, snapshot.last_error, snapshot.attempts) == ("dead", "second", 2)
    assert snapshot.payload == {"n": 1}
    assert snapshot.died_at is not None
    assert snapshot.died_at >= before - 1
    assert queue.claim_one("w") is None


def test_each_retry_records_its_own_error(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=5))
    job_id = queue.enqueue(1)
    assert claim(queue).retry("first", 0)
    assert claim(queue).retry(ValueError("second"), 0)
    assert info(queue, job_id).last_error == "ValueError: second"


def test_errors_no_utf_8_can_hold_are_recorded_with_their_odd_characters_escaped(
    store: alkstore.Store,
) -> None:
    """A file name decoded with ``surrogateescape`` in a handler's error must not
    keep the job from being settled: the lone surrogate is stored as an escape."""
    queue = store.queue("q", QueueOpts(max_attempts=5))
    job_id = queue.enqueue(1)
    odd = b"report-\xff.csv".decode("utf-8", "surrogateescape")
    assert claim(queue).retry(FileNotFoundError(f"no {odd}"), 0)
    assert info(queue, job_id).last_error == "FileNotFoundError: no report-\\udcff.csv"
    assert claim(queue).fail("\ud800 and \N{SNOWMAN} \x00 kept")
    snapshot = info(queue, job_id)
    assert (snapshot.state, snapshot.last_error) == ("dead", "\\ud800 and \N{SNOWMAN} \x00 kept")


def test_fail_dead_letters_at_once(store: alkstore.Store) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue(1)
    assert claim(queue).fail("bad input")
    snapshot = info(queue, job_id)
    assert (snapshot.state, snapshot.last_error, snapshot.attempts) == ("dead", "bad input", 1)
    assert queue.claim_one("w") is None


def test_release_makes_the_job_claimable_at_once_with_the_attempt_given_back(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=60))
    job_id = queue.enqueue("work")
    job = claim(queue, "stopping")
    assert job.release()
    again = claim(peer.queue("q"), "other")
    assert (again.id, again.attempts, again.worker_id) == (job_id, job.attempts, "other")


def test_release_keeps_the_ready_time_and_the_last_error(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=5))
    job_id = queue.enqueue(1)
    assert claim(queue).retry("flaky", 0)
    before = info(queue, job_id)
    assert claim(queue).release()
    after = info(queue, job_id)
    assert (after.state, after.deadline, after.attempts) == ("pending", None, before.attempts)
    assert (after.run_at, after.last_error) == (before.run_at, "flaky")


def test_a_job_released_on_its_last_attempt_is_not_dead_lettered(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=1))
    job_id = queue.enqueue(1)
    assert claim(queue).release()
    queue.sweep_expired()
    assert info(queue, job_id).state == "pending"
    last = claim(queue)
    assert (last.id, last.attempts) == (job_id, 1)
    assert last.ack()


def test_release_after_the_claim_lapsed_returns_false_and_gives_nothing_back(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=0.1))
    queue.enqueue(1)
    job = claim(queue)
    time.sleep(0.2)
    assert not job.release()
    assert claim(queue).attempts == 2


def test_a_released_handle_settles_nothing_even_once_its_worker_reclaims_the_job(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=5))
    queue.enqueue(1)
    job = claim(queue, "w")
    assert job.release()
    again = claim(queue, "w")  # same id, attempt count and worker as the released handle
    assert (again.id, again.attempts) == (job.id, job.attempts)
    assert not job.release()
    assert not job.heartbeat(10)
    assert not job.retry("late", 0)
    assert not job.fail("late")
    assert not job.ack()
    assert info(queue, job.id).state == "processing"
    assert again.ack()


def test_release_wakes_a_waiting_worker(store: alkstore.Store, peer: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=60))
    queue.enqueue(1)
    job = claim(queue)
    waiting = peer.queue("q")
    assert not waiting.wait(0.1), "nothing is ready while the claim holds"
    threading.Timer(0.1, job.release).start()
    started = time.monotonic()
    assert waiting.wait(10)
    assert time.monotonic() - started < 5
    assert waiting.claim_one("other") is not None


def test_opts_are_stamped_at_enqueue_and_never_rewritten(store: alkstore.Store) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=4, visibility_timeout_s=20))
    job_id = queue.enqueue(1, EnqueueOpts(priority=9, max_attempts=2, expires=60))
    default_id = queue.enqueue(2)
    store.queue("q", QueueOpts(max_attempts=8, visibility_timeout_s=90))
    stamped, default = info(queue, job_id), info(queue, default_id)
    assert (stamped.priority, stamped.max_attempts) == (9, 2)
    assert stamped.expires_at == pytest.approx(stamped.created_at + 60, abs=1)
    assert (default.priority, default.max_attempts, default.expires_at) == (0, 4, None)
    job = claim(store.queue("q", QueueOpts(visibility_timeout_s=90)))  # the row's stamp rules
    assert job.deadline == pytest.approx(time.time() + 20, abs=2)


def test_an_expired_job_is_never_handed_out_and_sweep_moves_every_state(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(visibility_timeout_s=60))
    processing = queue.enqueue("processing", EnqueueOpts(expires=0.2, priority=1))
    pending = queue.enqueue("pending", EnqueueOpts(expires=0.2))
    keeper = queue.enqueue("keeper")
    assert claim(queue).id == processing
    time.sleep(0.3)
    assert claim(queue).id == keeper
    assert queue.claim_one("w") is None
    assert queue.sweep_expired() == 2
    for job_id in (pending, processing):
        assert info(queue, job_id).state == "dead"


def test_sweep_purges_dead_letters_past_their_retention_only(store: alkstore.Store) -> None:
    short = store.queue("short", QueueOpts(dead_letter_retention_s=0.1))
    forever = store.queue("forever")
    short_id, forever_id = short.enqueue(1), forever.enqueue(1)
    assert claim(short).fail("x")
    assert claim(forever).fail("x")
    time.sleep(0.2)
    short.sweep_expired()
    forever.sweep_expired()
    assert short.get_job(short_id) is None
    assert info(forever, forever_id).state == "dead"


def test_dead_letter_retention_counts_from_the_death_not_the_enqueue(
    store: alkstore.Store,
) -> None:
    queue = store.queue("q", QueueOpts(dead_letter_retention_s=0.4))
    job_id = queue.enqueue(1)
    time.sleep(0.5)  # older than the retention, but not yet dead
    assert claim(queue).fail("x")
    queue.sweep_expired()
    assert info(queue, job_id).state == "dead"
    time.sleep(0.5)
    queue.sweep_expired()
    assert queue.get_job(job_id) is None


def test_ack_batch_acks_only_what_the_worker_still_holds(store: alkstore.Store) -> None:
    queue = store.queue("q")
    for n in range(4):
        queue.enqueue(n)
    mine = queue.claim_batch("me", 3)
    theirs = claim(queue, "them")
    assert queue.ack_batch([j.id for j in mine] + [theirs.id], "me") == 3
    assert theirs.ack()


def test_cancel_deletes_a_job_in_any_state(store: alkstore.Store) -> None:
    queue = store.queue("q")
    pending, processing, dead = queue.enqueue(1), queue.enqueue(2), queue.enqueue(3)
    claim(queue)
    assert claim(queue).fail("x")
    for job_id in (pending, processing, dead):
        assert queue.cancel(job_id)
        assert not queue.cancel(job_id)
        assert queue.get_job(job_id) is None


def test_queues_are_separate_namespaces(store: alkstore.Store) -> None:
    job_id = store.queue("b").enqueue("for b")
    assert store.queue("a").claim_one("w") is None
    assert store.queue("a").get_job(job_id) is None
    assert not store.queue("a").cancel(job_id)
    held = claim(store.queue("b"), "w")
    assert store.queue("a").ack_batch([held.id], "w") == 0
    assert info(store.queue("b"), job_id).state == "processing"


def test_wait_wakes_when_another_store_enqueues(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    queue = store.queue("q")
    assert not queue.wait(0.1)
    threading.Timer(0.1, peer.queue("q").enqueue, [1]).start()
    started = time.monotonic()
    assert queue.wait(10)
    assert time.monotonic() - started < 5
    assert queue.claim_one("w") is not None


def test_wait_wakes_when_a_delayed_job_turns_ready(store: alkstore.Store) -> None:
    queue = store.queue("q")
    queue.enqueue(1, EnqueueOpts(delay=0.2))
    started = time.monotonic()
    job = None
    while job is None and time.monotonic() - started < 8:
        queue.wait(8)  # True means "look again"; the clock must end the wait, not the timeout
        job = queue.claim_one("w")
    assert job is not None
    assert time.monotonic() - started < 4


def test_wait_wakes_when_a_delayed_job_turns_ready_behind_a_later_higher_priority(
    store: alkstore.Store,
) -> None:
    """The queue's next ready time is the earliest of every priority's, not of
    the highest priority's."""
    queue = store.queue("q")
    queue.enqueue("later", EnqueueOpts(delay=60, priority=5))
    queue.enqueue("sooner", EnqueueOpts(delay=0.2))
    started = time.monotonic()
    job = None
    while job is None and time.monotonic() - started < 8:
        queue.wait(8)
        job = queue.claim_one("w")
    assert job is not None
    assert job.payload == "sooner"
    assert time.monotonic() - started < 4


def test_each_job_goes_to_exactly_one_of_many_threads(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    with store.transaction() as tx:
        for n in range(300):
            tx.enqueue_tx("q", None, n)
    seen: list[int] = []
    lock = threading.Lock()

    def work(source: alkstore.Store, worker: str) -> None:
        queue = source.queue("q")
        while jobs := queue.claim_batch(worker, 7):
            with lock:
                seen.extend(job.payload for job in jobs)
            assert queue.ack_batch([job.id for job in jobs], worker) == len(jobs)

    threads = [
        threading.Thread(target=work, args=(store if n % 2 else peer, f"w{n}")) for n in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(300))
