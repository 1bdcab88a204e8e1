"""The transaction seam: side effects that commit or roll back with a business write."""

from __future__ import annotations

import abc
import enum
import logging
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from alkstore._codec import encode
from alkstore._errors import Closed, Database
from alkstore._names import check_identifier, check_name, outbox_queue_name
from alkstore._options import OUTBOX_QUEUE_OPTS, EnqueueOpts
from alkstore._stamp import JobStamp, stamp_job
from alkstore._stream import check_key, check_offset

if TYPE_CHECKING:
    from alkstore._store import Store

__all__ = ["ENDED_BEHIND_ITS_BACK", "ENDED_BY_ITS_CALLER", "TxHandle", "TxState", "check_sql"]

log = logging.getLogger("alkstore")


ENDED_BEHIND_ITS_BACK = (
    "this transaction was ended behind its handle's back (a COMMIT or ROLLBACK "
    "through tx.execute or tx.connection); the handle is closed, and nothing was "
    "written through it after that"
)
ENDED_BY_ITS_CALLER = (
    "the caller's transaction this handle adopted has ended (committed or rolled "
    "back through its connection); the handle is closed and writes nothing more"
)


def check_sql(sql: object) -> str:
    """``sql`` if it is a str (what ``tx.execute`` runs), else ``TypeError``."""
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a str, not {type(sql).__name__}")
    return sql


class TxState(enum.Enum):
    """Where a transaction handle is in its life."""

    OPEN = "open"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
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
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self.state = TxState.OPEN
        self._ending = threading.Lock()  # commit, rollback and the store's close race
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
        self._check_active()
        queue = check_name(queue, "queue")
        stamp = stamp_job(self._store._declared_queue_opts(queue), opts)
        return self._enqueue_tx(queue, stamp, encode(payload))

    def publish_tx(self, stream: str, payload: object) -> int:
        """Publish an event in this transaction; return its offset."""
        self._check_active()
        return self._publish_tx(check_name(stream, "stream"), None, encode(payload))

    def publish_with_key_tx(self, stream: str, key: str, payload: object) -> int:
        """Publish a keyed event in this transaction; return its offset."""
        self._check_active()
        stream = check_name(stream, "stream")
        return self._publish_tx(stream, check_key(key), encode(payload))

    def notify_tx(self, channel: str, payload: object) -> None:
        """Notify ``channel`` when (and only if) this transaction commits."""
        self._check_active()
        channel = check_name(channel, "channel")
        self._notify_tx(channel, self._store._check_notify_payload(encode(payload)))

    def save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        """Advance ``consumer``'s offset in this transaction; True if it moved forward.

        Raises:
            ValueError: ``offset`` is past the stream's head, as this
                transaction sees it.
        """
        self._check_active()
        stream = check_name(stream, "stream")
        consumer = check_identifier(consumer, "consumer name")
        offset = check_offset(offset)
        return False if offset == 0 else self._save_offset_tx(stream, consumer, offset)

    def outbox_enqueue_tx(self, outbox: str, opts: EnqueueOpts | None, payload: object) -> int:
        """Put a send into ``outbox`` in this transaction; return its job id.

        Takes the outbox name; the backing queue ``__alkstore_outbox:{outbox}``
        is derived here, and is reachable no other way.
        """
        self._check_active()
        outbox = check_name(outbox, "outbox")
        stamp = stamp_job(OUTBOX_QUEUE_OPTS, opts)
        return self._enqueue_tx(outbox_queue_name(outbox), stamp, encode(payload))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run the business write ``sql`` (the engine's dialect) in this transaction.

        Returns the rows it produced (empty for statements without rows).
        """
        self._check_active()
        return self._execute(check_sql(sql), params)

    @property
    @abc.abstractmethod
    def connection(self) -> Any:
        """The driver connection this transaction runs on."""

    def commit(self) -> None:
        """Commit the business write and every side effect together; ends the handle."""
        self._finish(self._commit, TxState.COMMITTED)

    def rollback(self) -> None:
        """Drop the business write and every side effect; ends the handle."""
        self._finish(self._rollback, TxState.ROLLED_BACK)

    def _finish(self, hook: Callable[[], None], ended: TxState) -> None:
        self._check_active()
        with self._ending:
            self._check_active()  # the store may have closed (and rolled us back) meanwhile
            try:
                hook()
            finally:
                if self.state is TxState.OPEN:
                    self.state = ended
                self._store._forget_tx(self)

    def _end_with_store(self) -> None:
        """Roll back because the store is closing; never raises."""
        with self._ending:
            if self.state is not TxState.OPEN:
                return
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
        if not self.active:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.state.value}>"

    def _check_active(self) -> None:
        self._store._check_open()  # first: closing the store also rolled us back
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
    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run caller SQL in this transaction and fetch its rows."""

    @abc.abstractmethod
    def _commit(self) -> None:
        """Commit. Raise :class:`~alkstore.Database` (cause chained) on failure."""

    @abc.abstractmethod
    def _rollback(self) -> None:
        """Roll back."""
