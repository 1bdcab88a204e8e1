"""A closed store refuses every call with ``Closed``, and closing it while other
threads use it ends each of their calls in a result or ``Closed``."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest

import alkstore
from alkstore.engine import TestProvider
from alkstore_contract_tests.suite._api import business_rows, write_business_row
from alkstore_contract_tests.suite._support import OpenStore, needs, start_thread


def test_every_call_after_close_raises_closed(store: alkstore.Store) -> None:
    queue, stream = store.queue("q"), store.stream("s")
    queue.enqueue(1)
    job = queue.claim_one("w")
    assert job is not None
    store.close()
    store.close()  # idempotent
    assert store.closed
    calls: list[Callable[[], object]] = [
        lambda: store.notify("c", 1),
        lambda: store.listen("c"),
        lambda: store.queue("q"),
        lambda: store.try_lock("l", "o", 1),
        store.begin_tx,
        lambda: queue.enqueue(1),
        lambda: queue.claim_one("w"),
        lambda: stream.publish(1),
        lambda: stream.read_since(0),
        job.ack,
        lambda: job.retry("x"),
        job.release,
        store.inspect,
        lambda: store.schedule("s", "@every 1s", "q", 1),
    ]
    for call in calls:
        with pytest.raises(alkstore.Closed):
            call()


def test_a_store_is_a_context_manager(open_store: OpenStore) -> None:
    store = open_store()
    with store:
        store.queue("q").enqueue(1)
    assert store.closed


def test_closing_a_store_while_threads_use_it_ends_their_calls_in_results_or_closed(
    provider: TestProvider, open_store: OpenStore
) -> None:
    """Threads in transactions, enqueues, claims and acks while another closes the
    store: each call returns or raises ``Closed`` (never a driver's error about
    a connection closed beneath it, or worse), close waits for none of them for
    long, and exactly the transactions whose commit returned are in the
    database, each whole. Their statements contend for one stream's head, so a
    close that waited for a statement blocked by an open transaction it had not
    rolled back yet would never end."""
    needs(provider, "write_business_row")
    committed: list[str] = []
    for round_ in range(4):
        store = open_store()
        runs = [UntilClosed(in_transactions(provider, store, f"{round_}-{t}", committed))
                for t in range(3)]  # fmt: skip
        runs.append(UntilClosed(enqueues_and_acks(store.queue("plain"))))
        time.sleep(0.05 + 0.05 * round_)
        store.close()
        for run in runs:
            run.thread.join(30)
        assert not any(run.thread.is_alive() for run in runs), "a call outlived close by 30 s"
        assert [run.unexpected for run in runs if run.unexpected] == []
    peer = open_store()
    assert business_rows(provider, peer) == set(committed)
    assert Counter(every_event(peer.stream("in-tx"))) == Counter(committed)
    assert Counter(every_job(peer.queue("in-tx"))) == Counter(committed)


class UntilClosed:
    """Call ``work(0)``, ``work(1)``, … on a thread until it raises ``Closed``,
    keeping anything else it raises."""

    def __init__(self, work: Callable[[int], None]) -> None:
        self.unexpected: BaseException | None = None
        self.thread = start_thread(lambda: self._run(work))

    def _run(self, work: Callable[[int], None]) -> None:
        try:
            for n in range(1_000_000):
                work(n)
        except alkstore.Closed:
            pass
        except BaseException as exc:
            self.unexpected = exc


def in_transactions(
    provider: TestProvider, store: alkstore.Store, prefix: str, committed: list[str]
) -> Callable[[int], None]:
    def work(n: int) -> None:
        key = f"{prefix}-{n}"
        with store.transaction() as tx:
            tx.enqueue_tx("in-tx", None, key)
            write_business_row(provider, tx, key)
            tx.publish_tx("in-tx", key)
        committed.append(key)

    return work


def enqueues_and_acks(queue: alkstore.Queue) -> Callable[[int], None]:
    def work(n: int) -> None:
        queue.enqueue(n)
        job = queue.claim_one("w")
        if job is not None:
            job.ack()

    return work


def every_event(stream: alkstore.Stream) -> list[object]:
    payloads: list[object] = []
    after = 0
    while page := stream.read_since(after, limit=1_000):
        payloads += [event.payload for event in page]
        after = page[-1].offset
    return payloads


def every_job(queue: alkstore.Queue) -> list[object]:
    payloads: list[object] = []
    while batch := queue.claim_batch("check", 1_000):
        payloads += [job.payload for job in batch]
    return payloads
