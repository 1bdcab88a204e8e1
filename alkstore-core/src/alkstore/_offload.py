"""Running blocking engine calls from asyncio code on a store's own small thread pool.

An engine that implements only the sync hooks still serves ``open_async``:
each async hook runs its sync twin here. The pool is bounded, so a thousand
tasks enqueueing at once queue up for a few threads instead of starting a
thousand, and it belongs to one store, so closing the store frees it.

Cancelling an await does not stop a call already running on a thread (a
statement cannot be taken back half-way). What the call produced is then
handed to an ``abandon`` callback, so a transaction begun for a cancelled
caller is rolled back instead of holding its connection forever. A call
given to a transaction's :class:`Lane` always runs, even when its await is
cancelled before the call started: a commit or rollback that never ran
would leave the transaction open behind a handle that says it ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from alkstore._despite_cancel import retrieve
from alkstore._errors import Closed

__all__ = ["OFFLOAD_THREADS", "Lane", "Offloader", "WouldWait"]

T = TypeVar("T")

log = logging.getLogger("alkstore")

OFFLOAD_THREADS = 8
"""Threads a store runs sync engine calls on, at most."""


class WouldWait(Exception):
    """Raised by ``Store._without_waiting``: the call would have to wait (for a
    lock, a disk flush or the network), and nothing of it was done."""


class Offloader:
    """A bounded pool of threads for one store's blocking calls."""

    def __init__(self, label: str, max_threads: int = OFFLOAD_THREADS) -> None:
        self._label = label
        self._max_threads = max_threads
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        state = "idle" if self._executor is None else "started"
        return f"<Offloader {self._label!r} up to {self._max_threads} threads, {state}>"

    def submit(self, call: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """Start ``call(*args)`` on a pool thread (threads start on first use)."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self._max_threads, thread_name_prefix=f"alkstore-{self._label}"
            )
        try:
            return self._executor.submit(call, *args)
        except RuntimeError:  # shut down: the store closed while this call began
            raise Closed(f"the store behind {self!r} is closed") from None

    async def run(
        self,
        call: Callable[..., T],
        *args: Any,
        abandon: Callable[[T], None] | None = None,
    ) -> T:
        """Await ``call(*args)`` run on a pool thread.

        If the await is cancelled while the call runs, the call still
        finishes; with ``abandon``, its result is passed to ``abandon`` then
        (on the pool thread), so nothing it opened stays open.
        """
        return await _await_call(self.submit(call, *args), abandon)

    def close(self) -> None:
        """Stop taking calls. Calls already queued still run (against a closed
        store, they fail as calls on it do), so no awaiting task is left hanging."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)


def _hand_over(abandon: Callable[[T], None], future: concurrent.futures.Future[T]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    with contextlib.suppress(Exception):
        abandon(future.result())


class Lane:
    """One thread for one transaction's calls, run in order.

    A transaction holds its connection (and on SQLite the write lock) between
    calls, so its next call must never wait behind the store's pool, whose
    threads may all be waiting for that very lock. Calls run first in, first
    out: a rollback queued after a cancelled statement runs after it, never
    beside it on the connection.
    """

    def __init__(self, label: str) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"alkstore-{label}"
        )

    async def run(
        self, call: Callable[..., T], *args: Any, abandon: Callable[[T], None] | None = None
    ) -> T:
        """Await ``call(*args)`` after every earlier call of this lane.

        The call runs even if this await is cancelled first; ``abandon`` then
        gets its result, on this lane's thread, after it.
        """
        try:
            future = self._executor.submit(call, *args)
        except RuntimeError:  # the transaction ended while this call began
            raise Closed("this transaction has ended") from None
        try:
            return await _outcome_of(future)
        except asyncio.CancelledError:
            if abandon is not None:
                self._hand_over_later(abandon, future)
            raise

    def _hand_over_later(
        self, abandon: Callable[[T], None], future: concurrent.futures.Future[T]
    ) -> None:
        try:  # queued behind the call: on this lane's thread, after it
            self._executor.submit(_hand_over, abandon, future)
        except RuntimeError:  # the lane closed meanwhile: wherever the call ends
            future.add_done_callback(functools.partial(_hand_over, abandon))

    def close(self) -> None:
        """Let the calls already queued finish, then end the thread."""
        self._executor.shutdown(wait=False)


async def _outcome_of(future: concurrent.futures.Future[T]) -> T:
    """Await ``future`` without cancelling it when the await is cancelled."""
    outcome = asyncio.wrap_future(future)
    outcome.add_done_callback(retrieve)  # an outcome nobody awaits any more logs nothing
    return await asyncio.shield(outcome)


async def _await_call(
    future: concurrent.futures.Future[T], abandon: Callable[[T], None] | None
) -> T:
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if abandon is not None and not future.cancelled():
            future.add_done_callback(functools.partial(_hand_over, abandon))
        raise
