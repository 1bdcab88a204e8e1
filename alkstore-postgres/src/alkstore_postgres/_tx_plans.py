"""One open transaction's operations as plans, and what it holds back: the
sync and the async transaction handles both run these (see ``_plan``).

On the engine's own connections nothing reaches the server until it has
to: ``BEGIN``, held enqueues (``_job_buffer``) and held publishes
(``_event_buffer``) go out pipelined with the first statement that needs
an answer, or with ``COMMIT``. A transaction of enqueues only is one round
trip. An adopted connection is already in its transaction, and its caller
runs statements and commits behind the handle's back: there every write
goes at once. So it does in the async handle, whose ``connection`` property
cannot send what is held (a property cannot await): it begins at once and
holds nothing back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from alkstore import Database
from alkstore.engine import JobStamp, Params
from alkstore_postgres._event_buffer import EventBuffer
from alkstore_postgres._job_buffer import JobBuffer, JobIds
from alkstore_postgres._plan import Fetch, Operation, Pipeline, Plan, Statement, Step
from alkstore_postgres._queue import insert_job
from alkstore_postgres._stream import insert_event, raise_offset
from alkstore_postgres._wakes import notify_params

if TYPE_CHECKING:
    from alkstore_postgres._sql import Statements

__all__ = ["TxPlans"]

T = TypeVar("T")

_COMMIT = Statement("COMMIT")


class TxPlans:
    """The plans of one transaction on ``connection`` (sync or async)."""

    def __init__(
        self,
        sql: Statements,
        job_ids: JobIds,
        connection: psycopg.Connection | psycopg.AsyncConnection,
        *,
        begun: bool,
        holds_back: bool,
    ) -> None:
        self._sql = sql
        self._connection = connection
        self.begun = begun
        """Whether BEGIN went out (an adopted connection is in its transaction already)."""
        self._jobs = JobBuffer(sql, job_ids) if holds_back else None
        self._events = EventBuffer(sql) if holds_back else None

    def describe(self) -> str:
        """How far the transaction went, for the handle's repr."""
        sent = "begun" if self.begun else "not yet begun"
        held = "".join(
            f", {len(buffer)} {what} held"
            for buffer, what in ((self._jobs, "enqueues"), (self._events, "publishes"))
            if buffer
        )
        return sent + held

    @property
    def pending(self) -> bool:
        """Whether BEGIN or held enqueues or publishes still have to reach the server."""
        return not self.begun or bool(self._jobs) or bool(self._events)

    @property
    def needs_commit(self) -> bool:
        """Whether anything was or will be sent: else there is nothing to commit."""
        return self.begun or bool(self._jobs)

    def _take_pending(self) -> list[Statement]:
        statements = []
        if not self.begun:
            statements.append(Statement("BEGIN"))
            self.begun = True
        if self._jobs:
            statements += self._jobs.take_statements()
        if self._events:
            statements += self._events.take_statements()
        return statements

    def _with_pending(self, plan: Plan[T]) -> Plan[T]:
        """``plan`` in the transaction: each step goes out in one round trip
        with whatever is pending before it."""
        result: Any = None
        while True:
            try:
                step = plan.send(result)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            assert not isinstance(step, Operation)
            pending = self._take_pending() if self.pending else []
            if not pending:
                result = yield step
            elif isinstance(step, Statement):
                result = (yield Pipeline((*pending, step)))[-1]
            else:
                result = (yield Pipeline((*pending, *step.statements)))[len(pending) :]

    def flush(self) -> Plan[None]:
        """Send BEGIN and everything held: the caller takes the connection over.

        From then on nothing is held back: the caller may run any statement on
        the connection at any time, unseen (``ROLLBACK TO SAVEPOINT`` after a
        publish), so each enqueue and publish goes out as it is made, and each
        publish reads its stream's head again.
        """
        yield Operation("begin a transaction")
        if self.pending:
            yield Pipeline(tuple(self._take_pending()))
        self._forget_heads()
        self._jobs = self._events = None

    def _forget_heads(self) -> None:
        """The caller's own statements may undo a head move (a savepoint): read heads again."""
        if self._events is not None:
            self._events.forget_heads()

    def enqueue_at_once(self, queue: str, stamp: JobStamp, payload_json: str) -> int | None:
        """The id of a job held back without running a plan (most enqueues of a
        transaction that holds back: an id is reserved), else None: run
        :meth:`enqueue`."""
        if self._jobs is None or stamp.key is not None:
            return None
        return self._jobs.enqueue_at_once(queue, stamp, payload_json)

    def enqueue(self, queue: str, stamp: JobStamp, payload_json: str) -> Plan[int]:
        yield Operation(f"enqueue into {queue!r}")
        if self._jobs is None or stamp.key is not None:  # a keyed one may write nothing
            return (
                yield from self._with_pending(insert_job(self._sql, queue, stamp, payload_json))
            )
        return (yield from self._jobs.enqueue(queue, stamp, payload_json))

    def publish(self, stream: str, key: str | None, payload_json: str) -> Plan[int]:
        yield Operation(f"publish to {stream!r}")
        insert = insert_event(self._sql, stream, key, payload_json)
        if self._events is None:
            return (yield from self._with_pending(insert))
        offset = self._events.publish(stream, key, payload_json)
        if offset is None:
            offset = yield from self._with_pending(insert)
            self._events.locked(stream, offset)
        return offset

    def notify(self, channel: str) -> Plan[None]:
        yield Operation(f"notify {channel!r}")
        params = notify_params(self._sql.schema, channel)
        yield from self._with_pending(_one(Statement(self._sql.notify, params)))

    def save_offset(self, stream: str, consumer: str, offset: int) -> Plan[bool]:
        yield Operation(f"save offset of {consumer!r}")
        return (yield from self._with_pending(raise_offset(self._sql, stream, consumer, offset)))

    def execute(self, sql: str, params: Params) -> Plan[list[tuple[Any, ...]]]:
        yield Operation("execute")
        rows = yield from self._with_pending(_one(Statement(sql, params, Fetch.ROWS_IF_ANY)))
        self._forget_heads()
        return list(rows)

    def commit(self) -> Plan[None]:
        """COMMIT, with what is pending; only when :attr:`needs_commit`.

        A transaction an earlier statement aborted is refused here: PostgreSQL
        answers its COMMIT with a rollback and no error, and the caller, who
        may have caught that statement's error, would take it for committed.
        """
        yield Operation("commit")
        if self._connection.pgconn.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            self.discard()
            raise Database(
                "commit failed: a statement in this transaction failed, so PostgreSQL "
                "aborted it; it is rolled back and nothing in it was committed (to go on "
                "after a statement that may fail, run it inside a savepoint)"
            )
        yield from self._with_pending(_one(_COMMIT))

    def discard(self) -> None:
        """Forget everything held (the transaction rolls back, or ended)."""
        for buffer in (self._jobs, self._events):
            if buffer is not None:
                buffer.discard()

    def ended_by_driver(self) -> bool:
        """Whether the transaction ended through the driver (``COMMIT`` via
        ``tx.execute``, ``tx.connection.commit()``, an adopted connection's own
        ``commit()``); then what was held is forgotten. On the pool's autocommit
        connection later statements would escape any rollback, and on the
        caller's they would begin a transaction of their own: the handle refuses
        to go on."""
        status = self._connection.pgconn.transaction_status
        if not self.begun or status != psycopg.pq.TransactionStatus.IDLE:
            return False
        self.discard()
        return True


def _one(step: Step) -> Plan[Any]:
    return (yield step)
