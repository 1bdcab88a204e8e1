"""Unique jobs (contract 1.4): at most one live job per ``(queue, key)``.

A live job is ready, scheduled or processing. A keyed enqueue while one lives
writes nothing and returns its id; once it is acked, cancelled or dead (an
expired one included) the key is free again. Races between transactions,
threads and processes end with exactly one job.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

import alkstore
from alkstore import EnqueueOpts, QueueOpts, ScheduleOpts
from alkstore.engine import StoreTarget
from alkstore_contract_tests.suite._runner import Runner
from alkstore_contract_tests.suite._support import finish, spawn


def keyed(key: str, **more: object) -> EnqueueOpts:
    return EnqueueOpts(key=key, **more)  # type: ignore[arg-type]


def live_jobs(store: alkstore.Store, queue: str) -> list[alkstore.JobInfo]:
    return [
        job
        for state in ("pending", "processing")
        for job in store.inspect().jobs(queue, state, limit=1000)
    ]


def test_a_duplicate_enqueue_writes_nothing_and_returns_the_live_jobs_id(
    store: alkstore.Store,
) -> None:
    queue = store.queue("invoices")
    first = queue.enqueue({"invoice": 42}, keyed("invoice-42"))
    assert queue.enqueue({"invoice": 42, "again": True}, keyed("invoice-42")) == first
    [job] = live_jobs(store, "invoices")
    assert (job.id, job.payload, job.key) == (first, {"invoice": 42}, "invoice-42")
    other = queue.enqueue({"invoice": 43}, keyed("invoice-43"))
    assert other != first
    assert queue.enqueue("plain") not in (first, other)
    assert len(live_jobs(store, "invoices")) == 3


def test_claimed_and_handles_carry_the_key(store: alkstore.Store) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue("x", keyed("k-1"))
    plain_id = queue.enqueue("y")
    info = queue.get_job(job_id)
    assert info is not None
    assert info.key == "k-1"
    plain = queue.get_job(plain_id)
    assert plain is not None
    assert plain.key is None
    jobs = {job.id: job for job in queue.claim_batch("w", 10)}
    assert (jobs[job_id].key, jobs[plain_id].key) == ("k-1", None)
    claimed = queue.get_job(job_id)
    assert claimed is not None
    assert (claimed.state, claimed.key) == ("processing", "k-1")


@pytest.mark.parametrize(
    "state", ["scheduled", "processing", "retrying", "released"],
)  # fmt: skip
def test_every_live_state_holds_the_key(store: alkstore.Store, state: str) -> None:
    queue = store.queue("q")
    job_id = queue.enqueue("first", keyed("k", delay=60 if state == "scheduled" else None))
    if state != "scheduled":
        job = queue.claim_one("w")
        assert job is not None
        assert job.id == job_id
        if state == "retrying":
            assert job.retry("later", delay_s=60)
        elif state == "released":
            assert job.release()
    assert queue.enqueue("second", keyed("k")) == job_id
    assert [job.id for job in live_jobs(store, "q")] == [job_id]


@pytest.mark.parametrize("ending", ["ack", "cancel", "fail", "retry on the last attempt"])
def test_the_key_is_free_again_once_its_job_is_finished_or_dead(
    store: alkstore.Store, ending: str
) -> None:
    queue = store.queue("q", QueueOpts(max_attempts=1))
    first = queue.enqueue("first", keyed("k"))
    job = queue.claim_one("w")
    assert job is not None
    if ending == "ack":
        assert job.ack()
    elif ending == "cancel":
        assert queue.cancel(first)
    elif ending == "fail":
        assert job.fail("boom")
    else:
        assert job.retry("boom")
    second = queue.enqueue("second", keyed("k"))
    assert second != first
    [live] = live_jobs(store, "q")
    assert (live.id, live.payload, live.key) == (second, "second", "k")


def test_a_job_past_its_expiry_holds_no_key(store: alkstore.Store) -> None:
    """It is never handed out again: a keyed enqueue must not return it."""
    queue = store.queue("q")
    expiring = queue.enqueue("stale", keyed("k", expires=0.1))
    time.sleep(0.2)
    fresh = queue.enqueue("fresh", keyed("k"))
    assert fresh != expiring
    job = queue.claim_one("w")
    assert job is not None
    assert (job.id, job.payload) == (fresh, "fresh")
    gone = queue.get_job(expiring)
    assert gone is None or gone.state == "dead"


def test_keys_belong_to_their_queue(store: alkstore.Store) -> None:
    a = store.queue("a").enqueue("x", keyed("shared"))
    b = store.queue("b").enqueue("x", keyed("shared"))
    assert a != b
    assert [job.id for job in live_jobs(store, "a")] == [a]
    assert [job.id for job in live_jobs(store, "b")] == [b]


@pytest.mark.parametrize(
    "key",
    ["x", "ümlaut ✓ 名前", "quote'\"; DROP TABLE x; --", "back\\slash", "nul\x00byte",
     "\U0001f600" * 1000, " ", "\\0"],
    ids=["ascii", "unicode", "quotes", "backslash", "nul", "huge", "space", "escape-like"],
)  # fmt: skip
def test_any_key_text_is_kept_exactly_and_deduplicates(store: alkstore.Store, key: str) -> None:
    queue = store.queue("q")
    first = queue.enqueue(1, keyed(key))
    assert queue.enqueue(2, keyed(key)) == first
    lookalike = queue.enqueue(3, keyed(key + "x"))
    assert lookalike != first
    info = queue.get_job(first)
    assert info is not None
    assert info.key == key
    claimed = {job.id: job.key for job in queue.claim_batch("w", 10)}
    assert claimed == {first: key, lookalike: key + "x"}


@pytest.mark.parametrize("key", ["", 7, b"k", "\ud800"], ids=["empty", "int", "bytes", "surrogate"])
def test_a_bad_key_is_refused_when_the_options_are_made(key: object) -> None:
    with pytest.raises(alkstore.InvalidName, match="key"):
        EnqueueOpts(key=key)  # type: ignore[arg-type]


def test_in_a_transaction_a_repeated_key_returns_the_same_id_and_commits_one_job(
    store: alkstore.Store,
) -> None:
    with store.transaction() as tx:
        before = tx.enqueue_tx("q", None, "before")
        first = tx.enqueue_tx("q", keyed("k"), "first")
        between = tx.enqueue_tx("q", None, "between")
        assert tx.enqueue_tx("q", keyed("k"), "again") == first
        after = tx.enqueue_tx("q", None, "after")
    assert len({before, first, between, after}) == 4
    claimed = {job.id: job.payload for job in store.queue("q").claim_batch("w", 10)}
    assert claimed == {before: "before", first: "first", between: "between", after: "after"}


def test_a_rolled_back_keyed_enqueue_leaves_the_key_free(store: alkstore.Store) -> None:
    tx = store.begin_tx()
    tx.enqueue_tx("q", keyed("k"), "rolled back")
    tx.rollback()
    kept = store.queue("q").enqueue("kept", keyed("k"))
    [job] = live_jobs(store, "q")
    assert (job.id, job.payload) == (kept, "kept")


def test_a_transaction_sees_a_committed_live_job_with_its_key(store: alkstore.Store) -> None:
    live = store.queue("q").enqueue("live", keyed("k"))
    with store.transaction() as tx:
        assert tx.enqueue_tx("q", keyed("k"), "duplicate") == live
    assert [job.id for job in live_jobs(store, "q")] == [live]


def test_the_outbox_deduplicates_by_key_too(store: alkstore.Store) -> None:
    outbox = store.outbox("hooks")
    first = outbox.enqueue({"n": 1}, keyed("hook-1"))
    with store.transaction() as tx:
        assert tx.outbox_enqueue_tx("hooks", keyed("hook-1"), {"n": 2}) == first
    delivered: list[object] = []
    while outbox.run_once("w", delivered.append):
        pass
    assert delivered == [{"n": 1}]


def test_threads_racing_with_one_key_leave_exactly_one_job(peer: alkstore.Store) -> None:
    """Each thread enqueues the key in a transaction of its own, held open a
    moment so that they overlap; all get the one job's id."""
    queue = peer.queue("q")
    start = threading.Barrier(6)
    ids: list[int] = []

    def contend(n: int) -> None:
        start.wait(10)
        with peer.transaction() as tx:
            ids.append(tx.enqueue_tx("q", keyed("hot"), n))
            time.sleep(0.05)

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(ids) == 6
    [job] = live_jobs(peer, "q")
    assert set(ids) == {job.id}
    assert queue.enqueue("late", keyed("hot")) == job.id


@pytest.mark.usefixtures("multi_process")
def test_processes_racing_with_one_key_leave_exactly_one_job(
    target: StoreTarget, api: str, store: alkstore.Store
) -> None:
    """Processes enqueue the same keys at once, in transactions held open a
    moment and in plain enqueues: one job per key, every enqueuer told its id."""
    start_at = str(time.time() + 2.0)
    racers = [
        spawn(
            target,
            """
            import json, sys, time
            from alkstore import EnqueueOpts
            time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
            ids = {}
            with store.transaction() as tx:
                ids["tx"] = tx.enqueue_tx("race", EnqueueOpts(key="in-tx"), sys.argv[3])
                time.sleep(0.2)
            queue = store.queue("race")
            ids["plain"] = [queue.enqueue(n, EnqueueOpts(key=f"k{n % 5}")) for n in range(20)]
            print(json.dumps(ids))
            store.close()
            """,
            start_at,
            f"racer-{n}",
            api=api,
        )
        for n in range(4)
    ]
    told = [json.loads(finish(racer)) for racer in racers]
    jobs = {job.key: job.id for job in live_jobs(store, "race")}
    assert sorted(jobs, key=str) == ["in-tx", "k0", "k1", "k2", "k3", "k4"]
    assert {ids["tx"] for ids in told} == {jobs["in-tx"]}
    for ids in told:
        assert ids["plain"] == [jobs[f"k{n % 5}"] for n in range(20)]


def test_a_keyed_schedule_does_not_pile_up_while_its_run_is_live(
    store: alkstore.Store, scheduler_lease_s: float
) -> None:
    """Boundaries fired while the previous run is still live add no job."""
    store.schedule("tick", "@every 1s", "ticks", "tick", ScheduleOpts(key="tick"))
    runner = Runner(store, "leader", sole=True)
    try:
        time.sleep(3.5)
    finally:
        errors = runner.finish()
    assert errors == []
    jobs = live_jobs(store, "ticks")
    assert len(jobs) == 1
    assert jobs[0].key == "tick"


def test_a_bad_schedule_key_is_refused_when_the_options_are_made() -> None:
    with pytest.raises(alkstore.InvalidName, match="key"):
        ScheduleOpts(key="")
