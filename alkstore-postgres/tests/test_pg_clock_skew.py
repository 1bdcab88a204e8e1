"""A Worker's lease follows the server's clock: a host clock 40 s off changes nothing.

The server stamps a claim's deadline with its own clock; the Worker renews
the lease by its duration (the job's stamped visibility timeout) on a
monotonic schedule. Here this process's ``time.time`` runs 40 s ahead of the
server, or 40 s behind, while a job runs longer than its lease.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import alkstore
from alkstore import QueueOpts
from alkstore_postgres import PostgresStore
from alkstore_postgres._queue import PostgresQueue

OpenStore = Callable[..., PostgresStore]

# A lease long enough that a heartbeat may run a second late on a loaded CI
# machine (it renews at a third of the lease) without the job changing hands.
LEASE_S = 2.0
RUNS_FOR_S = 4.5


@pytest.mark.parametrize("skew_s", [40.0, -40.0], ids=["host ahead", "host behind"])
def test_a_running_job_keeps_its_lease_and_heartbeats_at_a_sane_rate_whatever_the_host_clock(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch, skew_s: float
) -> None:
    producer, thief = open_store(), open_store()
    job_id = producer.queue("long", QueueOpts(visibility_timeout_s=LEASE_S)).enqueue("work")
    extensions = _count_heartbeats(monkeypatch)
    wall_clock = time.time
    monkeypatch.setattr(time, "time", lambda: wall_clock() + skew_s)

    # The worker's own view of the queue declares the default 300 s visibility:
    # the lease must come from the job's row, not from this view.
    worker_store = open_store()
    running, finish = threading.Event(), threading.Event()

    def handle(job: alkstore.Job) -> None:
        running.set()
        assert finish.wait(10)

    worker = alkstore.Worker(worker_store, "long", handle)
    stop = threading.Event()
    runner = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    runner.start()
    try:
        assert running.wait(10)
        started = time.monotonic()
        while time.monotonic() - started < RUNS_FOR_S:
            assert thief.queue("long").claim_one("thief") is None, "another worker took the job"
            time.sleep(0.05)
        finish.set()
        deadline = time.monotonic() + 10
        while producer.queue("long").get_job(job_id) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        finish.set()
        stop.set()
        runner.join(10)

    assert producer.queue("long").get_job(job_id) is None  # acked by its one worker
    assert worker.stats().succeeded == 1
    assert set(extensions) == {LEASE_S}  # each renewal is the job's own lease
    # One heartbeat per third of the lease: about 7 over 4.5 s, never hundreds.
    assert RUNS_FOR_S / LEASE_S * 3 - 3 <= len(extensions) <= RUNS_FOR_S / LEASE_S * 3 + 3


def _count_heartbeats(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the ``extend_s`` of every heartbeat that reaches the engine."""
    extensions: list[float] = []
    heartbeat = PostgresQueue._heartbeat_job

    def counted(queue: PostgresQueue, job: alkstore.Job, extend_s: float) -> Any:
        extensions.append(extend_s)
        return heartbeat(queue, job, extend_s)

    monkeypatch.setattr(PostgresQueue, "_heartbeat_job", counted)
    return extensions
