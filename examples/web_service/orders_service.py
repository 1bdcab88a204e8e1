"""A small web service on alkstore's asyncio API: orders in, confirmations out.

``POST /orders`` writes the order row and enqueues its confirmation job in one
transaction: both commit, or (a declined card) neither does. A worker on the
same store runs an async handler for each job, which marks the order
confirmed. ``GET /orders/{id}`` reads an order's state, ``GET /stats`` the
queue's.

    ALKSTORE_TARGET=orders.db uvicorn orders_service:app            # web + worker, one process
    ALKSTORE_TARGET=postgresql://app@db/app uvicorn orders_service:app
    ALKSTORE_WORKER=off uvicorn orders_service:app                  # web only ...
    python orders_service.py worker                                 # ... and workers apart

The target is ``$ALKSTORE_TARGET`` (default ``orders.db``, a SQLite file) or,
for the worker command, its argument. See README.md beside this file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import alkstore

CONFIRMATIONS = "confirmations"
CONFIRMATION_QUEUE = alkstore.QueueOpts(visibility_timeout_s=60, max_attempts=5, backoff_base_s=1)
CARD_LIMIT_CENTS = 1_000_000
"""Orders above this are declined by the (pretend) payment provider."""

TABLE = """CREATE TABLE IF NOT EXISTS service_orders (
    id TEXT PRIMARY KEY,
    customer TEXT NOT NULL,
    total_cents INTEGER NOT NULL,
    status TEXT NOT NULL,
    placed_at DOUBLE PRECISION NOT NULL,
    confirmed_at DOUBLE PRECISION)"""


# Business SQL on either database


@dataclass(frozen=True)
class Placeholders:
    """The one difference this service's SQL has between SQLite and PostgreSQL.

    ``tx.execute`` takes the driver's own placeholders today: ``?`` for
    sqlite3, ``%s`` for psycopg. The SQL below is written with ``?`` and
    adapted once per statement; when alkstore's portable ``:name``
    parameters arrive this class goes away.
    """

    marker: str

    @classmethod
    def of(cls, connection: object) -> Placeholders:
        """The placeholders of the driver ``connection`` belongs to."""
        driver = type(connection).__module__.split(".", maxsplit=1)[0]
        return cls("%s" if driver == "psycopg" else "?")

    def __call__(self, sql: str) -> str:
        return sql.replace("?", self.marker)


async def prepare(store: alkstore.AsyncStore) -> Placeholders:
    """Make the business table if it is not there, declare the queue's options (which
    ``enqueue_tx`` stamps on each job), and learn the driver's placeholders."""
    store.queue(CONFIRMATIONS, CONFIRMATION_QUEUE)
    async with store.transaction() as tx:
        await tx.execute(TABLE)
        return Placeholders.of(tx.connection)


class Declined(Exception):
    """The payment provider refused the order: it must leave no trace."""


def charge(customer: str, total_cents: int) -> None:
    if total_cents > CARD_LIMIT_CENTS:
        raise Declined(f"card of {customer} declined for {total_cents / 100:.2f}")


async def place_order(
    store: alkstore.AsyncStore, sql: Placeholders, customer: str, total_cents: int
) -> tuple[str, int]:
    """Commit the order row and its confirmation job together; (order id, job id)."""
    order_id = uuid.uuid4().hex
    async with store.transaction() as tx:
        await tx.execute(
            sql("INSERT INTO service_orders (id, customer, total_cents, status, placed_at) "
                "VALUES (?, ?, ?, 'placed', ?)"),
            (order_id, customer, total_cents, time.time()),
        )  # fmt: skip
        job_id = await tx.enqueue_tx(CONFIRMATIONS, None, {"order": order_id})
        charge(customer, total_cents)  # raising here rolls back the row and the job
    return order_id, job_id


async def read_order(
    store: alkstore.AsyncStore, sql: Placeholders, order_id: str
) -> dict[str, Any] | None:
    async with store.transaction() as tx:
        rows = await tx.execute(
            sql("SELECT customer, total_cents, status, confirmed_at "
                "FROM service_orders WHERE id = ?"),
            (order_id,),
        )  # fmt: skip
    if not rows:
        return None
    customer, total_cents, status, confirmed_at = rows[0]
    return {
        "id": order_id,
        "customer": customer,
        "total_cents": total_cents,
        "status": status,
        "confirmed_at": confirmed_at,
    }


# The worker's side


def confirmation_handler(
    store: alkstore.AsyncStore, sql: Placeholders
) -> Callable[[alkstore.AsyncJob], Awaitable[None]]:
    """The async handler the worker runs for each confirmation job."""

    async def send_confirmation(job: alkstore.AsyncJob) -> None:
        # A real service would await its mail API here. Returning acks the
        # job; raising retries it on the queue's backoff curve. Delivery is at
        # least once, so the update is written to be harmless when repeated.
        async with store.transaction() as tx:
            await tx.execute(
                sql("UPDATE service_orders SET status = 'confirmed', confirmed_at = ? "
                    "WHERE id = ? AND status = 'placed'"),
                (time.time(), job.payload["order"]),
            )  # fmt: skip

    return send_confirmation


def make_worker(store: alkstore.AsyncStore, sql: Placeholders) -> alkstore.Worker:
    return alkstore.Worker(
        store,
        store.queue(CONFIRMATIONS, CONFIRMATION_QUEUE),
        confirmation_handler(store, sql),
        concurrency=8,
        grace_s=10,
    )


# The web side


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Open the store for the app's life; run the worker beside it unless told not to."""
    async with alkstore.open_async(app.state.target) as store:
        sql = await prepare(store)
        app.state.store, app.state.sql = store, sql
        if not app.state.run_worker:
            yield
            return
        stop = asyncio.Event()
        working = asyncio.create_task(make_worker(store, sql).run_async(stop))
        try:
            yield
        finally:
            stop.set()  # unstarted jobs are released, running ones get grace_s
            await working


async def post_order(request: Request) -> JSONResponse:
    body = await request.json()
    customer, total_cents = body.get("customer"), body.get("total_cents")
    if not isinstance(customer, str) or not customer or type(total_cents) is not int:
        return JSONResponse({"error": "customer (text) and total_cents (integer)"}, 422)
    try:
        order_id, job_id = await place_order(
            request.app.state.store, request.app.state.sql, customer, total_cents
        )
    except Declined as exc:
        return JSONResponse({"error": str(exc)}, 402)
    return JSONResponse({"id": order_id, "job": job_id, "status": "placed"}, 201)


async def get_order(request: Request) -> JSONResponse:
    order = await read_order(
        request.app.state.store, request.app.state.sql, request.path_params["order_id"]
    )
    if order is None:
        return JSONResponse({"error": "no such order"}, 404)
    return JSONResponse(order)


async def get_stats(request: Request) -> JSONResponse:
    store: alkstore.AsyncStore = request.app.state.store
    queues = {stats.name: stats for stats in await store.inspect().queues()}
    stats = queues.get(CONFIRMATIONS)
    return JSONResponse(
        {
            "queue": CONFIRMATIONS,
            "ready": stats.ready if stats else 0,
            "scheduled": stats.scheduled if stats else 0,
            "processing": stats.processing if stats else 0,
            "dead": stats.dead if stats else 0,
        }
    )


def default_target() -> str:
    return os.environ.get("ALKSTORE_TARGET", "orders.db")


def create_app(target: str | None = None, *, run_worker: bool | None = None) -> Starlette:
    """The service on ``target`` (default ``$ALKSTORE_TARGET``, else ``orders.db``).

    ``run_worker`` (default: ``$ALKSTORE_WORKER`` is not ``off``) runs the
    worker inside the web process.
    """
    app = Starlette(
        routes=[
            Route("/orders", post_order, methods=["POST"]),
            Route("/orders/{order_id}", get_order, methods=["GET"]),
            Route("/stats", get_stats, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.target = target or default_target()
    app.state.run_worker = (
        os.environ.get("ALKSTORE_WORKER", "on") != "off" if run_worker is None else run_worker
    )
    return app


app = create_app()


# The worker on its own: python orders_service.py worker [TARGET]


async def work(target: str) -> None:
    """Run the worker until SIGTERM or SIGINT, then shut it down gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with alkstore.open_async(target) as store:
        worker = make_worker(store, await prepare(store))
        print(f"worker {worker.worker_id} on {store.location}", flush=True)
        await worker.run_async(stop)
        print(f"worker stopped: {worker.stats()}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        raise SystemExit(f"usage: {sys.argv[0]} worker [TARGET]")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(work(sys.argv[2] if len(sys.argv) > 2 else default_target()))
