"""A small web service on alkstore's asyncio API: orders in, confirmations out.

``POST /orders`` writes the order row with SQLAlchemy's ``AsyncSession`` and
enqueues its confirmation job in the session's transaction (``await
store.adopt_tx(session)``): both commit, or (a declined card) neither does. A
worker on the same store runs an async handler for each job, which marks the
order confirmed through SQLAlchemy. ``GET /orders/{id}`` reads an order's
state, ``GET /stats`` the queue's.

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
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Double, Text, update
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import alkstore

CONFIRMATIONS = "confirmations"
CONFIRMATION_QUEUE = alkstore.QueueOpts(visibility_timeout_s=60, max_attempts=5, backoff_base_s=1)
CARD_LIMIT_CENTS = 1_000_000
"""Orders above this are declined by the (pretend) payment provider."""

ALKSTORE_OPTIONS = frozenset(
    {"schema", "pool_min_size", "pool_max_size", "connect_timeout_s", "scheduler_lease_s"}
)
"""alkstore's own DSN query parameters on PostgreSQL: libpq knows none of them."""

Sessions = async_sessionmaker[AsyncSession]


# The business table, in SQLAlchemy


class Base(DeclarativeBase):
    pass


class ServiceOrder(Base):
    __tablename__ = "service_orders"

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    customer: Mapped[str] = mapped_column(Text)
    total_cents: Mapped[int]
    status: Mapped[str] = mapped_column(Text)
    placed_at: Mapped[float] = mapped_column(Double)
    confirmed_at: Mapped[float | None] = mapped_column(Double)


def sqlalchemy_url(target: str) -> URL:
    """SQLAlchemy's URL for alkstore's ``target``: the same database, async drivers.

    ``adopt_tx`` writes alkstore's rows through SQLAlchemy's connection, so
    both must reach the same storage (else it raises ``ValueError``). A
    SQLite path becomes ``sqlite+aiosqlite:////absolute/path``; a PostgreSQL
    DSN gets psycopg (async under ``create_async_engine``) and loses alkstore's
    own options (``schema=`` is where alkstore's tables go, not libpq's).
    """
    if target.startswith(("postgresql://", "postgres://")):
        url = make_url(target).set(drivername="postgresql+psycopg")
        return url.difference_update_query(ALKSTORE_OPTIONS)
    if target.startswith("sqlite:"):
        return make_url(target).set(drivername="sqlite+aiosqlite")
    return URL.create("sqlite+aiosqlite", database=str(Path(target).resolve()))


@contextlib.asynccontextmanager
async def opened(target: str) -> AsyncIterator[tuple[alkstore.AsyncStore, Sessions]]:
    """The store and SQLAlchemy's sessions on ``target``, for as long as the block runs.

    Makes the business table if it is not there, and declares the queue's
    options (which ``enqueue_tx`` stamps on each job).
    """
    engine = create_async_engine(sqlalchemy_url(target))
    try:
        async with alkstore.open_async(target) as store:
            store.queue(CONFIRMATIONS, CONFIRMATION_QUEUE)
            async with engine.begin() as connection:
                await connection.run_sync(Base.metadata.create_all)
            yield store, async_sessionmaker(engine, expire_on_commit=False)
    finally:
        await engine.dispose()


class Declined(Exception):
    """The payment provider refused the order: it must leave no trace."""


def charge(customer: str, total_cents: int) -> None:
    if total_cents > CARD_LIMIT_CENTS:
        raise Declined(f"card of {customer} declined for {total_cents / 100:.2f}")


async def place_order(
    store: alkstore.AsyncStore, sessions: Sessions, customer: str, total_cents: int
) -> tuple[str, int]:
    """Commit the order row and its confirmation job together; (order id, job id)."""
    order_id = uuid.uuid4().hex
    async with sessions.begin() as session:  # commits when the block ends, rolls back on raise
        session.add(
            ServiceOrder(id=order_id, customer=customer, total_cents=total_cents,
                         status="placed", placed_at=time.time())
        )  # fmt: skip
        await session.flush()  # the INSERT, now, in the session's transaction
        tx = await store.adopt_tx(session)  # alkstore writes in that transaction too
        job_id = await tx.enqueue_tx(CONFIRMATIONS, None, {"order": order_id})
        charge(customer, total_cents)  # raising here rolls back the row and the job
    return order_id, job_id


async def read_order(sessions: Sessions, order_id: str) -> dict[str, Any] | None:
    async with sessions() as session:
        order = await session.get(ServiceOrder, order_id)
    if order is None:
        return None
    return {
        "id": order_id,
        "customer": order.customer,
        "total_cents": order.total_cents,
        "status": order.status,
        "confirmed_at": order.confirmed_at,
    }


# The worker's side


def confirmation_handler(sessions: Sessions) -> Callable[[alkstore.AsyncJob], Awaitable[None]]:
    """The async handler the worker runs for each confirmation job."""

    async def send_confirmation(job: alkstore.AsyncJob) -> None:
        # A real service would await its mail API here. Returning acks the
        # job; raising retries it on the queue's backoff curve. Delivery is at
        # least once, so the update is written to be harmless when repeated.
        # One UPDATE, not a read then a write: on SQLite a transaction that
        # begins with a read may fail to write if another writer got in between.
        async with sessions.begin() as session:
            await session.execute(
                update(ServiceOrder)
                .where(ServiceOrder.id == job.payload["order"], ServiceOrder.status == "placed")
                .values(status="confirmed", confirmed_at=time.time())
            )

    return send_confirmation


def make_worker(store: alkstore.AsyncStore, sessions: Sessions) -> alkstore.Worker:
    return alkstore.Worker(
        store,
        store.queue(CONFIRMATIONS, CONFIRMATION_QUEUE),
        confirmation_handler(sessions),
        concurrency=8,
        grace_s=10,
    )


# The web side


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Open the store for the app's life; run the worker beside it unless told not to."""
    async with opened(app.state.target) as (store, sessions):
        app.state.store, app.state.sessions = store, sessions
        if not app.state.run_worker:
            yield
            return
        stop = asyncio.Event()
        working = asyncio.create_task(make_worker(store, sessions).run_async(stop))
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
            request.app.state.store, request.app.state.sessions, customer, total_cents
        )
    except Declined as exc:
        return JSONResponse({"error": str(exc)}, 402)
    return JSONResponse({"id": order_id, "job": job_id, "status": "placed"}, 201)


async def get_order(request: Request) -> JSONResponse:
    order = await read_order(request.app.state.sessions, request.path_params["order_id"])
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
    async with opened(target) as (store, sessions):
        worker = make_worker(store, sessions)
        print(f"worker {worker.worker_id} on {store.location}", flush=True)
        await worker.run_async(stop)
        print(f"worker stopped: {worker.stats()}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        raise SystemExit(f"usage: {sys.argv[0]} worker [TARGET]")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(work(sys.argv[2] if len(sys.argv) > 2 else default_target()))
