"""Plain handlers of an asyncio worker, on a few daemon threads of its own.

A plain function handler cannot run on the event loop, and the loop's default
executor is the wrong place for it: its threads are joined when the loop and
the interpreter shut down, so a handler still stuck after the grace period
(released, its result no longer wanted) would keep the process alive. These
threads are daemons, as ``Worker.run``'s handler threads are, at most one per
handler running at once, started on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["HandlerThreads", "complete_from_thread"]

T = TypeVar("T")

_Work = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class HandlerThreads:
    """Up to ``size`` daemon threads running calls for one event loop's tasks."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._unclaimed = 0
        self._closed = False

    async def run(self, call: Callable[[], T]) -> T:
        """Await ``call()`` run on one of the threads.

        Cancelling the await does not stop the call (nothing can): it runs to
        its end on its daemon thread, and its outcome is dropped.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker's handler threads are closed")
            self._unclaimed += 1
            if self._unclaimed > self._idle and self._threads < self._size:
                self._threads += 1
                threading.Thread(
                    target=self._serve, name=f"{self._name}-{self._threads - 1}", daemon=True
                ).start()
        self._work.put((call, loop, future))
        return await future

    def close(self) -> None:
        """Let every thread end once its current call (if any) returns."""
        with self._lock:
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._work.put(None)

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            work = self._work.get()
            with self._lock:
                self._idle -= 1
                if work is not None:
                    self._unclaimed -= 1
            if work is None:
                return
            call, loop, future = work
            try:
                result = call()
            except BaseException as exc:  # the handler's SystemExit too: its task decides
                complete_from_thread(loop, future, None, exc)
            else:
                complete_from_thread(loop, future, result, None)


def complete_from_thread(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    """Hand a call's outcome, from another thread, to its future on its loop,
    unless the await was given up (the future is done: cancelled)."""

    def settle() -> None:
        if future.done():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(settle)
