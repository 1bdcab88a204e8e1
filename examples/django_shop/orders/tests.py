"""The shop's tests, run by Django's own runner: ``python manage.py test``.

They are ``TransactionTestCase``s: a ``TestCase`` wraps each test in a
transaction that never commits, and commit-atomicity is what is tested here.
alkstore's side is checked through a store of the tests' own on the same
database, as another process would see it. Django empties its own tables
after each test, never alkstore's: each test starts by draining the queue,
and reads the stream from where it stood.
"""

# Django's tests are unittest's: self.assert*() is the idiom here, not pytest's assert.
# ruff: noqa: PT009, PT027

from __future__ import annotations

import io
import json
from typing import Any
from unittest import skipUnless

from django.core.management import call_command
from django.db import connection, transaction
from django.test import TransactionTestCase

import alkstore

from .models import Order
from .store import CONFIRMATIONS, ORDERS_STREAM, close_stores, get_store, store_target


class Abandoned(Exception):
    """Raised inside a nested ``atomic()`` to roll back its savepoint."""


class ShopTestCase(TransactionTestCase):
    """Opens the observer store on the test database, and starts each test with an empty queue."""

    observer: alkstore.Store

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # The test database exists by now, and settings_dict names it.
        cls.observer = alkstore.open(store_target(connection.settings_dict))
        cls.addClassCleanup(cls.observer.close)

    def setUp(self) -> None:
        queue = self.observer.queue(CONFIRMATIONS)
        while jobs := queue.claim_batch("test-cleanup", 100):
            queue.ack_batch([job.id for job in jobs], "test-cleanup")
        self.stream_head = self.head()

    def head(self) -> int:
        streams = {stats.name: stats for stats in self.observer.inspect().streams()}
        return streams[ORDERS_STREAM].head if ORDERS_STREAM in streams else 0

    def jobs(self) -> list[alkstore.JobInfo]:
        """Every job of the confirmations queue, in any state."""
        return self.observer.inspect().jobs(CONFIRMATIONS)

    def events(self) -> list[Any]:
        """The payloads of the events published since the test began."""
        stream = self.observer.stream(ORDERS_STREAM)
        return [event.payload for event in stream.read_since(self.stream_head)]

    def place(self, customer: str, total: object) -> tuple[int, dict[str, Any]]:
        response = self.client.post(
            "/orders", json.dumps({"customer": customer, "total": total}), "application/json"
        )
        answer: dict[str, Any] = response.json()
        return response.status_code, answer


class PlacingOrders(ShopTestCase):
    def test_the_order_commits_with_its_job_and_its_event(self) -> None:
        status, answer = self.place("ada", "12.50")

        self.assertEqual(status, 201, answer)
        order = Order.objects.get()
        self.assertEqual(
            (order.customer, str(order.total), order.confirmed), ("ada", "12.50", False)
        )
        [job] = self.jobs()
        self.assertEqual(
            (job.id, job.state, job.payload), (answer["job"], "pending", {"order_id": order.pk})
        )
        self.assertEqual(self.events(), [{"event": "placed", "order_id": order.pk}])

    def test_a_declined_order_leaves_neither_row_nor_job_nor_event(self) -> None:
        status, answer = self.place("mallory", -5)

        self.assertEqual(status, 402, answer)
        self.assertIn("declined", answer["error"])
        self.assertFalse(Order.objects.exists())
        self.assertEqual(self.jobs(), [])
        self.assertEqual(self.events(), [])

    def test_a_malformed_request_is_refused_before_anything_is_written(self) -> None:
        for body in (
            "not json",
            json.dumps({"customer": "ada"}),
            json.dumps({"customer": "", "total": 1}),
        ):
            with self.subTest(body=body):
                response = self.client.post("/orders", body, "application/json")
                self.assertEqual(response.status_code, 400)
        self.assertFalse(Order.objects.exists())
        self.assertEqual(self.jobs(), [])

    def test_an_order_reads_back_by_id(self) -> None:
        _, answer = self.place("ada", 3)

        response = self.client.get(f"/orders/{answer['order']['id']}")
        self.assertEqual(response.status_code, 200)
        self.assertEqual(response.json()["order"]["total"], "3.00")
        self.assertEqual(self.client.get("/orders/999999").status_code, 404)


class AdoptingDjangosTransaction(ShopTestCase):
    def test_a_rolled_back_savepoint_drops_exactly_what_was_written_inside_it(self) -> None:
        store = get_store()
        with transaction.atomic():
            tx = store.adopt_tx(connection)  # before any ORM write in this transaction
            tx.enqueue_tx(CONFIRMATIONS, None, {"order_id": "outer-before"})
            kept = Order.objects.create(customer="ada", total=1)
            try:
                with transaction.atomic():  # a savepoint
                    Order.objects.create(customer="bob", total=2)
                    inner = store.adopt_tx(connection)
                    inner.enqueue_tx(CONFIRMATIONS, None, {"order_id": "inner"})
                    inner.publish_tx(ORDERS_STREAM, {"event": "inner"})
                    raise Abandoned
            except Abandoned:
                pass
            tx.enqueue_tx(CONFIRMATIONS, None, {"order_id": "outer-after"})
            # Nothing is visible to others before Django commits.
            self.assertEqual(self.jobs(), [])

        self.assertEqual(list(Order.objects.all()), [kept])
        payloads = [job.payload for job in self.jobs()]
        self.assertEqual(payloads, [{"order_id": "outer-before"}, {"order_id": "outer-after"}])
        self.assertEqual(self.events(), [])

    def test_an_exception_out_of_the_outer_block_rolls_back_everything(self) -> None:
        store = get_store()
        try:
            with transaction.atomic():
                Order.objects.create(customer="ada", total=1)
                store.adopt_tx(connection).enqueue_tx(CONFIRMATIONS, None, {"order_id": 1})
                raise Abandoned
        except Abandoned:
            pass

        self.assertFalse(Order.objects.exists())
        self.assertEqual(self.jobs(), [])

    def test_django_owns_the_transaction(self) -> None:
        store = get_store()
        with self.assertRaises(ValueError):  # autocommit: each statement would commit alone
            store.adopt_tx(connection)
        with transaction.atomic():
            tx = store.adopt_tx(connection)
            with self.assertRaises(RuntimeError):
                tx.commit()
            with self.assertRaises(RuntimeError):
                tx.rollback()
            tx.enqueue_tx(CONFIRMATIONS, None, {"order_id": 7})
        self.assertEqual([job.payload for job in self.jobs()], [{"order_id": 7}])

    @skipUnless(
        connection.vendor == "sqlite", "on PostgreSQL the store opens on its own connections"
    )
    def test_on_sqlite_the_store_must_be_opened_before_atomic(self) -> None:
        close_stores()
        with transaction.atomic(), self.assertRaises(RuntimeError):
            get_store()  # it would wait for the write lock this transaction holds
        self.assertIsNotNone(get_store())


class RunningTheWorker(ShopTestCase):
    def run_worker(self, *arguments: str) -> str:
        out = io.StringIO()
        call_command("run_worker", *arguments, stdout=out)
        return out.getvalue()

    def test_the_worker_confirms_every_order_and_acks_its_job(self) -> None:
        placed = [
            self.place(customer, 10 + n)[1]["order"]["id"] for n, customer in enumerate("abcd")
        ]

        output = self.run_worker("--until-idle", "--concurrency", "2")

        self.assertIn("worker stopped: 4 confirmed, 0 failed", output)
        self.assertEqual(list(Order.objects.filter(confirmed=False)), [])
        self.assertEqual(self.jobs(), [])  # acked jobs are deleted
        confirmed = [e["order_id"] for e in self.events() if e["event"] == "confirmed"]
        self.assertCountEqual(confirmed, placed)

    def test_max_jobs_stops_the_worker_after_that_many(self) -> None:
        for n in range(3):
            self.place("ada", 10 + n)

        output = self.run_worker("--max-jobs", "2")

        self.assertIn("worker stopped: 2 confirmed", output)
        self.assertEqual(Order.objects.filter(confirmed=True).count(), 2)
        [left] = self.jobs()
        self.assertEqual(left.state, "pending")
        unconfirmed = Order.objects.get(confirmed=False)
        self.assertEqual(left.payload, {"order_id": unconfirmed.pk})

    def test_an_idle_worker_stops_at_once(self) -> None:
        output = self.run_worker("--until-idle")

        self.assertIn("worker stopped: 0 confirmed", output)
