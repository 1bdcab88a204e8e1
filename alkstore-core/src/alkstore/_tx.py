"""The transaction seam: side effects that commit or roll back with a business write."""

from __future__ import annotations

import abc
import enum
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from alkstore._codec import encode
from alkstore._errors import Closed, Database
from alkstore._names import check_identifier, check_name, outbox_queue_name
from alkstore._options import OUTBOX_QUEUE_OPTS, EnqueueOpts
from alkstore._params import Paramstyle, portable_params
from alkstore._stamp import JobStamp
from alkstore._stream import check_key, check_offset
from alkstore._tracing import stamp_unless_traced, traced_enqueue

if TYPE_CHECKING:
    from alkstore._store import Store

__all__ = [
    "ENDED_BEHIND_ITS_BACK",
    "ENDED_BY_ITS_CALLER",
    "Params",
    "TxHandle",
    "TxState",
    "check_sql",
    "refuse_owned_end",
]

Params = Sequence[Any] | Mapping[str, Any]
"""What ``tx.execute`` takes: a mapping for ``:name`` (portable), or the
engine's native parameters."""

log = logging.getLogger("alkstore")


ENDED_BEHIND_ITS_BACK = (
    "this transaction was ended behind its handle's back (a COMMIT or ROLLBACK "
    "through tx.execute or tx.connection, or the database rolling it back after "
    "an error, as SQLite does when the disk is full); the handle is closed, and "
    "nothing was written through it after that"
)
ENDED_BY_ITS_CALLER = (
    "the caller's transaction this handle adopted has ended (committed or rolled "
    "back through its connection); the handle is closed and writes nothing more"
)


def refuse_owned_end(owner: str, verb: str) -> RuntimeError:
    """The error for ``commit``/``rollback`` on a handle whose transaction a framework owns."""
    return RuntimeError(
        f"this transaction belongs to {owner}: {verb} it there, not through the "
        "alkstore handle (which would end it behind the framework's back)"
    )


def check_sql(sql: object) -> str:
    """``sql`` if it is a str (what ``tx.execute`` runs), else ``TypeError``."""
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a str, not {type(sql).__name__}")
    return sql


class TxState(enum.Enum):
    """Where a transaction handle is in its life."""

    OPEN = "open"
    """Begun; writes may still be added."""
    COMMITTED = "committed"
    """Committed: every write is visible."""
    ROLLED_BACK = "rolled back"
    """Rolled back: none of its writes happened."""
    ENDED_ELSEWHERE = "ended behind its handle's back"
    """A COMMIT or ROLLBACK ran through ``tx.execute`` or ``tx.connection``."""


class TxHandle(abc.ABC):
    """One open database transaction carrying alkstore side effects.

    Nothing a ``*_tx`` call does is visible to anyone before :meth:`commit`;
    :meth:`rollback` drops job rows, events, notifications and offset saves
    together with the business write — no ghosts. ``commit`` or ``rollback``
    ends the handle; any later call raises :class:`~alkstore.Closed`. Used as
    a context manager it commits on success and rolls back on an exception.
    A handle belongs to one thread at a time. Closing its store rolls it back.

    Ending the transaction through the driver (``tx.execute("COMMIT")``, or
    ``tx.connection.commit()``) is refused: the engine raises
    :class:`~alkstore.Database` at the next call, ``commit`` and ``rollback``
    included, and writes nothing more through the handle.

    A handle adopted from a framework (an SQLAlchemy ``Session``, Django's
    ``atomic()``) leaves the ending to it: ``commit`` and ``rollback`` raise
    ``RuntimeError``, and leaving a ``with`` block does nothing.
    """

    paramstyle: ClassVar[Paramstyle] = "named"
    """The driver's DB-API paramstyle: portable ``:name`` SQL given to
    :meth:`execute` is rewritten into it (engines set it; contract 1.3)."""

    owner: str | None = None
    """The framework whose transaction this handle adopted (it commits), or None."""

    catch_up: Callable[[], bool] | None = None
    """Run before each write of an adopted handle: False once the framework's
    transaction is over (the handle then ends); else lets the framework send
    what it defers (a ``Session`` begins a ``begin_nested()`` SAVEPOINT lazily)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.state = TxState.OPEN
        """Where the transaction stands: open, committed or rolled back."""
        self._in_use = threading.RLock()
        """Held by every call that runs a statement, commit and rollback
        included, and by the store's close: a thread closing the store waits
        for a statement under way instead of ending the transaction beneath it."""
        self._rolled_back_by_close = False

    @property
    def active(self) -> bool:
        """True until ``commit`` or ``rollback``."""
        return self.state is TxState.OPEN

    def enqueue_tx(self, queue: str, opts: EnqueueOpts | None, payload: object) -> int:
        """Enqueue a job in this transaction; return its id.

        The job is stamped with the QueueOpts that ``store.queue(queue, opts)``
        last declared in this Store, else the defaults.
        """
        with self._in_use:
            self._check_writable()
            queue = check_name(queue, "queue")
            stamp = self._store._stamp(self._store._declared_queue_opts(queue), opts)
            return self._traced_enqueue_tx(queue, stamp, encode(payload))

    def publish_tx(self, stream: str, payload: object) -> int:
        """Publish an event in this transaction; return its offset."""
        with self._in_use:
            self._check_writable()
            return self._publish_tx(check_name(stream, "stream"), None, encode(payload))

    def publish_with_key_tx(self, stream: str, key: str, payload: object) -> int:
        """Publish a keyed event in this transaction; return its offset."""
        with self._in_use:
            self._check_writable()
            stream = check_name(stream, "stream")
            return self._publish_tx(stream, check_key(key), encode(payload))

    def notify_tx(self, channel: str, payload: object) -> None:
        """Notify ``channel`` when (and only if) this transaction commits."""
        with self._in_use:
            self._check_writable()
            channel = check_name(channel, "channel")
            self._notify_tx(channel, self._store._check_notify_payload(encode(payload)))

    def save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        """Advance ``consumer``'s offset in this transaction; True if it moved forward.

        Raises:
            ValueError: ``offset`` is past the stream's head, as this
                transaction sees it.
        """
        with self._in_use:
            self._check_writable()
            stream = check_name(stream, "stream")
            consumer = check_identifier(consumer, "consumer name")
            offset = check_offset(offset)
            return False if offset == 0 else self._save_offset_tx(stream, consumer, offset)

    def outbox_enqueue_tx(self, outbox: str, opts: EnqueueOpts | None, payload: object) -> int:
        """Put a send into ``outbox`` in this transaction; return its job id.

        Takes the outbox name; the backing queue ``__alkstore_outbox:{outbox}``
        is derived here, and is reachable no other way.
        """
        with self._in_use:
            self._check_writable()
            outbox = check_name(outbox, "outbox")
            stamp = self._store._stamp(OUTBOX_QUEUE_OPTS, opts)
            return self._traced_enqueue_tx(outbox_queue_name(outbox), stamp, encode(payload))

    def execute(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Run the business write ``sql`` (the engine's dialect) in this transaction.

        ``:name`` parameters with a mapping run unchanged on every engine
        (``tx.execute("INSERT INTO orders VALUES (:id, :total)", {"id": 1,
        "total": 2.5})``); a sequence, or a mapping with the driver's own
        named style, is passed to the driver as it is. Returns the rows the
        statement produced (empty for statements without rows).

        Raises:
            ValueError: the SQL names a ``:name`` that ``params`` lacks.
        """
        with self._in_use:
            self._check_writable()
            sql, params = portable_params(check_sql(sql), params, self.paramstyle)
            return self._execute(sql, params)

    @property
    @abc.abstractmethod
    def connection(self) -> Any:
        """The driver connection this transaction runs on."""

    def commit(self) -> None:
        """Commit the business write and every side effect together; ends the handle.

        A commit the database refuses (a deferred constraint, a lost
        connection) raises :class:`~alkstore.Database` and leaves the handle
        rolled back: nothing it wrote is visible. (A connection lost while the
        COMMIT was on its way leaves, as with any database, the outcome unknown.)

        Raises:
            RuntimeError: a framework owns this transaction (see :attr:`owner`).
        """
        if self.owner is not None:
            raise refuse_owned_end(self.owner, "commit")
        self._finish(self._commit, TxState.COMMITTED)

    def rollback(self) -> None:
        """Drop the business write and every side effect; ends the handle.

        Raises:
            RuntimeError: a framework owns this transaction (see :attr:`owner`).
        """
        if self.owner is not None:
            raise refuse_owned_end(self.owner, "roll back")
        self._finish(self._rollback, TxState.ROLLED_BACK)

    def _finish(self, hook: Callable[[], None], ended: TxState) -> None:
        self._check_active()
        with self._in_use:
            self._check_active()  # the store may have closed (and rolled us back) meanwhile
            try:
                hook()
            except BaseException:
                # A commit that raised committed nothing: the engine rolled back.
                if self.state is TxState.OPEN:
                    self.state = TxState.ROLLED_BACK
                raise
            finally:
                if self.state is TxState.OPEN:
                    self.state = ended
                self._store._forget_tx(self)

    def _end_with_store(self, *, wait: bool = True) -> bool:
        """Roll back because the store is closing; never raises.

        Returns False, having done nothing, when ``wait`` is False and a
        statement is under way on another thread.
        """
        if not self._in_use.acquire(blocking=wait):
            return False
        try:
            if self.state is TxState.OPEN:
                self._roll_back_for_close()
        finally:
            self._in_use.release()
        return True

    def _roll_back_for_close(self) -> None:
        try:
            self._rollback()
        except Exception:
            log.warning("rolling back %r while closing its store failed", self, exc_info=True)
        finally:
            self.state = TxState.ROLLED_BACK
            self._rolled_back_by_close = True

    def _ended_elsewhere(self) -> Database:
        """For engines: the driver says the transaction already ended (a COMMIT or
        ROLLBACK behind the handle's back). Marks the handle ended; return the
        error to raise, after giving the connection back."""
        self.state = TxState.ENDED_ELSEWHERE
        self._store._forget_tx(self)
        return Database(ENDED_BEHIND_ITS_BACK)

    def _ended_by_its_caller(self) -> Closed:
        """For engines: an adopted transaction the caller committed or rolled back
        through its own connection. The handle ends with it (marked ended, and
        forgotten by the store); return the error to raise."""
        self.state = TxState.ENDED_ELSEWHERE
        self._store._forget_tx(self)
        return Closed(ENDED_BY_ITS_CALLER)

    def __enter__(self) -> TxHandle:
        return self

    def __exit__(
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
            self.commit()
        else:
            self.rollback()

    def __repr__(self) -> str:
        owned = "" if self.owner is None else f", in {self.owner}'s transaction"
        return f"<{type(self).__name__} {self.state.value}{owned}>"

    def _check_writable(self) -> None:
        self._check_active()
        if self.catch_up is not None and not self.catch_up():
            raise self._ended_by_its_caller()

    def _traced_enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        plain = stamp_unless_traced(stamp)
        if plain is not None:
            return self._enqueue_tx(queue, plain, payload_json)
        return traced_enqueue(queue, stamp, lambda s: self._enqueue_tx(queue, s, payload_json))

    def _check_active(self) -> None:
        store = self._store
        if store._closed:  # first: closing the store also rolls us back
            if self.state is TxState.OPEN and store._closing_ends(self):
                # The close may not have reached us yet (it waits for the
                # statements under way, which may wait on our locks): end now.
                self._end_with_store()
            store._check_open()
        if self.state is not TxState.OPEN:
            raise Closed(f"this transaction is already {self.state.value}")

    # Engine hooks: arguments are already checked, encoded and stamped.

    @abc.abstractmethod
    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        """Insert a job row in this transaction; return its id."""

    @abc.abstractmethod
    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        """Insert an event in this transaction; return its offset."""

    @abc.abstractmethod
    def _notify_tx(self, channel: str, payload_json: str) -> None:
        """Arrange a notify that is sent if and only if this transaction commits."""

    @abc.abstractmethod
    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        """Raise the consumer's offset in this transaction; True if it moved."""

    @abc.abstractmethod
    def _execute(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        """Run caller SQL (in the driver's :attr:`paramstyle`) in this transaction
        and fetch its rows."""

    @abc.abstractmethod
    def _commit(self) -> None:
        """Commit. Raise :class:`~alkstore.Database` (cause chained) on failure."""

    @abc.abstractmethod
    def _rollback(self) -> None:
        """Roll back."""
