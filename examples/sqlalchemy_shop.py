"""Orders in SQLAlchemy's ORM, their confirmations in alkstore: one Session, one commit.

An ``Order`` is a declarative model. Placing one adds it to a ``Session``
and, in that session's transaction, enqueues its confirmation job and
publishes an ``orders`` event through ``store.adopt_tx(session)``: the
session's commit commits all three, its rollback (a declined card) none.
Gift wrapping is tried in a savepoint (``session.begin_nested()``): when
the wrapping service refuses, rolling back to the savepoint drops the
wrapping row and its job, and the order still commits with its
confirmation. A worker drains the confirmations and marks each order
confirmed through the ORM.

    python examples/sqlalchemy_shop.py [TARGET]

TARGET is alkstore's: a SQLite file (default: one in a temporary folder) or
a ``postgresql://`` DSN. SQLAlchemy connects to the same database (see
``sqlalchemy_url``): alkstore writes through SQLAlchemy's own connection, so
both must reach the same storage, or ``adopt_tx`` raises ``ValueError``.
The demo prints what happened and exits non-zero if anything does not add up.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Engine, ForeignKey, String, create_engine, event, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

import alkstore

CONFIRMATIONS = "confirmations"
WRAPPING = "gift-wrapping"
ORDERS = "orders"
CARD_LIMIT_CENTS = 50_000
"""Orders above this are declined by the (pretend) payment provider."""
PAPER_IN_STOCK = frozenset({"gold", "silver"})
"""What the (pretend) wrapping service can wrap in."""

ALKSTORE_OPTIONS = frozenset(
    {"schema", "pool_min_size", "pool_max_size", "connect_timeout_s", "scheduler_lease_s"}
)
"""alkstore's own DSN query parameters on PostgreSQL: libpq knows none of them."""


# The models


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "sa_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(100))
    total_cents: Mapped[int]
    status: Mapped[str] = mapped_column(String(20), default="placed")


class GiftWrap(Base):
    __tablename__ = "sa_gift_wraps"

    order_id: Mapped[int] = mapped_column(ForeignKey("sa_orders.id"), primary_key=True)
    paper: Mapped[str] = mapped_column(String(20))


# One database for SQLAlchemy and alkstore


def sqlalchemy_url(target: str) -> URL:
    """SQLAlchemy's URL for alkstore's ``target``: the same database.

    A SQLite path becomes ``sqlite:////absolute/path``; a PostgreSQL DSN
    gets the psycopg driver (the one alkstore uses) and loses alkstore's own
    options (``schema=`` is where alkstore's tables go, not libpq's business).
    """
    if target.startswith(("postgresql://", "postgres://")):
        url = make_url(target).set(drivername="postgresql+psycopg")
        return url.difference_update_query(ALKSTORE_OPTIONS)
    if target.startswith("sqlite:"):
        return make_url(target)
    return URL.create("sqlite", database=str(Path(target).resolve()))


def make_engine(target: str) -> Engine:
    engine = create_engine(sqlalchemy_url(target))
    if engine.dialect.name == "sqlite":
        use_savepoints_on_sqlite(engine)
    return engine


def use_savepoints_on_sqlite(engine: Engine) -> None:
    """SQLAlchemy's recipe for SAVEPOINT on pysqlite ("Serializable isolation /
    Savepoints / Transactional DDL" in its SQLite dialect's documentation).

    The ``sqlite3`` module begins transactions itself, lazily, before the
    first INSERT, UPDATE or DELETE, and never before a SAVEPOINT: a session
    whose first statement is ``begin_nested()``'s SAVEPOINT would then run
    with no transaction around it, and SQLite commits when that savepoint is
    released, long before ``session.commit()``. Here the driver begins
    nothing, and SQLAlchemy emits the BEGIN when its transaction begins.
    IMMEDIATE, as alkstore's own transactions on SQLite: the write lock is
    held from the start, so a transaction that reads before it writes never
    fails on upgrading its lock when another process has written meanwhile.
    """

    @event.listens_for(engine, "connect")
    def driver_begins_nothing(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def begin_immediate(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


# Placing orders


class Declined(Exception):
    """The payment provider refused the order: it must leave no trace."""


class OutOfPaper(Exception):
    """The wrapping service cannot wrap in that paper: the order goes unwrapped."""


def charge(customer: str, total_cents: int) -> None:
    if total_cents > CARD_LIMIT_CENTS:
        raise Declined(f"card of {customer} declined for {total_cents / 100:.2f}")


def reserve_paper(paper: str) -> None:
    if paper not in PAPER_IN_STOCK:
        raise OutOfPaper(f"no {paper} paper left")


def place_order(
    store: alkstore.Store,
    sessions: sessionmaker[Session],
    customer: str,
    total_cents: int,
    gift_paper: str | None = None,
) -> int:
    """Commit the order, its confirmation job and its event together; the order's id.

    Raises:
        Declined: the card was declined; nothing was written.
    """
    with sessions.begin() as session:  # commits when the block ends, rolls back if it raises
        order = Order(customer=customer, total_cents=total_cents)
        session.add(order)
        session.flush()  # the INSERT, now: the job and the event need the order's id
        tx = store.adopt_tx(session)  # alkstore writes in this session's transaction
        tx.enqueue_tx(CONFIRMATIONS, None, {"order": order.id})
        tx.publish_tx(ORDERS, {"order": order.id, "customer": customer, "cents": total_cents})
        if gift_paper is not None:
            wrap(session, tx, order, gift_paper)
        charge(customer, total_cents)  # raising rolls back the order, its job and its event
        return order.id


def wrap(session: Session, tx: alkstore.TxHandle, order: Order, paper: str) -> bool:
    """Add gift wrapping to ``order`` in a savepoint: the wrapping row and the
    wrapping job commit with the order, or (out of paper) neither does, while
    the order goes on. True if it was wrapped."""
    try:
        with session.begin_nested():  # SAVEPOINT; an exception rolls back to it
            session.add(GiftWrap(order_id=order.id, paper=paper))
            session.flush()
            tx.enqueue_tx(WRAPPING, None, {"order": order.id, "paper": paper})
            reserve_paper(paper)
    except OutOfPaper as exc:
        print(f"order {order.id}: not wrapped ({exc}): no wrapping row, no wrapping job")
        return False
    return True


# The worker's side


def confirm_orders(store: alkstore.Store, sessions: sessionmaker[Session], worker_id: str) -> int:
    """Drain the confirmation queue: each job's order is marked confirmed through
    the ORM, then the job is acked. Delivery is at least once (a worker that
    dies before its ack leaves the job to be claimed again), so confirming is
    harmless when repeated. Returns how many jobs were handled."""
    queue = store.queue(CONFIRMATIONS)
    handled = 0
    while (job := queue.claim_one(worker_id)) is not None:
        with sessions.begin() as session:
            order = session.get(Order, job.payload["order"])
            if order is not None and order.status == "placed":
                order.status = "confirmed"  # a real shop would send its mail first
        job.ack()
        handled += 1
    return handled


# The demo


def stream_head(store: alkstore.Store, name: str) -> int:
    return next((s.head for s in store.inspect().streams() if s.name == name), 0)


def queued_orders(store: alkstore.Store, queue: str) -> list[int]:
    return sorted(int(info.payload["order"]) for info in store.inspect().jobs(queue))


def main(target: str) -> int:
    engine = make_engine(target)
    with alkstore.open(target) as store:
        print(f"shop on {store!r}, SQLAlchemy on {engine.url!r}")
        Base.metadata.create_all(engine)
        sessions = sessionmaker(engine)
        head = stream_head(store, ORDERS)
        before = set(queued_orders(store, CONFIRMATIONS))

        placed = [
            place_order(store, sessions, "ada", 1_500),
            place_order(store, sessions, "grace", 2_599, gift_paper="gold"),
            place_order(store, sessions, "edsger", 990, gift_paper="tartan"),
        ]
        wrapped, unwrapped = placed[1], placed[2]
        print(f"placed orders {placed}, each with its confirmation job and event in one commit")
        try:
            place_order(store, sessions, "mallory", 99_900, gift_paper="gold")
        except Declined as exc:
            print(f"mallory's order rolled back ({exc}): no row, no job, no event, no wrapping")

        waiting = [order for order in queued_orders(store, CONFIRMATIONS) if order not in before]
        events = store.stream(ORDERS).read_since(head)
        wrapping_jobs = [o for o in queued_orders(store, WRAPPING) if o in placed]
        print(f"confirmations waiting: {waiting}; events published: {len(events)}")
        print(f"wrapping jobs: {wrapping_jobs}")

        handled = confirm_orders(store, sessions, "worker-1")
        print(f"worker-1 handled {handled} confirmation jobs")
        with sessions() as session:
            rows = session.execute(select(Order.id, Order.status).where(Order.id.in_(placed)))
            status = dict(rows.all())
            wraps = session.scalars(select(GiftWrap.order_id).where(GiftWrap.order_id.in_(placed)))
            wrapped_orders = sorted(wraps)
            ghosts = session.scalars(select(Order.id).where(Order.customer == "mallory")).all()
        print(f"order status: {status}")
        published = [event.payload["order"] for event in events]
        checks = {
            "every order placed waited with its confirmation job": waiting == placed,
            "every order placed published its event": published == placed,
            "the declined order left no row": not ghosts,
            "the refused wrapping left no row and no job, the accepted one both": (
                wrapped_orders == [wrapped] == wrapping_jobs and unwrapped not in wrapped_orders
            ),
            "the worker confirmed every order": (
                handled >= len(placed) and set(status.values()) == {"confirmed"}
            ),
            "no confirmation is left waiting": not queued_orders(store, CONFIRMATIONS),
        }
        for job in store.queue(WRAPPING).claim_batch("wrapper-1", 100):
            job.ack()  # a real shop would wrap it
    engine.dispose()
    failed = [name for name, passed in checks.items() if not passed]
    for name in failed:
        print(f"FAILED: {name}")
    print("all as expected" if not failed else "FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(sys.argv[1]))
    with tempfile.TemporaryDirectory() as folder:
        sys.exit(main(str(Path(folder) / "shop.db")))
