"""What each process of the soak does: produce, work, consume, listen.

Every role runs in its own spawned process with its own store, reports to the
parent through one ``multiprocessing`` queue, and stops when its stop event
is set. Reports are tuples whose first item names them:

- ``("acked", worker, when, count, latencies)`` about once a second, from each
  worker: jobs acked since the last report and their enqueue → claim times;
- ``("produced", producer, ids, behind_s)`` and ``("acked_ids", worker, ids,
  short)`` at the end: every committed job id, every acked one (``short``:
  batches ``ack_batch`` did not ack in full);
- ``("consumed", count, out_of_order, duplicates)`` and ``("wakes", count)`` at
  the end.
"""

from __future__ import annotations

import array
import multiprocessing.synchronize
import time
from typing import TYPE_CHECKING, Any

import alkstore

__all__ = ["CHANNEL", "QUEUE", "STREAM", "consume", "listen", "produce", "work"]

QUEUE = "soak"
STREAM = "soak-events"
CHANNEL = "soak-wakes"
BATCH = 32
REPORT_S = 1.0
_BEHIND_RESET_S = 1.0
"""A producer this far behind its schedule starts the schedule again from now
(and counts the time): a burst to catch up would not be a steady rate."""

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    Reports = Queue[tuple[Any, ...]]
else:
    Reports = object
Stop = multiprocessing.synchronize.Event


def produce(url: str, index: int, rate: float | None, reports: Reports, stop: Stop) -> None:
    """Enqueue a job and publish its event in one transaction, ``rate`` times a
    second (as fast as it goes when None), waking the listener at each commit."""
    ids = array.array("q")  # 8 bytes an id: the process's growth is the store's, not this list's
    behind_s = 0.0
    with alkstore.open(url) as store:
        due = time.perf_counter()
        while not stop.is_set():
            if rate is not None:
                now = time.perf_counter()
                if now < due:
                    time.sleep(due - now)
                elif now - due > _BEHIND_RESET_S:
                    behind_s += now - due
                    due = now
                due += 1 / rate
            with store.transaction() as tx:
                job = tx.enqueue_tx(QUEUE, None, {"t": time.time(), "p": index, "s": len(ids)})
                tx.publish_tx(STREAM, {"p": index, "s": len(ids), "job": job})
                tx.notify_tx(CHANNEL, None)
            ids.append(job)
    reports.put(("produced", index, ids, behind_s))


def work(url: str, index: int, reports: Reports, stop: Stop) -> None:
    """Claim batches of ``BATCH`` and ack them, reporting counts and latencies."""
    worker = f"soak-worker-{index}"
    acked = array.array("q")  # as the producers' ids
    short = 0
    latencies: list[float] = []
    count = 0
    reported = time.monotonic()
    with alkstore.open(url) as store:
        queue = store.queue(QUEUE)
        while not stop.is_set():
            jobs = queue.claim_batch(worker, BATCH)
            if jobs:
                claimed = time.time()
                latencies.extend(claimed - job.payload["t"] for job in jobs)
                if queue.ack_batch(jobs, worker) == len(jobs):
                    acked.extend(job.id for job in jobs)
                    count += len(jobs)
                else:
                    short += 1
            else:
                queue.wait(0.2)
            if time.monotonic() - reported >= REPORT_S:
                reports.put(("acked", index, time.monotonic(), count, latencies))
                latencies, count, reported = [], 0, time.monotonic()
    reports.put(("acked", index, time.monotonic(), count, latencies))
    reports.put(("acked_ids", index, acked, short))


def consume(url: str, reports: Reports, stop: Stop) -> None:
    """Follow the stream as one consumer, checking each producer's events come in order."""
    last: dict[int, int] = {}
    counts = {"events": 0, "out_of_order": 0, "duplicates": 0}

    def handle(event: alkstore.StreamEvent) -> None:
        producer, seq = event.payload["p"], event.payload["s"]
        previous = last.get(producer, -1)
        if seq <= previous:
            counts["duplicates"] += 1
            return
        if seq != previous + 1:
            counts["out_of_order"] += 1
        last[producer] = seq
        counts["events"] += 1

    with alkstore.open(url) as store:
        alkstore.Consumer(store, STREAM, "soak-consumer", handle, batch_size=500).run(stop)
    reports.put(("consumed", counts["events"], counts["out_of_order"], counts["duplicates"]))


def listen(url: str, reports: Reports, stop: Stop) -> None:
    """Count the wakes of the producers' commits (coalesced wakes count once)."""
    wakes = 0
    with alkstore.open(url) as store:
        receiver = store.listen(CHANNEL)
        while not stop.is_set():
            if receiver.recv(timeout=0.5) is not None:
                wakes += 1
        receiver.close()
    reports.put(("wakes", wakes))
