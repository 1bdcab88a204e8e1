"""Real processes on one file: workers, crashes and cross-process wakes.

Children are separate interpreters started with ``subprocess`` and killed
with real signals; the parent checks what the file holds afterwards.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path

import alkstore
from alkstore import QueueOpts, Wake


def spawn(code: str, *arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill(child: subprocess.Popen[str]) -> None:
    """SIGKILL ``child``: no handler, no cleanup, as a crash or an OOM kill."""
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=10)


def wait_for_line(child: subprocess.Popen[str], expected: str) -> None:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if line != expected:
        child.kill()
        _, errors = child.communicate(timeout=10)
        raise AssertionError(f"child said {line!r}, not {expected!r}; stderr:\n{errors}")


PRODUCER = """
import sys, alkstore
store = alkstore.open(sys.argv[1])
for start in range(0, 2000, 50):
    with store.transaction() as tx:
        for n in range(start, start + 50):
            tx.enqueue_tx("work", None, n)
store.stream("control").publish("done")
store.close()
"""

WORKER = """
import json, sys, alkstore
store = alkstore.open(sys.argv[1])
queue = store.queue("work")
control = store.stream("control")
acked = []
producer_done = False
while True:
    jobs = queue.claim_batch(sys.argv[2], 16)
    for job in jobs:
        if job.ack():
            acked.append(job.payload)
    if jobs:
        continue
    if producer_done:
        break  # an empty claim after the producer finished: drained
    producer_done = bool(control.read_since(0))
    if not producer_done:
        queue.wait(0.2)
print(json.dumps(acked))
store.close()
"""


def test_four_workers_drain_2000_jobs_from_a_fifth_process_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    alkstore.open(path).close()
    workers = [spawn(WORKER, path, f"worker-{n}") for n in range(4)]
    producer = spawn(PRODUCER, path)
    _, errors = producer.communicate(timeout=120)
    assert producer.returncode == 0, errors
    acked: list[int] = []
    for worker in workers:
        out, errors = worker.communicate(timeout=120)
        assert worker.returncode == 0, errors
        acked.extend(json.loads(out))
    assert sorted(acked) == list(range(2000))
    store = alkstore.open(path)
    try:
        assert store.queue("work").claim_one("check") is None
    finally:
        store.close()


def test_a_worker_killed_mid_job_loses_it_only_until_the_visibility_timeout(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "app.db")
    store = alkstore.open(path)
    try:
        opts = QueueOpts(visibility_timeout_s=2.0)
        job_id = store.queue("work", opts).enqueue("important")
        worker = spawn(
            """
            import sys, time, alkstore
            store = alkstore.open(sys.argv[1])
            queue = store.queue("work", alkstore.QueueOpts(visibility_timeout_s=2.0))
            job = queue.claim_one("doomed")
            print("claimed" if job else "nothing", flush=True)
            time.sleep(60)
            """,
            path,
        )
        wait_for_line(worker, "claimed")
        kill(worker)
        queue = store.queue("work", opts)
        assert queue.claim_one("rescuer") is None  # still inside the dead worker's claim
        assert queue.wait(5)
        job = queue.claim_one("rescuer")
        assert job is not None
        assert (job.id, job.payload, job.attempts) == (job_id, "important", 2)
        assert job.ack()
    finally:
        store.close()


def test_a_writer_killed_inside_a_transaction_leaves_nothing_behind(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    alkstore.open(path).close()
    writer = spawn(
        """
        import sys, time, alkstore
        store = alkstore.open(sys.argv[1])
        tx = store.begin_tx()
        tx.execute("CREATE TABLE orders (id INTEGER)")
        tx.execute("INSERT INTO orders VALUES (1)")
        tx.enqueue_tx("emails", None, {"order": 1})
        tx.publish_tx("orders", {"order": 1})
        tx.notify_tx("orders", 1)
        print("inside", flush=True)
        time.sleep(60)
        """,
        path,
    )
    wait_for_line(writer, "inside")
    kill(writer)
    store = alkstore.open(path)
    try:
        assert store.queue("emails").claim_one("w") is None
        assert store.stream("orders").read_since(0) == []
        assert store.queue("emails").enqueue("the write lock is free again") > 0
        with store.transaction() as tx:
            assert tx.execute("SELECT name FROM sqlite_master WHERE name = 'orders'") == []
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_a_listener_in_another_process_is_woken_by_a_notify(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    store = alkstore.open(path)
    try:
        listener = spawn(
            """
            import sys, alkstore
            store = alkstore.open(sys.argv[1])
            with store.listen("orders") as wakes:
                print("listening", flush=True)
                print(wakes.recv(30), flush=True)
            store.close()
            """,
            path,
        )
        wait_for_line(listener, "listening")
        store.notify("orders", {"id": 1})
        out, errors = listener.communicate(timeout=30)
        assert listener.returncode == 0, errors
        assert out.strip() == repr(Wake("orders"))
    finally:
        store.close()


def test_concurrent_try_lock_across_processes_has_exactly_one_winner(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    alkstore.open(path).close()
    start_at = str(time.time() + 1.0)
    contenders = [
        spawn(
            """
            import sys, time, alkstore
            store = alkstore.open(sys.argv[1])
            time.sleep(max(0, float(sys.argv[3]) - time.time()))
            lock = store.try_lock("hot", sys.argv[2], 30)
            print("won" if lock else "lost", flush=True)
            store.close()
            """,
            path,
            f"owner-{n}",
            start_at,
        )
        for n in range(6)
    ]
    outcomes = []
    for contender in contenders:
        out, errors = contender.communicate(timeout=60)
        assert contender.returncode == 0, errors
        outcomes.append(out.strip())
    assert sorted(outcomes) == ["lost"] * 5 + ["won"]
