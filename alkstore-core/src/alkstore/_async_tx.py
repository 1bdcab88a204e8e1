"""The transaction seam of the async API: side effects that commit with a business write."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from alkstore._codec import encode
from alkstore._despite_cancel import retrieve
from alkstore._errors import Closed, Database
from alkstore._names import check_identifier, check_name, outbox_queue_name
from alkstore._options import OUTBOX_QUEUE_OPTS, EnqueueOpts
from alkstore._params import Paramstyle, portable_params
from alkstore._stamp import JobStamp
from alkstore._stream import check_key, check_offset
from alkstore._tracing import stamp_unless_traced, traced_enqueue_async
from alkstore._tx import (
    ENDED_BEHIND_ITS_BACK,
    ENDED_BY_ITS_CALLER,
    Params,
    TxHandle,
    TxState,
    check_sql,
    refuse_owned_end,
)

if TYPE_CHECKING:
    from alkstore._async_store import AsyncStore

__all__ = ["AsyncTxHandle"]

T = TypeVar("T")

log = logging.getLogger("alkstore")


class TwinLane(Protocol):
    """Where the twin's sync calls run: one of core's threads (``Lane``), or
    the thread an adopted driver owns."""

    def run(self, call: Callable[..., T], *args: Any) -> Awaitable[T]: ...

    def close(self) -> None: ...


class AsyncTxHandle:
    """One open database transaction carrying alkstore side effects, for asyncio code:
    :class:`~alkstore.TxHandle` with ``await`` in front of each call.

    ``async with store.transaction() as tx:`` commits on success and rolls back
    on an exception, cancellation included: a cancelled block never leaves its
    transaction open. A handle belongs to one task at a time.

    An engine subclasses it to run the hooks natively (all of them, and
    ``connection``); the defaults run the hooks of a sync handle of the
    store's companion (the *twin*), one after another on the store's threads,
    or on the calling thread for an adopted connection the caller uses there.

    A handle adopted from a framework (an SQLAlchemy ``AsyncSession``…)
    leaves the ending to it: ``commit`` and ``rollback`` raise
    ``RuntimeError``, and leaving an ``async with`` block does nothing.
    """

    paramstyle: ClassVar[Paramstyle | None] = None
    """The driver's DB-API paramstyle for portable ``:name`` SQL (see
    ``TxHandle.paramstyle``); None: the twin's. Native engines set it."""

    owner: str | None = None
    """The framework whose transaction this handle adopted (it commits), or None."""

    catch_up: Callable[[], Awaitable[bool]] | None = None
    """Run before each write of an adopted handle: False once the framework's
    transaction is over (the handle then ends); else lets the framework send
    what it defers (an ``AsyncSession`` begins a ``begin_nested()`` SAVEPOINT
    lazily)."""

    def __init__(
        self, store: AsyncStore, twin: TxHandle | None = None, lane: TwinLane | None = None
    ) -> None:
        """``twin`` and ``lane`` are for core's defaults: the sync handle, and the
        thread its calls run on (None: on the calling thread)."""
        self._store = store
        self.state = TxState.OPEN
        """Where the transaction stands: open, committed or rolled back."""
        self._twin_tx = twin
        self._lane = lane
        self._ending = False  # commit or rollback began: the store's close leaves it be
        self._rolled_back_by_close = False

    @property
    def active(self) -> bool:
        """True until ``commit`` or ``rollback``."""
        return self.state is TxState.OPEN

    async def enqueue_tx(self, queue: str, opts: EnqueueOpts | None, payload: object) -> int:
        """Enqueue a job in this transaction; return its id (see ``TxHandle.enqueue_tx``)."""
        await self._check_writable()
        queue = check_name(queue, "queue")
        stamp = self._store._stamp(self._store._declared_queue_opts(queue), opts)
        return await self._traced_enqueue_tx(queue, stamp, encode(payload))

    async def publish_tx(self, stream: str, payload: object) -> int:
        """Publish an event in this transaction; return its offset."""
        await self._check_writable()
        return await self._publish_tx(check_name(stream, "stream"), None, encode(payload))

    async def publish_with_key_tx(self, stream: str, key: str, payload: object) -> int:
        """Publish a keyed event in this transaction; return its offset."""
        await self._check_writable()
        stream = check_name(stream, "stream")
        return await self._publish_tx(stream, check_key(key), encode(payload))

    async def notify_tx(self, channel: str, payload: object) -> None:
        """Notify ``channel`` when (and only if) this transaction commits."""
        await self._check_writable()
        channel = check_name(channel, "channel")
        await self._notify_tx(channel, self._store._check_notify_payload(encode(payload)))

    async def save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        """Advance ``consumer``'s offset in this transaction; True if it moved forward.

        Raises:
            ValueError: ``offset`` is past the stream's head, as this transaction sees it.
        """
        await self._check_writable()
        stream = check_name(stream, "stream")
        consumer = check_identifier(consumer, "consumer name")
        offset = check_offset(offset)
        return False if offset == 0 else await self._save_offset_tx(stream, consumer, offset)

    async def outbox_enqueue_tx(
        self, outbox: str, opts: EnqueueOpts | None, payload: object
    ) -> int:
        """Put a send into ``outbox`` in this transaction; return its job id."""
        await self._check_writable()
        outbox = check_name(outbox, "outbox")
        stamp = self._store._stamp(OUTBOX_QUEUE_OPTS, opts)
        return await self._traced_enqueue_tx(outbox_queue_name(outbox), stamp, encode(payload))

    async def execute(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Run the business write ``sql`` (the engine's dialect) in this transaction;
        return the rows it produced. ``:name`` with a mapping is portable (see
        ``TxHandle.execute``)."""
        await self._check_writable()
        style = self.paramstyle or self._twin().paramstyle
        sql, params = portable_params(check_sql(sql), params, style)
        return await self._execute(sql, params)

    def commit(self) -> Awaitable[None]:
        """Commit the business write and every side effect together; ends the handle.

        A commit the database refuses (a deferred constraint, a lost
        connection) raises :class:`~alkstore.Database` and leaves the handle
        rolled back: nothing it wrote is visible. (A connection lost while the
        COMMIT was on its way leaves, as with any database, the outcome unknown.)

        The commit starts when called, and a cancellation of its await does not
        stop it: even cancelled before it began (``wait_for(tx.commit(), 0)``),
        it ends the transaction rather than leave it open holding its locks.

        Raises:
            RuntimeError: a framework owns this transaction (see :attr:`owner`).
        """
        if self.owner is not None:
            raise refuse_owned_end(self.owner, "commit")
        return self._end_now(self._commit, TxState.COMMITTED)

    def rollback(self) -> Awaitable[None]:
        """Drop the business write and every side effect; ends the handle.

        Started when called, like :meth:`commit`: a cancelled await still rolls back.

        Raises:
            RuntimeError: a framework owns this transaction (see :attr:`owner`).
        """
        if self.owner is not None:
            raise refuse_owned_end(self.owner, "roll back")
        return self._end_now(self._rollback, TxState.ROLLED_BACK)

    def _end_now(self, hook: Callable[[], Awaitable[None]], ended: TxState) -> Awaitable[None]:
        """Start ending the transaction with ``hook``; return what awaits the end.

        A task of its own ends it, started now (eagerly from Python 3.12), so
        that no cancellation can keep it from running; an outcome nobody
        awaits any more is retrieved, so it logs nothing.
        """
        ending = self._finish(hook, ended)
        if sys.version_info >= (3, 12):
            task = asyncio.Task(ending, loop=asyncio.get_running_loop(), eager_start=True)
        else:
            task = asyncio.ensure_future(ending)
        task.add_done_callback(retrieve)
        return self._await_end(task, ended)

    async def _await_end(self, task: asyncio.Future[None], ended: TxState) -> None:
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            # The end goes on in its task; for its caller the handle has ended.
            if self.state is TxState.OPEN:
                self.state = ended
            raise

    async def _finish(self, hook: Callable[[], Awaitable[None]], ended: TxState) -> None:
        self._check_active()
        self._ending = True
        try:
            await hook()
        except BaseException:
            # A commit that raised committed nothing: the engine rolled back.
            if self.state is TxState.OPEN:
                self.state = TxState.ROLLED_BACK
            raise
        finally:
            if self.state is TxState.OPEN:
                self.state = ended
            self._store._forget_tx(self)
            self._close_lane()

    async def _end_with_store(self) -> None:
        """Roll back because the store is closing; never raises."""
        if self.state is not TxState.OPEN or self._ending:
            return
        self._ending = True
        try:
            await self._rollback()
        except Exception:
            log.warning("rolling back %r while closing its store failed", self, exc_info=True)
        finally:
            self.state = TxState.ROLLED_BACK
            self._rolled_back_by_close = True
            self._close_lane()

    def _ended_elsewhere(self) -> Database:
        """For engines: the driver says the transaction already ended behind the
        handle's back. Marks the handle ended; return the error to raise."""
        self._end_elsewhere()
        return Database(ENDED_BEHIND_ITS_BACK)

    def _ended_by_its_caller(self) -> Closed:
        """For engines: an adopted transaction its caller ended. Marks the handle
        ended; return the error to raise."""
        self._end_elsewhere()
        return Closed(ENDED_BY_ITS_CALLER)

    def _end_elsewhere(self) -> None:
        self.state = TxState.ENDED_ELSEWHERE
        self._store._forget_tx(self)
        self._close_lane()

    def _close_lane(self) -> None:
        if self._lane is not None:
            self._lane.close()

    async def __aenter__(self) -> AsyncTxHandle:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rolled_back_by_close and exc_type is None:
            # The block ran to its end, but nothing of it was committed: say so.
            raise Closed(f"{self._store!r} closed and rolled this transaction back")
        if not self.active or self.owner is not None:
            return
        if exc_type is None:
            await self.commit()
        else:
            await self.rollback()  # started at once: a cancellation cannot keep it open

    def __repr__(self) -> str:
        owned = "" if self.owner is None else f", in {self.owner}'s transaction"
        return f"<{type(self).__name__} {self.state.value}{owned}>"

    async def _check_writable(self) -> None:
        self._check_active()
        if self.catch_up is not None and not await self.catch_up():
            raise self._ended_by_its_caller()

    def _check_active(self) -> None:
        self._store._check_open()  # first: closing the store also rolled us back
        if self.state is not TxState.OPEN:
            raise Closed(f"this transaction is already {self.state.value}")
        if self._ending:
            raise Closed("this transaction is already ending")

    async def _traced_enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        plain = stamp_unless_traced(stamp)
        if plain is not None:
            return await self._enqueue_tx(queue, plain, payload_json)
        return await traced_enqueue_async(
            queue, stamp, lambda s: self._enqueue_tx(queue, s, payload_json)
        )

    # Engine hooks: arguments are already checked, encoded and stamped. The
    # defaults run the twin's sync hooks.

    @property
    def connection(self) -> Any:
        """The driver connection this transaction runs on."""
        return self._twin().connection

    async def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        return await self._on_twin(self._twin()._enqueue_tx, queue, stamp, payload_json)

    async def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        return await self._on_twin(self._twin()._publish_tx, stream, key, payload_json)

    async def _notify_tx(self, channel: str, payload_json: str) -> None:
        await self._on_twin(self._twin()._notify_tx, channel, payload_json)

    async def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        return await self._on_twin(self._twin()._save_offset_tx, stream, consumer, offset)

    async def _execute(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        return await self._on_twin(self._twin()._execute, sql, params)

    async def _commit(self) -> None:
        await self._on_twin(self._twin().commit)

    async def _rollback(self) -> None:
        twin = self._twin()
        await self._on_twin(_roll_back_if_open, twin)

    def _twin(self) -> TxHandle:
        if self._twin_tx is None:
            raise TypeError(
                f"{type(self).__name__} has no sync twin: an engine that begins "
                "transactions natively must implement every AsyncTxHandle hook"
            )
        return self._twin_tx

    async def _on_twin(self, call: Callable[..., T], *args: Any) -> T:
        """Run one of the twin's calls, and end this handle if it ended the twin."""
        try:
            if self._lane is None:
                return call(*args)
            return await self._lane.run(call, *args)
        finally:
            twin = self._twin()
            if twin.state is TxState.ENDED_ELSEWHERE and self.state is TxState.OPEN:
                self._end_elsewhere()


def _roll_back_if_open(twin: TxHandle) -> None:
    if twin.active:
        twin.rollback()
