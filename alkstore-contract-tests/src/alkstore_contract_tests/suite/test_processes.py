"""Peers in other processes: wakes, claim exclusivity and lock contention;
and a process forked with a store open.

Each child process uses the session's API too (in async mode, an AsyncStore
behind the suite's sync facade)."""

from __future__ import annotations

import json
import os
import time

import pytest

import alkstore
from alkstore import Wake
from alkstore.engine import StoreTarget
from alkstore_contract_tests.suite._support import finish, spawn

pytestmark = pytest.mark.usefixtures("multi_process")


def test_a_listener_in_another_process_is_woken(
    target: StoreTarget, api: str, store: alkstore.Store
) -> None:
    listener = spawn(
        target,
        """
        with store.listen("orders") as wakes:
            print("listening", flush=True)
            print(wakes.recv(30), flush=True)
        store.close()
        """,
        api=api,
    )
    assert listener.stdout is not None
    assert listener.stdout.readline().strip() == "listening"
    store.notify("orders", 1)
    assert finish(listener).strip() == repr(Wake("orders"))


def test_processes_claiming_together_get_each_job_once(
    target: StoreTarget, api: str, store: alkstore.Store
) -> None:
    with store.transaction() as tx:
        for n in range(400):
            tx.enqueue_tx("work", None, n)
    workers = [
        spawn(
            target,
            """
            import json, sys
            queue, acked = store.queue("work"), []
            while jobs := queue.claim_batch(sys.argv[2], 8):
                acked.extend(job.payload for job in jobs if job.ack())
            print(json.dumps(acked))
            store.close()
            """,
            f"worker-{n}",
            api=api,
        )
        for n in range(3)
    ]
    acked = [payload for worker in workers for payload in json.loads(finish(worker))]
    assert sorted(acked) == list(range(400))


def test_processes_contending_for_a_lock_have_exactly_one_winner(
    target: StoreTarget, api: str
) -> None:
    start_at = str(time.time() + 1.5)
    contenders = [
        spawn(
            target,
            """
            import sys, time
            time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
            print("won" if store.try_lock("hot", sys.argv[2], 30) else "lost", flush=True)
            store.close()
            """,
            f"owner-{n}",
            start_at,
            api=api,
        )
        for n in range(5)
    ]
    outcomes = sorted(finish(contender).strip() for contender in contenders)
    assert outcomes == ["lost"] * 4 + ["won"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform cannot fork")
def test_a_forked_child_leaves_the_parents_open_transaction_whole(
    target: StoreTarget, api: str, store: alkstore.Store
) -> None:
    """A store belongs to the process that opened it: in a child made by
    ``os.fork()`` it is closed, and nothing of it — not the finalizer of a
    transaction handle the child drops, not the child's exit — may end or
    undo the parent's transaction on the connection both processes hold."""
    parent = spawn(
        target,
        """
        import gc, os, sys
        store.queue("forked").enqueue("before the transaction")
        tx = store.begin_tx()
        for n in range(20_000):  # more than a page cache: written before the commit
            tx.enqueue_tx("forked", None, "x" * 400)
        tx.publish_tx("forked", "sent")  # a statement after the enqueues sends them
        child = os.fork()
        if child == 0:
            print(json.dumps({"closed in the child": store.closed}), flush=True)
            del tx
            gc.collect()  # the child drops its copy of the handle...
            sys.exit(0)  # ...and exits as a plain forked child does
        _, status = os.waitpid(child, 0)
        tx.enqueue_tx("forked", None, "after the fork")
        tx.commit()
        print(json.dumps({"child's exit status": status}), flush=True)
        store.close()
        """,
        api=api,
    )
    reported: dict[str, object] = {}
    for line in finish(parent, timeout=120).splitlines():
        reported.update(json.loads(line))
    assert reported == {"closed in the child": True, "child's exit status": 0}
    (forked,) = [stats for stats in store.inspect().queues() if stats.name == "forked"]
    assert forked.ready == 20_002
    assert [event.payload for event in store.stream("forked").read_since(0)] == ["sent"]
