"""The shop's business side: its tables, placing orders, and what each job does.

Everything alkstore writes beside a business row (the confirmation job, the
event, the webhook send) goes through the same transaction as that row, so
an order either exists with all three or, rolled back, with none.
"""

from __future__ import annotations

import time
import uuid

import alkstore
from alkstore import EnqueueOpts, Job, QueueOpts, StreamEvent, TxHandle

EMAILS = "emails"
EMAIL_QUEUE = QueueOpts(visibility_timeout_s=30, max_attempts=5, backoff_base_s=0.2)
"""Confirmation emails: a failed send is retried after 0.1-0.2 s, then longer."""
ORDERS_STREAM = "orders"
WEBHOOKS = "webhooks"
REPORTS = "reports"
PROJECTION = "sales-projection"

TABLES = (
    """CREATE TABLE IF NOT EXISTS shop_orders (
        id TEXT PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL,
        placed_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS shop_emails (
        order_id TEXT PRIMARY KEY, attempts INTEGER NOT NULL, sent_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS shop_webhooks (
        order_id TEXT PRIMARY KEY, delivered_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS shop_sales (
        customer TEXT PRIMARY KEY, orders INTEGER NOT NULL, total_cents INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS shop_reports (
        id TEXT PRIMARY KEY, made_at DOUBLE PRECISION NOT NULL, customers INTEGER NOT NULL,
        total_cents INTEGER NOT NULL)""",
)


class PaymentDeclined(Exception):
    """The card was declined: the order must leave no trace."""


def charge(customer: str, total_cents: int) -> None:
    if customer == "mallory":
        raise PaymentDeclined(f"card of {customer} declined for {total_cents / 100:.2f}")


def create_tables(store: alkstore.Store) -> None:
    with store.transaction() as tx:
        for statement in TABLES:
            tx.execute(statement)


def place_order(store: alkstore.Store, order_id: str, customer: str, total_cents: int) -> None:
    """Commit the order with its confirmation job, its event and its webhook send."""
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO shop_orders (id, customer, total_cents, placed_at) "
            "VALUES (:id, :customer, :total_cents, :placed_at)",
            {
                "id": order_id,
                "customer": customer,
                "total_cents": total_cents,
                "placed_at": time.time(),
            },
        )
        order = {"id": order_id, "customer": customer, "total_cents": total_cents}
        tx.enqueue_tx(EMAILS, EnqueueOpts(priority=1 if total_cents > 10_000 else 0), order)
        tx.publish_with_key_tx(ORDERS_STREAM, customer, order)
        tx.outbox_enqueue_tx(WEBHOOKS, None, {"event": "order.placed", "order": order_id})
        charge(customer, total_cents)  # raising here rolls back all four writes


# Handlers, run by the worker processes


def send_confirmation(store: alkstore.Store, job: Job) -> None:
    """Email the customer. The mail server turns every seventh order away once."""
    order = job.payload
    if order["id"].endswith("7") and job.attempts == 1:
        raise ConnectionError("mail server busy, try later")
    with store.transaction() as tx:
        # At-least-once delivery: a repeat of an order already sent changes nothing.
        tx.execute(
            "INSERT INTO shop_emails (order_id, attempts, sent_at) "
            "VALUES (:order_id, :attempts, :sent_at) ON CONFLICT (order_id) DO NOTHING",
            {"order_id": order["id"], "attempts": job.attempts, "sent_at": time.time()},
        )


def deliver_webhook(store: alkstore.Store, job: Job) -> None:
    """Tell the partner system; recorded here instead of an HTTP call."""
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO shop_webhooks (order_id, delivered_at) VALUES (:order_id, :at) "
            "ON CONFLICT (order_id) DO NOTHING",
            {"order_id": job.payload["order"], "at": time.time()},
        )


def make_report(store: alkstore.Store, job: Job) -> None:
    """The scheduled sales report: a snapshot of the projection."""
    with store.transaction() as tx:
        customers, total = tx.execute(
            "SELECT COUNT(*), COALESCE(SUM(total_cents), 0) FROM shop_sales"
        )[0]
        tx.execute(
            "INSERT INTO shop_reports (id, made_at, customers, total_cents) "
            "VALUES (:id, :made_at, :customers, :total_cents)",
            {
                "id": uuid.uuid4().hex,
                "made_at": time.time(),
                "customers": customers,
                "total_cents": total,
            },
        )


def project_sale(event: StreamEvent, tx: TxHandle) -> None:
    """Keep sales per customer; runs in the transaction that saves the consumer's offset."""
    order = event.payload
    tx.execute(
        "INSERT INTO shop_sales (customer, orders, total_cents) VALUES (:customer, 1, :total) "
        "ON CONFLICT (customer) DO UPDATE SET orders = shop_sales.orders + 1, "
        "total_cents = shop_sales.total_cents + excluded.total_cents",
        {"customer": order["customer"], "total": order["total_cents"]},
    )
