"""The Consumer: runs a handler on every event of a stream, saving its offset per batch.

It works on a sync :class:`~alkstore.Store` or an :class:`~alkstore.AsyncStore`.
Events are handled in offset order, one at a time. After each handled batch
the consumer saves the last offset explicitly — or, with
``transactional=True``, saves it inside the same transaction as the handler's
writes, so a projection and its offset commit together (effectively-once).
A handler that raises is retried, from the first unsaved event, after a
backoff pause: a stream is ordered, so no event is ever skipped.

The consumer's own database calls (subscribe, read, offset save, the batch's
transaction) ride out outages: one warning per outage, capped pauses, and the
consumer resumes where it was. A handled event is never skipped; one whose
offset save the outage swallowed may be delivered again (at least once).

``run`` (below) and ``run_async`` (``_consumer_async``) differ only in how
they wait and call the database; what a batch's outcome means, what to save
and count, and how long to pause are decided once (``judge_batch`` in
``_batch_verdict``, and :meth:`Consumer._after_batch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, cast

from alkstore._async_store import AsyncStore
from alkstore._async_stream import AsyncStream
from alkstore._async_tx import AsyncTxHandle
from alkstore._backoff import backoff_ceiling
from alkstore._batch_verdict import Overtaken, check_offset_saved, is_fatal, judge_batch
from alkstore._consumer_async import AsyncConsumerRun
from alkstore._errors import Closed, Database, Error, StreamTrimmed
from alkstore._handler_shapes import check_handler, check_plain_result, is_coroutine_handler
from alkstore._names import check_identifier
from alkstore._options import check_duration, check_int
from alkstore._outage import Outage
from alkstore._run_stats import RunStats, call_to_completion
from alkstore._signals import stop_on_signals
from alkstore._store import (
    StopSignal,
    Store,
    check_async_stop_signal,
    check_stop_signal,
    check_store,
)
from alkstore._stream import MAX_READ, EventReceiver, Stream
from alkstore._tx import TxHandle
from alkstore._values import StreamEvent

__all__ = ["Consumer", "EventHandler"]

log = logging.getLogger("alkstore.consumer")

EventHandler = (
    Callable[[StreamEvent], object | Awaitable[object]]
    | Callable[[StreamEvent, TxHandle], object]
    | Callable[[StreamEvent, AsyncTxHandle], Awaitable[object]]
)
"""Called with each event (and, when transactional, the batch's transaction:
a :class:`TxHandle` on a sync store, an :class:`AsyncTxHandle` on an async one)."""

_RETRY_BASE_S = 0.1
_RETRY_MAX_S = 30.0


class Consumer:
    """Runs ``handler`` on every event of ``stream`` as consumer ``name``.

    ``store`` is a :class:`Store` or an :class:`AsyncStore`. On a ``Store``,
    :meth:`run` works on the calling thread and :meth:`run_async` in an event
    loop; on an ``AsyncStore`` only :meth:`run_async` works (``run`` raises
    ``TypeError``), awaiting the store's stream and receiver.

    Starts after the consumer's saved offset. ``batch_size`` events at most
    are handled between offset saves. With ``transactional=True`` the handler
    is called as ``handler(event, tx)`` and each batch runs in one
    transaction that also saves the offset: its writes and the offset commit
    or roll back together. On a sync store that handler is a plain function
    given a :class:`TxHandle`; on an async store, a coroutine function given
    an :class:`AsyncTxHandle`.
    """

    def __init__(
        self,
        store: Store | AsyncStore,
        stream: str | Stream | AsyncStream,
        name: str,
        handler: EventHandler,
        *,
        batch_size: int = 100,
        transactional: bool = False,
        idle_wait_s: float = 1.0,
    ) -> None:
        check_store(store)
        check_handler(handler)
        self.store = store
        """The store the consumer reads from and saves its offset in."""
        self.stream = _resolve_stream(store, stream)
        """The stream it reads."""
        self.name = check_identifier(name, "consumer")
        """The consumer's name: the key its offset is saved under."""
        self.handler = handler
        """Called with each event (and, when transactional, the batch's transaction)."""
        self.batch_size = check_int(batch_size, "batch_size", minimum=1, maximum=MAX_READ)
        """How many events one read returns at most."""
        self.transactional = bool(transactional)
        """Whether the handler's writes and the offset's save commit in one transaction."""
        self.idle_wait_s = check_duration(idle_wait_s, "idle_wait_s", zero_ok=False)
        """The longest idle park on the stream's wakes (wakes end a park early)."""
        self._is_async = is_coroutine_handler(handler)
        if self.transactional:
            _check_transactional(store, self._is_async)
        _check_arity(handler, 2 if self.transactional else 1)
        self._lock = threading.Lock()
        self._run_underway = False
        self._succeeded = self._failed = 0
        self._started_at: float | None = None
        self._failures = 0
        """Handler failures in a row: the retry pause grows with them."""
        self._outage = Outage(log, f"consumer {self.name!r} of {self.stream.name!r}")

    def run(self, stop: StopSignal) -> None:
        """Consume until ``stop`` is set; return once the current batch is settled.

        Rides out database outages: a failed subscribe, read or offset save is
        retried (one warning per outage, pauses of up to a few seconds) and
        the consumer carries on where it was. An event whose handler returned
        is never skipped; if its offset could not be saved before ``stop``, it
        is delivered again next time (at least once).

        Raises:
            TypeError: the consumer's store is an :class:`AsyncStore`, whose
                calls belong to the event loop it was opened in: use
                ``await consumer.run_async(stop)`` there.
            StreamTrimmed: the events after the saved offset were trimmed
                from the stream (``Stream.trim``): the consumer stops rather
                than skip them. Saving the error's ``trimmed_through`` as its
                offset skips them on purpose.
            BaseException: what a handler raised that is not an ``Exception``
                (``SystemExit``, ``KeyboardInterrupt``), after saving the
                offset of the events handled before it (one try).
        """
        stream = self._sync_stream("run(stop)")
        check_stop_signal(stop)
        with self._running(), contextlib.suppress(Closed):
            while not stop.is_set() and not self.store.closed:
                receiver = self._subscribe(stream, stop)
                if receiver is None:
                    return
                relay = threading.Thread(target=_close_on_stop, args=(stop, receiver), daemon=True)
                relay.start()
                try:
                    self._consume(receiver, stop)
                except (Closed, StreamTrimmed):
                    raise  # closed: done; trimmed: no retry brings the events back
                except Exception as exc:  # neither an outage nor a handler's: retried the same
                    stop.wait(self._note_failure(exc, handler=False))
                finally:
                    receiver.close()

    def run_forever(self) -> None:
        """Consume until SIGTERM or SIGINT.

        Raises:
            TypeError: the consumer's store is an :class:`AsyncStore` (see :meth:`run`).
        """
        self._sync_stream("run_forever()")
        with stop_on_signals() as stop:
            self.run(stop)

    async def run_async(self, stop: asyncio.Event | None = None) -> None:
        """Consume in the running event loop until ``stop`` is set or the task is cancelled.

        On an :class:`AsyncStore` every database call is awaited (the store
        must belong to this loop); on a sync :class:`Store` they run on
        threads. Coroutine handlers are awaited on the loop, plain ones run on
        the loop's executor. Outages and handler failures are handled as by
        :meth:`run`, and so is a trimmed stream (``StreamTrimmed``). A
        cancelled run saves nothing more: events handled since the last save
        are delivered again next time (at least once).
        """
        stop = asyncio.Event() if stop is None else stop
        check_async_stop_signal(stop)
        with self._running():
            await AsyncConsumerRun(self).run(stop)

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        """A run's span: a second run of the same consumer at once is refused (both
        would handle every event, and race to save the offset)."""
        with self._lock:
            if self._run_underway:
                raise RuntimeError(f"{self!r} is already running")
            self._run_underway = True
        self._started_at = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._run_underway = False

    def stats(self) -> RunStats:
        """A snapshot of what this consumer has done since it started."""
        elapsed = 0.0 if self._started_at is None else time.monotonic() - self._started_at
        with self._lock:
            return RunStats(self._succeeded, self._failed, 0, 0, 0, elapsed)

    def __repr__(self) -> str:
        return f"<Consumer {self.name!r} of stream {self.stream.name!r}>"

    # The decisions both runs share

    def _after_batch(self, failure: BaseException | None) -> float | None:
        """After a batch whose handled events are saved: None to carry on, or
        the pause before redelivering from the first unsaved event."""
        if failure is None:
            self._failures = 0
            return None
        return self._note_failure(failure)

    def _note_failure(self, failure: BaseException, *, handler: bool = True) -> float:
        """Log a failure (counted if the handler's); return the pause before the retry."""
        if handler:
            self._count(failed=1)
        self._failures += 1
        log.warning(
            "consumer %r of %r failed", self.name, self.stream.name,
            exc_info=(type(failure), failure, failure.__traceback__),
        )  # fmt: skip
        return _retry_pause(self._failures)

    def _note_overtaken(self, overtaken: Overtaken) -> None:
        """Another run of this consumer committed past the batch: it was rolled
        back, and the run resubscribes from the saved offset."""
        log.warning(
            "consumer %r of %r: another run of the same consumer saved its offset past %d; "
            "this run's batch was rolled back and it carries on from the saved offset "
            "(run one consumer of a name at a time)",
            self.name, self.stream.name, overtaken.offset,
        )  # fmt: skip

    def _count(self, *, succeeded: int = 0, failed: int = 0) -> None:
        with self._lock:
            self._succeeded += succeeded
            self._failed += failed

    def _sync_stream(self, call: str) -> Stream:
        """The consumer's sync stream, or a TypeError naming the async way for an AsyncStore."""
        if isinstance(self.stream, AsyncStream):
            raise TypeError(
                f"Consumer.{call} needs a sync Store, and {self.store!r} is an AsyncStore, whose "
                "calls belong to its event loop: in that loop use 'await consumer.run_async(stop)'"
            )
        return self.stream

    # Consuming (threads)

    def _subscribe(self, stream: Stream, stop: StopSignal) -> EventReceiver | None:
        """Subscribe, retrying through an outage; None once ``stop`` is set."""
        while not stop.is_set():
            try:
                receiver = stream.subscribe(self.name)
            except Database as exc:
                stop.wait(self._outage.failed(f"subscribing to {stream.name!r}", exc))
                continue
            self._outage.succeeded()
            return receiver
        return None

    def _consume(self, receiver: EventReceiver, stop: StopSignal) -> None:
        """Handle batches until ``stop``, the receiver closes, or a batch must be
        retried from the saved offset (the caller subscribes again)."""
        while not stop.is_set():
            try:
                batch = self._next_batch(receiver)
            except Database as exc:
                # The receiver's position moves only on a successful read: carry on with it.
                stop.wait(self._outage.failed(f"reading {self.stream.name!r}", exc))
                continue
            if not batch:
                if receiver.closed:
                    return  # the store closed, or its watcher died: subscribe again
                self._outage.succeeded()
                continue
            self._outage.succeeded()
            if not self._handle(batch, receiver, stop):
                return

    def _handle(self, batch: list[StreamEvent], receiver: EventReceiver, stop: StopSignal) -> bool:
        """Handle ``batch`` and save its offset; False when the rest must be redelivered."""
        if self.transactional:
            try:
                failure = self._in_transaction(batch)
            except Overtaken as overtaken:
                self._note_overtaken(overtaken)
                return False
            except Database as exc:
                # The commit's outcome is unknown: the saved offset tells, on resubscribing.
                stop.wait(self._outage.failed(f"committing a batch of {self.stream.name!r}", exc))
                return False
            if failure is None:
                self._count(succeeded=len(batch))
        else:
            verdict = judge_batch(batch, *self._call_each(batch))
            if verdict.fatal is not None:
                self._save_once(receiver, verdict.save)
                raise verdict.fatal
            if verdict.save is not None:
                if not self._save(receiver, verdict.save, stop):
                    return False
                self._count(succeeded=verdict.handled)
            failure = verdict.failure
        pause = self._after_batch(failure)
        if pause is not None:
            stop.wait(pause)
        return pause is None

    def _call_each(
        self, batch: list[StreamEvent], cut_short: threading.Event | None = None
    ) -> tuple[int | None, BaseException | None]:
        """Run the handler on each event in order until one raises (or, on a
        thread of a cancelled ``run_async``, until ``cut_short`` is set).

        Returns the last handled offset (None if none was) and what was raised.
        """
        handled = None
        for event in batch:
            if cut_short is not None and cut_short.is_set():
                break
            try:
                call_to_completion(self.handler, event)
            except BaseException as exc:
                return handled, exc
            handled = event.offset
        return handled, None

    def _in_transaction(
        self, batch: list[StreamEvent], cut_short: threading.Event | None = None
    ) -> BaseException | None:
        """Save the batch's offset and run the batch in one transaction; return
        what the handler raised (nothing committed then).

        The offset is saved first: a second run of the same consumer (another
        process) then waits for this one's commit and finds its batch taken,
        instead of committing the handler's writes a second time. On a thread
        of a cancelled ``run_async``, ``cut_short`` set rolls the batch back.

        Raises:
            Database: opening, saving in or committing the transaction failed.
            Overtaken: the saved offset is already at or past the batch's end.
            BaseException: what the handler raised that is not an ``Exception``.
        """
        handler: Callable[[StreamEvent, TxHandle], object] = self.handler  # type: ignore[assignment]
        tx = cast(Store, self.store).begin_tx()
        try:
            last = batch[-1].offset
            check_offset_saved(tx.save_offset_tx(self.stream.name, self.name, last), last)
        except BaseException:
            _roll_back_quietly(tx)
            raise
        try:
            for event in batch:
                if cut_short is not None and cut_short.is_set():
                    break
                check_plain_result(handler(event, tx))
        except BaseException as exc:
            _roll_back_quietly(tx)
            if is_fatal(exc):
                raise
            return exc
        try:
            if cut_short is not None and cut_short.is_set():
                tx.rollback()  # the run was cancelled: it saves nothing more
            else:
                tx.commit()
        except BaseException:
            _roll_back_quietly(tx)
            raise
        return None

    def _save(self, receiver: EventReceiver, offset: int, stop: StopSignal) -> bool:
        """Save ``offset``, retrying through an outage; False if ``stop`` came first."""
        while True:
            try:
                receiver.save_offset(offset)
            except Database as exc:
                if stop.wait(self._outage.failed(f"saving the offset of {self.name!r}", exc)):
                    return False
                continue
            self._outage.succeeded()
            return True

    def _save_once(self, receiver: EventReceiver, offset: int | None) -> None:
        """On the way out: save what was handled if the database lets us, else redeliver it."""
        if offset is not None:
            with contextlib.suppress(Error):
                receiver.save_offset(offset)

    def _next_batch(self, receiver: EventReceiver) -> list[StreamEvent]:
        first = receiver.recv(self.idle_wait_s)
        if first is None:
            return []
        batch = [first]
        # A read failing now must not lose what the receiver already handed out.
        with contextlib.suppress(Database):
            while len(batch) < self.batch_size and (event := receiver.recv(0)) is not None:
                batch.append(event)
        return batch


def _close_on_stop(stop: StopSignal, receiver: EventReceiver) -> None:
    """Close ``receiver`` once ``stop`` is set, so a blocked ``recv`` returns at once."""
    while not stop.wait(1.0):
        if receiver.closed:
            return
    receiver.close()


def _roll_back_quietly(tx: TxHandle) -> None:
    """Roll back if still open; on a dead connection the database rolls back by itself."""
    if tx.active:
        with contextlib.suppress(Error):
            tx.rollback()


def _retry_pause(failures: int) -> float:
    return min(backoff_ceiling(_RETRY_BASE_S, failures), _RETRY_MAX_S)


def _resolve_stream(
    store: Store | AsyncStore, stream: str | Stream | AsyncStream
) -> Stream | AsyncStream:
    if isinstance(stream, str):
        return store.stream(stream)
    if not isinstance(stream, (Stream, AsyncStream)):
        raise TypeError(f"stream must be a name or a stream, not {type(stream).__name__}")
    if isinstance(store, AsyncStore) != isinstance(stream, AsyncStream):
        raise TypeError(f"{stream!r} is not a stream of {store!r}")
    return stream


def _check_transactional(store: Store | AsyncStore, is_async: bool) -> None:
    """A transactional handler is a plain function on a sync store (a transaction
    belongs to the thread that opened it) and a coroutine function on an async one
    (it awaits the transaction's calls)."""
    if isinstance(store, AsyncStore) and not is_async:
        raise TypeError(
            "on an AsyncStore a transactional handler must be a coroutine function: "
            "it awaits the AsyncTxHandle's calls"
        )
    if not isinstance(store, AsyncStore) and is_async:
        raise TypeError(
            "a transactional handler must be a plain function: a transaction "
            "belongs to the thread that opened it"
        )


def _check_arity(handler: Callable[..., Any], arguments: int) -> None:
    """Refuse a handler that cannot be called with ``arguments`` positional arguments:
    ``transactional=True`` calls ``handler(event, tx)``, otherwise ``handler(event)``."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return  # a builtin without a signature: its first call will tell
    try:
        signature.bind(*range(arguments))
    except TypeError:
        call = "handler(event, tx)" if arguments == 2 else "handler(event)"
        mode = "transactional=True" if arguments == 2 else "transactional=False"
        raise TypeError(
            f"with {mode} the consumer calls {call}, but {handler!r} takes {signature}"
        ) from None
