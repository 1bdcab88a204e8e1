"""``Consumer.run_async``: the consumer in an event loop, over either kind of store.

The steps and decisions are :meth:`Consumer.run`'s (``_consumer``); only the
database calls differ, behind a :class:`StreamPort`:

- :class:`AsyncStreamPort`, over an :class:`~alkstore.AsyncStream`, awaits the
  async API: ``await stream.subscribe(...)``, the receiver's ``recv_async``
  and ``save_offset``, and an :class:`~alkstore.AsyncTxHandle` per batch when
  transactional.
- :class:`OffloadedStreamPort`, over a sync :class:`~alkstore.Stream`, runs
  each call on a thread, a transactional batch whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from alkstore._async_store import AsyncStore
from alkstore._async_stream import AsyncEventReceiver, AsyncStream
from alkstore._async_tx import AsyncTxHandle
from alkstore._batch_verdict import Overtaken, check_offset_saved, is_fatal, judge_batch
from alkstore._despite_cancel import OUTCOME_WAIT_S, outcome_despite_cancel
from alkstore._errors import Closed, Database, Error, StreamTrimmed
from alkstore._stream import EventReceiver, Replay, Stream
from alkstore._values import StreamEvent

if TYPE_CHECKING:
    from alkstore._consumer import Consumer

__all__ = ["AsyncConsumerRun", "AsyncStreamPort", "OffloadedStreamPort", "StreamPort"]

T = TypeVar("T")


class StreamPort(Protocol):
    """The database calls of a consumer's asyncio run (each may raise ``Database``)."""

    async def subscribe(self) -> Replay: ...
    async def save_offset(self, receiver: Replay, offset: int) -> bool: ...
    async def in_transaction(self, batch: list[StreamEvent]) -> BaseException | None:
        """Handle ``batch`` and save its offset in one transaction; return what
        the handler raised (an ``Exception``: nothing committed).

        Raises:
            Database: opening, saving in or committing the transaction failed.
            BaseException: what the handler raised that is not an ``Exception``.
        """
        ...


class AsyncStreamPort:
    """An :class:`~alkstore.AsyncStream`'s public async API."""

    def __init__(self, consumer: Consumer, store: AsyncStore, stream: AsyncStream) -> None:
        self._consumer = consumer
        self._store = store
        self._stream = stream

    async def subscribe(self) -> Replay:
        return await self._stream.subscribe(self._consumer.name)

    async def save_offset(self, receiver: Replay, offset: int) -> bool:
        return await cast(AsyncEventReceiver, receiver).save_offset(offset)

    async def in_transaction(self, batch: list[StreamEvent]) -> BaseException | None:
        handler: Callable[[StreamEvent, AsyncTxHandle], Awaitable[object]]
        handler = self._consumer.handler  # type: ignore[assignment]
        tx = await self._store.begin_tx()
        try:  # the offset first, as Consumer._in_transaction says why
            last = batch[-1].offset
            saved = await tx.save_offset_tx(self._stream.name, self._consumer.name, last)
            check_offset_saved(saved, last)
        except BaseException:
            await _roll_back_quietly(tx)
            raise
        try:
            for event in batch:
                await handler(event, tx)
        except BaseException as exc:
            await _roll_back_quietly(tx)
            if is_fatal(exc):
                raise
            return exc
        try:
            await tx.commit()
        except BaseException:
            await _roll_back_quietly(tx)
            raise
        return None


class OffloadedStreamPort:
    """A sync :class:`~alkstore.Stream`'s calls, each on a thread."""

    def __init__(self, consumer: Consumer, stream: Stream) -> None:
        self._consumer = consumer
        self._stream = stream

    async def subscribe(self) -> Replay:
        return await asyncio.to_thread(self._stream.subscribe, self._consumer.name)

    async def save_offset(self, receiver: Replay, offset: int) -> bool:
        return await asyncio.to_thread(cast(EventReceiver, receiver).save_offset, offset)

    async def in_transaction(self, batch: list[StreamEvent]) -> BaseException | None:
        # The sync run's own transaction, whole on one thread: it belongs to the thread.
        return await on_thread_until_cancelled(self._consumer._in_transaction, batch)


class AsyncConsumerRun:
    """One asyncio run of a consumer: :meth:`Consumer.run`'s steps, awaited."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self._outage = consumer._outage
        store, stream = consumer.store, consumer.stream
        if isinstance(stream, AsyncStream):
            self._port: StreamPort = AsyncStreamPort(consumer, cast(AsyncStore, store), stream)
        else:
            self._port = OffloadedStreamPort(consumer, stream)

    async def run(self, stop: asyncio.Event) -> None:
        consumer = self._consumer
        with contextlib.suppress(Closed):
            while not stop.is_set() and not consumer.store.closed:
                receiver = await self._subscribe(stop)
                if receiver is None:
                    return
                relay = asyncio.ensure_future(_close_on_stop(stop, receiver))
                try:
                    await self._consume(receiver, stop)
                except (Closed, StreamTrimmed):
                    raise  # closed: done; trimmed: no retry brings the events back
                except Exception as exc:  # neither an outage nor a handler's: retried the same
                    await _pause(stop, consumer._note_failure(exc, handler=False))
                finally:
                    relay.cancel()
                    receiver.close()

    async def _subscribe(self, stop: asyncio.Event) -> Replay | None:
        """Subscribe, retrying through an outage; None once ``stop`` is set."""
        while not stop.is_set():
            try:
                receiver = await self._port.subscribe()
            except Database as exc:
                subscribing = f"subscribing to {self._consumer.stream.name!r}"
                await _pause(stop, self._outage.failed(subscribing, exc))
                continue
            self._outage.succeeded()
            return receiver
        return None

    async def _consume(self, receiver: Replay, stop: asyncio.Event) -> None:
        """Handle batches until ``stop``, the receiver closes, or a batch must be
        retried from the saved offset (the caller subscribes again)."""
        while not stop.is_set():
            try:
                batch = await self._next_batch(receiver)
            except Database as exc:
                reading = f"reading {self._consumer.stream.name!r}"
                await _pause(stop, self._outage.failed(reading, exc))
                continue
            if not batch:
                if receiver.closed:
                    return
                self._outage.succeeded()
                continue
            self._outage.succeeded()
            if not await self._handle(batch, receiver, stop):
                return

    async def _handle(
        self, batch: list[StreamEvent], receiver: Replay, stop: asyncio.Event
    ) -> bool:
        """Handle ``batch`` and save its offset; False when the rest must be redelivered."""
        consumer = self._consumer
        if consumer.transactional:
            try:
                failure = await self._port.in_transaction(batch)
            except Overtaken as overtaken:
                consumer._note_overtaken(overtaken)
                return False
            except Database as exc:
                committing = f"committing a batch of {consumer.stream.name!r}"
                await _pause(stop, self._outage.failed(committing, exc))
                return False
            if failure is None:
                consumer._count(succeeded=len(batch))
        else:
            verdict = judge_batch(batch, *await self._call_each(batch))
            if verdict.fatal is not None:
                await self._save_once(receiver, verdict.save)
                raise verdict.fatal
            if verdict.save is not None:
                if not await self._save(receiver, verdict.save, stop):
                    return False
                consumer._count(succeeded=verdict.handled)
            failure = verdict.failure
        pause = consumer._after_batch(failure)
        if pause is not None:
            await _pause(stop, pause)
        return pause is None

    async def _call_each(self, batch: list[StreamEvent]) -> tuple[int | None, BaseException | None]:
        """``Consumer._call_each``: coroutine handlers awaited here, plain ones on a thread."""
        consumer = self._consumer
        if not consumer._is_async:
            return await on_thread_until_cancelled(consumer._call_each, batch)
        handler: Callable[[StreamEvent], Awaitable[object]] = consumer.handler  # type: ignore[assignment]
        handled = None
        for event in batch:
            try:
                await handler(event)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                return handled, exc
            handled = event.offset
        return handled, None

    async def _save(self, receiver: Replay, offset: int, stop: asyncio.Event) -> bool:
        """Save ``offset``, retrying through an outage; False if ``stop`` came first."""
        while True:
            try:
                await self._port.save_offset(receiver, offset)
            except Database as exc:
                saving = f"saving the offset of {self._consumer.name!r}"
                if await _pause(stop, self._outage.failed(saving, exc)):
                    return False
                continue
            self._outage.succeeded()
            return True

    async def _save_once(self, receiver: Replay, offset: int | None) -> None:
        """On the way out: save what was handled if the database lets us, else redeliver it."""
        if offset is not None:
            with contextlib.suppress(Error):
                await self._port.save_offset(receiver, offset)

    async def _next_batch(self, receiver: Replay) -> list[StreamEvent]:
        first = await receiver.recv_async(self._consumer.idle_wait_s)
        if first is None:
            return []
        batch = [first]
        # A read failing now must not lose what the receiver already handed out.
        with contextlib.suppress(Database):
            while len(batch) < self._consumer.batch_size:
                event = await receiver.recv_async(0)
                if event is None:
                    break
                batch.append(event)
        return batch


async def on_thread_until_cancelled(
    call: Callable[[list[StreamEvent], threading.Event], T], batch: list[StreamEvent]
) -> T:
    """``call(batch, cut_short)`` on a thread. Cancelled, the run sets ``cut_short``
    and waits for the thread (``OUTCOME_WAIT_S`` at most) before it goes on: a
    run that returned while its thread still handled events would race the
    next run of the consumer, and a thread's transaction would commit after it."""
    cut_short = threading.Event()
    work = asyncio.create_task(asyncio.to_thread(call, batch, cut_short))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        cut_short.set()
        await outcome_despite_cancel(work, OUTCOME_WAIT_S)
        raise


async def _close_on_stop(stop: asyncio.Event, receiver: Replay) -> None:
    """Close ``receiver`` once ``stop`` is set, so a pending ``recv_async`` returns at once."""
    await stop.wait()
    receiver.close()


async def _pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop``; True if ``stop`` was set."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


async def _roll_back_quietly(tx: AsyncTxHandle) -> None:
    """Roll back if still open; on a dead connection the database rolls back by itself."""
    if tx.active:
        with contextlib.suppress(Error):
            await tx.rollback()
