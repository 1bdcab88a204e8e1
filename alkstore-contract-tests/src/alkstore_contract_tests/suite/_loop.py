"""An asyncio event loop on a thread of its own, for code that is not async to call into."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["LoopThread", "mirror_stop"]

T = TypeVar("T")

_STOP_S = 10.0
"""How long stopping a loop waits for what still runs on it."""

_MIRROR_POLL_S = 0.01
"""How often a threading stop signal is looked at on the loop's side."""


class LoopThread:
    """An event loop running forever on a daemon thread, until :meth:`stop`.

    :meth:`run` awaits something on the loop and blocks the calling thread
    for its outcome: the value it returned, or the very exception it raised
    (same object: same type, same message). Called from the loop's own
    thread it would wait for itself, so it refuses.
    """

    def __init__(self, name: str = "alkstore-suite-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_forever, name=name, daemon=True)
        self._thread.start()

    def _run_forever(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def on_loop(self) -> bool:
        """True on the loop's own thread."""
        return threading.current_thread() is self._thread

    def submit(self, make: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Start awaiting ``make()`` on the loop (``make`` runs there too), in a copy of
        the caller's context variables, as an application's own task would see them
        (a trace context, say)."""
        caller = contextvars.copy_context()
        return asyncio.run_coroutine_threadsafe(_awaited_in(caller, make), self.loop)

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` on the loop, and return what it returned or raise what it raised."""
        self._refuse_on_loop()
        return self.submit(make).result()

    def call(self, function: Callable[[], T]) -> T:
        """Call the plain ``function`` on the loop's thread and return its result."""
        self._refuse_on_loop()
        return asyncio.run_coroutine_threadsafe(_called(function), self.loop).result()

    def settle(self, function: Callable[[], object]) -> None:
        """Call ``function`` on the loop and await what it returns if that is awaitable
        (a driver connection's ``commit`` is a coroutine on an async driver, not on others)."""
        self._refuse_on_loop()
        asyncio.run_coroutine_threadsafe(_settled(function), self.loop).result()

    def _refuse_on_loop(self) -> None:
        if self.on_loop:
            raise RuntimeError(
                "a blocking call made on the suite's event loop would wait for itself: "
                "call it from another thread (asyncio.to_thread) or await the async API"
            )

    def stop(self) -> None:
        """Cancel what still runs on the loop, stop it and close it; idempotent."""
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(concurrent.futures.TimeoutError):
                asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self.loop).result(_STOP_S)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(_STOP_S)
        if self._thread.is_alive():
            return  # wedged: leave the daemon thread and its loop to the process's end
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(
                asyncio.wait_for(self.loop.shutdown_default_executor(), _STOP_S)
            )
        self.loop.close()


async def _awaited_in(context: contextvars.Context, make: Callable[[], Awaitable[T]]) -> T:
    """Await ``make()`` in a task of its own that runs in ``context``."""
    task: asyncio.Future[T] = context.run(asyncio.ensure_future, _awaited(make))
    return await task


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


async def _called(function: Callable[[], T]) -> T:
    return function()


async def _settled(function: Callable[[], object]) -> None:
    result = function()
    if inspect.isawaitable(result):
        await result


async def _cancel_the_rest() -> None:
    current = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not current]
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=_STOP_S)


async def mirror_stop(stop: Any, run: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Await ``run(halt)`` with an asyncio Event set once the thread-side ``stop``
    (anything with ``is_set()``, such as a ``threading.Event``) is set."""
    halt = asyncio.Event()

    async def mirror() -> None:
        while not stop.is_set():
            await asyncio.sleep(_MIRROR_POLL_S)
        halt.set()

    mirroring = asyncio.ensure_future(mirror())
    try:
        return await run(halt)
    finally:
        mirroring.cancel()
