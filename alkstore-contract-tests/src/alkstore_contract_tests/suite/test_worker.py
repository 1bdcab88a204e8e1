"""alkstore.Worker over the engine: claims, acks, retries, heartbeats, shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time

import pytest

import alkstore
from alkstore import EnqueueOpts, Job, JobInfo, QueueOpts
from alkstore.engine import StoreTarget
from alkstore_contract_tests.suite._api import make_worker, run_scenario
from alkstore_contract_tests.suite._support import StartRunning, eventually, spawn, start_thread


def test_a_worker_handles_and_acks_every_job(store: alkstore.Store, running: StartRunning) -> None:
    seen: list[int] = []
    worker = make_worker(store, "work", lambda job: seen.append(job.payload), concurrency=3)
    with store.transaction() as tx:
        job_ids = [tx.enqueue_tx("work", None, n) for n in range(50)]
    running(worker)
    eventually(lambda: worker.stats().succeeded == 50)
    assert sorted(seen) == list(range(50))
    assert all(store.queue("work").get_job(job_id) is None for job_id in job_ids)


def test_a_batch_claiming_worker_handles_every_job_once(
    store: alkstore.Store, running: StartRunning
) -> None:
    seen: list[int] = []
    worker = make_worker(store, "work", lambda job: seen.append(job.payload), batch_size=16)
    with store.transaction() as tx:
        for n in range(100):
            tx.enqueue_tx("work", None, n)
    running(worker)
    eventually(lambda: worker.stats().succeeded == 100)
    assert sorted(seen) == list(range(100))


def test_a_parked_worker_is_woken_by_an_enqueue_not_a_poll(
    store: alkstore.Store, peer: alkstore.Store, running: StartRunning
) -> None:
    handled = threading.Event()
    running(make_worker(store, "work", lambda job: handled.set(), idle_wait_s=60))
    time.sleep(0.2)  # let it park
    peer.queue("work").enqueue("wake up")
    assert handled.wait(10)


def test_a_failing_handler_retries_with_its_error_recorded(
    store: alkstore.Store, running: StartRunning
) -> None:
    def handler(job: Job) -> None:
        raise ValueError(f"cannot handle {job.payload}")

    queue = store.queue("work", QueueOpts(max_attempts=3, backoff_base_s=60))
    job_id = queue.enqueue("x")
    worker = make_worker(store, queue, handler)
    running(worker)
    eventually(lambda: worker.stats().failed == 1)
    info = queue.get_job(job_id)
    assert info is not None
    assert (info.state, info.attempts) == ("pending", 1)
    assert info.last_error == "ValueError: cannot handle x"
    assert info.run_at > time.time() + 20  # on the backoff curve, not at once


def test_a_job_failing_its_last_attempt_is_dead_lettered(
    store: alkstore.Store, running: StartRunning
) -> None:
    def handler(job: Job) -> None:
        raise RuntimeError("no")

    queue = store.queue("work", QueueOpts(max_attempts=1))
    job_id = queue.enqueue("x")
    running(make_worker(store, queue, handler))

    def dead() -> JobInfo | None:
        info = queue.get_job(job_id)
        return info if info is not None and info.state == "dead" else None

    assert eventually(dead).last_error == "RuntimeError: no"


def test_a_handler_error_utf_8_cannot_hold_is_retried_and_the_worker_goes_on(
    store: alkstore.Store, running: StartRunning, caplog: pytest.LogCaptureFixture
) -> None:
    # The worker logs the retry with its traceback, lone surrogate included: a
    # report carrying it cannot cross pytest-xdist's channel to its controller.
    caplog.set_level(logging.CRITICAL, logger="alkstore")
    odd_name = b"in-\xff.csv".decode("utf-8", "surrogateescape")

    def handler(job: Job) -> None:
        if job.payload == "odd" and job.attempts == 1:
            raise FileNotFoundError(f"no {odd_name}")

    queue = store.queue("work", QueueOpts(max_attempts=3, backoff_base_s=0.01))
    first = queue.enqueue("odd")
    worker = make_worker(store, queue, handler)
    running(worker)
    eventually(lambda: worker.stats().failed == 1)
    eventually(lambda: queue.get_job(first) is None)  # acked on its second attempt
    then = queue.enqueue("next")
    eventually(lambda: queue.get_job(then) is None)
    # The ack lands before the worker counts it: wait for the count, not the row.
    eventually(lambda: worker.stats().succeeded == 2)
    assert worker.stats().failed == 1


def test_a_long_job_is_heartbeated_past_its_visibility_timeout(
    store: alkstore.Store, peer: alkstore.Store, running: StartRunning
) -> None:
    # Three leases pass: only heartbeats (a third of a lease apart) keep the
    # claim. A lease of a second leaves a loaded machine 0.6 s for each.
    queue = store.queue("work", QueueOpts(visibility_timeout_s=1.0))
    job_id = queue.enqueue("slow")
    finished = threading.Event()
    attempts: list[int] = []

    def handler(job: Job) -> None:
        attempts.append(job.attempts)
        time.sleep(3.0)
        finished.set()

    worker = make_worker(store, queue, handler)
    running(worker)
    eventually(lambda: attempts)
    while not finished.is_set():
        assert peer.queue("work").claim_one("thief") is None
        time.sleep(0.05)
    eventually(lambda: worker.stats().succeeded == 1)
    assert attempts == [1]
    assert queue.get_job(job_id) is None


def test_stopping_releases_a_job_that_outlives_the_grace_period(store: alkstore.Store) -> None:
    queue = store.queue("work", QueueOpts(max_attempts=1))
    job_id = queue.enqueue("stuck")
    started, unblock = threading.Event(), threading.Event()

    def handler(job: Job) -> None:
        started.set()
        unblock.wait(30)

    worker = make_worker(store, queue, handler, grace_s=0.2)
    stop = threading.Event()
    thread = start_thread(lambda: worker.run(stop))
    assert started.wait(10)
    stop.set()
    thread.join(10)
    assert not thread.is_alive()
    info = queue.get_job(job_id)
    assert info is not None
    # Released, not dead-lettered, although that was its only attempt.
    assert (info.state, info.attempts) == ("pending", 0)
    assert worker.stats().released == 1
    unblock.set()


def test_stopping_lets_a_job_finish_within_the_grace_period(store: alkstore.Store) -> None:
    job_id = store.queue("work").enqueue("brief")
    started = threading.Event()

    def handler(job: Job) -> None:
        started.set()
        time.sleep(0.3)

    worker = make_worker(store, "work", handler, grace_s=10)
    stop = threading.Event()
    thread = start_thread(lambda: worker.run(stop))
    assert started.wait(10)
    stop.set()
    thread.join(10)
    assert store.queue("work").get_job(job_id) is None
    assert (worker.stats().succeeded, worker.stats().released) == (1, 0)


def test_stopping_releases_claimed_jobs_not_yet_started(store: alkstore.Store) -> None:
    queue = store.queue("work")
    job_ids = [queue.enqueue(n) for n in range(8)]
    started = threading.Event()

    def handler(job: Job) -> None:
        started.set()
        time.sleep(0.3)

    worker = make_worker(store, queue, handler, batch_size=8, grace_s=10)
    stop = threading.Event()
    thread = start_thread(lambda: worker.run(stop))
    assert started.wait(10)
    stop.set()
    thread.join(10)
    states = [info.state for job_id in job_ids if (info := queue.get_job(job_id))]
    assert states == ["pending"] * 7
    assert worker.stats().released == 7


def test_an_outbox_is_delivered_by_a_worker(store: alkstore.Store, running: StartRunning) -> None:
    delivered: list[object] = []
    with store.transaction() as tx:
        tx.outbox_enqueue_tx("webhooks", None, {"order": 1})
    worker = make_worker(store, store.outbox("webhooks"), lambda job: delivered.append(job.payload))
    running(worker)
    eventually(lambda: delivered)
    assert delivered == [{"order": 1}]


def test_a_coroutine_handler_runs_under_run(store: alkstore.Store, running: StartRunning) -> None:
    seen: list[int] = []

    async def handler(job: Job) -> None:
        await asyncio.sleep(0)
        seen.append(job.payload)

    store.queue("work").enqueue(7)
    running(make_worker(store, "work", handler))
    eventually(lambda: seen)
    assert seen == [7]


def test_run_async_handles_jobs_without_blocking_the_loop(store: alkstore.Store) -> None:
    queue = store.queue("work")
    for n in range(20):
        queue.enqueue(n)
    seen: list[int] = []

    async def handler(job: Job) -> None:
        await asyncio.sleep(0.01)
        seen.append(job.payload)

    async def main() -> int:
        stop = asyncio.Event()
        worker = make_worker(store, queue, handler, concurrency=4, idle_wait_s=60)
        task = asyncio.create_task(worker.run_async(stop))
        ticks = 0
        while len(seen) < 20:
            await asyncio.sleep(0.01)
            ticks += 1
        # Parked on an empty queue, the loop still runs freely.
        before = ticks
        for _ in range(20):
            await asyncio.sleep(0.01)
            ticks += 1
        stop.set()
        await asyncio.wait_for(task, 10)
        return ticks - before

    assert run_scenario(store, main, 60) == 20
    assert sorted(seen) == list(range(20))


def test_run_async_releases_running_jobs_at_shutdown(store: alkstore.Store) -> None:
    queue = store.queue("work")
    job_id = queue.enqueue("stuck")

    async def handler(job: Job) -> None:
        await asyncio.sleep(60)

    async def main() -> None:
        stop = asyncio.Event()
        worker = make_worker(store, queue, handler, grace_s=0.1)
        task = asyncio.create_task(worker.run_async(stop))
        while worker.stats().in_flight == 0:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 10)

    run_scenario(store, main, 60)
    info = queue.get_job(job_id)
    assert info is not None
    assert (info.state, info.attempts) == ("pending", 0)


def test_bad_worker_arguments_are_refused(store: alkstore.Store) -> None:
    with pytest.raises(TypeError, match="handler"):
        make_worker(store, "work", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency"):
        make_worker(store, "work", print, concurrency=0)
    with pytest.raises(ValueError, match="grace_s"):
        make_worker(store, "work", print, grace_s=-1)
    with pytest.raises(alkstore.ReservedName):
        make_worker(store, "__alkstore_x", print)


@pytest.mark.usefixtures("multi_process")
def test_a_worker_process_sent_sigterm_mid_job_loses_nothing(
    target: StoreTarget, api: str, store: alkstore.Store
) -> None:
    queue = store.queue("work", QueueOpts(max_attempts=1))
    stuck = queue.enqueue("stuck")
    waiting = [queue.enqueue(n, EnqueueOpts(priority=-1)) for n in range(3)]
    child = spawn(
        target,
        """
        import threading
        from alkstore_contract_tests.suite._api import make_worker
        def handler(job):
            print("started", job.payload, flush=True)
            threading.Event().wait(60)
        make_worker(store, "work", handler, batch_size=4, grace_s=0.3).run_forever()
        print("stopped", flush=True)
        store.close()
        """,
        api=api,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "started stuck"
    child.send_signal(signal.SIGTERM)
    out, errors = child.communicate(timeout=30)
    assert child.returncode == 0, errors
    assert out.strip() == "stopped"
    for job_id in [stuck, *waiting]:
        info = queue.get_job(job_id)
        assert info is not None
        assert (info.state, info.deadline, info.attempts) == ("pending", None, 0)
    assert len(queue.claim_batch("next", 10)) == 4
