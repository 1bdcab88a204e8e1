"""Receivers: wakes and events handed out one by one, and the buffered wake
receiver engines fan out to."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any, Generic, TypeVar

from alkstore._values import Wake

__all__ = [
    "BufferedWakeReceiver",
    "Receiver",
    "WakeReceiver",
    "check_timeout",
    "resolve_future",
]

T = TypeVar("T")
R = TypeVar("R", bound="Receiver[Any]")

_EXECUTOR_SLICE_S = 0.25


_FOREVER_S = 10 * 365 * 86400.0
"""A ``recv`` timeout past this (ten years) waits as long as it takes."""


def check_timeout(timeout: object) -> float | None:
    """Return how long a ``recv`` may wait: seconds, or None for as long as it takes.

    None and infinity wait until an item comes or the receiver closes, and so
    does any wait longer than ``_FOREVER_S`` (the platform's locks refuse some
    finite ones, ``1e10`` on Linux); zero or a negative number only looks.

    Raises:
        ValueError: ``timeout`` is NaN, or not a number.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ValueError(
            f"timeout must be a number of seconds or None, not {type(timeout).__name__}"
        )
    if isinstance(timeout, int) and timeout > _FOREVER_S:  # past what a float holds, maybe
        return None
    seconds = float(timeout)
    if math.isnan(seconds):
        raise ValueError("timeout must be a number of seconds or None, not NaN")
    if seconds > _FOREVER_S:
        return None
    return max(seconds, 0.0)  # -inf too


class Receiver(abc.ABC, Generic[T]):
    """Something that hands out items one by one until it closes.

    ``recv`` blocks for the next item; iteration (sync or ``async for``) ends
    when the receiver closes; as a context manager it closes on exit.
    """

    @abc.abstractmethod
    def recv(self, timeout: float | None = None) -> T | None:
        """Return the next item; None when ``timeout`` seconds pass or the receiver is closed.

        ``timeout`` None (or infinity) waits as long as it takes; NaN raises ``ValueError``.
        """

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """True once the receiver will deliver nothing more."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop receiving; idempotent. Blocked ``recv`` calls return None."""

    async def recv_async(self, timeout: float | None = None) -> T | None:
        """``recv`` for asyncio code: awaits without blocking the event loop.

        This generic version blocks an executor thread in short slices, so a
        cancelled await frees its thread soon; receivers that can do better
        (``BufferedWakeReceiver``, ``EventReceiver``) override it.
        """
        timeout = check_timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            chunk = _EXECUTOR_SLICE_S if remaining is None else min(remaining, _EXECUTOR_SLICE_S)
            item = await loop.run_in_executor(None, self.recv, chunk)
            if item is not None or self.closed or remaining == chunk:
                return item

    def __iter__(self) -> Iterator[T]:
        """Yield items until the receiver closes."""
        while (item := self.recv()) is not None:
            yield item

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate_async()

    async def _iterate_async(self) -> AsyncIterator[T]:
        while (item := await self.recv_async()) is not None:
            yield item

    def __enter__(self: R) -> R:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class WakeReceiver(Receiver[Wake]):
    """Wakes for one channel, from the moment ``listen`` returned.

    A wake says "something changed, re-read"; it never carries a payload.
    Delivery is at-least-once: wakes may be coalesced (several notifies, one
    wake) or repeated (after an engine reconnects), never silently lost. When
    the engine can no longer deliver, the receiver closes: ``recv`` returns
    None and ``closed`` is True — failure is an event, not silence.
    """

    channel: str
    """The channel this receiver wakes for."""

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} channel={self.channel!r} {state}>"


class BufferedWakeReceiver(WakeReceiver):
    """A receiver fed from another thread (through a :class:`WakeFanout`).

    The feeder calls :meth:`deliver` for each wake and :meth:`close` when it
    can deliver no more (watcher died, store closed); its owner may close it
    too. ``on_close`` runs once when the receiver closes, so the feeder can
    stop fanning out to it.

    With ``coalesce`` a wake equal to one already pending is dropped. Without
    it, wakes queue one per delivery up to ``max_pending``, then coalesce.
    """

    def __init__(
        self,
        channel: str,
        *,
        coalesce: bool = True,
        on_close: Callable[[BufferedWakeReceiver], None] | None = None,
        max_pending: int = 65_536,
    ) -> None:
        self.channel = channel
        """The channel this receiver wakes for."""
        self._coalesce = coalesce
        self._on_close = on_close
        self._max_pending = max_pending
        self._pending: deque[Wake] = deque()
        self._closed = False
        self._ready = threading.Condition(threading.Lock())
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def closed(self) -> bool:
        """Whether the receiver is closed: ``recv`` then returns None at once."""
        return self._closed

    @property
    def pending(self) -> int:
        """Wakes delivered and not yet received."""
        return len(self._pending)

    def deliver(self, wake: Wake) -> None:
        """Queue ``wake`` for the receiver; a no-op once closed. Thread-safe."""
        with self._ready:
            if self._closed:
                return
            coalesce = self._coalesce or len(self._pending) >= self._max_pending
            if coalesce and wake in self._pending:
                return
            self._pending.append(wake)
            self._ready.notify()
            self._wake_async_waiters()

    def close(self) -> None:
        """Close the receiver: pending wakes are dropped, waiting ``recv`` calls return None."""
        with self._ready:
            if self._closed:
                return
            self._closed = True
            self._pending.clear()
            self._ready.notify_all()
            self._wake_async_waiters()
        if self._on_close is not None:
            self._on_close(self)

    def abandon(self) -> None:
        """Closed in a forked child, whose feeder is gone: no ``on_close``, and a
        fresh lock (the parent's feeding thread may have held this one)."""
        self._ready = threading.Condition(threading.Lock())
        self._closed = True
        self._pending.clear()
        self._async_waiters = []

    def recv(self, timeout: float | None = None) -> Wake | None:
        """The next wake, or None on timeout (seconds; None waits forever) or once closed."""
        timeout = check_timeout(timeout)
        with self._ready:
            if not self._ready.wait_for(self._has_news, timeout):
                return None
            return self._pending.popleft() if self._pending else None

    async def recv_async(self, timeout: float | None = None) -> Wake | None:
        """The next wake, awaited; None on timeout (seconds; None waits forever) or once closed."""
        timeout = check_timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._ready:
                if self._pending:
                    return self._pending.popleft()
                if self._closed:
                    return None
                waiter: asyncio.Future[None] = loop.create_future()
                self._async_waiters.append((loop, waiter))
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                await asyncio.wait_for(waiter, remaining)
            except asyncio.TimeoutError:
                return None
            finally:
                with self._ready:
                    if (loop, waiter) in self._async_waiters:
                        self._async_waiters.remove((loop, waiter))

    def _has_news(self) -> bool:
        return bool(self._pending) or self._closed

    def _wake_async_waiters(self) -> None:
        # A feeder on the waiters' own loop (an async LISTEN task) resolves them
        # at once: no trip through the loop's self-pipe, no extra turn of the loop.
        here = asyncio._get_running_loop()
        for loop, waiter in self._async_waiters:
            if loop is here:
                resolve_future(waiter)
                continue
            # A closed event loop raises RuntimeError: nobody awaits there any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(resolve_future, waiter)
        self._async_waiters.clear()


def resolve_future(waiter: asyncio.Future[None]) -> None:
    """Complete ``waiter`` unless it is already done (cancelled, say); run on its loop."""
    if not waiter.done():
        waiter.set_result(None)
