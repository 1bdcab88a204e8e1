"""A tour of alkstore on the embedded SQLite default, finishing by itself.

Orders are committed together with a confirmation job, an event and an
outbox send; one order is rolled back and leaves nothing behind. Worker
threads drain the jobs (one fails once and is retried), a stream consumer
keeps a projection, the outbox delivers, and a schedule fires under a
leader-elected runner.

    python examples/quickstart.py [TARGET]     # default: a file in a temporary folder
    python examples/quickstart.py postgresql://user@host/db   # the same code, on PostgreSQL
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import alkstore


def place_orders(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total REAL)")
    for order_id, total in [(1, 25.0), (2, 99.5), (3, 12.0)]:
        with store.transaction() as tx:
            tx.execute(
                "INSERT INTO orders (id, total) VALUES (:id, :total)",
                {"id": order_id, "total": total},
            )
            tx.enqueue_tx("emails", None, {"order": order_id})
            tx.publish_tx("orders", {"order": order_id, "total": total})
            tx.outbox_enqueue_tx("webhooks", None, {"order": order_id})
    try:
        with store.transaction() as tx:
            tx.execute(
                "INSERT INTO orders (id, total) VALUES (:id, :total)", {"id": 4, "total": -1.0}
            )
            tx.enqueue_tx("emails", None, {"order": 4})
            raise ValueError("a negative total is refused")
    except ValueError as exc:
        print(f"order 4 rolled back ({exc}): no job, no event, no send")


def run_worker(
    store: alkstore.Store, worker_id: str, sent: list[int], stop: threading.Event
) -> None:
    queue = store.queue("emails")
    while not stop.is_set():
        job = queue.claim_one(worker_id)
        if job is None:
            queue.wait(0.1)
            continue
        if job.payload["order"] == 2 and job.attempts == 1:
            job.retry(ConnectionError("mail server busy"), delay_s=0)
            print(f"{worker_id}: order 2 failed on attempt 1, retrying")
            continue
        sent.append(job.payload["order"])
        job.ack()
        print(f"{worker_id}: confirmation for order {job.payload['order']} sent")


def main(target: str) -> None:
    store = alkstore.open(target)
    print(f"opened {store!r}")
    place_orders(store)

    stop = threading.Event()
    sent: list[int] = []
    workers = [
        threading.Thread(target=run_worker, args=(store, f"worker-{n}", sent, stop))
        for n in range(2)
    ]
    for worker in workers:
        worker.start()

    revenue = 0.0
    with store.stream("orders").subscribe("revenue") as events:
        while (event := events.recv(timeout=0.2)) is not None:
            revenue += event.payload["total"]
        events.save_offset()
    saved = store.stream("orders").get_offset("revenue")
    print(f"projection: revenue {revenue:.2f}, consumer 'revenue' saved offset {saved}")

    delivered: list[dict[str, int]] = []
    while store.outbox("webhooks").run_once("outbox-1", delivered.append):
        pass
    print(f"outbox delivered {len(delivered)} webhooks")

    store.schedule("heartbeat", "@every 1s", "maintenance", {"task": "heartbeat"})
    runner_stop = threading.Event()
    runner = threading.Thread(target=store.run_schedules, args=(runner_stop,))
    runner.start()
    time.sleep(1.3)
    runner_stop.set()
    runner.join()
    fired = store.queue("maintenance").claim_batch("janitor", 10)
    print(f"schedule 'heartbeat' fired {len(fired)} time(s) in 1.3 s")

    deadline = time.monotonic() + 5
    while len(sent) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for worker in workers:
        worker.join()
    print(f"confirmations sent for orders {sorted(sent)}")
    store.close()
    ok = sorted(sent) == [1, 2, 3] and len(delivered) == 3 and revenue == 136.5 and len(fired) == 1
    print("all as expected" if ok else "something went wrong")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(str(Path(folder) / "shop.db"))
