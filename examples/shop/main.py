"""The shop: a small app running every alkstore mechanism end to end, then stopping.

The web side places orders; each order commits together with its
confirmation-email job, an ``orders`` event and a webhook send. Two worker
processes send the emails (some fail once and are retried), deliver the
webhooks and make a sales report every second on a schedule; a projector
process keeps sales per customer from the event stream. When all is drained
the app stops the processes and checks the results against the orders table.

    python examples/shop/main.py [DSN]

With no DSN it runs on a fresh SQLite file in a temporary folder (or
``$ALKSTORE_DSN``); give ``postgresql://user@host/db`` to run the same code on
PostgreSQL. Run again on the same store and it carries on from there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from orders import (
    EMAIL_QUEUE,
    EMAILS,
    ORDERS_STREAM,
    PROJECTION,
    REPORTS,
    PaymentDeclined,
    create_tables,
    place_order,
)

import alkstore

HERE = Path(__file__).parent
CUSTOMERS = ("ada", "grace", "edsger", "barbara", "alan", "margaret")
ORDER_COUNT = 24
DRAIN_TIMEOUT_S = 20.0


def start(role: str, dsn: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "processes.py"), role, dsn],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise SystemExit(f"the {role} process did not start")
    return process


def stop(process: subprocess.Popen[str]) -> dict[str, object]:
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=30)
    report: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return report


def place_orders(store: alkstore.Store, run: str) -> list[str]:
    placed = []
    for n in range(ORDER_COUNT):
        order_id = f"{run}-{n:02d}"
        place_order(store, order_id, CUSTOMERS[n % len(CUSTOMERS)], 1_500 + 731 * n)
        placed.append(order_id)
    try:
        place_order(store, f"{run}-xx", "mallory", 99_900)
    except PaymentDeclined as exc:
        print(f"order {run}-xx rolled back ({exc}): no row, no job, no event, no webhook")
    return placed


def drained(store: alkstore.Store) -> bool:
    """True once no job waits or runs, the projection caught up and a report exists."""
    view = store.inspect()
    busy = [q for q in view.queues() if q.ready or q.scheduled or q.processing]
    behind = [c for s in view.streams() for c in s.consumers if c.lag]
    return not busy and not behind and count(store, "SELECT COUNT(*) FROM shop_reports") > 0


def count(store: alkstore.Store, sql: str, params: Mapping[str, object] | None = None) -> int:
    with store.transaction() as tx:
        return int(tx.execute(sql, params or {})[0][0])


def sales_by_customer(store: alkstore.Store, sql: str) -> dict[str, tuple[int, int]]:
    with store.transaction() as tx:
        return {row[0]: (int(row[1]), int(row[2])) for row in tx.execute(sql)}


def check(store: alkstore.Store, run: str, placed: list[str]) -> list[str]:
    """Compare what the background processes did with the orders table."""
    this_run = {"run": f"{run}-%"}
    emailed = count(store, "SELECT COUNT(*) FROM shop_emails WHERE order_id LIKE :run", this_run)
    retried = count(
        store,
        "SELECT COUNT(*) FROM shop_emails WHERE order_id LIKE :run AND attempts > 1",
        this_run,
    )
    hooked = count(store, "SELECT COUNT(*) FROM shop_webhooks WHERE order_id LIKE :run", this_run)
    projected = sales_by_customer(store, "SELECT customer, orders, total_cents FROM shop_sales")
    truth = sales_by_customer(
        store, "SELECT customer, COUNT(*), SUM(total_cents) FROM shop_orders GROUP BY customer"
    )
    ghosts = count(store, "SELECT COUNT(*) FROM shop_orders WHERE customer = 'mallory'")
    reports = count(store, "SELECT COUNT(*) FROM shop_reports")

    print(f"emails: {emailed} confirmations sent, {retried} of them after a retry")
    print(f"webhooks: {hooked} delivered through the outbox")
    total = sum(cents for _, cents in projected.values()) / 100
    agrees = "matches" if projected == truth else "DIFFERS FROM"
    print(f"projection: {len(projected)} customers, {total:,.2f} in sales, {agrees} the orders")
    print(f"reports: {reports} made by the '@every 1s' schedule")
    checks = {
        "a confirmation for every order": emailed == len(placed),
        "a webhook for every order": hooked == len(placed),
        "the projection equals the orders table": projected == truth,
        "the rolled-back order left nothing": ghosts == 0,
        "the schedule fired": reports > 0,
    }
    return [name for name, passed in checks.items() if not passed]


def print_state(store: alkstore.Store) -> None:
    view = store.inspect()
    for q in view.queues():
        print(
            f"  queue {q.name}: {q.ready} ready, {q.scheduled} waiting to retry, "
            f"{q.processing} processing, {q.dead} dead"
        )
    for s in view.streams():
        lags = ", ".join(f"{c.name} at {c.offset} (lag {c.lag})" for c in s.consumers)
        print(f"  stream {s.name}: head {s.head}; {lags or 'no consumer offset saved yet'}")
    if not view.queues():
        print("  every queue is empty")


def main(dsn: str) -> int:
    started = time.monotonic()
    run = uuid.uuid4().hex[:6]
    with alkstore.open(dsn) as store:
        print(f"shop on {store!r}, run {run}")
        create_tables(store)
        store.queue(EMAILS, EMAIL_QUEUE)  # the opts every email job is stamped with
        store.schedule("sales-report", "@every 1s", REPORTS, {"kind": "sales"})
        workers = [start("worker", dsn) for _ in range(2)]
        projector = start("projector", dsn)
        print(f"started worker processes {[w.pid for w in workers]}, projector {projector.pid}")

        placed = place_orders(store, run)
        print(f"placed {len(placed)} orders, each with its job, event and webhook in one commit")
        print("while the processes work:")
        print_state(store)

        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not drained(store) and time.monotonic() < deadline:
            time.sleep(0.1)
        reports = [stop(process) for process in [*workers, projector]]
        for report in reports:
            print(f"  {report['role']} {report['pid']}: " + ", ".join(
                f"{key} {value}" for key, value in report.items() if key not in ("role", "pid")
            ))  # fmt: skip
        print("after they stopped:")
        print_state(store)
        problems = check(store, run, placed)
        offset = store.stream(ORDERS_STREAM).get_offset(PROJECTION)
        print(f"consumer {PROJECTION!r} saved offset {offset}")
    for problem in problems:
        print(f"FAILED: {problem}")
    elapsed = time.monotonic() - started
    print(f"finished in {elapsed:.1f} s — {'all as expected' if not problems else 'FAILED'}")
    return 0 if not problems else 1


if __name__ == "__main__":
    given = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ALKSTORE_DSN")
    if given:
        sys.exit(main(given))
    with tempfile.TemporaryDirectory() as folder:
        sys.exit(main(str(Path(folder) / "shop.db")))
