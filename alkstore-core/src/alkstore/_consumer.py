"""The Consumer: runs a handler on every event of a stream, saving its offset per batch.

Events are handled in offset order, one at a time. After each handled batch
the consumer saves the last offset explicitly — or, with
``transactional=True``, saves it inside the same transaction as the handler's
writes, so a projection and its offset commit together (effectively-once).
A handler that raises is retried, from the first unsaved event, after a
backoff pause: a stream is ordered, so no event is ever skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from alkstore._backoff import backoff_ceiling
from alkstore._errors import Closed
from alkstore._names import check_identifier
from alkstore._options import check_duration, check_int
from alkstore._running import RunStats, call_to_completion
from alkstore._signals import stop_on_signals
from alkstore._store import StopSignal, Store
from alkstore._stream import MAX_READ, EventReceiver, Stream
from alkstore._tx import TxHandle
from alkstore._values import StreamEvent

__all__ = ["Consumer", "EventHandler"]

log = logging.getLogger("alkstore.consumer")

EventHandler = (
    Callable[[StreamEvent], object | Awaitable[object]] | Callable[[StreamEvent, TxHandle], object]
)
"""Called with each event (and, when transactional, the batch's transaction)."""

_RETRY_BASE_S = 0.1
_RETRY_MAX_S = 30.0


class Consumer:
    """Runs ``handler`` on every event of ``stream`` as consumer ``name``.

    Starts after the consumer's saved offset. ``batch_size`` events at most
    are handled between offset saves. With ``transactional=True`` the handler
    is called as ``handler(event, tx)`` and each batch runs in one
    transaction that also saves the offset: its writes and the offset commit
    or roll back together.
    """

    def __init__(
        self,
        store: Store,
        stream: str | Stream,
        name: str,
        handler: EventHandler,
        *,
        batch_size: int = 100,
        transactional: bool = False,
        idle_wait_s: float = 1.0,
    ) -> None:
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        self.store = store
        self.stream = store.stream(stream) if isinstance(stream, str) else stream
        self.name = check_identifier(name, "consumer")
        self.handler = handler
        self.batch_size = check_int(batch_size, "batch_size", minimum=1, maximum=MAX_READ)
        self.transactional = bool(transactional)
        self.idle_wait_s = check_duration(idle_wait_s, "idle_wait_s", zero_ok=False)
        self._is_async = inspect.iscoroutinefunction(handler)
        if self._is_async and self.transactional:
            raise TypeError(
                "a transactional handler must be a plain function: a transaction "
                "belongs to the thread that opened it"
            )
        self._lock = threading.Lock()
        self._succeeded = self._failed = 0
        self._started_at: float | None = None

    def run(self, stop: StopSignal) -> None:
        """Consume until ``stop`` is set; return once the current batch is settled."""
        self._started_at = time.monotonic()
        failures = 0
        while not stop.is_set():
            try:
                receiver = self.stream.subscribe(self.name)
            except Closed:
                return
            relay = threading.Thread(target=_close_on_stop, args=(stop, receiver), daemon=True)
            relay.start()
            try:
                while not stop.is_set():
                    batch = self._next_batch(receiver)
                    if receiver.closed and not batch:
                        break  # the store closed, or its watcher died: subscribe again
                    self._handle(batch, receiver)
                    failures = 0
            except Exception:
                failures += 1
                log.warning("consumer %r of %r failed", self.name, self.stream.name, exc_info=True)
                stop.wait(_retry_pause(failures))
            finally:
                receiver.close()
            if self.store.closed:
                return

    def run_forever(self) -> None:
        """Consume until SIGTERM or SIGINT."""
        with stop_on_signals() as stop:
            self.run(stop)

    async def run_async(self, stop: asyncio.Event | None = None) -> None:
        """Consume in the running event loop until ``stop`` is set or the task is cancelled."""
        stop = asyncio.Event() if stop is None else stop
        self._started_at = time.monotonic()
        failures = 0
        while not stop.is_set() and not self.store.closed:
            receiver = await asyncio.to_thread(self.stream.subscribe, self.name)
            relay = asyncio.ensure_future(_close_on_stop_async(stop, receiver))
            try:
                while not stop.is_set():
                    batch = await self._next_batch_async(receiver)
                    if receiver.closed and not batch:
                        break
                    await self._handle_async(batch, receiver)
                    failures = 0
            except Exception:
                failures += 1
                log.warning("consumer %r of %r failed", self.name, self.stream.name, exc_info=True)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), _retry_pause(failures))
            finally:
                relay.cancel()
                receiver.close()

    def stats(self) -> RunStats:
        """A snapshot of what this consumer has done since it started."""
        elapsed = 0.0 if self._started_at is None else time.monotonic() - self._started_at
        with self._lock:
            return RunStats(self._succeeded, self._failed, 0, 0, 0, elapsed)

    def __repr__(self) -> str:
        return f"<Consumer {self.name!r} of stream {self.stream.name!r}>"

    # Batches

    def _next_batch(self, receiver: EventReceiver) -> list[StreamEvent]:
        first = receiver.recv(self.idle_wait_s)
        if first is None:
            return []
        batch = [first]
        while len(batch) < self.batch_size and (event := receiver.recv(0)) is not None:
            batch.append(event)
        return batch

    async def _next_batch_async(self, receiver: EventReceiver) -> list[StreamEvent]:
        first = await receiver.recv_async(self.idle_wait_s)
        if first is None:
            return []
        batch = [first]
        while len(batch) < self.batch_size and (event := await receiver.recv_async(0)) is not None:
            batch.append(event)
        return batch

    def _handle(self, batch: list[StreamEvent], receiver: EventReceiver) -> None:
        if not batch:
            return
        if self.transactional:
            self._handle_in_transaction(batch)
            return
        handled = None
        try:
            for event in batch:
                call_to_completion(self.handler, event)
                handled = event.offset
        except Exception:
            self._count(failed=1)
            raise
        finally:
            if handled is not None:
                receiver.save_offset(handled)
                self._count(succeeded=_count_upto(batch, handled))

    def _handle_in_transaction(self, batch: list[StreamEvent]) -> None:
        try:
            with self.store.transaction() as tx:
                for event in batch:
                    self.handler(event, tx)  # type: ignore[call-arg]
                tx.save_offset_tx(self.stream.name, self.name, batch[-1].offset)
        except Exception:
            self._count(failed=1)
            raise
        self._count(succeeded=len(batch))

    async def _handle_async(self, batch: list[StreamEvent], receiver: EventReceiver) -> None:
        if not batch:
            return
        if not self._is_async:
            await asyncio.to_thread(self._handle, batch, receiver)
            return
        handled = None
        try:
            for event in batch:
                await self.handler(event)  # type: ignore[call-arg,misc]
                handled = event.offset
        except Exception:
            self._count(failed=1)
            raise
        finally:
            if handled is not None:
                await asyncio.to_thread(receiver.save_offset, handled)
                self._count(succeeded=_count_upto(batch, handled))

    def _count(self, *, succeeded: int = 0, failed: int = 0) -> None:
        with self._lock:
            self._succeeded += succeeded
            self._failed += failed


def _close_on_stop(stop: StopSignal, receiver: EventReceiver) -> None:
    """Close ``receiver`` once ``stop`` is set, so a blocked ``recv`` returns at once."""
    while not stop.wait(1.0):
        if receiver.closed:
            return
    receiver.close()


async def _close_on_stop_async(stop: asyncio.Event, receiver: EventReceiver) -> None:
    await stop.wait()
    receiver.close()


def _count_upto(batch: list[StreamEvent], offset: int) -> int:
    return sum(1 for event in batch if event.offset <= offset)


def _retry_pause(failures: int) -> float:
    return min(backoff_ceiling(_RETRY_BASE_S, failures), _RETRY_MAX_S)
