"""Transactions on a pooled connection, or on the caller's own."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from alkstore.engine import JobStamp, Params, TxHandle
from alkstore_postgres._errors import translate
from alkstore_postgres._plan import Plan, opening, run_steps
from alkstore_postgres._tx_plans import TxPlans

if TYPE_CHECKING:
    from alkstore_postgres._store import PostgresStore

__all__ = ["PostgresTx"]

T = TypeVar("T")


class PostgresTx(TxHandle):
    """An open transaction. Notifies sent in it are delivered at commit only,
    by PostgreSQL itself. What goes out when: see ``_tx_plans``."""

    paramstyle = "pyformat"  # psycopg: %(name)s

    _store: PostgresStore

    def __init__(
        self,
        store: PostgresStore,
        connection: psycopg.Connection,
        give_back: Callable[[psycopg.Connection], None] | None,
    ) -> None:
        super().__init__(store)
        self._connection = connection
        self._give_back = give_back
        adopted = give_back is None
        self._plans = TxPlans(
            store.sql, store.job_ids, connection, begun=adopted, holds_back=not adopted
        )
        # A forgotten handle must not hold its locks and its connection forever.
        self._abandon = (
            weakref.finalize(self, _roll_back, connection, give_back, os.getpid())
            if give_back
            else None
        )

    def __repr__(self) -> str:
        owned = "" if self.owner is None else f", in {self.owner}'s transaction"
        return f"<{type(self).__name__} {self.state.value}, {self._plans.describe()}{owned}>"

    @property
    def schema(self) -> str:
        """The schema of this transaction's store, for business SQL that joins
        alkstore's tables (``{schema}.jobs``, ...)."""
        return self._store.settings.schema

    @property
    def connection(self) -> psycopg.Connection:
        """The ``psycopg.Connection`` this transaction runs on (begun, everything held sent)."""
        self._run(self._plans.flush())
        return self._connection

    def _run(self, plan: Plan[T]) -> T:
        with translate(opening(plan).action):
            return run_steps(self._connection, plan)

    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        self._check_still_open()
        job_id = self._plans.enqueue_at_once(queue, stamp, payload_json)
        if job_id is not None:
            return job_id
        return self._run(self._plans.enqueue(queue, stamp, payload_json))

    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        self._check_still_open()
        return self._run(self._plans.publish(stream, key, payload_json))

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        self._check_still_open()
        self._run(self._plans.notify(channel))

    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        self._check_still_open()
        return self._run(self._plans.save_offset(stream, consumer, offset))

    def _execute(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        self._check_still_open()
        rows = self._run(self._plans.execute(sql, params))
        self._check_still_open()
        return rows

    def _commit(self) -> None:
        self._check_still_open()
        try:
            if not self._plans.needs_commit:
                return  # nothing was sent: nothing to commit
            try:
                self._run(self._plans.commit())
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    self._connection.execute("ROLLBACK")
                raise
        finally:
            self._end()

    def _rollback(self) -> None:
        self._plans.discard()
        self._check_still_open()
        try:
            if self._plans.begun:
                with translate("rollback"):
                    self._connection.execute("ROLLBACK")
        finally:
            self._end()

    def _check_still_open(self) -> None:
        """Refuse to go on once the transaction ended through the driver (see
        ``TxPlans.ended_by_driver``)."""
        if not self._plans.ended_by_driver():
            return
        if self._give_back is None:
            raise self._ended_by_its_caller()
        self._end()
        raise self._ended_elsewhere()

    def _end(self) -> None:
        if self._abandon is not None and self._give_back is not None:
            self._abandon.detach()
            self._give_back(self._connection)


def _roll_back(
    connection: psycopg.Connection,
    give_back: Callable[[psycopg.Connection], None],
    opened_in: int,
) -> None:
    if os.getpid() != opened_in:
        return  # a forked child's copy: the transaction is the parent's (see alkstore._fork)
    idle = connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    if not idle:  # a handle that never began has nothing to roll back
        with contextlib.suppress(psycopg.Error):
            connection.execute("ROLLBACK")
    with contextlib.suppress(Exception):
        give_back(connection)
